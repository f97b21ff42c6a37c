// JobManager: the training jobs of a server — submission, a fair schedule
// over the device pool, lifecycle (pause, resume, cancel), progress events,
// and predictions with a job's current variables.
//
// States: QUEUED -> RUNNING -> SUCCEEDED | FAILED | CANCELLED, and PAUSED
// (from QUEUED or RUNNING; resume returns it to the queue). At most
// `max_running` jobs hold their sessions and data at once; the others wait
// QUEUED in submission order. Running jobs share the workers step by step in
// round-robin order, so each makes progress at the same rate whatever its
// step cost. A job whose step fails is FAILED with the error; the server and
// the other jobs go on.
//
// Events: every state change, every evaluation, and step summaries at most
// `max_step_events_per_second` per job, delivered to subscribers (SSE, gRPC
// Watch). A subscriber first receives the job's current state.
//
// Thread safety: every public method is thread-safe. Destruction stops the
// workers after their current step.
#ifndef FLOWSTATE_SERVER_JOB_MANAGER_H_
#define FLOWSTATE_SERVER_JOB_MANAGER_H_

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "devices/device_pool.h"
#include "graph/status.h"
#include "graph/tensor.h"
#include "server/job_spec.h"

namespace flowstate {

class TrainingJob;
class ThreadPool;

enum class JobState { kQueued, kRunning, kPaused, kSucceeded, kFailed, kCancelled };
std::string_view JobStateName(JobState s);  // "QUEUED", ...
bool IsTerminal(JobState s);

// A snapshot of one job, as GET /v1/jobs/{id} reports it.
struct JobInfo {
  std::string id;
  std::string name;
  JobState state = JobState::kQueued;
  int64_t epoch = 0;         // 0-based epoch of the last step
  int64_t epochs = 0;
  int64_t step = 0;          // steps done
  int64_t total_steps = 0;   // 0 until the job has started
  double loss = 0;           // of the last step
  double examples_per_sec = 0;
  std::map<std::string, double> metrics;  // the last evaluation
  std::string error;         // FAILED: why
  // Seconds since the epoch; 0 when not yet.
  double created = 0, started = 0, finished = 0;
};

struct JobEvent {
  enum class Kind { kState, kStep, kEval };
  Kind kind = Kind::kState;
  JobInfo info;  // the job right after the event
  double time = 0;
};
std::string_view JobEventKindName(JobEvent::Kind k);  // "state", "step", "eval"

// What the metrics layer learns from the manager. All calls come from the
// manager's threads; implementations must be thread-safe.
class JobObserver {
 public:
  virtual ~JobObserver() = default;
  virtual void OnStep(const JobInfo& job, double step_seconds, int64_t examples) {}
  virtual void OnStateChange(const JobInfo& job, JobState from) {}
};

struct JobManagerOptions {
  DevicePool* devices = nullptr;   // required
  std::string data_root = "/usr/share/datasets";
  int max_running = 2;             // jobs holding sessions at once
  int workers = 1;                 // threads that run steps
  int inter_op_threads = 1;        // per job session
  double max_step_events_per_second = 10;
  JobObserver* observer = nullptr;  // optional, not owned
};

// A subscription to one job's events. Next() blocks until an event arrives,
// the job reaches a terminal state and all its events were read (nullopt),
// the timeout passes (nullopt, timed_out() true), or Close().
class JobEventStream {
 public:
  virtual ~JobEventStream() = default;
  virtual std::optional<JobEvent> Next(std::chrono::milliseconds timeout) = 0;
  virtual bool timed_out() const = 0;
  virtual void Close() = 0;
};

class JobManager {
 public:
  explicit JobManager(const JobManagerOptions& options);
  ~JobManager();
  JobManager(const JobManager&) = delete;
  JobManager& operator=(const JobManager&) = delete;

  // Parses and validates the job (JSON path errors, INVALID_ARGUMENT), then
  // queues it. Nothing is created when it fails.
  StatusOr<JobInfo> Submit(const std::string& job_json);
  StatusOr<JobInfo> Get(const std::string& id) const;
  std::vector<JobInfo> List() const;  // in submission order
  // NOT_FOUND for an unknown id; FAILED_PRECONDITION when the state does not
  // allow it (cancelling a finished job, resuming one that is not paused).
  Status Cancel(const std::string& id);
  Status Pause(const std::string& id);
  Status Resume(const std::string& id);
  // Runs `fetches` of the job's inference graph with its current variables.
  // FAILED_PRECONDITION while the job has no variables (queued, or failed
  // before starting).
  Status Predict(const std::string& id, const std::vector<std::pair<std::string, Tensor>>& inputs,
                 const std::vector<std::string>& fetches, std::vector<Tensor>* outputs);
  StatusOr<std::unique_ptr<JobEventStream>> Watch(const std::string& id);

  // Jobs waiting for a running slot.
  int queue_depth() const;
  std::map<JobState, int> CountByState() const;
  // Stops the workers after their current step; cancels nothing.
  void Shutdown();

 private:
  struct Job;
  class Stream;
  void WorkerLoop();
  void AdmitLocked();
  void SetStateLocked(Job* job, JobState s, const std::string& error = "");
  void PublishLocked(Job* job, JobEvent::Kind kind);
  JobInfo InfoLocked(const Job& job) const;
  // Runs one unit of work (start, a step, an evaluation) of `job`, without
  // the lock; returns false when the job left the running set.
  void RunSlice(const std::shared_ptr<Job>& job);

  JobManagerOptions options_;
  mutable std::mutex mu_;
  std::condition_variable work_cv_;
  std::map<std::string, std::shared_ptr<Job>> jobs_;  // GUARDED_BY(mu_)
  std::vector<std::string> order_;                    // GUARDED_BY(mu_)
  std::deque<std::string> queued_;                    // GUARDED_BY(mu_): waiting for a slot
  std::deque<std::string> ready_;                     // GUARDED_BY(mu_): running, round-robin
  int running_ = 0;                                   // GUARDED_BY(mu_): jobs holding a slot
  int64_t next_id_ = 1;                               // GUARDED_BY(mu_)
  bool stopping_ = false;                             // GUARDED_BY(mu_)
  std::unique_ptr<ThreadPool> inter_op_pool_;
  std::vector<std::thread> workers_;
};

}  // namespace flowstate

#endif  // FLOWSTATE_SERVER_JOB_MANAGER_H_

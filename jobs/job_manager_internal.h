// PRIVATE to the job manager (job_manager.cc, job_manager_durability.cc):
// the definitions of JobManager's nested types -- a job's whole state, a
// queued checkpoint write, an event stream -- and the small helpers both
// files use. A Job is guarded by JobManager::mu_ except where a field says
// otherwise; a Stream is thread-safe.
#ifndef FLOWSTATE_JOBS_JOB_MANAGER_INTERNAL_H_
#define FLOWSTATE_JOBS_JOB_MANAGER_INTERNAL_H_

#include "jobs/job_manager.h"

#include <chrono>
#include <cstdio>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "checkpoints/store.h"
#include "jobs/job_state.h"
#include "jobs/step_history.h"
#include "jobs/training_loop.h"
#include "jobs/training_job.h"
#include "graph/mutex.h"

namespace flowstate {
namespace job_manager_internal {

inline double Now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

using Json = nlohmann::json;
using checkpoints::Store;

// "job-12" -> 12; 0 for other ids.
inline int64_t IdNumber(const std::string& id, const std::string& prefix) {
  if (id.rfind(prefix, 0) != 0) return 0;
  try {
    return std::stoll(id.substr(prefix.size()));
  } catch (...) {
    return 0;
  }
}

inline std::string HumanBytes(int64_t b) {
  char buf[32];
  if (b >= (int64_t{1} << 20)) {
    std::snprintf(buf, sizeof buf, "%.1f MiB", double(b) / double(1 << 20));
  } else if (b >= 1024) {
    std::snprintf(buf, sizeof buf, "%.1f KiB", double(b) / 1024.0);
  } else {
    std::snprintf(buf, sizeof buf, "%lld bytes", (long long)b);
  }
  return buf;
}

inline std::vector<std::pair<std::string, Tensor>> ToNamed(std::vector<checkpoints::NamedTensor> t) {
  std::vector<std::pair<std::string, Tensor>> out;
  out.reserve(t.size());
  for (auto& n : t) out.emplace_back(std::move(n.name), std::move(n.value));
  return out;
}

inline constexpr const char* kImportCounterKey = "server.next_import_id";
// The next job number, kept when a job is deleted so that a restart does not
// hand a deleted job's id out again.
inline constexpr const char* kJobCounterKey = "server.next_job_id";

inline Status NoStore() {
  return Unimplemented("checkpoints need a store: this server runs without a data directory");
}

}  // namespace job_manager_internal

struct JobManager::Job {
  // The job as GET /v1/jobs/{id} shows it, but for what InfoLocked derives
  // (examples_per_sec, eta_seconds): one copy of each field, stored in the
  // record as it is. info.state changes only by JobManager::TransitionLocked,
  // along the table of jobs/job_state.h (and is set from a stored record by
  // Recover).
  JobInfo info;
  JobSpec spec;
  std::string spec_json;  // as submitted
  // Shared with Predict calls in flight, so that releasing a finished job
  // (ReleaseLocked) never frees a runner under them.
  std::shared_ptr<TrainingJob> runner;
  // A finished job's model values when no checkpoint holds its last step
  // (ReleaseLocked); Predict starts the runner with them.
  std::vector<std::pair<std::string, Tensor>> final_values;
  bool started = false;        // runner->Start() succeeded
  bool holds_slot = false;     // counted in the holding of each of `devices`
  // Its devices, as indices into JobManager::devices_ (filled when it is
  // first considered for admission, from TrainingJob::DeviceNames()).
  std::vector<int> devices;
  bool busy = false;           // a worker is running a slice of it
  // Its replicas on other tasks run a chunk of steps on their own that it
  // has not stepped to the end (TrainingJob::mid_chunk): it is stepped on
  // at once, and a pause, cancel or rebuild waits for the chunk's end.
  bool mid_chunk = false;
  // Mid-chunk with tables shared among its replicas
  // (TrainingJob::snapshot_waits_for_chunk): its checkpoints, by policy or
  // on demand, wait for the chunk's end.
  bool snapshot_waits = false;
  TrainingLoop loop;           // its next slice: a step, an evaluation, or finish
  // A pause or cancel asked while its step runs (busy) or mid-chunk,
  // applied by the worker when the step (chunk) ends; reset when the job
  // leaves RUNNING. Stored in the job's record as soon as it is asked
  // (JobRecord::pending_action), so that Recover applies it when the
  // server died before the step ended.
  std::optional<JobAction> requested;
  // The totals the training rate is computed from, over every run.
  double train_seconds = 0;
  int64_t examples = 0;
  std::chrono::steady_clock::time_point last_step_event{};
  std::vector<std::weak_ptr<Stream>> subscribers;
  // Durability.
  bool restore_on_start = false;  // recovered: continue from its latest checkpoint
  bool was_running = false;       // recovered from RUNNING or PAUSED: a resume
  bool init_values_set = false;   // init_from values handed to the runner
  bool inference_ready = false;   // started without data to serve predictions
  Mutex start_mu;            // serializes that lazy start
  int64_t snapshot_step = -1;  // of the newest snapshot taken (written or not)
  std::chrono::steady_clock::time_point snapshot_at{};
  int pending_writes = 0;      // snapshots queued or being written
  uint64_t last_write_done = 0;
  uint64_t checkpoint_ticket = 0, served_ticket = 0;  // on-demand requests
  int64_t served_step = -1;
  std::chrono::steady_clock::time_point last_persist{};
  std::deque<JobEvent> history;  // notable events, oldest first
  // Loss per step and evaluations (job_manager_history.cc), the version of
  // it last written to the store, and the steps traced so far with their
  // Chrome trace JSON (the text only without a store; with one it is read
  // back from there).
  StepHistory curves;
  uint64_t curves_stored = 0;
  std::map<int64_t, std::string> traces;
  // Replicas on the tasks of a cluster (job_manager_replicas.cc).
  struct Membership {
    std::vector<int> replicas;  // indices into spec.devices of the runner's replicas
    int number = 0;             // memberships built; the prefix is "<id>/m<number - 1>"
    std::string note;           // for the next "resume" event: who was lost or rejoined
    std::vector<std::string> rejoined;  // tasks that answer again (MaybeRejoinLocked)
    std::optional<std::chrono::steady_clock::time_point> wait_until;  // fewer than min_replicas
    int alive_while_waiting = 0;  // replicas alive at the last look, while wait_until is set
    int rebuilds_without_step = 0;
    std::string last_error;
  } membership;
};

struct JobManager::WriteRequest {
  std::shared_ptr<Job> job;
  uint64_t seq = 0;
  int64_t step = 0;
  std::string reason;
  checkpoints::Snapshot snapshot;
};

class JobManager::Stream final : public JobEventStream {
 public:
  std::optional<JobEvent> Next(std::chrono::milliseconds timeout) override {
    MutexLock l(mu_);
    timed_out_ = false;
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (events_.empty() && !closed_ && !ended_ && cv_.WaitUntil(mu_, deadline)) {
    }
    const bool ready = !events_.empty() || closed_ || ended_;
    if (!events_.empty()) {
      JobEvent e = std::move(events_.front());
      events_.pop_front();
      return e;
    }
    timed_out_ = !ready;
    return std::nullopt;
  }
  bool timed_out() const override {
    MutexLock l(mu_);
    return timed_out_;
  }
  void Close() override {
    std::function<void()> wake;
    {
      MutexLock l(mu_);
      closed_ = true;
      cv_.NotifyAll();
      wake = waker_;
    }
    if (wake) wake();
  }
  void SetWaker(std::function<void()> wake) override {
    MutexLock l(mu_);
    waker_ = std::move(wake);
  }
  void Push(JobEvent e, bool terminal) {
    std::function<void()> wake;
    {
      MutexLock l(mu_);
      if (closed_) return;
      events_.push_back(std::move(e));
      if (terminal) ended_ = true;
      cv_.NotifyAll();
      wake = waker_;
    }
    if (wake) wake();  // without the stream's lock: it may read at once
  }
  bool closed() const {
    MutexLock l(mu_);
    return closed_;
  }

 private:
  mutable Mutex mu_;
  CondVar cv_;
  std::deque<JobEvent> events_;
  bool closed_ = false, ended_ = false, timed_out_ = false;
  std::function<void()> waker_ ABSL_GUARDED_BY(mu_);
};

}  // namespace flowstate

#endif  // FLOWSTATE_JOBS_JOB_MANAGER_INTERNAL_H_

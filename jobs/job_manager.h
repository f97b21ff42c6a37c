// JobManager: the training jobs of a server — submission, a fair schedule
// over the device pool, lifecycle (pause, resume, cancel), progress events,
// and predictions with a job's current variables.
//
// States: QUEUED -> RUNNING -> SUCCEEDED | FAILED | CANCELLED, and PAUSED
// (from QUEUED or RUNNING; resume returns it to the queue); the allowed
// transitions are the table of jobs/job_state.h.
//
// Admission is per device: a job runs on the devices it asked for
// (TrainingJob::DeviceNames(); the pool's default device when it named
// none), and at most `max_running` jobs hold their sessions and data on
// each device at once. The others wait QUEUED in submission order per
// device: a job that waits keeps later jobs off its devices, while a job on
// another device (CPU:1 behind a full CPU:0) is admitted at once. Running
// jobs share the workers step by step in round-robin order, so each makes
// progress at the same rate whatever its step cost; a free worker prefers
// the next job whose devices have no step in flight, so that jobs on
// different devices step at the same time when there are workers for them.
// With one device (the default) this is plain FIFO admission of
// `max_running` jobs and plain round robin. A job whose step fails is
// FAILED with the error; the server and the other jobs go on.
//
// Events: every state change, every evaluation, and step summaries at most
// `max_step_events_per_second` per job, delivered to subscribers (SSE, gRPC
// Watch). A subscriber first receives the job's current state.
//
// Durability (with a Store, JobManagerOptions::store): every job's
// submitted document (kGraphs) and its record — state, progress, metrics,
// error, times, checkpoint summary, notable events — (kJobs) are kept in the
// store, keyed by job id. Recover() reloads them when the server starts:
// jobs that were RUNNING queue first and resume from their latest
// checkpoint (a "resume" event names the step), QUEUED ones queue again,
// PAUSED ones stay paused (and resume from their checkpoint), finished ones
// stay readable and predict with the variables of their final checkpoint.
// A resumed job goes on with what was left after its checkpoint's step
// (TrainingLoop::Resume): when its training was complete (the server died
// after the last step's checkpoint, during the final evaluation, or before
// SUCCEEDED was stored) it runs no further step: it evaluates when that
// evaluation is not recorded yet, then succeeds. A pause or cancel asked
// during a step is stored with the job at once (JobRecord::pending_action)
// and applied by Recover when the server died before the step ended.
// Every event of a job is stored with the job's values of its own moment
// (state, step, loss, rate, metrics, error), so that the replayed history
// (Watch(id, true)) reads as the live stream did.
//
// Checkpoints: by the job's policy (checkpoint.every_steps / every_seconds),
// on demand (Checkpoint()), when a job is paused or cancelled, after its
// last step (before the final evaluation, so that a crash during it loses
// no training), and at Shutdown(). A worker takes the snapshot between two
// steps (TrainingJob::Snapshot copies no tensor data); one background
// writer thread writes it (Store::WriteCheckpoint, one synced batch) while
// training goes on, then keeps the `keep` newest. A policy checkpoint that
// falls due while the job's previous one is still being written waits for
// the next step boundary after it. A failed write is a "checkpoint" event
// with the error, counts in JobInfo::checkpoint_failures and the observer's
// OnCheckpoint; the previous checkpoint stays the job's latest.
//
// Memory: a job holds its sessions, variables and datasets only while it
// can still run. When it reaches a terminal state they are released; the
// job keeps its record (state, progress, metrics, error, checkpoints,
// history). Predict on a finished job starts its inference graph again,
// without data, with the variables of its final checkpoint when one holds
// its last step, else with the model variables' values it kept at the end
// (jobs without a store, failed jobs, a final checkpoint that could not be
// taken): at most the model's size per finished job.
//
// Deletion and retention: Delete() removes a finished job with its record,
// document, checkpoints and metrics series. With retention_max_finished
// and/or retention_seconds set, the oldest finished jobs beyond the count,
// or finished longer ago than the age, are deleted the same way (when a job
// finishes, after a restart, and on EnforceRetention()).
//
// NaN/Inf: a step whose loss or gradients are not finite applies no update
// (the training graph's numerics checks guard the optimizer). With
// on_nan "fail" (the default) the job is FAILED naming the step; with
// "skip_step" the step is counted in JobInfo::skipped_steps and training
// goes on. Either way a "nan" event names the step.
//
// Placement. In a cluster (JobManagerOptions::remote knows its tasks), a
// job with replicas and no "devices" is placed on the tasks at Submit and
// at every reload after a restart (the same placement, from the cluster
// spec): replicas_per_task replicas a task (default ceil(replicas /
// tasks): one a task when there are enough), in the spec's task order
// starting with this task, so replica 0 is here; each replica's device is
// its task's prefix ("/job:worker/task:1"), whose first device runs it.
// More replicas than tasks x replicas_per_task is INVALID_ARGUMENT naming
// the tasks. A single process keeps every replica here, as before.
// JobInfo::placement says where each replica runs and whether it is in
// the current membership.
//
// Replicas on the tasks of a cluster (a job whose "devices" name other
// tasks, placed so or by hand; job_manager_replicas.cc). They run chunks of
// steps on their own (TrainingJob::mid_chunk): until a chunk's last step
// the job is stepped on first, and a pause, cancel or rejoin asked
// meanwhile lands at the chunk's end (about 0.2 s later). Each (re)start of such a job first asks
// every task for a heartbeat and builds the job with the replicas whose
// task answers (replica 0 is on this task), as a membership with its own
// collective key prefix ("<job id>/m<k>"; the previous one is dropped from
// the store). When a step or start fails because a replica's task is lost
// (UNAVAILABLE, DEADLINE_EXCEEDED, ABORTED or CANCELLED from a remote
// worker or the collective, or a task the heartbeats call UNREACHABLE),
// every replica's step has been aborted; the job stays RUNNING, a "state"
// event says so, and it resumes from its last checkpoint (step 0 without
// one) with the replicas alive, when there are at least min_replicas of
// them: a "resume" event names the step, the tasks and the lost ones. The
// job keeps its global batch (replicas x batch_size; the survivors each
// train on more of it, TrainingJobOptions::batches_per_step), so its steps,
// its data order and its updates are those of the uninterrupted run, up to
// float rounding.
// Fewer: it waits (a "state" event says for whom), polling the heartbeats,
// at most replica_wait_seconds, then FAILS naming the lost tasks. A lost
// task that answers again rejoins at the job's next checkpoint (the job is
// rebuilt with it and resumes from that checkpoint). More than 5 rebuilds
// in a row without a step fail the job with the last error.
//
// Thread safety: every public method is thread-safe. Destruction stops the
// workers after their current step.
#ifndef FLOWSTATE_JOBS_JOB_MANAGER_H_
#define FLOWSTATE_JOBS_JOB_MANAGER_H_

#include <chrono>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "devices/device_pool.h"
#include "graph/status.h"
#include "graph/tensor.h"
#include "api/job_spec.h"
#include "api/views.h"
#include "jobs/fault_points.h"
#include "jobs/job_state.h"
#include "jobs/onnx_model.h"
#include "graph/mutex.h"

namespace flowstate {

class ClusterView;

class TrainingJob;
class ThreadPool;
struct TrainingJobOptions;
struct JobSnapshot;
struct ReplicaStepStats;
struct StepResult;
namespace checkpoints {
class Store;
enum class ExportFormat;  // checkpoints/npz.h
}



// What the metrics layer learns from the manager. All calls come from the
// manager's threads; implementations must be thread-safe.
class JobObserver {
 public:
  virtual ~JobObserver() = default;
  virtual void OnStep(const JobInfo& job, double step_seconds, int64_t examples) {}
  virtual void OnStateChange(const JobInfo& job, JobState from) {}
  // A checkpoint write finished: `ok` false when it failed.
  virtual void OnCheckpoint(const JobInfo& job, double seconds, int64_t bytes, bool ok) {}
  // A step's loss or gradients were NaN/Inf; `skipped`: the job goes on
  // without that step's update (else it fails).
  virtual void OnNan(const JobInfo& job, bool skipped) {}
  // A step of a job with replicas: each replica's part, by index (after
  // OnStep of the same step).
  virtual void OnReplicaStep(const JobInfo& job, const std::vector<ReplicaStepStats>& replicas) {}
  // The job resumed from a checkpoint (or from step 0) after a restart.
  virtual void OnRestart(const JobInfo& job) {}
  // The job was deleted (Delete() or retention): drop what is kept of it.
  virtual void OnDelete(const std::string& job_id) {}
};


// What Checkpoint() did: written now (the job was idle) or snapshotted at a
// step boundary and handed to the writer (the job is running).
struct CheckpointRequestResult {
  int64_t step = 0;
  bool written = false;
};

struct JobManagerOptions {
  DevicePool* devices = nullptr;   // required
  std::string data_root = "/usr/share/datasets";
  // Uploaded ONNX models by id, for jobs given as "model": {"onnx": id}
  // (empty: only files beneath data_root).
  ModelReader read_model;
  int max_running = 2;             // jobs holding sessions at once, per device
  int workers = 1;                 // threads that run steps
  int inter_op_threads = 1;        // per job session
  double max_step_events_per_second = 10;
  JobObserver* observer = nullptr;  // optional, not owned
  // Where jobs and checkpoints live; null: in memory only (nothing survives
  // the process, checkpoints are refused). Not owned; must outlive the
  // manager.
  checkpoints::Store* store = nullptr;
  // Notable events (not step summaries) kept per job and replayed to
  // Watch(id, true).
  int max_history_events = 64;
  // TrainingJobOptions::max_shape_bytes of every job (0: no limit).
  int64_t max_shape_bytes = 0;
  // Retention of finished jobs: keep at most this many (the most recently
  // finished; 0: no limit), and none finished more than this many seconds
  // ago (0: forever). The others are deleted as by Delete().
  int retention_max_finished = 100;
  double retention_seconds = 0;
  // In a cluster: the other tasks once the cluster started (null before, or
  // outside a cluster), and this task's collective store ("host:port" the
  // others reach): a job's replicas may then run on other tasks
  // (TrainingJobOptions::remote). Empty functions: this process only.
  std::function<ClusterView*()> remote;
  std::function<std::string()> collective_store;
  // Forgets a membership's keys in that store once the job has moved on
  // to a new membership (CollectiveStoreService::DropPrefix); may be empty.
  std::function<void(const std::string& prefix)> drop_collective_prefix;
  // Test hook (fault injection; empty in production): called with the
  // name of each fault point a job reaches (jobs/fault_points.h) and the
  // job's step, under the manager's lock. Crash tests stop the process
  // there to kill it at that exact point (`flowstate serve` installs one
  // from FLOWSTATE_TEST_STOP_AT in builds with FLOWSTATE_FAULT_POINTS).
  std::function<void(std::string_view point, int64_t step)> fault_point;
  // Test hook (fault injection; unset in production): a straggler replica
  // in every job this manager runs (TrainingJobOptions::test_straggler).
  fault_points::Straggler test_straggler;
};

// A subscription to one job's events. Next() blocks until an event arrives,
// the job reaches a terminal state and all its events were read (nullopt),
// the timeout passes (nullopt, timed_out() true), or Close().
//
// A consumer that must not hold a thread per stream (the frontends' event
// streams) sets a waker: it reads with Next(0) until timed_out(), then waits
// for the waker, which is called after each new event, at the end and on
// Close() -- from the publishing thread, under the JobManager's lock, so it
// must only schedule work (never call back into the stream or the manager).
class JobEventStream {
 public:
  virtual ~JobEventStream() = default;
  virtual std::optional<JobEvent> Next(std::chrono::milliseconds timeout) = 0;
  virtual bool timed_out() const = 0;
  virtual void Close() = 0;
  // Replaces the previous waker; an empty function removes it.
  virtual void SetWaker(std::function<void()> wake) = 0;
};

// Lowers the calling thread's scheduling priority (nice +10 on Linux), so
// that background checkpoint writes yield the CPU to training steps. Best
// effort: does nothing where it is not supported.
void LowerThisThreadsPriority();

class JobManager {
 public:
  explicit JobManager(const JobManagerOptions& options);
  ~JobManager();
  JobManager(const JobManager&) = delete;
  JobManager& operator=(const JobManager&) = delete;

  // Parses and validates the job (JSON path errors, INVALID_ARGUMENT), then
  // queues it. Nothing is created when it fails.
  StatusOr<JobInfo> Submit(const std::string& job_json);
  // The first job (by id) whose "model" names uploaded model `model_id`;
  // "" when none does.
  std::string JobNamingModel(const std::string& model_id) const;
  StatusOr<JobInfo> Get(const std::string& id) const;
  std::vector<JobInfo> List() const;  // in submission order
  // The RUNNING jobs on each device (full device names), by job id in
  // submission order: a job runs on the devices it asked for ("devices",
  // each resolved to the first matching device) or the default device.
  std::map<std::string, std::vector<std::string>> RunningJobsByDevice() const;
  // NOT_FOUND for an unknown id; FAILED_PRECONDITION when the state does not
  // allow it (cancelling a finished job, resuming one that is not paused).
  Status Cancel(const std::string& id);
  Status Pause(const std::string& id);
  Status Resume(const std::string& id);
  // A job of an ONNX model as ONNX with its current variables
  // (TrainingJob::ExportOnnx); FAILED_PRECONDITION as Predict, or for a job
  // given as "graph".
  StatusOr<std::string> ExportOnnx(const std::string& id);
  // Runs `fetches` of the job's inference graph with its current variables.
  // FAILED_PRECONDITION while the job has no variables (queued, or failed
  // before starting).
  // `timeout` bounds the run (DEADLINE_EXCEEDED past it; 0: none).
  Status Predict(const std::string& id, const std::vector<std::pair<std::string, Tensor>>& inputs,
                 const std::vector<std::string>& fetches, std::vector<Tensor>* outputs,
                 std::chrono::milliseconds timeout = std::chrono::milliseconds(0));
  // Whether such a Predict may wait or run unbounded (Session::StepMayWait
  // of the inference graph): true for a job not found, not started, or a
  // signature not run yet.
  bool PredictMayWait(const std::string& id, const std::vector<std::string>& inputs,
                      const std::vector<std::string>& fetches) const;
  // The dtype job `id`'s graph expects for the input `name` (its
  // Placeholder's); nullopt for an unknown job or name.
  std::optional<DataType> InputDtype(const std::string& id, const std::string& name) const;
  // Removes a finished job: its record, document, checkpoints and stored
  // variables, its events and its metrics series. NOT_FOUND for an unknown
  // id; FAILED_PRECONDITION for a job that is not finished (cancel it
  // first); the store's error when it cannot delete (nothing is removed).
  // Waits for the job's checkpoint writes in flight.
  Status Delete(const std::string& id);
  // Deletes the finished jobs the retention options no longer keep;
  // returns how many (the server calls it periodically).
  int EnforceRetention();
  // With `history`, the job's notable past events (state changes,
  // evaluations, checkpoints, resumes; oldest first, at most
  // max_history_events, kept across restarts) come before its current state.
  StatusOr<std::unique_ptr<JobEventStream>> Watch(const std::string& id, bool history = false);

  // --- Durability (FAILED_PRECONDITION without a store).
  // Reloads every job of the store (call once, before Submit). Jobs whose
  // record cannot be used are FAILED with the reason; the error returned is
  // only the store's own (it could not be read).
  Status Recover();
  // Takes a checkpoint now: of an idle job with variables, written before
  // returning; of a running job, snapshotted after its current step (waits
  // for that) and written in the background. FAILED_PRECONDITION for a job
  // without variables yet.
  StatusOr<CheckpointRequestResult> Checkpoint(const std::string& id);
  // The job's checkpoints by step (also for ids of imported checkpoints).
  StatusOr<std::vector<JobCheckpointInfo>> ListCheckpoints(const std::string& id);
  // Writes checkpoint `step` of job `id` to `path` in the portable format
  // (checkpoints/FORMAT.md). NOT_FOUND for an unknown job or step.
  Status ExportCheckpoint(const std::string& id, int64_t step, const std::string& path);
  // The same in `format`: the .fsck file above, or a NumPy .npz archive
  // (checkpoints/npz.h), whose bfloat16 tensors are widened to float32 and
  // listed in `*converted` when it is not null.
  Status ExportCheckpoint(const std::string& id, int64_t step, const std::string& path,
                          checkpoints::ExportFormat format,
                          std::vector<std::string>* converted = nullptr);
  // Stores the snapshot of a portable file under a new id ("import-N"),
  // usable as init_from {"job": id, "step": step}. Returns {id, step}. The
  // file holds a client's upload: malformed bytes are INVALID_ARGUMENT
  // saying what is wrong (checkpoints::ImportSnapshot), naming it "the
  // uploaded checkpoint", never `path`.
  StatusOr<std::pair<std::string, int64_t>> ImportCheckpoint(const std::string& path);

  // --- History and traces (job_manager_history.cc).
  // The job's loss per step and its evaluations, bounded as
  // jobs/step_history.h says. With a store it is kept across restarts: its
  // own record in kMeta ("history/<id>"), written with the job's synced
  // record writes (state changes, evaluations, checkpoint writes,
  // shutdown), not with the once-a-second progress write; a job resumed
  // from its checkpoint at step S forgets the points after S (it runs
  // those steps again). Removed with the job. NOT_FOUND for an unknown id.
  StatusOr<JobHistory> History(const std::string& id) const;
  // The job's document as it was submitted (JSON text: graph, optimizer,
  // input ...), kept with the job and removed with it. NOT_FOUND for an
  // unknown id.
  StatusOr<std::string> Document(const std::string& id) const;
  // The steps of the job's "trace" that were traced so far (ascending).
  StatusOr<std::vector<int64_t>> TracedSteps(const std::string& id) const;
  // A traced step as Chrome trace JSON. Kept in the store
  // ("trace/<id>/<step>" in kMeta, written once when the step ran; in
  // memory without a store), at most kMaxTracedSteps per job, removed with
  // the job. NOT_FOUND naming the step and the traced ones when the step
  // has no trace.
  StatusOr<std::string> Trace(const std::string& id, int64_t step) const;

  // Jobs waiting for a running slot.
  int queue_depth() const;
  std::map<JobState, int> CountByState() const;
  // Stops the workers after their current step; cancels nothing. With a
  // store, checkpoints every started, unfinished job and waits for the
  // writes, so a restart resumes them where they stopped.
  void Shutdown();

 private:
  struct Job;
  class Stream;
  struct WriteRequest;
  void WorkerLoop();
  void WriterLoop();
  // Takes a snapshot of `job` (REQUIRES: nobody steps it) and queues its
  // write; returns the write's sequence number, 0 when no snapshot could be
  // taken (the failure is recorded as a checkpoint event).
  uint64_t SnapshotLocked(Job* job, const std::shared_ptr<Job>& ref, const std::string& reason) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Waits until write `seq` of `job` has finished (ok or not).
  void WaitForWriteLocked(Job* job, uint64_t seq) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void PersistLocked(Job& job, bool sync) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // History and traces (job_manager_history.cc): a step's point and trace,
  // an evaluation's metrics, the history's write (when it changed), its
  // reload by Recover (before the job is shared), and the removal of both
  // from the store (Delete; nothing else is removed when it fails).
  void RecordStepLocked(Job* job, StepResult* r, double seconds) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void RecordEvalLocked(Job* job) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void PersistHistoryLocked(Job& job) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void LoadHistory(Job* job);
  Status DeleteHistoryLocked(const Job& job) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Releases the sessions, data and variables of a job that reached a
  // terminal state (keeping its model values when no checkpoint holds them).
  void ReleaseLocked(Job* job) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Deletes a finished job without writes in flight from the store and
  // from memory.
  Status DeleteLocked(const std::string& id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  int EnforceRetentionLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void RememberLocked(Job* job, const JobEvent& e) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Calls options_.fault_point, when set, with `point` and the job's step.
  void FaultPointLocked(const Job& job, std::string_view point) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool CheckpointDueLocked(const Job& job) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Starts a finished, released job's runner without data, with its final
  // checkpoint or the model values it kept (Predict, Checkpoint). Without
  // the lock; idempotent.
  Status LoadFinished(const std::shared_ptr<Job>& job, const std::shared_ptr<TrainingJob>& runner);
  // The runner of a job that has variables: a running one, or a finished
  // one loaded (LoadFinished) on first use. What Predict and ExportOnnx read.
  StatusOr<std::shared_ptr<TrainingJob>> TrainedRunner(const std::string& id);
  // Starts a job whose runner has not started: restores the latest
  // checkpoint when it has one (or init_from values). Without the lock.
  Status StartRunner(Job* job, bool load_data, int64_t* restored_step);
  // Admits queued jobs into free slots on their devices (the rule above).
  void AdmitLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The index in devices_ of each of the job's devices.
  std::vector<int> DeviceSlotsLocked(const Job& job) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The next job of ready_ for a free worker (REQUIRES: ready_ not empty).
  std::deque<std::string>::iterator PickReadyLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Moves `job` along the transition table (jobs/job_state.h): publishes,
  // persists and observes the change, frees its slot when it leaves
  // RUNNING, releases it when it finishes, then admits queued jobs.
  // REQUIRES: the table allows `action` (JobStateMachine::Check); a refused
  // one changes nothing.
  void TransitionLocked(Job* job, JobAction action, const std::string& error = "") ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void PublishLocked(Job* job, JobEvent::Kind kind, const std::string& message = "") ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  JobInfo InfoLocked(const Job& job) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Runs one unit of work (start, a step, an evaluation) of `job`, without
  // the lock; returns false when the job left the running set.
  void RunSlice(const std::shared_ptr<Job>& job);
  // A job whose training and final evaluation are done: checkpoints its
  // last step when no checkpoint holds it yet (waiting for the write, `l`
  // holds mu_), then SUCCEEDED.
  void SucceedLocked(Job* j, const std::shared_ptr<Job>& job) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The options every runner of this manager's jobs gets.
  TrainingJobOptions RunnerOptions() const;

  // --- Replicas on the tasks of a cluster (job_manager_replicas.cc).
  // Fills spec->devices with each replica's task ("Placement" above) when
  // the job has replicas, no devices, and this manager is in a cluster.
  Status PlaceReplicas(JobSpec* spec) const;
  // The task of replica i of `spec` ("/job:worker/task:2"); "" on this task.
  std::string ReplicaTask(const JobSpec& spec, int i) const;
  // Whether the job's replicas run on other tasks of the cluster.
  bool AcrossTasks(const JobSpec& spec) const;
  // `spec` with only its replica 0 (on this task): what a recovered job
  // runs before the cluster has started, and a finished one predicts with.
  static JobSpec ReplicaZeroSpec(const JobSpec& spec);
  // Before such a job (re)starts, without the lock: builds its runner for
  // the replicas whose task answers a heartbeat now. false: not now (it
  // waits for min_replicas, or it was FAILED).
  bool PrepareMembership(const std::shared_ptr<Job>& job);
  // A start or step of such a job failed with `s`:
  // true when it is rebuilt instead of failing.
  bool OnReplicaFailureLocked(Job* job, const Status& s, const std::string& what) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // After a checkpoint snapshot of such a job: rebuilds it at that
  // checkpoint when a lost replica's task answers again.
  void MaybeRejoinLocked(Job* job) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  JobManagerOptions options_;
  mutable Mutex mu_;
  CondVar work_cv_;
  CondVar checkpoint_cv_;  // a snapshot was taken or a write finished
  CondVar writer_cv_;      // writes_ got an item, or the writer must stop
  std::deque<WriteRequest> writes_ ABSL_GUARDED_BY(mu_);
  bool writer_stopping_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t next_write_ ABSL_GUARDED_BY(mu_) = 1;
  int64_t next_import_ ABSL_GUARDED_BY(mu_) = 1;
  std::thread writer_;
  std::map<std::string, std::shared_ptr<Job>> jobs_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> order_ ABSL_GUARDED_BY(mu_);
  std::deque<std::string> queued_ ABSL_GUARDED_BY(mu_);                    // waiting for a slot
  std::deque<std::string> ready_ ABSL_GUARDED_BY(mu_);                     // running, round-robin
  // Occupancy of each device jobs have asked for (Job::devices indexes it).
  struct DeviceLoad {
    std::string name;
    int holding = 0;        // RUNNING jobs holding a slot on it
    int stepping = 0;       // slices in flight on it
    bool reserved = false;  // during AdmitLocked: an earlier queued job waits for it
  };
  std::vector<DeviceLoad> devices_ ABSL_GUARDED_BY(mu_);
  int slices_in_flight_ ABSL_GUARDED_BY(mu_) = 0;
  bool admitting_ ABSL_GUARDED_BY(mu_) = false;
  int64_t next_id_ ABSL_GUARDED_BY(mu_) = 1;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::unique_ptr<ThreadPool> inter_op_pool_;
  std::vector<std::thread> workers_;
};

}  // namespace flowstate

#endif  // FLOWSTATE_JOBS_JOB_MANAGER_H_

// The views of the service's objects that every frontend reads: a job
// (state, progress, metrics, checkpoint, error), its events and checkpoints,
// an op of the registry, a device of the pool, a task of the cluster. One plain struct each: the job
// manager and the service fill them, and the REST JSON (api/views_json.h),
// the protobuf messages (api/proto_convert.h), the stored job record and the
// CLI all read these, so a field is added in one place.
//
// Value types; no synchronization of their own.
#ifndef FLOWSTATE_API_VIEWS_H_
#define FLOWSTATE_API_VIEWS_H_

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace flowstate {

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
  // The latest checkpoint written (step -1: none yet), failed writes.
  int64_t checkpoint_step = -1;
  double checkpoint_time = 0;
  int64_t checkpoint_bytes = 0;
  int64_t checkpoint_failures = 0;
  std::string checkpoint_error;  // of the last failed write, "" after a success
  // The step this process resumed the job from after a restart; -1: it did not.
  int64_t resumed_from_step = -1;
  // Steps whose loss or gradients were NaN/Inf and whose update was not
  // applied (on_nan "skip_step").
  int64_t skipped_steps = 0;
  // Seconds until the last step at the job's own training rate (its train
  // time per step so far, evaluations and checkpoints not counted); -1 when
  // not known (before its first step, after it finished).
  double eta_seconds = -1;
  // Data-parallel replicas: how many the job asks for, how many train in
  // its current membership (fewer after a lost task, until it rejoins;
  // 0 while it does not run), and how many times it resumed from a
  // checkpoint with a new membership or after a restart.
  int replicas = 1;
  int replicas_alive = 0;
  int64_t restarts = 0;
  // Where each replica runs, by replica index (replicas > 1): its device as
  // placed ("/job:worker/task:1" on a cluster's task; "" for this server's
  // default device) and whether it trains in the current membership.
  struct Replica {
    std::string device;
    bool alive = false;
  };
  std::vector<Replica> placement;
};

struct JobEvent {
  enum class Kind { kState, kStep, kEval, kCheckpoint, kResume, kNan };
  Kind kind = Kind::kState;
  JobInfo info;  // the job right after the event
  double time = 0;
  // kCheckpoint, kResume, kNan (and some kState): what happened, for people
  // ("checkpoint at step 120 written: 1.2 MB in 35 ms"; "step 7: the loss
  // is NaN; the step was skipped").
  std::string message;
};
// "state", "step", "eval", "checkpoint", "resume", "nan"
std::string_view JobEventKindName(JobEvent::Kind k);

// What the server stores of a job (its record; the submitted document is
// stored beside it): the view, the totals the training rate is computed
// from, and the notable events (no step events).
struct JobRecord {
  JobInfo info;
  double train_seconds = 0;  // time in steps, over every run of the job
  int64_t examples = 0;      // examples trained on, over every run
  // "pause" or "cancel": asked while a step ran and not applied yet (the
  // step had not ended); "" for none. A restart applies it.
  std::string pending_action;
  // Each with the job's values at the event's own moment.
  std::vector<JobEvent> history;
};

// A job's loss and evaluations over time, as GET /v1/jobs/{id}/history
// gives them (jobs/step_history.h keeps it bounded). Times are seconds since
// the Unix epoch.
struct JobHistoryStep {
  int64_t step = 0;   // steps done, this one included
  int64_t epoch = 0;  // 0-based
  double loss = 0;
  double examples_per_sec = 0;  // of this step alone
  double time = 0;              // when it ended
};
struct JobHistoryEval {
  int64_t step = 0, epoch = 0;
  double time = 0;
  std::map<std::string, double> metrics;
};
struct JobHistory {
  std::string job_id;
  std::vector<JobHistoryStep> steps;  // ascending by step
  std::vector<JobHistoryEval> evals;  // every evaluation, ascending
  // Steps are kept at multiples of `stride` only (a long job); stride 1:
  // every step. `downsampled` is stride > 1.
  int64_t stride = 1;
  bool downsampled = false;
};

// Where one traced step's time went, op by op (a job's "trace" steps, a
// session run with "trace": true); rendered as Chrome trace JSON
// (StepTraceToChromeJson). Times are microseconds since the step started.
struct StepTraceEvent {
  std::string node, op;
  int device = 0;      // index into StepTrace::devices
  int64_t thread = 0;  // OS thread id
  double start_us = 0, duration_us = 0;
  int64_t output_bytes = 0;     // the op's output tensors
  int64_t allocated_bytes = 0;  // outputs in buffers of their own (not forwarded inputs)
};
struct StepTrace {
  int64_t step = 0;     // the job's step (1-based); a session run's step id
  double time = 0;      // when it started, seconds since the Unix epoch
  double wall_us = 0;   // the step from start to end
  std::vector<std::string> devices;  // full device names
  std::vector<StepTraceEvent> events;
};

// One checkpoint of a job, as GET /v1/jobs/{id}/checkpoints lists it.
struct JobCheckpointInfo {
  int64_t step = 0;
  double time = 0;  // seconds since the epoch
  int64_t bytes = 0;
  int64_t num_tensors = 0;
};

// An uploaded ONNX model (POST /v1/models; jobs/model_registry.h).
struct ModelInfo {
  struct Tensor {
    std::string name;   // the ONNX name
    std::string dtype;  // "float32"
    std::vector<int64_t> shape;  // -1 for a dynamic dimension; empty with unknown rank
    bool rank_known = true;
  };
  std::string id;    // "model-<n>"
  std::string name;  // given at upload (?name=), else ""
  int64_t bytes = 0;
  double created = 0;  // seconds since the epoch
  int64_t opset = 0;
  std::string producer;
  std::vector<Tensor> inputs, outputs;
  int64_t parameters = 0;  // elements of the floating-point initializers
};

// A dataset uploaded for jobs to read (POST /v1/datasets;
// jobs/dataset_uploads.h): an .npy or .npz file beneath the data root.
struct DatasetInfo {
  struct Array {
    std::string name;   // the .npz member's key ("x" for x.npy); "" for an .npy
    std::string dtype;  // "float32"
    std::vector<int64_t> shape;
  };
  std::string id;    // "ds-<12 hex digits>"
  std::string path;  // beneath the data root: "uploads/ds-....npz" (the job's input.files)
  int64_t bytes = 0;
  bool complete = false;  // false while chunks are still to come
  double modified = 0;    // seconds since the epoch, of the last chunk
  std::vector<Array> arrays;  // complete datasets only
};

struct OpInfo {
  struct Arg {
    std::string name, type;  // type: "float32", "T", "N * T", "Ref(T)"
  };
  struct Attr {
    std::string name, kind, default_value;  // default_value: JSON text, "" when required
    std::vector<std::string> allowed;       // dtypes a type attr allows
  };
  std::string name, doc;
  std::vector<Arg> inputs, outputs;
  std::vector<Attr> attrs;
  bool stateful = false;
  std::vector<std::string> devices;  // device types with a kernel
};

struct DeviceInfo {
  std::string name, type, description;
  int64_t bytes_in_use = 0, peak_bytes_in_use = 0, bytes_limit = 0;
  int64_t bytes_cached = 0;  // freed buffers kept for reuse by the device pool
  int running_jobs = 0;            // RUNNING jobs on the device
  std::vector<std::string> jobs;   // their ids, in submission order
};

// A task's health as the cluster sees it: UP while its heartbeats arrive
// within the deadline (cluster_options.heartbeat_deadline_seconds),
// UNREACHABLE after.
enum class TaskState { kUp, kUnreachable };
std::string_view TaskStateName(TaskState s);  // "UP", "UNREACHABLE"

// One task of the cluster, as GET /v1/cluster reports it.
struct TaskInfo {
  std::string job;  // "worker"; "localhost" without a cluster
  int index = 0;
  std::string address;  // "host:port" of its gRPC port ("" when unknown)
  TaskState state = TaskState::kUp;
  // Random and non-zero per process: a new value means the task restarted
  // (scheduler/rendezvous.h, ProcessIncarnation). 0: not known yet.
  uint64_t incarnation = 0;
  // When this task last heard from it (seconds since the epoch; 0: never).
  // For this task itself: the time of the view.
  double last_heartbeat = 0;
  std::vector<DeviceInfo> devices;  // names carry the task: /job:worker/replica:0/task:1/...
  bool is_self = false;             // the task that answered
  std::string error;                // UNREACHABLE: why ("" otherwise)
  // "/job:worker/replica:0/task:1": the prefix of its devices' names.
  std::string name() const;
};

struct ClusterInfo {
  std::vector<TaskInfo> tasks;  // by job name, then index
};

}  // namespace flowstate

#endif  // FLOWSTATE_API_VIEWS_H_

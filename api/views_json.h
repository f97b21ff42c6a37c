// JSON renderings of the service's introspection and job types, exactly as
// server/API.md gives them: a job (GET /v1/jobs/{id}, each event of
// /v1/jobs/{id}/events), the job list, the op registry (GET /v1/ops) and the
// device pool (GET /v1/devices), the cluster (GET /v1/cluster). The REST frontend writes them; the CLI
// client and the tests read them back.
//
//   {"job_id": "job-3", "name": "fashion-mlp", "state": "RUNNING",
//    "epoch": 1, "epochs": 3, "step": 612, "total_steps": 1407,
//    "loss": 0.3712, "examples_per_sec": 15234.5,
//    "metrics": {"accuracy": 0.871}, "error": "",
//    "created": "2026-12-02T17:03:11.204Z", "started": "...", "finished": null,
//    "checkpoint": {"step": 600, "time": "...", "bytes": 1620000} or null,
//    "checkpoint_failures": 0, "checkpoint_error": "", "resumed_from_step": null}
//
// Times are RFC 3339 UTC with milliseconds, null when not yet (0 in
// JobInfo). Non-finite numbers (a diverged loss) are the strings "NaN",
// "Infinity", "-Infinity", as in the tensor codec. Output is one line (no
// newline), so it fits an SSE "data:" line.
//
// The readers are for clients: they check the type of every field they know
// (INVALID_ARGUMENT naming its JSON path) and ignore fields they do not, so
// a newer server's additions do not break an older client.
//
// All functions are pure and thread-safe. No JSON library type appears here.
#ifndef FLOWSTATE_API_VIEWS_JSON_H_
#define FLOWSTATE_API_VIEWS_JSON_H_

#include <string>
#include <string_view>
#include <vector>

#include "graph/status.h"
#include "api/views.h"

namespace flowstate {

// One job.
std::string JobInfoToJson(const JobInfo& job);
StatusOr<JobInfo> JobInfoFromJson(std::string_view json);

// The data line of one event of /v1/jobs/{id}/events: the job as it was
// right after the event, "time" (RFC 3339: when the event happened), plus
// "message" for events that carry one (checkpoint, resume).
std::string JobEventDataToJson(const JobEvent& event);

// The other way, for clients: the job of an event's data line, its time
// and "message" (kind stays kState: the SSE event name carries the kind).
StatusOr<JobEvent> JobEventDataFromJson(std::string_view json);

// The stored record of a job (the job manager's, in the store's kJobs):
//   {"id", "state", "error", "epoch", "step", "total_steps", "loss",
//    "train_seconds", "examples", "metrics", "created", "started",
//    "finished" (seconds since the epoch, 0: not yet), "checkpoint": {"step",
//    "time", "bytes", "failures", "error"}, "resumed_from_step",
//    "skipped_steps", "pending_action", "history": [{"kind", "time",
//    "message", "state", "step", "epoch", "job"}]}
// where each history entry's "job" is the job view of that event's own
// moment, as its event data line showed it (JobInfoToJson). Non-finite
// numbers of the record are stored as 0. The reader takes records of every
// earlier version (a missing field keeps its default); INVALID_ARGUMENT
// naming the field for one of the wrong type or an unknown state. History
// entries of an unknown kind or state are skipped; an entry without "job"
// (an older record) gets the record's id and times with its own state,
// step and epoch, and nothing of the values that came later (no loss,
// metrics or error).
std::string JobRecordToJson(const JobRecord& record);
StatusOr<JobRecord> JobRecordFromJson(std::string_view json);

// GET /v1/jobs/{id}/checkpoints: {"job_id": id, "checkpoints": [{"step",
// "time" (RFC 3339), "bytes", "tensors"}, ...]} by step.
std::string CheckpointListToJson(const std::string& job_id,
                                 const std::vector<JobCheckpointInfo>& checkpoints);
// POST /v1/jobs/{id}/checkpoints and POST /v1/checkpoints/import:
// {"job_id": id, "step": N, "written": true|false}.
std::string CheckpointRequestToJson(const std::string& job_id, int64_t step, bool written);

// DELETE /v1/jobs/{id}: {"job_id": id, "deleted": true}.
std::string JobDeletedToJson(const std::string& job_id);

// Uploads (views_json_uploads.cc). A dataset (POST /v1/datasets ...):
// {"dataset_id", "path", "bytes", "complete", "modified", "arrays":
// [{"name", "dtype", "shape"}]}; a list is {"datasets": [...]}.
std::string DatasetInfoToJson(const DatasetInfo& dataset);
std::string DatasetInfoListToJson(const std::vector<DatasetInfo>& datasets);
// A model: {"model_id", "name", "bytes", "created", "opset", "producer",
// "inputs": [{"name", "dtype", "shape"}], "outputs": [...], "parameters"};
// a list is {"models": [...]}. ModelInfoFromJson reads ModelInfoToJson's
// text back (the registry's record); INVALID_ARGUMENT when it is not one.
std::string ModelInfoToJson(const ModelInfo& model);
std::string ModelInfoListToJson(const std::vector<ModelInfo>& models);
StatusOr<ModelInfo> ModelInfoFromJson(std::string_view text);
std::string ModelDeletedToJson(const std::string& model_id);

// {"jobs": [job, ...]}
std::string JobInfoListToJson(const std::vector<JobInfo>& jobs);
StatusOr<std::vector<JobInfo>> JobInfoListFromJson(std::string_view json);

// One op, and {"ops": [op, ...]}. An attr's "default" is the JSON value of
// OpInfo::Attr::default_value (absent when that is "", i.e. required).
std::string OpInfoToJson(const OpInfo& op);
std::string OpInfoListToJson(const std::vector<OpInfo>& ops);
StatusOr<std::vector<OpInfo>> OpInfoListFromJson(std::string_view json);

// One device, and {"devices": [device, ...]}.
std::string DeviceInfoToJson(const DeviceInfo& device);
std::string DeviceInfoListToJson(const std::vector<DeviceInfo>& devices);
StatusOr<std::vector<DeviceInfo>> DeviceInfoListFromJson(std::string_view json);

// GET /v1/cluster:
//   {"tasks": [{"job": "worker", "index": 1, "name": "/job:worker/replica:0/task:1",
//               "address": "10.0.0.2:50051", "state": "UP" | "UNREACHABLE",
//               "incarnation": "9f1c3e5a7b2d4c60" (16 hex digits; null: not known),
//               "last_heartbeat": RFC 3339 or null, "heartbeat_age_seconds": 0.4 or null
//               (seconds between the last heartbeat and `now`), "is_self": false,
//               "error": "", "devices": [device, ...]}, ...]}
// `now` is seconds since the epoch (the time of the view).
std::string ClusterInfoToJson(const ClusterInfo& cluster, double now);
StatusOr<ClusterInfo> ClusterInfoFromJson(std::string_view json);
// TaskState from its name ("UP"); INVALID_ARGUMENT for another string.
StatusOr<TaskState> TaskStateFromName(std::string_view name);
// An incarnation as 16 lower-case hex digits, and back (INVALID_ARGUMENT
// for anything else).
std::string FormatIncarnation(uint64_t incarnation);
StatusOr<uint64_t> ParseIncarnation(std::string_view hex);

// GET /v1/jobs/{id}/history:
//   {"job_id": "job-3",
//    "steps": [{"step": 10, "epoch": 0, "loss": 0.52, "examples_per_sec": 15034.2,
//               "time": 1796400000.125}, ...],
//    "evals": [{"step": 469, "epoch": 0, "time": 1796400031.5,
//               "metrics": {"accuracy": 0.85}}, ...],
//    "downsampled": false}
// times in seconds since the Unix epoch (numbers, for charts); non-finite
// numbers as in the job view. The stored form (JobHistoryRecordToJson, the
// job manager's) adds "stride". The reader takes both.
std::string JobHistoryToJson(const JobHistory& history);
std::string JobHistoryRecordToJson(const JobHistory& history);
StatusOr<JobHistory> JobHistoryFromJson(std::string_view json);

// A traced step as Chrome trace JSON (the JSON object format that
// chrome://tracing and Perfetto load):
//   {"traceEvents": [
//      {"name": "dense/MatMul", "cat": "MatMul", "ph": "X", "ts": 12.5, "dur": 80.1,
//       "pid": 1, "tid": 4242, "args": {"node": "dense/MatMul", "op": "MatMul",
//       "bytes": 51200, "output_bytes": 51200}},
//      {"name": "step 7", "cat": "step", "ph": "X", "ts": 0, "dur": 950.2, "pid": 0, "tid": 0, ...},
//      {"name": "process_name", "ph": "M", "pid": 1, "args": {"name": "/job:localhost/.../CPU:0"}},
//      {"name": "thread_name", "ph": "M", "pid": 1, "tid": 4242, "args": {"name": "thread 4242"}}, ...],
//    "displayTimeUnit": "ms",
//    "otherData": {"step": 7, "wall_us": 950.2, "start_time": "2026-12-04T..."}}
// pid 0 is the step as a whole; pid i + 1 is StepTrace::devices[i]; tid is
// the OS thread. "bytes" is allocated_bytes.
std::string StepTraceToChromeJson(const StepTrace& trace);

// JobState from its name ("RUNNING"); INVALID_ARGUMENT for another string.
StatusOr<JobState> JobStateFromName(std::string_view name);

// RFC 3339 UTC with milliseconds ("2026-12-02T17:03:11.204Z") of seconds
// since the Unix epoch, and back (also accepts no fraction, any number of
// fraction digits, and "+00:00" for "Z").
std::string FormatRfc3339(double seconds_since_epoch);
StatusOr<double> ParseRfc3339(std::string_view text);

}  // namespace flowstate

#endif  // FLOWSTATE_API_VIEWS_JSON_H_

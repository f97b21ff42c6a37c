// JSON renderings of the service's introspection and job types, exactly as
// server/API.md gives them: a job (GET /v1/jobs/{id}, each event of
// /v1/jobs/{id}/events), the job list, the op registry (GET /v1/ops) and the
// device pool (GET /v1/devices). The REST frontend writes them; the CLI
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

// The data line of one event of /v1/jobs/{id}/events: the job, plus
// "message" for events that carry one (checkpoint, resume).
std::string JobEventDataToJson(const JobEvent& event);

// GET /v1/jobs/{id}/checkpoints: {"job_id": id, "checkpoints": [{"step",
// "time" (RFC 3339), "bytes", "tensors"}, ...]} by step.
std::string CheckpointListToJson(const std::string& job_id,
                                 const std::vector<JobCheckpointInfo>& checkpoints);
// POST /v1/jobs/{id}/checkpoints and POST /v1/checkpoints/import:
// {"job_id": id, "step": N, "written": true|false}.
std::string CheckpointRequestToJson(const std::string& job_id, int64_t step, bool written);

// DELETE /v1/jobs/{id}: {"job_id": id, "deleted": true}.
std::string JobDeletedToJson(const std::string& job_id);

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

// JobState from its name ("RUNNING"); INVALID_ARGUMENT for another string.
StatusOr<JobState> JobStateFromName(std::string_view name);

// RFC 3339 UTC with milliseconds ("2026-12-02T17:03:11.204Z") of seconds
// since the Unix epoch, and back (also accepts no fraction, any number of
// fraction digits, and "+00:00" for "Z").
std::string FormatRfc3339(double seconds_since_epoch);
StatusOr<double> ParseRfc3339(std::string_view text);

}  // namespace flowstate

#endif  // FLOWSTATE_API_VIEWS_JSON_H_

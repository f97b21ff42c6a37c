#include "api/views_json.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <limits>

#include "api/json_codec.h"
#include "api/json_internal.h"

namespace flowstate {
namespace {

using api::internal::DumpJson;
using api::internal::Json;
using api::internal::TimeJson;

// --- Writing.

Json Number(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "Infinity" : "-Infinity";
  return v;
}

Json JobJson(const JobInfo& j) {
  Json metrics = Json::object();
  for (const auto& [name, v] : j.metrics) metrics[name] = Number(v);
  Json o = Json::object();
  o["job_id"] = j.id;
  o["name"] = j.name;
  o["state"] = std::string(JobStateName(j.state));
  o["epoch"] = j.epoch;
  o["epochs"] = j.epochs;
  o["step"] = j.step;
  o["total_steps"] = j.total_steps;
  o["loss"] = Number(j.loss);
  o["examples_per_sec"] = Number(j.examples_per_sec);
  o["metrics"] = std::move(metrics);
  o["error"] = j.error;
  o["created"] = TimeJson(j.created);
  o["started"] = TimeJson(j.started);
  o["finished"] = TimeJson(j.finished);
  if (j.checkpoint_step >= 0) {
    o["checkpoint"] = Json{{"step", j.checkpoint_step},
                           {"time", TimeJson(j.checkpoint_time)},
                           {"bytes", j.checkpoint_bytes}};
  } else {
    o["checkpoint"] = nullptr;
  }
  o["checkpoint_failures"] = j.checkpoint_failures;
  o["checkpoint_error"] = j.checkpoint_error;
  o["resumed_from_step"] = j.resumed_from_step >= 0 ? Json(j.resumed_from_step) : Json(nullptr);
  o["skipped_steps"] = j.skipped_steps;
  o["eta_seconds"] = j.eta_seconds >= 0 && std::isfinite(j.eta_seconds) ? Json(j.eta_seconds) : Json(nullptr);
  o["replicas"] = j.replicas;
  o["replicas_alive"] = j.replicas_alive;
  o["restarts"] = j.restarts;
  Json placement = Json::array();
  for (const JobInfo::Replica& r : j.placement) {
    placement.push_back(Json{{"device", r.device}, {"alive", r.alive}});
  }
  o["placement"] = std::move(placement);
  return o;
}

Json ArgsJson(const std::vector<OpInfo::Arg>& args) {
  Json a = Json::array();
  for (const OpInfo::Arg& arg : args) a.push_back(Json{{"name", arg.name}, {"type", arg.type}});
  return a;
}

Json OpJson(const OpInfo& op) {
  Json attrs = Json::array();
  for (const OpInfo::Attr& at : op.attrs) {
    Json a = Json::object();
    a["name"] = at.name;
    a["kind"] = at.kind;
    if (!at.default_value.empty()) {
      // default_value is JSON text; should it ever not be, say it as a string
      // rather than emit a broken document.
      Json v = Json::parse(at.default_value, nullptr, /*allow_exceptions=*/false);
      a["default"] = v.is_discarded() ? Json(at.default_value) : std::move(v);
    }
    a["allowed"] = at.allowed;
    attrs.push_back(std::move(a));
  }
  Json o = Json::object();
  o["name"] = op.name;
  o["doc"] = op.doc;
  o["stateful"] = op.stateful;
  o["devices"] = op.devices;
  o["inputs"] = ArgsJson(op.inputs);
  o["outputs"] = ArgsJson(op.outputs);
  o["attrs"] = std::move(attrs);
  return o;
}

Json DeviceJson(const DeviceInfo& d) {
  Json o = Json::object();
  o["name"] = d.name;
  o["type"] = d.type;
  o["description"] = d.description;
  o["memory"] = Json{{"bytes_in_use", d.bytes_in_use},
                     {"peak_bytes_in_use", d.peak_bytes_in_use},
                     {"bytes_limit", d.bytes_limit},
                     {"bytes_cached", d.bytes_cached}};
  o["running_jobs"] = d.running_jobs;
  o["jobs"] = d.jobs;
  return o;
}

Json TaskJson(const TaskInfo& t, double now) {
  Json devices = Json::array();
  for (const DeviceInfo& d : t.devices) devices.push_back(DeviceJson(d));
  Json o = Json::object();
  o["job"] = t.job;
  o["index"] = t.index;
  o["name"] = t.name();
  o["address"] = t.address;
  o["state"] = std::string(TaskStateName(t.state));
  o["incarnation"] = t.incarnation != 0 ? Json(FormatIncarnation(t.incarnation)) : Json(nullptr);
  o["last_heartbeat"] = TimeJson(t.last_heartbeat);
  o["heartbeat_age_seconds"] =
      t.last_heartbeat > 0 ? Json(std::max(0.0, std::round((now - t.last_heartbeat) * 1000) / 1000)) : Json(nullptr);
  o["is_self"] = t.is_self;
  o["error"] = t.error;
  o["devices"] = std::move(devices);
  return o;
}

// --- Reading.

std::string Key(const std::string& path, std::string_view key) {
  return path.empty() ? std::string(key) : path + "." + std::string(key);
}
std::string Index(const std::string& path, size_t i) {
  return path + "[" + std::to_string(i) + "]";
}

// The codec's readers (api/json_internal.h), with this file's paths as text.
using api::internal::DescribeValue;
using api::internal::JsonPath;

Status Expected(const std::string& path, std::string_view what, const Json& got) {
  return api::internal::PathError(path, "expected " + std::string(what) + ", got " + DescribeValue(got));
}

Status Parse(std::string_view text, Json* out) {
  return api::internal::ParseJsonText(text, JsonPath(""), out);
}

// The member `key` of object `o`, or nullptr when absent or null.
const Json* Field(const Json& o, std::string_view key) { return api::internal::FindField(o, key); }

Status ReadString(const Json& o, const std::string& path, std::string_view key, std::string* out) {
  return api::internal::ReadStringField(o, JsonPath(path), key, out);
}

Status ReadBool(const Json& o, const std::string& path, std::string_view key, bool* out) {
  return api::internal::ReadBoolField(o, JsonPath(path), key, out);
}

Status ReadInt(const Json& o, const std::string& path, std::string_view key, int64_t* out) {
  return api::internal::ReadIntField(o, JsonPath(path), key, out);
}

StatusOr<double> NumberFrom(const Json& v, const std::string& path) {
  if (v.is_number()) return v.get<double>();
  if (v.is_string()) {
    std::string s = v.get<std::string>();
    for (char& c : s) c = char(std::tolower(static_cast<unsigned char>(c)));
    if (s == "nan") return std::numeric_limits<double>::quiet_NaN();
    if (s == "infinity" || s == "inf" || s == "+infinity") return std::numeric_limits<double>::infinity();
    if (s == "-infinity" || s == "-inf") return -std::numeric_limits<double>::infinity();
  }
  return Expected(path, "a number", v);
}

Status ReadNumber(const Json& o, const std::string& path, std::string_view key, double* out) {
  const Json* v = Field(o, key);
  if (v == nullptr) return Status();
  FS_ASSIGN_OR_RETURN(*out, NumberFrom(*v, Key(path, key)));
  return Status();
}

Status ReadTime(const Json& o, const std::string& path, std::string_view key, double* out) {
  const Json* v = Field(o, key);
  if (v == nullptr) {
    *out = 0;
    return Status();
  }
  if (!v->is_string()) return Expected(Key(path, key), "an RFC 3339 time or null", *v);
  StatusOr<double> t = ParseRfc3339(v->get<std::string>());
  if (!t.ok()) return InvalidArgument(Key(path, key) + ": " + t.status().message());
  *out = *t;
  return Status();
}

Status ReadStrings(const Json& o, const std::string& path, std::string_view key,
                   std::vector<std::string>* out) {
  const Json* v = Field(o, key);
  if (v == nullptr) return Status();
  if (!v->is_array()) return Expected(Key(path, key), "a list of strings", *v);
  out->clear();
  for (size_t i = 0; i < v->size(); ++i) {
    if (!(*v)[i].is_string()) return Expected(Index(Key(path, key), i), "a string", (*v)[i]);
    out->push_back((*v)[i].get<std::string>());
  }
  return Status();
}

Status CheckObject(const Json& v, const std::string& path, std::string_view what) {
  if (!v.is_object()) return Expected(path, what, v);
  return Status();
}

StatusOr<JobInfo> JobFrom(const Json& v, const std::string& path) {
  FS_RETURN_IF_ERROR(CheckObject(v, path, "a job (an object)"));
  JobInfo j;
  FS_RETURN_IF_ERROR(ReadString(v, path, "job_id", &j.id));
  FS_RETURN_IF_ERROR(ReadString(v, path, "name", &j.name));
  std::string state;
  FS_RETURN_IF_ERROR(ReadString(v, path, "state", &state));
  if (!state.empty()) {
    StatusOr<JobState> s = JobStateFromName(state);
    if (!s.ok()) return InvalidArgument(Key(path, "state") + ": " + s.status().message());
    j.state = *s;
  }
  FS_RETURN_IF_ERROR(ReadInt(v, path, "epoch", &j.epoch));
  FS_RETURN_IF_ERROR(ReadInt(v, path, "epochs", &j.epochs));
  FS_RETURN_IF_ERROR(ReadInt(v, path, "step", &j.step));
  FS_RETURN_IF_ERROR(ReadInt(v, path, "total_steps", &j.total_steps));
  FS_RETURN_IF_ERROR(ReadNumber(v, path, "loss", &j.loss));
  FS_RETURN_IF_ERROR(ReadNumber(v, path, "examples_per_sec", &j.examples_per_sec));
  if (const Json* m = Field(v, "metrics")) {
    const std::string mpath = Key(path, "metrics");
    FS_RETURN_IF_ERROR(CheckObject(*m, mpath, "an object of numbers"));
    for (auto it = m->begin(); it != m->end(); ++it) {
      FS_ASSIGN_OR_RETURN(j.metrics[it.key()], NumberFrom(*it, Key(mpath, it.key())));
    }
  }
  FS_RETURN_IF_ERROR(ReadString(v, path, "error", &j.error));
  FS_RETURN_IF_ERROR(ReadTime(v, path, "created", &j.created));
  FS_RETURN_IF_ERROR(ReadTime(v, path, "started", &j.started));
  FS_RETURN_IF_ERROR(ReadTime(v, path, "finished", &j.finished));
  if (const Json* c = Field(v, "checkpoint")) {
    const std::string cpath = Key(path, "checkpoint");
    FS_RETURN_IF_ERROR(CheckObject(*c, cpath, "an object"));
    FS_RETURN_IF_ERROR(ReadInt(*c, cpath, "step", &j.checkpoint_step));
    FS_RETURN_IF_ERROR(ReadTime(*c, cpath, "time", &j.checkpoint_time));
    FS_RETURN_IF_ERROR(ReadInt(*c, cpath, "bytes", &j.checkpoint_bytes));
  }
  FS_RETURN_IF_ERROR(ReadInt(v, path, "checkpoint_failures", &j.checkpoint_failures));
  FS_RETURN_IF_ERROR(ReadString(v, path, "checkpoint_error", &j.checkpoint_error));
  FS_RETURN_IF_ERROR(ReadInt(v, path, "resumed_from_step", &j.resumed_from_step));
  FS_RETURN_IF_ERROR(ReadInt(v, path, "skipped_steps", &j.skipped_steps));
  FS_RETURN_IF_ERROR(ReadNumber(v, path, "eta_seconds", &j.eta_seconds));
  int64_t replicas = j.replicas, alive = j.replicas_alive;
  FS_RETURN_IF_ERROR(ReadInt(v, path, "replicas", &replicas));
  FS_RETURN_IF_ERROR(ReadInt(v, path, "replicas_alive", &alive));
  j.replicas = int(replicas);
  j.replicas_alive = int(alive);
  FS_RETURN_IF_ERROR(ReadInt(v, path, "restarts", &j.restarts));
  if (const Json* p = Field(v, "placement")) {
    const std::string ppath = Key(path, "placement");
    if (!p->is_array()) return Expected(ppath, "an array", *p);
    for (size_t r = 0; r < p->size(); ++r) {
      const std::string rpath = ppath + "[" + std::to_string(r) + "]";
      FS_RETURN_IF_ERROR(CheckObject((*p)[r], rpath, "an object"));
      JobInfo::Replica replica;
      FS_RETURN_IF_ERROR(ReadString((*p)[r], rpath, "device", &replica.device));
      FS_RETURN_IF_ERROR(ReadBool((*p)[r], rpath, "alive", &replica.alive));
      j.placement.push_back(std::move(replica));
    }
  }
  return j;
}

// A finite number for the record (the store keeps no NaN).
double Finite(double v) { return std::isfinite(v) ? v : 0.0; }

StatusOr<JobEvent::Kind> KindFromName(std::string_view name) {
  for (JobEvent::Kind k : {JobEvent::Kind::kState, JobEvent::Kind::kStep, JobEvent::Kind::kEval,
                           JobEvent::Kind::kCheckpoint, JobEvent::Kind::kResume, JobEvent::Kind::kNan}) {
    if (JobEventKindName(k) == name) return k;
  }
  return InvalidArgument("unknown event kind '" + std::string(name) + "'");
}

// The record's times and numbers are plain seconds and numbers (0: unset).
Status ReadSeconds(const Json& o, const std::string& path, std::string_view key, double* out) {
  const Json* v = Field(o, key);
  if (v == nullptr) return Status();
  if (!v->is_number()) return Expected(Key(path, key), "a number", *v);
  *out = v->get<double>();
  return Status();
}

// The array `key` of the top-level object, each element read by `read`.
template <typename T, typename Read>
StatusOr<std::vector<T>> ListFrom(std::string_view text, std::string_view key, Read read) {
  Json v;
  FS_RETURN_IF_ERROR(Parse(text, &v));
  FS_RETURN_IF_ERROR(CheckObject(v, "", "an object"));
  std::vector<T> out;
  const Json* list = Field(v, key);
  if (list == nullptr) return InvalidArgument("missing \"" + std::string(key) + "\"");
  if (!list->is_array()) return Expected(std::string(key), "an array", *list);
  for (size_t i = 0; i < list->size(); ++i) {
    FS_ASSIGN_OR_RETURN(T item, read((*list)[i], Index(std::string(key), i)));
    out.push_back(std::move(item));
  }
  return out;
}

StatusOr<std::vector<OpInfo::Arg>> ArgsFrom(const Json& o, const std::string& path,
                                            std::string_view key) {
  std::vector<OpInfo::Arg> out;
  const Json* v = Field(o, key);
  if (v == nullptr) return out;
  const std::string kpath = Key(path, key);
  if (!v->is_array()) return Expected(kpath, "an array", *v);
  for (size_t i = 0; i < v->size(); ++i) {
    const Json& a = (*v)[i];
    FS_RETURN_IF_ERROR(CheckObject(a, Index(kpath, i), "an argument (an object)"));
    OpInfo::Arg arg;
    FS_RETURN_IF_ERROR(ReadString(a, Index(kpath, i), "name", &arg.name));
    FS_RETURN_IF_ERROR(ReadString(a, Index(kpath, i), "type", &arg.type));
    out.push_back(std::move(arg));
  }
  return out;
}

StatusOr<OpInfo> OpFrom(const Json& v, const std::string& path) {
  FS_RETURN_IF_ERROR(CheckObject(v, path, "an op (an object)"));
  OpInfo op;
  FS_RETURN_IF_ERROR(ReadString(v, path, "name", &op.name));
  FS_RETURN_IF_ERROR(ReadString(v, path, "doc", &op.doc));
  FS_RETURN_IF_ERROR(ReadBool(v, path, "stateful", &op.stateful));
  FS_RETURN_IF_ERROR(ReadStrings(v, path, "devices", &op.devices));
  FS_ASSIGN_OR_RETURN(op.inputs, ArgsFrom(v, path, "inputs"));
  FS_ASSIGN_OR_RETURN(op.outputs, ArgsFrom(v, path, "outputs"));
  if (const Json* attrs = Field(v, "attrs")) {
    const std::string apath = Key(path, "attrs");
    if (!attrs->is_array()) return Expected(apath, "an array", *attrs);
    for (size_t i = 0; i < attrs->size(); ++i) {
      const Json& a = (*attrs)[i];
      const std::string ipath = Index(apath, i);
      FS_RETURN_IF_ERROR(CheckObject(a, ipath, "an attr (an object)"));
      OpInfo::Attr at;
      FS_RETURN_IF_ERROR(ReadString(a, ipath, "name", &at.name));
      FS_RETURN_IF_ERROR(ReadString(a, ipath, "kind", &at.kind));
      auto d = a.find("default");
      if (d != a.end()) at.default_value = DumpJson(*d);
      FS_RETURN_IF_ERROR(ReadStrings(a, ipath, "allowed", &at.allowed));
      op.attrs.push_back(std::move(at));
    }
  }
  return op;
}

StatusOr<DeviceInfo> DeviceFrom(const Json& v, const std::string& path) {
  FS_RETURN_IF_ERROR(CheckObject(v, path, "a device (an object)"));
  DeviceInfo d;
  FS_RETURN_IF_ERROR(ReadString(v, path, "name", &d.name));
  FS_RETURN_IF_ERROR(ReadString(v, path, "type", &d.type));
  FS_RETURN_IF_ERROR(ReadString(v, path, "description", &d.description));
  if (const Json* m = Field(v, "memory")) {
    const std::string mpath = Key(path, "memory");
    FS_RETURN_IF_ERROR(CheckObject(*m, mpath, "an object"));
    FS_RETURN_IF_ERROR(ReadInt(*m, mpath, "bytes_in_use", &d.bytes_in_use));
    FS_RETURN_IF_ERROR(ReadInt(*m, mpath, "peak_bytes_in_use", &d.peak_bytes_in_use));
    FS_RETURN_IF_ERROR(ReadInt(*m, mpath, "bytes_limit", &d.bytes_limit));
    FS_RETURN_IF_ERROR(ReadInt(*m, mpath, "bytes_cached", &d.bytes_cached));
  }
  int64_t running = 0;
  FS_RETURN_IF_ERROR(ReadInt(v, path, "running_jobs", &running));
  d.running_jobs = int(running);
  FS_RETURN_IF_ERROR(ReadStrings(v, path, "jobs", &d.jobs));
  return d;
}

StatusOr<TaskInfo> TaskFrom(const Json& v, const std::string& path) {
  FS_RETURN_IF_ERROR(CheckObject(v, path, "a task (an object)"));
  TaskInfo t;
  FS_RETURN_IF_ERROR(ReadString(v, path, "job", &t.job));
  int64_t index = 0;
  FS_RETURN_IF_ERROR(ReadInt(v, path, "index", &index));
  t.index = int(index);
  FS_RETURN_IF_ERROR(ReadString(v, path, "address", &t.address));
  std::string state = "UP";
  FS_RETURN_IF_ERROR(ReadString(v, path, "state", &state));
  StatusOr<TaskState> st = TaskStateFromName(state);
  if (!st.ok()) return InvalidArgument(Key(path, "state") + ": " + st.status().message());
  t.state = *st;
  if (const Json* inc = Field(v, "incarnation"); inc != nullptr && !inc->is_null()) {
    if (!inc->is_string()) return Expected(Key(path, "incarnation"), "a string of 16 hex digits", *inc);
    StatusOr<uint64_t> i = ParseIncarnation(inc->get<std::string>());
    if (!i.ok()) return InvalidArgument(Key(path, "incarnation") + ": " + i.status().message());
    t.incarnation = *i;
  }
  FS_RETURN_IF_ERROR(ReadTime(v, path, "last_heartbeat", &t.last_heartbeat));
  FS_RETURN_IF_ERROR(ReadBool(v, path, "is_self", &t.is_self));
  FS_RETURN_IF_ERROR(ReadString(v, path, "error", &t.error));
  if (const Json* ds = Field(v, "devices")) {
    const std::string dpath = Key(path, "devices");
    if (!ds->is_array()) return Expected(dpath, "a list", *ds);
    for (size_t i = 0; i < ds->size(); ++i) {
      StatusOr<DeviceInfo> d = DeviceFrom((*ds)[i], Index(dpath, i));
      if (!d.ok()) return d.status();
      t.devices.push_back(std::move(*d));
    }
  }
  return t;
}

}  // namespace

std::string ClusterInfoToJson(const ClusterInfo& cluster, double now) {
  Json tasks = Json::array();
  for (const TaskInfo& t : cluster.tasks) tasks.push_back(TaskJson(t, now));
  return DumpJson(Json{{"tasks", std::move(tasks)}});
}

StatusOr<ClusterInfo> ClusterInfoFromJson(std::string_view json) {
  StatusOr<std::vector<TaskInfo>> tasks = ListFrom<TaskInfo>(json, "tasks", TaskFrom);
  if (!tasks.ok()) return tasks.status();
  ClusterInfo c;
  c.tasks = std::move(*tasks);
  return c;
}

StatusOr<TaskState> TaskStateFromName(std::string_view name) {
  for (TaskState s : {TaskState::kUp, TaskState::kUnreachable}) {
    if (TaskStateName(s) == name) return s;
  }
  return InvalidArgument("unknown task state '" + std::string(name) + "' (expected UP or UNREACHABLE)");
}

std::string FormatIncarnation(uint64_t incarnation) {
  char buf[17];
  std::snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(incarnation));
  return buf;
}

StatusOr<uint64_t> ParseIncarnation(std::string_view hex) {
  if (hex.size() != 16) return InvalidArgument("'" + std::string(hex) + "' is not 16 hex digits");
  uint64_t v = 0;
  for (char c : hex) {
    int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
    if (d < 0) return InvalidArgument("'" + std::string(hex) + "' is not 16 hex digits");
    v = v << 4 | uint64_t(d);
  }
  return v;
}

std::string JobInfoToJson(const JobInfo& job) { return DumpJson(JobJson(job)); }

std::string CheckpointListToJson(const std::string& job_id,
                                 const std::vector<JobCheckpointInfo>& checkpoints) {
  Json list = Json::array();
  for (const JobCheckpointInfo& c : checkpoints) {
    list.push_back(Json{{"step", c.step}, {"time", TimeJson(c.time)}, {"bytes", c.bytes},
                        {"tensors", c.num_tensors}});
  }
  return DumpJson(Json{{"job_id", job_id}, {"checkpoints", std::move(list)}});
}

std::string CheckpointRequestToJson(const std::string& job_id, int64_t step, bool written) {
  return DumpJson(Json{{"job_id", job_id}, {"step", step}, {"written", written}});
}

std::string JobDeletedToJson(const std::string& job_id) {
  return DumpJson(Json{{"job_id", job_id}, {"deleted", true}});
}

std::string JobEventDataToJson(const JobEvent& event) {
  Json o = JobJson(event.info);
  o["time"] = TimeJson(event.time);
  if (!event.message.empty()) o["message"] = event.message;
  return DumpJson(o);
}

StatusOr<JobEvent> JobEventDataFromJson(std::string_view json) {
  Json v;
  FS_RETURN_IF_ERROR(Parse(json, &v));
  JobEvent e;
  FS_ASSIGN_OR_RETURN(e.info, JobFrom(v, ""));
  FS_RETURN_IF_ERROR(ReadTime(v, "", "time", &e.time));
  FS_RETURN_IF_ERROR(ReadString(v, "", "message", &e.message));
  return e;
}

std::string JobRecordToJson(const JobRecord& record) {
  const JobInfo& j = record.info;
  Json r = Json::object();
  r["id"] = j.id;
  r["state"] = std::string(JobStateName(j.state));
  r["error"] = j.error;
  r["epoch"] = j.epoch;
  r["step"] = j.step;
  r["total_steps"] = j.total_steps;
  r["loss"] = Finite(j.loss);
  r["train_seconds"] = record.train_seconds;
  r["examples"] = record.examples;
  Json m = Json::object();
  for (const auto& [k, v] : j.metrics) m[k] = Finite(v);
  r["metrics"] = std::move(m);
  r["created"] = j.created;
  r["started"] = j.started;
  r["finished"] = j.finished;
  r["checkpoint"] = {{"step", j.checkpoint_step}, {"time", j.checkpoint_time},
                     {"bytes", j.checkpoint_bytes}, {"failures", j.checkpoint_failures},
                     {"error", j.checkpoint_error}};
  r["resumed_from_step"] = j.resumed_from_step;
  r["skipped_steps"] = j.skipped_steps;
  r["restarts"] = j.restarts;
  r["pending_action"] = record.pending_action;
  Json h = Json::array();
  for (const JobEvent& e : record.history) {
    // state, step and epoch also apart, for readers of older versions.
    h.push_back({{"kind", std::string(JobEventKindName(e.kind))},
                 {"time", e.time},
                 {"message", e.message},
                 {"state", std::string(JobStateName(e.info.state))},
                 {"step", e.info.step},
                 {"epoch", e.info.epoch},
                 {"job", JobJson(e.info)}});
  }
  r["history"] = std::move(h);
  return DumpJson(r);
}

StatusOr<JobRecord> JobRecordFromJson(std::string_view json) {
  Json r;
  FS_RETURN_IF_ERROR(Parse(json, &r));
  FS_RETURN_IF_ERROR(CheckObject(r, "", "a job record (an object)"));
  JobRecord rec;
  JobInfo& j = rec.info;
  FS_RETURN_IF_ERROR(ReadString(r, "", "id", &j.id));
  std::string state;
  FS_RETURN_IF_ERROR(ReadString(r, "", "state", &state));
  StatusOr<JobState> s = JobStateFromName(state);
  if (!s.ok()) return InvalidArgument("state: " + s.status().message());
  j.state = *s;
  FS_RETURN_IF_ERROR(ReadString(r, "", "error", &j.error));
  FS_RETURN_IF_ERROR(ReadInt(r, "", "epoch", &j.epoch));
  FS_RETURN_IF_ERROR(ReadInt(r, "", "step", &j.step));
  FS_RETURN_IF_ERROR(ReadInt(r, "", "total_steps", &j.total_steps));
  FS_RETURN_IF_ERROR(ReadSeconds(r, "", "loss", &j.loss));
  FS_RETURN_IF_ERROR(ReadSeconds(r, "", "train_seconds", &rec.train_seconds));
  FS_RETURN_IF_ERROR(ReadInt(r, "", "examples", &rec.examples));
  if (const Json* m = Field(r, "metrics")) {
    FS_RETURN_IF_ERROR(CheckObject(*m, "metrics", "an object of numbers"));
    for (auto it = m->begin(); it != m->end(); ++it) {
      if (it->is_number()) j.metrics[it.key()] = it->get<double>();
    }
  }
  FS_RETURN_IF_ERROR(ReadSeconds(r, "", "created", &j.created));
  FS_RETURN_IF_ERROR(ReadSeconds(r, "", "started", &j.started));
  FS_RETURN_IF_ERROR(ReadSeconds(r, "", "finished", &j.finished));
  if (const Json* c = Field(r, "checkpoint")) {
    FS_RETURN_IF_ERROR(CheckObject(*c, "checkpoint", "an object"));
    FS_RETURN_IF_ERROR(ReadInt(*c, "checkpoint", "step", &j.checkpoint_step));
    FS_RETURN_IF_ERROR(ReadSeconds(*c, "checkpoint", "time", &j.checkpoint_time));
    FS_RETURN_IF_ERROR(ReadInt(*c, "checkpoint", "bytes", &j.checkpoint_bytes));
    FS_RETURN_IF_ERROR(ReadInt(*c, "checkpoint", "failures", &j.checkpoint_failures));
    FS_RETURN_IF_ERROR(ReadString(*c, "checkpoint", "error", &j.checkpoint_error));
  }
  FS_RETURN_IF_ERROR(ReadInt(r, "", "resumed_from_step", &j.resumed_from_step));
  FS_RETURN_IF_ERROR(ReadInt(r, "", "skipped_steps", &j.skipped_steps));
  FS_RETURN_IF_ERROR(ReadInt(r, "", "restarts", &j.restarts));
  FS_RETURN_IF_ERROR(ReadString(r, "", "pending_action", &rec.pending_action));
  // What an entry without its own job view (an older record) shows: the
  // job's identity and times, none of its later values.
  JobInfo identity;
  identity.id = j.id;
  identity.total_steps = j.total_steps;
  identity.created = j.created;
  if (const Json* h = Field(r, "history"); h != nullptr && h->is_array()) {
    for (const Json& e : *h) {
      if (!e.is_object()) continue;
      std::string kind, hstate;
      JobEvent ev;
      if (!ReadString(e, "history", "kind", &kind).ok() ||
          !ReadString(e, "history", "state", &hstate).ok()) {
        continue;
      }
      StatusOr<JobEvent::Kind> k = KindFromName(kind);
      StatusOr<JobState> hs = JobStateFromName(hstate);
      if (!k.ok() || !hs.ok()) continue;
      ev.kind = *k;
      ev.info = identity;
      if (const Json* job = Field(e, "job")) {
        StatusOr<JobInfo> at = JobFrom(*job, "history.job");
        if (!at.ok()) continue;
        ev.info = std::move(at).value();
      }
      ev.info.state = *hs;
      if (!ReadInt(e, "history", "step", &ev.info.step).ok() ||
          !ReadInt(e, "history", "epoch", &ev.info.epoch).ok() ||
          !ReadSeconds(e, "history", "time", &ev.time).ok() ||
          !ReadString(e, "history", "message", &ev.message).ok()) {
        continue;
      }
      rec.history.push_back(std::move(ev));
    }
  }
  return rec;
}

StatusOr<JobInfo> JobInfoFromJson(std::string_view json) {
  Json v;
  FS_RETURN_IF_ERROR(Parse(json, &v));
  return JobFrom(v, "");
}

std::string JobInfoListToJson(const std::vector<JobInfo>& jobs) {
  Json list = Json::array();
  for (const JobInfo& j : jobs) list.push_back(JobJson(j));
  return DumpJson(Json{{"jobs", std::move(list)}});
}

StatusOr<std::vector<JobInfo>> JobInfoListFromJson(std::string_view json) {
  return ListFrom<JobInfo>(json, "jobs", JobFrom);
}

std::string OpInfoToJson(const OpInfo& op) { return DumpJson(OpJson(op)); }

std::string OpInfoListToJson(const std::vector<OpInfo>& ops) {
  Json list = Json::array();
  for (const OpInfo& op : ops) list.push_back(OpJson(op));
  return DumpJson(Json{{"ops", std::move(list)}});
}

StatusOr<std::vector<OpInfo>> OpInfoListFromJson(std::string_view json) {
  return ListFrom<OpInfo>(json, "ops", OpFrom);
}

std::string DeviceInfoToJson(const DeviceInfo& device) { return DumpJson(DeviceJson(device)); }

std::string DeviceInfoListToJson(const std::vector<DeviceInfo>& devices) {
  Json list = Json::array();
  for (const DeviceInfo& d : devices) list.push_back(DeviceJson(d));
  return DumpJson(Json{{"devices", std::move(list)}});
}

StatusOr<std::vector<DeviceInfo>> DeviceInfoListFromJson(std::string_view json) {
  return ListFrom<DeviceInfo>(json, "devices", DeviceFrom);
}

StatusOr<JobState> JobStateFromName(std::string_view name) {
  for (JobState s : {JobState::kQueued, JobState::kRunning, JobState::kPaused,
                     JobState::kSucceeded, JobState::kFailed, JobState::kCancelled}) {
    if (JobStateName(s) == name) return s;
  }
  return InvalidArgument("unknown job state '" + std::string(name) + "'");
}

std::string FormatRfc3339(double seconds_since_epoch) {
  int64_t ms = int64_t(std::floor(seconds_since_epoch * 1000 + 0.5));
  int64_t secs = ms / 1000, frac = ms % 1000;
  if (frac < 0) {
    frac += 1000;
    secs -= 1;
  }
  std::time_t t = std::time_t(secs);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[96];
  std::snprintf(buf, sizeof(buf), "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900,
                tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, int(frac));
  return buf;
}

StatusOr<double> ParseRfc3339(std::string_view text) {
  auto bad = [&] {
    return InvalidArgument("'" + std::string(text) +
                           "' is not an RFC 3339 UTC time like 2026-12-02T17:03:11.204Z");
  };
  // YYYY-MM-DDTHH:MM:SS
  if (text.size() < 20) return bad();
  auto digits = [&](size_t pos, size_t n, int* out) {
    int v = 0;
    for (size_t i = pos; i < pos + n; ++i) {
      if (!std::isdigit(static_cast<unsigned char>(text[i]))) return false;
      v = v * 10 + (text[i] - '0');
    }
    *out = v;
    return true;
  };
  int year, mon, day, hour, min, sec;
  if (!digits(0, 4, &year) || text[4] != '-' || !digits(5, 2, &mon) || text[7] != '-' ||
      !digits(8, 2, &day) || (text[10] != 'T' && text[10] != 't') || !digits(11, 2, &hour) ||
      text[13] != ':' || !digits(14, 2, &min) || text[16] != ':' || !digits(17, 2, &sec)) {
    return bad();
  }
  if (mon < 1 || mon > 12 || day < 1 || day > 31 || hour > 23 || min > 59 || sec > 60) return bad();
  size_t pos = 19;
  double frac = 0;
  if (pos < text.size() && text[pos] == '.') {
    ++pos;
    double scale = 0.1;
    size_t start = pos;
    while (pos < text.size() && std::isdigit(static_cast<unsigned char>(text[pos]))) {
      frac += (text[pos] - '0') * scale;
      scale /= 10;
      ++pos;
    }
    if (pos == start) return bad();
  }
  std::string_view zone = text.substr(pos);
  if (zone != "Z" && zone != "z" && zone != "+00:00" && zone != "-00:00") return bad();
  std::tm tm{};
  tm.tm_year = year - 1900;
  tm.tm_mon = mon - 1;
  tm.tm_mday = day;
  tm.tm_hour = hour;
  tm.tm_min = min;
  tm.tm_sec = sec;
  std::time_t t = timegm(&tm);
  return double(t) + frac;
}

namespace api::internal {

std::string DumpJson(const Json& j) {
  // Invalid UTF-8 in a name or message is replaced, never thrown on.
  return j.dump(-1, ' ', false, Json::error_handler_t::replace);
}

Json TimeJson(double seconds_since_epoch) {
  if (seconds_since_epoch <= 0) return nullptr;
  return FormatRfc3339(seconds_since_epoch);
}

}  // namespace api::internal

}  // namespace flowstate

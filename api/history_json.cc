// GET /v1/jobs/{id}/history and the Chrome trace JSON of a traced step
// (api/views_json.h). Written with the codec's appenders (thousands of
// points), read with its readers.
#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "api/json_internal.h"
#include "api/views_json.h"

namespace flowstate {
namespace {

using api::internal::AppendDouble;
using api::internal::AppendInt;
using api::internal::AppendJsonString;
using api::internal::CheckObject;
using api::internal::FindField;
using api::internal::Json;
using api::internal::JsonPath;
using api::internal::PathError;
using api::internal::ReadBoolField;
using api::internal::ReadIntField;

void Key(const char* key, std::string* out) {
  out->push_back('"');
  *out += key;
  *out += "\":";
}

std::string HistoryJson(const JobHistory& h, bool record) {
  std::string out = "{";
  Key("job_id", &out);
  AppendJsonString(h.job_id, &out);
  out += ",";
  Key("steps", &out);
  out += "[";
  for (size_t i = 0; i < h.steps.size(); ++i) {
    const JobHistoryStep& s = h.steps[i];
    out += i ? ",{" : "{";
    Key("step", &out);
    AppendInt(s.step, &out);
    out += ",";
    Key("epoch", &out);
    AppendInt(s.epoch, &out);
    out += ",";
    Key("loss", &out);
    AppendDouble(s.loss, &out);
    out += ",";
    Key("examples_per_sec", &out);
    AppendDouble(s.examples_per_sec, &out);
    out += ",";
    Key("time", &out);
    AppendDouble(s.time, &out);
    out += "}";
  }
  out += "],";
  Key("evals", &out);
  out += "[";
  for (size_t i = 0; i < h.evals.size(); ++i) {
    const JobHistoryEval& e = h.evals[i];
    out += i ? ",{" : "{";
    Key("step", &out);
    AppendInt(e.step, &out);
    out += ",";
    Key("epoch", &out);
    AppendInt(e.epoch, &out);
    out += ",";
    Key("time", &out);
    AppendDouble(e.time, &out);
    out += ",";
    Key("metrics", &out);
    out += "{";
    bool first = true;
    for (const auto& [name, v] : e.metrics) {
      if (!first) out += ",";
      first = false;
      AppendJsonString(name, &out);
      out += ":";
      AppendDouble(v, &out);
    }
    out += "}}";
  }
  out += "],";
  Key("downsampled", &out);
  out += h.downsampled ? "true" : "false";
  if (record) {
    out += ",";
    Key("stride", &out);
    AppendInt(h.stride, &out);
  }
  out += "}";
  return out;
}

// A number, or "NaN" / "Infinity" / "-Infinity" as AppendDouble writes them.
Status ReadDouble(const Json& o, const JsonPath& path, std::string_view key, double* out) {
  const Json* v = FindField(o, key);
  if (v == nullptr) return Status();
  if (v->is_number()) {
    *out = v->get<double>();
    return Status();
  }
  if (v->is_string()) {
    const std::string& s = v->get_ref<const std::string&>();
    if (s == "NaN") {
      *out = std::nan("");
      return Status();
    }
    if (s == "Infinity" || s == "-Infinity") {
      *out = s[0] == '-' ? -HUGE_VAL : HUGE_VAL;
      return Status();
    }
  }
  return PathError(path.Key(key), "expected a number");
}

}  // namespace

std::string JobHistoryToJson(const JobHistory& history) { return HistoryJson(history, false); }

std::string JobHistoryRecordToJson(const JobHistory& history) { return HistoryJson(history, true); }

StatusOr<JobHistory> JobHistoryFromJson(std::string_view json) {
  const JsonPath root("");
  Json v;
  FS_RETURN_IF_ERROR(api::internal::ParseJsonText(json, root, &v));
  if (!v.is_object()) return PathError(root, "expected a job history (an object)");
  JobHistory h;
  FS_RETURN_IF_ERROR(api::internal::ReadStringField(v, root, "job_id", &h.job_id));
  if (const Json* steps = FindField(v, "steps")) {
    const JsonPath p = root.Key("steps");
    if (!steps->is_array()) return PathError(p, "expected a list of steps");
    for (size_t i = 0; i < steps->size(); ++i) {
      const Json& s = (*steps)[i];
      const JsonPath sp = p.Index(int64_t(i));
      if (!s.is_object()) return PathError(sp, "expected a step (an object)");
      JobHistoryStep step;
      FS_RETURN_IF_ERROR(ReadIntField(s, sp, "step", &step.step));
      FS_RETURN_IF_ERROR(ReadIntField(s, sp, "epoch", &step.epoch));
      FS_RETURN_IF_ERROR(ReadDouble(s, sp, "loss", &step.loss));
      FS_RETURN_IF_ERROR(ReadDouble(s, sp, "examples_per_sec", &step.examples_per_sec));
      FS_RETURN_IF_ERROR(ReadDouble(s, sp, "time", &step.time));
      h.steps.push_back(step);
    }
  }
  if (const Json* evals = FindField(v, "evals")) {
    const JsonPath p = root.Key("evals");
    if (!evals->is_array()) return PathError(p, "expected a list of evaluations");
    for (size_t i = 0; i < evals->size(); ++i) {
      const Json& e = (*evals)[i];
      const JsonPath ep = p.Index(int64_t(i));
      if (!e.is_object()) return PathError(ep, "expected an evaluation (an object)");
      JobHistoryEval eval;
      FS_RETURN_IF_ERROR(ReadIntField(e, ep, "step", &eval.step));
      FS_RETURN_IF_ERROR(ReadIntField(e, ep, "epoch", &eval.epoch));
      FS_RETURN_IF_ERROR(ReadDouble(e, ep, "time", &eval.time));
      if (const Json* m = FindField(e, "metrics")) {
        if (!m->is_object()) return PathError(ep.Key("metrics"), "expected an object of numbers");
        for (auto it = m->begin(); it != m->end(); ++it) {
          FS_RETURN_IF_ERROR(ReadDouble(*m, ep.Key("metrics"), it.key(), &eval.metrics[it.key()]));
        }
      }
      h.evals.push_back(std::move(eval));
    }
  }
  FS_RETURN_IF_ERROR(ReadBoolField(v, root, "downsampled", &h.downsampled));
  FS_RETURN_IF_ERROR(ReadIntField(v, root, "stride", &h.stride, 1));
  return h;
}

std::string StepTraceToChromeJson(const StepTrace& t) {
  std::string out = "{\"traceEvents\":[";
  // The step as a whole: pid 0 (the first device's row), tid 0.
  out += "{\"name\":";
  AppendJsonString("step " + std::to_string(t.step), &out);
  out += ",\"cat\":\"step\",\"ph\":\"X\",\"ts\":0,\"dur\":";
  AppendDouble(t.wall_us, &out);
  out += ",\"pid\":0,\"tid\":0,\"args\":{\"step\":";
  AppendInt(t.step, &out);
  out += ",\"ops\":";
  AppendInt(int64_t(t.events.size()), &out);
  out += "}}";
  std::set<std::pair<int, int64_t>> threads;
  for (const StepTraceEvent& e : t.events) {
    threads.emplace(e.device, e.thread);
    out += ",{\"name\":";
    AppendJsonString(e.node, &out);
    out += ",\"cat\":";
    AppendJsonString(e.op, &out);
    out += ",\"ph\":\"X\",\"ts\":";
    AppendDouble(e.start_us, &out);
    out += ",\"dur\":";
    AppendDouble(e.duration_us, &out);
    out += ",\"pid\":";
    AppendInt(e.device, &out);
    out += ",\"tid\":";
    AppendInt(e.thread, &out);
    out += ",\"args\":{\"node\":";
    AppendJsonString(e.node, &out);
    out += ",\"op\":";
    AppendJsonString(e.op, &out);
    out += ",\"bytes\":";
    AppendInt(e.allocated_bytes, &out);
    out += ",\"output_bytes\":";
    AppendInt(e.output_bytes, &out);
    out += "}}";
  }
  // Metadata: names and order of the processes (devices) and threads.
  const size_t num_pids = std::max<size_t>(1, t.devices.size());
  for (size_t d = 0; d < num_pids; ++d) {
    out += ",{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":";
    AppendInt(int64_t(d), &out);
    out += ",\"tid\":0,\"args\":{\"name\":";
    AppendJsonString(d < t.devices.size() ? t.devices[d] : std::string("step"), &out);
    out += "}},{\"name\":\"process_sort_index\",\"ph\":\"M\",\"pid\":";
    AppendInt(int64_t(d), &out);
    out += ",\"tid\":0,\"args\":{\"sort_index\":";
    AppendInt(int64_t(d), &out);
    out += "}}";
  }
  out += ",{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":0,\"tid\":0,\"args\":{\"name\":\"step\"}}";
  for (const auto& [device, thread] : threads) {
    out += ",{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":";
    AppendInt(device, &out);
    out += ",\"tid\":";
    AppendInt(thread, &out);
    out += ",\"args\":{\"name\":";
    AppendJsonString("thread " + std::to_string(thread), &out);
    out += "}}";
  }
  out += "],\"displayTimeUnit\":\"ms\",\"otherData\":{\"step\":";
  AppendInt(t.step, &out);
  out += ",\"wall_us\":";
  AppendDouble(t.wall_us, &out);
  out += ",\"start_time\":";
  AppendJsonString(t.time > 0 ? FormatRfc3339(t.time) : std::string(), &out);
  out += "}}";
  return out;
}

}  // namespace flowstate

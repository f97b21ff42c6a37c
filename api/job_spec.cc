#include "api/job_spec.h"

#include <nlohmann/json.hpp>

#include <set>

#include "api/json_codec.h"

namespace flowstate {
namespace {

using json = nlohmann::json;

Status Bad(const std::string& path, const std::string& why) {
  return InvalidArgument(path + ": " + why);
}

std::string KindOf(const json& j) {
  switch (j.type()) {
    case json::value_t::null: return "null";
    case json::value_t::boolean: return "a bool";
    case json::value_t::number_integer:
    case json::value_t::number_unsigned: return "an integer";
    case json::value_t::number_float: return "a number";
    case json::value_t::string: return "a string";
    case json::value_t::array: return "an array";
    case json::value_t::object: return "an object";
    default: return "a value";
  }
}

Status CheckFields(const json& obj, const std::string& path, const std::set<std::string>& known) {
  if (!obj.is_object()) return Bad(path, "expected an object, got " + KindOf(obj));
  for (auto it = obj.begin(); it != obj.end(); ++it) {
    if (!known.count(it.key())) {
      std::string list;
      for (const auto& k : known) list += (list.empty() ? "" : ", ") + k;
      return Bad(path.empty() ? it.key() : path + "." + it.key(),
                 "unknown field (expected one of " + list + ")");
    }
  }
  return Status();
}

std::string Join(const std::string& path, const std::string& key) {
  return path.empty() ? key : path + "." + key;
}

Status GetString(const json& o, const std::string& path, const char* key, std::string* out,
                 bool required = false) {
  auto it = o.find(key);
  if (it == o.end() || it->is_null()) {
    return required ? Bad(Join(path, key), "is required") : Status();
  }
  if (!it->is_string()) return Bad(Join(path, key), "expected a string, got " + KindOf(*it));
  *out = it->get<std::string>();
  return Status();
}

Status GetInt(const json& o, const std::string& path, const char* key, int64_t* out,
              int64_t min_value) {
  auto it = o.find(key);
  if (it == o.end() || it->is_null()) return Status();
  if (!it->is_number_integer() && !it->is_number_unsigned()) {
    return Bad(Join(path, key), "expected an integer, got " + KindOf(*it));
  }
  int64_t v = it->get<int64_t>();
  if (v < min_value) return Bad(Join(path, key), "must be >= " + std::to_string(min_value));
  *out = v;
  return Status();
}

Status GetDouble(const json& o, const std::string& path, const char* key, double* out) {
  auto it = o.find(key);
  if (it == o.end() || it->is_null()) return Status();
  if (!it->is_number()) return Bad(Join(path, key), "expected a number, got " + KindOf(*it));
  *out = it->get<double>();
  return Status();
}

// Unset when absent or null (the default then belongs to whoever reads it).
Status GetOptionalDouble(const json& o, const std::string& path, const char* key,
                         std::optional<double>* out) {
  double v = 0;
  auto it = o.find(key);
  if (it == o.end() || it->is_null()) return Status();
  FS_RETURN_IF_ERROR(GetDouble(o, path, key, &v));
  *out = v;
  return Status();
}

Status GetBool(const json& o, const std::string& path, const char* key, bool* out) {
  auto it = o.find(key);
  if (it == o.end() || it->is_null()) return Status();
  if (!it->is_boolean()) return Bad(Join(path, key), "expected a bool, got " + KindOf(*it));
  *out = it->get<bool>();
  return Status();
}

Status ParseData(const json& o, const std::string& path, DataSpec* d, std::set<std::string> extra) {
  std::set<std::string> known{"format", "files", "columns", "header", "delimiter", "batch_size",
                              "max_examples"};
  known.insert(extra.begin(), extra.end());
  FS_RETURN_IF_ERROR(CheckFields(o, path, known));
  FS_RETURN_IF_ERROR(GetString(o, path, "format", &d->format));
  if (d->format != "idx" && d->format != "csv") {
    return Bad(Join(path, "format"), "must be \"idx\" or \"csv\", got \"" + d->format + "\"");
  }
  auto files = o.find("files");
  if (files == o.end() || files->is_null()) return Bad(Join(path, "files"), "is required");
  if (!files->is_object() || files->empty()) {
    return Bad(Join(path, "files"), "expected an object mapping placeholder names to paths");
  }
  for (auto it = files->begin(); it != files->end(); ++it) {
    if (!it->is_string()) return Bad(Join(path, "files." + it.key()), "expected a path string");
    d->files[it.key()] = it->get<std::string>();
  }
  if (auto c = o.find("columns"); c != o.end() && !c->is_null()) {
    if (d->format != "csv") return Bad(Join(path, "columns"), "only applies to format \"csv\"");
    if (!c->is_object()) return Bad(Join(path, "columns"), "expected an object");
    d->columns.clear();  // given here: replaces what eval inherited from input
    for (auto it = c->begin(); it != c->end(); ++it) {
      std::string cp = Join(path, "columns." + it.key());
      CsvColumns cols;
      const json& spec = *it;
      const json* list = &spec;
      if (spec.is_object()) {
        FS_RETURN_IF_ERROR(CheckFields(spec, cp, {"columns", "dtype"}));
        FS_RETURN_IF_ERROR(GetString(spec, cp, "dtype", &cols.dtype));
        auto l = spec.find("columns");
        if (l == spec.end()) return Bad(Join(cp, "columns"), "is required");
        list = &*l;
      }
      if (!list->is_array() || list->empty()) {
        return Bad(cp, "expected a non-empty list of column indices or names");
      }
      for (size_t k = 0; k < list->size(); ++k) {
        const json& e = (*list)[k];
        if (e.is_number_integer() && e.get<int64_t>() >= 0) {
          cols.indices.push_back(int(e.get<int64_t>()));
        } else if (e.is_string()) {
          cols.names.push_back(e.get<std::string>());
        } else {
          return Bad(cp + "[" + std::to_string(k) + "]", "expected a column index or name");
        }
      }
      if (!cols.indices.empty() && !cols.names.empty()) {
        return Bad(cp, "use either column indices or names, not both");
      }
      d->columns[it.key()] = cols;
    }
  }
  if (auto h = o.find("header"); h != o.end() && !h->is_null()) {
    if (!h->is_boolean()) return Bad(Join(path, "header"), "expected a bool");
    d->header = h->get<bool>();
  }
  std::string delim;
  FS_RETURN_IF_ERROR(GetString(o, path, "delimiter", &delim));
  if (!delim.empty()) {
    if (delim.size() != 1) return Bad(Join(path, "delimiter"), "must be one character");
    d->delimiter = delim[0];
  }
  FS_RETURN_IF_ERROR(GetInt(o, path, "batch_size", &d->batch_size, 1));
  int64_t max_examples = -1;
  FS_RETURN_IF_ERROR(GetInt(o, path, "max_examples", &max_examples, 1));
  if (max_examples > 0) d->max_examples = max_examples;
  return Status();
}

Status ParseOptimizer(const json& o, JobSpec* job) {
  const std::string p = "optimizer";
  FS_RETURN_IF_ERROR(CheckFields(o, p, {"type", "learning_rate", "momentum", "nesterov", "beta1",
                                        "beta2", "epsilon", "rho", "initial_accumulator",
                                        "clip_global_norm", "schedule"}));
  FS_RETURN_IF_ERROR(GetString(o, p, "type", &job->optimizer_type, true));
  StatusOr<OptimizerOptions::Kind> kind = OptimizerKindFromString(job->optimizer_type);
  if (!kind.ok()) return Bad("optimizer.type", kind.status().message());
  OptimizerOptions& opt = job->optimizer;
  opt.kind = *kind;
  FS_RETURN_IF_ERROR(GetDouble(o, p, "learning_rate", &opt.learning_rate));
  FS_RETURN_IF_ERROR(GetOptionalDouble(o, p, "momentum", &opt.momentum));
  FS_RETURN_IF_ERROR(GetBool(o, p, "nesterov", &opt.nesterov));
  FS_RETURN_IF_ERROR(GetDouble(o, p, "beta1", &opt.beta1));
  FS_RETURN_IF_ERROR(GetDouble(o, p, "beta2", &opt.beta2));
  FS_RETURN_IF_ERROR(GetOptionalDouble(o, p, "epsilon", &opt.epsilon));
  FS_RETURN_IF_ERROR(GetDouble(o, p, "rho", &opt.rho));
  FS_RETURN_IF_ERROR(GetDouble(o, p, "initial_accumulator", &opt.initial_accumulator));
  FS_RETURN_IF_ERROR(GetDouble(o, p, "clip_global_norm", &opt.clip_global_norm));
  if (auto s = o.find("schedule"); s != o.end() && !s->is_null()) {
    const std::string sp = "optimizer.schedule";
    FS_RETURN_IF_ERROR(CheckFields(*s, sp, {"type", "decay_steps", "decay_rate", "staircase", "alpha"}));
    std::string type = "constant";
    FS_RETURN_IF_ERROR(GetString(*s, sp, "type", &type));
    LearningRateSchedule& sc = opt.schedule;
    if (type == "constant") {
      sc.kind = LearningRateSchedule::Kind::kConstant;
    } else if (type == "exponential_decay") {
      sc.kind = LearningRateSchedule::Kind::kExponentialDecay;
    } else if (type == "cosine_decay" || type == "cosine") {
      sc.kind = LearningRateSchedule::Kind::kCosineDecay;
    } else {
      return Bad(sp + ".type", "must be constant, exponential_decay or cosine_decay");
    }
    FS_RETURN_IF_ERROR(GetInt(*s, sp, "decay_steps", &sc.decay_steps, 1));
    FS_RETURN_IF_ERROR(GetDouble(*s, sp, "decay_rate", &sc.decay_rate));
    FS_RETURN_IF_ERROR(GetBool(*s, sp, "staircase", &sc.staircase));
    FS_RETURN_IF_ERROR(GetDouble(*s, sp, "alpha", &sc.alpha));
  }
  // Range checks, with the field's path.
  return ValidateOptimizerOptions(opt);
}

}  // namespace

StatusOr<JobSpec> ParseJobSpec(std::string_view text) {
  // Before anything recursive (the graph is printed again below).
  FS_RETURN_IF_ERROR(api::CheckJsonDepth(text));
  json j = json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return InvalidArgument("the job is not valid JSON");
  JobSpec job;
  FS_RETURN_IF_ERROR(CheckFields(j, "", {"name", "graph", "loss", "optimizer", "input", "eval",
                                         "checkpoint", "devices", "replicas", "seed", "max_steps",
                                         "init_from", "on_nan"}));
  FS_RETURN_IF_ERROR(GetString(j, "", "name", &job.name));
  auto g = j.find("graph");
  if (g == j.end() || g->is_null()) return Bad("graph", "is required");
  FS_ASSIGN_OR_RETURN(job.graph, api::ParseGraphJson(g->dump(), "graph"));
  FS_RETURN_IF_ERROR(GetString(j, "", "loss", &job.loss, true));
  auto opt = j.find("optimizer");
  if (opt == j.end() || opt->is_null()) return Bad("optimizer", "is required");
  FS_RETURN_IF_ERROR(ParseOptimizer(*opt, &job));
  auto in = j.find("input");
  if (in == j.end() || in->is_null()) return Bad("input", "is required");
  FS_RETURN_IF_ERROR(ParseData(*in, "input", &job.input,
                               {"shuffle", "epochs", "drop_remainder", "prefetch"}));
  FS_RETURN_IF_ERROR(GetBool(*in, "input", "shuffle", &job.input.shuffle));
  FS_RETURN_IF_ERROR(GetInt(*in, "input", "epochs", &job.input.epochs, 1));
  FS_RETURN_IF_ERROR(GetBool(*in, "input", "drop_remainder", &job.input.drop_remainder));
  int64_t prefetch = job.input.prefetch;
  FS_RETURN_IF_ERROR(GetInt(*in, "input", "prefetch", &prefetch, 0));
  job.input.prefetch = int(std::min<int64_t>(prefetch, 1024));
  if (auto e = j.find("eval"); e != j.end() && !e->is_null()) {
    // What eval does not say comes from input: the format, the batch size
    // and, for CSV, the columns, header and delimiter.
    EvalSpec ev;
    ev.format = job.input.format;
    ev.batch_size = job.input.batch_size;
    ev.columns = job.input.columns;
    ev.header = job.input.header;
    ev.delimiter = job.input.delimiter;
    FS_RETURN_IF_ERROR(ParseData(*e, "eval", &ev, {"metrics", "every_epochs"}));
    if (ev.format != "csv") {
      ev.columns.clear();
      ev.header.reset();
      ev.delimiter = ',';
    }
    auto m = e->find("metrics");
    if (m == e->end() || !m->is_array() || m->empty()) {
      return Bad("eval.metrics", "expected a non-empty list of node names");
    }
    for (size_t k = 0; k < m->size(); ++k) {
      if (!(*m)[k].is_string()) return Bad("eval.metrics[" + std::to_string(k) + "]", "expected a node name");
      ev.metrics.push_back((*m)[k].get<std::string>());
    }
    FS_RETURN_IF_ERROR(GetInt(*e, "eval", "every_epochs", &ev.every_epochs, 1));
    job.eval = ev;
  }
  if (auto c = j.find("checkpoint"); c != j.end() && !c->is_null()) {
    FS_RETURN_IF_ERROR(CheckFields(*c, "checkpoint", {"every_steps", "every_seconds", "keep"}));
    FS_RETURN_IF_ERROR(GetInt(*c, "checkpoint", "every_steps", &job.checkpoint.every_steps, 0));
    FS_RETURN_IF_ERROR(GetDouble(*c, "checkpoint", "every_seconds", &job.checkpoint.every_seconds));
    if (job.checkpoint.every_seconds < 0) return Bad("checkpoint.every_seconds", "must be >= 0");
    int64_t keep = job.checkpoint.keep;
    FS_RETURN_IF_ERROR(GetInt(*c, "checkpoint", "keep", &keep, 1));
    job.checkpoint.keep = int(std::min<int64_t>(keep, 1000000));
  }
  if (auto f = j.find("init_from"); f != j.end() && !f->is_null()) {
    FS_RETURN_IF_ERROR(CheckFields(*f, "init_from", {"job", "step"}));
    InitFromSpec from;
    FS_RETURN_IF_ERROR(GetString(*f, "init_from", "job", &from.job, true));
    if (from.job.empty()) return Bad("init_from.job", "must name a job");
    if (f->find("step") == f->end() || (*f)["step"].is_null()) return Bad("init_from.step", "is required");
    FS_RETURN_IF_ERROR(GetInt(*f, "init_from", "step", &from.step, 0));
    job.init_from = from;
  }
  if (auto d = j.find("devices"); d != j.end() && !d->is_null()) {
    if (!d->is_array()) return Bad("devices", "expected a list of device names");
    for (size_t k = 0; k < d->size(); ++k) {
      if (!(*d)[k].is_string()) return Bad("devices[" + std::to_string(k) + "]", "expected a device name");
      job.devices.push_back((*d)[k].get<std::string>());
    }
  }
  int64_t replicas = 1;
  FS_RETURN_IF_ERROR(GetInt(j, "", "replicas", &replicas, 1));
  job.replicas = int(std::min<int64_t>(replicas, 1024));
  int64_t seed = 0;
  FS_RETURN_IF_ERROR(GetInt(j, "", "seed", &seed, 0));
  job.seed = uint64_t(seed);
  int64_t max_steps = 0;
  FS_RETURN_IF_ERROR(GetInt(j, "", "max_steps", &max_steps, 1));
  if (max_steps > 0) job.max_steps = max_steps;
  std::string on_nan = "fail";
  FS_RETURN_IF_ERROR(GetString(j, "", "on_nan", &on_nan));
  if (on_nan == "skip_step") {
    job.on_nan = OnNan::kSkipStep;
  } else if (on_nan != "fail") {
    return Bad("on_nan", "expected \"fail\" or \"skip_step\"");
  }
  return job;
}

}  // namespace flowstate

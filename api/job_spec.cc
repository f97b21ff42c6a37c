#include "api/job_spec.h"

#include <algorithm>
#include <cmath>
#include <initializer_list>
#include <string_view>

#include "api/json_codec.h"
#include "api/json_internal.h"

namespace flowstate {
namespace {

using api::internal::CheckObject;
using api::internal::FindField;
using api::internal::Json;
using api::internal::JsonPath;
using api::internal::PathError;
using api::internal::ReadBoolField;
using api::internal::ReadIntField;
using api::internal::ReadNumberField;
using api::internal::ReadString;
using api::internal::ReadStringField;

// A required member: "<path>.<key>: is required" when absent or null.
StatusOr<const Json*> Required(const Json& o, const JsonPath& path, std::string_view key) {
  const Json* v = FindField(o, key);
  if (v == nullptr) return PathError(path.Key(key), "is required");
  return v;
}

// A non-empty list of strings (node names, device names); `what` names one.
Status ReadStringList(const Json& v, const JsonPath& path, std::string_view what,
                      bool non_empty, std::vector<std::string>* out) {
  if (!v.is_array() || (non_empty && v.empty())) {
    return PathError(path, std::string(non_empty ? "expected a non-empty list of " : "expected a list of ") +
                               std::string(what) + "s");
  }
  for (size_t k = 0; k < v.size(); ++k) {
    if (!v[k].is_string()) {
      return PathError(path.Index(int64_t(k)), "expected a " + std::string(what));
    }
    out->push_back(v[k].get<std::string>());
  }
  return Status();
}

Status ParseColumns(const Json& c, const JsonPath& path, DataSpec* d) {
  if (d->format != "csv") return PathError(path, "only applies to format \"csv\"");
  if (!c.is_object()) return PathError(path, "expected an object");
  d->columns.clear();  // given here: replaces what eval inherited from input
  for (auto it = c.begin(); it != c.end(); ++it) {
    const JsonPath cp = path.Key(it.key());
    CsvColumns cols;
    const Json* list = &*it;
    if (it->is_object()) {
      FS_RETURN_IF_ERROR(CheckObject(*it, cp, "a column spec", {"columns", "dtype"}));
      FS_RETURN_IF_ERROR(ReadStringField(*it, cp, "dtype", &cols.dtype));
      FS_ASSIGN_OR_RETURN(list, Required(*it, cp, "columns"));
    }
    if (!list->is_array() || list->empty()) {
      return PathError(cp, "expected a non-empty list of column indices or names");
    }
    for (size_t k = 0; k < list->size(); ++k) {
      const Json& e = (*list)[k];
      if (e.is_number_integer() && e.get<int64_t>() >= 0 && e.get<int64_t>() <= (1 << 30)) {
        cols.indices.push_back(int(e.get<int64_t>()));
      } else if (e.is_string()) {
        cols.names.push_back(e.get<std::string>());
      } else {
        return PathError(cp.Index(int64_t(k)), "expected a column index or name");
      }
    }
    if (!cols.indices.empty() && !cols.names.empty()) {
      return PathError(cp, "use either column indices or names, not both");
    }
    d->columns[it.key()] = cols;
  }
  return Status();
}

// The fields input and eval share; `allowed` is the object's whole field list.
Status ParseData(const Json& o, const JsonPath& path, std::string_view what,
                 std::initializer_list<std::string_view> allowed, DataSpec* d) {
  FS_RETURN_IF_ERROR(CheckObject(o, path, what, allowed));
  FS_RETURN_IF_ERROR(ReadStringField(o, path, "format", &d->format));
  if (d->format != "idx" && d->format != "csv" && d->format != "npy") {
    return PathError(path.Key("format"), "must be \"idx\", \"csv\" or \"npy\", got \"" + d->format + "\"");
  }
  FS_ASSIGN_OR_RETURN(const Json* files, Required(o, path, "files"));
  if (!files->is_object() || files->empty()) {
    return PathError(path.Key("files"), "expected an object mapping placeholder names to paths");
  }
  for (auto it = files->begin(); it != files->end(); ++it) {
    if (!it->is_string()) return PathError(path.Key("files").Key(it.key()), "expected a path string");
    d->files[it.key()] = it->get<std::string>();
  }
  if (const Json* c = FindField(o, "columns")) {
    FS_RETURN_IF_ERROR(ParseColumns(*c, path.Key("columns"), d));
  }
  FS_RETURN_IF_ERROR(ReadBoolField(o, path, "header", &d->header));
  std::string delim;
  FS_RETURN_IF_ERROR(ReadStringField(o, path, "delimiter", &delim));
  if (!delim.empty()) {
    if (delim.size() != 1) return PathError(path.Key("delimiter"), "must be one character");
    d->delimiter = delim[0];
  }
  FS_RETURN_IF_ERROR(ReadIntField(o, path, "batch_size", &d->batch_size, 1));
  int64_t max_examples = -1;
  FS_RETURN_IF_ERROR(ReadIntField(o, path, "max_examples", &max_examples, 1));
  if (max_examples > 0) d->max_examples = max_examples;
  return Status();
}

Status ParseSchedule(const Json& s, const JsonPath& sp, LearningRateSchedule* sc) {
  FS_RETURN_IF_ERROR(CheckObject(s, sp, "a schedule",
                                 {"type", "decay_steps", "decay_rate", "staircase", "alpha"}));
  std::string type = "constant";
  FS_RETURN_IF_ERROR(ReadStringField(s, sp, "type", &type));
  if (type == "constant") {
    sc->kind = LearningRateSchedule::Kind::kConstant;
  } else if (type == "exponential_decay") {
    sc->kind = LearningRateSchedule::Kind::kExponentialDecay;
  } else if (type == "cosine_decay" || type == "cosine") {
    sc->kind = LearningRateSchedule::Kind::kCosineDecay;
  } else {
    return PathError(sp.Key("type"), "must be constant, exponential_decay or cosine_decay");
  }
  FS_RETURN_IF_ERROR(ReadIntField(s, sp, "decay_steps", &sc->decay_steps, 1));
  FS_RETURN_IF_ERROR(ReadNumberField(s, sp, "decay_rate", &sc->decay_rate));
  FS_RETURN_IF_ERROR(ReadBoolField(s, sp, "staircase", &sc->staircase));
  return ReadNumberField(s, sp, "alpha", &sc->alpha);
}

Status ParseOptimizer(const Json& o, JobSpec* job) {
  const JsonPath p("optimizer");
  FS_RETURN_IF_ERROR(CheckObject(o, p, "an optimizer",
                                 {"type", "learning_rate", "momentum", "nesterov", "beta1", "beta2",
                                  "epsilon", "rho", "initial_accumulator", "clip_global_norm",
                                  "sparse_updates", "schedule"}));
  FS_RETURN_IF_ERROR(ReadStringField(o, p, "type", &job->optimizer_type, true));
  StatusOr<OptimizerOptions::Kind> kind = OptimizerKindFromString(job->optimizer_type);
  if (!kind.ok()) return PathError(p.Key("type"), kind.status().message());
  OptimizerOptions& opt = job->optimizer;
  opt.kind = *kind;
  FS_RETURN_IF_ERROR(ReadNumberField(o, p, "learning_rate", &opt.learning_rate));
  FS_RETURN_IF_ERROR(ReadNumberField(o, p, "momentum", &opt.momentum));
  FS_RETURN_IF_ERROR(ReadBoolField(o, p, "nesterov", &opt.nesterov));
  FS_RETURN_IF_ERROR(ReadNumberField(o, p, "beta1", &opt.beta1));
  FS_RETURN_IF_ERROR(ReadNumberField(o, p, "beta2", &opt.beta2));
  FS_RETURN_IF_ERROR(ReadNumberField(o, p, "epsilon", &opt.epsilon));
  FS_RETURN_IF_ERROR(ReadNumberField(o, p, "rho", &opt.rho));
  FS_RETURN_IF_ERROR(ReadNumberField(o, p, "initial_accumulator", &opt.initial_accumulator));
  FS_RETURN_IF_ERROR(ReadNumberField(o, p, "clip_global_norm", &opt.clip_global_norm));
  FS_RETURN_IF_ERROR(ReadBoolField(o, p, "sparse_updates", &opt.sparse_updates));
  if (const Json* s = FindField(o, "schedule")) {
    FS_RETURN_IF_ERROR(ParseSchedule(*s, p.Key("schedule"), &opt.schedule));
  }
  // Range checks, with the field's path.
  return ValidateOptimizerOptions(opt);
}

Status ParseInput(const Json& in, JobSpec* job) {
  const JsonPath p("input");
  FS_RETURN_IF_ERROR(ParseData(in, p, "an input",
                               {"format", "files", "columns", "header", "delimiter", "batch_size",
                                "max_examples", "shuffle", "epochs", "drop_remainder", "prefetch"},
                               &job->input));
  FS_RETURN_IF_ERROR(ReadBoolField(in, p, "shuffle", &job->input.shuffle));
  FS_RETURN_IF_ERROR(ReadIntField(in, p, "epochs", &job->input.epochs, 1));
  FS_RETURN_IF_ERROR(ReadBoolField(in, p, "drop_remainder", &job->input.drop_remainder));
  int64_t prefetch = job->input.prefetch;
  FS_RETURN_IF_ERROR(ReadIntField(in, p, "prefetch", &prefetch, 0));
  job->input.prefetch = int(std::min<int64_t>(prefetch, 1024));
  return Status();
}

Status ParseEval(const Json& e, JobSpec* job) {
  const JsonPath p("eval");
  // What eval does not say comes from input: the format, the batch size
  // and, for CSV, the columns, header and delimiter.
  EvalSpec ev;
  ev.format = job->input.format;
  ev.batch_size = job->input.batch_size;
  ev.columns = job->input.columns;
  ev.header = job->input.header;
  ev.delimiter = job->input.delimiter;
  FS_RETURN_IF_ERROR(ParseData(e, p, "an eval",
                               {"format", "files", "columns", "header", "delimiter", "batch_size",
                                "max_examples", "metrics", "every_epochs"},
                               &ev));
  if (ev.format != "csv") {
    ev.columns.clear();
    ev.header.reset();
    ev.delimiter = ',';
  }
  const Json* m = FindField(e, "metrics");
  FS_RETURN_IF_ERROR(
      ReadStringList(m ? *m : Json(), p.Key("metrics"), "node name", /*non_empty=*/true, &ev.metrics));
  FS_RETURN_IF_ERROR(ReadIntField(e, p, "every_epochs", &ev.every_epochs, 1));
  job->eval = ev;
  return Status();
}

Status ParseCheckpoint(const Json& c, CheckpointSpec* policy) {
  const JsonPath p("checkpoint");
  FS_RETURN_IF_ERROR(CheckObject(c, p, "a checkpoint policy", {"every_steps", "every_seconds", "keep"}));
  FS_RETURN_IF_ERROR(ReadIntField(c, p, "every_steps", &policy->every_steps, 0));
  FS_RETURN_IF_ERROR(ReadNumberField(c, p, "every_seconds", &policy->every_seconds));
  if (policy->every_seconds < 0) return PathError(p.Key("every_seconds"), "must be >= 0");
  int64_t keep = policy->keep;
  FS_RETURN_IF_ERROR(ReadIntField(c, p, "keep", &keep, 1));
  policy->keep = int(std::min<int64_t>(keep, 1000000));
  return Status();
}

Status ParseInitFrom(const Json& f, JobSpec* job) {
  const JsonPath p("init_from");
  FS_RETURN_IF_ERROR(CheckObject(f, p, "an init_from", {"job", "step"}));
  InitFromSpec from;
  FS_RETURN_IF_ERROR(ReadStringField(f, p, "job", &from.job, true));
  if (from.job.empty()) return PathError(p.Key("job"), "must name a job");
  FS_RETURN_IF_ERROR(ReadIntField(f, p, "step", &from.step, 0, /*required=*/true));
  job->init_from = from;
  return Status();
}

Status ParseTrace(const Json& t, JobSpec* job) {
  const JsonPath p("trace");
  FS_RETURN_IF_ERROR(CheckObject(t, p, "a trace spec", {"steps"}));
  FS_ASSIGN_OR_RETURN(const Json* steps, Required(t, p, "steps"));
  const JsonPath sp = p.Key("steps");
  if (!steps->is_array() || steps->empty()) return PathError(sp, "expected a non-empty list of step numbers");
  if (steps->size() > size_t(kMaxTracedSteps)) {
    return PathError(sp, "at most " + std::to_string(kMaxTracedSteps) + " steps can be traced, got " +
                             std::to_string(steps->size()));
  }
  std::vector<int64_t> out;
  for (size_t k = 0; k < steps->size(); ++k) {
    const Json& v = (*steps)[k];
    const JsonPath ep = sp.Index(int64_t(k));
    if (!v.is_number_integer() && !(v.is_number_float() && v.get<double>() == std::floor(v.get<double>()))) {
      return PathError(ep, "expected a step number (an integer >= 1)");
    }
    const double d = v.get<double>();
    if (d < 1 || d > 9.0e15) return PathError(ep, "expected a step number (an integer >= 1)");
    const int64_t step = int64_t(d);
    if (std::find(out.begin(), out.end(), step) != out.end()) {
      return PathError(ep, "step " + std::to_string(step) + " is listed twice");
    }
    out.push_back(step);
  }
  std::sort(out.begin(), out.end());
  job->trace_steps = std::move(out);
  return Status();
}

Status ParseModel(const Json& m, JobSpec* job) {
  const JsonPath p("model");
  FS_RETURN_IF_ERROR(CheckObject(m, p, "a model", {"onnx", "inputs", "output", "labels", "loss"}));
  ModelSpec spec;
  FS_RETURN_IF_ERROR(ReadStringField(m, p, "onnx", &spec.onnx, true));
  if (spec.onnx.empty()) return PathError(p.Key("onnx"), "must not be empty");
  FS_ASSIGN_OR_RETURN(const Json* inputs, Required(m, p, "inputs"));
  if (!inputs->is_object() || inputs->empty()) {
    return PathError(p.Key("inputs"), "expected an object mapping dataset fields to ONNX inputs");
  }
  const JsonPath inputs_path = p.Key("inputs");  // the parent of ip (paths point to their parents)
  for (auto it = inputs->begin(); it != inputs->end(); ++it) {
    const JsonPath ip = inputs_path.Key(it.key());
    OnnxFeedSpec feed;
    if (it->is_string()) {
      feed.input = it->get<std::string>();
    } else if (it->is_object()) {
      FS_RETURN_IF_ERROR(CheckObject(*it, ip, "an input", {"input", "scale", "shift"}));
      FS_RETURN_IF_ERROR(ReadStringField(*it, ip, "input", &feed.input, true));
      FS_RETURN_IF_ERROR(ReadNumberField(*it, ip, "scale", &feed.scale));
      FS_RETURN_IF_ERROR(ReadNumberField(*it, ip, "shift", &feed.shift));
      if (!std::isfinite(feed.scale)) return PathError(ip.Key("scale"), "must be finite");
      if (!std::isfinite(feed.shift)) return PathError(ip.Key("shift"), "must be finite");
    } else {
      return PathError(ip, "expected the name of an ONNX input or {\"input\", \"scale\", \"shift\"}");
    }
    if (feed.input.empty()) return PathError(ip, "names no ONNX input");
    spec.inputs[it.key()] = feed;
  }
  FS_RETURN_IF_ERROR(ReadStringField(m, p, "output", &spec.output));
  FS_RETURN_IF_ERROR(ReadStringField(m, p, "labels", &spec.labels));
  FS_RETURN_IF_ERROR(ReadStringField(m, p, "loss", &spec.loss));
  const std::vector<std::string>& losses = OnnxLossNames();
  if (std::find(losses.begin(), losses.end(), spec.loss) == losses.end()) {
    std::string names;
    for (const std::string& n : losses) names += (names.empty() ? "\"" : ", \"") + n + "\"";
    return PathError(p.Key("loss"), "unknown loss \"" + spec.loss + "\" (expected one of " + names + ")");
  }
  if (spec.loss == "output") {
    if (!spec.labels.empty()) {
      return PathError(p.Key("labels"), "a model whose output is its loss takes no labels "
                                        "(feed the targets through \"inputs\")");
    }
  } else if (spec.labels.empty()) {
    return PathError(p.Key("labels"), "is required (the dataset field holding the targets)");
  } else if (spec.inputs.count(spec.labels)) {
    return PathError(p.Key("labels"), "field \"" + spec.labels + "\" is also one of \"inputs\"");
  }
  job->model = std::move(spec);
  return Status();
}

}  // namespace

const std::vector<std::string>& OnnxLossNames() {
  static const std::vector<std::string>* names = new std::vector<std::string>{
      "softmax_cross_entropy", "mse", "binary_cross_entropy", "binary_cross_entropy_with_logits",
      "output"};
  return *names;
}

StatusOr<JobSpec> ParseJobSpec(std::string_view text) {
  const JsonPath root("");
  Json j;
  FS_RETURN_IF_ERROR(api::internal::ParseJsonText(text, root, &j));
  JobSpec job;
  FS_RETURN_IF_ERROR(CheckObject(j, root, "a job",
                                 {"name", "graph", "model", "loss", "optimizer", "input", "eval",
                                  "checkpoint", "devices", "replicas", "seed", "max_steps",
                                  "init_from", "on_nan", "bucket_bytes", "sparse_as_dense", "partitioned_tables", "backup_replicas",
                                  "check_replicas_every", "deterministic", "min_replicas",
                                  "replica_wait_seconds", "replicas_per_task",
                                  "trace"}));
  FS_RETURN_IF_ERROR(ReadStringField(j, root, "name", &job.name));
  const Json* graph = FindField(j, "graph");
  const Json* model = FindField(j, "model");
  if (graph != nullptr && model != nullptr) {
    return PathError(root.Key("model"), "give either \"graph\" or \"model\", not both");
  }
  if (model != nullptr) {
    FS_RETURN_IF_ERROR(ParseModel(*model, &job));
    if (FindField(j, "loss") != nullptr) {
      return PathError(root.Key("loss"), "is set by \"model\" (model.loss and model.output)");
    }
  } else {
    if (graph == nullptr) return PathError(root.Key("graph"), "is required (or \"model\")");
    FS_ASSIGN_OR_RETURN(job.graph, api::internal::GraphFromJson(*graph, root.Key("graph"), {}));
    FS_RETURN_IF_ERROR(ReadStringField(j, root, "loss", &job.loss, true));
  }
  FS_ASSIGN_OR_RETURN(const Json* optimizer, Required(j, root, "optimizer"));
  FS_RETURN_IF_ERROR(ParseOptimizer(*optimizer, &job));
  FS_ASSIGN_OR_RETURN(const Json* input, Required(j, root, "input"));
  FS_RETURN_IF_ERROR(ParseInput(*input, &job));
  if (const Json* e = FindField(j, "eval")) FS_RETURN_IF_ERROR(ParseEval(*e, &job));
  if (const Json* c = FindField(j, "checkpoint")) FS_RETURN_IF_ERROR(ParseCheckpoint(*c, &job.checkpoint));
  if (const Json* f = FindField(j, "init_from")) FS_RETURN_IF_ERROR(ParseInitFrom(*f, &job));
  if (const Json* d = FindField(j, "devices")) {
    FS_RETURN_IF_ERROR(ReadStringList(*d, root.Key("devices"), "device name", false, &job.devices));
  }
  int64_t replicas = 1;
  FS_RETURN_IF_ERROR(ReadIntField(j, root, "replicas", &replicas, 1));
  job.replicas = int(std::min<int64_t>(replicas, 1024));
  int64_t per_task = 0;
  FS_RETURN_IF_ERROR(ReadIntField(j, root, "replicas_per_task", &per_task, 1));
  if (per_task > 0 && !job.devices.empty()) {
    return PathError(root.Key("replicas_per_task"),
                     "places replicas on the cluster's tasks by itself; leave it out when "
                     "\"devices\" names each replica's device");
  }
  job.replicas_per_task = int(std::min<int64_t>(per_task, 1024));
  FS_RETURN_IF_ERROR(ReadIntField(j, root, "bucket_bytes", &job.bucket_bytes, 1));
  FS_RETURN_IF_ERROR(ReadBoolField(j, root, "sparse_as_dense", &job.sparse_as_dense));
  int64_t backup = 0;
  FS_RETURN_IF_ERROR(ReadIntField(j, root, "backup_replicas", &backup, 0));
  if (backup >= job.replicas && backup > 0) {
    return PathError(root.Key("backup_replicas"),
                     "must be less than replicas (" + std::to_string(job.replicas) + ")");
  }
  job.backup_replicas = int(backup);
  int64_t min_replicas = job.replicas;
  FS_RETURN_IF_ERROR(ReadIntField(j, root, "min_replicas", &min_replicas, 1));
  if (min_replicas > job.replicas) {
    return PathError(root.Key("min_replicas"),
                     "must be at most replicas (" + std::to_string(job.replicas) + ")");
  }
  job.min_replicas = int(min_replicas);
  std::string tables = "replicated";
  FS_RETURN_IF_ERROR(ReadStringField(j, root, "partitioned_tables", &tables));
  if (tables != "replicated" && tables != "shared") {
    return PathError(root.Key("partitioned_tables"), "expected \"replicated\" or \"shared\"");
  }
  job.shared_tables = tables == "shared";
  if (job.shared_tables && job.backup_replicas > 0) {
    return PathError(root.Key("partitioned_tables"),
                     "\"shared\" tables cannot go with backup_replicas (a step that goes on "
                     "without a replica would go on without the parts it holds)");
  }
  if (job.shared_tables && job.sparse_as_dense) {
    return PathError(root.Key("partitioned_tables"),
                     "\"shared\" tables need their gradients as rows; leave out sparse_as_dense");
  }
  FS_RETURN_IF_ERROR(ReadNumberField(j, root, "replica_wait_seconds", &job.replica_wait_seconds));
  if (!(job.replica_wait_seconds >= 0) || job.replica_wait_seconds > 1e7) {
    return PathError(root.Key("replica_wait_seconds"), "must be between 0 and 1e7 seconds");
  }
  FS_RETURN_IF_ERROR(ReadIntField(j, root, "check_replicas_every", &job.check_replicas_every, 0));
  FS_RETURN_IF_ERROR(ReadBoolField(j, root, "deterministic", &job.deterministic));
  if (job.deterministic && job.backup_replicas > 0) {
    return PathError(root.Key("deterministic"),
                     "a deterministic job cannot have backup_replicas (which replicas "
                     "contribute to a step depends on timing)");
  }
  int64_t seed = 0;
  FS_RETURN_IF_ERROR(ReadIntField(j, root, "seed", &seed, 0));
  job.seed = uint64_t(seed);
  int64_t max_steps = 0;
  FS_RETURN_IF_ERROR(ReadIntField(j, root, "max_steps", &max_steps, 1));
  if (max_steps > 0) job.max_steps = max_steps;
  if (const Json* t = FindField(j, "trace")) {
    FS_RETURN_IF_ERROR(ParseTrace(*t, &job));
  }
  std::string on_nan = "fail";
  FS_RETURN_IF_ERROR(ReadStringField(j, root, "on_nan", &on_nan));
  if (on_nan == "skip_step") {
    job.on_nan = OnNan::kSkipStep;
  } else if (on_nan != "fail") {
    return PathError(root.Key("on_nan"), "expected \"fail\" or \"skip_step\"");
  }
  return job;
}

}  // namespace flowstate

#include "jobs/onnx_model.h"

#include <algorithm>
#include <map>
#include <set>

#include "api/onnx/onnx_export.h"
#include "api/onnx/onnx_import.h"
#include "graph/op_builders.h"
#include "graph/scope.h"
#include "jobs/training_job.h"
#include "state/data_path.h"
#include "state/data_source.h"
#include "state/input_file.h"

namespace flowstate {
namespace {

bool EndsWith(const std::string& s, std::string_view tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

// Renames node `from` to `to` and every reference to it.
void RenameNode(GraphDef* g, const std::string& from, const std::string& to) {
  for (NodeDef& n : g->nodes) {
    if (n.name == from) n.name = to;
    for (std::string& in : n.inputs) {
      const bool control = !in.empty() && in[0] == '^';
      std::string_view body = control ? std::string_view(in).substr(1) : std::string_view(in);
      size_t colon = body.rfind(':');
      std::string_view node = colon == std::string_view::npos ? body : body.substr(0, colon);
      if (node != from) continue;
      in = (control ? "^" : "") + to +
           (colon == std::string_view::npos ? "" : std::string(body.substr(colon)));
    }
  }
}

std::string TensorNode(const std::string& tensor) {
  size_t colon = tensor.rfind(':');
  return colon == std::string::npos ? tensor : tensor.substr(0, colon);
}

StatusOr<std::string> ReadModelBytes(const ModelSpec& m, const std::string& data_root,
                                     const ModelReader& read_model, std::string* external_dir) {
  if (NamesOnnxFile(m.onnx)) {
    StatusOr<DataFile> f = OpenDataFile(data_root, m.onnx);
    if (!f.ok()) return f.status().WithPrefix("model.onnx");
    StatusOr<std::string> bytes = ReadInputFile(std::move(f).value());
    if (!bytes.ok()) return bytes.status().WithPrefix("model.onnx");
    StatusOr<std::string> resolved = ResolveDataPath(data_root, m.onnx);
    if (resolved.ok()) {
      size_t slash = resolved->rfind('/');
      *external_dir = slash == std::string::npos ? "." : resolved->substr(0, slash);
    }
    return bytes;
  }
  const std::string hint = " (upload one with POST /v1/models, or name a file ending in "
                           "\".onnx\" beneath the data root)";
  if (!read_model) {
    return InvalidArgument("model.onnx: this server keeps no uploaded models" + hint);
  }
  StatusOr<std::string> bytes = read_model(m.onnx);
  if (!bytes.ok() && bytes.status().code() == Code::kNotFound) {
    return InvalidArgument("model.onnx: there is no uploaded model '" + m.onnx + "'" + hint);
  }
  if (!bytes.ok()) return bytes.status().WithPrefix("model.onnx");
  return bytes;
}

}  // namespace

bool NamesOnnxFile(const std::string& onnx) { return EndsWith(onnx, ".onnx"); }

StatusOr<std::string> ExportTrainedModel(const OnnxSource& source, const InitialValues& values) {
  std::map<std::string, const Tensor*> by_variable;
  for (const auto& [name, t] : values) by_variable[name] = &t;
  std::map<std::string, Tensor> by_initializer;
  for (const auto& [onnx_name, variable] : source.variables) {
    auto it = by_variable.find(variable);
    if (it == by_variable.end()) return Internal("the trained model has no variable '" + variable + "'");
    by_initializer[onnx_name] = *it->second;
  }
  OnnxImportOptions o;
  o.training = true;
  o.external_data_dir = source.external_data_dir;
  o.data_root = source.data_root;
  return ExportTrainedOnnx(source.bytes, by_initializer, o);
}

StatusOr<ResolvedModel> ResolveOnnxModel(const JobSpec& job, const std::string& data_root,
                                         const ModelReader& read_model) {
  if (!job.model) return InvalidArgument("model: the job has no \"model\"");
  const ModelSpec& m = *job.model;
  ResolvedModel out;
  out.spec = job;

  OnnxImportOptions io;
  io.training = true;
  auto source = std::make_shared<OnnxSource>();
  FS_ASSIGN_OR_RETURN(source->bytes, ReadModelBytes(m, data_root, read_model, &io.external_data_dir));
  if (!io.external_data_dir.empty()) io.data_root = data_root;
  source->external_data_dir = io.external_data_dir;
  source->data_root = io.data_root;
  StatusOr<ImportedModel> imported = ImportOnnx(source->bytes, io);
  if (!imported.ok()) return imported.status().WithPrefix("model.onnx");
  ImportedModel& model = *imported;

  // The dataset's fields: each feeds an ONNX input or is the labels.
  for (const auto& [field, file] : job.input.files) {
    if (!m.inputs.count(field) && field != m.labels) {
      return InvalidArgument("input.files." + field + ": field '" + field +
                             "' is neither one of model.inputs nor model.labels");
    }
  }
  auto need_field = [&](const std::string& field, const std::string& where) -> Status {
    if (job.input.files.count(field)) return Status();
    std::string have;
    for (const auto& [f, file] : job.input.files) have += (have.empty() ? "" : ", ") + f;
    return InvalidArgument(where + ": the dataset has no field '" + field + "' (input.files has " +
                           have + ")");
  };
  for (const auto& [field, feed] : m.inputs) FS_RETURN_IF_ERROR(need_field(field, "model.inputs." + field));
  if (!m.labels.empty()) FS_RETURN_IF_ERROR(need_field(m.labels, "model.labels"));
  StatusOr<DataSource> data = ToDataSource(job.input, "input");
  if (!data.ok()) return data.status();
  StatusOr<std::map<std::string, DataType>> types = DataSourceTypes(data_root, *data);
  if (!types.ok()) return types.status().WithPrefix("input.files");

  // Which ONNX input each field feeds; every ONNX input must be fed.
  std::map<std::string, const OnnxTensorInfo*> onnx_inputs;
  for (const OnnxTensorInfo& in : model.inputs) onnx_inputs[in.onnx_name] = &in;
  std::set<std::string> fed;
  for (const auto& [field, feed] : m.inputs) {
    if (!onnx_inputs.count(feed.input)) {
      std::string names;
      for (const OnnxTensorInfo& in : model.inputs) names += (names.empty() ? "'" : ", '") + in.onnx_name + "'";
      return InvalidArgument("model.inputs." + field + ": the ONNX model has no input '" + feed.input +
                             "' (its inputs: " + names + ")");
    }
    if (!fed.insert(feed.input).second) {
      return InvalidArgument("model.inputs." + field + ": ONNX input '" + feed.input +
                             "' is fed by another field too");
    }
  }
  for (const OnnxTensorInfo& in : model.inputs) {
    if (!fed.count(in.onnx_name)) {
      return InvalidArgument("model.inputs: no dataset field feeds the ONNX input '" + in.onnx_name + "'");
    }
  }
  // The output the loss reads.
  const OnnxTensorInfo* output = nullptr;
  std::string outputs;
  for (const OnnxTensorInfo& o : model.outputs) {
    outputs += (outputs.empty() ? "'" : ", '") + o.onnx_name + "'";
    if (o.onnx_name == m.output) output = &o;
  }
  if (m.output.empty()) {
    if (model.outputs.size() != 1) {
      return InvalidArgument("model.output: the ONNX model has " + std::to_string(model.outputs.size()) +
                             " outputs (" + outputs + "); name the one the loss reads");
    }
    output = &model.outputs[0];
  } else if (output == nullptr) {
    return InvalidArgument("model.output: the ONNX model has no output '" + m.output + "' (its outputs: " +
                           outputs + ")");
  }
  if (!IsFloating(output->dtype)) {
    return InvalidArgument("model.output: the ONNX output '" + output->onnx_name + "' is " +
                           std::string(DataTypeName(output->dtype)) + "; a loss needs floating point");
  }

  // The names this adds at the top of the graph; imported nodes holding
  // them are renamed.
  GraphDef g = std::move(model.graph);
  std::set<std::string> taken;
  for (const NodeDef& n : g.nodes) taken.insert(n.name);
  std::vector<std::string> ours;
  for (const auto& [field, feed] : m.inputs) ours.push_back(field);
  if (!m.labels.empty()) ours.push_back(m.labels);
  for (const char* n : {"loss", "accuracy", "job"}) ours.push_back(n);
  std::map<std::string, std::string> renamed;  // imported name -> new name
  for (const std::string& name : ours) {
    if (!taken.count(name)) continue;
    std::string to = "onnx/" + name;
    for (int k = 1; taken.count(to); ++k) to = "onnx/" + name + "_" + std::to_string(k);
    RenameNode(&g, name, to);
    taken.insert(to);
    renamed[name] = to;
  }
  auto now = [&](const std::string& tensor) {
    auto it = renamed.find(TensorNode(tensor));
    return it == renamed.end() ? tensor : it->second + tensor.substr(TensorNode(tensor).size());
  };
  for (auto& [var, value] : model.initial_values) var = now(var);
  for (const OnnxTensorInfo& v : model.variables) source->variables.emplace_back(v.onnx_name, now(v.tensor));
  out.source = std::move(source);

  Scope root(std::move(g));
  std::map<std::string, std::string> feeds;  // ONNX input's Placeholder -> its new input
  Scope js = root.NewSubScope("job");
  // Inputs.
  for (const auto& [field, feed] : m.inputs) {
    const OnnxTensorInfo& in = *onnx_inputs.at(feed.input);
    const std::string where = "model.inputs." + field;
    const DataType from = types->at(field);
    Scope fs = js.NewSubScope(field);
    Output x = ops::Placeholder(root.WithOpName(field), from);
    if (from != in.dtype) x = ops::Cast(fs.WithOpName("cast"), x, in.dtype);
    if (feed.scale != 1 || feed.shift != 0) {
      if (!IsFloating(in.dtype)) {
        return InvalidArgument(where + ": scale and shift need a floating-point ONNX input; '" +
                               feed.input + "' is " + std::string(DataTypeName(in.dtype)));
      }
      if (feed.scale != 1) {
        x = ops::Mul(fs.WithOpName("scale"), x, ops::Cast(fs, ops::Const(fs, feed.scale), in.dtype));
      }
      if (feed.shift != 0) {
        x = ops::Add(fs.WithOpName("shift"), x, ops::Cast(fs, ops::Const(fs, feed.shift), in.dtype));
      }
    }
    // The input's shape, batch first, when its other dimensions are known.
    if (in.shape.rank_known() && in.shape.rank() >= 1) {
      std::vector<int32_t> dims{-1};
      bool known = true;
      for (int i = 1; i < in.shape.rank(); ++i) {
        known = known && in.shape.dim(i) >= 0;
        dims.push_back(int32_t(in.shape.dim(i)));
      }
      if (known) x = ops::Reshape(fs.WithOpName("reshape"), x, dims);
    }
    // The ONNX input's Placeholder becomes an Identity of what the field
    // gives (below, once every node is added).
    feeds[TensorNode(now(in.tensor))] = x.name();
  }
  // The loss.
  Output y = Output(now(output->tensor));
  Scope ls = js.NewSubScope("loss");
  Output loss;
  if (m.loss == "output") {
    loss = ops::Mean(ls, ops::Reshape(ls, y, std::vector<int32_t>{-1}), std::vector<int32_t>{0});
  } else {
    const DataType lt = types->at(m.labels);
    Output labels = ops::Placeholder(root.WithOpName(m.labels), lt);
    if (m.loss == "softmax_cross_entropy") {
      if (output->shape.rank_known() && output->shape.rank() != 2) {
        return InvalidArgument("model.output: softmax_cross_entropy reads logits [batch, classes]; the ONNX "
                               "output '" + output->onnx_name + "' is " + output->shape.ToString());
      }
      Output l = labels;
      if (lt != DataType::kInt32 && lt != DataType::kInt64 && lt != DataType::kUInt8) {
        l = ops::Cast(ls.WithOpName("labels"), l, DataType::kInt64);
      }
      l = ops::Reshape(ls, l, std::vector<int32_t>{-1});
      std::vector<Output> xent = ops::Generic(ls.WithOpName("xent"), "SparseSoftmaxCrossEntropyWithLogits",
                                              {y, l}, {}, 2);
      loss = ops::Mean(ls, xent[0], std::vector<int32_t>{0});
      Scope as = js.NewSubScope("accuracy");
      Output right = ops::Equal(as, ops::ArgMax(as, y, 1, DataType::kInt64),
                                ops::Cast(as, l, DataType::kInt64));
      Output acc = ops::Mean(as, ops::Cast(as, right, DataType::kFloat32), std::vector<int32_t>{0});
      ops::Identity(root.WithOpName("accuracy"), acc);
    } else {
      const DataType ft = output->dtype;
      Output flat_y = ops::Reshape(ls, y, std::vector<int32_t>{-1});
      Output flat_l = ops::Reshape(ls, ops::Cast(ls, labels, ft), std::vector<int32_t>{-1});
      Output per;
      if (m.loss == "mse") {
        Output d = ops::Sub(ls, flat_y, flat_l);
        per = ops::Mul(ls, d, d);
      } else if (m.loss == "binary_cross_entropy_with_logits") {
        per = ops::Generic(ls.WithOpName("xent"), "SigmoidCrossEntropyWithLogits", {flat_l, flat_y})[0];
      } else {  // binary_cross_entropy, over probabilities
        auto c = [&](double v) { return ops::Cast(ls, ops::Const(ls, v), ft); };
        Output p = ops::Minimum(ls, ops::Maximum(ls, flat_y, c(1e-7)), c(1 - 1e-7));
        Output pos = ops::Mul(ls, flat_l, ops::Log(ls, p));
        Output neg = ops::Mul(ls, ops::Sub(ls, c(1), flat_l), ops::Log(ls, ops::Sub(ls, c(1), p)));
        per = ops::Sub(ls, c(0), ops::Add(ls, pos, neg));
      }
      loss = ops::Mean(ls, per, std::vector<int32_t>{0});
    }
  }
  ops::Identity(root.WithOpName("loss"), loss);
  out.spec.graph = root.graph_def();
  for (NodeDef& n : out.spec.graph.nodes) {
    auto it = feeds.find(n.name);
    if (it == feeds.end()) continue;
    n.op = "Identity";
    n.inputs = {it->second};
    n.attrs.clear();
  }
  out.spec.loss = "loss";
  out.initial_values = std::make_shared<const InitialValues>(std::move(model.initial_values));
  return out;
}

}  // namespace flowstate

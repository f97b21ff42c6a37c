#include "api/onnx/onnx_import.h"

#include <onnx/checker.h>
#include <onnx/defs/schema.h>
#include <onnx/onnx_pb.h>
#include <onnx/shape_inference/implementation.h>
#include <onnx/version_converter/convert.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <set>
#include <sstream>

#include "api/onnx/node_context.h"
#include "api/onnx/onnx_ops.h"
#include "graph/graph.h"

namespace flowstate {
namespace {

using onnx_import::FromOnnxType;
using onnx_import::ModelState;
using onnx_import::NodeContext;
using onnx_import::OnnxTypeName;
using onnx_import::Value;

// The opset version a converted older model gets.
constexpr int kUpgradeTarget = 13;

std::string Sanitize(std::string_view s) {
  std::string out;
  for (char ch : s) {
    bool ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
              ch == '_' || ch == '-' || ch == '.';
    out.push_back(ok ? ch : '_');
  }
  if (out.empty()) out = "value";
  return out;
}

PartialShape ShapeOf(const onnx::TypeProto& type) {
  if (!type.has_tensor_type() || !type.tensor_type().has_shape()) return PartialShape();
  std::vector<int64_t> dims;
  for (const auto& d : type.tensor_type().shape().dim()) {
    dims.push_back(d.has_dim_value() && d.dim_value() >= 0 ? d.dim_value() : -1);
  }
  return PartialShape(std::move(dims));
}

int64_t DefaultOpset(const onnx::ModelProto& m) {
  for (const auto& o : m.opset_import()) {
    if (o.domain().empty() || o.domain() == "ai.onnx") return o.version();
  }
  return -1;
}

// Parses with protobuf, refusing what is not a model.
StatusOr<onnx::ModelProto> Parse(std::string_view bytes) {
  if (bytes.empty()) return InvalidArgument("the ONNX model is empty (0 bytes)");
  if (bytes.size() > size_t(std::numeric_limits<int>::max())) {
    return InvalidArgument("the ONNX model is over 2 GiB: store its tensors as external data");
  }
  onnx::ModelProto m;
  if (!m.ParseFromArray(bytes.data(), int(bytes.size()))) {
    return InvalidArgument("the bytes are not an ONNX model: protobuf cannot parse them as a "
                           "ModelProto (truncated or another format?)");
  }
  if (!m.has_graph()) {
    return InvalidArgument("the ONNX model has no graph (field 'graph' is missing: truncated or "
                           "not a model?)");
  }
  if (m.ir_version() <= 0) {
    return InvalidArgument("the ONNX model has no ir_version (field 'ir_version': truncated or "
                           "not a model?)");
  }
  return m;
}

class Importer {
 public:
  Importer(const OnnxImportOptions& o) : options_(o) { state_.training = o.training; }

  StatusOr<ImportedModel> Run(onnx::ModelProto m) {
    ImportedModel out;
    out.opset = DefaultOpset(m);
    out.producer = m.producer_name() +
                   (m.producer_version().empty() ? "" : " " + m.producer_version());
    if (out.opset < 0) {
      for (const auto& n : m.graph().node()) {
        if (!n.domain().empty() && n.domain() != "ai.onnx") {
          return Unimplemented("ONNX node '" + n.name() + "' (" + n.op_type() +
                                   "): ops of domain '" + n.domain() + "' are not supported",
                               n.name());
        }
      }
      return InvalidArgument("the ONNX model imports no opset of the default domain "
                             "(field 'opset_import')");
    }
    int64_t opset = out.opset;
    // External data first, from beneath the data root only.
    onnx::GraphProto* mg = m.mutable_graph();
    for (auto& t : *mg->mutable_initializer()) {
      FS_RETURN_IF_ERROR(onnx_import::InlineExternalData(&t, options_.external_data_dir,
                                                         options_.data_root));
    }
    for (auto& n : *mg->mutable_node()) {
      for (auto& a : *n.mutable_attribute()) {
        if (a.has_t()) {
          FS_RETURN_IF_ERROR(onnx_import::InlineExternalData(
              a.mutable_t(), options_.external_data_dir, options_.data_root));
        }
      }
    }
    if (options_.training) onnx_import::GiveBatchNormsInitializersOfTheirOwn(mg);
    if (opset < kOnnxMinOpset && options_.upgrade_older_opsets) {
      try {
        // The converter's adapters (Gemm's broadcast, ...) need shapes.
        onnx::shape_inference::InferShapes(m);
        m = onnx::version_conversion::ConvertVersion(m, kUpgradeTarget);
        // It leaves the IR version, and an IR version below 4 would need
        // the initializers it adds (Pad's pads) listed as graph inputs.
        if (m.ir_version() < 7) m.set_ir_version(7);
      } catch (const std::exception& e) {
        return InvalidArgument("the ONNX model's opset " + std::to_string(opset) +
                               " could not be converted to opset " +
                               std::to_string(kUpgradeTarget) + ": " + e.what());
      }
      opset = DefaultOpset(m);
    }
    if (opset < kOnnxMinOpset || opset > kOnnxMaxOpset) {
      return InvalidArgument("the ONNX model uses opset " + std::to_string(opset) +
                             " of the default domain; Flowstate imports opsets " +
                             std::to_string(kOnnxMinOpset) + " to " +
                             std::to_string(kOnnxMaxOpset));
    }
    try {
      onnx::checker::check_model(m);
    } catch (const std::exception& e) {
      // The checker's message spans lines (a node printed as text): one line.
      std::string why = e.what();
      std::replace(why.begin(), why.end(), '\n', ' ');
      return InvalidArgument("the ONNX model fails ONNX's checker: " + why);
    }
    try {
      onnx::shape_inference::InferShapes(m, onnx::OpSchemaRegistry::Instance(),
                                         onnx::ShapeInferenceOptions(false, 0, true));
    } catch (const std::exception&) {
      // Shapes stay unknown where inference failed; converters that need a
      // rank say so, naming their node.
    }
    const onnx::GraphProto& g = m.graph();
    if (g.output_size() == 0) {
      return InvalidArgument("the ONNX model's graph has no outputs: there is nothing to compute");
    }
    auto note = [&](const onnx::ValueInfoProto& v) {
      if (v.type().has_tensor_type()) {
        state_.inferred[v.name()] = {v.type().tensor_type().elem_type(), ShapeOf(v.type())};
      }
    };
    for (const auto& v : g.input()) note(v);
    for (const auto& v : g.value_info()) note(v);
    for (const auto& v : g.output()) note(v);

    // Initializers.
    std::set<std::string> initialized;
    std::vector<std::string> assigns;
    for (const auto& t : g.initializer()) {
      if (t.name().empty()) return InvalidArgument("an initializer has no name");
      if (!initialized.insert(t.name()).second) {
        return InvalidArgument("initializer '" + t.name() + "' is given twice");
      }
      StatusOr<Tensor> v = onnx_import::TensorFromProto(t);
      if (!v.ok()) {
        std::string msg = v.status().message();
        if (msg.find(t.name()) == std::string::npos) msg = "initializer '" + t.name() + "': " + msg;
        return Status(v.status().code(), msg, t.name());
      }
      Value val;
      val.dtype = v->dtype();
      val.shape = PartialShape(v->shape());
      if (options_.initializers_as_constants || !IsFloating(v->dtype())) {
        val.out = Output(state_.root.WithOpName(Sanitize(t.name()))
                             .AddNode("Const", "Const", {},
                                      {{"value", AttrValue(*v)}, {"dtype", AttrValue(v->dtype())}}));
        val.constant = *v;
      } else {
        Scope s = state_.root.WithOpName(Sanitize(t.name()));
        AttrMap attrs{{"shape", AttrValue(val.shape)}, {"dtype", AttrValue(v->dtype())}};
        if (options_.training) attrs["init"] = AttrValue(std::string("zeros"));
        std::string var = s.AddNode("Variable", "Variable", {}, std::move(attrs));
        val.out = Output(var);
        state_.variables.insert(var);
        out.variables.push_back({t.name(), var, v->dtype(), val.shape});
        if (options_.training) {
          out.initial_values.emplace_back(var, *v);
          state_.values[t.name()] = std::move(val);
          continue;
        }
        Scope sub = state_.root.NewSubScope(var);
        std::string init = sub.WithOpName("initial_value")
                               .AddNode("Const", "Const", {},
                                        {{"value", AttrValue(*v)},
                                         {"dtype", AttrValue(v->dtype())}});
        assigns.push_back(sub.WithOpName("assign").AddNode("Assign", "Assign", {var, init}, {}));
      }
      state_.values[t.name()] = std::move(val);
    }
    if (g.sparse_initializer_size() > 0) {
      return Unimplemented("sparse initializer '" + g.sparse_initializer(0).values().name() +
                           "' is not supported");
    }

    // Graph inputs that no initializer gives a value.
    for (const auto& in : g.input()) {
      if (initialized.count(in.name())) continue;
      if (!in.type().has_tensor_type()) {
        return Unimplemented("graph input '" + in.name() +
                             "' is not a tensor (sequences, maps and optionals are not supported)",
                             in.name());
      }
      DataType dt = FromOnnxType(in.type().tensor_type().elem_type());
      if (dt == DataType::kInvalid) {
        return Unimplemented("graph input '" + in.name() + "' has element type " +
                                 OnnxTypeName(in.type().tensor_type().elem_type()) +
                                 ", which Flowstate does not have",
                             in.name());
      }
      if (state_.values.count(in.name())) {
        return InvalidArgument("graph input '" + in.name() + "' is given twice", in.name());
      }
      PartialShape shape = ShapeOf(in.type());
      if (shape.rank_known() && shape.rank() > kMaxRank) {
        return Unimplemented("graph input '" + in.name() + "' has rank " +
                             std::to_string(shape.rank()) + "; at most " +
                             std::to_string(kMaxRank) + " is supported", in.name());
      }
      AttrMap attrs{{"dtype", AttrValue(dt)}};
      if (shape.rank_known()) attrs["shape"] = AttrValue(shape);
      std::string name = state_.root.WithOpName(Sanitize(in.name()))
                             .AddNode("Placeholder", "Placeholder", {}, std::move(attrs));
      state_.values[in.name()] = Value{Output(name), dt, shape, std::nullopt};
      out.inputs.push_back({in.name(), name, dt, shape});
    }

    // The nodes, in the model's (topological) order.
    for (int i = 0; i < g.node_size(); ++i) {
      FS_RETURN_IF_ERROR(ConvertNode(g.node(i), i, int(opset)));
    }

    // Graph outputs.
    for (const auto& o : g.output()) {
      auto it = state_.values.find(o.name());
      if (it == state_.values.end()) {
        return InvalidArgument("graph output '" + o.name() +
                                   "' is produced by no node, input or initializer",
                               o.name());
      }
      std::string name = state_.root.WithOpName(Sanitize(o.name()))
                             .AddNode("Identity", "Identity", {it->second.out.name()}, {});
      out.outputs.push_back({o.name(), name, it->second.dtype, it->second.shape});
    }
    if (!assigns.empty()) {
      std::vector<std::string> deps;
      for (const auto& a : assigns) deps.push_back("^" + a);
      out.init_op = state_.root.WithOpName("init").AddNode("NoOp", "NoOp", deps, {});
    }
    out.graph = state_.root.graph_def();
    StatusOr<Graph> check = Graph::Create(out.graph);
    if (!check.ok()) {
      return Status(check.status().code(),
                    "the graph imported from ONNX is invalid: " + check.status().message(),
                    check.status().node());
    }
    return out;
  }

 private:
  Status ConvertNode(const onnx::NodeProto& node, int index, int opset) {
    NodeContext c(&state_, node, index, opset);
    if (!node.domain().empty() && node.domain() != "ai.onnx") {
      return c.Unsupported("ops of domain '" + node.domain() + "' are not supported");
    }
    const onnx_import::ConverterEntry* other = nullptr;
    const onnx_import::ConverterEntry* e = onnx_import::FindConverter(node.op_type(), opset, &other);
    if (e == nullptr) {
      if (other != nullptr) {
        return c.Unsupported("op " + node.op_type() + " is supported at opsets " +
                             std::to_string(other->since) + " to " + std::to_string(other->until) +
                             ", not at the model's opset " + std::to_string(opset));
      }
      return c.Unsupported("op " + node.op_type() + " is not supported");
    }
    for (int i = 0; i < node.input_size(); ++i) {
      if (!node.input(i).empty() && !state_.values.count(node.input(i))) {
        return c.Error("input " + std::to_string(i) + " '" + node.input(i) +
                       "' is neither a graph input, an initializer nor the output of an earlier "
                       "node (missing, or a cycle)");
      }
    }
    FS_RETURN_IF_ERROR(e->fn(c));
    std::string unchecked = c.UncheckedAttr();
    if (!unchecked.empty()) {
      return c.Unsupported("attribute '" + unchecked + "' is not supported");
    }
    for (int i = 0; i < node.output_size(); ++i) {
      if (!node.output(i).empty() && !state_.values.count(node.output(i))) {
        return c.Unsupported("output " + std::to_string(i) + " ('" + node.output(i) +
                             "') is not supported");
      }
    }
    return Status();
  }

  OnnxImportOptions options_;
  ModelState state_;
};

}  // namespace

// For training: every BatchNormalization's scale, bias, running mean and
// running variance become initializers of their own. Exporters deduplicate
// initializers of equal values (PyTorch does when it exports for
// inference): a fresh BatchNorm's running mean (zeros) becomes an Identity
// of its bias, and two BatchNorms' scales (ones) one initializer, so that
// training would tie what PyTorch trains apart. The copy is named after the
// value the BatchNorm reads ("bn1.running_mean", as PyTorch names it) and
// an Identity that produced it is dropped.
void onnx_import::GiveBatchNormsInitializersOfTheirOwn(onnx::GraphProto* g) {
  std::map<std::string, int> initializer;  // name -> index
  for (int i = 0; i < g->initializer_size(); ++i) initializer[g->initializer(i).name()] = i;
  std::map<std::string, int> uses;
  for (const auto& n : g->node()) {
    for (const auto& in : n.input()) ++uses[in];
  }
  std::set<std::string> graph_outputs;
  for (const auto& o : g->output()) graph_outputs.insert(o.name());
  std::map<std::string, int> producer;  // value -> node index
  for (int i = 0; i < g->node_size(); ++i) {
    for (const auto& out : g->node(i).output()) producer[out] = i;
  }
  auto is_bn = [](const onnx::NodeProto& n) {
    return n.op_type() == "BatchNormalization" && (n.domain().empty() || n.domain() == "ai.onnx");
  };
  auto add_copy = [&](const std::string& source, const std::string& wanted) {
    onnx::TensorProto copy = g->initializer(initializer.at(source));
    std::string name = wanted;
    for (int s = 1; initializer.count(name); ++s) name = wanted + "_" + std::to_string(s);
    copy.set_name(name);
    initializer[name] = g->initializer_size();
    *g->add_initializer() = std::move(copy);
    return name;
  };
  // 1. A parameter that is an Identity of an initializer: a copy under the
  // Identity's output name, the Identity dropped.
  std::set<int> dropped;
  for (int i = 0; i < g->node_size(); ++i) {
    if (!is_bn(g->node(i))) continue;
    for (int k = 1; k <= 4 && k < g->node(i).input_size(); ++k) {
      const std::string value = g->node(i).input(k);
      auto p = producer.find(value);
      if (p == producer.end() || initializer.count(value)) continue;
      const onnx::NodeProto& id = g->node(p->second);
      if (id.op_type() != "Identity" || id.input_size() != 1 || !initializer.count(id.input(0))) continue;
      if (uses[value] != 1 || graph_outputs.count(value)) continue;
      const std::string source = id.input(0);
      dropped.insert(p->second);
      producer.erase(p);
      --uses[source];
      g->mutable_node(i)->set_input(k, add_copy(source, value));
    }
  }
  // 2. A parameter initializer that other inputs read too: a copy for each
  // BatchNorm but the first.
  for (int i = g->node_size() - 1; i >= 0; --i) {
    if (!is_bn(g->node(i))) continue;
    for (int k = 1; k <= 4 && k < g->node(i).input_size(); ++k) {
      const std::string value = g->node(i).input(k);
      if (!initializer.count(value) || uses[value] <= 1) continue;
      --uses[value];
      g->mutable_node(i)->set_input(k, add_copy(value, value));
    }
  }
  if (dropped.empty()) return;
  google::protobuf::RepeatedPtrField<onnx::NodeProto> kept;
  for (int i = 0; i < g->node_size(); ++i) {
    if (!dropped.count(i)) *kept.Add() = g->node(i);
  }
  g->mutable_node()->Swap(&kept);
}


StatusOr<ImportedModel> ImportOnnx(std::string_view model_bytes, const OnnxImportOptions& options) {
  FS_ASSIGN_OR_RETURN(onnx::ModelProto m, Parse(model_bytes));
  try {
    return Importer(options).Run(std::move(m));
  } catch (const std::exception& e) {
    return InvalidArgument(std::string("the ONNX model could not be imported: ") + e.what());
  }
}

StatusOr<ImportedModel> ImportOnnxFile(const std::string& path, const OnnxImportOptions& options) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return NotFound("cannot open the ONNX model '" + path + "'");
  std::ostringstream ss;
  ss << in.rdbuf();
  OnnxImportOptions o = options;
  if (o.external_data_dir.empty()) {
    o.external_data_dir = std::filesystem::path(path).parent_path().string();
    if (o.external_data_dir.empty()) o.external_data_dir = ".";
  }
  return ImportOnnx(ss.str(), o);
}

StatusOr<Tensor> ParseOnnxTensor(std::string_view bytes) {
  onnx::TensorProto t;
  if (bytes.size() > size_t(std::numeric_limits<int>::max()) ||
      !t.ParseFromArray(bytes.data(), int(bytes.size()))) {
    return InvalidArgument("the bytes are not an ONNX TensorProto");
  }
  return onnx_import::TensorFromProto(t);
}

StatusOr<std::vector<std::string>> OnnxModelOps(std::string_view model_bytes) {
  FS_ASSIGN_OR_RETURN(onnx::ModelProto m, Parse(model_bytes));
  std::set<std::string> ops;
  for (const auto& n : m.graph().node()) {
    bool main = n.domain().empty() || n.domain() == "ai.onnx";
    ops.insert(main ? n.op_type() : n.domain() + ":" + n.op_type());
  }
  return std::vector<std::string>(ops.begin(), ops.end());
}

std::vector<OnnxOpSupport> SupportedOnnxOps() {
  std::vector<OnnxOpSupport> out;
  for (const auto& e : onnx_import::ConverterTable()) out.push_back({e.op, e.since, e.until});
  std::sort(out.begin(), out.end(), [](const OnnxOpSupport& a, const OnnxOpSupport& b) {
    return a.op != b.op ? a.op < b.op : a.since < b.since;
  });
  return out;
}

}  // namespace flowstate

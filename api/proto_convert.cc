#include "api/proto_convert.h"

#include <algorithm>
#include <bit>
#include <cctype>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>

#include "api/json_codec.h"
#include "api/json_internal.h"
#include "api/views_json.h"
#include "graph/graph.h"
#include "graph/partitioned_variables.h"

namespace flowstate::proto_convert {

// Tensor content is little-endian on the wire; the engine's buffers are in
// host order. Every machine Flowstate targets is little-endian.
static_assert(std::endian::native == std::endian::little,
              "tensor content is copied as is: a big-endian host would need byte swaps");

namespace {

// Paths, written by the rule of api/json_internal.h (AppendPathKey), so a
// field is named alike over REST and gRPC.
std::string Key(std::string_view path, std::string_view key) {
  std::string s(path);
  api::internal::AppendPathKey(key, &s);
  return s;
}

std::string Index(std::string_view path, int64_t i) {
  return std::string(path) + "[" + std::to_string(i) + "]";
}

Status PathError(std::string_view path, std::string_view message, std::string_view node = "") {
  return api::internal::PathError(std::string(path), message, node);
}

// A prefix for a status from elsewhere (keeps its code and node).
Status AtPath(std::string_view path, const Status& s) {
  return path.empty() ? s : s.WithPrefix(path);
}

std::string TensorNameError(const std::string& name) {
  StatusOr<TensorId> id = ParseTensorId(name);
  if (!id.ok()) return id.status().message();
  if (id->is_control()) {
    return "'" + name + "' is a control input, not a tensor (list the node in \"targets\")";
  }
  return "";
}

StatusOr<DataType> ReadDataType(const std::string& name, std::string_view path) {
  if (name.empty()) return PathError(path, "missing (a dtype name such as \"float32\")");
  StatusOr<DataType> t = DataTypeFromString(name);
  if (!t.ok()) return PathError(path, t.status().message());
  return *t;
}

StatusOr<PartialShape> ShapeFromProto(const pb::Shape& proto, std::string_view path) {
  if (proto.unknown_rank()) {
    if (proto.dims_size() != 0) {
      return PathError(path, "a shape of unknown rank has no dims (got " +
                                 std::to_string(proto.dims_size()) + ")");
    }
    return PartialShape::Unknown();
  }
  if (proto.dims_size() > kMaxRank) {
    return PathError(path, "a shape of rank " + std::to_string(proto.dims_size()) +
                               " is more than the maximum rank " + std::to_string(kMaxRank));
  }
  std::vector<int64_t> dims(proto.dims().begin(), proto.dims().end());
  for (size_t i = 0; i < dims.size(); ++i) {
    if (dims[i] < -1) {
      return PathError(Index(Key(path, "dims"), int64_t(i)),
                       "expected a dimension (an int >= 0, or -1 for unknown), got " +
                           std::to_string(dims[i]));
    }
  }
  return PartialShape(std::move(dims));
}

void ShapeToProto(const PartialShape& shape, pb::Shape* proto) {
  proto->set_unknown_rank(!shape.rank_known());
  for (int64_t d : shape.dims()) proto->add_dims(d);
}

template <typename T, typename List, typename Read>
StatusOr<AttrValue> ReadList(const List& list, std::string_view path, Read read) {
  std::vector<T> out;
  out.reserve(size_t(list.values_size()));
  for (int i = 0; i < list.values_size(); ++i) {
    StatusOr<T> x = read(list.values(i), Index(Key(path, "values"), i));
    if (!x.ok()) return x.status();
    out.push_back(std::move(x).value());
  }
  return AttrValue(std::move(out));
}

// The value as given (a tensor attr is read by the caller, which knows its
// expected dtype).
StatusOr<AttrValue> AttrFromProto(const pb::AttrValue& proto, std::string_view path) {
  switch (proto.value_case()) {
    case pb::AttrValue::kI: return AttrValue(int64_t{proto.i()});
    case pb::AttrValue::kF: return AttrValue(proto.f());
    case pb::AttrValue::kB: return AttrValue(proto.b());
    case pb::AttrValue::kS: return AttrValue(proto.s());
    case pb::AttrValue::kType: {
      FS_ASSIGN_OR_RETURN(DataType t, ReadDataType(proto.type(), Key(path, "type")));
      return AttrValue(t);
    }
    case pb::AttrValue::kShape: {
      FS_ASSIGN_OR_RETURN(PartialShape s, ShapeFromProto(proto.shape(), Key(path, "shape")));
      return AttrValue(std::move(s));
    }
    case pb::AttrValue::kInts:
      return AttrValue(std::vector<int64_t>(proto.ints().values().begin(),
                                            proto.ints().values().end()));
    case pb::AttrValue::kFloats:
      return AttrValue(std::vector<double>(proto.floats().values().begin(),
                                           proto.floats().values().end()));
    case pb::AttrValue::kStrings:
      return AttrValue(std::vector<std::string>(proto.strings().values().begin(),
                                                proto.strings().values().end()));
    case pb::AttrValue::kTypes:
      return ReadList<DataType>(proto.types(), Key(path, "types"), ReadDataType);
    case pb::AttrValue::kShapes:
      return ReadList<PartialShape>(proto.shapes(), Key(path, "shapes"), ShapeFromProto);
    case pb::AttrValue::kTensor:
    case pb::AttrValue::VALUE_NOT_SET:
      break;
  }
  return PathError(path, "no value set");
}

// The AttrValue oneof field that holds a value of `kind`.
std::string_view ProtoFieldOf(AttrKind kind) {
  switch (kind) {
    case AttrKind::kInt: return "i";
    case AttrKind::kFloat: return "f";
    case AttrKind::kBool: return "b";
    case AttrKind::kString: return "s";
    case AttrKind::kType: return "type";
    case AttrKind::kShape: return "shape";
    case AttrKind::kTensor: return "tensor";
    case AttrKind::kIntList: return "ints";
    case AttrKind::kFloatList: return "floats";
    case AttrKind::kStringList: return "strings";
    case AttrKind::kTypeList: return "types";
    case AttrKind::kShapeList: return "shapes";
  }
  return "?";
}

constexpr std::string_view kDTypeAttr = "dtype";

Status ReadAttrs(const pb::NodeDef& proto, std::string_view path, const OpDef& op,
                 size_t max_bytes, NodeDef* node) {
  // In name order, as the attrs are stored; tensors last, so that they can
  // take their dtype from a "dtype" attr.
  std::map<std::string, const pb::AttrValue*> sorted;
  for (const auto& [name, value] : proto.attrs()) sorted.emplace(name, &value);
  std::vector<std::pair<std::string, const pb::AttrValue*>> tensors;
  for (const auto& [name, value] : sorted) {
    const std::string attr_path = Key(path, name);
    const AttrDef* def = nullptr;
    if (!name.starts_with("_")) {
      def = op.FindAttr(name);
      if (def == nullptr) {
        std::string declared;
        for (const AttrDef& a : op.attrs) declared += (declared.empty() ? "" : ", ") + a.name;
        return PathError(attr_path, "op " + op.name + " has no attr '" + name + "' (it has: " +
                                        (declared.empty() ? "none" : declared) + ")",
                         node->name);
      }
      if (def->kind == AttrKind::kTensor) {
        if (value->value_case() != pb::AttrValue::kTensor) {
          return PathError(attr_path,
                           "attr '" + name + "' of op " + op.name +
                               " is a tensor: set \"tensor\"" +
                               (value->value_case() == pb::AttrValue::VALUE_NOT_SET
                                    ? std::string(" (no value set)")
                                    : ""),
                           node->name);
        }
        tensors.emplace_back(name, value);
        continue;
      }
    }
    if (value->value_case() == pb::AttrValue::kTensor) {
      if (def != nullptr) {
        return PathError(attr_path,
                         "attr '" + name + "' of op " + op.name + " is of kind " +
                             std::string(AttrKindName(def->kind)) + ", not a tensor (set \"" +
                             std::string(ProtoFieldOf(def->kind)) + "\")",
                         node->name);
      }
      StatusOr<Tensor> t = TensorFromProto(value->tensor(), Key(attr_path, "tensor"), max_bytes);
      if (!t.ok()) return t.status().WithNode(node->name);
      node->attrs.insert_or_assign(name, AttrValue(std::move(t).value()));
      continue;
    }
    StatusOr<AttrValue> v = AttrFromProto(*value, attr_path);
    if (!v.ok()) return v.status().WithNode(node->name);
    if (def != nullptr && v->kind() != def->kind) {
      StatusOr<AttrValue> c = v->CoercedTo(def->kind);
      if (!c.ok()) {
        return PathError(attr_path,
                         "attr '" + name + "' of op " + op.name + " is of kind " +
                             std::string(AttrKindName(def->kind)) + " (set \"" +
                             std::string(ProtoFieldOf(def->kind)) + "\"), got a value of kind " +
                             std::string(AttrKindName(v->kind())),
                         node->name);
      }
      v = std::move(c);
    }
    node->attrs.insert_or_assign(name, std::move(v).value());
  }

  const AttrDef* dtype_def = op.FindAttr(kDTypeAttr);
  bool has_dtype_attr = dtype_def != nullptr && dtype_def->kind == AttrKind::kType;
  for (const auto& [name, value] : tensors) {
    const std::string tensor_path = Key(Key(path, name), "tensor");
    StatusOr<Tensor> t = TensorFromProto(value->tensor(), tensor_path, max_bytes);
    if (!t.ok()) return t.status().WithNode(node->name);
    auto d = node->attrs.find(kDTypeAttr);
    if (has_dtype_attr && d != node->attrs.end() && d->second.type() != t->dtype()) {
      return PathError(Key(tensor_path, "dtype"),
                       "the tensor is " + std::string(DataTypeName(t->dtype())) + " but " +
                           std::string(DataTypeName(d->second.type())) + " is expected here",
                       node->name);
    }
    if (has_dtype_attr && d == node->attrs.end()) {
      node->attrs.emplace(std::string(kDTypeAttr), AttrValue(t->dtype()));
    }
    node->attrs.insert_or_assign(name, AttrValue(std::move(t).value()));
  }
  return Status();
}

Status ReadNode(const pb::NodeDef& proto, std::string_view path, const OpRegistry& registry,
                size_t max_bytes, NodeDef* node) {
  if (proto.name().empty()) return PathError(path, "missing \"name\"");
  node->name = proto.name();
  if (proto.op().empty()) return PathError(path, "missing \"op\"", node->name);
  node->op = proto.op();
  const OpDef* op = registry.Find(node->op);
  if (op == nullptr) {
    return PathError(Key(path, "op"), "unknown op '" + node->op + "'", node->name);
  }
  const std::string inputs_path = Key(path, "inputs");
  for (int i = 0; i < proto.inputs_size(); ++i) {
    const std::string& s = proto.inputs(i);
    StatusOr<TensorId> id = ParseTensorId(s);
    if (!id.ok()) return PathError(Index(inputs_path, i), id.status().message(), node->name);
    node->inputs.push_back(s);
  }
  FS_RETURN_IF_ERROR(ReadAttrs(proto, Key(path, "attrs"), *op, max_bytes, node));
  if (node->op == "Variable") {
    // "partitions: ..." -> graph.nodes[i].attrs.partitions: ... (as JSON).
    Status st = CheckPartitionAttrs(node->attrs);
    if (!st.ok()) {
      const std::string& m = st.message();
      const size_t colon = m.find(": ");
      return PathError(Key(Key(path, "attrs"), m.substr(0, colon)), m.substr(colon + 2), node->name);
    }
  }
  node->device = proto.device();
  return Status();
}

void AttrToProto(const AttrValue& v, pb::AttrValue* proto) {
  switch (v.kind()) {
    case AttrKind::kInt: proto->set_i(v.i()); break;
    case AttrKind::kFloat: proto->set_f(v.f()); break;
    case AttrKind::kBool: proto->set_b(v.b()); break;
    case AttrKind::kString: proto->set_s(v.s()); break;
    case AttrKind::kType: proto->set_type(std::string(DataTypeName(v.type()))); break;
    case AttrKind::kShape: ShapeToProto(v.shape(), proto->mutable_shape()); break;
    case AttrKind::kTensor: TensorToProto(v.tensor(), proto->mutable_tensor()); break;
    case AttrKind::kIntList: {
      auto* l = proto->mutable_ints();
      for (int64_t x : v.ints()) l->add_values(x);
      break;
    }
    case AttrKind::kFloatList: {
      auto* l = proto->mutable_floats();
      for (double x : v.floats()) l->add_values(x);
      break;
    }
    case AttrKind::kStringList: {
      auto* l = proto->mutable_strings();
      for (const std::string& x : v.strings()) l->add_values(x);
      break;
    }
    case AttrKind::kTypeList: {
      auto* l = proto->mutable_types();
      for (DataType x : v.types()) l->add_values(std::string(DataTypeName(x)));
      break;
    }
    case AttrKind::kShapeList: {
      auto* l = proto->mutable_shapes();
      for (const PartialShape& x : v.shapes()) ShapeToProto(x, l->add_values());
      break;
    }
  }
}

template <typename Request>
StatusOr<GraphDef> GraphOf(const Request& request, const GraphOptions& options) {
  switch (request.graph_source_case()) {
    case Request::kGraphJson: {
      api::GraphJsonOptions jo;
      jo.registry = options.registry;
      jo.max_tensor_bytes = options.max_tensor_bytes;
      return api::ParseGraphJson(request.graph_json(), "graph", jo);
    }
    case Request::kGraph:
      return GraphFromProto(request.graph(), "graph", options);
    case Request::GRAPH_SOURCE_NOT_SET:
      break;
  }
  return PathError("graph", "missing (set \"graph_json\" or \"graph\")");
}

}  // namespace

// ---------------------------------------------------------------------------
// Tensors.

StatusOr<Tensor> TensorFromProto(const pb::Tensor& proto, std::string_view path,
                                 size_t max_bytes) {
  FS_ASSIGN_OR_RETURN(DataType dtype, ReadDataType(proto.dtype(), Key(path, "dtype")));
  const std::string shape_path = Key(path, "shape");
  std::vector<int64_t> dims(proto.shape().begin(), proto.shape().end());
  for (size_t i = 0; i < dims.size(); ++i) {
    if (dims[i] < 0) {
      return PathError(Index(shape_path, int64_t(i)),
                       "expected a dimension (an int >= 0), got " + std::to_string(dims[i]));
    }
  }
  StatusOr<TensorShape> shape = TensorShape::Make(dims);
  if (!shape.ok()) return PathError(shape_path, shape.status().message());

  size_t n = size_t(shape->num_elements());
  size_t size = DataTypeSize(dtype);
  if (n > max_bytes / size) {
    std::string bytes = n <= std::numeric_limits<size_t>::max() / size
                            ? std::to_string(n * size)
                            : "more than 2^64";
    return ResourceExhausted((path.empty() ? "" : std::string(path) + ": ") + "a tensor of " +
                             std::string(DataTypeName(dtype)) + shape->ToString() + " takes " +
                             bytes + " bytes, more than the limit of " +
                             std::to_string(max_bytes) + " bytes");
  }
  const std::string& content = proto.content();
  size_t want = n * size;
  if (content.size() != want) {
    return PathError(Key(path, "content"),
                     "has " + std::to_string(content.size()) + " bytes, but a " +
                         std::string(DataTypeName(dtype)) + shape->ToString() + " tensor has " +
                         std::to_string(want));
  }
  if (dtype == DataType::kBool) {
    for (size_t i = 0; i < content.size(); ++i) {
      auto b = static_cast<uint8_t>(content[i]);
      if (b > 1) {
        return PathError(Key(path, "content"), "byte " + std::to_string(i) + " is " +
                                                   std::to_string(b) + ", not a bool (0 or 1)");
      }
    }
  }
  StatusOr<Tensor> t = Tensor::Allocate(HostAllocator(), dtype, *shape);
  if (!t.ok()) return AtPath(path, t.status());
  t->CopyFromBytes(content.data(), content.size());
  return t;
}

void TensorToProto(const Tensor& t, pb::Tensor* proto) {
  proto->set_dtype(std::string(DataTypeName(t.dtype())));
  proto->clear_shape();
  for (int i = 0; i < t.rank(); ++i) proto->add_shape(t.dim(i));
  proto->set_content(static_cast<const char*>(t.raw_data()), t.TotalBytes());
}

StatusOr<NamedTensors> NamedTensorsFromProto(const TensorMap& tensors, std::string_view path,
                                             size_t max_bytes) {
  std::map<std::string, const pb::Tensor*> sorted;
  for (const auto& [name, t] : tensors) sorted.emplace(name, &t);
  NamedTensors out;
  out.reserve(sorted.size());
  for (const auto& [name, t] : sorted) {
    const std::string tensor_path = Key(path, name);
    std::string error = TensorNameError(name);
    if (!error.empty()) return PathError(tensor_path, "bad name: " + error);
    FS_ASSIGN_OR_RETURN(Tensor tensor, TensorFromProto(*t, tensor_path, max_bytes));
    out.emplace_back(name, std::move(tensor));
  }
  return out;
}

void NamedTensorsToProto(const NamedTensors& tensors, TensorMap* proto) {
  for (const auto& [name, t] : tensors) TensorToProto(t, &(*proto)[name]);
}

StatusOr<std::vector<std::string>> TensorNamesFromProto(const StringList& names,
                                                        std::string_view path) {
  std::vector<std::string> out;
  for (int i = 0; i < names.size(); ++i) {
    std::string error = TensorNameError(names[i]);
    if (!error.empty()) return PathError(Index(path, i), error);
    out.push_back(names[i]);
  }
  return out;
}

StatusOr<std::vector<std::string>> NodeNamesFromProto(const StringList& names,
                                                      std::string_view path) {
  std::vector<std::string> out;
  for (int i = 0; i < names.size(); ++i) {
    Status s = ValidateNodeName(names[i]);
    if (!s.ok()) return PathError(Index(path, i), s.message());
    out.push_back(names[i]);
  }
  return out;
}

// ---------------------------------------------------------------------------
// Graphs.

StatusOr<GraphDef> GraphFromProto(const pb::GraphDef& proto, std::string_view path,
                                  const GraphOptions& options) {
  const OpRegistry& registry = options.registry ? *options.registry : *OpRegistry::Global();
  GraphDef graph;
  graph.nodes.resize(size_t(proto.nodes_size()));
  const std::string nodes_path = Key(path, "nodes");
  for (int i = 0; i < proto.nodes_size(); ++i) {
    FS_RETURN_IF_ERROR(ReadNode(proto.nodes(i), Index(nodes_path, i), registry,
                                options.max_tensor_bytes, &graph.nodes[size_t(i)]));
  }
  return graph;
}

void GraphToProto(const GraphDef& graph, pb::GraphDef* proto) {
  for (const NodeDef& node : graph.nodes) {
    pb::NodeDef* n = proto->add_nodes();
    n->set_name(node.name);
    n->set_op(node.op);
    for (const std::string& in : node.inputs) n->add_inputs(in);
    for (const auto& [name, value] : node.attrs) AttrToProto(value, &(*n->mutable_attrs())[name]);
    n->set_device(node.device);
  }
}

StatusOr<GraphDef> GraphFromRequest(const pb::CreateSessionRequest& request,
                                    const GraphOptions& options) {
  return GraphOf(request, options);
}

StatusOr<GraphDef> GraphFromRequest(const pb::ExtendSessionRequest& request,
                                    const GraphOptions& options) {
  return GraphOf(request, options);
}

StatusOr<GraphDef> GraphFromRequest(const pb::GradientsRequest& request,
                                    const GraphOptions& options) {
  return GraphOf(request, options);
}

// ---------------------------------------------------------------------------
// Responses.

void SecondsToTimestamp(double seconds, ::google::protobuf::Timestamp* proto) {
  auto ms = int64_t(std::llround(seconds * 1000));
  int64_t s = ms / 1000, rem = ms % 1000;
  if (rem < 0) {
    rem += 1000;
    --s;
  }
  proto->set_seconds(s);
  proto->set_nanos(int32_t(rem * 1000000));
}

void JobToProto(const JobInfo& job, pb::Job* proto) {
  proto->set_job_id(job.id);
  proto->set_name(job.name);
  proto->set_state(std::string(JobStateName(job.state)));
  proto->set_epoch(job.epoch);
  proto->set_epochs(job.epochs);
  proto->set_step(job.step);
  proto->set_total_steps(job.total_steps);
  proto->set_loss(job.loss);
  proto->set_examples_per_sec(job.examples_per_sec);
  for (const auto& [name, value] : job.metrics) (*proto->mutable_metrics())[name] = value;
  proto->set_error(job.error);
  if (job.created > 0) SecondsToTimestamp(job.created, proto->mutable_created());
  if (job.started > 0) SecondsToTimestamp(job.started, proto->mutable_started());
  if (job.finished > 0) SecondsToTimestamp(job.finished, proto->mutable_finished());
  if (job.checkpoint_step >= 0) {
    pb::JobCheckpoint* c = proto->mutable_checkpoint();
    c->set_step(job.checkpoint_step);
    if (job.checkpoint_time > 0) SecondsToTimestamp(job.checkpoint_time, c->mutable_time());
    c->set_bytes(job.checkpoint_bytes);
  }
  proto->set_checkpoint_failures(job.checkpoint_failures);
  proto->set_checkpoint_error(job.checkpoint_error);
  if (job.resumed_from_step >= 0) proto->set_resumed_from_step(job.resumed_from_step);
  proto->set_skipped_steps(job.skipped_steps);
  proto->set_replicas(job.replicas);
  proto->set_replicas_alive(job.replicas_alive);
  for (const JobInfo::Replica& r : job.placement) {
    pb::ReplicaPlacement* p = proto->add_placement();
    p->set_device(r.device);
    p->set_alive(r.alive);
  }
  proto->set_restarts(job.restarts);
  if (job.eta_seconds >= 0 && std::isfinite(job.eta_seconds)) proto->set_eta_seconds(job.eta_seconds);
}

void JobEventToProto(const JobEvent& event, pb::JobEvent* proto) {
  proto->set_kind(std::string(JobEventKindName(event.kind)));
  JobToProto(event.info, proto->mutable_job());
  if (event.time > 0) SecondsToTimestamp(event.time, proto->mutable_time());
  proto->set_message(event.message);
}

void JobHistoryToProto(const JobHistory& h, pb::JobHistory* proto) {
  proto->set_job_id(h.job_id);
  for (const JobHistoryStep& s : h.steps) {
    pb::JobHistoryStep* p = proto->add_steps();
    p->set_step(s.step);
    p->set_epoch(s.epoch);
    p->set_loss(s.loss);
    p->set_examples_per_sec(s.examples_per_sec);
    p->set_time(s.time);
  }
  for (const JobHistoryEval& e : h.evals) {
    pb::JobHistoryEval* p = proto->add_evals();
    p->set_step(e.step);
    p->set_epoch(e.epoch);
    p->set_time(e.time);
    for (const auto& [name, v] : e.metrics) (*p->mutable_metrics())[name] = v;
  }
  proto->set_downsampled(h.downsampled);
}

void CheckpointToProto(const JobCheckpointInfo& c, pb::JobCheckpoint* proto) {
  proto->set_step(c.step);
  if (c.time > 0) SecondsToTimestamp(c.time, proto->mutable_time());
  proto->set_bytes(c.bytes);
  proto->set_tensors(c.num_tensors);
}

void OpToProto(const OpInfo& op, pb::Op* proto) {
  proto->set_name(op.name);
  proto->set_doc(op.doc);
  proto->set_stateful(op.stateful);
  for (const std::string& d : op.devices) proto->add_devices(d);
  for (const OpInfo::Arg& a : op.inputs) {
    pb::OpArg* p = proto->add_inputs();
    p->set_name(a.name);
    p->set_type(a.type);
  }
  for (const OpInfo::Arg& a : op.outputs) {
    pb::OpArg* p = proto->add_outputs();
    p->set_name(a.name);
    p->set_type(a.type);
  }
  for (const OpInfo::Attr& a : op.attrs) {
    pb::OpAttr* p = proto->add_attrs();
    p->set_name(a.name);
    p->set_kind(a.kind);
    if (!a.default_value.empty()) p->set_default_value(a.default_value);
    for (const std::string& t : a.allowed) p->add_allowed(t);
  }
}

void ModelToProto(const ModelInfo& m, pb::Model* out) {
  out->set_model_id(m.id);
  out->set_name(m.name);
  out->set_bytes(m.bytes);
  out->set_created(m.created);
  out->set_opset(m.opset);
  out->set_producer(m.producer);
  out->set_parameters(m.parameters);
  for (const auto& [list, field] : {std::pair{&m.inputs, out->mutable_inputs()},
                                    std::pair{&m.outputs, out->mutable_outputs()}}) {
    for (const ModelInfo::Tensor& t : *list) {
      pb::ModelTensor* p = field->Add();
      p->set_name(t.name);
      p->set_dtype(t.dtype);
      p->set_rank_known(t.rank_known);
      for (int64_t d : t.shape) p->add_shape(d);
    }
  }
}

void DatasetToProto(const DatasetInfo& d, pb::Dataset* out) {
  out->set_dataset_id(d.id);
  out->set_path(d.path);
  out->set_bytes(d.bytes);
  out->set_complete(d.complete);
  out->set_modified(d.modified);
  for (const DatasetInfo::Array& a : d.arrays) {
    pb::DatasetArray* p = out->add_arrays();
    p->set_name(a.name);
    p->set_dtype(a.dtype);
    for (int64_t dim : a.shape) p->add_shape(dim);
  }
}

void DeviceToProto(const DeviceInfo& device, pb::Device* proto) {
  proto->set_name(device.name);
  proto->set_type(device.type);
  proto->set_description(device.description);
  pb::DeviceMemory* m = proto->mutable_memory();
  m->set_bytes_in_use(device.bytes_in_use);
  m->set_peak_bytes_in_use(device.peak_bytes_in_use);
  m->set_bytes_limit(device.bytes_limit);
  m->set_bytes_cached(device.bytes_cached);
  proto->set_running_jobs(device.running_jobs);
  for (const std::string& j : device.jobs) proto->add_jobs(j);
}

void ClusterToProto(const ClusterInfo& cluster, double now, pb::GetClusterResponse* proto) {
  for (const TaskInfo& t : cluster.tasks) {
    pb::Task* p = proto->add_tasks();
    p->set_job(t.job);
    p->set_index(t.index);
    p->set_name(t.name());
    p->set_address(t.address);
    p->set_state(std::string(TaskStateName(t.state)));
    if (t.incarnation != 0) p->set_incarnation(FormatIncarnation(t.incarnation));
    if (t.last_heartbeat > 0) {
      SecondsToTimestamp(t.last_heartbeat, p->mutable_last_heartbeat());
      p->set_heartbeat_age_seconds(std::max(0.0, std::round((now - t.last_heartbeat) * 1000) / 1000));
    }
    p->set_is_self(t.is_self);
    p->set_error(t.error);
    for (const DeviceInfo& d : t.devices) DeviceToProto(d, p->add_devices());
  }
}

// ---------------------------------------------------------------------------
// Status.

namespace {
constexpr std::string_view kNodePrefix = " [node: ";
}  // namespace

::grpc::Status ToGrpcStatus(const Status& status) {
  if (status.ok()) return ::grpc::Status::OK;
  std::string message = status.message();
  if (!status.node().empty()) {
    message += kNodePrefix;
    message += status.node();
    message += "]";
  }
  return ::grpc::Status(static_cast<::grpc::StatusCode>(int(status.code())), message);
}

Status FromGrpcStatus(const ::grpc::Status& status) {
  if (status.ok()) return Status();
  int code = int(status.error_code());
  Code c = code >= 0 && code <= int(Code::kUnauthenticated) ? Code(code) : Code::kUnknown;
  std::string message = status.error_message();
  std::string node;
  size_t at = message.rfind(kNodePrefix);
  if (at != std::string::npos && message.ends_with("]")) {
    node = message.substr(at + kNodePrefix.size(),
                          message.size() - 1 - at - kNodePrefix.size());
    message.resize(at);
  }
  return Status(c, std::move(message), std::move(node));
}

}  // namespace flowstate::proto_convert

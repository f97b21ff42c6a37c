// Graphs in JSON: {"nodes": [{"name", "op", "inputs", "attrs", "device"}]}
// with attr values read by the kinds their OpDefs declare (json_codec.h);
// While and If nodes are lowered by control_flow_json.cc.
#include <limits>
#include <vector>

#include "api/json_internal.h"
#include "graph/partitioned_variables.h"

namespace flowstate::api {
namespace internal {
namespace {

constexpr std::string_view kDTypeAttr = "dtype";

// list(x): an array whose elements `read` converts.
template <typename T, typename Read>
StatusOr<AttrValue> ReadList(const Json& v, const JsonPath& path, std::string_view what,
                             Read read) {
  if (!v.is_array()) {
    return PathError(path, "expected a list of " + std::string(what) + ", got " + DescribeValue(v));
  }
  std::vector<T> out;
  out.reserve(v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    StatusOr<T> x = read(v[i], path.Index(int64_t(i)));
    if (!x.ok()) return x.status();
    out.push_back(std::move(x).value());
  }
  return AttrValue(std::move(out));
}

// A declared attr of any kind but tensor, read by its kind.
StatusOr<AttrValue> ReadAttr(const Json& v, AttrKind kind, const JsonPath& path) {
  switch (kind) {
    case AttrKind::kInt: {
      FS_ASSIGN_OR_RETURN(int64_t i, ReadInt(v, path));
      return AttrValue(i);
    }
    case AttrKind::kFloat: {
      FS_ASSIGN_OR_RETURN(double f, ReadFloat(v, path));
      return AttrValue(f);
    }
    case AttrKind::kBool:
      if (!v.is_boolean()) return PathError(path, "expected a bool, got " + DescribeValue(v));
      return AttrValue(v.get<bool>());
    case AttrKind::kString: {
      FS_ASSIGN_OR_RETURN(std::string s, ReadString(v, path));
      return AttrValue(std::move(s));
    }
    case AttrKind::kType: {
      FS_ASSIGN_OR_RETURN(DataType t, ReadDataType(v, path));
      return AttrValue(t);
    }
    case AttrKind::kShape: {
      FS_ASSIGN_OR_RETURN(PartialShape s, ReadPartialShape(v, path));
      return AttrValue(std::move(s));
    }
    case AttrKind::kIntList:
      return ReadList<int64_t>(v, path, "ints", [](const Json& x, const JsonPath& p) {
        return ReadInt(x, p);
      });
    case AttrKind::kFloatList:
      return ReadList<double>(v, path, "floats", [](const Json& x, const JsonPath& p) {
        return ReadFloat(x, p);
      });
    case AttrKind::kStringList:
      return ReadList<std::string>(v, path, "strings", ReadString);
    case AttrKind::kTypeList:
      return ReadList<DataType>(v, path, "dtype names", ReadDataType);
    case AttrKind::kShapeList:
      return ReadList<PartialShape>(v, path, "shapes", ReadPartialShape);
    case AttrKind::kTensor:
      break;  // ReadAttrs reads tensors, which need the node's other attrs
  }
  return Internal("unhandled attr kind " + std::string(AttrKindName(kind)));
}

// A runtime annotation ("_name"), not declared by the op: by JSON type.
StatusOr<AttrValue> ReadInternalAttr(const Json& v, const JsonPath& path) {
  if (v.is_string()) return AttrValue(v.get<std::string>());
  if (v.is_boolean()) return AttrValue(v.get<bool>());
  if (v.is_number_float()) {
    FS_ASSIGN_OR_RETURN(double f, ReadFloat(v, path));
    return AttrValue(f);
  }
  if (v.is_number()) {
    FS_ASSIGN_OR_RETURN(int64_t i, ReadInt(v, path));
    return AttrValue(i);
  }
  if (v.is_array()) {
    bool all_int = true, all_number = true, all_string = true;
    for (const Json& e : v) {
      all_int &= e.is_number_integer();
      all_number &= e.is_number();
      all_string &= e.is_string();
    }
    if (all_int) return ReadAttr(v, AttrKind::kIntList, path);  // also []
    if (all_number) return ReadAttr(v, AttrKind::kFloatList, path);
    if (all_string) return ReadAttr(v, AttrKind::kStringList, path);
  }
  return PathError(path, "expected a string, bool, number, or a list of ints, floats or strings "
                         "(an attr whose name starts with '_'), got " + DescribeValue(v));
}

Status ReadAttrs(const Json& attrs, const JsonPath& path, const OpDef& op, size_t max_bytes,
                 NodeDef* node) {
  if (attrs.is_null()) return Status();
  if (!attrs.is_object()) {
    return PathError(path, "expected an object of attrs, got " + DescribeValue(attrs), node->name);
  }
  // Tensors last, so that they can take their dtype from a "dtype" attr.
  std::vector<Json::const_iterator> tensors;
  for (auto it = attrs.begin(); it != attrs.end(); ++it) {
    const std::string& name = it.key();
    const JsonPath attr_path = path.Key(name);
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
        tensors.push_back(it);
        continue;
      }
    }
    StatusOr<AttrValue> value = def ? ReadAttr(*it, def->kind, attr_path)
                                    : ReadInternalAttr(*it, attr_path);
    if (!value.ok()) return value.status().WithNode(node->name);
    node->attrs.insert_or_assign(name, std::move(value).value());
  }

  const AttrDef* dtype_def = op.FindAttr(kDTypeAttr);
  bool has_dtype_attr = dtype_def != nullptr && dtype_def->kind == AttrKind::kType;
  for (const auto& it : tensors) {
    std::optional<DataType> dtype;
    auto d = node->attrs.find(kDTypeAttr);
    if (has_dtype_attr && d != node->attrs.end()) dtype = d->second.type();
    StatusOr<Tensor> t = TensorFromJson(*it, dtype, path.Key(it.key()), max_bytes);
    if (!t.ok()) return t.status().WithNode(node->name);
    if (has_dtype_attr && d == node->attrs.end()) {
      node->attrs.emplace(std::string(kDTypeAttr), AttrValue(t->dtype()));
    }
    node->attrs.insert_or_assign(it.key(), AttrValue(std::move(t).value()));
  }
  return Status();
}

}  // namespace

Status ReadNode(const Json& v, const JsonPath& path, const OpRegistry& registry, size_t max_bytes,
                NodeDef* node) {
  if (!v.is_object()) {
    return PathError(path, "expected a node (an object), got " + DescribeValue(v));
  }
  // The name first, so that every later error names the node.
  auto name = v.find("name");
  if (name == v.end() || name->is_null()) return PathError(path, "missing \"name\"");
  FS_ASSIGN_OR_RETURN(node->name, ReadString(*name, path.Key("name")));
  FS_RETURN_IF_ERROR(CheckObject(v, path, "a node", {"name", "op", "inputs", "attrs", "device"},
                                 node->name));
  auto op_json = v.find("op");
  if (op_json == v.end() || op_json->is_null()) {
    return PathError(path, "missing \"op\"", node->name);
  }
  StatusOr<std::string> op_name = ReadString(*op_json, path.Key("op"));
  if (!op_name.ok()) return op_name.status().WithNode(node->name);
  node->op = *op_name;
  const OpDef* op = registry.Find(node->op);
  if (op == nullptr) {
    return PathError(path.Key("op"), "unknown op '" + node->op + "'", node->name);
  }

  auto inputs = v.find("inputs");
  if (inputs != v.end() && !inputs->is_null()) {
    const JsonPath inputs_path = path.Key("inputs");
    if (!inputs->is_array()) {
      return PathError(inputs_path, "expected a list of input names, got " + DescribeValue(*inputs),
                       node->name);
    }
    for (size_t i = 0; i < inputs->size(); ++i) {
      const Json& in = (*inputs)[i];
      const JsonPath in_path = inputs_path.Index(int64_t(i));
      if (!in.is_string()) {
        return PathError(in_path, "expected a string (\"x\", \"x:1\" or \"^x\"), got " +
                                      DescribeValue(in), node->name);
      }
      const std::string& s = in.get_ref<const std::string&>();
      StatusOr<TensorId> id = ParseTensorId(s);
      if (!id.ok()) return PathError(in_path, id.status().message(), node->name);
      node->inputs.push_back(s);
    }
  }

  auto attrs = v.find("attrs");
  if (attrs != v.end()) {
    FS_RETURN_IF_ERROR(ReadAttrs(*attrs, path.Key("attrs"), *op, max_bytes, node));
  }
  if (node->op == "Variable") {
    // "partitions: ..." -> graph.nodes[i].attrs.partitions: ...
    Status st = CheckPartitionAttrs(node->attrs);
    if (!st.ok()) {
      const std::string& m = st.message();
      const size_t colon = m.find(": ");
      return PathError(path.Key("attrs").Key(m.substr(0, colon)), m.substr(colon + 2), node->name);
    }
  }

  auto device = v.find("device");
  if (device != v.end() && !device->is_null()) {
    StatusOr<std::string> d = ReadString(*device, path.Key("device"));
    if (!d.ok()) return d.status().WithNode(node->name);
    node->device = *d;
  }
  return Status();
}

namespace {

void AppendShape(const PartialShape& s, std::string* out) {
  if (!s.rank_known()) {
    out->append("null");
    return;
  }
  out->push_back('[');
  for (int i = 0; i < s.rank(); ++i) {
    if (i) out->push_back(',');
    AppendInt(s.dim(i), out);
  }
  out->push_back(']');
}

template <typename T, typename Append>
void AppendList(const std::vector<T>& items, std::string* out, Append append) {
  out->push_back('[');
  for (size_t i = 0; i < items.size(); ++i) {
    if (i) out->push_back(',');
    append(items[i], out);
  }
  out->push_back(']');
}

// Whether a nested array is an exact form of tensor attr `t` of `node`: its
// dtype must come back from the node's "dtype" attr, and no dimension but
// the last may be 0 ([0, 3] prints as []).
bool NestedIsExact(const NodeDef& node, const Tensor& t) {
  auto d = node.attrs.find(kDTypeAttr);
  if (d == node.attrs.end() || d->second.kind() != AttrKind::kType ||
      d->second.type() != t.dtype()) {
    return false;
  }
  for (int i = 0; i + 1 < t.rank(); ++i) {
    if (t.dim(i) == 0) return false;
  }
  return true;
}

void AppendAttr(const NodeDef& node, const AttrValue& v, Encoding tensor_encoding,
                std::string* out) {
  switch (v.kind()) {
    case AttrKind::kInt: AppendInt(v.i(), out); break;
    case AttrKind::kFloat: AppendDouble(v.f(), out); break;
    case AttrKind::kBool: out->append(v.b() ? "true" : "false"); break;
    case AttrKind::kString: AppendJsonString(v.s(), out); break;
    case AttrKind::kType: AppendJsonString(DataTypeName(v.type()), out); break;
    case AttrKind::kShape: AppendShape(v.shape(), out); break;
    case AttrKind::kTensor:
      if (tensor_encoding == Encoding::kNested && !NestedIsExact(node, v.tensor())) {
        tensor_encoding = Encoding::kData;
      }
      AppendTensorJson(v.tensor(), tensor_encoding, out);
      break;
    case AttrKind::kIntList: AppendList(v.ints(), out, AppendInt); break;
    case AttrKind::kFloatList: AppendList(v.floats(), out, AppendDouble); break;
    case AttrKind::kStringList:
      AppendList(v.strings(), out, [](const std::string& s, std::string* o) {
        AppendJsonString(s, o);
      });
      break;
    case AttrKind::kTypeList:
      AppendList(v.types(), out, [](DataType t, std::string* o) {
        AppendJsonString(DataTypeName(t), o);
      });
      break;
    case AttrKind::kShapeList: AppendList(v.shapes(), out, AppendShape); break;
  }
}

}  // namespace

StatusOr<GraphDef> GraphFromJson(const Json& v, const JsonPath& path,
                                 const GraphJsonOptions& options) {
  FS_RETURN_IF_ERROR(CheckObject(v, path, "a graph", {"nodes"}));
  const OpRegistry& registry = options.registry ? *options.registry : *OpRegistry::Global();
  GraphDef graph;
  auto nodes = v.find("nodes");
  if (nodes == v.end() || nodes->is_null()) return graph;
  const JsonPath nodes_path = path.Key("nodes");
  if (!nodes->is_array()) {
    return PathError(nodes_path, "expected a list of nodes, got " + DescribeValue(*nodes));
  }
  graph.nodes.reserve(nodes->size());
  std::vector<size_t> compact;  // While and If nodes, lowered once the others are read
  for (size_t i = 0; i < nodes->size(); ++i) {
    if (IsCompactControlFlowNode((*nodes)[i])) {
      compact.push_back(i);
      continue;
    }
    FS_RETURN_IF_ERROR(ReadNode((*nodes)[i], nodes_path.Index(int64_t(i)), registry,
                                options.max_tensor_bytes, &graph.nodes.emplace_back()));
  }
  if (!compact.empty()) {
    FS_RETURN_IF_ERROR(LowerControlFlowNodes(*nodes, nodes_path, compact, registry,
                                             options.max_tensor_bytes, &graph));
  }
  return graph;
}

void AppendGraphJson(const GraphDef& graph, Encoding tensor_encoding, std::string* out) {
  out->append("{\"nodes\":[");
  for (size_t n = 0; n < graph.nodes.size(); ++n) {
    const NodeDef& node = graph.nodes[n];
    if (n) out->push_back(',');
    out->append("\n{\"name\":");
    AppendJsonString(node.name, out);
    out->append(",\"op\":");
    AppendJsonString(node.op, out);
    out->append(",\"inputs\":");
    AppendList(node.inputs, out, [](const std::string& s, std::string* o) {
      AppendJsonString(s, o);
    });
    out->append(",\"attrs\":{");
    bool first = true;
    for (const auto& [name, value] : node.attrs) {
      if (!first) out->push_back(',');
      first = false;
      AppendJsonString(name, out);
      out->push_back(':');
      AppendAttr(node, value, tensor_encoding, out);
    }
    out->push_back('}');
    if (!node.device.empty()) {
      out->append(",\"device\":");
      AppendJsonString(node.device, out);
    }
    out->push_back('}');
  }
  out->append(graph.nodes.empty() ? "]}" : "\n]}");
}

}  // namespace internal

StatusOr<GraphDef> ParseGraphJson(std::string_view json, std::string_view path,
                                  const GraphJsonOptions& options) {
  internal::JsonPath root(path);
  internal::Document doc;
  internal::Json& v = *doc;
  FS_RETURN_IF_ERROR(internal::ParseJsonText(json, root, &v));
  return internal::GraphFromJson(v, root, options);
}

std::string GraphToJson(const GraphDef& graph, Encoding tensor_encoding) {
  std::string out;
  internal::AppendGraphJson(graph, tensor_encoding, &out);
  return out;
}

}  // namespace flowstate::api

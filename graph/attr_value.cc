#include "graph/attr_value.h"

#include <charconv>

namespace flowstate {

std::string_view AttrKindName(AttrKind kind) {
  switch (kind) {
    case AttrKind::kInt: return "int";
    case AttrKind::kFloat: return "float";
    case AttrKind::kBool: return "bool";
    case AttrKind::kString: return "string";
    case AttrKind::kType: return "type";
    case AttrKind::kShape: return "shape";
    case AttrKind::kTensor: return "tensor";
    case AttrKind::kIntList: return "list(int)";
    case AttrKind::kFloatList: return "list(float)";
    case AttrKind::kStringList: return "list(string)";
    case AttrKind::kTypeList: return "list(type)";
    case AttrKind::kShapeList: return "list(shape)";
  }
  return "?";
}

StatusOr<AttrKind> AttrKindFromString(std::string_view name) {
  for (int k = 0; k <= int(AttrKind::kShapeList); ++k) {
    if (AttrKindName(AttrKind(k)) == name) return AttrKind(k);
  }
  return InvalidArgument("unknown attr kind '" + std::string(name) + "'");
}

static bool IsListKind(AttrKind k) { return k >= AttrKind::kIntList; }

static bool IsEmptyList(const AttrValue& v) {
  switch (v.kind()) {
    case AttrKind::kIntList: return v.ints().empty();
    case AttrKind::kFloatList: return v.floats().empty();
    case AttrKind::kStringList: return v.strings().empty();
    case AttrKind::kTypeList: return v.types().empty();
    case AttrKind::kShapeList: return v.shapes().empty();
    default: return false;
  }
}

StatusOr<AttrValue> AttrValue::CoercedTo(AttrKind want) const {
  AttrKind have = kind();
  if (have == want) return *this;
  if (want == AttrKind::kFloat && have == AttrKind::kInt) return AttrValue(double(i()));
  if (want == AttrKind::kFloatList && have == AttrKind::kIntList) {
    std::vector<double> f(ints().begin(), ints().end());
    return AttrValue(std::move(f));
  }
  if (want == AttrKind::kShape && have == AttrKind::kIntList) {
    return AttrValue(PartialShape(ints()));
  }
  if (IsListKind(want) && IsEmptyList(*this)) {
    switch (want) {
      case AttrKind::kIntList: return AttrValue(std::vector<int64_t>{});
      case AttrKind::kFloatList: return AttrValue(std::vector<double>{});
      case AttrKind::kStringList: return AttrValue(std::vector<std::string>{});
      case AttrKind::kTypeList: return AttrValue(std::vector<DataType>{});
      case AttrKind::kShapeList: return AttrValue(std::vector<PartialShape>{});
      default: break;
    }
  }
  if (want == AttrKind::kType && have == AttrKind::kString) {
    FS_ASSIGN_OR_RETURN(DataType t, DataTypeFromString(s()));
    return AttrValue(t);
  }
  if (want == AttrKind::kTypeList && have == AttrKind::kStringList) {
    std::vector<DataType> ts;
    for (const auto& n : strings()) {
      FS_ASSIGN_OR_RETURN(DataType t, DataTypeFromString(n));
      ts.push_back(t);
    }
    return AttrValue(std::move(ts));
  }
  return InvalidArgument("expected a value of kind " + std::string(AttrKindName(want)) +
                         ", got " + std::string(AttrKindName(have)));
}

bool AttrValue::operator==(const AttrValue& o) const {
  if (kind() != o.kind()) return false;
  if (kind() == AttrKind::kTensor) return TensorsEqual(tensor(), o.tensor());
  return std::visit(
      [&](const auto& a) {
        using V = std::decay_t<decltype(a)>;
        if constexpr (std::is_same_v<V, Tensor>) {
          return false;  // handled above
        } else {
          return a == std::get<V>(o.v_);
        }
      },
      v_);
}

static std::string FormatDouble(double d) {
  char buf[32];
  auto r = std::to_chars(buf, buf + sizeof(buf), d);
  return std::string(buf, r.ptr);
}

std::string AttrValue::DebugString() const {
  switch (kind()) {
    case AttrKind::kInt: return std::to_string(i());
    case AttrKind::kFloat: return FormatDouble(f());
    case AttrKind::kBool: return b() ? "true" : "false";
    case AttrKind::kString: return "\"" + s() + "\"";
    case AttrKind::kType: return std::string(DataTypeName(type()));
    case AttrKind::kShape: return shape().ToString();
    case AttrKind::kTensor: return tensor().DebugString();
    case AttrKind::kIntList: {
      std::string r = "[";
      for (size_t k = 0; k < ints().size(); ++k) r += (k ? ", " : "") + std::to_string(ints()[k]);
      return r + "]";
    }
    case AttrKind::kFloatList: {
      std::string r = "[";
      for (size_t k = 0; k < floats().size(); ++k) r += (k ? ", " : "") + FormatDouble(floats()[k]);
      return r + "]";
    }
    case AttrKind::kStringList: {
      std::string r = "[";
      for (size_t k = 0; k < strings().size(); ++k) r += (k ? ", \"" : "\"") + strings()[k] + "\"";
      return r + "]";
    }
    case AttrKind::kTypeList: {
      std::string r = "[";
      for (size_t k = 0; k < types().size(); ++k)
        r += (k ? ", " : "") + std::string(DataTypeName(types()[k]));
      return r + "]";
    }
    case AttrKind::kShapeList: {
      std::string r = "[";
      for (size_t k = 0; k < shapes().size(); ++k) r += (k ? ", " : "") + shapes()[k].ToString();
      return r + "]";
    }
  }
  return "?";
}

std::string TensorId::ToString() const {
  if (index < 0) return "^" + node;
  if (index == 0) return node;
  return node + ":" + std::to_string(index);
}

StatusOr<TensorId> ParseTensorId(std::string_view s) {
  TensorId id;
  if (!s.empty() && s[0] == '^') {
    id.node = std::string(s.substr(1));
    id.index = -1;
    if (id.node.empty() || id.node.find(':') != std::string::npos) {
      return InvalidArgument("malformed control input '" + std::string(s) + "'");
    }
    return id;
  }
  size_t colon = s.rfind(':');
  if (colon == std::string_view::npos) {
    id.node = std::string(s);
  } else {
    id.node = std::string(s.substr(0, colon));
    std::string_view digits = s.substr(colon + 1);
    int v = 0;
    auto [p, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), v);
    if (digits.empty() || ec != std::errc() || p != digits.data() + digits.size() || v < 0) {
      return InvalidArgument("malformed input '" + std::string(s) +
                             "' (expected \"node\", \"node:N\" or \"^node\")");
    }
    id.index = v;
  }
  if (id.node.empty()) {
    return InvalidArgument("malformed input '" + std::string(s) + "': empty node name");
  }
  return id;
}

StatusOr<const AttrValue*> FindAttr(const NodeDef& node, std::string_view name) {
  auto it = node.attrs.find(name);
  if (it == node.attrs.end()) {
    return InvalidArgument("node '" + node.name + "' (" + node.op + ") has no attr '" +
                               std::string(name) + "'",
                           node.name);
  }
  return &it->second;
}

template <typename R, typename Get>
static StatusOr<R> GetTyped(const NodeDef& node, std::string_view name, AttrKind kind, Get get) {
  FS_ASSIGN_OR_RETURN(const AttrValue* v, FindAttr(node, name));
  StatusOr<AttrValue> c = v->CoercedTo(kind);
  if (!c.ok()) {
    return InvalidArgument("node '" + node.name + "': attr '" + std::string(name) +
                               "': " + c.status().message(),
                           node.name);
  }
  return get(*c);
}

StatusOr<int64_t> GetIntAttr(const NodeDef& n, std::string_view name) {
  return GetTyped<int64_t>(n, name, AttrKind::kInt, [](const AttrValue& v) { return v.i(); });
}
StatusOr<double> GetFloatAttr(const NodeDef& n, std::string_view name) {
  return GetTyped<double>(n, name, AttrKind::kFloat, [](const AttrValue& v) { return v.f(); });
}
StatusOr<bool> GetBoolAttr(const NodeDef& n, std::string_view name) {
  return GetTyped<bool>(n, name, AttrKind::kBool, [](const AttrValue& v) { return v.b(); });
}
StatusOr<std::string> GetStringAttr(const NodeDef& n, std::string_view name) {
  return GetTyped<std::string>(n, name, AttrKind::kString, [](const AttrValue& v) { return v.s(); });
}
StatusOr<DataType> GetTypeAttr(const NodeDef& n, std::string_view name) {
  return GetTyped<DataType>(n, name, AttrKind::kType, [](const AttrValue& v) { return v.type(); });
}
StatusOr<PartialShape> GetShapeAttr(const NodeDef& n, std::string_view name) {
  return GetTyped<PartialShape>(n, name, AttrKind::kShape, [](const AttrValue& v) { return v.shape(); });
}
StatusOr<Tensor> GetTensorAttr(const NodeDef& n, std::string_view name) {
  return GetTyped<Tensor>(n, name, AttrKind::kTensor, [](const AttrValue& v) { return v.tensor(); });
}
StatusOr<std::vector<int64_t>> GetIntListAttr(const NodeDef& n, std::string_view name) {
  return GetTyped<std::vector<int64_t>>(n, name, AttrKind::kIntList,
                                        [](const AttrValue& v) { return v.ints(); });
}
StatusOr<std::vector<DataType>> GetTypeListAttr(const NodeDef& n, std::string_view name) {
  return GetTyped<std::vector<DataType>>(n, name, AttrKind::kTypeList,
                                         [](const AttrValue& v) { return v.types(); });
}

}  // namespace flowstate

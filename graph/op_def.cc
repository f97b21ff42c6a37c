#include "graph/op_def.h"

#include <cctype>
#include <charconv>
#include <cstdio>
#include <cstdlib>

#include "graph/op_defs/register_defs.h"

namespace flowstate {
namespace {

std::string_view Trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

bool IsIdentifier(std::string_view s) {
  if (s.empty() || !(std::isalpha(static_cast<unsigned char>(s[0])) || s[0] == '_')) return false;
  for (char ch : s) {
    if (!(std::isalnum(static_cast<unsigned char>(ch)) || ch == '_')) return false;
  }
  return true;
}

// "a, b, c" -> {"a","b","c"}
std::vector<std::string_view> SplitCommas(std::string_view s) {
  std::vector<std::string_view> out;
  size_t start = 0;
  int depth = 0;
  for (size_t i = 0; i <= s.size(); ++i) {
    if (i < s.size() && (s[i] == '[' || s[i] == '{')) ++depth;
    if (i < s.size() && (s[i] == ']' || s[i] == '}')) --depth;
    if (i == s.size() || (s[i] == ',' && depth == 0)) {
      std::string_view part = Trim(s.substr(start, i - start));
      if (!part.empty()) out.push_back(part);
      start = i + 1;
    }
  }
  return out;
}

StatusOr<ArgDef> ParseArg(std::string_view spec) {
  size_t colon = spec.find(':');
  if (colon == std::string_view::npos) return InvalidArgument("arg spec without ':'");
  ArgDef arg;
  arg.name = std::string(Trim(spec.substr(0, colon)));
  if (!IsIdentifier(arg.name)) return InvalidArgument("bad arg name '" + arg.name + "'");
  std::string_view type = Trim(spec.substr(colon + 1));
  if (type.starts_with("Ref(") && type.ends_with(")")) {
    arg.is_ref = true;
    type = Trim(type.substr(4, type.size() - 5));
  }
  size_t star = type.find('*');
  if (star != std::string_view::npos) {
    arg.number_attr = std::string(Trim(type.substr(0, star)));
    type = Trim(type.substr(star + 1));
    if (!IsIdentifier(arg.number_attr)) return InvalidArgument("bad number attr in arg");
  }
  StatusOr<DataType> fixed = DataTypeFromString(type);
  if (fixed.ok()) {
    arg.type = *fixed;
  } else if (IsIdentifier(type)) {
    arg.type_attr = std::string(type);
  } else {
    return InvalidArgument("bad arg type '" + std::string(type) + "'");
  }
  return arg;
}

StatusOr<AttrValue> ParseDefault(AttrKind kind, std::string_view text) {
  text = Trim(text);
  auto parse_int = [](std::string_view t) -> StatusOr<int64_t> {
    int64_t v = 0;
    auto [p, ec] = std::from_chars(t.data(), t.data() + t.size(), v);
    if (ec != std::errc() || p != t.data() + t.size()) {
      return InvalidArgument("bad int '" + std::string(t) + "'");
    }
    return v;
  };
  auto parse_float = [](std::string_view t) -> StatusOr<double> {
    std::string s(t);
    char* end = nullptr;
    double v = std::strtod(s.c_str(), &end);
    if (end != s.c_str() + s.size()) return InvalidArgument("bad float '" + s + "'");
    return v;
  };
  auto list_items = [&](std::string_view t) -> StatusOr<std::vector<std::string_view>> {
    if (!(t.starts_with("[") && t.ends_with("]"))) return InvalidArgument("list default must be [..]");
    return SplitCommas(t.substr(1, t.size() - 2));
  };
  switch (kind) {
    case AttrKind::kInt: {
      FS_ASSIGN_OR_RETURN(int64_t v, parse_int(text));
      return AttrValue(v);
    }
    case AttrKind::kFloat: {
      FS_ASSIGN_OR_RETURN(double v, parse_float(text));
      return AttrValue(v);
    }
    case AttrKind::kBool:
      if (text == "true") return AttrValue(true);
      if (text == "false") return AttrValue(false);
      return InvalidArgument("bad bool default");
    case AttrKind::kString:
      if (text.size() >= 2 && text.front() == '"' && text.back() == '"') {
        return AttrValue(std::string(text.substr(1, text.size() - 2)));
      }
      return InvalidArgument("string default must be quoted");
    case AttrKind::kType: {
      FS_ASSIGN_OR_RETURN(DataType t, DataTypeFromString(text));
      return AttrValue(t);
    }
    case AttrKind::kShape: {
      if (text == "?") return AttrValue(PartialShape::Unknown());
      FS_ASSIGN_OR_RETURN(auto items, list_items(text));
      std::vector<int64_t> dims;
      for (auto it : items) {
        if (it == "?") {
          dims.push_back(-1);
        } else {
          FS_ASSIGN_OR_RETURN(int64_t d, parse_int(it));
          dims.push_back(d);
        }
      }
      return AttrValue(PartialShape(std::move(dims)));
    }
    case AttrKind::kIntList: {
      FS_ASSIGN_OR_RETURN(auto items, list_items(text));
      std::vector<int64_t> v;
      for (auto it : items) {
        FS_ASSIGN_OR_RETURN(int64_t d, parse_int(it));
        v.push_back(d);
      }
      return AttrValue(std::move(v));
    }
    case AttrKind::kFloatList: {
      FS_ASSIGN_OR_RETURN(auto items, list_items(text));
      std::vector<double> v;
      for (auto it : items) {
        FS_ASSIGN_OR_RETURN(double d, parse_float(it));
        v.push_back(d);
      }
      return AttrValue(std::move(v));
    }
    case AttrKind::kStringList: {
      FS_ASSIGN_OR_RETURN(auto items, list_items(text));
      std::vector<std::string> v;
      for (auto it : items) {
        if (it.size() < 2 || it.front() != '"') return InvalidArgument("strings must be quoted");
        v.emplace_back(it.substr(1, it.size() - 2));
      }
      return AttrValue(std::move(v));
    }
    case AttrKind::kTypeList: {
      FS_ASSIGN_OR_RETURN(auto items, list_items(text));
      std::vector<DataType> v;
      for (auto it : items) {
        FS_ASSIGN_OR_RETURN(DataType t, DataTypeFromString(it));
        v.push_back(t);
      }
      return AttrValue(std::move(v));
    }
    case AttrKind::kShapeList:
      if (text == "[]") return AttrValue(std::vector<PartialShape>{});
      return InvalidArgument("only [] is supported as a list(shape) default");
    case AttrKind::kTensor:
      return InvalidArgument("tensor attrs take no default");
  }
  return InvalidArgument("bad default");
}

StatusOr<AttrDef> ParseAttr(std::string_view spec) {
  size_t colon = spec.find(':');
  if (colon == std::string_view::npos) return InvalidArgument("attr spec without ':'");
  AttrDef attr;
  attr.name = std::string(Trim(spec.substr(0, colon)));
  if (!IsIdentifier(attr.name)) return InvalidArgument("bad attr name '" + attr.name + "'");
  std::string_view rest = Trim(spec.substr(colon + 1));
  std::string_view def;
  size_t eq = rest.find('=');
  // ">=" is a minimum, not a default.
  while (eq != std::string_view::npos && eq > 0 && rest[eq - 1] == '>') {
    eq = rest.find('=', eq + 1);
  }
  if (eq != std::string_view::npos) {
    def = Trim(rest.substr(eq + 1));
    rest = Trim(rest.substr(0, eq));
  }
  size_t ge = rest.find(">=");
  if (ge != std::string_view::npos) {
    std::string_view m = Trim(rest.substr(ge + 2));
    int64_t v = 0;
    auto [p, ec] = std::from_chars(m.data(), m.data() + m.size(), v);
    if (ec != std::errc()) return InvalidArgument("bad minimum");
    attr.minimum = v;
    rest = Trim(rest.substr(0, ge));
  }
  if (rest.starts_with("{")) {
    if (!rest.ends_with("}")) return InvalidArgument("unterminated type set");
    for (auto name : SplitCommas(rest.substr(1, rest.size() - 2))) {
      FS_ASSIGN_OR_RETURN(DataType t, DataTypeFromString(name));
      attr.allowed_types.push_back(t);
    }
    attr.kind = AttrKind::kType;
  } else {
    FS_ASSIGN_OR_RETURN(attr.kind, AttrKindFromString(rest));
  }
  if (!def.empty()) {
    FS_ASSIGN_OR_RETURN(AttrValue v, ParseDefault(attr.kind, def));
    attr.default_value = std::move(v);
  }
  return attr;
}

}  // namespace

const AttrDef* OpDef::FindAttr(std::string_view n) const {
  for (const auto& a : attrs) {
    if (a.name == n) return &a;
  }
  return nullptr;
}

OpDefBuilder::OpDefBuilder(std::string name) { def_.name = std::move(name); }

OpDefBuilder& OpDefBuilder::Input(std::string_view spec) {
  StatusOr<ArgDef> a = ParseArg(spec);
  if (a.ok()) {
    def_.inputs.push_back(*a);
  } else {
    errors_.push_back("input '" + std::string(spec) + "': " + a.status().message());
  }
  return *this;
}

OpDefBuilder& OpDefBuilder::Output(std::string_view spec) {
  StatusOr<ArgDef> a = ParseArg(spec);
  if (a.ok()) {
    def_.outputs.push_back(*a);
  } else {
    errors_.push_back("output '" + std::string(spec) + "': " + a.status().message());
  }
  return *this;
}

OpDefBuilder& OpDefBuilder::Attr(std::string_view spec) {
  StatusOr<AttrDef> a = ParseAttr(spec);
  if (a.ok()) {
    def_.attrs.push_back(*a);
  } else {
    errors_.push_back("attr '" + std::string(spec) + "': " + a.status().message());
  }
  return *this;
}

OpDefBuilder& OpDefBuilder::SetIsStateful() {
  def_.is_stateful = true;
  return *this;
}

OpDefBuilder& OpDefBuilder::SetShapeFn(ShapeFn fn) {
  def_.shape_fn = std::move(fn);
  return *this;
}

OpDefBuilder& OpDefBuilder::Doc(std::string_view doc) {
  def_.doc = std::string(doc);
  return *this;
}

StatusOr<OpDef> OpDefBuilder::Build() const {
  if (!errors_.empty()) {
    return InvalidArgument("op " + def_.name + ": " + errors_.front());
  }
  // Every type/number attr an arg names must be declared.
  auto check_arg = [&](const ArgDef& a) -> Status {
    if (!a.type_attr.empty()) {
      const AttrDef* t = def_.FindAttr(a.type_attr);
      if (t != nullptr && t->kind == AttrKind::kTypeList && a.number_attr.empty() && !a.is_ref) {
        return Status();  // a list of tensors of the listed types
      }
      if (t == nullptr || t->kind != AttrKind::kType) {
        return InvalidArgument("op " + def_.name + ": arg '" + a.name +
                               "' names undeclared type attr '" + a.type_attr + "'");
      }
    }
    if (!a.number_attr.empty()) {
      const AttrDef* n = def_.FindAttr(a.number_attr);
      if (n == nullptr || n->kind != AttrKind::kInt) {
        return InvalidArgument("op " + def_.name + ": arg '" + a.name +
                               "' names undeclared int attr '" + a.number_attr + "'");
      }
    }
    return Status();
  };
  for (const auto& a : def_.inputs) FS_RETURN_IF_ERROR(check_arg(a));
  for (const auto& a : def_.outputs) FS_RETURN_IF_ERROR(check_arg(a));
  OpDef def = def_;
  for (auto* args : {&def.inputs, &def.outputs}) {
    for (ArgDef& a : *args) {
      const AttrDef* t = a.type_attr.empty() ? nullptr : def.FindAttr(a.type_attr);
      if (t != nullptr && t->kind == AttrKind::kTypeList) a.type_list_attr = a.type_attr;
    }
  }
  if (!def.shape_fn) def.shape_fn = shape_fns::Unknown;
  return def;
}

OpRegistry* OpRegistry::Global() {
  static OpRegistry* registry = [] {
    auto* r = new OpRegistry();
    internal::RegisterAllOps(r);
    return r;
  }();
  return registry;
}

Status OpRegistry::Register(const OpDefBuilder& builder) {
  FS_ASSIGN_OR_RETURN(OpDef def, builder.Build());
  if (ops_.count(def.name)) return AlreadyExists("op " + def.name + " is already registered");
  std::string name = def.name;
  ops_.emplace(std::move(name), std::make_unique<OpDef>(std::move(def)));
  return Status();
}

const OpDef* OpRegistry::Find(std::string_view name) const {
  auto it = ops_.find(name);
  return it == ops_.end() ? nullptr : it->second.get();
}

StatusOr<const OpDef*> OpRegistry::Lookup(std::string_view op, std::string_view node) const {
  const OpDef* def = Find(op);
  if (def == nullptr) {
    return InvalidArgument("node '" + std::string(node) + "': unknown op '" + std::string(op) + "'",
                           std::string(node));
  }
  return def;
}

std::vector<const OpDef*> OpRegistry::ListOps() const {
  std::vector<const OpDef*> out;
  for (const auto& [name, def] : ops_) out.push_back(def.get());
  return out;
}

InferenceContext::InferenceContext(const NodeDef* node, const OpDef* op,
                                   std::vector<DataType> input_types,
                                   std::vector<PartialShape> input_shapes,
                                   std::vector<const Tensor*> input_constants,
                                   int num_outputs)
    : node_(node),
      op_(op),
      input_types_(std::move(input_types)),
      input_shapes_(std::move(input_shapes)),
      input_constants_(std::move(input_constants)),
      output_shapes_(num_outputs) {}

Status InferenceContext::Error(std::string_view message) const {
  return InvalidArgument("node '" + node_->name + "' (" + node_->op + "): " + std::string(message),
                         node_->name);
}

const AttrValue& InferenceContext::GetAttr(std::string_view name) const {
  auto it = node_->attrs.find(name);
  if (it == node_->attrs.end()) {
    std::fprintf(stderr, "flowstate: op %s reads undeclared attr %.*s\n", node_->op.c_str(),
                 int(name.size()), name.data());
    std::abort();
  }
  return it->second;
}

int64_t InferenceContext::IntAttr(std::string_view name) const { return GetAttr(name).i(); }
double InferenceContext::FloatAttr(std::string_view name) const { return GetAttr(name).f(); }
bool InferenceContext::BoolAttr(std::string_view name) const { return GetAttr(name).b(); }
DataType InferenceContext::TypeAttr(std::string_view name) const { return GetAttr(name).type(); }

}  // namespace flowstate

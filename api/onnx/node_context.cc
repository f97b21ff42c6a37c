#include "api/onnx/node_context.h"

#include <cstring>
#include <filesystem>
#include <fstream>

#include "graph/allocator.h"

namespace flowstate::onnx_import {
namespace {

std::string Sanitize(std::string_view s) {
  std::string out;
  for (char ch : s) {
    bool ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
              ch == '_' || ch == '-' || ch == '.' || ch == '/';
    out.push_back(ok ? ch : '_');
  }
  while (!out.empty() && out.front() == '/') out.erase(out.begin());
  while (!out.empty() && out.back() == '/') out.pop_back();
  if (out.empty()) out = "node";
  return out;
}

const char* AttrTypeName(int t) {
  switch (t) {
    case onnx::AttributeProto::FLOAT: return "float";
    case onnx::AttributeProto::INT: return "int";
    case onnx::AttributeProto::STRING: return "string";
    case onnx::AttributeProto::TENSOR: return "tensor";
    case onnx::AttributeProto::GRAPH: return "graph";
    case onnx::AttributeProto::FLOATS: return "floats";
    case onnx::AttributeProto::INTS: return "ints";
    case onnx::AttributeProto::STRINGS: return "strings";
    case onnx::AttributeProto::SPARSE_TENSOR: return "sparse tensor";
    default: return "other";
  }
}

// Reads `bytes` bytes at `offset` of the external data file `location`,
// which must stay beneath data_root.
StatusOr<std::string> ReadExternal(const std::string& location, int64_t offset, int64_t length,
                                   const std::string& external_dir, const std::string& data_root,
                                   const std::string& tensor) {
  namespace fs = std::filesystem;
  auto err = [&](const std::string& m) {
    return InvalidArgument("tensor '" + tensor + "': external data location '" + location +
                           "' " + m);
  };
  if (external_dir.empty()) return err("cannot be read: no external data folder was given");
  fs::path loc(location);
  if (location.empty() || loc.is_absolute()) return err("must be a relative path");
  for (const auto& part : loc) {
    if (part == "..") return err("must not contain '..'");
  }
  std::error_code ec;
  fs::path root = fs::canonical(data_root.empty() ? external_dir : data_root, ec);
  if (ec) return err("cannot be checked: the data root does not exist");
  fs::path file = fs::canonical(fs::path(external_dir) / loc, ec);
  if (ec) return NotFound("initializer '" + tensor + "': external data file '" + location +
                          "' does not exist");
  std::string r = root.string(), f = file.string();
  if (f.size() <= r.size() || f.compare(0, r.size(), r) != 0 || f[r.size()] != '/') {
    return err("resolves outside the data root");
  }
  if (!fs::is_regular_file(file, ec)) return err("is not a regular file");
  uint64_t size = fs::file_size(file, ec);
  if (ec) return err("cannot be read");
  if (offset < 0 || uint64_t(offset) > size) return err("offset " + std::to_string(offset) +
                                                      " is past the end of the file");
  if (length < 0) length = int64_t(size - uint64_t(offset));
  if (uint64_t(offset) + uint64_t(length) > size) {
    return err("holds " + std::to_string(size - offset) + " bytes after offset " +
               std::to_string(offset) + ", " + std::to_string(length) + " needed");
  }
  std::ifstream in(file, std::ios::binary);
  std::string out(size_t(length), '\0');
  in.seekg(offset);
  in.read(out.data(), length);
  if (!in) return err("cannot be read");
  return out;
}

}  // namespace

DataType FromOnnxType(int32_t t) {
  switch (t) {
    case onnx::TensorProto::FLOAT: return DataType::kFloat32;
    case onnx::TensorProto::DOUBLE: return DataType::kFloat64;
    case onnx::TensorProto::INT32: return DataType::kInt32;
    case onnx::TensorProto::INT64: return DataType::kInt64;
    case onnx::TensorProto::UINT8: return DataType::kUInt8;
    case onnx::TensorProto::BOOL: return DataType::kBool;
    case onnx::TensorProto::FLOAT16: return DataType::kFloat16;
    case onnx::TensorProto::BFLOAT16: return DataType::kBFloat16;
    default: return DataType::kInvalid;
  }
}

std::string OnnxTypeName(int32_t t) {
  if (onnx::TensorProto::DataType_IsValid(t)) {
    std::string n = onnx::TensorProto::DataType_Name(onnx::TensorProto::DataType(t));
    for (char& c : n) c = char(std::tolower(c));
    return n;
  }
  return "type " + std::to_string(t);
}

Status InlineExternalData(onnx::TensorProto* t, const std::string& external_dir,
                          const std::string& data_root) {
  if (t->data_location() != onnx::TensorProto::EXTERNAL) return Status();
  const std::string& name = t->name();
  std::string location;
  int64_t offset = 0, length = -1;
  for (const auto& kv : t->external_data()) {
    try {
      if (kv.key() == "location") location = kv.value();
      else if (kv.key() == "offset") offset = std::stoll(kv.value());
      else if (kv.key() == "length") length = std::stoll(kv.value());
    } catch (const std::exception&) {
      return InvalidArgument("tensor '" + name + "': external data field '" + kv.key() +
                             "' is not a number", name);
    }
  }
  StatusOr<std::string> bytes = ReadExternal(location, offset, length, external_dir, data_root, name);
  if (!bytes.ok()) return Status(bytes.status().code(), bytes.status().message(), name);
  t->set_raw_data(std::move(bytes).value());
  t->clear_external_data();
  t->set_data_location(onnx::TensorProto::DEFAULT);
  return Status();
}

StatusOr<Tensor> TensorFromProto(const onnx::TensorProto& t) {
  const std::string& name = t.name();
  DataType dt = FromOnnxType(t.data_type());
  if (dt == DataType::kInvalid) {
    return Unimplemented("tensor '" + name + "' has element type " + OnnxTypeName(t.data_type()) +
                         ", which Flowstate does not have");
  }
  if (t.has_segment()) {
    return Unimplemented("tensor '" + name + "' is segmented");
  }
  if (t.dims_size() > kMaxRank) {
    return Unimplemented("tensor '" + name + "' has rank " + std::to_string(t.dims_size()) +
                         "; Flowstate tensors have at most " + std::to_string(kMaxRank));
  }
  std::vector<int64_t> dims;
  int64_t n = 1;
  for (int64_t d : t.dims()) {
    if (d < 0) return InvalidArgument("tensor '" + name + "' has a negative dimension");
    if (d > 0 && n > (int64_t(1) << 40) / d) {
      return InvalidArgument("tensor '" + name + "' is too large");
    }
    dims.push_back(d);
    n *= d;
  }
  TensorShape shape(dims);
  const size_t bytes = size_t(n) * DataTypeSize(dt);
  if (t.data_location() == onnx::TensorProto::EXTERNAL) {
    return InvalidArgument("tensor '" + name + "' is stored as external data");
  }
  const std::string* raw = t.has_raw_data() ? &t.raw_data() : nullptr;
  // The data must match the shape before anything is allocated for it (a
  // file's dims are not trusted).
  if (raw != nullptr && raw->size() != bytes) {
    return InvalidArgument("tensor '" + name + "' holds " + std::to_string(raw->size()) +
                           " bytes of data for a shape of " + std::to_string(n) +
                           " elements (" + std::to_string(bytes) + " bytes)");
  }
  if (raw == nullptr) {
    int64_t have = 0;
    switch (dt) {
      case DataType::kFloat32: have = t.float_data_size(); break;
      case DataType::kFloat64: have = t.double_data_size(); break;
      case DataType::kInt64: have = t.int64_data_size(); break;
      default: have = t.int32_data_size(); break;
    }
    if (have != n) {
      return InvalidArgument("tensor '" + name + "' holds " + std::to_string(have) +
                             " values for a shape of " + std::to_string(n) + " elements");
    }
  }
  StatusOr<Tensor> out_or = Tensor::Allocate(HostAllocator(), dt, shape);
  if (!out_or.ok()) return out_or.status();
  Tensor out = std::move(out_or).value();
  if (raw != nullptr) {
    if (bytes > 0) std::memcpy(out.raw_data(), raw->data(), bytes);  // little-endian host
    return out;
  }
  auto count_err = [&](int got) {
    return InvalidArgument("tensor '" + name + "' holds " + std::to_string(got) +
                           " values for a shape of " + std::to_string(n) + " elements");
  };
  switch (dt) {
    case DataType::kFloat32:
      if (t.float_data_size() != n) return count_err(t.float_data_size());
      for (int64_t i = 0; i < n; ++i) out.data<float>()[i] = t.float_data(int(i));
      break;
    case DataType::kFloat64:
      if (t.double_data_size() != n) return count_err(t.double_data_size());
      for (int64_t i = 0; i < n; ++i) out.data<double>()[i] = t.double_data(int(i));
      break;
    case DataType::kInt64:
      if (t.int64_data_size() != n) return count_err(t.int64_data_size());
      for (int64_t i = 0; i < n; ++i) out.data<int64_t>()[i] = t.int64_data(int(i));
      break;
    case DataType::kInt32:
      if (t.int32_data_size() != n) return count_err(t.int32_data_size());
      for (int64_t i = 0; i < n; ++i) out.data<int32_t>()[i] = t.int32_data(int(i));
      break;
    case DataType::kUInt8:
      if (t.int32_data_size() != n) return count_err(t.int32_data_size());
      for (int64_t i = 0; i < n; ++i) out.data<uint8_t>()[i] = uint8_t(t.int32_data(int(i)));
      break;
    case DataType::kBool:
      if (t.int32_data_size() != n) return count_err(t.int32_data_size());
      for (int64_t i = 0; i < n; ++i) out.data<bool>()[i] = t.int32_data(int(i)) != 0;
      break;
    case DataType::kFloat16:
    case DataType::kBFloat16: {
      if (t.int32_data_size() != n) return count_err(t.int32_data_size());
      auto* p = static_cast<uint16_t*>(out.raw_data());
      for (int64_t i = 0; i < n; ++i) p[i] = uint16_t(t.int32_data(int(i)));
      break;
    }
    default:
      return Unimplemented("tensor '" + name + "': unsupported element type");
  }
  return out;
}

NodeContext::NodeContext(ModelState* model, const onnx::NodeProto& node, int index, int opset)
    : model_(model), node_(node), opset_(opset) {
  name_ = node.name().empty() ? node.op_type() + "_" + std::to_string(index) : node.name();
  std::string base = Sanitize(name_), s = base;
  for (int k = 1; model->scopes_taken.count(s); ++k) s = base + "_" + std::to_string(k);
  model->scopes_taken.insert(s);
  scope_ = model->root.NewSubScope(s);
}

StatusOr<Value> NodeContext::input(int i) const {
  if (!has_input(i)) return Error("input " + std::to_string(i) + " is missing");
  auto it = model_->values.find(node_.input(i));
  if (it == model_->values.end()) {
    return Error("input " + std::to_string(i) + " '" + node_.input(i) +
                 "' is neither a graph input, an initializer nor the output of an earlier node");
  }
  return it->second;
}

StatusOr<std::vector<int64_t>> NodeContext::ConstInts(int i, std::string_view what) const {
  FS_ASSIGN_OR_RETURN(Value v, input(i));
  if (!v.constant) {
    return Unsupported("input '" + std::string(what) +
                       "' must be a constant (an initializer or a Constant)");
  }
  const Tensor& t = *v.constant;
  std::vector<int64_t> out;
  if (t.dtype() == DataType::kInt64) {
    for (int64_t x : t.flat<int64_t>()) out.push_back(x);
  } else if (t.dtype() == DataType::kInt32) {
    for (int32_t x : t.flat<int32_t>()) out.push_back(x);
  } else {
    return Error("input '" + std::string(what) + "' must be int32 or int64, got " +
                 std::string(DataTypeName(t.dtype())));
  }
  return out;
}

StatusOr<std::vector<double>> NodeContext::ConstDoubles(int i, std::string_view what) const {
  FS_ASSIGN_OR_RETURN(Value v, input(i));
  if (!v.constant) {
    return Unsupported("input '" + std::string(what) + "' must be a constant");
  }
  const Tensor& t = *v.constant;
  std::vector<double> out;
  switch (t.dtype()) {
    case DataType::kFloat32: for (float x : t.flat<float>()) out.push_back(x); break;
    case DataType::kFloat64: for (double x : t.flat<double>()) out.push_back(x); break;
    case DataType::kInt32: for (int32_t x : t.flat<int32_t>()) out.push_back(x); break;
    case DataType::kInt64: for (int64_t x : t.flat<int64_t>()) out.push_back(double(x)); break;
    case DataType::kUInt8: for (uint8_t x : t.flat<uint8_t>()) out.push_back(x); break;
    case DataType::kBool: for (bool x : t.flat<bool>()) out.push_back(x); break;
    default:
      return Unsupported("input '" + std::string(what) + "' has dtype " +
                         std::string(DataTypeName(t.dtype())));
  }
  return out;
}

const onnx::AttributeProto* NodeContext::FindAttr(std::string_view name) const {
  for (const auto& a : node_.attribute()) {
    if (a.name() == name) return &a;
  }
  return nullptr;
}

bool NodeContext::HasAttr(std::string_view name) const { return FindAttr(name) != nullptr; }

StatusOr<const onnx::AttributeProto*> NodeContext::Attr(std::string_view name, int type,
                                                        bool required) {
  read_.insert(std::string(name));
  const onnx::AttributeProto* a = FindAttr(name);
  if (a == nullptr) {
    if (required) return Error("attribute '" + std::string(name) + "' is required");
    return static_cast<const onnx::AttributeProto*>(nullptr);
  }
  if (!a->ref_attr_name().empty()) {
    return Unsupported("attribute '" + std::string(name) + "' refers to a function attribute");
  }
  int t = a->type();
  if (t == onnx::AttributeProto::UNDEFINED) {  // old writers: infer from the field set
    if (a->has_f()) t = onnx::AttributeProto::FLOAT;
    else if (a->has_i()) t = onnx::AttributeProto::INT;
    else if (a->has_s()) t = onnx::AttributeProto::STRING;
    else if (a->has_t()) t = onnx::AttributeProto::TENSOR;
    else if (a->ints_size() > 0) t = onnx::AttributeProto::INTS;
    else if (a->floats_size() > 0) t = onnx::AttributeProto::FLOATS;
  }
  if (t != type) {
    return Error("attribute '" + std::string(name) + "' must be " + AttrTypeName(type) +
                 ", got " + AttrTypeName(t));
  }
  return a;
}

StatusOr<int64_t> NodeContext::Int(std::string_view name, std::optional<int64_t> def) {
  FS_ASSIGN_OR_RETURN(auto* a, Attr(name, onnx::AttributeProto::INT, !def));
  return a ? a->i() : *def;
}
StatusOr<double> NodeContext::Float(std::string_view name, std::optional<double> def) {
  FS_ASSIGN_OR_RETURN(auto* a, Attr(name, onnx::AttributeProto::FLOAT, !def));
  return a ? double(a->f()) : *def;
}
StatusOr<std::string> NodeContext::String(std::string_view name, std::optional<std::string> def) {
  FS_ASSIGN_OR_RETURN(auto* a, Attr(name, onnx::AttributeProto::STRING, !def));
  return a ? a->s() : *def;
}
StatusOr<std::vector<int64_t>> NodeContext::Ints(std::string_view name,
                                                 std::optional<std::vector<int64_t>> def) {
  FS_ASSIGN_OR_RETURN(auto* a, Attr(name, onnx::AttributeProto::INTS, !def));
  if (!a) return *def;
  return std::vector<int64_t>(a->ints().begin(), a->ints().end());
}
StatusOr<std::vector<double>> NodeContext::Floats(std::string_view name,
                                                  std::optional<std::vector<double>> def) {
  FS_ASSIGN_OR_RETURN(auto* a, Attr(name, onnx::AttributeProto::FLOATS, !def));
  if (!a) return *def;
  return std::vector<double>(a->floats().begin(), a->floats().end());
}
StatusOr<Tensor> NodeContext::TensorAttr(std::string_view name) {
  FS_ASSIGN_OR_RETURN(auto* a, Attr(name, onnx::AttributeProto::TENSOR, true));
  StatusOr<Tensor> t = TensorFromProto(a->t());
  if (!t.ok()) {
    return Status(t.status().code(), "ONNX node '" + name_ + "' (" + op() + "): attribute '" +
                                         std::string(name) + "': " + t.status().message(),
                  name_);
  }
  return t;
}

std::string NodeContext::UncheckedAttr() const {
  for (const auto& a : node_.attribute()) {
    if (!read_.count(a.name())) return a.name();
  }
  return "";
}

Output NodeContext::Op(const std::string& op, const std::vector<Output>& inputs, AttrMap attrs) {
  std::vector<std::string> in;
  for (const Output& o : inputs) in.push_back(o.name());
  return Output(scope_.AddNode(op, op, std::move(in), std::move(attrs)), 0);
}

std::vector<Output> NodeContext::OpN(const std::string& op, const std::vector<Output>& inputs,
                                     AttrMap attrs, int num_outputs) {
  Output o = Op(op, inputs, std::move(attrs));
  std::vector<Output> outs;
  for (int i = 0; i < num_outputs; ++i) outs.emplace_back(o.node, i);
  return outs;
}

Output NodeContext::Const(const Tensor& t) {
  return Op("Const", {}, {{"value", AttrValue(t)}, {"dtype", AttrValue(t.dtype())}});
}

Output NodeContext::Scalar(double v, DataType dtype) {
  Tensor t(dtype, TensorShape());
  switch (dtype) {
    case DataType::kFloat32: *t.data<float>() = float(v); break;
    case DataType::kFloat64: *t.data<double>() = v; break;
    case DataType::kInt32: *t.data<int32_t>() = int32_t(v); break;
    case DataType::kInt64: *t.data<int64_t>() = int64_t(v); break;
    case DataType::kUInt8: *t.data<uint8_t>() = uint8_t(v); break;
    case DataType::kBool: *t.data<bool>() = v != 0; break;
    case DataType::kFloat16: *t.data<Half>() = Half(float(v)); break;
    case DataType::kBFloat16: *t.data<BFloat16>() = BFloat16(float(v)); break;
    default: break;
  }
  return Const(t);
}

Output NodeContext::Ints64(const std::vector<int64_t>& v) {
  return Const(Tensor::FromVector<int64_t>(v));
}
Output NodeContext::Ints32(const std::vector<int64_t>& v) {
  std::vector<int32_t> w(v.begin(), v.end());
  return Const(Tensor::FromVector<int32_t>(w));
}
Output NodeContext::Int32(int64_t v) { return Const(Tensor::Scalar<int32_t>(int32_t(v))); }

DataType NodeContext::OutputType(int i) const {
  if (!has_output(i)) return DataType::kInvalid;
  auto it = model_->inferred.find(node_.output(i));
  return it == model_->inferred.end() ? DataType::kInvalid : FromOnnxType(it->second.first);
}

PartialShape NodeContext::OutputShape(int i) const {
  if (!has_output(i)) return PartialShape();
  auto it = model_->inferred.find(node_.output(i));
  return it == model_->inferred.end() ? PartialShape() : it->second.second;
}

Status NodeContext::SetOutput(int i, const Output& out, DataType dtype, const PartialShape& shape,
                              std::optional<Tensor> constant) {
  if (!has_output(i)) return Status();
  Value v;
  v.out = out;
  auto it = model_->inferred.find(node_.output(i));
  if (it != model_->inferred.end()) {
    v.dtype = FromOnnxType(it->second.first);
    v.shape = it->second.second;
  }
  if (v.dtype == DataType::kInvalid) v.dtype = dtype;
  if (!v.shape.rank_known()) v.shape = shape;
  if (constant) {
    v.constant = std::move(constant);
    v.dtype = v.constant->dtype();
    v.shape = PartialShape(v.constant->shape());
  }
  model_->values[node_.output(i)] = std::move(v);
  return Status();
}

Status NodeContext::Error(const std::string& msg) const {
  return InvalidArgument("ONNX node '" + name_ + "' (" + op() + "): " + msg, name_);
}
Status NodeContext::Unsupported(const std::string& msg) const {
  return Unimplemented("ONNX node '" + name_ + "' (" + op() + "): " + msg, name_);
}

}  // namespace flowstate::onnx_import

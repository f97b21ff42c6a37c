// Tensors in JSON: the nested, "data" and "b64" encodings (json_codec.h).
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

#include "api/base64.h"
#include "api/json_internal.h"
#include "graph/allocator.h"

namespace flowstate::api {
namespace internal {
namespace {

// "b64" is the raw bytes of the buffer, which the wire format says are
// little-endian.
static_assert(std::endian::native == std::endian::little,
              "the b64 tensor encoding copies buffers as little-endian bytes");

std::string WhatFor(DataType t) {
  std::string what = t == DataType::kBool ? "a bool" : IsInteger(t) ? "an integer" : "a number";
  return what + " (dtype " + std::string(DataTypeName(t)) + ")";
}

std::string ElementError(ScalarError e, const Json& v, DataType t) {
  if (e == ScalarError::kOutOfRange) {
    return DescribeValue(v) + " is out of range for " + std::string(DataTypeName(t));
  }
  return "expected " + WhatFor(t) + ", got " + DescribeValue(v);
}

std::string ElementError(ScalarError e, const PackedNumber& v, DataType t) {
  return ElementError(e, v.ToJson(), t);
}

// The element conversions of a document's value or a packed number.
ScalarError ToInteger(const Json& v, int64_t lo, int64_t hi, int64_t* out) {
  return JsonToInteger(v, lo, hi, out);
}
ScalarError ToInteger(const PackedNumber& v, int64_t lo, int64_t hi, int64_t* out) {
  return NumberToInteger(v, lo, hi, out);
}
ScalarError ToDouble(const Json& v, double* out) { return JsonToDouble(v, out); }
ScalarError ToDouble(const PackedNumber& v, double* out) { return NumberToDouble(v, out); }
ScalarError ToBool(const Json& v, bool* out) {
  if (!v.is_boolean()) return ScalarError::kWrongType;
  *out = v.get<bool>();
  return ScalarError::kNone;
}
ScalarError ToBool(const PackedNumber&, bool*) { return ScalarError::kWrongType; }

// V: a Json or a PackedNumber.
template <typename T, typename V>
ScalarError ReadElement(const V& v, T* out) {
  if constexpr (std::is_same_v<T, bool>) {
    return ToBool(v, out);
  } else if constexpr (std::is_integral_v<T>) {
    int64_t i = 0;
    ScalarError e =
        ToInteger(v, std::numeric_limits<T>::min(), std::numeric_limits<T>::max(), &i);
    if (e != ScalarError::kNone) return e;
    *out = static_cast<T>(i);
  } else {
    double d = 0;
    ScalarError e = ToDouble(v, &d);
    if (e != ScalarError::kNone) return e;
    if constexpr (std::is_same_v<T, double>) {
      *out = d;
    } else {
      float f = static_cast<float>(d);  // NaN and the infinities
      if (std::isfinite(d)) {
        // From here on (float)d would round to infinity.
        if (std::fabs(d) >= 0x1.ffffffp127) return ScalarError::kOutOfRange;
        f = NarrowToFloat(d);
      }
      if constexpr (std::is_same_v<T, float>) {
        *out = f;
      } else {  // Half, BFloat16
        T h(f);
        if (std::isfinite(f) && std::isinf(float(h))) return ScalarError::kOutOfRange;
        *out = h;
      }
    }
  }
  return ScalarError::kNone;
}

// The dtype the values of a tensor without one get (json_codec.h).
template <typename PathOf>
Status InferDType(const std::vector<const Json*>& leaves, PathOf path_of, DataType* out) {
  bool any_bool = false, any_number = false, any_float = false, any_wide = false;
  for (size_t i = 0; i < leaves.size(); ++i) {
    const Json& v = *leaves[i];
    double unused = 0;
    if (v.is_boolean()) {
      if (any_number) {
        return PathError(path_of(i), "expected a number like " + path_of(0) + ", got " +
                                         DescribeValue(v));
      }
      any_bool = true;
      continue;
    }
    bool number =
        v.is_number() || (v.is_string() && JsonToDouble(v, &unused) == ScalarError::kNone);
    if (!number) {
      return PathError(path_of(i), "expected a number or a bool, got " + DescribeValue(v));
    }
    if (any_bool) {
      return PathError(path_of(i), "expected a bool like " + path_of(0) + ", got " +
                                       DescribeValue(v));
    }
    any_number = true;
    if (v.is_number_unsigned()) {
      any_wide |= v.get<uint64_t>() > uint64_t(std::numeric_limits<int32_t>::max());
    } else if (v.is_number_integer()) {
      int64_t x = v.get<int64_t>();
      any_wide |=
          x < std::numeric_limits<int32_t>::min() || x > std::numeric_limits<int32_t>::max();
    } else {
      any_float = true;
    }
  }
  *out = any_bool    ? DataType::kBool
         : any_float ? DataType::kFloat32
         : any_wide  ? DataType::kInt64
         : any_number ? DataType::kInt32
                      : DataType::kFloat32;  // no values at all
  return Status();
}

// InferDType for numbers only (no bools, no strings), at least one.
DataType InferNumbersDType(const std::vector<PackedNumber>& numbers) {
  bool any_float = false, any_wide = false;
  for (const PackedNumber& n : numbers) {
    switch (n.kind) {
      case PackedNumber::Kind::kUnsigned:
        any_wide |= n.u > uint64_t(std::numeric_limits<int32_t>::max());
        break;
      case PackedNumber::Kind::kInteger:
        any_wide |= n.i < std::numeric_limits<int32_t>::min() ||
                    n.i > std::numeric_limits<int32_t>::max();
        break;
      case PackedNumber::Kind::kFloat: any_float = true; break;
    }
  }
  return any_float ? DataType::kFloat32 : any_wide ? DataType::kInt64 : DataType::kInt32;
}

Status CheckSize(const TensorShape& shape, DataType dtype, size_t max_bytes,
                 const JsonPath& path) {
  size_t n = size_t(shape.num_elements());
  size_t size = DataTypeSize(dtype);
  if (n <= max_bytes / size) return Status();
  std::string bytes = n <= std::numeric_limits<size_t>::max() / size ? std::to_string(n * size)
                                                                     : "more than 2^64";
  std::string where = path.ToString();
  return ResourceExhausted((where.empty() ? "" : where + ": ") + "a tensor of " +
                           std::string(DataTypeName(dtype)) + shape.ToString() + " takes " +
                           bytes + " bytes, more than the limit of " +
                           std::to_string(max_bytes) + " bytes");
}

StatusOr<Tensor> AllocateAt(DataType dtype, const TensorShape& shape, const JsonPath& path) {
  StatusOr<Tensor> t = Tensor::Allocate(HostAllocator(), dtype, shape);
  if (t.ok()) return t;
  std::string where = path.ToString();
  return ResourceExhausted((where.empty() ? "" : where + ": ") + t.status().message());
}

// The values of a document's leaves, or of packed numbers.
const Json& LeafAt(const std::vector<const Json*>& leaves, size_t i) { return *leaves[i]; }
const PackedNumber& LeafAt(const std::vector<PackedNumber>& leaves, size_t i) { return leaves[i]; }

// Leaves: std::vector<const Json*> or std::vector<PackedNumber>.
template <typename Leaves, typename PathOf>
StatusOr<Tensor> MakeTensor(DataType dtype, const TensorShape& shape, const Leaves& leaves,
                            size_t max_bytes, const JsonPath& path, PathOf path_of) {
  FS_RETURN_IF_ERROR(CheckSize(shape, dtype, max_bytes, path));
  FS_ASSIGN_OR_RETURN(Tensor t, AllocateAt(dtype, shape, path));
  Status s = DispatchDataType(dtype, [&]<typename T>() -> Status {
    T* d = t.data<T>();
    for (size_t i = 0; i < leaves.size(); ++i) {
      ScalarError e = ReadElement(LeafAt(leaves, i), &d[i]);
      if (e != ScalarError::kNone) {
        return PathError(path_of(i), ElementError(e, LeafAt(leaves, i), dtype));
      }
    }
    return Status();
  });
  if (!s.ok()) return s;
  return t;
}

// The tensor of a "data" array's values (Leaves as for MakeTensor) of a
// known dtype.
template <typename Leaves>
StatusOr<Tensor> DataTensor(DataType dtype, const TensorShape& shape, const Leaves& leaves,
                            size_t max_bytes, const JsonPath& path, const JsonPath& data_path) {
  FS_RETURN_IF_ERROR(CheckSize(shape, dtype, max_bytes, path));
  if (int64_t(leaves.size()) != shape.num_elements()) {
    return PathError(data_path, "expected " + std::to_string(shape.num_elements()) +
                                    " values for shape " + shape.ToString() + ", got " +
                                    std::to_string(leaves.size()));
  }
  return MakeTensor(dtype, shape, leaves, max_bytes, path,
                    [&](size_t i) { return data_path.Index(int64_t(i)).ToString(); });
}

// Checks that `v`, at depth `depth` of a nested array whose dimensions are
// `dims`, has that shape, and appends its scalars to *leaves.
Status CollectNested(const Json& v, size_t depth, const std::vector<int64_t>& dims,
                     const JsonPath& root, const JsonPath& path,
                     std::vector<const Json*>* leaves) {
  auto like = [&] {
    std::string s = root.ToString();
    for (size_t k = 0; k < depth; ++k) s += "[0]";
    return s;
  };
  if (depth == dims.size()) {
    if (v.is_array()) {
      return PathError(path, "expected a scalar like " + like() +
                                 ", got an array (nested arrays must not be ragged)");
    }
    leaves->push_back(&v);
    return Status();
  }
  if (!v.is_array()) {
    return PathError(path, "expected an array of " + std::to_string(dims[depth]) +
                               " elements like " + like() + ", got " + DescribeValue(v) +
                               " (nested arrays must not be ragged)");
  }
  if (int64_t(v.size()) != dims[depth]) {
    return PathError(path, "expected " + std::to_string(dims[depth]) + " elements like " +
                               like() + ", got " + std::to_string(v.size()) +
                               " (nested arrays must not be ragged)");
  }
  for (size_t i = 0; i < v.size(); ++i) {
    FS_RETURN_IF_ERROR(CollectNested(v[i], depth + 1, dims, root, path.Index(int64_t(i)), leaves));
  }
  return Status();
}

StatusOr<Tensor> NestedFromJson(const Json& v, std::optional<DataType> want,
                                const JsonPath& path, size_t max_bytes) {
  std::vector<int64_t> dims;
  for (const Json* cur = &v; cur->is_array(); cur = &(*cur)[0]) {
    if (dims.size() == size_t(kMaxRank)) {
      return PathError(path, "the nested array has more than the maximum " +
                                 std::to_string(kMaxRank) + " dimensions");
    }
    dims.push_back(int64_t(cur->size()));
    if (cur->empty()) break;
  }
  std::vector<const Json*> leaves;
  FS_RETURN_IF_ERROR(CollectNested(v, 0, dims, path, path, &leaves));
  auto path_of = [&](size_t flat) {
    std::vector<int64_t> index(dims.size());
    for (size_t k = dims.size(); k-- > 0;) {
      index[k] = int64_t(flat) % dims[k];
      flat /= size_t(dims[k]);
    }
    std::string s = path.ToString();
    for (int64_t i : index) s += "[" + std::to_string(i) + "]";
    return s;
  };
  DataType dtype = DataType::kInvalid;
  if (want) {
    dtype = *want;
  } else {
    FS_RETURN_IF_ERROR(InferDType(leaves, path_of, &dtype));
  }
  return MakeTensor(dtype, TensorShape(std::span<const int64_t>(dims)), leaves, max_bytes, path,
                    path_of);
}

StatusOr<TensorShape> ReadTensorShape(const Json& v, const JsonPath& path) {
  if (!v.is_array()) {
    return PathError(path, "expected a shape (an array of dimensions), got " + DescribeValue(v));
  }
  std::vector<int64_t> dims;
  for (size_t i = 0; i < v.size(); ++i) {
    int64_t d = 0;
    if (JsonToInteger(v[i], 0, std::numeric_limits<int64_t>::max(), &d) != ScalarError::kNone) {
      return PathError(path.Index(int64_t(i)),
                       "expected a dimension (an int >= 0), got " + DescribeValue(v[i]));
    }
    dims.push_back(d);
  }
  StatusOr<TensorShape> s = TensorShape::Make(dims);
  if (!s.ok()) return PathError(path, s.status().message());
  return s;
}

// A bool tensor filled from raw bytes: any byte but 0 or 1 is not a valid
// bool object.
Status CheckBoolBytes(const Tensor& t, const JsonPath& path) {
  if (t.dtype() != DataType::kBool) return Status();
  const auto* bytes = static_cast<const uint8_t*>(t.raw_data());
  for (size_t i = 0; i < t.TotalBytes(); ++i) {
    if (bytes[i] > 1) {
      return PathError(path, "byte " + std::to_string(i) + " is " + std::to_string(bytes[i]) +
                                 ", not a bool (0 or 1)");
    }
  }
  return Status();
}

// {"dtype", "shape", "data_offsets": [begin, end]}: bytes [begin, end) of a
// binary body's tensor bytes (json_codec.h, "Binary bodies").
StatusOr<Tensor> OffsetsTensor(const Json& offsets, std::optional<DataType> dtype,
                               const TensorShape& shape, const JsonPath& path, size_t max_bytes,
                               const std::string_view* tensor_bytes) {
  const JsonPath offsets_path = path.Key("data_offsets");
  if (tensor_bytes == nullptr) {
    return PathError(offsets_path, "only a binary body (Content-Type " +
                                       std::string(kTensorsContentType) +
                                       ") has tensor bytes to point into; give \"data\" or \"b64\"");
  }
  if (!dtype) return PathError(path, "a \"data_offsets\" tensor needs a \"dtype\"");
  int64_t range[2] = {0, 0};
  if (!offsets.is_array() || offsets.size() != 2) {
    return PathError(offsets_path, "expected [begin, end], got " + DescribeValue(offsets));
  }
  for (int i = 0; i < 2; ++i) {
    if (JsonToInteger(offsets[size_t(i)], 0, int64_t(tensor_bytes->size()), &range[i]) !=
        ScalarError::kNone) {
      return PathError(offsets_path.Index(i),
                       "expected a byte offset from 0 to " + std::to_string(tensor_bytes->size()) +
                           " (the tensor bytes after the JSON), got " +
                           DescribeValue(offsets[size_t(i)]));
    }
  }
  if (range[1] < range[0]) {
    return PathError(offsets_path, "ends (" + std::to_string(range[1]) + ") before it begins (" +
                                       std::to_string(range[0]) + ")");
  }
  FS_RETURN_IF_ERROR(CheckSize(shape, *dtype, max_bytes, path));
  const size_t want_bytes = size_t(shape.num_elements()) * DataTypeSize(*dtype);  // <= max_bytes
  const size_t got = size_t(range[1] - range[0]);
  if (got != want_bytes) {
    return PathError(offsets_path, "spans " + std::to_string(got) + " bytes, but a " +
                                       std::string(DataTypeName(*dtype)) + shape.ToString() +
                                       " tensor has " + std::to_string(want_bytes));
  }
  FS_ASSIGN_OR_RETURN(Tensor t, AllocateAt(*dtype, shape, path));
  if (got > 0) std::memcpy(t.raw_data(), tensor_bytes->data() + range[0], got);
  FS_RETURN_IF_ERROR(CheckBoolBytes(t, offsets_path));
  return t;
}

StatusOr<Tensor> ObjectFromJson(const Json& v, std::optional<DataType> want,
                                const JsonPath& path, size_t max_bytes,
                                const std::string_view* tensor_bytes) {
  FS_RETURN_IF_ERROR(
      CheckObject(v, path, "a tensor", {"dtype", "shape", "data", "b64", "data_offsets"}));
  std::optional<DataType> dtype = want;
  if (const Json* d = FindField(v, "dtype")) {
    FS_ASSIGN_OR_RETURN(DataType t, ReadDataType(*d, path.Key("dtype")));
    if (want && *want != t) {
      return PathError(path.Key("dtype"), "the tensor is " + std::string(DataTypeName(t)) +
                                              " but " + std::string(DataTypeName(*want)) +
                                              " is expected here");
    }
    dtype = t;
  }
  const Json* shape_json = FindField(v, "shape");
  if (shape_json == nullptr) return PathError(path, "missing \"shape\"");
  FS_ASSIGN_OR_RETURN(TensorShape shape, ReadTensorShape(*shape_json, path.Key("shape")));
  const Json* data = FindField(v, "data");
  const Json* b64 = FindField(v, "b64");
  const Json* offsets = FindField(v, "data_offsets");
  const int given = (data != nullptr) + (b64 != nullptr) + (offsets != nullptr);
  if (given != 1) {
    return PathError(path, given > 1 ? "has more than one of \"data\", \"b64\" and \"data_offsets\"; give one"
                                     : "needs \"data\" (the values), \"b64\" (the bytes) or, in a "
                                       "binary body, \"data_offsets\"");
  }
  if (offsets != nullptr) return OffsetsTensor(*offsets, dtype, shape, path, max_bytes, tensor_bytes);

  if (data != nullptr) {
    const JsonPath data_path = path.Key("data");
    if (data->is_binary()) {  // numbers packed by FastParseJson
      const std::vector<PackedNumber> numbers = UnpackNumbers(*data);
      return DataTensor(dtype ? *dtype : InferNumbersDType(numbers), shape, numbers, max_bytes,
                        path, data_path);
    }
    if (!data->is_array()) {
      return PathError(data_path, "expected an array of values, got " + DescribeValue(*data));
    }
    std::vector<const Json*> leaves;
    leaves.reserve(data->size());
    for (const Json& e : *data) leaves.push_back(&e);
    if (!dtype) {
      DataType inferred = DataType::kInvalid;
      FS_RETURN_IF_ERROR(InferDType(
          leaves, [&](size_t i) { return data_path.Index(int64_t(i)).ToString(); }, &inferred));
      dtype = inferred;
    }
    return DataTensor(*dtype, shape, leaves, max_bytes, path, data_path);
  }

  const JsonPath b64_path = path.Key("b64");
  if (!dtype) return PathError(path, "a \"b64\" tensor needs a \"dtype\"");
  if (!b64->is_string()) {
    return PathError(b64_path, "expected a base64 string, got " + DescribeValue(*b64));
  }
  FS_RETURN_IF_ERROR(CheckSize(shape, *dtype, max_bytes, path));
  const std::string& text = b64->get_ref<const std::string&>();
  StatusOr<size_t> got = Base64DecodedSize(text);
  if (!got.ok()) return PathError(b64_path, got.status().message());
  size_t want_bytes = size_t(shape.num_elements()) * DataTypeSize(*dtype);  // <= max_bytes
  if (*got != want_bytes) {
    return PathError(b64_path, "decodes to " + std::to_string(*got) + " bytes, but a " +
                                   std::string(DataTypeName(*dtype)) + shape.ToString() +
                                   " tensor has " + std::to_string(want_bytes));
  }
  FS_ASSIGN_OR_RETURN(Tensor t, AllocateAt(*dtype, shape, path));
  Status s = Base64Decode(text, t.raw_data(), t.TotalBytes());
  if (!s.ok()) return PathError(b64_path, s.message());
  FS_RETURN_IF_ERROR(CheckBoolBytes(t, b64_path));
  return t;
}

template <typename T>
void AppendElement(const T& x, std::string* out) {
  if constexpr (std::is_same_v<T, bool>) {
    out->append(x ? "true" : "false");
  } else if constexpr (std::is_integral_v<T>) {
    AppendInt(int64_t(x), out);
  } else if constexpr (std::is_same_v<T, double>) {
    AppendDouble(x, out);
  } else if constexpr (std::is_same_v<T, float>) {
    AppendFloat(x, out);
  } else {  // Half, BFloat16: their float value is exact, so it reads back
    AppendFloat(float(x), out);
  }
}

template <typename T>
void AppendNested(const T* data, std::span<const int64_t> dims, size_t depth, int64_t* next,
                  std::string* out) {
  if (depth == dims.size()) {
    AppendElement(data[(*next)++], out);
    return;
  }
  out->push_back('[');
  for (int64_t i = 0; i < dims[depth]; ++i) {
    if (i) out->push_back(',');
    AppendNested(data, dims, depth + 1, next, out);
  }
  out->push_back(']');
}

}  // namespace

StatusOr<Tensor> TensorFromJson(const Json& v, std::optional<DataType> dtype,
                                const JsonPath& path, size_t max_bytes,
                                const std::string_view* tensor_bytes) {
  if (dtype == DataType::kInvalid) dtype.reset();  // no expectation
  if (v.is_object()) return ObjectFromJson(v, dtype, path, max_bytes, tensor_bytes);
  if (v.is_null()) {
    return PathError(path, "expected a tensor (a nested array, a scalar, or an object with "
                           "\"dtype\", \"shape\" and \"data\" or \"b64\"), got null");
  }
  return NestedFromJson(v, dtype, path, max_bytes);
}

void AppendTensorJson(const Tensor& t, Encoding encoding, std::string* out) {
  if (!t.IsInitialized()) {
    out->append("null");
    return;
  }
  if (encoding == Encoding::kNested) {
    DispatchDataType(t.dtype(), [&]<typename T>() {
      int64_t next = 0;
      AppendNested(t.data<T>(), t.shape().dims(), 0, &next, out);
    });
    return;
  }
  out->append("{\"dtype\":");
  AppendJsonString(DataTypeName(t.dtype()), out);
  out->append(",\"shape\":[");
  for (int i = 0; i < t.rank(); ++i) {
    if (i) out->push_back(',');
    AppendInt(t.dim(i), out);
  }
  out->push_back(']');
  if (encoding == Encoding::kB64) {
    out->append(",\"b64\":\"");
    Base64Encode(t.raw_data(), t.TotalBytes(), out);
    out->append("\"}");
    return;
  }
  out->append(",\"data\":[");
  DispatchDataType(t.dtype(), [&]<typename T>() {
    const T* d = t.data<T>();
    for (int64_t i = 0; i < t.num_elements(); ++i) {
      if (i) out->push_back(',');
      AppendElement(d[i], out);
    }
  });
  out->append("]}");
}

}  // namespace internal

std::string_view EncodingName(Encoding encoding) {
  switch (encoding) {
    case Encoding::kData: return "data";
    case Encoding::kB64: return "b64";
    case Encoding::kNested: return "nested";
  }
  return "?";
}

StatusOr<Encoding> EncodingFromString(std::string_view name) {
  for (Encoding e : {Encoding::kData, Encoding::kB64, Encoding::kNested}) {
    if (EncodingName(e) == name) return e;
  }
  return InvalidArgument("unknown encoding '" + std::string(name) +
                         "' (expected \"data\", \"b64\" or \"nested\")");
}

StatusOr<Tensor> ParseTensorJson(std::string_view json, std::optional<DataType> dtype,
                                 std::string_view path, size_t max_bytes) {
  internal::JsonPath root(path);
  internal::Document doc;
  internal::Json& v = *doc;
  FS_RETURN_IF_ERROR(internal::ParseJsonText(json, root, &v));
  return internal::TensorFromJson(v, dtype, root, max_bytes);
}

std::string TensorToJson(const Tensor& t, Encoding encoding) {
  std::string out;
  internal::AppendTensorJson(t, encoding, &out);
  return out;
}

}  // namespace flowstate::api

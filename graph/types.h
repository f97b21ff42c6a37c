// DataType: the element types a Tensor can hold, their names and sizes, and
// the compile-time mapping between C++ types and DataType values.
//
// float16 and bfloat16 have storage types here (Half, BFloat16: 16-bit
// patterns with float conversions) so tensors of them can be created, copied
// and serialized; CPU kernels compute in float32, GPU kernels natively.
// Everything in this header is immutable and thread-safe.
#ifndef FLOWSTATE_GRAPH_TYPES_H_
#define FLOWSTATE_GRAPH_TYPES_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "graph/status.h"

namespace flowstate {

enum class DataType : uint8_t {
  kInvalid = 0,
  kFloat32 = 1,
  kFloat64 = 2,
  kInt32 = 3,
  kInt64 = 4,
  kUInt8 = 5,
  kBool = 6,
  kFloat16 = 7,
  kBFloat16 = 8,
};
inline constexpr int kNumDataTypes = 9;

// "float32", "int64", ... ("invalid" for kInvalid).
std::string_view DataTypeName(DataType dtype);
// Accepts the names above plus the aliases "float", "double", "int", "half".
StatusOr<DataType> DataTypeFromString(std::string_view name);
// Size of one element in bytes (0 for kInvalid).
size_t DataTypeSize(DataType dtype);
bool IsFloating(DataType dtype);  // float16/32/64, bfloat16
bool IsInteger(DataType dtype);   // int32, int64, uint8
// All valid types, in enum order.
const std::vector<DataType>& AllDataTypes();

// 16-bit floating-point storage types.
struct Half {
  uint16_t bits = 0;
  Half() = default;
  explicit Half(float f);
  explicit operator float() const;
};
struct BFloat16 {
  uint16_t bits = 0;
  BFloat16() = default;
  explicit BFloat16(float f);
  explicit operator float() const;
};

// DataTypeOf<T>::value is the DataType of the C++ type T.
template <typename T>
struct DataTypeOf;
template <> struct DataTypeOf<float> { static constexpr DataType value = DataType::kFloat32; };
template <> struct DataTypeOf<double> { static constexpr DataType value = DataType::kFloat64; };
template <> struct DataTypeOf<int32_t> { static constexpr DataType value = DataType::kInt32; };
template <> struct DataTypeOf<int64_t> { static constexpr DataType value = DataType::kInt64; };
template <> struct DataTypeOf<uint8_t> { static constexpr DataType value = DataType::kUInt8; };
template <> struct DataTypeOf<bool> { static constexpr DataType value = DataType::kBool; };
template <> struct DataTypeOf<Half> { static constexpr DataType value = DataType::kFloat16; };
template <> struct DataTypeOf<BFloat16> { static constexpr DataType value = DataType::kBFloat16; };

template <typename T>
inline constexpr DataType kDataTypeOf = DataTypeOf<T>::value;

// Calls fn.template operator()<T>() with the C++ type of `dtype`.
// Returns fn's result; `dtype` must be valid.
#define FS_DISPATCH_CASE_(DT, T) \
  case DataType::DT:             \
    return fn.template operator()<T>()
template <typename Fn>
decltype(auto) DispatchDataType(DataType dtype, Fn&& fn) {
  switch (dtype) {
    FS_DISPATCH_CASE_(kFloat64, double);
    FS_DISPATCH_CASE_(kInt32, int32_t);
    FS_DISPATCH_CASE_(kInt64, int64_t);
    FS_DISPATCH_CASE_(kUInt8, uint8_t);
    FS_DISPATCH_CASE_(kBool, bool);
    FS_DISPATCH_CASE_(kFloat16, Half);
    FS_DISPATCH_CASE_(kBFloat16, BFloat16);
    case DataType::kFloat32:
    default:
      return fn.template operator()<float>();
  }
}
#undef FS_DISPATCH_CASE_

}  // namespace flowstate

#endif  // FLOWSTATE_GRAPH_TYPES_H_

#include "graph/types.h"

#include <cstring>

namespace flowstate {

std::string_view DataTypeName(DataType dtype) {
  switch (dtype) {
    case DataType::kFloat32: return "float32";
    case DataType::kFloat64: return "float64";
    case DataType::kInt32: return "int32";
    case DataType::kInt64: return "int64";
    case DataType::kUInt8: return "uint8";
    case DataType::kBool: return "bool";
    case DataType::kFloat16: return "float16";
    case DataType::kBFloat16: return "bfloat16";
    case DataType::kInvalid: break;
  }
  return "invalid";
}

StatusOr<DataType> DataTypeFromString(std::string_view name) {
  for (DataType t : AllDataTypes()) {
    if (DataTypeName(t) == name) return t;
  }
  if (name == "float") return DataType::kFloat32;
  if (name == "double") return DataType::kFloat64;
  if (name == "int") return DataType::kInt32;
  if (name == "half") return DataType::kFloat16;
  return InvalidArgument("unknown dtype '" + std::string(name) +
                         "' (expected one of float32, float64, int32, int64, "
                         "uint8, bool, float16, bfloat16)");
}

size_t DataTypeSize(DataType dtype) {
  switch (dtype) {
    case DataType::kFloat32: return 4;
    case DataType::kFloat64: return 8;
    case DataType::kInt32: return 4;
    case DataType::kInt64: return 8;
    case DataType::kUInt8: return 1;
    case DataType::kBool: return 1;
    case DataType::kFloat16: return 2;
    case DataType::kBFloat16: return 2;
    case DataType::kInvalid: break;
  }
  return 0;
}

bool IsFloating(DataType dtype) {
  return dtype == DataType::kFloat32 || dtype == DataType::kFloat64 ||
         dtype == DataType::kFloat16 || dtype == DataType::kBFloat16;
}

bool IsInteger(DataType dtype) {
  return dtype == DataType::kInt32 || dtype == DataType::kInt64 ||
         dtype == DataType::kUInt8;
}

const std::vector<DataType>& AllDataTypes() {
  static const std::vector<DataType>* all = new std::vector<DataType>{
      DataType::kFloat32, DataType::kFloat64, DataType::kInt32,
      DataType::kInt64,   DataType::kUInt8,   DataType::kBool,
      DataType::kFloat16, DataType::kBFloat16};
  return *all;
}

static uint32_t FloatBits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
static float BitsFloat(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// IEEE binary16 conversion with round-to-nearest-even.
Half::Half(float f) {
  uint32_t x = FloatBits(f);
  uint32_t sign = (x >> 16) & 0x8000u;
  uint32_t exp = (x >> 23) & 0xffu;
  uint32_t mant = x & 0x7fffffu;
  if (exp == 0xff) {  // inf or nan
    bits = static_cast<uint16_t>(sign | 0x7c00u | (mant ? 0x200u : 0));
    return;
  }
  int e = static_cast<int>(exp) - 127 + 15;
  if (e >= 31) {  // overflow
    bits = static_cast<uint16_t>(sign | 0x7c00u);
    return;
  }
  if (e <= 0) {  // subnormal or zero
    if (e < -10) {
      bits = static_cast<uint16_t>(sign);
      return;
    }
    mant |= 0x800000u;
    int shift = 14 - e;
    uint32_t half_mant = mant >> shift;
    uint32_t rem = mant & ((1u << shift) - 1);
    uint32_t halfway = 1u << (shift - 1);
    if (rem > halfway || (rem == halfway && (half_mant & 1))) ++half_mant;
    bits = static_cast<uint16_t>(sign | half_mant);
    return;
  }
  uint32_t half = sign | (static_cast<uint32_t>(e) << 10) | (mant >> 13);
  uint32_t rem = mant & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (half & 1))) ++half;
  bits = static_cast<uint16_t>(half);
}

Half::operator float() const {
  uint32_t sign = (bits & 0x8000u) << 16;
  uint32_t exp = (bits >> 10) & 0x1fu;
  uint32_t mant = bits & 0x3ffu;
  if (exp == 0) {
    if (mant == 0) return BitsFloat(sign);
    // subnormal: normalize
    int e = -1;
    do {
      ++e;
      mant <<= 1;
    } while ((mant & 0x400u) == 0);
    mant &= 0x3ffu;
    return BitsFloat(sign | (static_cast<uint32_t>(127 - 15 - e) << 23) |
                     (mant << 13));
  }
  if (exp == 31) return BitsFloat(sign | 0x7f800000u | (mant << 13));
  return BitsFloat(sign | ((exp - 15 + 127) << 23) | (mant << 13));
}

BFloat16::BFloat16(float f) {
  uint32_t x = FloatBits(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) {  // nan
    bits = static_cast<uint16_t>((x >> 16) | 0x40u);
    return;
  }
  uint32_t rounding = 0x7fffu + ((x >> 16) & 1u);
  bits = static_cast<uint16_t>((x + rounding) >> 16);
}

BFloat16::operator float() const {
  return BitsFloat(static_cast<uint32_t>(bits) << 16);
}

}  // namespace flowstate

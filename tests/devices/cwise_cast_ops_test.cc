// Cast between every pair of the eight dtypes, bit for bit against a
// reference written from the documented rules (truncation toward zero,
// saturation, NaN → 0, integer wrap-around, x != 0 for bool, Half/BFloat16's
// own float conversions).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "tests/devices/cwise_test_util.h"

namespace flowstate::test {
namespace {

template <typename T>
constexpr bool kIs16 = std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>;

// Values worth converting, in the source type.
template <typename Src>
std::vector<Src> CastInputs() {
  if constexpr (std::is_same_v<Src, bool>) {
    return {false, true, true, false};
  } else if constexpr (std::is_integral_v<Src>) {
    using L = std::numeric_limits<Src>;
    std::vector<int64_t> raw = {0, 1, 2, 7, 100, 127, 128, 200, 255, 256, 300, 65535, 65536,
                                -1, -2, -128, -129, -300, 16777217, -16777217};
    std::vector<Src> v;
    for (int64_t r : raw) {
      if (r >= int64_t(L::min()) && (r <= 0 || uint64_t(r) <= uint64_t(L::max()))) v.push_back(Src(r));
    }
    v.push_back(L::min());
    v.push_back(L::max());
    if constexpr (sizeof(Src) == 8) {
      v.push_back(Src((int64_t{1} << 62) + 1));  // rounds differently via double
      v.push_back(Src(-(int64_t{1} << 53) - 1));
    }
    return v;
  } else {
    const double inf = std::numeric_limits<double>::infinity();
    std::vector<double> raw = {0.0, -0.0, 0.4, 0.5, 0.99, 1.0, 1.5, -0.4, -0.99, -1.0, -1.5,
                               2.5, -2.5, 100.7, -100.7, 127.9, 128.0, -128.9, -129.0, 255.0,
                               255.9, 256.0, 300.0, -300.0, 65504.0, 65520.0, 70000.0, -70000.0,
                               2147483520.0, 2147483648.0, -2147483648.0, -2147483904.0, 3e9,
                               -3e9, 1e10, -1e10, 9.2233720368547748e18, 9.3e18, -9.2233720368547758e18,
                               -9.3e18, 1e30, -1e30, 3e38, 1e300, -1e300, 1e-3, 1e-40, 1e-310,
                               inf, -inf, std::nan("")};
    std::vector<Src> v;
    for (double r : raw) {
      if constexpr (std::is_same_v<Src, double>) v.push_back(r);
      else v.push_back(Src(float(r)));  // float, Half, BFloat16 (overflow gives inf)
    }
    return v;
  }
}

template <typename T>
auto AsFloat(T x) {  // the value in the wider arithmetic type
  if constexpr (kIs16<T>) return float(x);
  else return x;
}

// The documented rules, written out per destination kind.
template <typename Src, typename Dst>
Dst RefCast(Src x) {
  if constexpr (std::is_same_v<Dst, bool>) {
    return AsFloat(x) != 0;  // NaN != 0
  } else if constexpr (std::is_same_v<Src, bool>) {
    if constexpr (kIs16<Dst>) return Dst(x ? 1.0f : 0.0f);
    else return Dst(x ? 1 : 0);
  } else if constexpr (std::is_same_v<Dst, Half> || std::is_same_v<Dst, BFloat16>) {
    return Dst(float(AsFloat(x)));  // graph/types.cc's rounding
  } else if constexpr (std::is_integral_v<Dst> && std::is_integral_v<Src>) {
    return Dst(x);  // C++20: modulo 2^bits
  } else if constexpr (std::is_integral_v<Dst>) {
    double v = double(AsFloat(x));
    if (std::isnan(v)) return 0;
    double lo = double(std::numeric_limits<Dst>::min());
    double hi = std::ldexp(1.0, std::numeric_limits<Dst>::digits);  // max + 1
    if (v <= lo) return std::numeric_limits<Dst>::min();
    if (v >= hi) return std::numeric_limits<Dst>::max();
    return Dst(std::trunc(v));
  } else {
    return Dst(AsFloat(x));
  }
}

template <typename Src, typename Dst>
void CheckCast() {
  std::vector<Src> in = CastInputs<Src>();
  std::vector<TensorShape> shapes = {{}, {0}, {2, 0}, {int64_t(in.size())}, {3, 700}};
  for (const TensorShape& s : shapes) {
    Tensor x(kDataTypeOf<Src>, s);
    for (int64_t i = 0; i < s.num_elements(); ++i) x.data<Src>()[i] = in[i % in.size()];
    Tensor want(kDataTypeOf<Dst>, s);
    for (int64_t i = 0; i < s.num_elements(); ++i) want.data<Dst>()[i] = RefCast<Src, Dst>(x.data<Src>()[i]);
    Tensor got = RunOp1("Cast", {x}, {{"DstT", AttrValue(kDataTypeOf<Dst>)}});
    bool same = TensorsEqual(got, want);
    EXPECT_TRUE(same) << "Cast " << DataTypeName(kDataTypeOf<Src>) << " -> "
                      << DataTypeName(kDataTypeOf<Dst>) << " " << Str(s) << "\n  got:  "
                      << got.DebugString(60) << "\n  want: " << want.DebugString(60);
    if constexpr (std::is_same_v<Src, Dst>) {
      if (s.num_elements() > 0) {  // empty tensors have no buffer
        EXPECT_TRUE(got.SharesBufferWith(x)) << "Cast to the same type should not copy";
      }
    }
  }
}

TEST(CwiseCast, EveryPairOfDtypes) {
  ForTypes(AllTypes{}, []<typename Src>() {
    ForTypes(AllTypes{}, []<typename Dst>() { CheckCast<Src, Dst>(); });
  });
}

TEST(CwiseCast, DocumentedEdgeCases) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  Tensor f = T1<float>({-2.7f, 2.7f, nan, inf, -inf, 3e9f, -3e9f});
  EXPECT_TRUE(TensorEq(RunOp1("Cast", {f}, {{"DstT", AttrValue(DataType::kInt32)}}),
                       T1<int32_t>({-2, 2, 0, 2147483647, -2147483647 - 1, 2147483647, -2147483647 - 1})));
  EXPECT_TRUE(TensorEq(RunOp1("Cast", {f}, {{"DstT", AttrValue(DataType::kUInt8)}}),
                       T1<uint8_t>({0, 2, 0, 255, 0, 255, 0})));
  EXPECT_TRUE(TensorEq(RunOp1("Cast", {T1<int64_t>({300, -1, 256})}, {{"DstT", AttrValue(DataType::kUInt8)}}),
                       T1<uint8_t>({44, 255, 0})));
  EXPECT_TRUE(TensorEq(RunOp1("Cast", {T1<float>({0.0f, -0.0f, nan, 0.5f})}, {{"DstT", AttrValue(DataType::kBool)}}),
                       T1<bool>({false, false, true, true})));
  // float16 round-trip of a value it holds exactly, and overflow to inf.
  Tensor h = RunOp1("Cast", {T1<float>({1.5f, 70000.0f})}, {{"DstT", AttrValue(DataType::kFloat16)}});
  EXPECT_EQ(h.data<Half>()[0].bits, 0x3e00);
  EXPECT_EQ(h.data<Half>()[1].bits, 0x7c00);
  Tensor b = RunOp1("Cast", {T1<float>({1.0f, -2.0f})}, {{"DstT", AttrValue(DataType::kBFloat16)}});
  EXPECT_EQ(b.data<BFloat16>()[0].bits, 0x3f80);
  EXPECT_EQ(b.data<BFloat16>()[1].bits, 0xc000);
}

TEST(CwiseCast, BFloat16RoundingMatchesTheStorageType) {
  // Every 2^11th float bit pattern, through the kernel and BFloat16(float).
  std::vector<float> v;
  for (uint64_t bits = 0; bits < (uint64_t{1} << 32); bits += 2039) {
    uint32_t b = uint32_t(bits);
    float f;
    std::memcpy(&f, &b, 4);
    v.push_back(f);
  }
  Tensor got = RunOp1("Cast", {T1<float>(v)}, {{"DstT", AttrValue(DataType::kBFloat16)}});
  for (size_t i = 0; i < v.size(); ++i) {
    ASSERT_EQ(got.data<BFloat16>()[i].bits, BFloat16(v[i]).bits) << "at " << v[i];
  }
}

}  // namespace
}  // namespace flowstate::test

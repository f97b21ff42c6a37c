// Unary element-wise kernels against <cmath> references for every
// registered dtype, over empty, scalar, small and block-crossing shapes,
// plus the edge values (inf, NaN, ±0, denormals, INT_MIN).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "tests/devices/cwise_test_util.h"

namespace flowstate::test {
namespace {

const std::vector<TensorShape>& UnaryShapes() {
  static const auto* shapes = new std::vector<TensorShape>{
      {}, {0}, {2, 0}, {1}, {7}, {2, 3}, {3, 1, 5}, {2500}, {2, 1500}};
  return *shapes;
}

template <typename T, typename Ref, typename Gen>
void CheckUnary(const std::string& op, Ref ref, Gen gen, double rtol = 1e-6) {
  uint64_t seed = 11;
  for (const TensorShape& s : UnaryShapes()) {
    Tensor x = gen(s, seed++);
    Tensor want(kDataTypeOf<T>, s);
    for (int64_t i = 0; i < s.num_elements(); ++i) want.data<T>()[i] = T(ref(x.data<T>()[i]));
    Tensor got = RunOp1(op, {x});
    EXPECT_TRUE(TensorNear(got, want, rtol, 1e-6)) << op << "<" << DataTypeName(kDataTypeOf<T>)
                                                    << "> " << Str(s);
  }
}

template <typename T>
auto Uniform(double lo, double hi) {
  return [lo, hi](const TensorShape& s, uint64_t seed) { return RandomTensor<T>(s, seed, lo, hi); };
}

TEST(CwiseUnary, NegAbsSignEveryDtype) {
  ForTypes(SignedTypes{}, []<typename T>() {
    auto gen = Uniform<T>(-5, 5);
    CheckUnary<T>("Neg", [](T x) { return -x; }, gen);
    CheckUnary<T>("Abs", [](T x) { return x < 0 ? -x : x; }, gen);
    CheckUnary<T>("Sign", [](T x) { return x > 0 ? 1 : (x < 0 ? -1 : 0); }, gen);
  });
}

TEST(CwiseUnary, SquareEveryDtype) {
  ForTypes(TypeList<float, double, int32_t, int64_t>{}, []<typename T>() {
    CheckUnary<T>("Square", [](T x) { return x * x; }, Uniform<T>(-9, 9));
  });
  // uint8 wraps: 20² = 400 = 144 (mod 256).
  CheckUnary<uint8_t>("Square", [](uint8_t x) { return uint8_t(int(x) * int(x)); }, Uniform<uint8_t>(0, 255));
  EXPECT_TRUE(TensorEq(RunOp1("Square", {T1<uint8_t>({20, 15, 16})}), T1<uint8_t>({144, 225, 0})));
}

TEST(CwiseUnary, IntegerEdgeCasesWrap) {
  constexpr int32_t kMin = std::numeric_limits<int32_t>::min();
  constexpr int32_t kMax = std::numeric_limits<int32_t>::max();
  EXPECT_TRUE(TensorEq(RunOp1("Neg", {T1<int32_t>({kMin, kMax, 0})}), T1<int32_t>({kMin, -kMax, 0})));
  EXPECT_TRUE(TensorEq(RunOp1("Abs", {T1<int32_t>({kMin, -kMax, 0})}), T1<int32_t>({kMin, kMax, 0})));
  constexpr int64_t kMin64 = std::numeric_limits<int64_t>::min();
  EXPECT_TRUE(TensorEq(RunOp1("Neg", {T1<int64_t>({kMin64, 5})}), T1<int64_t>({kMin64, -5})));
  EXPECT_TRUE(TensorEq(RunOp1("Abs", {T1<int64_t>({kMin64, -5})}), T1<int64_t>({kMin64, 5})));
  EXPECT_TRUE(TensorEq(RunOp1("Square", {T1<int32_t>({65536, 46341})}), T1<int32_t>({0, int32_t(2147488281u)})));
  EXPECT_TRUE(TensorEq(RunOp1("Sign", {T1<int64_t>({kMin64, -1, 0, 1, 9})}), T1<int64_t>({-1, -1, 0, 1, 1})));
}

TEST(CwiseUnary, SignOfZeroAndNaN) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  Tensor r = RunOp1("Sign", {T1<float>({nan, -0.0f, 0.0f, -3, 2, -std::numeric_limits<float>::infinity()})});
  EXPECT_TRUE(std::isnan(r.data<float>()[0]));
  EXPECT_EQ(r.data<float>()[1], 0.0f);
  EXPECT_TRUE(std::signbit(r.data<float>()[1]));
  EXPECT_EQ(r.data<float>()[2], 0.0f);
  EXPECT_EQ(r.data<float>()[3], -1.0f);
  EXPECT_EQ(r.data<float>()[4], 1.0f);
  EXPECT_EQ(r.data<float>()[5], -1.0f);
}

TEST(CwiseUnary, TranscendentalsEveryDtype) {
  ForTypes(FloatTypes{}, []<typename T>() {
    CheckUnary<T>("Exp", [](T x) { return std::exp(x); }, Uniform<T>(-10, 10), 2e-6);
    CheckUnary<T>("Log", [](T x) { return std::log(x); }, Uniform<T>(1e-3, 100), 2e-6);
    CheckUnary<T>("Sqrt", [](T x) { return std::sqrt(x); }, Uniform<T>(0, 100));
    CheckUnary<T>("Rsqrt", [](T x) { return T(1) / std::sqrt(x); }, Uniform<T>(1e-3, 100));
    CheckUnary<T>("Reciprocal", [](T x) { return T(1) / x; }, Uniform<T>(0.01, 100));
  });
}

// Edge arguments, each repeated at several positions of a block so both the
// vectorized body and the scalar tail see them.
template <typename T>
Tensor EdgeTensor(const std::vector<T>& edges) {
  std::vector<T> v;
  for (int rep = 0; rep < 40; ++rep) {
    for (T e : edges) v.push_back(e);
    v.push_back(T(0.5) + T(rep));  // ordinary values in between
  }
  return T1<T>(v);
}

template <typename T>
::testing::AssertionResult MatchesExactly(const Tensor& got, const Tensor& x, T (*ref)(T), double rtol) {
  for (int64_t i = 0; i < x.num_elements(); ++i) {
    T a = got.data<T>()[i], e = ref(x.data<T>()[i]);
    bool ok = std::isnan(e) ? std::isnan(a)
              : (std::isinf(e) || e == 0) ? a == e && std::signbit(a) == std::signbit(e)
                                           : std::abs(a - e) <= rtol * std::abs(e);
    if (!ok) {
      return ::testing::AssertionFailure() << "at x = " << x.data<T>()[i] << ": got " << a
                                           << ", expected " << e;
    }
  }
  return ::testing::AssertionSuccess();
}

template <typename T>
void CheckEdges() {
  using L = std::numeric_limits<T>;
  const T inf = L::infinity(), nan = L::quiet_NaN(), den = L::denorm_min() * 1000;
  Tensor ex = EdgeTensor<T>({-inf, T(-1000), T(-750), T(-709), T(-104), T(-100), T(-88), T(-87.5),
                             T(-87), T(0), T(-0.0), T(1), T(88), T(88.7), T(89), T(100), T(710), inf, nan});
  EXPECT_TRUE(MatchesExactly<T>(RunOp1("Exp", {ex}), ex, [](T v) { return std::exp(v); }, 4e-6));
  Tensor lx = EdgeTensor<T>({T(0), T(-0.0), T(-1), -inf, den, L::min(), T(1), T(10), L::max(), inf, nan});
  EXPECT_TRUE(MatchesExactly<T>(RunOp1("Log", {lx}), lx, [](T v) { return std::log(v); }, 4e-6));
  Tensor sx = EdgeTensor<T>({T(0), T(-0.0), T(-1), -inf, den, L::min(), T(4), L::max(), inf, nan});
  EXPECT_TRUE(MatchesExactly<T>(RunOp1("Sqrt", {sx}), sx, [](T v) { return std::sqrt(v); }, 0));
  EXPECT_TRUE(MatchesExactly<T>(RunOp1("Rsqrt", {sx}), sx, [](T v) { return T(1) / std::sqrt(v); }, 0));
  Tensor rx = EdgeTensor<T>({T(0), T(-0.0), inf, -inf, nan, T(3)});
  EXPECT_TRUE(MatchesExactly<T>(RunOp1("Reciprocal", {rx}), rx, [](T v) { return T(1) / v; }, 0));
  Tensor nx = EdgeTensor<T>({T(0), T(-0.0), inf, -inf, nan, T(-3)});
  EXPECT_TRUE(MatchesExactly<T>(RunOp1("Abs", {nx}), nx, [](T v) { return std::abs(v); }, 0));
  EXPECT_TRUE(MatchesExactly<T>(RunOp1("Neg", {nx}), nx, [](T v) { return -v; }, 0));
  EXPECT_TRUE(MatchesExactly<T>(RunOp1("Square", {nx}), nx, [](T v) { return v * v; }, 0));
}

TEST(CwiseUnary, TranscendentalEdgeValuesMatchCmath) {
  CheckEdges<float>();
  CheckEdges<double>();
  // exp(-inf) is exactly 0, as softmax masking relies on.
  EXPECT_EQ(RunOp1("Exp", {T1<float>({-std::numeric_limits<float>::infinity()})}).data<float>()[0], 0.0f);
}

TEST(CwiseUnary, LogicalNot) {
  CheckUnary<bool>("LogicalNot", [](bool x) { return !x; },
                   [](const TensorShape& s, uint64_t seed) { return RandomTensor<bool>(s, seed); });
}

}  // namespace
}  // namespace flowstate::test

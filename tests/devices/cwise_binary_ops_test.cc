// Binary element-wise kernels against plain-loop references, for every
// registered dtype, over same-shape, scalar, row, column and general
// broadcasts and empty tensors; plus their error cases.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "tests/devices/cwise_test_util.h"

namespace flowstate::test {
namespace {

const std::vector<std::pair<TensorShape, TensorShape>>& BinaryShapes() {
  static const auto* shapes = new std::vector<std::pair<TensorShape, TensorShape>>{
      {{}, {}},
      {{0}, {0}},
      {{2, 0}, {2, 0}},
      {{2, 0}, {}},
      {{2, 0}, {1}},
      {{0}, {3, 1}},
      {{1}, {5}},
      {{7}, {7}},
      {{2, 3}, {2, 3}},
      {{2, 3}, {}},
      {{}, {2, 3}},
      {{4, 3}, {3}},        // row broadcast
      {{3}, {4, 3}},
      {{4, 3}, {4, 1}},     // column broadcast
      {{4, 1}, {4, 3}},
      {{2, 1, 3}, {4, 1}},  // general
      {{4, 1}, {2, 1, 3}},
      {{3, 1}, {1, 4}},
      {{2, 3, 4}, {2, 1, 4}},
      {{2, 1, 3, 1}, {1, 5, 1, 2}},
      {{1, 1, 6}, {6}},
      {{37, 33}, {33}},     // long rows: vector body and tail
      {{1029}, {1029}},
      {{1029}, {}},
      {{}, {1029}},
  };
  return *shapes;
}

// Runs `op` on T inputs drawn by gen_x/gen_y over every shape pair and
// compares with the reference ref(a, b).
template <typename T, typename Out, typename Ref, typename GenX, typename GenY>
void CheckBinary(const std::string& op, Ref ref, GenX gen_x, GenY gen_y, double rtol = 1e-6) {
  uint64_t seed = 1;
  for (const auto& [xs, ys] : BinaryShapes()) {
    Tensor x = gen_x(xs, seed++);
    Tensor y = gen_y(ys, seed++);
    Tensor want = RefBinary<T, Out>(x, y, ref);
    Tensor got = RunOp1(op, {x, y});
    EXPECT_TRUE(TensorNear(got, want, rtol, 1e-6))
        << op << "<" << DataTypeName(kDataTypeOf<T>) << "> " << Str(xs) << " vs " << Str(ys);
  }
}

template <typename T>
Tensor Small(const TensorShape& s, uint64_t seed) {
  return SmallValues<T>(s, seed);
}
template <typename T>
Tensor SmallNonZero(const TensorShape& s, uint64_t seed) {
  return NonZero<T>(SmallValues<T>(s, seed));
}

// Reference arithmetic: integers in int64, narrowed (the wrap-around the
// kernels promise); floats in T.
template <typename T, typename F>
T Arith(T a, T b, F f) {
  if constexpr (std::is_floating_point_v<T>) return f(a, b);
  else return T(f(int64_t(a), int64_t(b)));
}

TEST(CwiseBinary, AddSubMulEveryDtype) {
  ForTypes(NumericTypes{}, []<typename T>() {
    auto add = [](auto a, auto b) { return a + b; };
    auto sub = [](auto a, auto b) { return a - b; };
    auto mul = [](auto a, auto b) { return a * b; };
    CheckBinary<T, T>("Add", [&](T a, T b) { return Arith(a, b, add); }, Small<T>, Small<T>);
    CheckBinary<T, T>("Sub", [&](T a, T b) { return Arith(a, b, sub); }, Small<T>, Small<T>);
    CheckBinary<T, T>("Mul", [&](T a, T b) { return Arith(a, b, mul); }, Small<T>, Small<T>);
  });
  // Floats get real-valued inputs too.
  ForTypes(FloatTypes{}, []<typename T>() {
    auto gen = [](const TensorShape& s, uint64_t seed) { return RandomTensor<T>(s, seed, -3, 3); };
    CheckBinary<T, T>("Add", [](T a, T b) { return a + b; }, gen, gen);
    CheckBinary<T, T>("Sub", [](T a, T b) { return a - b; }, gen, gen);
    CheckBinary<T, T>("Mul", [](T a, T b) { return a * b; }, gen, gen);
  });
}

TEST(CwiseBinary, IntegerArithmeticWrapsAround) {
  constexpr int32_t kMax = std::numeric_limits<int32_t>::max();
  constexpr int32_t kMin = std::numeric_limits<int32_t>::min();
  EXPECT_TRUE(TensorEq(RunOp1("Add", {T1<int32_t>({kMax, kMin}), T1<int32_t>({1, -1})}), T1<int32_t>({kMin, kMax})));
  EXPECT_TRUE(TensorEq(RunOp1("Sub", {T1<int32_t>({kMin}), T1<int32_t>({1})}), T1<int32_t>({kMax})));
  EXPECT_TRUE(TensorEq(RunOp1("Mul", {T1<int32_t>({65536, kMin}), T1<int32_t>({65536, -1})}), T1<int32_t>({0, kMin})));
  constexpr int64_t kMax64 = std::numeric_limits<int64_t>::max();
  EXPECT_TRUE(TensorEq(RunOp1("Add", {T1<int64_t>({kMax64}), Tensor::Scalar<int64_t>(2)}),
                       T1<int64_t>({std::numeric_limits<int64_t>::min() + 1})));
  EXPECT_TRUE(TensorEq(RunOp1("Add", {T1<uint8_t>({250, 3}), T1<uint8_t>({10, 4})}), T1<uint8_t>({4, 7})));
  EXPECT_TRUE(TensorEq(RunOp1("Sub", {T1<uint8_t>({3, 4}), T1<uint8_t>({5, 4})}), T1<uint8_t>({254, 0})));
  EXPECT_TRUE(TensorEq(RunOp1("Mul", {T1<uint8_t>({16, 3}), T1<uint8_t>({16, 5})}), T1<uint8_t>({0, 15})));
  EXPECT_TRUE(TensorEq(RunOp1("SquaredDifference", {T1<uint8_t>({3, 0}), T1<uint8_t>({5, 17})}), T1<uint8_t>({4, 33})));
  EXPECT_TRUE(TensorEq(RunOp1("SquaredDifference", {T1<int32_t>({kMin}), T1<int32_t>({0})}), T1<int32_t>({0})));
}

TEST(CwiseBinary, DivEveryDtype) {
  ForTypes(NumericTypes{}, []<typename T>() {
    // C++ integer division truncates toward zero, as Div must.
    CheckBinary<T, T>("Div", [](T a, T b) { return T(a / b); }, Small<T>, SmallNonZero<T>);
  });
  ForTypes(FloatTypes{}, []<typename T>() {
    auto gen = [](const TensorShape& s, uint64_t seed) { return RandomTensor<T>(s, seed, 0.5, 3); };
    CheckBinary<T, T>("Div", [](T a, T b) { return a / b; }, gen, gen);
  });
}

TEST(CwiseBinary, IntegerDivTruncatesTowardZeroAndWrapsMinOverMinusOne) {
  EXPECT_TRUE(TensorEq(RunOp1("Div", {T1<int32_t>({7, -7, 7, -7, 0}), T1<int32_t>({2, 2, -2, -2, 3})}),
                       T1<int32_t>({3, -3, -3, 3, 0})));
  constexpr int32_t kMin32 = std::numeric_limits<int32_t>::min();
  constexpr int64_t kMin64 = std::numeric_limits<int64_t>::min();
  EXPECT_TRUE(TensorEq(RunOp1("Div", {T1<int32_t>({kMin32, kMin32, 5}), T1<int32_t>({-1, 1, -1})}),
                       T1<int32_t>({kMin32, kMin32, -5})));
  EXPECT_TRUE(TensorEq(RunOp1("Div", {T1<int64_t>({kMin64, 9}), Tensor::Scalar<int64_t>(-1)}),
                       T1<int64_t>({kMin64, -9})));
  EXPECT_TRUE(TensorEq(RunOp1("Div", {T1<uint8_t>({255, 7}), T1<uint8_t>({2, 7})}),
                       T1<uint8_t>({127, 1})));
}

TEST(CwiseBinary, IntegerDivisionByZeroIsAnErrorNamingTheNode) {
  auto check = [](const Tensor& x, const Tensor& y) {
    auto r = RunOp("Div", {x, y});
    ASSERT_FALSE(r.ok()) << x.DebugString() << " / " << y.DebugString();
    EXPECT_EQ(r.status().code(), Code::kInvalidArgument);
    EXPECT_EQ(r.status().node(), "op");
    EXPECT_NE(r.status().message().find("division by zero"), std::string::npos)
        << r.status().ToString();
  };
  check(T1<int32_t>({1, 2, 3}), T1<int32_t>({1, 0, 1}));
  check(T1<int64_t>({1, 2, 3}), Tensor::Scalar<int64_t>(0));
  check(TS<uint8_t>({1, 2, 3, 4, 5, 6}, {2, 3}), T1<uint8_t>({1, 1, 0}));
  check(Tensor::Scalar<int32_t>(0), T1<int32_t>({0, 0}));
  // Nothing is divided when the output is empty.
  Tensor empty = RunOp1("Div", {Tensor(DataType::kInt32, TensorShape({0, 3})), T1<int32_t>({1, 0, 1})});
  EXPECT_EQ(empty.shape(), TensorShape({0, 3}));
  // Floats follow IEEE.
  Tensor f = RunOp1("Div", {T1<float>({1, -1, 0}), Tensor::Scalar<float>(0)});
  EXPECT_EQ(f.data<float>()[0], std::numeric_limits<float>::infinity());
  EXPECT_EQ(f.data<float>()[1], -std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::isnan(f.data<float>()[2]));
}

TEST(CwiseBinary, PowEveryDtype) {
  ForTypes(FloatTypes{}, []<typename T>() {
    auto base = [](const TensorShape& s, uint64_t seed) { return RandomTensor<T>(s, seed, 0.1, 3); };
    auto exponent = [](const TensorShape& s, uint64_t seed) { return RandomTensor<T>(s, seed, -2, 2); };
    CheckBinary<T, T>("Pow", [](T a, T b) { return std::pow(a, b); }, base, exponent, 1e-5);
  });
  ForTypes(TypeList<int32_t, int64_t, uint8_t>{}, []<typename T>() {
    auto base = [](const TensorShape& s, uint64_t seed) {
      return std::is_signed_v<T> ? RandomTensor<T>(s, seed, -4, 4) : RandomTensor<T>(s, seed, 0, 5);
    };
    auto exponent = [](const TensorShape& s, uint64_t seed) { return RandomTensor<T>(s, seed, 0, 3); };
    auto ref = [](T a, T b) {
      int64_t r = 1;
      for (int k = 0; k < int(b); ++k) r *= int64_t(a);
      return T(r);
    };
    CheckBinary<T, T>("Pow", ref, base, exponent);
  });
}

TEST(CwiseBinary, IntegerPowEdgeCases) {
  EXPECT_TRUE(TensorEq(RunOp1("Pow", {T1<int32_t>({0, 0, 2, -2, -1, 3}), T1<int32_t>({0, 1, 30, 3, 7, 0})}),
                       T1<int32_t>({1, 0, 1 << 30, -8, -1, 1})));
  // Wraps modulo 2^bits: 2^32 == 0 for int32, 3^5 == 243 fits uint8, 2^9 wraps to 0.
  EXPECT_TRUE(TensorEq(RunOp1("Pow", {T1<int32_t>({2}), T1<int32_t>({32})}), T1<int32_t>({0})));
  EXPECT_TRUE(TensorEq(RunOp1("Pow", {T1<uint8_t>({3, 2}), T1<uint8_t>({5, 9})}), T1<uint8_t>({243, 0})));
  EXPECT_TRUE(TensorEq(RunOp1("Pow", {T1<int64_t>({3}), T1<int64_t>({39})}),
                       T1<int64_t>({4052555153018976267LL})));
  for (auto [x, y] : {std::pair{T1<int32_t>({2, 3}), T1<int32_t>({1, -1})},
                      std::pair{T1<int64_t>({1, 1}), Tensor::Scalar<int64_t>(-2)}}) {
    auto r = RunOp("Pow", {x, y});
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), Code::kInvalidArgument);
    EXPECT_EQ(r.status().node(), "op");
    EXPECT_NE(r.status().message().find("negative"), std::string::npos) << r.status().ToString();
  }
}

TEST(CwiseBinary, MaximumMinimumSquaredDifferenceEveryDtype) {
  ForTypes(NumericTypes{}, []<typename T>() {
    CheckBinary<T, T>("Maximum", [](T a, T b) { return std::max(a, b); }, Small<T>, Small<T>);
    CheckBinary<T, T>("Minimum", [](T a, T b) { return std::min(a, b); }, Small<T>, Small<T>);
    CheckBinary<T, T>(
        "SquaredDifference",
        [](T a, T b) { return Arith(a, b, [](auto u, auto v) { return (u - v) * (u - v); }); },
        Small<T>, Small<T>);
  });
}

TEST(CwiseBinary, MaximumMinimumPropagateNaN) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (const char* op : {"Maximum", "Minimum"}) {
    Tensor r = RunOp1(op, {T1<float>({nan, 1, nan, 2}), T1<float>({1, nan, nan, 3})});
    EXPECT_TRUE(std::isnan(r.data<float>()[0])) << op;
    EXPECT_TRUE(std::isnan(r.data<float>()[1])) << op;
    EXPECT_TRUE(std::isnan(r.data<float>()[2])) << op;
    EXPECT_EQ(r.data<float>()[3], std::string(op) == "Maximum" ? 3.0f : 2.0f);
  }
}

TEST(CwiseBinary, ComparisonsEveryDtype) {
  ForTypes(NumericTypes{}, []<typename T>() {
    CheckBinary<T, bool>("Less", [](T a, T b) { return a < b; }, Small<T>, Small<T>);
    CheckBinary<T, bool>("LessEqual", [](T a, T b) { return a <= b; }, Small<T>, Small<T>);
    CheckBinary<T, bool>("Greater", [](T a, T b) { return a > b; }, Small<T>, Small<T>);
    CheckBinary<T, bool>("GreaterEqual", [](T a, T b) { return a >= b; }, Small<T>, Small<T>);
  });
  ForTypes(TypeList<float, double, int32_t, int64_t, uint8_t, bool>{}, []<typename T>() {
    CheckBinary<T, bool>("Equal", [](T a, T b) { return a == b; }, Small<T>, Small<T>);
    CheckBinary<T, bool>("NotEqual", [](T a, T b) { return a != b; }, Small<T>, Small<T>);
  });
  const float nan = std::numeric_limits<float>::quiet_NaN();
  EXPECT_TRUE(TensorEq(RunOp1("Equal", {T1<float>({nan, 1}), T1<float>({nan, 1})}), T1<bool>({false, true})));
  EXPECT_TRUE(TensorEq(RunOp1("NotEqual", {T1<float>({nan, 1}), T1<float>({nan, 1})}), T1<bool>({true, false})));
}

TEST(CwiseBinary, LogicalAndOr) {
  CheckBinary<bool, bool>("LogicalAnd", [](bool a, bool b) { return a && b; }, Small<bool>, Small<bool>);
  CheckBinary<bool, bool>("LogicalOr", [](bool a, bool b) { return a || b; }, Small<bool>, Small<bool>);
}

TEST(CwiseBinary, IncompatibleShapesAreRejectedNamingTheNode) {
  // Graph validation (the shape function) sees constant inputs first.
  for (const char* op : {"Add", "Div", "Less", "Equal"}) {
    auto r = RunOp(op, {Tensor(DataType::kFloat32, TensorShape({2, 3})),
                        Tensor(DataType::kFloat32, TensorShape({4}))});
    ASSERT_FALSE(r.ok()) << op;
    EXPECT_EQ(r.status().code(), Code::kInvalidArgument);
    EXPECT_EQ(r.status().node(), "op");
  }
  // The kernel itself checks too (shapes unknown before running).
  struct Case {
    const char* op;
    DataType out;
    TensorShape x, y;
  };
  for (const Case& c : {Case{"Add", DataType::kFloat32, {2, 3}, {4}},
                        Case{"Mul", DataType::kFloat32, {2, 0}, {3}},
                        Case{"Greater", DataType::kBool, {3, 2}, {3}},
                        Case{"Pow", DataType::kFloat32, {5}, {2, 4}}}) {
    DirectRun r = RunKernelDirect(c.op, {Tensor(DataType::kFloat32, c.x), Tensor(DataType::kFloat32, c.y)},
                                  {{"T", AttrValue(DataType::kFloat32)}}, {c.out});
    ASSERT_FALSE(r.status.ok()) << c.op;
    EXPECT_EQ(r.status.code(), Code::kInvalidArgument);
    EXPECT_EQ(r.status.node(), "op");
    EXPECT_NE(r.status.message().find("cannot be broadcast"), std::string::npos) << r.status.ToString();
    EXPECT_NE(r.status.message().find(c.x.ToString()), std::string::npos) << r.status.ToString();
    EXPECT_NE(r.status.message().find(c.op), std::string::npos) << r.status.ToString();
  }
  DirectRun r = RunKernelDirect("LogicalOr", {T1<bool>({true, false}), T1<bool>({true, false, true})}, {},
                                {DataType::kBool});
  EXPECT_EQ(r.status.code(), Code::kInvalidArgument);
  DirectRun d = RunKernelDirect("Div", {T1<int32_t>({1, 2}), T1<int32_t>({0, 1})},
                                {{"T", AttrValue(DataType::kInt32)}}, {DataType::kInt32});
  EXPECT_EQ(d.status.code(), Code::kInvalidArgument);
  EXPECT_EQ(d.status.node(), "op");
}

}  // namespace
}  // namespace flowstate::test

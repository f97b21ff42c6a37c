// Activations, their gradients, Cos/Sin/Floor, BiasAdd and BiasAddGrad
// against plain-loop references in double, for float32 and float64, over
// empty, scalar, small, block-crossing and multi-threaded shapes, plus the
// edge values (NaN, ±inf, huge arguments) and the error cases.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>

#include "tests/devices/fed_inputs_util.h"
#include "tests/devices/nn_test_util.h"

namespace flowstate::test {
namespace {

const std::vector<TensorShape>& Shapes() {
  static const auto* shapes =
      new std::vector<TensorShape>{{}, {0}, {2, 0}, {1}, {7}, {2, 3}, {3, 1, 5}, {2500}, {2, 1500}};
  return *shapes;
}

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

// Values in [lo, hi) with a few exact edge values mixed in.
template <typename T>
Tensor Values(const TensorShape& s, uint64_t seed, double lo = -8, double hi = 8) {
  Tensor t = RandomTensor<T>(s, seed, lo, hi);
  const T edges[] = {T(0), T(-0.0), T(1), T(-1), T(6), T(lo), T(hi / 2)};
  for (int64_t i = 0; i < t.num_elements() && i < 7; ++i)
    t.data<T>()[i * 3 % t.num_elements()] = edges[i];
  return t;
}

using Ref1 = std::function<double(double)>;
using Ref2 = std::function<double(double, double)>;

template <typename T>
Tensor Apply1(const Tensor& x, const Ref1& f) {
  Tensor r(kDataTypeOf<T>, x.shape());
  for (int64_t i = 0; i < x.num_elements(); ++i) r.data<T>()[i] = T(f(double(x.data<T>()[i])));
  return r;
}
template <typename T>
Tensor Apply2(const Tensor& a, const Tensor& b, const Ref2& f) {
  Tensor r(kDataTypeOf<T>, a.shape());
  for (int64_t i = 0; i < a.num_elements(); ++i) {
    r.data<T>()[i] = T(f(double(a.data<T>()[i]), double(b.data<T>()[i])));
  }
  return r;
}

double RefSigmoid(double x) { return 1 / (1 + std::exp(-x)); }

struct UnaryCase {
  const char* op;
  Ref1 ref;
  AttrMap attrs;
  double lo = -8, hi = 8;
};

std::vector<UnaryCase> UnaryCases() {
  return {
      {"Relu", [](double x) { return x < 0 ? 0 : x; }, {}},
      {"Relu6", [](double x) { return std::min(std::max(x, 0.0), 6.0); }, {}},
      {"LeakyRelu", [](double x) { return x > 0 ? x : 0.2 * x; }, {}},
      {"LeakyRelu", [](double x) { return x > 0 ? x : 0.01 * x; }, {{"alpha", AttrValue(0.01)}}},
      {"Elu", [](double x) { return x > 0 ? x : std::exp(x) - 1; }, {}},
      {"Sigmoid", RefSigmoid, {}, -30, 30},
      {"Tanh", [](double x) { return std::tanh(x); }, {}},
      {"Softplus", [](double x) { return std::log1p(std::exp(x)); }, {}, -30, 30},
      {"Cos", [](double x) { return std::cos(x); }, {}, -100, 100},
      {"Sin", [](double x) { return std::sin(x); }, {}, -100, 100},
      {"Floor", [](double x) { return std::floor(x); }, {}},
  };
}

TEST(NnActivation, UnaryOpsMatchReferenceForEveryDtypeAndShape) {
  ForFloatTypes([]<typename T>() {
    uint64_t seed = 1;
    for (const UnaryCase& c : UnaryCases()) {
      for (const TensorShape& s : Shapes()) {
        Tensor x = Values<T>(s, seed++, c.lo, c.hi);
        Tensor got = RunOp1(c.op, {x}, c.attrs);
        EXPECT_TRUE(TensorNear(got, Apply1<T>(x, c.ref), kRtol<T>, 1e-7))
            << c.op << " " << TypeName(kDataTypeOf<T>) << " " << s.ToString();
      }
    }
  });
}

TEST(NnActivation, EdgeValues) {
  ForFloatTypes([]<typename T>() {
    const Tensor x = T1<T>({T(kNaN), T(kInf), T(-kInf), T(1000), T(-1000), T(-0.0)});
    auto run = [&](const char* op) { return RunOp1(op, {x}); };
    EXPECT_TRUE(TensorEq(run("Relu"), T1<T>({T(kNaN), T(kInf), 0, 1000, 0, T(-0.0)})));
    EXPECT_TRUE(TensorEq(run("Relu6"), T1<T>({T(kNaN), 6, 0, 6, 0, T(-0.0)})));
    EXPECT_TRUE(TensorEq(run("Elu"), T1<T>({T(kNaN), T(kInf), -1, 1000, -1, T(-0.0)})));
    EXPECT_TRUE(TensorEq(run("Sigmoid"), T1<T>({T(kNaN), 1, 0, 1, 0, T(0.5)})));
    EXPECT_TRUE(TensorEq(run("Tanh"), T1<T>({T(kNaN), 1, -1, 1, -1, T(-0.0)})));
    EXPECT_TRUE(TensorNear(run("Softplus"), T1<T>({T(kNaN), T(kInf), 0, 1000, 0, T(std::log(2.0))}),
                           kRtol<T>, 0));
    EXPECT_TRUE(TensorNear(
        run("Cos"), T1<T>({T(kNaN), T(kNaN), T(kNaN), T(std::cos(1000.0)), T(std::cos(1000.0)), 1}),
        kRtol<T>, 1e-7));
    EXPECT_TRUE(TensorEq(run("Floor"), T1<T>({T(kNaN), T(kInf), T(-kInf), 1000, -1000, T(-0.0)})));
    // Far in the negative tail, in blocks long enough for Eigen's vector
    // path, Sigmoid and Softplus are exactly 0.
    Tensor far(kDataTypeOf<T>, TensorShape({100})), zeros(kDataTypeOf<T>, TensorShape({100}));
    for (int64_t i = 0; i < 100; ++i) {
      far.data<T>()[i] = i % 3 == 0 ? T(-kInf) : T(-750 - i);
      zeros.data<T>()[i] = 0;
    }
    EXPECT_TRUE(TensorEq(RunOp1("Sigmoid", {far}), zeros));
    EXPECT_TRUE(TensorEq(RunOp1("Softplus", {far}), zeros));
    // Sigmoid keeps relative accuracy in the far negative tail.
    Tensor tail = RunOp1("Sigmoid", {T1<T>({T(-20), T(-40)})});
    EXPECT_TRUE(TensorNear(tail, T1<T>({T(RefSigmoid(-20)), T(RefSigmoid(-40))}), kRtol<T>, 0));
  });
}

struct BinaryCase {
  const char* op;
  Ref2 ref;
  AttrMap attrs;
  bool first_is_sigmoid_output = false;  // (y, dy) ops: y in (0, 1)
};

std::vector<BinaryCase> BinaryCases() {
  return {
      {"ReluGrad", [](double g, double f) { return f > 0 ? g : 0; }, {}},
      {"Relu6Grad", [](double g, double f) { return f > 0 && f < 6 ? g : 0; }, {}},
      {"LeakyReluGrad", [](double g, double f) { return f > 0 ? g : 0.2 * g; }, {}},
      {"LeakyReluGrad",
       [](double g, double f) { return f > 0 ? g : 0.3 * g; },
       {{"alpha", AttrValue(0.3)}}},
      {"EluGrad", [](double g, double y) { return y > 0 ? g : g * (y + 1); }, {}},
      {"SigmoidGrad", [](double y, double dy) { return dy * y * (1 - y); }, {}, true},
      {"TanhGrad", [](double y, double dy) { return dy * (1 - y * y); }, {}, true},
      {"SoftplusGrad", [](double g, double f) { return g * RefSigmoid(f); }, {}},
  };
}

TEST(NnActivation, GradientOpsMatchReferenceForEveryDtypeAndShape) {
  ForFloatTypes([]<typename T>() {
    uint64_t seed = 100;
    for (const BinaryCase& c : BinaryCases()) {
      for (const TensorShape& s : Shapes()) {
        Tensor a =
            c.first_is_sigmoid_output ? RandomTensor<T>(s, seed++, 0, 1) : Values<T>(s, seed++);
        Tensor b = Values<T>(s, seed++);
        if (std::string(c.op) == "EluGrad") {  // outputs of Elu are > -1
          for (int64_t i = 0; i < b.num_elements(); ++i) {
            b.data<T>()[i] = std::max(b.data<T>()[i], T(-0.999));
          }
        }
        Tensor got = RunOp1(c.op, {a, b}, c.attrs);
        EXPECT_TRUE(TensorNear(got, Apply2<T>(a, b, c.ref), kRtol<T>, 1e-7))
            << c.op << " " << TypeName(kDataTypeOf<T>) << " " << s.ToString();
      }
    }
  });
}

TEST(NnActivation, ResultsDoNotDependOnTheThreadCount) {
  ForFloatTypes([]<typename T>() {
    const TensorShape s({300, 1001});
    Tensor x = RandomTensor<T>(s, 5, -10, 10), y = RandomTensor<T>(s, 6, -1, 1);
    for (const UnaryCase& c : UnaryCases()) {
      EXPECT_TRUE(TensorsEqual(RunOp1(c.op, {x}, c.attrs, CpuTestDevice(1)),
                               RunOp1(c.op, {x}, c.attrs, CpuTestDevice(2))))
          << c.op;
    }
    for (const BinaryCase& c : BinaryCases()) {
      Tensor one = RunOp1(c.op, {y, x}, c.attrs, CpuTestDevice(1));
      EXPECT_TRUE(TensorsEqual(one, RunOp1(c.op, {y, x}, c.attrs, CpuTestDevice(2)))) << c.op;
      EXPECT_TRUE(TensorNear(one, Apply2<T>(y, x, c.ref), kRtol<T>, 1e-7)) << c.op;
    }
  });
}

TEST(NnActivation, ElementWiseOpsWriteInPlaceWhenTheyOwnTheInput) {
  ForFloatTypes([]<typename T>() {
    Tensor x = RandomTensor<T>(TensorShape({5000}), 9);
    EXPECT_TRUE(ForwardsInput("Sigmoid", Own(x.DeepCopy()), 0));
    EXPECT_TRUE(ForwardsInput("Relu", Own(x.DeepCopy()), 0));
    EXPECT_TRUE(ForwardsInput("ReluGrad", Own(x.DeepCopy(), x.DeepCopy()), 0));
    EXPECT_TRUE(ForwardsInput("Cos", Own(x.DeepCopy()), 0));
    // In place gives the same values.
    OwnedKernel k("Softplus", {kDataTypeOf<T>});
    Tensor in_place = k.Compute(Own(x.DeepCopy())).value()[0];
    EXPECT_TRUE(TensorsEqual(in_place, RunOp1("Softplus", {x})));
  });
}

TEST(NnActivation, GradientOpsRejectMismatchedShapes) {
  for (const BinaryCase& c : BinaryCases()) {
    auto r = RunOpOnFedInputs(c.op, {T1<float>({1, 2, 3}), T1<float>({1, 2})}, c.attrs);
    EXPECT_TRUE(IsOpError(r, "same shape")) << c.op;
  }
}

// ---------------------------------------------------------------------------
// BiasAdd and BiasAddGrad.

template <typename T>
Tensor RefBiasAdd(const Tensor& v, const Tensor& b) {
  Tensor r(kDataTypeOf<T>, v.shape());
  const int64_t c = b.num_elements();
  for (int64_t i = 0; i < v.num_elements(); ++i)
    r.data<T>()[i] = v.data<T>()[i] + b.data<T>()[i % c];
  return r;
}

template <typename T>
Tensor RefBiasAddGrad(const Tensor& g) {
  const int64_t c = g.dim(g.rank() - 1);
  std::vector<double> sum(size_t(c), 0.0);
  for (int64_t i = 0; i < g.num_elements(); ++i) sum[size_t(i % c)] += double(g.data<T>()[i]);
  Tensor r(kDataTypeOf<T>, TensorShape({c}));
  for (int64_t j = 0; j < c; ++j) r.data<T>()[j] = T(sum[size_t(j)]);
  return r;
}

const std::vector<TensorShape>& BiasShapes() {
  static const auto* shapes =
      new std::vector<TensorShape>{{4},       {0, 3},       {3, 0},    {1, 1},    {2, 3},
                                   {2, 3, 5}, {2, 2, 2, 3}, {1000, 3}, {513, 37}, {70001, 1}};
  return *shapes;
}

TEST(NnBiasAdd, MatchesReferenceForEveryDtypeAndRank) {
  ForFloatTypes([]<typename T>() {
    uint64_t seed = 1;
    for (const TensorShape& s : BiasShapes()) {
      Tensor v = RandomTensor<T>(s, seed++),
             b = RandomTensor<T>(TensorShape({s.dim(s.rank() - 1)}), seed++);
      for (int threads : {1, 2}) {
        Tensor got = RunOp1("BiasAdd", {v, b}, {}, CpuTestDevice(threads));
        EXPECT_TRUE(TensorNear(got, RefBiasAdd<T>(v, b), kRtol<T>, 0)) << s.ToString();
      }
    }
  });
}

TEST(NnBiasAdd, AddsInPlaceWhenItOwnsTheValue) {
  ForFloatTypes([]<typename T>() {
    Tensor v = RandomTensor<T>(TensorShape({8, 5}), 3), b = RandomTensor<T>(TensorShape({5}), 4);
    EXPECT_TRUE(ForwardsInput("BiasAdd", Own(v.DeepCopy(), b), 0));
  });
}

TEST(NnBiasAdd, GradSumsEveryDimensionButTheLast) {
  ForFloatTypes([]<typename T>() {
    uint64_t seed = 50;
    for (const TensorShape& s : BiasShapes()) {
      Tensor g = RandomTensor<T>(s, seed++);
      Tensor one = RunOp1("BiasAddGrad", {g}, {}, CpuTestDevice(1));
      EXPECT_TRUE(TensorNear(one, RefBiasAddGrad<T>(g), kRtol<T>, 1e-6)) << s.ToString();
      EXPECT_TRUE(TensorsEqual(one, RunOp1("BiasAddGrad", {g}, {}, CpuTestDevice(2))))
          << s.ToString();
    }
    // float32 accumulates in double: 1e6 × 0.1 is 1e5 to float precision.
    Tensor many(kDataTypeOf<T>, TensorShape({500000, 2}));
    std::fill_n(many.data<T>(), many.num_elements(), T(0.1));
    EXPECT_TRUE(TensorNear(RunOp1("BiasAddGrad", {many}),
                           T1<T>({T(500000 * double(T(0.1))), T(500000 * double(T(0.1)))}), 1e-7,
                           0));
  });
}

TEST(NnBiasAdd, Errors) {
  auto r = RunOpOnFedInputs("BiasAdd", {T1<float>({1, 2, 3}), T1<float>({1, 2})});
  EXPECT_TRUE(IsOpError(r, "does not match the last dimension"));
  r = RunOpOnFedInputs("BiasAdd", {TS<float>({1, 2}, {1, 2}), TS<float>({1, 2}, {1, 2})});
  EXPECT_TRUE(IsOpError(r, "bias must be a vector"));
  r = RunOpOnFedInputs("BiasAdd", {Tensor::Scalar<double>(1), T1<double>({1})});
  EXPECT_TRUE(IsOpError(r, "rank >= 1"));
  r = RunOpOnFedInputs("BiasAddGrad", {Tensor::Scalar<float>(1)});
  EXPECT_TRUE(IsOpError(r, "rank >= 1"));
  r = RunOp("BiasAdd", {TS<float>({1, 2}, {1, 2}), T1<float>({1, 2})},
            {{"data_format", AttrValue(std::string("NCHW"))}});
  EXPECT_TRUE(IsOpError(r, "data_format"));
}

}  // namespace
}  // namespace flowstate::test

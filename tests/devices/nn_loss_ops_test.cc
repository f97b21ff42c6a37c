// Softmax, LogSoftmax, the cross-entropy losses and L2Loss against
// plain-loop references in double, for float32 and float64 (and every label
// type of the sparse cross entropy), over empty batches, ranks 1 to 3,
// extreme logits, masks, NaN rows, several threads, and the error cases.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "tests/devices/fed_inputs_util.h"
#include "tests/devices/nn_test_util.h"

namespace flowstate::test {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

// Tolerances for losses (sums over a row in T).
template <typename T>
constexpr double kLossRtol = std::is_same_v<T, float> ? 1e-5 : 1e-10;
template <typename T>
constexpr double kLossAtol = std::is_same_v<T, float> ? 2e-5 : 1e-10;

// Row-wise softmax or log-softmax over the last dimension, in double.
template <typename T>
Tensor RefSoftmax(const Tensor& x, bool log) {
  Tensor r(kDataTypeOf<T>, x.shape());
  const int64_t c = x.dim(x.rank() - 1);
  if (c == 0) return r;
  for (int64_t row = 0; row < x.num_elements() / c; ++row) {
    const T* in = x.data<T>() + row * c;
    double m = -kInf;
    for (int64_t j = 0; j < c; ++j) m = std::max(m, double(in[j]));
    double s = 0;
    for (int64_t j = 0; j < c; ++j) s += std::exp(double(in[j]) - m);
    for (int64_t j = 0; j < c; ++j) {
      const double v = double(in[j]) - m;
      r.data<T>()[row * c + j] = T(log ? v - std::log(s) : std::exp(v) / s);
    }
  }
  return r;
}

const std::vector<TensorShape>& SoftmaxShapes() {
  static const auto* shapes = new std::vector<TensorShape>{
      {5}, {1}, {0}, {0, 5}, {2, 0}, {4, 1}, {3, 4}, {2, 3, 4}, {3, 1000}, {257, 65}};
  return *shapes;
}

TEST(NnSoftmax, MatchesReferenceForEveryDtypeAndRank) {
  ForFloatTypes([]<typename T>() {
    uint64_t seed = 1;
    for (const TensorShape& s : SoftmaxShapes()) {
      Tensor x = RandomTensor<T>(s, seed++, -20, 20);
      for (int threads : {1, 2}) {
        Tensor sm = RunOp1("Softmax", {x}, {}, CpuTestDevice(threads));
        EXPECT_TRUE(TensorNear(sm, RefSoftmax<T>(x, false), kRtol<T>, 1e-7)) << s.ToString();
        Tensor lsm = RunOp1("LogSoftmax", {x}, {}, CpuTestDevice(threads));
        EXPECT_TRUE(TensorNear(lsm, RefSoftmax<T>(x, true), kRtol<T>, 1e-6)) << s.ToString();
      }
    }
  });
}

TEST(NnSoftmax, StableForExtremeLogitsMasksAndNaN) {
  ForFloatTypes([]<typename T>() {
    const TensorShape s({5, 3});
    Tensor x = TS<T>({1000, 0, -1000,                 // huge spread
                      0, T(-kInf), 0,                 // a mask
                      T(kNaN), 1, 2,                  // NaN row
                      T(kInf), 1, 2,                  // +inf row
                      T(-kInf), T(-kInf), T(-kInf)},  // all masked
                     s);
    Tensor sm = RunOp1("Softmax", {x});
    EXPECT_TRUE(TensorEq(sm, TS<T>({1, 0, 0, 0.5, 0, 0.5, T(kNaN), T(kNaN), T(kNaN), T(kNaN),
                                    T(kNaN), T(kNaN), T(kNaN), T(kNaN), T(kNaN)},
                                   s)));
    Tensor lsm = RunOp1("LogSoftmax", {x});
    const T l2 = T(-std::log(2.0));
    EXPECT_TRUE(TensorNear(lsm,
                           TS<T>({0, -1000, -2000, l2, T(-kInf), l2, T(kNaN), T(kNaN), T(kNaN),
                                  T(kNaN), T(kNaN), T(kNaN), T(kNaN), T(kNaN), T(kNaN)},
                                 s),
                           kRtol<T>, 0));
  });
}

TEST(NnSoftmax, NegligibleProbabilitiesAreExactlyZero) {
  ForFloatTypes([]<typename T>() {
    Tensor x(kDataTypeOf<T>, TensorShape({2, 64})), want(kDataTypeOf<T>, TensorShape({2, 64}));
    for (int64_t i = 0; i < 128; ++i) {
      x.data<T>()[i] = i % 64 == 0 ? T(0) : (i % 5 == 0 ? T(-kInf) : T(-750 - i));
      want.data<T>()[i] = i % 64 == 0 ? T(1) : T(0);
    }
    EXPECT_TRUE(TensorEq(RunOp1("Softmax", {x}), want));
    auto sparse = RunOp("SparseSoftmaxCrossEntropyWithLogits", {x, T1<int32_t>({0, 0})});
    ASSERT_TRUE(sparse.ok());
    EXPECT_TRUE(TensorEq((*sparse)[0], T1<T>({0, 0})));
    Tensor zeros(kDataTypeOf<T>, x.shape());
    std::fill_n(zeros.data<T>(), zeros.num_elements(), T(0));
    EXPECT_TRUE(TensorEq((*sparse)[1], zeros));
  });
}

TEST(NnSoftmax, WritesInPlaceAndRejectsScalars) {
  Tensor x = RandomTensor<float>(TensorShape({4, 8}), 3);
  EXPECT_TRUE(ForwardsInput("Softmax", Own(x.DeepCopy()), 0));
  EXPECT_TRUE(ForwardsInput("LogSoftmax", Own(x.DeepCopy()), 0));
  EXPECT_TRUE(IsOpError(RunOp("Softmax", {Tensor::Scalar<float>(1)}), "rank >= 1"));
  EXPECT_TRUE(IsOpError(RunOp("LogSoftmax", {Tensor::Scalar<double>(1)}), "rank >= 1"));
}

// ---------------------------------------------------------------------------
// SoftmaxCrossEntropyWithLogits.

// loss[b] = -sum_j labels * log_softmax, backprop = softmax - labels.
template <typename T>
std::vector<Tensor> RefXent(const Tensor& f, const Tensor& l) {
  const int64_t b = f.dim(0), c = f.dim(1);
  Tensor lsm = RefSoftmax<T>(f, true);
  Tensor loss(kDataTypeOf<T>, TensorShape({b})), bp(kDataTypeOf<T>, f.shape());
  for (int64_t r = 0; r < b; ++r) {
    double sum = 0;
    for (int64_t j = 0; j < c; ++j) {
      const int64_t i = r * c + j;
      sum -= double(l.data<T>()[i]) * double(lsm.data<T>()[i]);
      bp.data<T>()[i] = T(std::exp(double(lsm.data<T>()[i])) - double(l.data<T>()[i]));
    }
    loss.data<T>()[r] = T(sum);
  }
  return {loss, bp};
}

// Rows of non-negative weights summing to 1.
template <typename T>
Tensor Distributions(const TensorShape& s, uint64_t seed) {
  Tensor t = RandomTensor<T>(s, seed, 0, 1);
  const int64_t c = s.dim(1);
  for (int64_t r = 0; r < s.dim(0); ++r) {
    double sum = 0;
    for (int64_t j = 0; j < c; ++j) sum += double(t.data<T>()[r * c + j]);
    for (int64_t j = 0; j < c; ++j) t.data<T>()[r * c + j] = T(t.data<T>()[r * c + j] / sum);
  }
  return t;
}

const std::vector<TensorShape>& XentShapes() {
  static const auto* shapes =
      new std::vector<TensorShape>{{0, 3}, {1, 1}, {4, 5}, {3, 0}, {33, 1000}, {500, 10}};
  return *shapes;
}

TEST(NnSoftmaxXent, MatchesReferenceForEveryDtype) {
  ForFloatTypes([]<typename T>() {
    uint64_t seed = 10;
    for (const TensorShape& s : XentShapes()) {
      Tensor f = RandomTensor<T>(s, seed++, -10, 10);
      Tensor l = Distributions<T>(s, seed++);
      std::vector<Tensor> want = RefXent<T>(f, l);
      for (int threads : {1, 2}) {
        auto got = RunOp("SoftmaxCrossEntropyWithLogits", {f, l}, {}, CpuTestDevice(threads));
        ASSERT_TRUE(got.ok()) << got.status().ToString();
        EXPECT_TRUE(TensorNear((*got)[0], want[0], kLossRtol<T>, kLossAtol<T>)) << s.ToString();
        EXPECT_TRUE(TensorNear((*got)[1], want[1], kRtol<T>, 1e-6)) << s.ToString();
      }
    }
    // Extreme logits stay finite; a +inf logit makes its row NaN.
    Tensor f = TS<T>({1000, -1000, 0, T(kInf)}, TensorShape({2, 2}));
    Tensor l = TS<T>({0, 1, 0.5, 0.5}, TensorShape({2, 2}));
    auto got = RunOp("SoftmaxCrossEntropyWithLogits", {f, l});
    ASSERT_TRUE(got.ok());
    EXPECT_TRUE(TensorNear((*got)[0], T1<T>({2000, T(kNaN)}), kRtol<T>, 0));
    EXPECT_TRUE(
        TensorNear((*got)[1], TS<T>({1, -1, T(kNaN), T(kNaN)}, TensorShape({2, 2})), kRtol<T>, 0));
  });
}

TEST(NnSoftmaxXent, Errors) {
  auto r =
      RunOpOnFedInputs("SoftmaxCrossEntropyWithLogits", {T1<float>({1, 2}), T1<float>({1, 2})});
  EXPECT_TRUE(IsOpError(r, "[batch, classes]"));
  r = RunOpOnFedInputs("SoftmaxCrossEntropyWithLogits",
                       {TS<float>({1, 2, 3, 4}, {2, 2}), TS<float>({1, 2, 3, 4}, {1, 4})});
  EXPECT_TRUE(IsOpError(r, "do not match"));
}

// ---------------------------------------------------------------------------
// SparseSoftmaxCrossEntropyWithLogits.

template <typename T, typename L>
void CheckSparse(const TensorShape& s, uint64_t seed, int threads) {
  Tensor f = RandomTensor<T>(s, seed, -10, 10);
  const int64_t b = s.dim(0), c = s.dim(1);
  const double top = std::min<double>(double(c - 1), double(std::numeric_limits<L>::max()));
  Tensor labels = RandomTensor<L>(TensorShape({b}), seed + 1, 0, top);
  // The same labels as one-hot distributions, through the dense reference.
  Tensor onehot(kDataTypeOf<T>, s);
  std::fill_n(onehot.data<T>(), onehot.num_elements(), T(0));
  for (int64_t r = 0; r < b; ++r) onehot.data<T>()[r * c + int64_t(labels.data<L>()[r])] = T(1);
  std::vector<Tensor> want = RefXent<T>(f, onehot);
  auto got = RunOp("SparseSoftmaxCrossEntropyWithLogits", {f, labels}, {}, CpuTestDevice(threads));
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  const std::string what =
      TypeName(kDataTypeOf<T>) + "/" + TypeName(kDataTypeOf<L>) + " " + s.ToString();
  EXPECT_TRUE(TensorNear((*got)[0], want[0], kLossRtol<T>, kLossAtol<T>)) << what;
  EXPECT_TRUE(TensorNear((*got)[1], want[1], kRtol<T>, 1e-6)) << what;
}

TEST(NnSparseSoftmaxXent, MatchesReferenceForEveryLabelAndValueType) {
  ForFloatTypes([]<typename T>() {
    uint64_t seed = 20;
    for (const TensorShape& s : {TensorShape({0, 4}), TensorShape({1, 1}), TensorShape({5, 7}),
                                 TensorShape({40, 300}), TensorShape({700, 10})}) {
      for (int threads : {1, 2}) {
        CheckSparse<T, int32_t>(s, seed++, threads);
        CheckSparse<T, int64_t>(s, seed++, threads);
        CheckSparse<T, uint8_t>(s, seed++, threads);
      }
    }
  });
}

TEST(NnSparseSoftmaxXent, LabelsOutOfRangeNameTheRowAndLabel) {
  Tensor f = RandomTensor<float>(TensorShape({3, 5}), 1);
  auto r = RunOp("SparseSoftmaxCrossEntropyWithLogits", {f, T1<int64_t>({0, 4, 5})});
  EXPECT_TRUE(IsOpError(r, "label 5 of row 2"));
  r = RunOp("SparseSoftmaxCrossEntropyWithLogits", {f, T1<int32_t>({-1, 0, 0})});
  EXPECT_TRUE(IsOpError(r, "label -1 of row 0"));
  r = RunOp("SparseSoftmaxCrossEntropyWithLogits", {f.DeepCopy(), T1<uint8_t>({1, 200, 2})});
  EXPECT_TRUE(IsOpError(r, "label 200 of row 1"));
  r = RunOp("SparseSoftmaxCrossEntropyWithLogits",
            {Tensor(DataType::kFloat64, TensorShape({2, 0})), T1<int64_t>({0, 0})});
  EXPECT_TRUE(IsOpError(r, "[0, 0)"));
  r = RunOpOnFedInputs("SparseSoftmaxCrossEntropyWithLogits", {f, T1<int64_t>({0, 1})});
  EXPECT_TRUE(IsOpError(r, "labels must be a vector of 3"));
  r = RunOpOnFedInputs("SparseSoftmaxCrossEntropyWithLogits",
                       {T1<float>({1, 2}), T1<int64_t>({0})});
  EXPECT_TRUE(IsOpError(r, "[batch, classes]"));
}

// ---------------------------------------------------------------------------
// SigmoidCrossEntropyWithLogits.

double RefSigmoidXent(double z, double x) {
  // -z log(sigmoid(x)) - (1 - z) log(1 - sigmoid(x)), written per sign.
  return x >= 0 ? x * (1 - z) + std::log1p(std::exp(-x)) : -x * z + std::log1p(std::exp(x));
}

TEST(NnSigmoidXent, MatchesReferenceForEveryDtypeAndShape) {
  ForFloatTypes([]<typename T>() {
    uint64_t seed = 30;
    for (const TensorShape& s :
         {TensorShape({}), TensorShape({0}), TensorShape({7}), TensorShape({3, 4}),
          TensorShape({2, 3, 5}), TensorShape({3000, 7})}) {
      Tensor z = RandomTensor<T>(s, seed++, 0, 1), x = RandomTensor<T>(s, seed++, -30, 30);
      Tensor want(kDataTypeOf<T>, s);
      for (int64_t i = 0; i < s.num_elements(); ++i) {
        want.data<T>()[i] = T(RefSigmoidXent(double(z.data<T>()[i]), double(x.data<T>()[i])));
      }
      for (int threads : {1, 2}) {
        Tensor got = RunOp1("SigmoidCrossEntropyWithLogits", {z, x}, {}, CpuTestDevice(threads));
        EXPECT_TRUE(TensorNear(got, want, kRtol<T>, kLossAtol<T>)) << s.ToString();
      }
    }
    // Long runs of extreme logits are exactly 0 (Eigen's vector path).
    Tensor z0(kDataTypeOf<T>, TensorShape({100})), far(kDataTypeOf<T>, TensorShape({100}));
    for (int64_t i = 0; i < 100; ++i) {
      z0.data<T>()[i] = 0;
      far.data<T>()[i] = T(-750 - i);
    }
    EXPECT_TRUE(TensorEq(RunOp1("SigmoidCrossEntropyWithLogits", {z0, far}), z0));
    // No overflow at the extremes; log 2 at 0.
    Tensor got = RunOp1("SigmoidCrossEntropyWithLogits",
                        {T1<T>({1, 0, 1, 0, 0.5}), T1<T>({1000, -1000, -1000, 1000, 0})});
    EXPECT_TRUE(TensorNear(got, T1<T>({0, 0, 1000, 1000, T(std::log(2.0))}), kRtol<T>, 0));
  });
}

TEST(NnSigmoidXent, ErrorsAndInPlace) {
  auto r = RunOpOnFedInputs("SigmoidCrossEntropyWithLogits", {T1<float>({1, 2}), T1<float>({1})});
  EXPECT_TRUE(IsOpError(r, "must have the same shape"));
  Tensor z = RandomTensor<double>(TensorShape({9}), 1, 0, 1);
  EXPECT_TRUE(ForwardsInput("SigmoidCrossEntropyWithLogits", Own(z, z.DeepCopy()), 1));
}

// ---------------------------------------------------------------------------
// L2Loss.

TEST(NnL2Loss, MatchesReferenceAndDoesNotDependOnThreads) {
  ForFloatTypes([]<typename T>() {
    uint64_t seed = 40;
    for (const TensorShape& s :
         {TensorShape({}), TensorShape({0}), TensorShape({7}), TensorShape({3, 4}),
          TensorShape({2, 0, 3}), TensorShape({100003}), TensorShape({300, 1001})}) {
      Tensor t = RandomTensor<T>(s, seed++, -3, 3);
      double sum = 0;
      for (int64_t i = 0; i < t.num_elements(); ++i)
        sum += double(t.data<T>()[i]) * double(t.data<T>()[i]);
      Tensor one = RunOp1("L2Loss", {t}, {}, CpuTestDevice(1));
      EXPECT_TRUE(TensorNear(one, Tensor::Scalar<T>(T(sum / 2)),
                             std::is_same_v<T, float> ? 1e-7 : 1e-12, 0))
          << s.ToString();
      EXPECT_TRUE(TensorsEqual(one, RunOp1("L2Loss", {t}, {}, CpuTestDevice(2)))) << s.ToString();
    }
    // float32 accumulates in double: 2e6 × 0.1² / 2 to float precision.
    Tensor many(kDataTypeOf<T>, TensorShape({2000000}));
    std::fill_n(many.data<T>(), many.num_elements(), T(0.1));
    const double v = double(T(0.1));
    EXPECT_TRUE(
        TensorNear(RunOp1("L2Loss", {many}), Tensor::Scalar<T>(T(2e6 * v * v / 2)), 1e-7, 0));
  });
}

}  // namespace
}  // namespace flowstate::test

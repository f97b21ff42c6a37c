// Every differentiable neural-network op against finite differences, in
// float64, over several shapes (each also with its dimensions unknown until
// run time; see gradient_check_util.h).
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "graph/gradients.h"
#include "graph/op_builders.h"
#include "tests/gradients/gradient_check_util.h"

namespace flowstate::test {
namespace {

Tensor R(std::initializer_list<int64_t> dims, uint64_t seed, double lo = -1, double hi = 1) {
  return RandomF64(TensorShape(dims), seed, lo, hi);
}

// Values in [lo, hi) kept at least `gap` away from each point in `kinks`,
// so that a step of 1e-6 never crosses a point where the op is not smooth.
Tensor AwayFrom(std::initializer_list<int64_t> dims, uint64_t seed, double lo, double hi,
                std::initializer_list<double> kinks, double gap = 0.05) {
  Tensor t = RandomF64(TensorShape(dims), seed, lo, hi);
  for (double& v : t.flat<double>()) {
    for (double k : kinks) {
      if (std::abs(v - k) < gap) v = k + (v < k ? -gap : gap);
    }
  }
  return t;
}

AttrMap Window(std::vector<int64_t> ksize, std::vector<int64_t> strides, const char* padding) {
  return {{"ksize", AttrValue(ksize)}, {"strides", AttrValue(strides)},
          {"padding", AttrValue(padding)}};
}

TEST(NnGradientCheck, BiasAdd) {
  const std::vector<std::pair<std::vector<int64_t>, int64_t>> shapes = {
      {{4, 3}, 3}, {{2, 3, 3, 5}, 5}, {{7}, 7}};
  int seed = 0;
  for (const auto& [value, c] : shapes) {
    GradCheck g;
    g.op = "BiasAdd";
    g.inputs = {RandomF64(TensorShape(value), ++seed), RandomF64(TensorShape({c}), 50 + seed)};
    EXPECT_TRUE(CheckGradient(g)) << TensorShape(value).ToString();
  }
}

TEST(NnGradientCheck, Activations) {
  struct Case {
    const char* op;
    double lo, hi;
    std::initializer_list<double> kinks;
  };
  const Case cases[] = {{"Relu", -2, 2, {0}},      {"Relu6", -2, 8, {0, 6}},
                        {"LeakyRelu", -2, 2, {0}}, {"Elu", -2, 2, {0}},
                        {"Sigmoid", -4, 4, {}},    {"Tanh", -3, 3, {}},
                        {"Softplus", -5, 5, {}}};
  for (const Case& k : cases) {
    int seed = 0;
    for (std::initializer_list<int64_t> dims : {std::initializer_list<int64_t>{3, 4},
                                                std::initializer_list<int64_t>{2, 3, 2},
                                                std::initializer_list<int64_t>{5}}) {
      GradCheck g;
      g.op = k.op;
      g.inputs = {AwayFrom(dims, ++seed, k.lo, k.hi, k.kinks)};
      EXPECT_TRUE(CheckGradient(g)) << k.op;
    }
  }
  GradCheck leaky;  // a non-default slope
  leaky.op = "LeakyRelu";
  leaky.inputs = {AwayFrom({4, 4}, 9, -2, 2, {0})};
  leaky.attrs = {{"alpha", AttrValue(0.35)}};
  EXPECT_TRUE(CheckGradient(leaky));
}

TEST(NnGradientCheck, SoftmaxAndLogSoftmax) {
  for (const char* op : {"Softmax", "LogSoftmax"}) {
    int seed = 0;
    for (std::initializer_list<int64_t> dims : {std::initializer_list<int64_t>{2, 5},
                                                std::initializer_list<int64_t>{3},
                                                std::initializer_list<int64_t>{2, 3, 4}}) {
      GradCheck g;
      g.op = op;
      g.inputs = {R(dims, ++seed, -3, 3)};
      EXPECT_TRUE(CheckGradient(g)) << op;
    }
  }
}

// Rows that are probability distributions (positive, summing to one).
Tensor Distributions(int64_t rows, int64_t cols, uint64_t seed) {
  Tensor t = RandomF64(TensorShape({rows, cols}), seed, 0.1, 1);
  double* p = t.data<double>();
  for (int64_t r = 0; r < rows; ++r) {
    double s = 0;
    for (int64_t c = 0; c < cols; ++c) s += p[r * cols + c];
    for (int64_t c = 0; c < cols; ++c) p[r * cols + c] /= s;
  }
  return t;
}

TEST(NnGradientCheck, SoftmaxCrossEntropyWithLogits) {
  for (auto [rows, cols] : {std::pair<int64_t, int64_t>{4, 5}, {1, 3}, {6, 2}}) {
    GradCheck g;  // gradients of the features and of the labels
    g.op = "SoftmaxCrossEntropyWithLogits";
    g.inputs = {RandomF64(TensorShape({rows, cols}), rows, -3, 3),
                Distributions(rows, cols, 10 + rows)};
    EXPECT_TRUE(CheckGradient(g)) << rows << "x" << cols;
  }
}

TEST(NnGradientCheck, SparseSoftmaxCrossEntropyWithLogits) {
  GradCheck i32;
  i32.op = "SparseSoftmaxCrossEntropyWithLogits";
  i32.inputs = {R({4, 5}, 1, -3, 3), Tensor::FromVector<int32_t>({0, 4, 2, 2})};
  i32.attrs = {{"Tlabels", AttrValue(DataType::kInt32)}};
  EXPECT_TRUE(CheckGradient(i32));

  GradCheck i64;
  i64.op = "SparseSoftmaxCrossEntropyWithLogits";
  i64.inputs = {R({3, 10}, 2, -3, 3), Tensor::FromVector<int64_t>({9, 0, 3})};
  EXPECT_TRUE(CheckGradient(i64));

  GradCheck u8;
  u8.op = "SparseSoftmaxCrossEntropyWithLogits";
  u8.inputs = {R({2, 3}, 3, -3, 3), Tensor::FromVector<uint8_t>({1, 2})};
  u8.attrs = {{"Tlabels", AttrValue(DataType::kUInt8)}};
  EXPECT_TRUE(CheckGradient(u8));
}

TEST(NnGradientCheck, SigmoidCrossEntropyWithLogits) {
  int seed = 0;
  for (std::initializer_list<int64_t> dims : {std::initializer_list<int64_t>{3, 4},
                                              std::initializer_list<int64_t>{6},
                                              std::initializer_list<int64_t>{2, 2, 3}}) {
    GradCheck g;  // labels and logits; logits away from 0 (the |x| of the stable form)
    g.op = "SigmoidCrossEntropyWithLogits";
    g.inputs = {R(dims, ++seed, 0, 1), AwayFrom(dims, 20 + seed, -4, 4, {0})};
    EXPECT_TRUE(CheckGradient(g));
  }
}

TEST(NnGradientCheck, L2Loss) {
  for (std::initializer_list<int64_t> dims : {std::initializer_list<int64_t>{3, 4},
                                              std::initializer_list<int64_t>{5},
                                              std::initializer_list<int64_t>{2, 1, 3}}) {
    GradCheck g;
    g.op = "L2Loss";
    g.inputs = {R(dims, 4, -2, 2)};
    EXPECT_TRUE(CheckGradient(g));
  }
}

TEST(NnGradientCheck, Conv2D) {
  struct Case {
    std::vector<int64_t> input, filter, strides, dilations;
    const char* padding;
  };
  const Case cases[] = {
      {{1, 5, 5, 1}, {3, 3, 1, 1}, {1, 1, 1, 1}, {1, 1, 1, 1}, "VALID"},
      {{2, 5, 6, 3}, {3, 3, 3, 4}, {1, 1, 1, 1}, {1, 1, 1, 1}, "SAME"},
      {{2, 6, 5, 2}, {3, 2, 2, 3}, {1, 2, 2, 1}, {1, 1, 1, 1}, "SAME"},
      {{1, 7, 7, 2}, {3, 3, 2, 2}, {1, 2, 3, 1}, {1, 1, 1, 1}, "VALID"},
      {{1, 7, 6, 2}, {2, 3, 2, 3}, {1, 1, 1, 1}, {1, 2, 2, 1}, "SAME"},
      {{2, 7, 7, 1}, {2, 2, 1, 2}, {1, 1, 1, 1}, {1, 3, 2, 1}, "VALID"},
      {{1, 4, 4, 3}, {1, 1, 3, 2}, {1, 2, 2, 1}, {1, 1, 1, 1}, "SAME"},
      {{1, 4, 4, 2}, {5, 5, 2, 1}, {1, 1, 1, 1}, {1, 1, 1, 1}, "SAME"},  // filter > input
  };
  int seed = 0;
  for (const Case& k : cases) {
    GradCheck g;
    g.op = "Conv2D";
    g.inputs = {RandomF64(TensorShape(k.input), ++seed), RandomF64(TensorShape(k.filter), 100 + seed)};
    g.attrs = {{"strides", AttrValue(k.strides)}, {"dilations", AttrValue(k.dilations)},
               {"padding", AttrValue(k.padding)}};
    EXPECT_TRUE(CheckGradient(g)) << "case " << seed;
  }
}

// Distinct values (the max of each window is then unique, so a small step
// never changes which element wins).
Tensor Distinct(std::initializer_list<int64_t> dims, uint64_t seed) {
  Tensor t = RandomF64(TensorShape(dims), seed, 0, 1);
  double* p = t.data<double>();
  for (int64_t i = 0; i < t.num_elements(); ++i) p[i] = double((i * 37) % t.num_elements()) + p[i] * 0.5;
  return t;
}

// The pooling windows both pooling gradients are checked on.
struct PoolCase {
  std::initializer_list<int64_t> input;
  std::vector<int64_t> ksize, strides;
  const char* padding;
};
const PoolCase kPoolCases[] = {{{1, 4, 4, 1}, {1, 2, 2, 1}, {1, 2, 2, 1}, "VALID"},
                               {{2, 5, 5, 3}, {1, 3, 3, 1}, {1, 2, 2, 1}, "SAME"},
                               {{1, 5, 4, 2}, {1, 2, 3, 1}, {1, 1, 1, 1}, "VALID"},
                               {{1, 3, 5, 2}, {1, 2, 2, 1}, {1, 2, 2, 1}, "SAME"}};

TEST(NnGradientCheck, MaxPoolAndAvgPool) {
  for (const char* op : {"MaxPool", "AvgPool"}) {
    int seed = 0;
    for (const PoolCase& k : kPoolCases) {
      GradCheck g;
      g.op = op;
      g.inputs = {Distinct(k.input, ++seed)};
      g.attrs = Window(k.ksize, k.strides, k.padding);
      EXPECT_TRUE(CheckGradient(g)) << op << " case " << seed;
    }
  }
}

TEST(NnGradientCheck, DropoutSeeded) {
  for (double rate : {0.0, 0.3, 0.6}) {
    GradCheck g;
    g.op = "Dropout";
    g.inputs = {R({4, 6}, 3)};
    g.attrs = {{"rate", AttrValue(rate)}, {"seed", AttrValue(int64_t(7))},
               {"seed2", AttrValue(int64_t(3))}};
    g.stateful = true;
    EXPECT_TRUE(CheckGradient(g)) << "rate " << rate;
  }
}

TEST(NnGradientCheck, BatchNormTraining) {
  // x over [n, c] and [n, h, w, c]; the gradient flows through the batch
  // statistics (y depends on every x of its channel).
  struct Case {
    std::initializer_list<int64_t> x;
    int64_t c;
  };
  int seed = 0;
  for (const Case& k : {Case{{6, 3}, 3}, Case{{2, 3, 2, 4}, 4}, Case{{5, 1}, 1}}) {
    GradCheck g;
    g.op = "BatchNorm";
    g.inputs = {R(k.x, ++seed, -2, 2), RandomF64(TensorShape({k.c}), 10 + seed, 0.5, 1.5),
                RandomF64(TensorShape({k.c}), 20 + seed), RandomF64(TensorShape({k.c}), 30 + seed),
                RandomF64(TensorShape({k.c}), 40 + seed, 0.5, 1.5)};
    g.variables = {3, 4};
    g.attrs = {{"is_training", AttrValue(true)}, {"epsilon", AttrValue(0.01)}};
    g.tolerance = 1e-5;
    EXPECT_TRUE(CheckGradient(g)) << "case " << seed;
  }
}

TEST(NnGradientCheck, BatchNormInference) {
  GradCheck g;
  g.op = "BatchNorm";
  g.inputs = {R({2, 2, 2, 3}, 1, -2, 2), RandomF64(TensorShape({3}), 2, 0.5, 1.5),
              RandomF64(TensorShape({3}), 3), RandomF64(TensorShape({3}), 4),
              RandomF64(TensorShape({3}), 5, 0.5, 1.5)};
  g.variables = {3, 4};
  g.attrs = {{"is_training", AttrValue(false)}};
  EXPECT_TRUE(CheckGradient(g));
}


// The harness itself: a gradient that is wrong by a factor on one input (or
// wrong only when shapes are unknown) must be reported.
TEST(NnGradientCheck, HarnessReportsAWrongGradient) {
  GradientRegistry* reg = GradientRegistry::Global();
  const GradFunc original = *reg->Find("Softplus");
  reg->Override("Softplus", [original](GradContext* c, std::vector<Gradient>* in) {
    FS_RETURN_IF_ERROR(original(c, in));
    (*in)[0] = Gradient::Dense(ops::Mul(c->scope(), (*in)[0].dense, ops::Const(c->scope(), 1.001)));
    return Status();
  });
  GradCheck g;
  g.op = "Softplus";
  g.inputs = {R({3, 2}, 5)};
  ::testing::AssertionResult r = CheckGradient(g);
  reg->Override("Softplus", original);
  EXPECT_FALSE(r);
  EXPECT_NE(std::string(r.message()).find("6 gradient element(s) differ"), std::string::npos)
      << r.message();
  EXPECT_TRUE(CheckGradient(g));  // restored
}

}  // namespace
}  // namespace flowstate::test

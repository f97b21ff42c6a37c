// Every differentiable op of the engine core against finite differences.
#include <gtest/gtest.h>

#include "tests/gradients/gradient_check_util.h"

namespace flowstate::test {
namespace {

Tensor R(std::initializer_list<int64_t> dims, uint64_t seed, double lo = -1, double hi = 1) {
  return RandomF64(TensorShape(dims), seed, lo, hi);
}
Tensor I32(std::vector<int32_t> v) { return Tensor::FromVector(v); }

TEST(GradientCheck, BinaryOpsWithBroadcasting) {
  struct Shapes {
    std::initializer_list<int64_t> a, b;
  };
  const std::vector<std::pair<std::vector<int64_t>, std::vector<int64_t>>> shapes = {
      {{2, 3}, {2, 3}}, {{2, 3}, {3}}, {{2, 1, 3}, {4, 1}}, {{}, {2, 2}}, {{3, 1}, {1, 4}}};
  for (const char* op : {"Add", "Sub", "Mul", "Div", "Maximum", "Minimum", "SquaredDifference"}) {
    int seed = 0;
    for (const auto& [sa, sb] : shapes) {
      GradCheck c;
      c.op = op;
      double lo = std::string(op) == "Div" ? 0.5 : -1;  // keep divisors away from zero
      c.inputs = {RandomF64(TensorShape(sa), ++seed, -1, 1), RandomF64(TensorShape(sb), 100 + seed, lo, 2)};
      EXPECT_TRUE(CheckGradient(c)) << op << " " << TensorShape(sa).ToString() << " "
                                    << TensorShape(sb).ToString();
    }
  }
}

TEST(GradientCheck, Pow) {
  GradCheck c;
  c.op = "Pow";
  c.inputs = {R({2, 3}, 1, 0.5, 2), R({3}, 2, -1, 2)};
  EXPECT_TRUE(CheckGradient(c));
}

TEST(GradientCheck, UnaryOps) {
  for (const char* op : {"Neg", "Abs", "Square", "Exp", "Sin", "Cos"}) {
    GradCheck c;
    c.op = op;
    c.inputs = {R({3, 4}, 7, -2, 2)};
    EXPECT_TRUE(CheckGradient(c)) << op;
  }
  for (const char* op : {"Sqrt", "Rsqrt", "Log", "Reciprocal"}) {
    GradCheck c;
    c.op = op;
    c.inputs = {R({3, 4}, 8, 0.5, 3)};
    EXPECT_TRUE(CheckGradient(c)) << op;
  }
}

TEST(GradientCheck, AddNSelectCastIdentity) {
  GradCheck addn;
  addn.op = "AddN";
  addn.inputs = {R({2, 2}, 1), R({2, 2}, 2), R({2, 2}, 3)};
  EXPECT_TRUE(CheckGradient(addn));

  GradCheck sel;
  sel.op = "Select";
  Tensor cond = Tensor::FromVector<bool>({true, false, true}, TensorShape({3}));
  sel.inputs = {cond, R({2, 3}, 4), R({2, 3}, 5)};
  EXPECT_TRUE(CheckGradient(sel));

  GradCheck id;
  id.op = "Identity";
  id.inputs = {R({4}, 6)};
  EXPECT_TRUE(CheckGradient(id));
}

TEST(GradientCheck, MatMulAllTransposes) {
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      GradCheck c;
      c.op = "MatMul";
      c.inputs = {ta ? R({4, 3}, 1) : R({3, 4}, 1), tb ? R({5, 4}, 2) : R({4, 5}, 2)};
      c.attrs = {{"transpose_a", AttrValue(ta)}, {"transpose_b", AttrValue(tb)}};
      EXPECT_TRUE(CheckGradient(c)) << ta << tb;
    }
  }
}

TEST(GradientCheck, BatchMatMulWithBroadcastBatch) {
  for (bool ax : {false, true}) {
    for (bool ay : {false, true}) {
      GradCheck c;
      c.op = "BatchMatMul";
      c.inputs = {ax ? R({2, 1, 4, 3}, 1) : R({2, 1, 3, 4}, 1), ay ? R({3, 5, 4}, 2) : R({3, 4, 5}, 2)};
      c.attrs = {{"adj_x", AttrValue(ax)}, {"adj_y", AttrValue(ay)}};
      EXPECT_TRUE(CheckGradient(c)) << ax << ay;
    }
  }
}

TEST(GradientCheck, Reductions) {
  for (const char* op : {"Sum", "Mean", "Max", "Min", "Prod"}) {
    for (bool keep : {false, true}) {
      for (const std::vector<int32_t>& axes :
           std::vector<std::vector<int32_t>>{{}, {0}, {1}, {0, 2}, {-1}}) {
        GradCheck c;
        c.op = op;
        c.inputs = {R({2, 3, 2}, 9, 0.5, 1.5), I32(axes)};
        c.attrs = {{"keep_dims", AttrValue(keep)}};
        EXPECT_TRUE(CheckGradient(c)) << op << " keep=" << keep << " axes=" << axes.size();
      }
    }
  }
}

TEST(GradientCheck, ProdWithZeros) {
  GradCheck c;
  c.op = "Prod";
  Tensor x = R({2, 3}, 3, 0.5, 1.5);
  x.data<double>()[1] = 0;  // one zero in row 0
  x.data<double>()[3] = 0;  // two zeros in row 1
  x.data<double>()[4] = 0;
  c.inputs = {x, I32({1})};
  EXPECT_TRUE(CheckGradient(c));
}

TEST(GradientCheck, ShapeOps) {
  GradCheck reshape;
  reshape.op = "Reshape";
  reshape.inputs = {R({2, 6}, 1), I32({3, -1})};
  EXPECT_TRUE(CheckGradient(reshape));

  GradCheck transpose;
  transpose.op = "Transpose";
  transpose.inputs = {R({2, 3, 4}, 2), I32({2, 0, 1})};
  EXPECT_TRUE(CheckGradient(transpose));

  GradCheck expand;
  expand.op = "ExpandDims";
  expand.inputs = {R({2, 3}, 3), Tensor::Scalar<int32_t>(1)};
  EXPECT_TRUE(CheckGradient(expand));

  GradCheck squeeze;
  squeeze.op = "Squeeze";
  squeeze.inputs = {R({2, 1, 3}, 4)};
  EXPECT_TRUE(CheckGradient(squeeze));

  GradCheck tile;
  tile.op = "Tile";
  tile.inputs = {R({2, 3}, 5), I32({2, 2})};
  EXPECT_TRUE(CheckGradient(tile));

  GradCheck bcast;
  bcast.op = "BroadcastTo";
  bcast.inputs = {R({3, 1}, 6), I32({2, 3, 4})};
  EXPECT_TRUE(CheckGradient(bcast));

  GradCheck fill;
  fill.op = "Fill";
  fill.inputs = {I32({2, 3}), Tensor::Scalar<double>(0.7)};
  EXPECT_TRUE(CheckGradient(fill));
}

TEST(GradientCheck, ConcatSplitSlices) {
  GradCheck concat;
  concat.op = "Concat";
  concat.inputs = {R({2, 3}, 1), R({2, 1}, 2), R({2, 2}, 3), Tensor::Scalar<int32_t>(1)};
  EXPECT_TRUE(CheckGradient(concat));

  GradCheck split;
  split.op = "Split";
  split.inputs = {Tensor::Scalar<int32_t>(0), R({4, 3}, 4)};
  split.attrs = {{"num_split", AttrValue(int64_t(2))}};
  split.outputs = {0, 1};
  EXPECT_TRUE(CheckGradient(split));

  GradCheck one_part;  // only one output feeds the loss: the other gets zeros
  one_part.op = "Split";
  one_part.inputs = {Tensor::Scalar<int32_t>(1), R({2, 4}, 5)};
  one_part.attrs = {{"num_split", AttrValue(int64_t(2))}};
  one_part.outputs = {1};
  EXPECT_TRUE(CheckGradient(one_part));

  GradCheck slice;
  slice.op = "Slice";
  slice.inputs = {R({4, 5}, 6), I32({1, 2}), I32({2, -1})};
  EXPECT_TRUE(CheckGradient(slice));

  GradCheck ss;
  ss.op = "StridedSlice";
  ss.inputs = {R({5, 6}, 7), I32({4, 1}), I32({0, 6}), I32({-2, 2})};
  EXPECT_TRUE(CheckGradient(ss));

  GradCheck shrink;
  shrink.op = "StridedSlice";
  shrink.inputs = {R({3, 4}, 8), I32({1}), I32({2}), I32({1})};
  shrink.attrs = {{"shrink_axis_mask", AttrValue(int64_t(1))}};
  EXPECT_TRUE(CheckGradient(shrink));
}

TEST(GradientCheck, GatherIsSparseAndRepeatedIndicesAdd) {
  GradCheck c;
  c.op = "Gather";
  c.inputs = {R({5, 3}, 1), Tensor::FromVector<int32_t>({4, 0, 4, 2}, TensorShape({2, 2}))};
  EXPECT_TRUE(CheckGradient(c));
}


// Each data input of DynamicStitch gets the gradient's rows at its indices.
TEST(GradientCheck, DynamicStitchRoutesRowsBack) {
  GradCheck c;
  c.op = "DynamicStitch";
  c.inputs = {Tensor::FromVector<int32_t>({3, 0}), Tensor::FromVector<int32_t>({1, 4, 2}),
              R({2, 3}, 11), R({3, 3}, 12)};
  c.attrs = {{"N", AttrValue(int64_t{2})}};
  EXPECT_TRUE(CheckGradient(c));
}

// Regression: the gradient of a broadcasting binary op whose input shapes are
// known only at run time, where nothing is broadcast, sums over an empty
// axis list computed by BroadcastGradientArgs; Sum reads an empty list as
// "every axis", which gave a scalar (SumToShape in grad_util.cc now keeps
// the list non-empty). Placeholders of shape [-1] (and [-1, -1]) force that
// path.
TEST(GradientCheck, UnknownShapesWithNothingBroadcast) {
  const std::vector<std::vector<int64_t>> shapes = {{5}, {2, 3}, {1}, {3, 1}};
  for (const char* op : {"Add", "Sub", "Mul", "Div", "Maximum", "Minimum", "SquaredDifference",
                         "Pow"}) {
    int seed = 0;
    for (const auto& shape : shapes) {
      GradCheck c;
      c.op = op;
      c.shapes = FeedShapes::kUnknownDims;
      bool positive = std::string(op) == "Div" || std::string(op) == "Pow";
      c.inputs = {RandomF64(TensorShape(shape), ++seed, positive ? 0.5 : -1, 2),
                  RandomF64(TensorShape(shape), 50 + seed, positive ? 0.5 : -1, 2)};
      EXPECT_TRUE(CheckGradient(c)) << op << " " << TensorShape(shape).ToString();
    }
  }
}

// Broadcasting decided at run time: [-1, -1] against [-1] and [-1, 1].
TEST(GradientCheck, UnknownShapesWithBroadcasting) {
  const std::vector<std::pair<std::vector<int64_t>, std::vector<int64_t>>> shapes = {
      {{4, 3}, {3}}, {{4, 3}, {4, 1}}, {{1, 3}, {2, 1}}, {{2, 1, 3}, {1}}};
  for (const char* op : {"Add", "Sub", "Mul", "SquaredDifference"}) {
    int seed = 0;
    for (const auto& [sa, sb] : shapes) {
      GradCheck c;
      c.op = op;
      c.shapes = FeedShapes::kUnknownDims;
      c.inputs = {RandomF64(TensorShape(sa), ++seed), RandomF64(TensorShape(sb), 70 + seed)};
      EXPECT_TRUE(CheckGradient(c)) << op << " " << TensorShape(sa).ToString() << " "
                                    << TensorShape(sb).ToString();
    }
  }
}

TEST(GradientCheck, Cast) {
  GradCheck c;  // float64 to float64 (the loss must stay float64 to be checked here)
  c.op = "Cast";
  c.inputs = {R({2, 3}, 11)};
  c.attrs = {{"DstT", AttrValue(DataType::kFloat64)}};
  EXPECT_TRUE(CheckGradient(c));
}


}  // namespace
}  // namespace flowstate::test

#include <gtest/gtest.h>

#include "tests/util/op_test_util.h"

namespace flowstate::test {
namespace {

TEST(BasicOps, ConstReturnsItsValueForEveryDtype) {
  for (DataType t : AllDataTypes()) {
    Tensor v(t, TensorShape({2, 3}));
    std::memset(v.raw_data(), 7, v.TotalBytes());
    Tensor out = RunOp1("Const", {}, {{"value", AttrValue(v)}, {"dtype", AttrValue(t)}});
    EXPECT_TRUE(TensorsEqual(out, v)) << DataTypeName(t);
  }
}

TEST(BasicOps, IdentityAndStopGradientShareTheBuffer) {
  for (DataType t : AllDataTypes()) {
    for (const char* op : {"Identity", "StopGradient"}) {
      Tensor v(t, TensorShape({4}));
      std::memset(v.raw_data(), 1, v.TotalBytes());
      Tensor out = RunOp1(op, {v});
      EXPECT_TRUE(TensorsEqual(out, v)) << op << " " << DataTypeName(t);
      EXPECT_TRUE(out.SharesBufferWith(v)) << op;
    }
    // Empty tensors pass through too.
    Tensor empty(t, TensorShape({0, 3}));
    EXPECT_EQ(RunOp1("Identity", {empty}).shape(), TensorShape({0, 3}));
  }
}

TEST(BasicOps, PlaceholderRunWithoutFeedNamesItself) {
  for (DataType t : AllDataTypes()) {
    auto r = RunOp("Placeholder", {}, {{"dtype", AttrValue(t)}});
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), Code::kInvalidArgument);
    EXPECT_EQ(r.status().node(), "op");
  }
}

TEST(BasicOps, NoOp) {
  auto r = RunOp("NoOp", {});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(r->empty());
}

TEST(BasicOps, CheckNumericsPassesFiniteTensorsAndNamesNaNAndInf) {
  const AttrMap msg{{"message", AttrValue(std::string("the loss"))}};
  Tensor ok32 = Tensor::FromVector<float>({1.f, -2.f, 3e38f});
  Tensor out = RunOp1("CheckNumerics", {ok32}, msg);
  EXPECT_TRUE(out.SharesBufferWith(ok32));
  Tensor ok64 = Tensor::FromVector<double>({0.5, 1e300});
  EXPECT_TRUE(TensorsEqual(RunOp1("CheckNumerics", {ok64}, msg), ok64));
  EXPECT_EQ(RunOp1("CheckNumerics", {Tensor(DataType::kFloat32, TensorShape({0}))}, msg).num_elements(), 0);
  struct Case {
    Tensor x;
    const char* want;
  } cases[] = {
      {Tensor::Scalar<float>(std::nanf("")), "the loss is NaN"},
      {Tensor::Scalar<double>(-INFINITY), "the loss is Inf"},
      {Tensor::FromVector<float>({1.f, NAN, 2.f}), "the loss has NaN values"},
      {Tensor::FromVector<double>({INFINITY, 0.0}), "the loss has Inf values"},
      {Tensor::FromVector<float>({INFINITY, NAN}), "the loss has NaN and Inf values"},
  };
  for (const Case& c : cases) {
    auto r = RunOp("CheckNumerics", {c.x}, msg);
    ASSERT_FALSE(r.ok()) << c.want;
    EXPECT_EQ(r.status().code(), Code::kInvalidArgument);
    EXPECT_NE(r.status().message().find(c.want), std::string::npos) << r.status().ToString();
    EXPECT_EQ(r.status().node(), "op");
  }
}

}  // namespace
}  // namespace flowstate::test

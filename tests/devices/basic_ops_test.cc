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

}  // namespace
}  // namespace flowstate::test

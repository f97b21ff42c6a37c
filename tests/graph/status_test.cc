#include "graph/status.h"

#include <gtest/gtest.h>

namespace flowstate {
namespace {

TEST(Status, OkIsCheapAndEmpty) {
  Status s;
  EXPECT_TRUE(s.ok());
  EXPECT_EQ(s.code(), Code::kOk);
  EXPECT_EQ(s.message(), "");
  EXPECT_EQ(s.ToString(), "OK");
}

TEST(Status, CarriesCodeMessageAndNode) {
  Status s = InvalidArgument("bad shape", "dense1");
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_EQ(s.node(), "dense1");
  EXPECT_EQ(s.ToString(), "INVALID_ARGUMENT: bad shape [node: dense1]");
  EXPECT_EQ(s.WithPrefix("step 3").message(), "step 3: bad shape");
  EXPECT_EQ(NotFound("x").WithNode("n").node(), "n");
  EXPECT_EQ(s.WithNode("other").node(), "dense1");  // keeps the first
}

StatusOr<int> Half(int x) {
  if (x % 2) return InvalidArgument("odd");
  return x / 2;
}

Status UseMacros(int x, int* out) {
  FS_ASSIGN_OR_RETURN(int h, Half(x));
  FS_RETURN_IF_ERROR(Status());
  *out = h;
  return Status();
}

TEST(StatusOr, ValueOrError) {
  int out = 0;
  EXPECT_TRUE(UseMacros(8, &out).ok());
  EXPECT_EQ(out, 4);
  Status s = UseMacros(3, &out);
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_EQ(s.message(), "odd");
  EXPECT_EQ(CodeName(Code::kFailedPrecondition), "FAILED_PRECONDITION");
}

}  // namespace
}  // namespace flowstate

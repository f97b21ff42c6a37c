// Session::StepMayWait, which a server asks before it runs a step on a
// thread that must not block: only a built executable whose partitions hold
// no asynchronous kernel and no loop may not wait. And a deadline or a
// Close ends an endless loop at its next iteration, naming the node, the
// iteration and the reason.
#include <gtest/gtest.h>

#include <chrono>
#include <future>

#include "graph/control_flow_builders.h"
#include "graph/op_builders.h"
#include "graph/queue_builders.h"
#include "graph/scope.h"
#include "scheduler/session.h"
#include "tests/util/session_util.h"

namespace flowstate {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
using test::NewSession;
using Vars = std::vector<Output>;

// "q" (an int32 queue) with "dequeue" and "size"; "c" a constant; "spin" a
// loop whose condition never turns false.
GraphDef Graph() {
  Scope root;
  ops::QueueAttrs attrs;
  attrs.shapes = {PartialShape(std::vector<int64_t>{})};
  Output q = ops::FIFOQueue(root.WithOpName("q"), {DataType::kInt32}, attrs);
  ops::QueueDequeue(root.WithOpName("dequeue"), q, {DataType::kInt32});
  ops::QueueSize(root.WithOpName("size"), q);
  Output c = ops::Const(root.WithOpName("c"), 2.0f);
  ops::Square(root.WithOpName("sq"), c);
  auto spin = ops::WhileLoop(
      root.WithOpName("spin"),
      [](const Scope& s, const Vars& v) -> StatusOr<Output> {
        return ops::Greater(s.WithOpName("more"), v[0], ops::Const(s, int64_t{-1}));
      },
      [](const Scope& s, const Vars& v) -> StatusOr<Vars> {
        return Vars{ops::Add(s.WithOpName("next"), v[0], ops::Const(s, int64_t{1}))};
      },
      {ops::Const(root, int64_t{0})});
  spin.status().CheckOk();
  return root.graph_def();
}

TEST(StepMayWait, OnlyABuiltStepWithoutQueuesOrLoopsMayNot) {
  auto s = NewSession(Graph(), 2);
  // Nothing is known of a signature before its first run.
  EXPECT_TRUE(s->StepMayWait({}, {"sq"}, {}));
  std::vector<Tensor> out;
  ASSERT_TRUE(s->Run({}, {"sq"}, {}, &out).ok());
  EXPECT_FALSE(s->StepMayWait({}, {"sq"}, {}));
  // QueueSize is a plain kernel; a dequeue waits.
  ASSERT_TRUE(s->Run({}, {"size"}, {}, &out).ok());
  EXPECT_FALSE(s->StepMayWait({}, {"size"}, {}));
  RunOptions quick;
  quick.timeout = milliseconds(50);
  EXPECT_EQ(s->Run({}, {"dequeue"}, {}, &out, nullptr, quick).code(), Code::kDeadlineExceeded);
  EXPECT_TRUE(s->StepMayWait({}, {"dequeue"}, {}));
  // A loop may not end.
  EXPECT_EQ(s->Run({}, {"spin"}, {}, &out, nullptr, quick).code(), Code::kDeadlineExceeded);
  EXPECT_TRUE(s->StepMayWait({}, {"spin"}, {}));
  // Another signature of the same nodes is its own executable.
  EXPECT_TRUE(s->StepMayWait({}, {"sq", "c"}, {}));
}

TEST(StepMayWait, ADeadlineEndsAnEndlessLoopNamingTheNodeAndIteration) {
  auto s = NewSession(Graph(), 1);
  std::vector<Tensor> out;
  RunOptions o;
  o.timeout = milliseconds(200);
  const auto t0 = std::chrono::steady_clock::now();
  Status st = s->Run({}, {"spin"}, {}, &out, nullptr, o);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, seconds(2));
  EXPECT_EQ(st.code(), Code::kDeadlineExceeded) << st.ToString();
  EXPECT_NE(st.message().find("deadline of 200 ms"), std::string::npos) << st.ToString();
  EXPECT_NE(st.message().find("iteration"), std::string::npos) << st.ToString();
  EXPECT_EQ(st.node().rfind("spin/", 0), 0u) << st.ToString();
}

TEST(StepMayWait, ClosingTheSessionEndsAnEndlessLoopWithItsReason) {
  auto s = NewSession(Graph(), 1);
  auto loop = std::async(std::launch::async, [&] {
    std::vector<Tensor> out;
    return s->Run({}, {"spin"}, {}, &out);
  });
  ASSERT_EQ(loop.wait_for(milliseconds(300)), std::future_status::timeout) << "the loop ended by itself";
  ASSERT_TRUE(s->Close("the server is shutting down").ok());
  ASSERT_EQ(loop.wait_for(seconds(5)), std::future_status::ready) << "Close did not end the loop";
  Status st = loop.get();
  EXPECT_EQ(st.code(), Code::kCancelled) << st.ToString();
  EXPECT_EQ(st.message().rfind("the server is shutting down", 0), 0u) << st.ToString();
  EXPECT_NE(st.message().find("iteration"), std::string::npos) << st.ToString();
  EXPECT_EQ(st.node().rfind("spin/", 0), 0u) << st.ToString();
}

}  // namespace
}  // namespace flowstate

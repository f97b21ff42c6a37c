// Control flow split over two tasks of a cluster (in this process, each task
// behind its own gRPC server on loopback): a conditional whose taken or
// untaken branch is on the other task (dead values cross as is_dead), loops
// whose body or condition is there (the LoopCond is pulled by the other
// task's control-loop skeleton every iteration, transfers keyed by frame and
// iteration), a nested loop, and a loop's gradient; each against the same
// graph on one task.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <thread>
#include <string>
#include <vector>

#include "graph/control_flow_builders.h"
#include "graph/gradients.h"
#include "graph/op_builders.h"
#include "graph/scope.h"
#include "tests/distributed/local_cluster.h"
#include "tests/distributed/test_ops.h"

namespace flowstate {
namespace {

using testing::LocalCluster;
using Vars = std::vector<Output>;
using Feeds = std::vector<std::pair<std::string, Tensor>>;

constexpr const char* kT0 = "/job:worker/replica:0/task:0/device:CPU:0";
constexpr const char* kT1 = "/job:worker/replica:0/task:1/device:CPU:0";

// Runs in a thread; fails the test instead of hanging past `seconds`.
// Checks that the step ran as two partitions (one per task).
std::vector<Tensor> RunWithin(Session* s, double seconds, const Feeds& feeds,
                              const std::vector<std::string>& fetches) {
  std::vector<Tensor> out;
  RunStats stats;
  auto f = std::async(std::launch::async, [&] { return s->Run(feeds, fetches, {}, &out, &stats); });
  if (f.wait_for(std::chrono::duration<double>(seconds)) != std::future_status::ready) {
    ADD_FAILURE() << "the step did not end within " << seconds << " s";
    std::abort();  // a hung step cannot be cleaned up: fail loudly
  }
  Status st = f.get();
  EXPECT_TRUE(st.ok()) << st.ToString();
  EXPECT_EQ(stats.num_partitions, 2);
  return out;
}

TEST(ControlFlowAcrossTasks, CondBranchesOnDifferentTasks) {
  LocalCluster cluster(2);
  for (auto [t, f] : {std::pair{kT1, kT0}, std::pair{kT0, kT1}}) {
    Scope root = Scope().WithDevice(kT0);
    Output x = ops::Placeholder(root.WithOpName("x"), DataType::kFloat32, PartialShape({2}));
    Output p = ops::Placeholder(root.WithOpName("p"), DataType::kBool, PartialShape({}));
    auto r = ops::Cond(
        root.WithOpName("c"), p,
        [&](const Scope& s) -> StatusOr<Vars> {
          Scope d = s.WithDevice(t);
          return Vars{ops::Mul(d.WithOpName("times3"), x, ops::Const(d, 3.0f))};
        },
        [&](const Scope& s) -> StatusOr<Vars> {
          Scope d = s.WithDevice(f);
          return Vars{ops::Sub(d.WithOpName("minus1"), x, ops::Const(d, 1.0f))};
        });
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    ops::Add(root.WithOpName("out"), (*r)[0], ops::Const(root, 10.0f));
    auto s = cluster.NewSession(root.graph_def());
    ASSERT_NE(s, nullptr);
    const Tensor xv = Tensor::FromVector(std::vector<float>{2.0f, -4.0f}, TensorShape({2}));
    for (bool pv : {true, false, false, true}) {
      auto out = RunWithin(s.get(), 30, {{"x", xv}, {"p", Tensor::Scalar(pv)}}, {"out"});
      ASSERT_EQ(out.size(), 1u);
      EXPECT_EQ(out[0].data<float>()[0], pv ? 16.0f : 11.0f);
      EXPECT_EQ(out[0].data<float>()[1], pv ? -2.0f : 5.0f);
    }
  }
}

// v = 1; while (v < limit) v = v * x, the Mul on `body`, the comparison on
// `cond`, the rest on task 0.
GraphDef PowerLoop(const char* body, const char* cond) {
  Scope root = Scope().WithDevice(kT0);
  Output x = ops::Placeholder(root.WithOpName("x"), DataType::kFloat32, PartialShape({}));
  Output limit = ops::Placeholder(root.WithOpName("limit"), DataType::kFloat32, PartialShape({}));
  auto r = ops::WhileLoop(
      root.WithOpName("loop"),
      [&](const Scope& c, const Vars& v) -> StatusOr<Output> {
        return ops::Less(c.WithOpName("less").WithDevice(cond), v[1], limit);
      },
      [&](const Scope& b, const Vars& v) -> StatusOr<Vars> {
        return Vars{ops::Add(b, v[0], ops::Const(b, 1)), ops::Mul(b.WithOpName("mul").WithDevice(body), v[1], x)};
      },
      {ops::Const(root, 0), ops::Const(root, 1.0f)});
  r.status().CheckOk();
  return root.graph_def();
}

TEST(ControlFlowAcrossTasks, ALoopWithItsBodyOrConditionOnTheOtherTask) {
  LocalCluster cluster(2);
  for (auto [body, cond] : {std::pair{kT1, kT0}, std::pair{kT0, kT1}, std::pair{kT1, kT1}}) {
    auto s = cluster.NewSession(PowerLoop(body, cond));
    ASSERT_NE(s, nullptr);
    for (auto [x, limit, trips, value] : {std::tuple{2.0f, 100.0f, 7, 128.0f},
                                          std::tuple{3.0f, 0.5f, 0, 1.0f},
                                          std::tuple{1.01f, 2.0f, 70, 0.0f}}) {
      auto out = RunWithin(s.get(), 60, {{"x", Tensor::Scalar(x)}, {"limit", Tensor::Scalar(limit)}},
                           {"loop:0", "loop:1"});
      ASSERT_EQ(out.size(), 2u);
      EXPECT_EQ(out[0].scalar<int32_t>(), trips) << body << " " << cond << " x=" << x;
      if (value != 0.0f) {
        EXPECT_EQ(out[1].scalar<float>(), value);
      }
    }
  }
}

// An outer loop of 4 whose body runs an inner loop of (outer iteration + 1)
// iterations, the inner Mul on `inner`; its gradient with respect to w.
struct Nested {
  GraphDef graph;
  std::string result, grad;
};
Nested NestedLoops(const char* inner) {
  Scope root = Scope().WithDevice(kT0);
  Output w = ops::Placeholder(root.WithOpName("w"), DataType::kFloat64, PartialShape({2}));
  auto r = ops::WhileLoop(
      root.WithOpName("outer"),
      [&](const Scope& s, const Vars& v) -> StatusOr<Output> {
        return ops::Less(s, v[0], ops::Const(s, int32_t(4)));
      },
      [&](const Scope& s, const Vars& v) -> StatusOr<Vars> {
        Output i = v[0];
        auto in = ops::WhileLoop(
            s.WithOpName("inner"),
            [&](const Scope& c, const Vars& u) -> StatusOr<Output> { return ops::LessEqual(c, u[0], i); },
            [&](const Scope& c, const Vars& u) -> StatusOr<Vars> {
              Scope d = c.WithDevice(inner);
              return Vars{ops::Add(c, u[0], ops::Const(c, int32_t(1))),
                          ops::Mul(d.WithOpName("mul"), ops::Sin(d, u[1]), w)};
            },
            {ops::Const(s, int32_t(0)), v[1]});
        if (!in.ok()) return in.status();
        return Vars{ops::Add(s, v[0], ops::Const(s, int32_t(1))), ops::Add(s, (*in)[1], ops::Const(s, 0.5))};
      },
      {ops::Const(root, int32_t(0)),
       ops::Const(root, Tensor::FromVector(std::vector<double>{1.0, -2.0}, TensorShape({2})))});
  r.status().CheckOk();
  Output loss = ops::Sum(root.WithOpName("loss"), ops::Mul(root, (*r)[1], (*r)[1]), std::vector<int32_t>{});
  std::vector<Gradient> grads;
  AddGradients(root, loss, {w}, &grads).CheckOk();
  return Nested{root.graph_def(), (*r)[1].name(), grads[0].dense.name()};
}

TEST(ControlFlowAcrossTasks, NestedLoopAndItsGradientSplitOverTwoTasks) {
  LocalCluster cluster(2);
  const Tensor w = Tensor::FromVector(std::vector<double>{1.5, 0.75}, TensorShape({2}));
  Nested one = NestedLoops(kT0);
  auto s1 = cluster.NewSession(one.graph);
  ASSERT_NE(s1, nullptr);
  std::vector<Tensor> want;
  ASSERT_TRUE(s1->Run({{"w", w}}, {one.result, one.grad}, {}, &want).ok());
  ASSERT_EQ(want.size(), 2u);
  Nested split = NestedLoops(kT1);
  auto s2 = cluster.NewSession(split.graph);
  ASSERT_NE(s2, nullptr);
  for (int step = 0; step < 2; ++step) {
    const auto got = RunWithin(s2.get(), 60, {{"w", w}}, {split.result, split.grad});
    ASSERT_EQ(got.size(), 2u);
    for (int k = 0; k < 2; ++k) {
      EXPECT_EQ(got[0].data<double>()[k], want[0].data<double>()[k]) << k;
      EXPECT_EQ(got[1].data<double>()[k], want[1].data<double>()[k]) << k;
    }
  }
}

// A loop on task 1 whose gradient loop is left to the default device (task
// 0): the values its forward loop keeps are popped where they were pushed
// (placement puts a StackPop with its StackPushes), so the backward loop is
// split over both tasks; the gradient is that of the loop on one task.
TEST(ControlFlowAcrossTasks, ALoopOnOneTaskAndItsGradientOnTheOther) {
  LocalCluster cluster(2);
  const Tensor w = Tensor::FromVector(std::vector<double>{1.5, 0.75}, TensorShape({2}));
  std::vector<Tensor> results;
  for (const char* loop_device : {kT0, kT1}) {
    Scope root;
    Output wp = ops::Placeholder(root.WithOpName("w"), DataType::kFloat64, PartialShape({2}));
    auto r = ops::WhileLoop(
        root.WithOpName("loop").WithDevice(loop_device),
        [&](const Scope& s, const Vars& v) -> StatusOr<Output> {
          return ops::Less(s, v[0], ops::Const(s, int32_t(4)));
        },
        [&](const Scope& s, const Vars& v) -> StatusOr<Vars> {
          return Vars{ops::Add(s, v[0], ops::Const(s, int32_t(1))), ops::Mul(s, ops::Sin(s, v[1]), wp)};
        },
        {ops::Const(root, int32_t(0)), wp});
    ASSERT_TRUE(r.ok());
    Output loss = ops::Sum(root.WithOpName("loss"), ops::Mul(root, (*r)[1], (*r)[1]), std::vector<int32_t>{});
    std::vector<Gradient> grads;
    ASSERT_TRUE(AddGradients(root, loss, {wp}, &grads).ok());
    auto s = cluster.NewSession(root.graph_def());
    ASSERT_NE(s, nullptr);
    std::vector<Tensor> out;
    Status st = s->Run({{"w", w}}, {grads[0].dense.name()}, {}, &out);
    ASSERT_TRUE(st.ok()) << loop_device << ": " << st.ToString();
    results.push_back(out[0]);
  }
  for (int k = 0; k < 2; ++k) EXPECT_EQ(results[0].data<double>()[k], results[1].data<double>()[k]) << k;
}

// Steps of one session over a loop split across tasks, from several
// threads at once: each step's transfers are its own.
TEST(ControlFlowAcrossTasks, ConcurrentStepsOfASplitLoop) {
  LocalCluster cluster(2);
  auto s = cluster.NewSession(PowerLoop(kT1, kT1));
  ASSERT_NE(s, nullptr);
  std::vector<std::thread> threads;
  std::atomic<int> wrong{0};
  for (int t = 0; t < 3; ++t) {
    threads.emplace_back([&, t] {
      for (int k = 0; k < 5; ++k) {
        const float x = 2.0f + float(t);
        std::vector<Tensor> out;
        Status st = s->Run({{"x", Tensor::Scalar(x)}, {"limit", Tensor::Scalar(500.0f)}}, {"loop:1"}, {}, &out);
        float want = 1.0f;
        while (want < 500.0f) want *= x;
        if (!st.ok() || out[0].scalar<float>() != want) ++wrong;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(wrong.load(), 0);
}

// A kernel that fails inside the part of a loop on task 1: the step ends at
// once everywhere (task 0's partition waits on transfers from task 1), with
// the error naming the node and its task.
TEST(ControlFlowAcrossTasks, AnErrorInsideASplitLoopAbortsTheStepEverywhere) {
  testing::RegisterDistributedTestOps();
  LocalCluster cluster(2);
  Scope root = Scope().WithDevice(kT0);
  auto r = ops::WhileLoop(
      root.WithOpName("loop"),
      [&](const Scope& c, const Vars& v) -> StatusOr<Output> {
        return ops::Less(c, v[0], ops::Const(c, 5));
      },
      [&](const Scope& b, const Vars& v) -> StatusOr<Vars> {
        Output bad = ops::Generic(b.WithOpName("bad").WithDevice(kT1), "_TestFailOnTask", {v[1]},
                                  {{"delay_ms", AttrValue(int64_t(50))}})[0];
        return Vars{ops::Add(b, v[0], ops::Const(b, 1)), bad};
      },
      {ops::Const(root, 0), ops::Const(root, 1.0f)});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  auto s = cluster.NewSession(root.graph_def());
  ASSERT_NE(s, nullptr);
  std::vector<Tensor> out;
  auto f = std::async(std::launch::async, [&] { return s->Run({}, {"loop:1"}, {}, &out); });
  ASSERT_EQ(f.wait_for(std::chrono::seconds(20)), std::future_status::ready) << "the step hung";
  Status st = f.get();
  EXPECT_EQ(st.code(), Code::kInvalidArgument) << st.ToString();
  EXPECT_EQ(st.node(), "loop/body/bad") << st.ToString();
  EXPECT_NE(st.message().find("/job:worker/task:1"), std::string::npos) << st.ToString();
  EXPECT_NE(st.message().find("fails on purpose"), std::string::npos) << st.ToString();
}

// A split loop that never ends is stopped by the step's deadline on both
// tasks, and the session runs the next step.
TEST(ControlFlowAcrossTasks, ASplitLoopThatNeverEndsStopsAtTheDeadline) {
  LocalCluster cluster(2);
  auto s = cluster.NewSession(PowerLoop(kT1, kT0));
  ASSERT_NE(s, nullptr);
  std::vector<Tensor> out;
  RunOptions ro;
  ro.timeout = std::chrono::milliseconds(500);
  const auto t0 = std::chrono::steady_clock::now();
  // x = 1: v stays 1, below the limit, forever.
  auto f = std::async(std::launch::async, [&] {
    return s->Run({{"x", Tensor::Scalar(1.0f)}, {"limit", Tensor::Scalar(2.0f)}}, {"loop:1"}, {}, &out,
                  nullptr, ro);
  });
  ASSERT_EQ(f.wait_for(std::chrono::seconds(20)), std::future_status::ready) << "the step hung";
  Status st = f.get();
  EXPECT_EQ(st.code(), Code::kDeadlineExceeded) << st.ToString();
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 10.0);
  auto again = RunWithin(s.get(), 30, {{"x", Tensor::Scalar(2.0f)}, {"limit", Tensor::Scalar(100.0f)}},
                         {"loop:1"});
  ASSERT_EQ(again.size(), 1u);
  EXPECT_EQ(again[0].scalar<float>(), 128.0f);
}

}  // namespace
}  // namespace flowstate


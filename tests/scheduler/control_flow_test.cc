// Control flow through Session: conditionals (Switch/Merge, dead tensors),
// while loops (frames, iterations, parallel_iterations, bounded memory),
// the Cond and WhileLoop builders, the errors a malformed loop gets, and the
// per-step stacks (StackPush/StackPop) that while-loop gradients use.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <thread>

#include "devices/kernel_registry.h"
#include "devices/op_kernel.h"
#include "graph/control_flow_builders.h"
#include "graph/op_def.h"
#include "graph/op_builders.h"
#include "graph/scope.h"
#include "scheduler/executor.h"
#include "scheduler/runtime_kernels.h"
#include "scheduler/session.h"
#include "tests/util/heap_bytes.h"
#include "tests/util/session_util.h"

namespace flowstate {
namespace {

using test::NewSession;
using test::TryNewSession;

DevicePool* Pool() { return test::SharedTestPool(); }

template <typename T>
T RunScalar(Session* s, const std::vector<std::pair<std::string, Tensor>>& feeds,
            const std::string& fetch) {
  std::vector<Tensor> out;
  Status st = s->Run(feeds, {fetch}, {}, &out);
  EXPECT_TRUE(st.ok()) << st.ToString();
  if (!st.ok()) return T();
  return out[0].scalar<T>();
}

// sum = 1 + 2 + ... + n, as a while loop `name` over (i, sum).
StatusOr<std::vector<Output>> SumToN(const Scope& s, const std::string& name, const Output& n) {
  return ops::WhileLoop(
      s.WithOpName(name),
      [&](const Scope& c, const std::vector<Output>& v) -> StatusOr<Output> {
        return ops::LessEqual(c, v[0], n);
      },
      [&](const Scope& b, const std::vector<Output>& v) -> StatusOr<std::vector<Output>> {
        return std::vector<Output>{ops::Add(b, v[0], ops::Const(b, int64_t(1))),
                                   ops::Add(b, v[1], v[0])};
      },
      {ops::Const(s, int64_t(1)), ops::Const(s, int64_t(0))});
}

TEST(ControlFlow, CondTakesEachBranch) {
  Scope root;
  Output x = ops::Placeholder(root.WithOpName("x"), DataType::kFloat32, PartialShape({}));
  Output p = ops::Placeholder(root.WithOpName("p"), DataType::kBool, PartialShape({}));
  auto r = ops::Cond(
      root.WithOpName("c"), p,
      [&](const Scope& s) -> StatusOr<std::vector<Output>> {
        return std::vector<Output>{ops::Mul(s, x, ops::Const(s, 2.0f))};
      },
      [&](const Scope& s) -> StatusOr<std::vector<Output>> {
        return std::vector<Output>{ops::Sub(s, x, ops::Const(s, 1.0f))};
      });
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  for (int threads : {1, 2}) {
    auto s = NewSession(root.graph_def(), threads);
    EXPECT_EQ(RunScalar<float>(s.get(), {{"x", Tensor::Scalar(5.0f)}, {"p", Tensor::Scalar(true)}},
                               (*r)[0].name()),
              10.0f);
    EXPECT_EQ(RunScalar<float>(s.get(), {{"x", Tensor::Scalar(5.0f)}, {"p", Tensor::Scalar(false)}},
                               (*r)[0].name()),
              4.0f);
  }
}

// Raw ops: the untaken side of a Switch is dead and its nodes never run —
// a CheckNumerics of log(-1) there fails the step only when taken.
GraphDef RawCond(Scope* root) {
  Output x = ops::Placeholder(root->WithOpName("x"), DataType::kFloat32, PartialShape({}));
  Output p = ops::Placeholder(root->WithOpName("p"), DataType::kBool, PartialShape({}));
  auto sw = ops::Generic(root->WithOpName("sw"), "Switch", {x, p}, {}, 2);
  Output bad = ops::Generic(root->WithOpName("bad"), "CheckNumerics",
                            {ops::Log(root->WithOpName("log"), ops::Neg(*root, sw[0]))},
                            {{"message", AttrValue(std::string("log of a negative"))}})[0];
  Output good = ops::Square(root->WithOpName("good"), sw[1]);
  ops::Generic(root->WithOpName("merge"), "Merge", {bad, good}, {}, 2);
  return root->graph_def();
}

TEST(ControlFlow, DeadTensorsPropagateAndUntakenNodesNeverRun) {
  Scope root;
  GraphDef g = RawCond(&root);
  for (int threads : {1, 2}) {
    auto s = NewSession(g, threads);
    std::vector<Tensor> out;
    Status st = s->Run({{"x", Tensor::Scalar(3.0f)}, {"p", Tensor::Scalar(true)}},
                       {"merge", "merge:1"}, {}, &out);
    ASSERT_TRUE(st.ok()) << st.ToString();
    EXPECT_EQ(out[0].scalar<float>(), 9.0f);
    EXPECT_EQ(out[1].scalar<int32_t>(), 1);  // value_index: the true branch
    // Taken, the false branch fails at its CheckNumerics, which names itself.
    st = s->Run({{"x", Tensor::Scalar(3.0f)}, {"p", Tensor::Scalar(false)}}, {"merge"}, {}, &out);
    EXPECT_FALSE(st.ok());
    EXPECT_EQ(st.node(), "bad");
    // Fetching a dead tensor is an error naming it, not a hang.
    st = s->Run({{"x", Tensor::Scalar(3.0f)}, {"p", Tensor::Scalar(true)}}, {"log"}, {}, &out);
    EXPECT_EQ(st.code(), Code::kInvalidArgument) << st.ToString();
    EXPECT_EQ(st.node(), "log");
    EXPECT_NE(st.message().find("dead"), std::string::npos) << st.message();
  }
}

TEST(ControlFlow, WhileLoopSumsOneToN) {
  Scope root;
  Output n = ops::Placeholder(root.WithOpName("n"), DataType::kInt64, PartialShape({}));
  auto r = SumToN(root, "sum", n);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ((*r)[1].name(), "sum:1");
  for (int threads : {1, 2}) {
    auto s = NewSession(root.graph_def(), threads);
    for (int64_t v : {0, 1, 2, 10, 1000}) {
      EXPECT_EQ(RunScalar<int64_t>(s.get(), {{"n", Tensor::Scalar(v)}}, "sum:1"), v * (v + 1) / 2)
          << v;
      EXPECT_EQ(RunScalar<int64_t>(s.get(), {{"n", Tensor::Scalar(v)}}, "sum:0"),
                std::max<int64_t>(v, 0) + 1);
    }
  }
}

TEST(ControlFlow, NestedLoopsWhoseInnerTripCountDependsOnTheOuterVariable) {
  // total = sum over i in [0, n) of (sum over j in [0, i) of j) = sum of i(i-1)/2.
  Scope root;
  Output n = ops::Placeholder(root.WithOpName("n"), DataType::kInt64, PartialShape({}));
  auto outer = ops::WhileLoop(
      root.WithOpName("outer"),
      [&](const Scope& c, const std::vector<Output>& v) -> StatusOr<Output> {
        return ops::Less(c, v[0], n);
      },
      [&](const Scope& b, const std::vector<Output>& v) -> StatusOr<std::vector<Output>> {
        Output i = v[0];
        FS_ASSIGN_OR_RETURN(
            std::vector<Output> inner,
            ops::WhileLoop(
                b.WithOpName("inner"),
                [&](const Scope& c, const std::vector<Output>& w) -> StatusOr<Output> {
                  return ops::Less(c, w[0], i);  // the outer loop's variable, captured
                },
                [&](const Scope& bb, const std::vector<Output>& w) -> StatusOr<std::vector<Output>> {
                  return std::vector<Output>{ops::Add(bb, w[0], ops::Const(bb, int64_t(1))),
                                             ops::Add(bb, w[1], w[0])};
                },
                {ops::Const(b, int64_t(0)), ops::Const(b, int64_t(0))}));
        return std::vector<Output>{ops::Add(b, i, ops::Const(b, int64_t(1))),
                                   ops::Add(b, v[1], inner[1])};
      },
      {ops::Const(root, int64_t(0)), ops::Const(root, int64_t(0))});
  ASSERT_TRUE(outer.ok()) << outer.status().ToString();
  for (int threads : {1, 2}) {
    auto s = NewSession(root.graph_def(), threads);
    for (int64_t v : {0, 1, 5, 40}) {
      int64_t want = 0;
      for (int64_t i = 0; i < v; ++i) want += i * (i - 1) / 2;
      EXPECT_EQ(RunScalar<int64_t>(s.get(), {{"n", Tensor::Scalar(v)}}, "outer:1"), want) << v;
    }
  }
}

TEST(ControlFlow, TripCountDependsOnTheDataAndACondInsideTheBody) {
  // Halve x until it is at most 1, counting the steps; odd counts add 100
  // through a Cond in the body (a conditional inside a loop).
  Scope root;
  Output x = ops::Placeholder(root.WithOpName("x"), DataType::kFloat32, PartialShape({}));
  auto r = ops::WhileLoop(
      root.WithOpName("halve"),
      [&](const Scope& c, const std::vector<Output>& v) -> StatusOr<Output> {
        return ops::Greater(c, v[0], ops::Const(c, 1.0f));
      },
      [&](const Scope& b, const std::vector<Output>& v) -> StatusOr<std::vector<Output>> {
        Output steps = ops::Add(b, v[1], ops::Const(b, 1));
        Output odd = ops::Equal(b, ops::Sub(b, steps, ops::Mul(b, ops::Div(b, steps, ops::Const(b, 2)),
                                                                ops::Const(b, 2))),
                                ops::Const(b, 1));
        FS_ASSIGN_OR_RETURN(
            std::vector<Output> bonus,
            ops::Cond(
                b.WithOpName("odd"), odd,
                [&](const Scope& s) -> StatusOr<std::vector<Output>> {
                  return std::vector<Output>{ops::Add(s, v[2], ops::Const(s, 100))};
                },
                [&](const Scope& s) -> StatusOr<std::vector<Output>> {
                  return std::vector<Output>{v[2]};  // an outer tensor returned as is
                }));
        return std::vector<Output>{ops::Div(b, v[0], ops::Const(b, 2.0f)), steps, bonus[0]};
      },
      {x, ops::Const(root, 0), ops::Const(root, 0)});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  for (int threads : {1, 2}) {
    auto s = NewSession(root.graph_def(), threads);
    for (float v : {0.5f, 2.0f, 1000.0f, 1e6f}) {
      int want = v <= 1 ? 0 : int(std::ceil(std::log2(v)));
      std::vector<Tensor> out;
      ASSERT_TRUE(s->Run({{"x", Tensor::Scalar(v)}}, {"halve:1", "halve:2"}, {}, &out).ok());
      EXPECT_EQ(out[0].scalar<int32_t>(), want) << v;
      EXPECT_EQ(out[1].scalar<int32_t>(), 100 * ((want + 1) / 2)) << v;
    }
  }
}

TEST(ControlFlow, LoopInsideTheUntakenBranchNeverStarts) {
  // A loop on a branch: taken, it runs; untaken, its Enter is dead, the
  // loop never starts and its results are dead, which the Merge ignores.
  Scope root;
  Output n = ops::Placeholder(root.WithOpName("n"), DataType::kInt64, PartialShape({}));
  Output p = ops::Placeholder(root.WithOpName("p"), DataType::kBool, PartialShape({}));
  auto r = ops::Cond(
      root.WithOpName("c"), p,
      [&](const Scope& s) -> StatusOr<std::vector<Output>> {
        FS_ASSIGN_OR_RETURN(std::vector<Output> sum, SumToN(s, "loop", n));
        return std::vector<Output>{sum[1]};
      },
      [&](const Scope& s) -> StatusOr<std::vector<Output>> {
        return std::vector<Output>{ops::Const(s, int64_t(-1))};
      });
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  for (int threads : {1, 2}) {
    auto s = NewSession(root.graph_def(), threads);
    EXPECT_EQ(RunScalar<int64_t>(s.get(), {{"n", Tensor::Scalar(int64_t(100))}, {"p", Tensor::Scalar(true)}},
                                 "c"),
              5050);
    EXPECT_EQ(RunScalar<int64_t>(s.get(), {{"n", Tensor::Scalar(int64_t(100))}, {"p", Tensor::Scalar(false)}},
                                 "c"),
              -1);
  }
}

// _TestSlow: asynchronous identity that completes 2 ms later on a thread of
// its own, recording how many were in flight at once.
std::atomic<int> slow_in_flight{0};
std::atomic<int> slow_max_in_flight{0};

class TestSlowOp final : public AsyncOpKernel {
 public:
  using AsyncOpKernel::AsyncOpKernel;
  void ComputeAsync(OpKernelContext* ctx, DoneCallback done) override {
    const int now = ++slow_in_flight;
    int seen = slow_max_in_flight.load();
    while (now > seen && !slow_max_in_flight.compare_exchange_weak(seen, now)) {
    }
    std::thread([ctx, done = std::move(done)] {
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
      ctx->set_output(0, ctx->input(0));
      --slow_in_flight;
      done();
    }).detach();
  }
};

void RegisterSlowOp() {
  static bool done = [] {
    OpRegistry::Global()
        ->Register(OpDefBuilder("_TestSlow").Input("x: int64").Output("y: int64")
                       .SetShapeFn(shape_fns::UnchangedShape))
        .CheckOk();
    KernelRegistry::Global()->Register(KernelDef("_TestSlow"), MakeKernel<TestSlowOp>).CheckOk();
    return true;
  }();
  (void)done;
}

TEST(ControlFlow, ParallelIterationsBoundsTheIterationsInFlight) {
  // acc += slow(i): the counter races ahead, so each iteration's slow op
  // can run while later iterations start, up to parallel_iterations.
  RegisterSlowOp();
  for (int parallel : {1, 4}) {
    Scope root;
    auto r = ops::WhileLoop(
        root.WithOpName("loop"),
        [&](const Scope& c, const std::vector<Output>& v) -> StatusOr<Output> {
          return ops::Less(c, v[0], ops::Const(c, int64_t(24)));
        },
        [&](const Scope& b, const std::vector<Output>& v) -> StatusOr<std::vector<Output>> {
          Output slow = ops::Generic(b.WithOpName("slow"), "_TestSlow", {v[0]})[0];
          return std::vector<Output>{ops::Add(b, v[0], ops::Const(b, int64_t(1))),
                                     ops::Add(b, v[1], slow)};
        },
        {ops::Const(root, int64_t(0)), ops::Const(root, int64_t(0))}, parallel);
    ASSERT_TRUE(r.ok());
    auto s = NewSession(root.graph_def(), 2);
    slow_max_in_flight = 0;
    EXPECT_EQ(RunScalar<int64_t>(s.get(), {}, "loop:1"), 23 * 24 / 2);
    EXPECT_LE(slow_max_in_flight.load(), parallel);
    if (parallel > 1) {
      EXPECT_GE(slow_max_in_flight.load(), 2) << "iterations never overlapped";
    }
  }
}

// A million iterations; a tenth of that under ThreadSanitizer (which runs
// this loop ~50x slower), still 100 MB were one tensor per iteration kept.
#if defined(__SANITIZE_THREAD__)
constexpr int kLongLoop = 100000;
#else
constexpr int kLongLoop = 1000000;
#endif

TEST(ControlFlow, AMillionIterationsRunInBoundedMemory) {
  // Each iteration makes new tensors; a finished iteration's must be freed.
  // A loop variable of 256 floats: were one tensor per iteration kept, a
  // million iterations would hold 1 GB.
  Scope root;
  auto r = ops::WhileLoop(
      root.WithOpName("loop"),
      [&](const Scope& c, const std::vector<Output>& v) -> StatusOr<Output> {
        return ops::Less(c, v[0], ops::Const(c, kLongLoop));
      },
      [&](const Scope& b, const std::vector<Output>& v) -> StatusOr<std::vector<Output>> {
        return std::vector<Output>{ops::Add(b, v[0], ops::Const(b, 1)),
                                   ops::Add(b, v[1], ops::Const(b, 1.0f))};
      },
      {ops::Const(root, 0), ops::Fill(root, {256}, ops::Const(root, 0.0f))});
  ASSERT_TRUE(r.ok());
  auto s = NewSession(root.graph_def(), 2);
  Allocator* a = Pool()->devices()[0]->allocator();
  const int64_t before = a->Stats().bytes_in_use;
  // The executor's own state lives on the heap: its peak over the run is
  // sampled every millisecond (the heap's live bytes, not the process's
  // resident size, which under AddressSanitizer holds its quarantine of
  // freed blocks, up to 256 MB: it measured the sanitizer, not the
  // executor; tests/util/heap_bytes.h).
  const int64_t heap_before = test::HeapBytesInUse();
  std::atomic<int64_t> heap_peak{heap_before};
  std::atomic<bool> running{true};
  std::thread sampler([&] {
    while (running.load()) {
      const int64_t now = test::HeapBytesInUse();
      if (now > heap_peak.load()) heap_peak.store(now);
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  });
  std::vector<Tensor> out;
  const Status st = s->Run({}, {"loop:0", "loop:1"}, {}, &out);
  running.store(false);
  sampler.join();
  ASSERT_TRUE(st.ok()) << st.ToString();
  EXPECT_EQ(out[0].scalar<int32_t>(), kLongLoop);
  EXPECT_EQ(out[1].data<float>()[255], float(kLongLoop));
  const AllocatorStats stats = a->Stats();
  // Ten iterations in flight at most, a few tensors of 1 KiB each.
  EXPECT_LT(stats.peak_bytes_in_use - before, 256 << 10) << stats.peak_bytes_in_use;
  // And the executor's own state of an iteration (pending counts, input
  // slots: about a kilobyte) is freed with it: a million kept would be GBs,
  // at any moment of the run and after it.
  const int64_t peak_growth = heap_peak.load() - heap_before;
  const int64_t kept = test::HeapBytesInUse() - heap_before;
  std::printf("heap: %.1f MiB before, peak +%.2f MiB during the run, +%.2f MiB after\n",
              heap_before / 1048576.0, peak_growth / 1048576.0, kept / 1048576.0);
  EXPECT_LT(peak_growth, int64_t(64) << 20) << "the heap grew by " << (peak_growth >> 20) << " MiB";
  EXPECT_LT(kept, int64_t(16) << 20) << "the heap kept " << (kept >> 20) << " MiB";
}

// A graph of raw ops: `build` adds them to a scope holding a Const "c".
GraphDef RawGraph(const std::function<void(const Scope&)>& build) {
  Scope root;
  ops::Const(root.WithOpName("c"), 1.0f);
  build(root);
  return root.graph_def();
}

void ExpectRefused(const GraphDef& g, const std::string& node, const std::string& words) {
  auto s = TryNewSession(g, 1);
  ASSERT_FALSE(s.ok()) << "accepted a graph whose node '" << node << "' is malformed";
  EXPECT_EQ(s.status().code(), Code::kInvalidArgument) << s.status().ToString();
  EXPECT_EQ(s.status().node(), node) << s.status().ToString();
  EXPECT_NE(s.status().message().find(words), std::string::npos) << s.status().message();
}

TEST(ControlFlow, MalformedLoopsAreRefusedNamingTheNode) {
  const AttrMap enter{{"frame_name", AttrValue(std::string("f"))}};
  auto op = [](const Scope& s, const std::string& name, const std::string& type,
               const std::vector<Output>& inputs, const AttrMap& attrs = {}) {
    ops::Generic(s.WithOpName(name), type, inputs, attrs);
  };
  // A NextIteration with no loop around it.
  ExpectRefused(RawGraph([&](const Scope& s) {
                  op(s, "next", "NextIteration", {"c"});
                  op(s, "m", "Merge", {"c", "next"});
                }),
                "next", "outside any loop");
  // An Exit outside any frame.
  ExpectRefused(RawGraph([&](const Scope& s) { op(s, "exit", "Exit", {"c"}); }), "exit",
                "outside any loop");
  // A NextIteration feeding something other than a Merge.
  ExpectRefused(RawGraph([&](const Scope& s) {
                  op(s, "e", "Enter", {"c"}, enter);
                  op(s, "add", "Add", {"e", "next"});
                  op(s, "next", "NextIteration", {"add"});
                }),
                "next", "may only feed a Merge");
  // Inputs from two frames: a loop's value used outside it without an Exit.
  ExpectRefused(RawGraph([&](const Scope& s) {
                  op(s, "e", "Enter", {"c"}, enter);
                  op(s, "add", "Add", {"e", "c"});
                }),
                "add", "two frames");
  // A loop variable whose dtype changes in the body.
  Scope root;
  auto r = ops::WhileLoop(
      root.WithOpName("w"),
      [&](const Scope& c, const std::vector<Output>& v) -> StatusOr<Output> {
        return ops::Less(c, v[0], ops::Const(c, 3.0f));
      },
      [&](const Scope& b, const std::vector<Output>& v) -> StatusOr<std::vector<Output>> {
        return std::vector<Output>{ops::Cast(b, v[0], DataType::kInt32)};
      },
      {ops::Const(root, 0.0f)});
  ASSERT_TRUE(r.ok());
  ExpectRefused(root.graph_def(), "w/next_0", "dtype");
  // A body returning the wrong number of values fails in the builder.
  Scope root2;
  auto bad = ops::WhileLoop(
      root2.WithOpName("w"),
      [&](const Scope& c, const std::vector<Output>& v) -> StatusOr<Output> {
        return ops::Less(c, v[0], ops::Const(c, 3.0f));
      },
      [&](const Scope& b, const std::vector<Output>& v) -> StatusOr<std::vector<Output>> {
        return std::vector<Output>{v[0], v[0]};
      },
      {ops::Const(root2, 0.0f)});
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().node(), "w");
}

TEST(ControlFlow, CancellingAStepStopsALoopThatNeverEnds) {
  Scope root;
  auto r = ops::WhileLoop(
      root.WithOpName("forever"),
      [&](const Scope& c, const std::vector<Output>& v) -> StatusOr<Output> {
        return ops::GreaterEqual(c, v[0], ops::Const(c, 0));
      },
      [&](const Scope& b, const std::vector<Output>& v) -> StatusOr<std::vector<Output>> {
        return std::vector<Output>{ops::Maximum(b, ops::Add(b, v[0], ops::Const(b, 1)), ops::Const(b, 0))};
      },
      {ops::Const(root, 0)});
  ASSERT_TRUE(r.ok());
  scheduler::RegisterRuntimeKernels();  // the control-flow kernels (Session::Create does this)
  StatusOr<Graph> g = Graph::Create(root.graph_def());
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  Executor::Options eo;
  eo.device = Pool()->default_device();
  StatusOr<std::unique_ptr<Executor>> exec = Executor::Create(std::move(g).value(), eo);
  ASSERT_TRUE(exec.ok()) << exec.status().ToString();
  CancellationManager cancel;
  Executor::Args args;
  args.cancellation = &cancel;
  std::thread canceller([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    cancel.StartCancel();
  });
  Status s = (*exec)->Run(args);
  canceller.join();
  EXPECT_EQ(s.code(), Code::kCancelled) << s.ToString();
  EXPECT_EQ(s.node().rfind("forever/", 0), 0u) << s.ToString();
}

TEST(ControlFlow, AnErrorInsideALoopNamesTheNodeAndTheIteration) {
  // log(3 - i) is -Inf at i = 3; CheckNumerics fails there.
  Scope root;
  auto r = ops::WhileLoop(
      root.WithOpName("loop"),
      [&](const Scope& c, const std::vector<Output>& v) -> StatusOr<Output> {
        return ops::Less(c, v[0], ops::Const(c, 10.0f));
      },
      [&](const Scope& b, const std::vector<Output>& v) -> StatusOr<std::vector<Output>> {
        Output l = ops::Log(b, ops::Sub(b, ops::Const(b, 3.0f), v[0]));
        Output checked = ops::Generic(b.WithOpName("check"), "CheckNumerics", {l},
                                      {{"message", AttrValue(std::string("log"))}})[0];
        return std::vector<Output>{ops::Add(b, v[0], ops::Const(b, 1.0f)),
                                   ops::Add(b, v[1], checked)};
      },
      {ops::Const(root, 0.0f), ops::Const(root, 0.0f)}, 1);
  ASSERT_TRUE(r.ok());
  auto s = NewSession(root.graph_def(), 2);
  std::vector<Tensor> out;
  Status st = s->Run({}, {"loop:1"}, {}, &out);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.node(), "loop/body/check") << st.ToString();
  EXPECT_NE(st.message().find("iteration 3 of loop 'loop'"), std::string::npos) << st.message();
}

}  // namespace
}  // namespace flowstate

namespace flowstate {
namespace {

TEST(ControlFlow, ALoopWithABodyNodeOnAnotherDeviceRunsAsOnOne) {
  // The body's Mul on CPU:1 and the rest of the loop on CPU:0: the
  // partitioner gives CPU:1 a control-loop skeleton driven by the LoopCond
  // sent from CPU:0 (control_flow_devices_test.cc has more).
  DevicePoolOptions o;
  o.num_cpu_devices = 2;
  o.intra_op_threads = 1;
  auto pool = DevicePool::Create(o).value();
  for (bool split : {true, false}) {
    Scope root;
    Output x = ops::Const(root.WithOpName("x").WithDevice("/device:CPU:1"), 2.0f);
    auto r = ops::WhileLoop(
        root.WithOpName("loop").WithDevice("/device:CPU:0"),
        [&](const Scope& c, const std::vector<Output>& v) -> StatusOr<Output> {
          return ops::Less(c, v[0], ops::Const(c, 100.0f));
        },
        [&](const Scope& b, const std::vector<Output>& v) -> StatusOr<std::vector<Output>> {
          return std::vector<Output>{
              ops::Mul(b.WithOpName("mul").WithDevice(split ? "/device:CPU:1" : ""), v[0], x)};
        },
        {ops::Const(root.WithDevice("/device:CPU:0"), 1.0f)});
    ASSERT_TRUE(r.ok());
    SessionOptions so;
    so.devices = pool.get();
    auto s = Session::Create(root.graph_def(), so);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    std::vector<Tensor> out;
    Status st = (*s)->Run({}, {"loop"}, {}, &out);
    ASSERT_TRUE(st.ok()) << st.ToString();
    EXPECT_EQ(out[0].scalar<float>(), 128.0f);
  }
}

// StackPush keeps a value under its keys for the step; StackPop takes it
// back (once: a second pop of the key in the same step finds nothing), and
// nothing carries over to the next step.
TEST(ControlFlow, StackPushAndPopWithinAStep) {
  Scope root;
  Output v = ops::Placeholder(root.WithOpName("v"), DataType::kFloat32, PartialShape({2}));
  Output k0 = ops::Const(root, int32_t(3)), k1 = ops::Const(root, int32_t(7));
  AttrMap stack = {{"stack_name", AttrValue("s")}};
  root.WithOpName("push").AddNode("push", "StackPush", {k0.name(), k1.name(), "v"}, stack);
  AttrMap pop_attrs = stack;
  pop_attrs.emplace("elem_type", AttrValue(DataType::kFloat32));
  root.WithOpName("pop").AddNode("pop", "StackPop", {k0.name(), k1.name(), "^push"}, pop_attrs);
  root.WithOpName("pop_other").AddNode("pop_other", "StackPop", {k1.name(), k0.name(), "^push"},
                                       pop_attrs);
  root.WithOpName("pop_twice").AddNode("pop_twice", "StackPop", {k0.name(), k1.name(), "^pop"},
                                       pop_attrs);
  root.WithOpName("pop_alone").AddNode("pop_alone", "StackPop", {k0.name(), k1.name()}, pop_attrs);
  auto s = NewSession(root.graph_def(), 2);
  const Tensor value = Tensor::FromVector(std::vector<float>{1.5f, -2}, TensorShape({2}));
  std::vector<Tensor> out;
  ASSERT_TRUE(s->Run({{"v", value}}, {"pop"}, {}, &out).ok());
  EXPECT_EQ(out[0].data<float>()[0], 1.5f);
  EXPECT_EQ(out[0].data<float>()[1], -2.0f);
  // The keys are ordered: (7, 3) is another key.
  Status st = s->Run({{"v", value}}, {"pop_other"}, {}, &out);
  EXPECT_EQ(st.code(), Code::kNotFound) << st.ToString();
  EXPECT_EQ(st.node(), "pop_other") << st.ToString();
  st = s->Run({{"v", value}}, {"pop_twice"}, {}, &out);
  EXPECT_EQ(st.code(), Code::kNotFound) << st.ToString();
  // A value pushed in one step is gone in the next.
  ASSERT_TRUE(s->Run({{"v", value}}, {}, {"push"}, &out).ok());
  st = s->Run({}, {"pop_alone"}, {}, &out);
  EXPECT_EQ(st.code(), Code::kNotFound) << st.ToString();
}

}  // namespace
}  // namespace flowstate

// Control flow split over two CPU devices of one process: a conditional
// whose branches run on different devices (dead tensors cross partitions),
// loops whose body, condition or inner loop runs on the other device (the
// partitioner's control-loop skeleton, transfers keyed by frame and
// iteration), a long split loop in bounded memory, and the refusal, naming
// the node, of a loop that cannot be split. Each result is checked against
// the same graph on one device.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "devices/device_pool.h"
#include "graph/control_flow_builders.h"
#include "graph/op_builders.h"
#include "graph/scope.h"
#include "scheduler/placement.h"
#include "scheduler/runtime_kernels.h"
#include "scheduler/session.h"

namespace flowstate {
namespace {

using Vars = std::vector<Output>;
using Feeds = std::vector<std::pair<std::string, Tensor>>;

constexpr char kCpu0[] = "/device:CPU:0";
constexpr char kCpu1[] = "/device:CPU:1";

// Two CPU devices, no allocator cache (bytes_in_use is what tensors hold).
DevicePool* TwoDevices() {
  static DevicePool* pool = [] {
    DevicePoolOptions o;
    o.num_cpu_devices = 2;
    o.intra_op_threads = 1;
    o.cpu_cache_bytes = 0;
    DevicePool* p = DevicePool::Create(o).value().release();
    scheduler::RegisterRuntimeKernels();  // for PlaceGraph before any session
    return p;
  }();
  return pool;
}

std::unique_ptr<Session> NewSession(const GraphDef& g, int threads = 2) {
  SessionOptions o;
  o.devices = TwoDevices();
  o.inter_op_threads = threads;
  auto s = Session::Create(g, o);
  s.status().CheckOk();
  return std::move(s).value();
}

std::vector<Tensor> RunStep(Session* s, const Feeds& feeds, const std::vector<std::string>& fetches) {
  std::vector<Tensor> out;
  RunOptions ro;
  ro.timeout = std::chrono::seconds(60);  // a hang fails the test, not the suite
  Status st = s->Run(feeds, fetches, {}, &out, nullptr, ro);
  EXPECT_TRUE(st.ok()) << st.ToString();
  return out;
}

// How many partitions of `g` hold a node of each device (to check that the
// graph is split as the test means it to be).
int NumPartitions(const GraphDef& def) {
  auto g = Graph::Create(def);
  g.status().CheckOk();
  auto placement = PlaceGraph(*g, *TwoDevices(), TwoDevices()->devices()[0]);
  placement.status().CheckOk();
  auto parts = PartitionGraph(*g, *placement);
  parts.status().CheckOk();
  return int(parts->size());
}

// Cond(p, x * 3 on `true_device`, x - 1 on `false_device`) + 10 on CPU:0.
GraphDef CondGraph(const char* true_device, const char* false_device) {
  Scope root = Scope().WithDevice(kCpu0);
  Output x = ops::Placeholder(root.WithOpName("x"), DataType::kFloat32, PartialShape({2}));
  Output p = ops::Placeholder(root.WithOpName("p"), DataType::kBool, PartialShape({}));
  auto r = ops::Cond(
      root.WithOpName("c"), p,
      [&](const Scope& s) -> StatusOr<Vars> {
        Scope d = s.WithDevice(true_device);
        return Vars{ops::Mul(d.WithOpName("times3"), x, ops::Const(d, 3.0f))};
      },
      [&](const Scope& s) -> StatusOr<Vars> {
        Scope d = s.WithDevice(false_device);
        return Vars{ops::Sub(d.WithOpName("minus1"), x, ops::Const(d, 1.0f))};
      });
  r.status().CheckOk();
  ops::Add(root.WithOpName("out"), (*r)[0], ops::Const(root, 10.0f));
  return root.graph_def();
}

TEST(ControlFlowAcrossDevices, CondBranchesOnDifferentDevices) {
  const Tensor x = Tensor::FromVector(std::vector<float>{2.0f, -4.0f}, TensorShape({2}));
  for (auto [t, f] : {std::pair{kCpu1, kCpu0}, std::pair{kCpu0, kCpu1}, std::pair{kCpu1, kCpu1}}) {
    GraphDef g = CondGraph(t, f);
    EXPECT_EQ(NumPartitions(g), 2);
    auto s = NewSession(g);
    for (bool p : {true, false, true}) {
      auto out = RunStep(s.get(), {{"x", x}, {"p", Tensor::Scalar(p)}}, {"out"});
      ASSERT_EQ(out.size(), 1u);
      EXPECT_EQ(out[0].data<float>()[0], p ? 16.0f : 11.0f) << t << " " << f << " p=" << p;
      EXPECT_EQ(out[0].data<float>()[1], p ? -2.0f : 5.0f) << t << " " << f << " p=" << p;
    }
  }
}

TEST(ControlFlowAcrossDevices, FetchingTheUntakenBranchOnTheOtherDeviceIsAnError) {
  const GraphDef g = CondGraph(kCpu1, kCpu0);
  std::string times3;
  for (const NodeDef& n : g.nodes) {
    if (n.name.ends_with("times3")) times3 = n.name;
  }
  ASSERT_FALSE(times3.empty());
  auto s = NewSession(g);
  std::vector<Tensor> out;
  RunOptions ro;
  ro.timeout = std::chrono::seconds(60);
  Status st = s->Run({{"x", Tensor::FromVector(std::vector<float>{1, 2}, TensorShape({2}))},
                      {"p", Tensor::Scalar(false)}},
                     {times3}, {}, &out, nullptr, ro);
  EXPECT_EQ(st.code(), Code::kInvalidArgument) << st.ToString();
  EXPECT_NE(st.message().find("dead"), std::string::npos) << st.ToString();
  // And the session still runs the taken branch.
  auto ok = RunStep(s.get(), {{"x", Tensor::FromVector(std::vector<float>{1, 2}, TensorShape({2}))},
                          {"p", Tensor::Scalar(true)}},
                {times3});
  ASSERT_EQ(ok.size(), 1u);
  EXPECT_EQ(ok[0].data<float>()[1], 6.0f);
}

// v = 1; while (v < limit) v = v * x (the Mul on `body_device`; the
// comparison on `cond_device`), with parallel_iterations `parallel`.
GraphDef PowerLoop(const char* body_device, const char* cond_device, int parallel = 10) {
  Scope root = Scope().WithDevice(kCpu0);
  Output x = ops::Placeholder(root.WithOpName("x"), DataType::kFloat32, PartialShape({}));
  Output limit = ops::Placeholder(root.WithOpName("limit"), DataType::kFloat32, PartialShape({}));
  auto r = ops::WhileLoop(
      root.WithOpName("loop"),
      [&](const Scope& c, const Vars& v) -> StatusOr<Output> {
        return ops::Less(c.WithOpName("less").WithDevice(cond_device), v[1], limit);
      },
      [&](const Scope& b, const Vars& v) -> StatusOr<Vars> {
        return Vars{ops::Add(b, v[0], ops::Const(b, 1)),
                    ops::Mul(b.WithOpName("mul").WithDevice(body_device), v[1], x)};
      },
      {ops::Const(root, 0), ops::Const(root, 1.0f)}, parallel);
  r.status().CheckOk();
  return root.graph_def();
}

TEST(ControlFlowAcrossDevices, ALoopWithItsBodyOrConditionOnTheOtherDevice) {
  for (auto [body, cond] : {std::pair{kCpu1, kCpu0}, std::pair{kCpu0, kCpu1}, std::pair{kCpu1, kCpu1}}) {
    for (int parallel : {1, 10}) {
      GraphDef g = PowerLoop(body, cond, parallel);
      EXPECT_EQ(NumPartitions(g), 2);
      auto s = NewSession(g);
      // Several steps of one session, and trip counts 0, 1 and many.
      for (auto [x, limit, trips, value] : {std::tuple{2.0f, 100.0f, 7, 128.0f},
                                            std::tuple{3.0f, 0.5f, 0, 1.0f},
                                            std::tuple{5.0f, 2.0f, 1, 5.0f},
                                            std::tuple{1.001f, 2.0f, 694, 0.0f}}) {
        auto out = RunStep(s.get(), {{"x", Tensor::Scalar(x)}, {"limit", Tensor::Scalar(limit)}},
                       {"loop:0", "loop:1"});
        ASSERT_EQ(out.size(), 2u);
        EXPECT_EQ(out[0].scalar<int32_t>(), trips) << body << " " << cond << " x=" << x;
        if (value != 0.0f) {
          EXPECT_EQ(out[1].scalar<float>(), value);
        }
      }
    }
  }
}

// Concurrent steps of one session over a split loop do not mix their
// iterations (each step has its rendezvous; keys carry frame and iteration).
TEST(ControlFlowAcrossDevices, ConcurrentStepsOfASplitLoop) {
  auto s = NewSession(PowerLoop(kCpu1, kCpu1), 4);
  std::vector<std::thread> threads;
  std::atomic<int> wrong{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int k = 0; k < 20; ++k) {
        const float x = 2.0f + float(t);
        std::vector<Tensor> out;
        Status st = s->Run({{"x", Tensor::Scalar(x)}, {"limit", Tensor::Scalar(1000.0f)}},
                           {"loop:1"}, {}, &out);
        float want = 1.0f;
        while (want < 1000.0f) want *= x;
        if (!st.ok() || out[0].scalar<float>() != want) ++wrong;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(wrong.load(), 0);
}

// An outer loop of `outer` iterations whose body runs an inner loop of
// (outer iteration + 1) iterations; the inner body's Mul on `inner_device`,
// the outer body's Add on `outer_device`.
GraphDef NestedLoops(const char* inner_device, const char* outer_device) {
  Scope root = Scope().WithDevice(kCpu0);
  Output w = ops::Placeholder(root.WithOpName("w"), DataType::kFloat64, PartialShape({2}));
  auto r = ops::WhileLoop(
      root.WithOpName("outer"),
      [&](const Scope& s, const Vars& v) -> StatusOr<Output> {
        return ops::Less(s, v[0], ops::Const(s, int32_t(4)));
      },
      [&](const Scope& s, const Vars& v) -> StatusOr<Vars> {
        Output i = v[0];
        auto inner = ops::WhileLoop(
            s.WithOpName("inner"),
            [&](const Scope& c, const Vars& u) -> StatusOr<Output> {
              return ops::LessEqual(c, u[0], i);
            },
            [&](const Scope& c, const Vars& u) -> StatusOr<Vars> {
              Scope d = c.WithDevice(inner_device);
              return Vars{ops::Add(c, u[0], ops::Const(c, int32_t(1))),
                          ops::Mul(d.WithOpName("mul"), u[1], w)};
            },
            {ops::Const(s, int32_t(0)), v[1]});
        if (!inner.ok()) return inner.status();
        Scope d = s.WithDevice(outer_device);
        return Vars{ops::Add(s, v[0], ops::Const(s, int32_t(1))),
                    ops::Add(d.WithOpName("plus"), (*inner)[1], ops::Const(d, 0.5))};
      },
      {ops::Const(root, int32_t(0)), ops::Const(root, Tensor::FromVector(std::vector<double>{1.0, -2.0},
                                                                          TensorShape({2})))});
  r.status().CheckOk();
  return root.graph_def();
}

TEST(ControlFlowAcrossDevices, NestedLoopsSplitAtEitherLevel) {
  const Tensor w = Tensor::FromVector(std::vector<double>{1.5, 0.75}, TensorShape({2}));
  auto one = NewSession(NestedLoops(kCpu0, kCpu0));
  const std::vector<Tensor> want = RunStep(one.get(), {{"w", w}}, {"outer:1"});
  ASSERT_EQ(want.size(), 1u);
  for (auto [inner, outer] : {std::pair{kCpu1, kCpu0}, std::pair{kCpu0, kCpu1}, std::pair{kCpu1, kCpu1}}) {
    GraphDef g = NestedLoops(inner, outer);
    EXPECT_EQ(NumPartitions(g), 2);
    auto s = NewSession(g);
    for (int step = 0; step < 2; ++step) {
      auto got = RunStep(s.get(), {{"w", w}}, {"outer:1"});
      ASSERT_EQ(got.size(), 1u);
      for (int k = 0; k < 2; ++k) {
        EXPECT_EQ(got[0].data<double>()[k], want[0].data<double>()[k]) << inner << " " << outer;
      }
    }
  }
}

// A loop inside a conditional, its body on the other device: the untaken
// branch's loop never starts on either device.
TEST(ControlFlowAcrossDevices, ASplitLoopInsideAConditional) {
  Scope root = Scope().WithDevice(kCpu0);
  Output p = ops::Placeholder(root.WithOpName("p"), DataType::kBool, PartialShape({}));
  Output x = ops::Placeholder(root.WithOpName("x"), DataType::kFloat32, PartialShape({}));
  auto r = ops::Cond(
      root.WithOpName("c"), p,
      [&](const Scope& s) -> StatusOr<Vars> {
        auto loop = ops::WhileLoop(
            s.WithOpName("loop"),
            [&](const Scope& c, const Vars& v) -> StatusOr<Output> {
              return ops::Less(c, v[0], ops::Const(c, 5));
            },
            [&](const Scope& b, const Vars& v) -> StatusOr<Vars> {
              return Vars{ops::Add(b, v[0], ops::Const(b, 1)),
                          ops::Add(b.WithOpName("add").WithDevice(kCpu1), v[1], v[1])};
            },
            {ops::Const(s, 0), x});
        if (!loop.ok()) return loop.status();
        return Vars{(*loop)[1]};
      },
      [&](const Scope& s) -> StatusOr<Vars> { return Vars{ops::Neg(s, x)}; });
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  auto s = NewSession(root.graph_def());
  for (bool taken : {true, false, true}) {
    auto out = RunStep(s.get(), {{"p", Tensor::Scalar(taken)}, {"x", Tensor::Scalar(3.0f)}},
                   {(*r)[0].name()});
    ASSERT_EQ(out.size(), 1u);
    EXPECT_EQ(out[0].scalar<float>(), taken ? 96.0f : -3.0f);
  }
}

// A long split loop: every iteration crosses devices both ways, and a
// finished iteration's tensors and transfers are freed on both.
TEST(ControlFlowAcrossDevices, AHundredThousandSplitIterationsInBoundedMemory) {
#if defined(__SANITIZE_THREAD__)
  constexpr int kIterations = 10000;
#else
  constexpr int kIterations = 100000;
#endif
  Scope root = Scope().WithDevice(kCpu0);
  auto r = ops::WhileLoop(
      root.WithOpName("loop"),
      [&](const Scope& c, const Vars& v) -> StatusOr<Output> {
        return ops::Less(c, v[0], ops::Const(c, kIterations));
      },
      [&](const Scope& b, const Vars& v) -> StatusOr<Vars> {
        Scope d = b.WithDevice(kCpu1);
        return Vars{ops::Add(b, v[0], ops::Const(b, 1)),
                    ops::Add(d.WithOpName("add"), v[1], ops::Const(d, 1.0f))};
      },
      {ops::Const(root, 0), ops::Fill(root, {256}, ops::Const(root, 0.0f))});
  ASSERT_TRUE(r.ok());
  auto s = NewSession(root.graph_def());
  std::vector<int64_t> before;
  for (Device* d : TwoDevices()->devices()) before.push_back(d->allocator()->Stats().bytes_in_use);
  auto out = RunStep(s.get(), {}, {"loop:0", "loop:1"});
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].scalar<int32_t>(), kIterations);
  EXPECT_EQ(out[1].data<float>()[255], float(kIterations));
  for (size_t k = 0; k < before.size(); ++k) {
    const AllocatorStats stats = TwoDevices()->devices()[k]->allocator()->Stats();
    // Ten iterations in flight at most, a few tensors of 1 KiB each: one
    // kept per iteration would be 100 MB.
    EXPECT_LT(stats.peak_bytes_in_use - before[k], 256 << 10) << "device " << k;
  }
}

// A loop with two LoopConds has no single predicate to send to the other
// partition: refused when the session is made, naming the body node that
// reads across devices.
TEST(ControlFlowAcrossDevices, ALoopThatCannotBeSplitIsRefusedNamingTheNode) {
  Scope root = Scope().WithDevice(kCpu0);
  auto op = [&](const Scope& s, const std::string& name, const std::string& type, const Vars& in,
                AttrMap attrs = {}, int outputs = 1) {
    return ops::Generic(s.WithOpName(name), type, in, std::move(attrs), outputs);
  };
  Output start = ops::Const(root.WithOpName("start"), 0.0f);
  Output enter = op(root, "enter", "Enter", {start},
                    {{"frame_name", AttrValue(std::string("f"))}})[0];
  Output merge = op(root, "merge", "Merge", {enter, Output("next")}, {{"N", AttrValue(int64_t(2))}}, 2)[0];
  Output c1 = op(root, "cond1", "LoopCond", {ops::Less(root, merge, merge)})[0];
  op(root, "cond2", "LoopCond", {ops::LessEqual(root, merge, merge)});
  auto sw = op(root, "switch", "Switch", {merge, c1}, {}, 2);
  op(root, "exit", "Exit", {sw[0]});
  Output body = ops::Add(
      root.WithOpName("body").WithDevice(kCpu1).WithControlDependencies({"cond2"}), sw[1], sw[1]);
  op(root, "next", "NextIteration", {body});
  SessionOptions o;
  o.devices = TwoDevices();
  auto s = Session::Create(root.graph_def(), o);
  Status st = s.status();
  if (s.ok()) {
    std::vector<Tensor> out;
    st = (*s)->Run({}, {"exit"}, {}, &out);
  }
  EXPECT_EQ(st.code(), Code::kUnimplemented) << st.ToString();
  EXPECT_EQ(st.node(), "body") << st.ToString();
  EXPECT_NE(st.message().find("LoopCond"), std::string::npos) << st.ToString();
}

// A body node on the other device that reads only loop invariants (constant
// Enters): its partition has no _Recv inside the loop, yet it must run in
// every iteration, in step with the loop.
TEST(ControlFlowAcrossDevices, ABodyNodeOfLoopInvariantsOnlyRunsEveryIteration) {
  Scope root = Scope().WithDevice(kCpu0);
  Output x = ops::Placeholder(root.WithOpName("x"), DataType::kFloat32, PartialShape({}));
  auto r = ops::WhileLoop(
      root.WithOpName("loop"),
      [&](const Scope& c, const Vars& v) -> StatusOr<Output> {
        return ops::Less(c, v[0], ops::Const(c, 5));
      },
      [&](const Scope& b, const Vars& v) -> StatusOr<Vars> {
        Scope d = b.WithDevice(kCpu1);
        Output step = ops::Mul(d.WithOpName("step"), x, ops::Const(d, 2.0f));
        return Vars{ops::Add(b, v[0], ops::Const(b, 1)), ops::Add(b, v[1], step)};
      },
      {ops::Const(root, 0), ops::Const(root, 0.0f)});
  ASSERT_TRUE(r.ok());
  GraphDef g = root.graph_def();
  EXPECT_EQ(NumPartitions(g), 2);
  auto s = NewSession(g);
  auto out = RunStep(s.get(), {{"x", Tensor::Scalar(1.5f)}}, {"loop:1"});
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].scalar<float>(), 15.0f);
}

// A body node that reads the Enter of a loop variable directly (not its
// Merge) runs in the loop's first iteration only; a reader of it on another
// device would wait in every later iteration: refused, naming the reader.
TEST(ControlFlowAcrossDevices, AReaderOfAFirstIterationOnlyValueIsRefused) {
  Scope root = Scope().WithDevice(kCpu0);
  auto op = [&](const Scope& s, const std::string& name, const std::string& type, const Vars& in,
                AttrMap attrs = {}, int outputs = 1) {
    return ops::Generic(s.WithOpName(name), type, in, std::move(attrs), outputs);
  };
  const AttrMap frame{{"frame_name", AttrValue(std::string("f"))}};
  Output enter = op(root, "enter", "Enter", {ops::Const(root.WithOpName("start"), 0.0f)}, frame)[0];
  Output once = op(root, "once", "Enter", {ops::Const(root.WithOpName("other"), 1.0f)}, frame)[0];
  Output first = ops::Neg(root.WithOpName("first"), once);
  Output merge = op(root, "merge", "Merge", {enter, Output("next")}, {{"N", AttrValue(int64_t(2))}}, 2)[0];
  Output cond = op(root, "cond", "LoopCond", {ops::Less(root, merge, merge)})[0];
  auto sw = op(root, "switch", "Switch", {merge, cond}, {}, 2);
  op(root, "exit", "Exit", {sw[0]});
  Output body = ops::Add(root.WithOpName("reader").WithDevice(kCpu1), sw[1], first);
  op(root, "next", "NextIteration", {body});
  SessionOptions o;
  o.devices = TwoDevices();
  auto sess = Session::Create(root.graph_def(), o);
  ASSERT_TRUE(sess.ok()) << sess.status().ToString();
  std::vector<Tensor> out;
  Status st = (*sess)->Run({}, {"exit"}, {}, &out);
  EXPECT_EQ(st.code(), Code::kUnimplemented) << st.ToString();
  EXPECT_EQ(st.node(), "reader") << st.ToString();
  EXPECT_NE(st.message().find("first iteration only"), std::string::npos) << st.ToString();
}

// The loop's own Enters, NextIterations and Exits on the other device than
// its Merges: values that cross into the next iteration or into the loop
// are cut before the NextIteration or Enter (a copy of it runs beside the
// Merge), so that they belong to the iteration the Merge waits in.
TEST(ControlFlowAcrossDevices, EntersNextIterationsAndExitsOnTheOtherDevice) {
  for (const char* op : {"Enter", "NextIteration", "Exit"}) {
    GraphDef g = PowerLoop(kCpu0, kCpu0);
    int moved = 0;
    for (NodeDef& n : g.nodes) {
      if (n.op == op) {
        n.device = kCpu1;
        ++moved;
      }
    }
    ASSERT_GE(moved, 2) << op;
    EXPECT_EQ(NumPartitions(g), 2);
    auto s = NewSession(g);
    for (int step = 0; step < 2; ++step) {
      auto out = RunStep(s.get(), {{"x", Tensor::Scalar(2.0f)}, {"limit", Tensor::Scalar(100.0f)}},
                         {"loop:0", "loop:1"});
      ASSERT_EQ(out.size(), 2u) << op;
      EXPECT_EQ(out[0].scalar<int32_t>(), 7) << op;
      EXPECT_EQ(out[1].scalar<float>(), 128.0f) << op;
    }
  }
}

}  // namespace
}  // namespace flowstate

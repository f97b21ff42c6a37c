#include "scheduler/placement.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>

#include "graph/control_flow_builders.h"
#include "graph/op_builders.h"
#include "graph/scope.h"
#include "scheduler/runtime_kernels.h"
#include "scheduler/session.h"
#include "state/kernels.h"

namespace flowstate {
namespace {

DevicePool* TwoCpus() {
  static DevicePool* p = [] {
    DevicePoolOptions o;
    o.num_cpu_devices = 2;
    o.intra_op_threads = 1;
    return DevicePool::Create(o).value().release();
  }();
  return p;
}

StatusOr<std::vector<Device*>> Place(const Scope& root) {
  scheduler::RegisterRuntimeKernels();
  state::RegisterKernels();
  FS_ASSIGN_OR_RETURN(Graph g, Graph::Create(root.graph_def()));
  return PlaceGraph(g, *TwoCpus(), TwoCpus()->default_device());
}

int IndexOf(const Scope& root, const std::string& name) {
  const auto& nodes = root.graph_def().nodes;
  for (size_t i = 0; i < nodes.size(); ++i) {
    if (nodes[i].name == name) return int(i);
  }
  return -1;
}

TEST(Placement, DefaultsExplicitAndPartialSpecs) {
  Scope root;
  ops::Const(root.WithOpName("a"), 1.0f);
  ops::Const(root.WithOpName("b").WithDevice("/job:localhost/replica:0/task:0/device:CPU:1"), 1.0f);
  ops::Const(root.WithOpName("c").WithDevice("CPU:1"), 1.0f);
  ops::Const(root.WithOpName("d").WithDevice("/device:cpu:0"), 1.0f);
  ops::Const(root.WithOpName("e").WithDevice("cpu"), 1.0f);
  auto p = Place(root);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  Device* cpu0 = TwoCpus()->devices()[0];
  Device* cpu1 = TwoCpus()->devices()[1];
  EXPECT_EQ((*p)[IndexOf(root, "a")], cpu0);
  EXPECT_EQ((*p)[IndexOf(root, "b")], cpu1);
  EXPECT_EQ((*p)[IndexOf(root, "c")], cpu1);
  EXPECT_EQ((*p)[IndexOf(root, "d")], cpu0);
  EXPECT_EQ((*p)[IndexOf(root, "e")], cpu0);
}

TEST(Placement, OpsRunWhereTheirVariableLives) {
  Scope root;
  Output w = ops::Variable(root.WithOpName("w").WithDevice("CPU:1"), TensorShape({}), DataType::kFloat32);
  ops::Assign(root.WithOpName("init"), w, ops::Const(root.WithOpName("v"), 1.0f));
  auto p = Place(root);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_EQ((*p)[IndexOf(root, "init")], TwoCpus()->devices()[1]);
  EXPECT_EQ((*p)[IndexOf(root, "v")], TwoCpus()->devices()[0]);
}

TEST(Placement, Errors) {
  {
    Scope root;
    Output w = ops::Variable(root.WithOpName("w").WithDevice("CPU:0"), TensorShape({}), DataType::kFloat32);
    ops::Assign(root.WithOpName("init").WithDevice("CPU:1"), w, ops::Const(root, 1.0f));
    auto p = Place(root);
    ASSERT_FALSE(p.ok());
    EXPECT_EQ(p.status().code(), Code::kInvalidArgument);
    EXPECT_TRUE(p.status().node() == "init" || p.status().node() == "w") << p.status().ToString();
  }
  {
    Scope root;
    ops::Const(root.WithOpName("g").WithDevice("/device:GPU:0"), 1.0f);
    auto p = Place(root);
    ASSERT_FALSE(p.ok());
    EXPECT_EQ(p.status().node(), "g");
    EXPECT_NE(p.status().message().find("no device"), std::string::npos);
  }
  {
    Scope root;
    ops::Const(root.WithOpName("bad").WithDevice("/device:CPU:x"), 1.0f);
    auto p = Place(root);
    ASSERT_FALSE(p.ok());
    EXPECT_EQ(p.status().node(), "bad");
  }
}

TEST(Partition, CrossDeviceEdgesBecomeSendRecv) {
  Scope root;
  Output a = ops::Const(root.WithOpName("a").WithDevice("CPU:0"), 2.0f);
  std::string n = ops::NoOp(root.WithOpName("n").WithDevice("CPU:0"));
  ops::Identity(root.WithOpName("b").WithDevice("CPU:1").WithControlDependencies({n}), a);
  ops::Identity(root.WithOpName("c").WithDevice("CPU:1"), a);
  auto p = Place(root);
  ASSERT_TRUE(p.ok());
  Graph g = Graph::Create(root.graph_def()).value();
  auto parts = PartitionGraph(g, *p);
  ASSERT_TRUE(parts.ok()) << parts.status().ToString();
  ASSERT_EQ(parts->size(), 2u);
  int sends = 0, recvs = 0;
  for (const auto& part : *parts) {
    ASSERT_TRUE(Graph::Create(part.graph).ok());
    for (const NodeDef& d : part.graph.nodes) {
      sends += d.op == "_Send";
      recvs += d.op == "_Recv";
      EXPECT_EQ(d.device, part.device->name());
    }
  }
  // One pair for tensor a (shared by b and c), one for the control edge.
  EXPECT_EQ(sends, 2);
  EXPECT_EQ(recvs, 2);
}

// Output 1 of a node crosses devices: the _Send/_Recv pair's names stay
// valid node names (no ':'), and the step carries the right tensor.
TEST(Partition, ASecondOutputCrossesDevices) {
  Scope root;
  Output v = ops::Const(root.WithOpName("v").WithDevice("CPU:0"), Tensor::FromVector<float>({1, 2, 3, 4}));
  std::vector<Output> halves = ops::Split(root.WithOpName("split").WithDevice("CPU:0"), 0, v, 2);
  ops::Identity(root.WithOpName("second").WithDevice("CPU:1"), halves[1]);
  auto p = Place(root);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  Graph g = Graph::Create(root.graph_def()).value();
  auto parts = PartitionGraph(g, *p);
  ASSERT_TRUE(parts.ok()) << parts.status().ToString();
  for (const auto& part : *parts) {
    EXPECT_TRUE(Graph::Create(part.graph).ok());
    for (const NodeDef& d : part.graph.nodes) {
      EXPECT_EQ(d.name.find(':'), std::string::npos) << d.name;
    }
  }
  SessionOptions o;
  o.devices = TwoCpus();
  std::unique_ptr<Session> s = Session::Create(root.graph_def(), o).value();
  std::vector<Tensor> out;
  Status st = s->Run({}, {"second", "split:1"}, {}, &out);
  ASSERT_TRUE(st.ok()) << st.ToString();
  ASSERT_EQ(out[0].num_elements(), 2);
  EXPECT_EQ(out[0].flat<float>()[0], 3.0f);
  EXPECT_EQ(out[0].flat<float>()[1], 4.0f);
  EXPECT_EQ(out[1].flat<float>()[0], 3.0f);
}

std::unique_ptr<Session> NewSession(const Scope& root) {
  SessionOptions o;
  o.devices = TwoCpus();
  o.inter_op_threads = 2;
  return Session::Create(root.graph_def(), o).value();
}

TEST(Partition, TwoDevicesGiveTheSameResultAsOne) {
  for (bool split : {false, true}) {
    Scope root;
    Scope d0 = root.WithDevice("CPU:0"), d1 = root.WithDevice(split ? "CPU:1" : "CPU:0");
    Output w = ops::Variable(d0.WithOpName("w"), TensorShape({3}), DataType::kFloat32);
    Output init = ops::Assign(d0.WithOpName("init"), w, ops::Const(d0, std::vector<float>{1, 2, 3}));
    Output read = ops::Identity(d1.WithOpName("read").WithControlDependencies({init.node}), w);
    Output back = ops::Identity(d0.WithOpName("back"), read);
    auto s = NewSession(root);
    std::vector<Tensor> out;
    RunStats st;
    Status status = s->Run({}, {"back", "read"}, {}, &out, &st);
    ASSERT_TRUE(status.ok()) << status.ToString();
    EXPECT_EQ(st.num_partitions, split ? 2 : 1);
    EXPECT_TRUE(TensorsEqual(out[0], Tensor::FromVector<float>({1, 2, 3})));
    EXPECT_TRUE(TensorsEqual(out[1], Tensor::FromVector<float>({1, 2, 3})));
  }
}

TEST(Partition, AnErrorOnOneDeviceCancelsTheOthers) {
  Scope root;
  // `read` fails (uninitialized); CPU:1 waits on a _Recv that would never
  // be sent. The step must end with the first error, not hang.
  Output w = ops::Variable(root.WithOpName("w").WithDevice("CPU:0"), TensorShape({}), DataType::kFloat32);
  Output read = ops::Identity(root.WithOpName("read").WithDevice("CPU:0"), w);
  ops::Identity(root.WithOpName("far").WithDevice("CPU:1"), read);
  auto s = NewSession(root);
  std::vector<Tensor> out;
  for (int i = 0; i < 50; ++i) {
    Status st = s->Run({}, {"far"}, {}, &out);
    ASSERT_EQ(st.code(), Code::kFailedPrecondition) << st.ToString();
    EXPECT_NE(st.message().find("'w'"), std::string::npos) << st.ToString();
  }
}

// A loop whose body Mul is on CPU:1: CPU:1's partition gets the loop's
// control-loop skeleton (Enter, Merge, Switch on the LoopCond received from
// CPU:0, NextIteration in frame "loop"), every _Recv there that lies in the
// loop runs after the skeleton's Merge, every _Recv of the graph is marked
// _maybe_dead, and both partitions are valid graphs with control flow.
TEST(Partition, ASplitLoopGetsAControlLoopSkeleton) {
  Scope root = Scope().WithDevice("CPU:0");
  auto r = ops::WhileLoop(
      root.WithOpName("loop"),
      [&](const Scope& c, const std::vector<Output>& v) -> StatusOr<Output> {
        return ops::Less(c, v[0], ops::Const(c, 10.0f));
      },
      [&](const Scope& b, const std::vector<Output>& v) -> StatusOr<std::vector<Output>> {
        return std::vector<Output>{ops::Mul(b.WithOpName("mul").WithDevice("CPU:1"), v[0], v[0])};
      },
      {ops::Const(root, 2.0f)});
  ASSERT_TRUE(r.ok());
  auto p = Place(root);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  Graph g = Graph::Create(root.graph_def()).value();
  auto parts = PartitionGraph(g, *p);
  ASSERT_TRUE(parts.ok()) << parts.status().ToString();
  ASSERT_EQ(parts->size(), 2u);
  const GraphPartition& far = (*parts)[1];
  ASSERT_EQ(far.device->name(), TwoCpus()->devices()[1]->name());
  std::map<std::string, const NodeDef*> by_name;
  for (const NodeDef& d : far.graph.nodes) by_name[d.name] = &d;
  const std::string merge = "_cf/loop/1/merge";
  ASSERT_TRUE(by_name.count(merge)) << "no skeleton Merge on CPU:1";
  for (const char* op : {"enter", "switch", "next_iteration"}) {
    EXPECT_TRUE(by_name.count(std::string("_cf/loop/1/") + op)) << op;
  }
  EXPECT_EQ(by_name.at("_cf/loop/1/enter")->attrs.at("frame_name").s(), "loop");
  // The Switch's predicate is the received LoopCond.
  const NodeDef* sw = by_name.at("_cf/loop/1/switch");
  ASSERT_EQ(sw->inputs.size(), 2u);
  ASSERT_TRUE(by_name.count(sw->inputs[1])) << sw->inputs[1];
  const NodeDef* pred = by_name.at(sw->inputs[1]);
  EXPECT_EQ(pred->op, "_Recv");
  EXPECT_NE(pred->attrs.at("key").s().find("loop/loop_cond"), std::string::npos);
  int recvs = 0;
  for (const NodeDef& d : far.graph.nodes) {
    if (d.op != "_Recv") continue;
    ++recvs;
    EXPECT_TRUE(d.attrs.at("_maybe_dead").b()) << d.name;
    EXPECT_NE(std::find(d.inputs.begin(), d.inputs.end(), "^" + merge), d.inputs.end()) << d.name;
  }
  EXPECT_EQ(recvs, 2);  // the loop variable and the predicate
  for (const GraphPartition& part : *parts) {
    auto pg = Graph::Create(part.graph);
    ASSERT_TRUE(pg.ok()) << pg.status().ToString();
    EXPECT_NE(pg->control_flow(), nullptr);
  }
}

}  // namespace
}  // namespace flowstate

// Step traces (scheduler/step_trace.h): a traced Run records one event per
// executed op of its local partitions, nested in the step's wall time, with
// the op's device, thread and output bytes; an untraced Run records nothing.
#include "scheduler/step_trace.h"

#include <gtest/gtest.h>

#include <map>
#include <set>

#include "graph/op_builders.h"
#include "graph/scope.h"
#include "scheduler/session.h"

namespace flowstate {
namespace {

DevicePool* Pool() {
  static DevicePool* pool = [] {
    DevicePoolOptions o;
    o.num_cpu_devices = 2;
    o.intra_op_threads = 1;
    return DevicePool::Create(o).value().release();
  }();
  return pool;
}

std::unique_ptr<Session> NewSession(const Scope& root) {
  SessionOptions o;
  o.devices = Pool();
  o.inter_op_threads = 2;
  return Session::Create(root.graph_def(), o).value();
}

TEST(StepTrace, OneEventPerExecutedOpNestedInTheStep) {
  Scope root;
  Output x = ops::Placeholder(root.WithOpName("x"), DataType::kFloat32, PartialShape({-1, 64}));
  Output w = ops::Const(root.WithOpName("w"), Tensor::FromVector<float>(std::vector<float>(64 * 32, 0.5f),
                                                                       TensorShape({64, 32})));
  Output h = ops::MatMul(root.WithOpName("h"), x, w);
  Output r = ops::Neg(root.WithOpName("r"), h);
  // On the second CPU: the step has two partitions joined by Send/Recv.
  Output s = ops::Square(root.WithOpName("sq").WithDevice("/device:CPU:1"), r);
  ops::Const(root.WithOpName("unused"), 1.0f);  // pruned: never runs
  auto session = NewSession(root);
  Tensor feed = Tensor::FromVector<float>(std::vector<float>(128 * 64, 1.0f), TensorShape({128, 64}));

  std::vector<Tensor> out;
  ASSERT_TRUE(session->Run({{"x", feed}}, {"sq"}, {}, &out).ok());  // builds the executable
  StepTraceCollector trace;
  RunOptions options;
  options.trace = &trace;
  const int64_t before = trace.NowNs();
  ASSERT_TRUE(session->Run({{"x", feed}}, {"sq"}, {}, &out, nullptr, options).ok());
  trace.Finish();
  const int64_t wall = trace.wall_ns();
  ASSERT_GT(wall, 0);

  std::map<std::string, StepTraceCollector::Event> by_node;
  for (const StepTraceCollector::Event& e : trace.events()) {
    EXPECT_TRUE(by_node.emplace(e.node, e).second) << "one event per op: " << e.node;
    EXPECT_GE(e.start_ns, before) << e.node;
    EXPECT_GE(e.duration_ns, 0) << e.node;
    EXPECT_LE(e.start_ns + e.duration_ns, wall) << e.node << " ends after the step";
    EXPECT_GT(e.thread, 0) << e.node;
  }
  for (const char* node : {"w", "h", "r", "sq"}) EXPECT_EQ(by_node.count(node), 1u) << node;
  EXPECT_EQ(by_node.count("unused"), 0u) << "a pruned node does not run";
  // The runtime's own nodes (arguments, results, Send/Recv) are ops too.
  size_t runtime = 0;
  for (const auto& [node, e] : by_node) runtime += e.op.rfind("_", 0) == 0;
  EXPECT_GE(runtime, 3u) << "_Arg, _Retval and the Send/Recv pair are traced";
  EXPECT_EQ(by_node.at("h").op, "MatMul");
  EXPECT_EQ(by_node.at("h").output_bytes, 128 * 32 * 4);
  EXPECT_EQ(by_node.at("h").allocated_bytes, 128 * 32 * 4) << "MatMul allocates its output";
  EXPECT_GT(by_node.at("h").duration_ns, 0);
  std::vector<std::string> devices = trace.devices();
  ASSERT_EQ(devices.size(), 2u);
  const auto& h_event = by_node.at("h");
  const auto& sq_event = by_node.at("sq");
  EXPECT_NE(devices[h_event.device], devices[sq_event.device]);
  EXPECT_NE(devices[sq_event.device].find("CPU:1"), std::string::npos) << devices[sq_event.device];
}

TEST(StepTrace, UntracedRunsRecordNothingAndFinishCountsOnce) {
  Scope root;
  ops::Add(root.WithOpName("sum"), ops::Const(root.WithOpName("a"), 1.0f), ops::Const(root.WithOpName("b"), 2.0f));
  auto session = NewSession(root);
  StepTraceCollector trace;
  std::vector<Tensor> out;
  ASSERT_TRUE(session->Run({}, {"sum"}, {}, &out).ok());
  EXPECT_TRUE(trace.events().empty());
  EXPECT_EQ(trace.wall_ns(), 0) << "not finished";
  trace.Finish();
  const int64_t first = trace.wall_ns();
  EXPECT_GT(first, 0);
  trace.Finish();
  EXPECT_EQ(trace.wall_ns(), first);
}

}  // namespace
}  // namespace flowstate

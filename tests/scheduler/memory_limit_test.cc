// Device memory limits: an allocation over a device's
// limit names the node and the sizes, variables' buffers count on their
// device, and graphs are refused for a tensor over max_shape_bytes before
// anything is allocated.
#include <gtest/gtest.h>

#include "graph/op_builders.h"
#include "graph/scope.h"
#include "scheduler/session.h"

namespace flowstate {
namespace {

std::unique_ptr<DevicePool> PoolWithLimit(int64_t limit) {
  DevicePoolOptions o;
  o.intra_op_threads = 1;
  o.cpu_memory_limit_bytes = limit;
  o.cpu_cache_bytes = 0;  // every freed block goes back at once
  return DevicePool::Create(o).value();
}

std::unique_ptr<Session> NewSession(const Scope& root, DevicePool* pool, int64_t max_shape_bytes = 0) {
  SessionOptions o;
  o.devices = pool;
  o.inter_op_threads = 1;
  o.max_shape_bytes = max_shape_bytes;
  return Session::Create(root.graph_def(), o).value();
}

TEST(MemoryLimit, AnAllocationOverThePoolsLimitIsResourceExhaustedNamingNodeAndSizes) {
  auto pool = PoolWithLimit(int64_t(1) << 20);
  Scope root;
  Output n = ops::Placeholder(root.WithOpName("n"), DataType::kInt32, PartialShape({1}));
  ops::Fill(root.WithOpName("big"), n, ops::Const(root.WithOpName("one"), 1.0f));
  auto s = NewSession(root, pool.get());
  std::vector<Tensor> out;
  // Under the limit: fine.
  ASSERT_TRUE(s->Run({{"n", Tensor::FromVector<int32_t>({1000})}}, {"big"}, {}, &out).ok());
  out.clear();
  Status st = s->Run({{"n", Tensor::FromVector<int32_t>({1 << 20})}}, {"big"}, {}, &out);
  ASSERT_EQ(st.code(), Code::kResourceExhausted) << st.ToString();
  EXPECT_EQ(st.node(), "big");
  EXPECT_NE(st.message().find("node 'big'"), std::string::npos) << st.ToString();
  EXPECT_NE(st.message().find("4194304 bytes"), std::string::npos) << st.ToString();
  EXPECT_NE(st.message().find("memory limit 1048576 bytes"), std::string::npos) << st.ToString();
  EXPECT_NE(st.message().find(", 0 in use)"), std::string::npos) << st.ToString();
  AllocatorStats stats = pool->default_device()->allocator()->Stats();
  EXPECT_EQ(stats.bytes_in_use, 0) << "nothing is held after the failed step";
  EXPECT_EQ(stats.bytes_limit, int64_t(1) << 20);
}

TEST(MemoryLimit, VariablesHoldTheirBuffersOnTheirDevice) {
  auto pool = PoolWithLimit(int64_t(16) << 20);
  Scope root;
  Output v = ops::Variable(root.WithOpName("v"), PartialShape({1 << 20}), DataType::kFloat32);
  ops::Assign(root.WithOpName("assign"), v, ops::Fill(root.WithOpName("fill"), std::vector<int32_t>{1 << 20},
                                                      ops::Const(root.WithOpName("one"), 1.0f)));
  Output w = ops::Variable(root.WithOpName("w"), PartialShape({3 << 20}), DataType::kFloat32);
  ops::Assign(root.WithOpName("assign_w"), w,
              ops::Fill(root.WithOpName("fill_w"), std::vector<int32_t>{3 << 20},
                        ops::Const(root.WithOpName("two"), 2.0f)));
  {
    auto s = NewSession(root, pool.get());
    std::vector<Tensor> out;
    ASSERT_TRUE(s->Run({}, {}, {"assign"}, &out).ok());
    EXPECT_EQ(pool->default_device()->allocator()->Stats().bytes_in_use, int64_t(4) << 20)
        << "the variable's 4 MiB, not 0";
    // Fetching the Fill keeps its tensor referenced, so Assign copies it:
    // 12 MiB of Fill and 12 MiB more for w's copy, over the 16 MiB.
    Status st = s->Run({}, {"fill_w"}, {"assign_w"}, &out);
    ASSERT_EQ(st.code(), Code::kResourceExhausted) << st.ToString();
    EXPECT_EQ(st.node(), "assign_w") << st.ToString();
    EXPECT_NE(st.message().find("12582912 bytes"), std::string::npos) << st.ToString();
    EXPECT_EQ(pool->default_device()->allocator()->Stats().bytes_in_use, int64_t(4) << 20);
    // Not fetched, the Fill's output is Assign's alone and becomes w's
    // buffer (Variable::AssignTakingBuffer): 4 + 12 MiB fit.
    out.clear();
    st = s->Run({}, {}, {"assign_w"}, &out);
    ASSERT_TRUE(st.ok()) << st.ToString();
    EXPECT_EQ(pool->default_device()->allocator()->Stats().bytes_in_use, int64_t(16) << 20);
  }
  EXPECT_EQ(pool->default_device()->allocator()->Stats().bytes_in_use, 0) << "freed with the session";
}

TEST(MemoryLimit, MaxShapeBytesRefusesAGraphBeforeItRuns) {
  auto pool = PoolWithLimit(0);
  Scope root;
  ops::Fill(root.WithOpName("fill"), std::vector<int32_t>{1 << 29}, ops::Const(root.WithOpName("one"), 1.0f));
  SessionOptions o;
  o.devices = pool.get();
  o.max_shape_bytes = int64_t(1) << 30;
  StatusOr<std::unique_ptr<Session>> s = Session::Create(root.graph_def(), o);
  ASSERT_EQ(s.status().code(), Code::kInvalidArgument);
  EXPECT_EQ(s.status().node(), "fill");
  EXPECT_EQ(s.status().message(),
            "node 'fill' (Fill): its output 0 is float32[536870912], 2147483648 bytes, over the limit "
            "of 1073741824 bytes for one tensor (limits.max_shape_bytes)");
  // Extend checks the same; shapes only known when fed are not refused.
  Scope small;
  Output n = ops::Placeholder(small.WithOpName("n"), DataType::kInt32, PartialShape({1}));
  ops::Fill(small.WithOpName("dynamic"), n, ops::Const(small.WithOpName("one"), 1.0f));
  auto session = NewSession(small, pool.get(), int64_t(1) << 30);
  Scope more;
  ops::Variable(more.WithOpName("v"), PartialShape({1 << 16, 1 << 15}), DataType::kFloat64);
  Status st = session->Extend(more.graph_def());
  EXPECT_EQ(st.code(), Code::kInvalidArgument);
  EXPECT_EQ(st.node(), "v");
  EXPECT_NE(st.message().find("17179869184 bytes"), std::string::npos) << st.ToString();
  // Sizes that overflow int64 are refused too.
  Scope huge;
  ops::Variable(huge.WithOpName("h"), PartialShape({int64_t(1) << 40, int64_t(1) << 40}), DataType::kFloat32);
  StatusOr<Graph> g = Graph::Create(huge.graph_def());
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  Status over = CheckStaticTensorBytes(*g, 1024);
  EXPECT_EQ(over.code(), Code::kInvalidArgument);
  EXPECT_NE(over.message().find("more than 2^63 bytes"), std::string::npos) << over.ToString();
  EXPECT_TRUE(CheckStaticTensorBytes(*g, 0).ok()) << "0: no limit";
}

}  // namespace
}  // namespace flowstate

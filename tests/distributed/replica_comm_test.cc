// Replicas on the tasks of a cluster: a master session
// runs a _CreateReplicaComm node on each task, which makes that task's Gloo
// participant (meeting the others in a CollectiveStoreService) and puts it,
// as a ReplicaComm, into the task's worker session; the _AllReduce nodes on
// the tasks then reduce through it across the tasks' processes' sockets.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <future>
#include <memory>
#include <string>

#include "distributed/collective_store.h"
#include "distributed/gloo_collective.h"
#include "graph/op_builders.h"
#include "graph/scope.h"
#include "scheduler/replica_comm.h"
#include "tests/distributed/local_cluster.h"

namespace flowstate {
namespace {

using testing::LocalCluster;

std::string Task(int i) { return "/job:worker/replica:0/task:" + std::to_string(i) + "/device:CPU:0"; }

Status RunWithin(Session* s, double seconds, const std::vector<std::string>& fetches,
                 const std::vector<std::string>& targets, std::vector<Tensor>* out) {
  auto f = std::async(std::launch::async, [&] { return s->Run({}, fetches, targets, out); });
  if (f.wait_for(std::chrono::duration<double>(seconds)) != std::future_status::ready) {
    ADD_FAILURE() << "the step did not end within " << seconds << " s";
    std::abort();  // a hung step cannot be cleaned up: fail loudly
  }
  return f.get();
}

// Adds, for each of `n` tasks, a _CreateReplicaComm (rank i) and an
// _AllReduce of [i+1, 10(i+1)] weighted by count i+1.
void BuildGraph(Scope& root, int n, const std::string& store, const std::string& prefix,
                const std::string& kind = "gloo") {
  for (int i = 0; i < n; ++i) {
    Scope t = root.WithDevice(Task(i));
    t.WithOpName("create_" + std::to_string(i))
        .AddNode("_CreateReplicaComm", "_CreateReplicaComm", {},
                 {{"group", AttrValue(std::string("replicas"))},
                  {"kind", AttrValue(kind)},
                  {"store_address", AttrValue(store)},
                  {"prefix", AttrValue(prefix)},
                  {"rank", AttrValue(int64_t(i))},
                  {"size", AttrValue(int64_t(n))},
                  {"num_buckets", AttrValue(int64_t(1))},
                  {"timeout_ms", AttrValue(int64_t(10000))},
                  {"allreduce_timeout_ms", AttrValue(int64_t(10000))},
                  {"host", AttrValue(std::string("127.0.0.1"))}});
    Output x = ops::Const(t.WithOpName("x_" + std::to_string(i)),
                          Tensor::FromVector<float>({float(i + 1), float(10 * (i + 1))}));
    Output c = ops::Const(t.WithOpName("c_" + std::to_string(i)), double(i + 1));
    t.WithOpName("reduce_" + std::to_string(i))
        .AddNode("_AllReduce", "_AllReduce", {x.name(), c.name()},
                 {{"T", AttrValue(std::vector<DataType>{DataType::kFloat32})},
                  {"group", AttrValue(std::string("replicas"))},
                  {"bucket", AttrValue(int64_t(0))},
                  {"num_buckets", AttrValue(int64_t(1))}});
  }
}

TEST(ReplicaCommAcrossTasks, EveryTaskReducesThroughItsOwnGlooParticipant) {
  RegisterGlooCollectiveFactory();
  CollectiveStoreService store;
  StatusOr<int> port = store.Start("127.0.0.1", 0);
  ASSERT_TRUE(port.ok()) << port.status().ToString();
  const std::string address = "127.0.0.1:" + std::to_string(*port);
  constexpr int kN = 3;
  LocalCluster cluster(kN);
  Scope root;
  BuildGraph(root, kN, address, "job-1/m0");
  auto s = cluster.NewSession(root.graph_def());
  ASSERT_NE(s, nullptr);
  std::vector<std::string> creates, reduces;
  for (int i = 0; i < kN; ++i) {
    creates.push_back("create_" + std::to_string(i));
    reduces.push_back("reduce_" + std::to_string(i));
  }
  std::vector<Tensor> out;
  Status st = RunWithin(s.get(), 30, {}, creates, &out);
  ASSERT_TRUE(st.ok()) << st.ToString();
  // sum_i (i+1) * [i+1, 10(i+1)] / sum_i (i+1) = [14, 140] / 6, on every task.
  for (int step = 0; step < 3; ++step) {
    st = RunWithin(s.get(), 30, reduces, {}, &out);
    ASSERT_TRUE(st.ok()) << st.ToString();
    ASSERT_EQ(out.size(), size_t(kN));
    for (int i = 0; i < kN; ++i) {
      EXPECT_NEAR(out[i].data<float>()[0], 14.0f / 6, 1e-5) << "task " << i;
      EXPECT_NEAR(out[i].data<float>()[1], 140.0f / 6, 1e-4) << "task " << i;
    }
  }
  // A new membership (another prefix) replaces every task's group.
  Scope again;
  BuildGraph(again, kN, address, "job-1/m1");
  auto s2 = cluster.NewSession(again.graph_def());
  ASSERT_NE(s2, nullptr);
  ASSERT_TRUE(RunWithin(s2.get(), 30, {}, creates, &out).ok());
  st = RunWithin(s2.get(), 30, reduces, {}, &out);
  ASSERT_TRUE(st.ok()) << st.ToString();
  EXPECT_NEAR(out[kN - 1].data<float>()[0], 14.0f / 6, 1e-5);
}

TEST(ReplicaCommAcrossTasks, AnUnknownCollectiveKindFailsNamingIt) {
  LocalCluster cluster(2);
  Scope root;
  BuildGraph(root, 2, "127.0.0.1:1", "job-2/m0", "no-such-kind");
  auto s = cluster.NewSession(root.graph_def());
  ASSERT_NE(s, nullptr);
  std::vector<Tensor> out;
  Status st = RunWithin(s.get(), 30, {}, {"create_1"}, &out);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("no-such-kind"), std::string::npos) << st.ToString();
}

// A bucket of several tensors of one dtype travels as one flat tensor: each
// tensor 64-byte aligned in it, the gaps zero, the results views of it.
TEST(ReplicaCommFusedBucket, TensorsLieAlignedInOneFlatTensorAndComeBackAsViews) {
  using Fused = ReplicaComm::FusedBucket;
  EXPECT_EQ(Fused::For({{DataType::kFloat32, TensorShape({3})}}), nullptr) << "one tensor: as it is";
  EXPECT_EQ(Fused::For({{DataType::kFloat32, TensorShape({3})}, {DataType::kFloat64, TensorShape({2})}}),
            nullptr)
      << "two dtypes: as they are";
  std::unique_ptr<Fused> f = Fused::For({{DataType::kFloat32, TensorShape({})},
                                         {DataType::kFloat32, TensorShape({2, 3})},
                                         {DataType::kFloat32, TensorShape({17})}});
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->offsets, (std::vector<int64_t>{0, 16, 32}));
  EXPECT_EQ(f->elements, 64);
  Tensor flat(DataType::kFloat32, TensorShape({f->elements}));
  std::fill_n(flat.data<float>(), f->elements, 7.0f);
  f->ZeroGaps(&flat);
  EXPECT_EQ(flat.data<float>()[0], 7.0f);
  EXPECT_EQ(flat.data<float>()[1], 0.0f);
  EXPECT_EQ(flat.data<float>()[22], 0.0f);
  EXPECT_EQ(flat.data<float>()[48], 7.0f);
  EXPECT_EQ(flat.data<float>()[49], 0.0f);
  std::vector<Tensor> parts = f->Split(flat);
  ASSERT_EQ(parts.size(), 3u);
  EXPECT_EQ(parts[1].shape(), TensorShape({2, 3}));
  EXPECT_EQ(parts[2].num_elements(), 17);
  EXPECT_EQ(parts[1].data<float>(), flat.data<float>() + 16) << "a view, not a copy";
  EXPECT_EQ(reinterpret_cast<uintptr_t>(parts[2].raw_data()) % 64, 0u);
}

}  // namespace
}  // namespace flowstate

// A partitioned table over the tasks of a cluster (partition_devices naming
// tasks): the master's session places each part on its task, the routed
// lookup crosses tasks and equals the logical table's rows, and an SGD step
// updates each part on its own task with its own sparse update.
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "graph/op_builders.h"
#include "graph/partitioned_variables.h"
#include "graph/scope.h"
#include "graph/training_graph.h"
#include "tests/distributed/local_cluster.h"

namespace flowstate {
namespace {

using testing::LocalCluster;

TEST(PartitionedTableOnACluster, PartsOnTwoTasksLookUpAndTrain) {
  LocalCluster cluster(2);
  Scope root;
  root.WithOpName("T").AddNode(
      "T", "Variable", {},
      {{"shape", AttrValue(PartialShape({10, 3}))},
       {"dtype", AttrValue(DataType::kFloat32)},
       {"init", AttrValue("uniform")},
       {"partitions", AttrValue(int64_t{3})},
       {"partition_strategy", AttrValue("div")},
       {"partition_devices",
        AttrValue(std::vector<std::string>{"/job:worker/task:0", "/job:worker/task:1"})}});
  Output ids = ops::Placeholder(root.WithOpName("ids"), DataType::kInt32, PartialShape({-1}));
  Output emb = ops::Gather(root.WithOpName("emb"), Output("T"), ids);
  ops::Sum(root.WithOpName("loss"), ops::Square(root, emb), std::vector<int32_t>{});
  TrainingGraphSpec spec;
  spec.graph = root.graph_def();
  spec.loss = "loss";
  spec.optimizer.kind = OptimizerOptions::Kind::kSgd;
  spec.optimizer.learning_rate = 0.1;
  StatusOr<TrainingGraph> tg = BuildTrainingGraph(spec);
  ASSERT_TRUE(tg.ok()) << tg.status().ToString();
  std::map<std::string, std::string> device;
  for (const NodeDef& n : tg->graph.nodes) device[n.name] = n.device;
  EXPECT_EQ(device["T/part_0"], "/job:worker/task:0");
  EXPECT_EQ(device["T/part_1"], "/job:worker/task:1");
  EXPECT_EQ(device["T/part_2"], "/job:worker/task:0");

  Status created;
  auto s = cluster.NewSession(tg->graph, &created);
  ASSERT_NE(s, nullptr) << created.ToString();
  std::vector<Tensor> out;
  ASSERT_TRUE(s->Run({}, {}, {tg->init_op, tg->optimizer_init}, &out).ok());
  ASSERT_TRUE(s->Run({}, {"T"}, {}, &out).ok());
  const Tensor before = out[0];
  ASSERT_TRUE(before.shape() == TensorShape({10, 3}));

  // Rows 4 and 5 live in part 1 (div: rows 0-3, 4-6, 7-9), on task 1.
  const std::vector<int32_t> batch = {5, 0, 4, 4, 9};
  RunStats stats;
  Status st = s->Run({{"ids", Tensor::FromVector(batch)}}, {"emb"}, {}, &out, &stats);
  ASSERT_TRUE(st.ok()) << st.ToString();
  EXPECT_GE(stats.num_partitions, 2) << "the step ran on one task only";
  for (size_t i = 0; i < batch.size(); ++i) {
    for (int c = 0; c < 3; ++c) {
      EXPECT_EQ(out[0].data<float>()[i * 3 + c], before.data<float>()[batch[i] * 3 + c]) << i;
    }
  }

  // One SGD step on sum(emb^2): a row used k times becomes row * (1 - 0.2 k).
  st = s->Run({{"ids", Tensor::FromVector(batch)}}, {}, {tg->train_op}, &out);
  ASSERT_TRUE(st.ok()) << st.ToString();
  ASSERT_TRUE(s->Run({}, {"T"}, {}, &out).ok());
  std::map<int, int> uses;
  for (int32_t id : batch) ++uses[id];
  for (int r = 0; r < 10; ++r) {
    const float scale = 1.0f - 0.2f * float(uses[r]);
    for (int c = 0; c < 3; ++c) {
      EXPECT_NEAR(out[0].data<float>()[r * 3 + c], before.data<float>()[r * 3 + c] * scale, 1e-6)
          << "row " << r;
    }
  }
}

}  // namespace
}  // namespace flowstate

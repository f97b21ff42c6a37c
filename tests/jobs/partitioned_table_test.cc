// Jobs with partitioned embedding tables: a snapshot (what a checkpoint
// stores) holds each table and its optimizer slots as one logical tensor,
// so a job restores it with another partition count (or none) and goes on
// as the job that took it; the store's checkpoints hold the logical tables
// and start jobs of other partition counts (init_from); a recommender with
// partitioned tables learns; bad partition counts are refused naming the
// field.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>

#include "api/job_spec.h"
#include "devices/device_pool.h"
#include "checkpoints/store.h"
#include "jobs/job_manager.h"
#include "jobs/training_job.h"
#include "tests/jobs/job_store_fixture.h"
#include "tests/server/server_test_util.h"

namespace flowstate {
namespace {

// users x items clicks: click = (user % 3 == item % 3), a planted structure
// that embeddings learn and a linear model of the ids does not.
void WriteClicks(const std::filesystem::path& file, int rows, unsigned seed) {
  std::mt19937 rng(seed);
  std::ofstream f(file);
  f << "user,item,click\n";
  for (int i = 0; i < rows; ++i) {
    int u = int(rng() % 60), it = int(rng() % 40);
    f << u << "," << it << "," << ((u % 3 == it % 3) ? 1 : 0) << "\n";
  }
}

std::string Table(const std::string& name, int rows, int partitions, const std::string& strategy) {
  return R"({"name": ")" + name + R"(", "op": "Variable", "attrs": {"dtype": "float32", "shape": [)" +
         std::to_string(rows) + R"(, 8], "init": "normal", "init_stddev": 0.1, "partitions": )" +
         std::to_string(partitions) + R"(, "partition_strategy": ")" + strategy + R"("}})";
}

std::string JobJson(int user_parts, int item_parts, int epochs) {
  return R"({
    "graph": {"nodes": [
      {"name": "user", "op": "Placeholder", "attrs": {"dtype": "int32", "shape": [-1]}},
      {"name": "item", "op": "Placeholder", "attrs": {"dtype": "int32", "shape": [-1]}},
      {"name": "y", "op": "Placeholder", "attrs": {"dtype": "int32", "shape": [-1]}},
      )" + Table("user_emb/table", 60, user_parts, "div") + R"(,
      )" + Table("item_emb/table", 40, item_parts, "mod") + R"(,
      {"name": "user_emb", "op": "Gather", "inputs": ["user_emb/table", "user"]},
      {"name": "item_emb", "op": "Gather", "inputs": ["item_emb/table", "item"]},
      {"name": "x", "op": "Mul", "inputs": ["user_emb", "item_emb"]},
      {"name": "w", "op": "Variable", "attrs": {"dtype": "float32", "shape": [8, 2], "init": "glorot_uniform"}},
      {"name": "logits", "op": "MatMul", "inputs": ["x", "w"]},
      {"name": "xent", "op": "SparseSoftmaxCrossEntropyWithLogits", "inputs": ["logits", "y"]},
      {"name": "all_axes", "op": "Const", "attrs": {"dtype": "int32", "value": []}},
      {"name": "loss", "op": "Mean", "inputs": ["xent", "all_axes"]},
      {"name": "class_axis", "op": "Const", "attrs": {"dtype": "int32", "value": 1}},
      {"name": "predicted", "op": "ArgMax", "inputs": ["logits", "class_axis"], "attrs": {"output_type": "int32"}},
      {"name": "correct", "op": "Equal", "inputs": ["predicted", "y"]},
      {"name": "correct_float", "op": "Cast", "inputs": ["correct"], "attrs": {"DstT": "float32"}},
      {"name": "accuracy", "op": "Mean", "inputs": ["correct_float", "all_axes"]}
    ]},
    "loss": "loss",
    "optimizer": {"type": "adam", "learning_rate": 0.05},
    "input": {"format": "csv",
              "files": {"user": "clicks.csv", "item": "clicks.csv", "y": "clicks.csv"},
              "columns": {"user": {"columns": ["user"], "dtype": "int32"},
                          "item": {"columns": ["item"], "dtype": "int32"},
                          "y": {"columns": ["click"], "dtype": "int32"}},
              "header": true, "batch_size": 64, "shuffle": true, "epochs": )" +
         std::to_string(epochs) + R"(},
    "eval": {"files": {"user": "clicks.csv", "item": "clicks.csv", "y": "clicks.csv"},
             "metrics": ["accuracy"], "every_epochs": 1000, "batch_size": 500},
    "seed": 7
  })";
}

class PartitionedTableJob : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = server_test::FreshTestDir("flowstate_partitioned");
    WriteClicks(dir_ / "clicks.csv", 3000, 11);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::unique_ptr<TrainingJob> Make(int user_parts, int item_parts, int epochs = 2) {
    StatusOr<JobSpec> spec = ParseJobSpec(JobJson(user_parts, item_parts, epochs));
    EXPECT_TRUE(spec.ok()) << spec.status().ToString();
    if (!spec.ok()) return nullptr;
    TrainingJobOptions o;
    o.data_root = dir_.string();
    o.devices = server_test::TestPool(2);
    StatusOr<std::unique_ptr<TrainingJob>> j = TrainingJob::Create(*spec, o);
    EXPECT_TRUE(j.ok()) << j.status().ToString();
    if (!j.ok()) return nullptr;
    Status s = (*j)->Start();
    EXPECT_TRUE(s.ok()) << s.ToString();
    return s.ok() ? std::move(j).value() : nullptr;
  }

  std::filesystem::path dir_;
};

std::map<std::string, Tensor> ByName(const std::vector<std::pair<std::string, Tensor>>& v) {
  std::map<std::string, Tensor> m;
  for (const auto& [n, t] : v) m.emplace(n, t);
  return m;
}

void ExpectClose(const std::map<std::string, Tensor>& a, const std::map<std::string, Tensor>& b,
                 double tol, const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  for (const auto& [name, t] : a) {
    auto it = b.find(name);
    ASSERT_NE(it, b.end()) << what << ": no " << name;
    ASSERT_TRUE(t.shape() == it->second.shape()) << what << " " << name;
    ASSERT_EQ(t.dtype(), it->second.dtype()) << what << " " << name;
    if (t.dtype() != DataType::kFloat32) continue;
    for (int64_t k = 0; k < t.num_elements(); ++k) {
      ASSERT_NEAR(t.data<float>()[k], it->second.data<float>()[k], tol)
          << what << " " << name << "[" << k << "]";
    }
  }
}

TEST_F(PartitionedTableJob, SnapshotsHoldLogicalTablesThatRestoreWithAnotherPartitionCount) {
  for (auto [from, to] : std::vector<std::pair<int, int>>{{3, 2}, {3, 1}, {1, 3}, {2, 3}}) {
    const std::string what = std::to_string(from) + " -> " + std::to_string(to);
    auto a = Make(from, from);
    ASSERT_NE(a, nullptr);
    for (int k = 0; k < 5; ++k) ASSERT_TRUE(a->Step().ok()) << what;
    StatusOr<JobSnapshot> sa = a->Snapshot();
    ASSERT_TRUE(sa.ok()) << sa.status().ToString();
    std::map<std::string, Tensor> va = ByName(sa->variables);
    for (const auto& [name, t] : va) {
      EXPECT_EQ(name.find("/part_"), std::string::npos) << what << ": " << name;
    }
    ASSERT_TRUE(va.count("user_emb/table") && va.count("item_emb/table")) << what;
    EXPECT_TRUE(va.at("user_emb/table").shape() == TensorShape({60, 8}));
    EXPECT_TRUE(va.count("optimizer/item_emb/table/adam_m")) << what;
    EXPECT_TRUE(va.count("optimizer/user_emb/table/adam_v")) << what;

    auto b = Make(to, to);
    ASSERT_NE(b, nullptr);
    Status st = b->Restore(*sa);
    ASSERT_TRUE(st.ok()) << what << ": " << st.ToString();
    StatusOr<JobSnapshot> sb = b->Snapshot();
    ASSERT_TRUE(sb.ok());
    ExpectClose(ByName(sb->variables), va, 0, what + " restored");
    // Both go on alike: the same data position, the same update.
    for (int k = 0; k < 3; ++k) {
      ASSERT_TRUE(a->Step().ok());
      ASSERT_TRUE(b->Step().ok());
    }
    ExpectClose(ByName(b->ModelValues().value()), ByName(a->ModelValues().value()), 1e-5,
                what + " after 3 more steps");
  }
}

TEST_F(PartitionedTableJob, ARecommenderWithPartitionedTablesLearns) {
  auto j = Make(3, 2, 6);
  ASSERT_NE(j, nullptr);
  double first = 0, last = 0;
  int steps = 0;
  for (;;) {
    StatusOr<StepResult> r = j->Step();
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    if (steps++ == 0) first = r->loss;
    last = r->loss;
    if (r->done) break;
  }
  StatusOr<std::map<std::string, double>> m = j->Evaluate();
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_GT(m->at("accuracy"), 0.9) << "loss " << first << " -> " << last;
  // Predictions read the logical tables: the variable by its name.
  std::vector<Tensor> out;
  Status st = j->Predict({{"item", Tensor::FromVector<int32_t>({0, 39})}},
                         {"item_emb", "item_emb/table"}, &out);
  ASSERT_TRUE(st.ok()) << st.ToString();
  EXPECT_TRUE(out[1].shape() == TensorShape({40, 8}));
  for (int c = 0; c < 8; ++c) {
    EXPECT_EQ(out[0].data<float>()[c], out[1].data<float>()[c]);
    EXPECT_EQ(out[0].data<float>()[8 + c], out[1].data<float>()[39 * 8 + c]);
  }
}

// A job whose table's parts are placed on CPU:0 and CPU:1 by
// partition_devices runs on both (what admission counts), not only on its
// default device.
TEST_F(PartitionedTableJob, TheDevicesOfThePartsAreTheJobsDevices) {
  std::string json = JobJson(2, 1, 1);
  const std::string strategy = R"("partition_strategy": "div")";
  json.replace(json.find(strategy), strategy.size(),
               strategy + R"(, "partition_devices": ["CPU:0", "CPU:1"])");
  StatusOr<JobSpec> spec = ParseJobSpec(json);
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  DevicePoolOptions po;
  po.num_cpu_devices = 2;
  std::unique_ptr<DevicePool> pool = DevicePool::Create(po).value();
  TrainingJobOptions o;
  o.devices = pool.get();
  o.data_root = dir_.string();
  StatusOr<std::unique_ptr<TrainingJob>> j = TrainingJob::Create(*spec, o);
  ASSERT_TRUE(j.ok()) << j.status().ToString();
  std::vector<std::string> devices = (*j)->DeviceNames();
  ASSERT_EQ(devices.size(), 2u);
  EXPECT_NE(devices[0].find("CPU:0"), std::string::npos) << devices[0];
  EXPECT_NE(devices[1].find("CPU:1"), std::string::npos) << devices[1];
}

TEST(PartitionedTableSpec, BadPartitionCountsNameTheField) {
  for (auto [parts, want] : std::vector<std::pair<std::string, std::string>>{
           {"41", "graph.nodes[4].attrs.partitions: 41 partitions for a table of 40 rows"},
           {"0", "graph.nodes[4].attrs.partitions: must be >= 1, got 0"},
           {"-3", "graph.nodes[4].attrs.partitions: must be >= 1, got -3"}}) {
    std::string json = JobJson(1, 1, 1);
    const std::string item = Table("item_emb/table", 40, 1, "mod");
    json.replace(json.find(item), item.size(),
                 R"({"name": "item_emb/table", "op": "Variable", "attrs": {"dtype": "float32", "shape": [40, 8], "partitions": )" +
                     parts + "}}");
    StatusOr<JobSpec> spec = ParseJobSpec(json);
    ASSERT_FALSE(spec.ok()) << parts;
    EXPECT_EQ(spec.status().code(), Code::kInvalidArgument);
    EXPECT_NE(spec.status().message().find(want), std::string::npos) << spec.status().ToString();
    EXPECT_EQ(spec.status().node(), "item_emb/table");
  }
  std::string json = JobJson(1, 1, 1);
  const std::string item = Table("item_emb/table", 40, 1, "mod");
  json.replace(json.find(item), item.size(),
               R"({"name": "item_emb/table", "op": "Variable", "attrs": {"dtype": "float32", "shape": [-1, 8], "partitions": 2}})");
  StatusOr<JobSpec> spec = ParseJobSpec(json);
  ASSERT_FALSE(spec.ok());
  EXPECT_NE(spec.status().message().find("graph.nodes[4].attrs.partitions: 2 partitions need a "
                                         "variable whose first dimension (its rows) is known"),
            std::string::npos)
      << spec.status().ToString();
}

class PartitionedTableStore : public server_test::JobStoreFixture {
 protected:
  PartitionedTableStore() : JobStoreFixture("flowstate_partitioned_store") {}
  void SetUp() override {
    JobStoreFixture::SetUp();
    WriteClicks(dir_ / "data" / "clicks.csv", 1000, 12);
    StatusOr<std::unique_ptr<checkpoints::Store>> s =
        checkpoints::Store::Open((dir_ / "db").string(), {});
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    store_ = std::move(s).value();
    JobManagerOptions o;
    o.devices = server_test::TestPool(1);
    o.data_root = (dir_ / "data").string();
    o.store = store_.get();
    managers_.push_back(std::make_unique<JobManager>(o));
  }
  JobManager* m() { return managers_.back().get(); }
};

std::string WithInitFrom(std::string json, const std::string& job, int64_t step) {
  json.replace(json.find("\"seed\""), 0,
               R"("init_from": {"job": ")" + job + R"(", "step": )" + std::to_string(step) + "}, ");
  return json;
}

TEST_F(PartitionedTableStore, CheckpointsHoldLogicalTablesThatStartOtherPartitionCounts) {
  JobInfo src = m()->Submit(JobJson(3, 3, 1)).value();
  ASSERT_EQ(WaitFor(m(), src.id, [](const JobInfo& j) { return IsTerminal(j.state); }).state,
            JobState::kSucceeded);
  StatusOr<CheckpointRequestResult> c = m()->Checkpoint(src.id);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  StatusOr<checkpoints::Snapshot> snap = store_->ReadCheckpoint(src.id, c->step);
  ASSERT_TRUE(snap.ok()) << snap.status().ToString();
  std::map<std::string, Tensor> stored;
  for (const checkpoints::NamedTensor& t : snap->tensors) {
    EXPECT_EQ(t.name.find("/part_"), std::string::npos) << t.name;
    stored.emplace(t.name, t.value);
  }
  ASSERT_TRUE(stored.count("item_emb/table"));
  ASSERT_TRUE(stored.count("optimizer/user_emb/table/adam_m"));
  EXPECT_TRUE(stored.at("user_emb/table").shape() == TensorShape({60, 8}));
  // The stored table is the one the job predicts with, row for row.
  std::vector<Tensor> out;
  ASSERT_TRUE(m()->Predict(src.id, {}, {"item_emb/table"}, &out).ok());
  ExpectClose({{"t", out[0]}}, {{"t", stored.at("item_emb/table")}}, 0, "stored table");

  for (auto [users, items] : std::vector<std::pair<int, int>>{{2, 2}, {1, 1}, {1, 4}}) {
    StatusOr<JobInfo> j = m()->Submit(WithInitFrom(JobJson(users, items, 1), src.id, c->step));
    ASSERT_TRUE(j.ok()) << j.status().ToString();
    JobInfo done = WaitFor(m(), j->id, [](const JobInfo& j) { return IsTerminal(j.state); });
    EXPECT_EQ(done.state, JobState::kSucceeded) << users << "/" << items << ": " << done.error;
  }
  // A table of another shape does not fit: refused naming it.
  std::string other = WithInitFrom(JobJson(2, 2, 1), src.id, c->step);
  other.replace(other.find("[40, 8]"), 7, "[41, 8]");
  StatusOr<JobInfo> bad = m()->Submit(other);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("item_emb/table"), std::string::npos)
      << bad.status().ToString();
}

}  // namespace
}  // namespace flowstate

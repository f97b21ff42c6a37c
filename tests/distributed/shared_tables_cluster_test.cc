// Replicas on the tasks of a cluster sharing one copy of a partitioned table
// ("partitioned_tables": "shared", graph/shared_tables.h): part p and its
// Adam slots live on replica p % replicas only, lookups are answered by the
// holder, and the holder applies the gathered gradient of every replica
// once per step. It trains exactly as the replicated tables do (the same
// rows and the same sums, bit for bit), checkpoints the logical table
// (restorable replicated, or shared among another number of replicas), and
// evaluates on this task with the parts copied from their holders.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "checkpoints/store.h"
#include "distributed/collective_store.h"
#include "distributed/gloo_collective.h"
#include "jobs/job_manager.h"
#include "jobs/training_job.h"
#include "tests/distributed/local_cluster.h"
#include "tests/distributed/replica_job_options.h"
#include "tests/server/server_test_util.h"

namespace flowstate {
namespace {

using testing::LocalCluster;

std::string Task(int i) { return "/job:worker/replica:0/task:" + std::to_string(i) + "/device:CPU:0"; }

std::string OnTasks(int n) {
  std::string list;
  for (int t = 0; t < n; ++t) list += std::string(list.empty() ? "" : ", ") + "\"" + Task(t) + "\"";
  return R"(, "devices": [)" + list + "]";
}

// The bytes of a tensor, for exact comparisons.
std::string Bytes(const Tensor& t) {
  return std::string(static_cast<const char*>(t.raw_data()), t.TotalBytes());
}

class SharedTables : public ::testing::Test {
 protected:
  void SetUp() override {
    RegisterGlooCollectiveFactory();
    dir_ = server_test::FreshTestDir("flowstate_shared_tables");
    // 90 rows of (id, target): id in [0, 30), the target a function of it;
    // batches of 8, so the epoch's last step leaves a replica without a
    // batch (it looks up and answers with 0 examples).
    testing::WriteIdsCsv(dir_);
    StatusOr<int> port = store_.Start("127.0.0.1", 0);
    ASSERT_TRUE(port.ok()) << port.status().ToString();
    store_address_ = "127.0.0.1:" + std::to_string(*port);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  // A table of 30 rows in 3 parts (by `strategy`) looked up by the ids, a
  // dense layer on top; `extra` goes into the job object.
  static std::string Job(int replicas, const std::string& extra, const std::string& strategy = "mod",
                         const std::string& table_reader = "") {
    return R"({
      "graph": )" + testing::EmbeddingGraphJson(strategy, table_reader) + R"(,
      "loss": "loss",
      "optimizer": {"type": "adam", "learning_rate": 0.05},
      "input": )" + testing::IdsInputJson(3, true) + R"(,
      "eval": {"files": {"ids": "ids.csv", "y": "ids.csv"}, "metrics": ["loss"], "batch_size": 16},
      "replicas": )" + std::to_string(replicas) + extra + R"(,
      "check_replicas_every": 4,
      "seed": 11
    })";
  }

  TrainingJobOptions Across(LocalCluster& cluster, const std::string& prefix) {
    return testing::ReplicasAcross(cluster, store_address_, prefix, dir_.string());
  }

  StatusOr<std::unique_ptr<TrainingJob>> Make(const std::string& json, TrainingJobOptions o) {
    StatusOr<JobSpec> spec = ParseJobSpec(json);
    if (!spec.ok()) return spec.status();
    FS_ASSIGN_OR_RETURN(std::unique_ptr<TrainingJob> j, TrainingJob::Create(*spec, o));
    FS_RETURN_IF_ERROR(j->Start());
    return j;
  }

  std::filesystem::path dir_;
  CollectiveStoreService store_;
  std::string store_address_;
};

// Runs `job` to its end: the losses of its steps.
std::vector<double> Train(TrainingJob* job) {
  std::vector<double> losses;
  for (;;) {
    StatusOr<StepResult> r = job->Step();
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    if (!r.ok()) break;
    losses.push_back(r->loss);
    if (r->done || losses.size() > 1000) break;
  }
  return losses;
}

TEST_F(SharedTables, EachPartLivesOnOneReplicaAndTrainingMatchesReplicatedTablesBitForBit) {
  constexpr int kN = 2;
  LocalCluster cluster(kN, 1, 60, dir_.string());
  for (const char* strategy : {"mod", "div"}) {
    SCOPED_TRACE(strategy);
    const std::string s = strategy;
    StatusOr<std::unique_ptr<TrainingJob>> shared = Make(
        Job(kN, OnTasks(kN) + R"(, "partitioned_tables": "shared")", s), Across(cluster, "sh-" + s));
    ASSERT_TRUE(shared.ok()) << shared.status().ToString();
    StatusOr<std::unique_ptr<TrainingJob>> copies =
        Make(Job(kN, OnTasks(kN) + R"(, "partitioned_tables": "replicated")", s),
             Across(cluster, "rep-" + s));
    ASSERT_TRUE(copies.ok()) << copies.status().ToString();

    // Parts 0 and 2 (and their slots) on replica 0, part 1 on replica 1
    // only; the dense model on both.
    std::vector<Tensor> out;
    Session* r1 = (*shared)->replica_session(1);
    EXPECT_TRUE(r1->Run({}, {"T/part_1", "w"}, {}, &out).ok());
    for (const char* elsewhere : {"T/part_0", "T/part_2"}) {
      EXPECT_FALSE(r1->Run({}, {elsewhere}, {}, &out).ok()) << elsewhere << " is on replica 1";
      EXPECT_EQ((*shared)->train_session()->graph()->FindNode(std::string(elsewhere) + "/adam_m"), nullptr);
    }
    EXPECT_EQ((*shared)->train_session()->graph()->FindNode("T/part_1"), nullptr);
    EXPECT_NE((*copies)->train_session()->graph()->FindNode("T/part_1"), nullptr);

    const std::vector<double> a = Train(shared->get());
    const std::vector<double> b = Train(copies->get());
    ASSERT_EQ(a.size(), b.size());
    ASSERT_GT(a.size(), 10u);
    for (size_t k = 0; k < a.size(); ++k) EXPECT_EQ(a[k], b[k]) << "step " << k + 1;
    EXPECT_LT(a.back(), a.front());

    // The logical table and its slots: the same bytes.
    StatusOr<JobSnapshot> sa = (*shared)->Snapshot();
    StatusOr<JobSnapshot> sb = (*copies)->Snapshot();
    ASSERT_TRUE(sa.ok()) << sa.status().ToString();
    ASSERT_TRUE(sb.ok()) << sb.status().ToString();
    ASSERT_EQ(sa->variables.size(), sb->variables.size());
    for (size_t k = 0; k < sa->variables.size(); ++k) {
      EXPECT_EQ(sa->variables[k].first, sb->variables[k].first);
      EXPECT_EQ(Bytes(sa->variables[k].second), Bytes(sb->variables[k].second)) << sa->variables[k].first;
    }
    // Evaluation here, with the parts replica 1 holds copied over.
    StatusOr<std::map<std::string, double>> ea = (*shared)->Evaluate();
    StatusOr<std::map<std::string, double>> eb = (*copies)->Evaluate();
    ASSERT_TRUE(ea.ok()) << ea.status().ToString();
    ASSERT_TRUE(eb.ok()) << eb.status().ToString();
    EXPECT_EQ(ea->at("loss"), eb->at("loss"));
  }
}

// A checkpoint of shared tables holds the logical table: it restores into
// 2 replicas sharing it (other holders: parts 0 and 2 on replica 0), and
// into replicated tables, and both go on as the job would have. Taken in
// the middle of a chunk of steps (what a shutdown does), it stops the
// chunk so that every part is read at the same step's end, and the job
// steps no further (CANCELLED: the job manager rebuilds it).
TEST_F(SharedTables, ACheckpointRestoresIntoOtherHoldersAndIntoReplicatedTables) {
  LocalCluster cluster(3, 1, 60, dir_.string());
  StatusOr<std::unique_ptr<TrainingJob>> a =
      Make(Job(3, OnTasks(3) + R"(, "partitioned_tables": "shared")"), Across(cluster, "ck-a"));
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  const std::vector<double> losses = Train(a->get());
  ASSERT_GT(losses.size(), 8u);
  StatusOr<std::vector<std::pair<std::string, Tensor>>> want = (*a)->ModelValues();
  ASSERT_TRUE(want.ok()) << want.status().ToString();

  StatusOr<std::unique_ptr<TrainingJob>> stopped =
      Make(Job(3, OnTasks(3) + R"(, "partitioned_tables": "shared")"), Across(cluster, "ck-s"));
  ASSERT_TRUE(stopped.ok()) << stopped.status().ToString();
  for (int k = 0; k < 5; ++k) ASSERT_TRUE((*stopped)->Step().ok());
  ASSERT_TRUE((*stopped)->mid_chunk()) << "the job's first chunk is longer than 5 steps";
  StatusOr<JobSnapshot> at5 = (*stopped)->Snapshot();
  ASSERT_TRUE(at5.ok()) << at5.status().ToString();
  EXPECT_EQ(at5->step, 5);
  StatusOr<StepResult> after = (*stopped)->Step();
  ASSERT_FALSE(after.ok());
  EXPECT_EQ(after.status().code(), Code::kCancelled) << after.status().ToString();
  struct Case {
    int replicas;
    const char* tables;
    const char* prefix;
  };
  for (const Case& c : {Case{2, "shared", "ck-b"}, Case{3, "replicated", "ck-c"}}) {
    SCOPED_TRACE(std::string(c.tables) + " " + std::to_string(c.replicas));
    TrainingJobOptions o = Across(cluster, c.prefix);
    o.batches_per_step = 3;  // the global batch of the job that took it
    StatusOr<std::unique_ptr<TrainingJob>> b = Make(
        Job(c.replicas, OnTasks(c.replicas) + R"(, "partitioned_tables": ")" + c.tables + "\""), o);
    ASSERT_TRUE(b.ok()) << b.status().ToString();
    Status st = (*b)->Restore(*at5);
    ASSERT_TRUE(st.ok()) << st.ToString();
    for (;;) {
      StatusOr<StepResult> r = (*b)->Step();
      ASSERT_TRUE(r.ok()) << r.status().ToString();
      ASSERT_LE(r->step, int64_t(losses.size()));
      EXPECT_NEAR(r->loss, losses[r->step - 1], 1e-5 * (1 + std::abs(r->loss))) << "step " << r->step;
      if (r->done) break;
    }
    StatusOr<std::vector<std::pair<std::string, Tensor>>> got = (*b)->ModelValues();
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    ASSERT_EQ(got->size(), want->size());
    for (size_t k = 0; k < got->size(); ++k) {
      const Tensor& x = (*got)[k].second;
      const Tensor& y = (*want)[k].second;
      ASSERT_EQ(x.num_elements(), y.num_elements());
      for (int64_t e = 0; e < x.num_elements(); ++e) {
        EXPECT_NEAR(x.ElementAsDouble(e), y.ElementAsDouble(e), 1e-5) << (*got)[k].first << "[" << e << "]";
      }
    }
  }
}

// Through the job manager (what `flowstate serve` runs), with a checkpoint
// every 2 steps: the checkpoints wait for the ends of the chunks (none
// stops one), a prediction beside its steps reads the parts held elsewhere,
// the job trains to its end, and its final checkpoint serves predictions
// (restored as one replica with the whole table).
TEST_F(SharedTables, AJobManagerCheckpointsSharedTablesAtTheEndsOfChunks) {
  LocalCluster cluster(2, 1, 60, dir_.string());
  StatusOr<std::unique_ptr<checkpoints::Store>> store = checkpoints::Store::Open((dir_ / "db").string());
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  JobManagerOptions o;
  o.devices = cluster.task(0).pool.get();
  o.data_root = dir_.string();
  o.store = store->get();
  o.remote = [&cluster] { return static_cast<ClusterView*>(cluster.task(0).cluster.get()); };
  o.collective_store = [this] { return store_address_; };
  JobManager jobs(o);
  std::string job = Job(2, R"(, "partitioned_tables": "shared", "checkpoint": {"every_steps": 2})");
  job.replace(job.find(R"("epochs": 3)"), 11, R"("epochs": 40)");  // long enough to predict beside
  StatusOr<JobInfo> info = jobs.Submit(job);
  ASSERT_TRUE(info.ok()) << info.status().ToString();
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  StatusOr<JobInfo> now = jobs.Get(info->id);
  int checkpointed_mid_run = 0;
  int64_t last = -1;
  bool predicted_mid_run = false;
  while (now.ok() && !IsTerminal(now->state)) {
    ASSERT_LT(std::chrono::steady_clock::now(), deadline) << "the job did not end within 60 s";
    if (!predicted_mid_run && now->step >= 3) {
      // Beside its steps: the parts held on task 1 are copied here once.
      std::vector<Tensor> rows;
      Status p = jobs.Predict(info->id, {{"ids", Tensor::FromVector<int32_t>({1, 2})}}, {"emb"}, &rows);
      if (p.ok()) {
        predicted_mid_run = true;
        EXPECT_TRUE(rows[0].shape() == TensorShape({2, 4})) << rows[0].shape().ToString();
      } else {
        // It may have finished meanwhile.
        EXPECT_EQ(p.code(), Code::kFailedPrecondition) << p.ToString();
      }
    }
    if (now->checkpoint_step > last) {
      last = now->checkpoint_step;
      ++checkpointed_mid_run;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    now = jobs.Get(info->id);
  }
  ASSERT_TRUE(now.ok()) << now.status().ToString();
  EXPECT_EQ(now->state, JobState::kSucceeded) << now->error;
  EXPECT_EQ(now->step, now->total_steps);
  EXPECT_EQ(now->checkpoint_step, now->step);
  EXPECT_GE(checkpointed_mid_run, 1) << "no checkpoint before the final one";
  EXPECT_TRUE(predicted_mid_run);
  EXPECT_EQ(now->checkpoint_failures, 0) << now->checkpoint_error;
  // No chunk was stopped for a checkpoint (the job would have been rebuilt).
  StatusOr<std::unique_ptr<JobEventStream>> events = jobs.Watch(info->id, true);
  ASSERT_TRUE(events.ok());
  while (std::optional<JobEvent> e = (*events)->Next(std::chrono::milliseconds(0))) {
    EXPECT_EQ(e->message.find("rebuilt"), std::string::npos) << e->message;
  }
  std::vector<Tensor> out;
  Status p = jobs.Predict(info->id, {{"ids", Tensor::FromVector<int32_t>({0, 1, 29})}}, {"emb"}, &out);
  ASSERT_TRUE(p.ok()) << p.ToString();
  EXPECT_TRUE(out[0].shape() == TensorShape({3, 4})) << out[0].shape().ToString();
  jobs.Shutdown();
}

TEST_F(SharedTables, WhatCannotBeSharedIsRefusedNamingTheField) {
  LocalCluster cluster(2, 1, 60, dir_.string());
  // In one process: nothing to split over.
  TrainingJobOptions local;
  local.devices = server_test::TestPool(1);
  local.data_root = dir_.string();
  StatusOr<std::unique_ptr<TrainingJob>> j = Make(Job(2, R"(, "partitioned_tables": "shared")"), local);
  ASSERT_FALSE(j.ok());
  EXPECT_NE(j.status().message().find("partitioned_tables"), std::string::npos) << j.status().ToString();
  // A table read whole (here its sum) by something else than a lookup.
  const std::string reader =
      R"(, {"name": "all", "op": "Sum", "inputs": ["T", "axes"]},
         {"name": "loss2", "op": "Add", "inputs": ["loss", "all"]})";
  std::string job = Job(2, OnTasks(2) + R"(, "partitioned_tables": "shared")", "mod", reader);
  job.replace(job.find(R"("loss": "loss")"), 14, R"("loss": "loss2")");
  j = Make(job, Across(cluster, "bad"));
  ASSERT_FALSE(j.ok());
  EXPECT_NE(j.status().message().find("partitioned_tables"), std::string::npos) << j.status().ToString();
  // Bad values and combinations, at parsing.
  for (const char* extra : {R"(, "partitioned_tables": "everywhere")",
                            R"(, "partitioned_tables": "shared", "backup_replicas": 1)",
                            R"(, "partitioned_tables": "shared", "sparse_as_dense": true)"}) {
    StatusOr<JobSpec> spec = ParseJobSpec(Job(2, extra));
    ASSERT_FALSE(spec.ok()) << extra;
    EXPECT_NE(spec.status().message().find("partitioned_tables"), std::string::npos)
        << spec.status().ToString();
  }
}

}  // namespace
}  // namespace flowstate

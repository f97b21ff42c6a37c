// Data-parallel replicas in one process (TrainingJob with "replicas": N):
// the all-reduce must make N replicas with batch b train like one replica
// with batch N*b, keep every replica identical, and fail loudly if not.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cmath>
#include <filesystem>
#include <random>
#include <fstream>
#include <map>
#include <set>

#include <nlohmann/json.hpp>

#include "api/job_spec.h"
#include "graph/shared_tables.h"
#include "jobs/training_job.h"
#include "scheduler/session.h"
#include "state/resource_mgr.h"
#include "tests/jobs/fashion_mlp_graph.h"
#include "state/variable.h"
#include "tests/server/server_test_util.h"

namespace flowstate {
namespace {

DevicePool* Pool() { return server_test::TestPool(2); }

std::unique_ptr<TrainingJob> MakeJob(const std::string& json, const std::string& root,
                                     int batches_per_step = 0,
                                     fault_points::Straggler straggler = {}) {
  StatusOr<JobSpec> spec = ParseJobSpec(json);
  EXPECT_TRUE(spec.ok()) << spec.status().ToString();
  if (!spec.ok()) return nullptr;
  TrainingJobOptions o;
  o.data_root = root;
  o.batches_per_step = batches_per_step;
  o.devices = Pool();
  o.allreduce_timeout = std::chrono::seconds(60);  // a hang becomes a failure
  o.test_straggler = straggler;
  StatusOr<std::unique_ptr<TrainingJob>> j = TrainingJob::Create(*spec, o);
  EXPECT_TRUE(j.ok()) << j.status().ToString();
  if (!j.ok()) return nullptr;
  Status s = (*j)->Start();
  EXPECT_TRUE(s.ok()) << s.ToString();
  return s.ok() ? std::move(j).value() : nullptr;
}

std::vector<Tensor> Read(Session* s, const std::vector<std::string>& names) {
  std::vector<Tensor> out;
  Status st = s->Run({}, names, {}, &out);
  EXPECT_TRUE(st.ok()) << st.ToString();
  return out;
}

double MaxDiff(const Tensor& a, const Tensor& b) {
  double d = 0;
  for (int64_t i = 0; i < a.num_elements(); ++i) {
    d = std::max(d, std::abs(a.ElementAsDouble(i) - b.ElementAsDouble(i)));
  }
  return d;
}

class Replicas : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = server_test::FreshTestDir("flowstate_replicas");
    // 240 rows: 15 global batches of 16 (2 x 8), 10 of 24 (3 x 8).
    server_test::WritePointsCsv(dir_ / "points.csv", 240, 7,
                                [](double a, double b) { return 2 * a - 3 * b + 0.5; });
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::string Job(const std::string& optimizer, int replicas, int batch, const std::string& extra = "",
                  int epochs = 3) {
    return R"({
      "graph": )" + server_test::LinearGraphJson(true) + R"(,
      "loss": "loss",
      "optimizer": )" + optimizer + R"(,
      "input": {"format": "csv", "files": {"x": "points.csv", "y": "points.csv"},
                "columns": {"x": ["a", "b"], "y": ["target"]}, "batch_size": )" +
           std::to_string(batch) + R"(, "epochs": )" + std::to_string(epochs) + R"(},
      "replicas": )" + std::to_string(replicas) + extra + R"(,
      "seed": 5
    })";
  }

  std::filesystem::path dir_;
};

TEST_F(Replicas, NReplicasWithBatchBTrainLikeOneWithBatchNB) {
  for (const char* opt : {R"({"type": "sgd", "learning_rate": 0.1})",
                          R"({"type": "adam", "learning_rate": 0.05})"}) {
    for (int n : {2, 3}) {
      auto one = MakeJob(Job(opt, 1, 8 * n, R"(, "max_steps": 30)"), dir_.string());
      auto many = MakeJob(Job(opt, n, 8, R"(, "max_steps": 30, "bucket_bytes": 4)"), dir_.string());
      ASSERT_NE(one, nullptr);
      ASSERT_NE(many, nullptr);
      ASSERT_EQ(many->num_replicas(), n);
      for (int step = 0; step < 30; ++step) {
        StatusOr<StepResult> a = one->Step();
        StatusOr<StepResult> b = many->Step();
        ASSERT_TRUE(a.ok()) << a.status().ToString();
        ASSERT_TRUE(b.ok()) << b.status().ToString();
        EXPECT_EQ(a->examples, b->examples) << opt << " n=" << n << " step " << step;
        EXPECT_NEAR(a->loss, b->loss, 1e-4 * (1 + std::abs(a->loss))) << opt << " n=" << n;
        ASSERT_EQ(b->replicas.size(), size_t(n));
      }
      std::vector<std::string> names = {"w", "b"};
      std::vector<Tensor> want = Read(one->train_session(), names);
      for (int r = 0; r < n; ++r) {
        std::vector<Tensor> got = Read(many->replica_session(r), names);
        for (size_t k = 0; k < names.size(); ++k) {
          EXPECT_LT(MaxDiff(want[k], got[k]), 1e-4) << opt << " n=" << n << " replica " << r << " "
                                                    << names[k];
        }
      }
      // Every replica holds the same bits, slots included.
      std::vector<std::string> all = many->graph().variables;
      std::vector<Tensor> first = Read(many->replica_session(0), all);
      for (int r = 1; r < n; ++r) {
        std::vector<Tensor> other = Read(many->replica_session(r), all);
        for (size_t k = 0; k < all.size(); ++k) EXPECT_TRUE(TensorsEqual(first[k], other[k])) << all[k];
      }
    }
  }
}

// What the job manager runs when a task of a 3-replica job is lost: 2
// replicas (or 1) with batches_per_step 3 keep the job's global batch, so
// they train like the 3 replicas, step by step, to the end of the data.
TEST_F(Replicas, FewerReplicasKeepTheGlobalBatch) {
  const std::string opt = R"({"type": "adam", "learning_rate": 0.05})";
  auto three = MakeJob(Job(opt, 3, 8, "", 2), dir_.string());
  ASSERT_NE(three, nullptr);
  for (int n : {2, 1}) {
    auto fewer = MakeJob(Job(opt, n, 8, "", 2), dir_.string(), /*batches_per_step=*/3);
    ASSERT_NE(fewer, nullptr);
    EXPECT_EQ(fewer->batches_per_step(), 3);
    EXPECT_EQ(fewer->total_steps(), 20) << "n=" << n;  // 30 batches an epoch, 3 a step
  }
  auto two = MakeJob(Job(opt, 2, 8, "", 2), dir_.string(), 3);
  auto one = MakeJob(Job(opt, 1, 8, "", 2), dir_.string(), 3);
  ASSERT_NE(two, nullptr);
  ASSERT_NE(one, nullptr);
  for (int step = 1;; ++step) {
    StatusOr<StepResult> a = three->Step();
    StatusOr<StepResult> b = two->Step();
    StatusOr<StepResult> c = one->Step();
    ASSERT_TRUE(a.ok() && b.ok() && c.ok()) << step;
    EXPECT_EQ(b->examples, 24) << step;
    EXPECT_EQ(c->examples, 24) << step;
    ASSERT_EQ(b->replicas.size(), 2u);
    EXPECT_EQ(b->replicas[0].examples, 16);  // batches 0 and 2 of the step
    EXPECT_EQ(b->replicas[1].examples, 8);
    EXPECT_NEAR(a->loss, b->loss, 1e-4 * (1 + std::abs(a->loss))) << "step " << step;
    EXPECT_NEAR(a->loss, c->loss, 1e-4 * (1 + std::abs(a->loss))) << "step " << step;
    ASSERT_EQ(a->done, b->done) << step;
    ASSERT_EQ(a->done, c->done) << step;
    if (a->done) {
      EXPECT_EQ(step, 20);
      break;
    }
    ASSERT_LT(step, 100);
  }
  std::vector<std::string> names = {"w", "b"};
  std::vector<Tensor> want = Read(three->train_session(), names);
  for (TrainingJob* j : {two.get(), one.get()}) {
    std::vector<Tensor> got = Read(j->train_session(), names);
    for (size_t k = 0; k < names.size(); ++k) EXPECT_LT(MaxDiff(want[k], got[k]), 1e-4) << names[k];
  }
}

TEST_F(Replicas, BucketsFollowTheBackwardPass) {
  StatusOr<JobSpec> spec =
      ParseJobSpec(Job(R"({"type": "sgd", "learning_rate": 0.1})", 2, 8, R"(, "bucket_bytes": 4)"));
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  StatusOr<TrainingGraph> g = BuildTrainingGraph(*spec);
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  // 4-byte buckets: the loss, then b's gradient (its variable comes later in
  // the forward pass), then w's.
  ASSERT_EQ(g->allreduce.size(), 3u);
  EXPECT_EQ(g->allreduce[0].tensors[0], "loss");
  EXPECT_EQ(g->allreduce[1].shapes[0], TensorShape({1}));
  EXPECT_EQ(g->allreduce[2].shapes[0], TensorShape({2, 1}));
  EXPECT_FALSE(g->replica_examples.empty());
  // Default buckets: everything fits in the first one.
  spec->bucket_bytes = 25 << 20;
  g = BuildTrainingGraph(*spec);
  ASSERT_TRUE(g.ok());
  EXPECT_EQ(g->allreduce.size(), 1u);
}

TEST_F(Replicas, DeterministicRunsAreBitIdentical) {
  std::vector<std::vector<Tensor>> finals;
  for (int run = 0; run < 2; ++run) {
    auto job = MakeJob(Job(R"({"type": "adam", "learning_rate": 0.01})", 3, 8,
                           R"(, "deterministic": true, "bucket_bytes": 4, "max_steps": 25)"),
                       dir_.string());
    ASSERT_NE(job, nullptr);
    for (;;) {
      StatusOr<StepResult> r = job->Step();
      ASSERT_TRUE(r.ok()) << r.status().ToString();
      if (r->done) break;
    }
    EXPECT_EQ(job->step(), 25);
    finals.push_back(Read(job->train_session(), job->graph().variables));
  }
  for (size_t k = 0; k < finals[0].size(); ++k) EXPECT_TRUE(TensorsEqual(finals[0][k], finals[1][k])) << k;
}

TEST_F(Replicas, ADivergedReplicaFailsTheJob) {
  auto job = MakeJob(Job(R"({"type": "sgd", "learning_rate": 0.1})", 2, 8,
                         R"(, "check_replicas_every": 2)"),
                     dir_.string());
  ASSERT_NE(job, nullptr);
  ASSERT_TRUE(job->Step().ok());
  ASSERT_TRUE(job->Step().ok());  // checked at step 2: they agree
  // Inject a difference into replica 1's bias.
  StatusOr<std::shared_ptr<Variable>> b =
      job->replica_session(1)->resource_manager()->Lookup<Variable>("", "b");
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  ASSERT_TRUE((*b)->Assign(Tensor::FromVector<float>({42.0f}, TensorShape({1}))).ok());
  ASSERT_TRUE(job->Step().ok());  // step 3: not checked
  StatusOr<StepResult> r = job->Step();
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kInternal);
  EXPECT_NE(r.status().message().find("replicas diverged"), std::string::npos) << r.status().ToString();
  EXPECT_NE(r.status().message().find("'b' of replica 1"), std::string::npos) << r.status().ToString();
  EXPECT_FALSE(job->Step().ok());  // the job is done
}

// A straggler (replica 2 waits 400 ms before each step): without backup
// replicas every step waits for it; with one backup replica the step is
// decided by the other two and the straggler is dropped.
TEST_F(Replicas, BackupReplicasDropTheStraggler) {
  auto median_step = [&](int backup, std::vector<int64_t>* dropped, double* loss) {
    auto job = MakeJob(Job(R"({"type": "sgd", "learning_rate": 0.1})", 3, 8,
                           ", \"backup_replicas\": " + std::to_string(backup) + R"(, "max_steps": 7)"),
                       dir_.string(), 0, {/*replica=*/2, /*delay_ms=*/400});
    EXPECT_NE(job, nullptr);
    if (job == nullptr) return 0.0;
    std::vector<double> times;
    for (;;) {
      auto start = std::chrono::steady_clock::now();
      StatusOr<StepResult> r = job->Step();
      EXPECT_TRUE(r.ok()) << r.status().ToString();
      if (!r.ok()) break;
      times.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
      if (backup > 0) {
        EXPECT_EQ(r->replicas[2].dropped_steps, 1) << "step " << r->step;
        EXPECT_EQ(r->replicas[2].examples, 0);
      }
      *loss = r->loss;
      if (r->done) break;
    }
    *dropped = job->dropped_steps();
    // The replicas still agree (checked here explicitly, every replica).
    std::vector<Tensor> first = Read(job->replica_session(0), job->graph().variables);
    for (int r = 1; r < 3; ++r) {
      std::vector<Tensor> other = Read(job->replica_session(r), job->graph().variables);
      for (size_t k = 0; k < other.size(); ++k) EXPECT_TRUE(TensorsEqual(first[k], other[k]));
    }
    std::sort(times.begin(), times.end());
    return times[times.size() / 2];
  };
  std::vector<int64_t> dropped0, dropped1;
  double loss0 = 0, loss1 = 0;
  double without = median_step(0, &dropped0, &loss0);
  double with = median_step(1, &dropped1, &loss1);
  EXPECT_GE(without, 0.4);  // every step waits for the straggler
  EXPECT_LT(with, 0.2);     // never: the other two decide the step
  EXPECT_TRUE(dropped0.empty());
  ASSERT_EQ(dropped1.size(), 3u);
  EXPECT_EQ(dropped1[2], 7);
  EXPECT_EQ(dropped1[0] + dropped1[1], 0);
  EXPECT_TRUE(std::isfinite(loss1));
}

// A traced step of a job with replicas records every replica of this
// process into one trace: both replicas' ops, on their threads, with each
// one's _AllReduce (its wait for the other) among them.
TEST_F(Replicas, ATracedStepRecordsEveryReplica) {
  auto job = MakeJob(Job(R"({"type": "sgd", "learning_rate": 0.1})", 2, 8,
                         R"(, "max_steps": 3, "trace": {"steps": [2]})"),
                     dir_.string());
  ASSERT_NE(job, nullptr);
  StatusOr<StepResult> r1 = job->Step();
  ASSERT_TRUE(r1.ok()) << r1.status().ToString();
  EXPECT_TRUE(r1->trace_json.empty());
  StatusOr<StepResult> r2 = job->Step();
  ASSERT_TRUE(r2.ok()) << r2.status().ToString();
  ASSERT_FALSE(r2->trace_json.empty());
  nlohmann::json t = nlohmann::json::parse(r2->trace_json);
  int allreduces = 0;
  std::set<int64_t> threads;
  for (const nlohmann::json& e : t["traceEvents"]) {
    if (e.value("ph", "") != "X" || e.value("cat", "") == "step") continue;
    threads.insert(e["tid"].get<int64_t>());
    if (e["args"].value("op", "") == "_AllReduce") ++allreduces;
  }
  EXPECT_EQ(allreduces, 2 * int(job->graph().allreduce.size())) << r2->trace_json.substr(0, 2000);
  EXPECT_GE(threads.size(), 2u);
  StatusOr<StepResult> r3 = job->Step();
  ASSERT_TRUE(r3.ok());
  EXPECT_TRUE(r3->trace_json.empty());
}

// Overlap: a bucket's gradients are computed as soon as the backward pass
// can, so that its all-reduce starts while the rest goes on. Depth first
// (the executor's stack), the last layer's weight gradient ran after the
// whole chain below it, and with it every bucket waited for the end.
TEST_F(Replicas, WeightGradientsRunBeforeTheChainBelowThem) {
  const std::string graph = R"({"nodes": [
    {"name": "x", "op": "Placeholder", "attrs": {"dtype": "float32", "shape": [-1, 2]}},
    {"name": "y", "op": "Placeholder", "attrs": {"dtype": "float32", "shape": [-1]}},
    {"name": "l1/w", "op": "Variable", "attrs": {"dtype": "float32", "shape": [2, 16], "init": "glorot_uniform"}},
    {"name": "l1/matmul", "op": "MatMul", "inputs": ["x", "l1/w"]},
    {"name": "l1", "op": "Relu", "inputs": ["l1/matmul"]},
    {"name": "l2/w", "op": "Variable", "attrs": {"dtype": "float32", "shape": [16, 16], "init": "glorot_uniform"}},
    {"name": "l2/matmul", "op": "MatMul", "inputs": ["l1", "l2/w"]},
    {"name": "l2", "op": "Relu", "inputs": ["l2/matmul"]},
    {"name": "l3/w", "op": "Variable", "attrs": {"dtype": "float32", "shape": [16, 1], "init": "glorot_uniform"}},
    {"name": "l3/matmul", "op": "MatMul", "inputs": ["l2", "l3/w"]},
    {"name": "flat", "op": "Const", "attrs": {"dtype": "int32", "value": [-1]}},
    {"name": "pred", "op": "Reshape", "inputs": ["l3/matmul", "flat"]},
    {"name": "sq", "op": "SquaredDifference", "inputs": ["pred", "y"]},
    {"name": "axes", "op": "Const", "attrs": {"dtype": "int32", "value": []}},
    {"name": "loss", "op": "Mean", "inputs": ["sq", "axes"]}]})";
  const std::string json = R"({"graph": )" + graph + R"(, "loss": "loss",
      "optimizer": {"type": "sgd", "learning_rate": 0.05},
      "input": {"format": "csv", "files": {"x": "points.csv", "y": "points.csv"},
                "columns": {"x": ["a", "b"], "y": ["target"]}, "batch_size": 8, "epochs": 1},
      "replicas": 2, "bucket_bytes": 4, "max_steps": 2, "trace": {"steps": [2]}, "seed": 5})";
  auto job = MakeJob(json, dir_.string());
  ASSERT_NE(job, nullptr);
  ASSERT_TRUE(job->Step().ok());
  StatusOr<StepResult> r = job->Step();
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  nlohmann::json t = nlohmann::json::parse(r->trace_json);
  // Each replica's start times of l3's weight gradient and of the gradient
  // that goes on into layer 2, earliest first.
  std::vector<double> weight, below;
  for (const nlohmann::json& e : t["traceEvents"]) {
    if (e.value("ph", "") != "X") continue;
    const std::string node = e["args"].value("node", "");
    if (node == "gradients/l3/matmul/MatMul_1") weight.push_back(e["ts"].get<double>());
    if (node == "gradients/l2/matmul/MatMul_1") below.push_back(e["ts"].get<double>());
  }
  ASSERT_EQ(weight.size(), 2u) << r->trace_json.substr(0, 2000);
  ASSERT_EQ(below.size(), 2u);
  std::sort(weight.begin(), weight.end());
  std::sort(below.begin(), below.end());
  for (int i = 0; i < 2; ++i) EXPECT_LT(weight[i], below[i]) << "replica " << i;
}

TEST_F(Replicas, ACheckpointOfThreeReplicasResumesWithTwo) {
  const std::string opt = R"({"type": "adam", "learning_rate": 0.05})";
  auto three = MakeJob(Job(opt, 3, 8, "", 10), dir_.string());
  ASSERT_NE(three, nullptr);
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(three->Step().ok());
  StatusOr<JobSnapshot> snap = three->Snapshot();
  ASSERT_TRUE(snap.ok()) << snap.status().ToString();
  // 4 steps of 3 x 8 examples: a position independent of the replicas.
  EXPECT_EQ(snap->position.epoch, 0);
  EXPECT_EQ(snap->position.offset, 96);
  // Through the checkpoint's metadata, as a stored checkpoint would.
  JobSnapshot decoded;
  ASSERT_TRUE(DecodeSnapshotMetadata(EncodeSnapshotMetadata(*snap), &decoded).ok());
  decoded.variables = snap->variables;

  auto two = MakeJob(Job(opt, 2, 8, "", 10), dir_.string());
  ASSERT_NE(two, nullptr);
  Status st = two->Restore(decoded);
  ASSERT_TRUE(st.ok()) << st.ToString();
  for (int r = 0; r < 2; ++r) {
    std::vector<Tensor> got = Read(two->replica_session(r), two->graph().variables);
    for (size_t k = 0; k < got.size(); ++k) {
      EXPECT_TRUE(TensorsEqual(got[k], snap->variables[k].second)) << snap->variables[k].first;
    }
  }
  // The rest of the data: 10 epochs of 240 examples, 96 already seen.
  int64_t examples = 0;
  double loss = 0;
  for (;;) {
    StatusOr<StepResult> r = two->Step();
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    examples += r->examples;
    loss = r->loss;
    if (r->done) break;
  }
  EXPECT_EQ(examples, 10 * 240 - 96);
  EXPECT_LT(loss, 0.05);
  EXPECT_EQ(two->step(), 4 + (10 * 240 - 96) / 16);
  // Serving predictions needs replica 0 only.
  std::unique_ptr<TrainingJob> serve = two->Unstarted();
  ASSERT_TRUE(serve->Start(/*load_data=*/false).ok());
  EXPECT_EQ(serve->replica_session(1), nullptr);
  st = serve->Restore(decoded);
  ASSERT_TRUE(st.ok()) << st.ToString();
  std::vector<Tensor> w;
  st = serve->Predict({}, {"w"}, &w);
  ASSERT_TRUE(st.ok()) << st.ToString();
  for (const auto& [name, t] : snap->variables) {
    if (name == "w") {
      EXPECT_TRUE(TensorsEqual(w[0], t));
    }
  }
}

// A replica that does not join within the all-reduce's deadline fails the
// step on every replica, naming it: nobody hangs.
TEST_F(Replicas, AReplicaThatNeverJoinsFailsTheStepByTheDeadline) {
  StatusOr<JobSpec> spec = ParseJobSpec(Job(R"({"type": "sgd", "learning_rate": 0.1})", 2, 8, ""));
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  TrainingJobOptions o;
  o.test_straggler = {/*replica=*/1, /*delay_ms=*/1500};
  o.data_root = dir_.string();
  o.devices = Pool();
  o.allreduce_timeout = std::chrono::milliseconds(200);
  StatusOr<std::unique_ptr<TrainingJob>> job = TrainingJob::Create(*spec, o);
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  ASSERT_TRUE((*job)->Start().ok());
  auto start = std::chrono::steady_clock::now();
  StatusOr<StepResult> r = (*job)->Step();
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kDeadlineExceeded) << r.status().ToString();
  EXPECT_NE(r.status().message().find("rank(s) 1 did not join"), std::string::npos)
      << r.status().ToString();
  EXPECT_LT(seconds, 10.0);
  EXPECT_FALSE((*job)->Step().ok());  // the job is done
}

TEST_F(Replicas, BadReplicaFieldsAreRefused) {
  const std::string opt = R"({"type": "sgd", "learning_rate": 0.1})";
  StatusOr<JobSpec> s = ParseJobSpec(Job(opt, 2, 8, R"(, "backup_replicas": 2)"));
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("backup_replicas"), std::string::npos);
  s = ParseJobSpec(Job(opt, 3, 8, R"(, "backup_replicas": 1, "deterministic": true)"));
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("deterministic"), std::string::npos);
  // The test straggler is a seam of the tests (TrainingJobOptions), not a
  // field any client can send.
  s = ParseJobSpec(Job(opt, 2, 8, R"(, "_test_straggler": {"replica": 1, "delay_ms": 1})"));
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("_test_straggler"), std::string::npos) << s.status().ToString();
  // min_replicas: 1 <= min_replicas <= replicas (default: replicas).
  for (const char* bad : {R"(, "min_replicas": 4)", R"(, "min_replicas": 0)",
                          R"(, "min_replicas": -1)", R"(, "min_replicas": 1.5)",
                          R"(, "min_replicas": "2")"}) {
    s = ParseJobSpec(Job(opt, 3, 8, bad));
    ASSERT_FALSE(s.ok()) << bad;
    EXPECT_EQ(s.status().code(), Code::kInvalidArgument) << bad;
    EXPECT_NE(s.status().message().find("min_replicas"), std::string::npos)
        << bad << ": " << s.status().ToString();
  }
  for (const char* bad : {R"(, "replica_wait_seconds": -1)", R"(, "replica_wait_seconds": "x")"}) {
    s = ParseJobSpec(Job(opt, 3, 8, bad));
    ASSERT_FALSE(s.ok()) << bad;
    EXPECT_NE(s.status().message().find("replica_wait_seconds"), std::string::npos)
        << bad << ": " << s.status().ToString();
  }
  s = ParseJobSpec(Job(opt, 3, 8, ""));
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(s->min_replicas, 3);  // by default a job waits for all of its replicas
  s = ParseJobSpec(Job(opt, 3, 8, R"(, "min_replicas": 2, "replica_wait_seconds": 0.5)"));
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(s->min_replicas, 2);
  EXPECT_DOUBLE_EQ(s->replica_wait_seconds, 0.5);
  // replicas_per_task: >= 1, and only when the job leaves placement to the
  // server (no devices).
  for (const char* bad : {R"(, "replicas_per_task": 0)", R"(, "replicas_per_task": "2")",
                          R"(, "replicas_per_task": 2, "devices": ["CPU:0", "CPU:0", "CPU:0"])"}) {
    s = ParseJobSpec(Job(opt, 3, 8, bad));
    ASSERT_FALSE(s.ok()) << bad;
    EXPECT_EQ(s.status().code(), Code::kInvalidArgument) << bad;
    EXPECT_NE(s.status().message().find("replicas_per_task"), std::string::npos)
        << bad << ": " << s.status().ToString();
  }
  s = ParseJobSpec(Job(opt, 4, 8, R"(, "replicas_per_task": 2)"));
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(s->replicas_per_task, 2);
}

// Outside a cluster (no TrainingJobOptions::remote), a replica device on
// another task is refused naming the entry before anything starts
// (tests/distributed/job_replicas_test.cc runs them in a cluster).
TEST_F(Replicas, ReplicaDevicesOnAnotherTaskAreRefusedOutsideACluster) {
  StatusOr<JobSpec> spec = ParseJobSpec(
      Job(R"({"type": "sgd", "learning_rate": 0.1})", 2, 8,
          R"(, "devices": ["/device:CPU:0", "/job:worker/replica:0/task:1/device:CPU:0"])"));
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  TrainingJobOptions o;
  o.data_root = dir_.string();
  o.devices = Pool();
  StatusOr<std::unique_ptr<TrainingJob>> job = TrainingJob::Create(*spec, o);
  ASSERT_FALSE(job.ok());
  EXPECT_EQ(job.status().code(), Code::kInvalidArgument) << job.status().ToString();
  EXPECT_NE(job.status().message().find("devices[1]"), std::string::npos) << job.status().ToString();
  EXPECT_NE(job.status().message().find("task:1"), std::string::npos) << job.status().ToString();
}

// A Gather's sparse gradient travels as rows: the dense bucket holds the
// loss only, and an _AllGather (after it) the embedding's indices and
// values; with backup replicas, or "sparse_as_dense", it is densified into
// the bucket instead.
TEST(ReplicasGraph, SparseGradientsAreGatheredAsRowsOrDensifiedWithBackups) {
  auto spec_with = [](const std::string& extra) {
    return ParseJobSpec(R"({
      "graph": {"nodes": [
        {"name": "ids", "op": "Placeholder", "attrs": {"dtype": "int32", "shape": [-1]}},
        {"name": "emb", "op": "Variable", "attrs": {"dtype": "float32", "shape": [10, 2], "init": "glorot_uniform"}},
        {"name": "rows", "op": "Gather", "inputs": ["emb", "ids"]},
        {"name": "sq", "op": "Square", "inputs": ["rows"]},
        {"name": "axes", "op": "Const", "attrs": {"dtype": "int32", "value": []}},
        {"name": "loss", "op": "Mean", "inputs": ["sq", "axes"]}
      ]},
      "loss": "loss",
      "optimizer": {"type": "adam", "learning_rate": 0.1},
      "input": {"format": "csv", "files": {"ids": "ids.csv"}, "batch_size": 4},
      "replicas": 3)" + extra + "}");
  };
  StatusOr<JobSpec> spec = spec_with("");
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  StatusOr<TrainingGraph> g = BuildTrainingGraph(*spec);
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  ASSERT_EQ(g->allreduce.size(), 2u);
  EXPECT_FALSE(g->allreduce[0].gather);
  ASSERT_EQ(g->allreduce[0].shapes.size(), 1u);  // the loss
  EXPECT_TRUE(g->allreduce[1].gather);
  EXPECT_EQ(g->allreduce[1].shapes, (std::vector<TensorShape>{TensorShape({0}), TensorShape({0, 2})}));
  int gathers = 0, densified = 0;
  for (const NodeDef& n : g->graph.nodes) {
    gathers += n.op == "_AllGather" ? 1 : 0;
    densified += n.op == "UnsortedSegmentSum" ? 1 : 0;
  }
  EXPECT_EQ(gathers, 1);
  EXPECT_EQ(densified, 0);

  for (const char* dense : {R"(, "backup_replicas": 1)", R"(, "sparse_as_dense": true)"}) {
    spec = spec_with(dense);
    ASSERT_TRUE(spec.ok()) << spec.status().ToString();
    g = BuildTrainingGraph(*spec);
    ASSERT_TRUE(g.ok()) << g.status().ToString();
    ASSERT_EQ(g->allreduce.size(), 1u) << dense;
    ASSERT_EQ(g->allreduce[0].shapes.size(), 2u);  // the loss, emb's gradient
    EXPECT_EQ(g->allreduce[0].shapes[1], TensorShape({10, 2}));
  }
  spec = spec_with(R"(, "sparse_as_dense": "yes")");
  ASSERT_FALSE(spec.ok());
  EXPECT_NE(spec.status().message().find("sparse_as_dense"), std::string::npos) << spec.status().ToString();
}

// Shared tables (graph/shared_tables.h): replica 1 of 2 with a table of 3
// parts (parts 0 and 2 on replica 0) looked up twice keeps part 1 and its
// Adam slots only; each lookup is one _SharedGather of every part's ids and
// of part 1, numbered first (0, 1 in topological order), the gradient
// buckets after them; the gradients of the parts it does not hold are still
// gathered and the train op waits for them.
TEST(ReplicasGraph, SharedTablesKeepTheirPartsOnTheirHoldersAndLookUpFirst) {
  StatusOr<JobSpec> spec = ParseJobSpec(R"({
    "graph": {"nodes": [
      {"name": "ids", "op": "Placeholder", "attrs": {"dtype": "int32", "shape": [-1]}},
      {"name": "more", "op": "Placeholder", "attrs": {"dtype": "int32", "shape": [-1]}},
      {"name": "T", "op": "Variable", "attrs": {"dtype": "float32", "shape": [12, 2], "init": "uniform",
                                                 "partitions": 3}},
      {"name": "a", "op": "Gather", "inputs": ["T", "ids"]},
      {"name": "b", "op": "Gather", "inputs": ["T", "more"]},
      {"name": "both", "op": "Add", "inputs": ["a", "b"]},
      {"name": "sq", "op": "Square", "inputs": ["both"]},
      {"name": "axes", "op": "Const", "attrs": {"dtype": "int32", "value": []}},
      {"name": "loss", "op": "Mean", "inputs": ["sq", "axes"]}
    ]},
    "loss": "loss",
    "optimizer": {"type": "adam", "learning_rate": 0.1},
    "input": {"format": "csv", "files": {"ids": "ids.csv", "more": "ids.csv"}, "batch_size": 4},
    "replicas": 2, "partitioned_tables": "shared"})");
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  EXPECT_TRUE(spec->shared_tables);
  StatusOr<TrainingGraph> tg = BuildTrainingGraph(*spec);
  ASSERT_TRUE(tg.ok()) << tg.status().ToString();
  const std::map<std::string, int> holders = SharedVariableHolders(*tg, 2);
  EXPECT_EQ(holders.at("T/part_0"), 0);
  EXPECT_EQ(holders.at("T/part_1"), 1);
  EXPECT_EQ(holders.at("T/part_2"), 0);
  EXPECT_EQ(holders.at("optimizer/T/part_1/adam_m"), 1);
  StatusOr<ReplicaTrainingGraph> r = ShareTables(*tg, 1, 2);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->num_buckets, int(tg->allreduce.size()) + 2);
  std::map<std::string, const NodeDef*> nodes;
  for (const NodeDef& n : r->graph.nodes) nodes[n.name] = &n;
  for (const char* gone : {"T/part_0", "T/part_2", "optimizer/T/part_0/adam_m", "optimizer/T/part_2/adam_v"}) {
    EXPECT_EQ(nodes.count(gone), 0u) << gone;
    EXPECT_EQ(std::count(r->variables.begin(), r->variables.end(), gone), 0) << gone;
  }
  EXPECT_EQ(nodes.count("T/part_1"), 1u);
  EXPECT_EQ(std::count(r->variables.begin(), r->variables.end(), "optimizer/T/part_1/adam_v"), 1);
  int lookups = 0;
  std::vector<int64_t> buckets;
  for (const NodeDef& n : r->graph.nodes) {
    if (n.op == "Gather") {
      EXPECT_FALSE(n.inputs[0].starts_with("T/part_")) << n.name << " reads a part";
    }
    if (n.op == "_SharedGather") {
      ++lookups;
      EXPECT_EQ(n.attrs.at("N").i(), 3);
      EXPECT_EQ(n.attrs.at("held").ints(), std::vector<int64_t>{1});
      EXPECT_EQ(n.inputs[3], "T/part_1");  // 3 parts' ids, then the part held
      EXPECT_EQ(n.attrs.at("num_buckets").i(), r->num_buckets);
      buckets.push_back(n.attrs.at("bucket").i());
    }
    if (n.op == "_AllReduce" || n.op == "_AllGather") {
      EXPECT_GE(n.attrs.at("bucket").i(), 2) << n.name;
    }
  }
  EXPECT_EQ(lookups, 2);
  std::sort(buckets.begin(), buckets.end());
  EXPECT_EQ(buckets, (std::vector<int64_t>{0, 1}));
  // Parts 0 and 2's gathered gradients: still in the graph, and the train
  // op depends on them (their updates are gone).
  int gathers = 0;
  for (const NodeDef& n : r->graph.nodes) gathers += n.op == "_AllGather" ? 1 : 0;
  EXPECT_EQ(gathers, 3);
  StatusOr<Graph> g = Graph::Create(r->graph);
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  std::set<std::string> reach;
  std::vector<std::string> todo = {tg->train_op};
  while (!todo.empty()) {
    std::string name = todo.back();
    todo.pop_back();
    if (!reach.insert(name).second) continue;
    for (const std::string& in : nodes.at(name)->inputs) todo.push_back(ParseTensorId(in)->node);
  }
  for (const NodeDef& n : r->graph.nodes) {
    if (n.op == "_AllGather") {
      EXPECT_TRUE(reach.count(n.name)) << n.name << " does not run with the train op";
    }
  }
}

// An embedding model: N replicas with batch b, whose sparse gradients are
// gathered as rows, train like one replica with batch N*b (the rows of
// equal ids summed by the sparse update), for SGD and (lazy) Adam, with a
// last step where one replica has no batch; the replicas stay identical.
TEST_F(Replicas, GatheredSparseGradientsTrainLikeOneReplicaWithTheGlobalBatch) {
  {
    std::ofstream f(dir_ / "ids.csv");
    f << "id,target\n";
    std::mt19937 rng(9);
    for (int i = 0; i < 100; ++i) {
      const int id = int(rng() % 12);
      f << id << "," << (id % 3) - 1 << "\n";
    }
  }
  auto job = [&](const std::string& opt, int replicas, int batch) {
    return R"({
      "graph": {"nodes": [
        {"name": "id", "op": "Placeholder", "attrs": {"dtype": "int32", "shape": [-1]}},
        {"name": "y", "op": "Placeholder", "attrs": {"dtype": "float32", "shape": [-1]}},
        {"name": "emb", "op": "Variable", "attrs": {"dtype": "float32", "shape": [12, 3], "init": "glorot_uniform"}},
        {"name": "w", "op": "Variable", "attrs": {"dtype": "float32", "shape": [3, 1], "init": "glorot_uniform"}},
        {"name": "rows", "op": "Gather", "inputs": ["emb", "id"]},
        {"name": "p", "op": "MatMul", "inputs": ["rows", "w"]},
        {"name": "flat", "op": "Const", "attrs": {"dtype": "int32", "value": [-1]}},
        {"name": "pred", "op": "Reshape", "inputs": ["p", "flat"]},
        {"name": "sq", "op": "SquaredDifference", "inputs": ["pred", "y"]},
        {"name": "axes", "op": "Const", "attrs": {"dtype": "int32", "value": []}},
        {"name": "loss", "op": "Mean", "inputs": ["sq", "axes"]}
      ]},
      "loss": "loss",
      "optimizer": )" + opt + R"(,
      "input": {"format": "csv", "files": {"id": "ids.csv", "y": "ids.csv"}, "header": true,
                "columns": {"id": {"columns": ["id"], "dtype": "int32"}, "y": ["target"]},
                "batch_size": )" + std::to_string(batch) + R"(, "epochs": 2},
      "replicas": )" + std::to_string(replicas) + R"(,
      "seed": 3
    })";
  };
  for (const char* opt : {R"({"type": "sgd", "learning_rate": 0.2})",
                          R"({"type": "adam", "learning_rate": 0.05})"}) {
    const int n = 3;
    auto one = MakeJob(job(opt, 1, 6 * n), dir_.string());
    auto many = MakeJob(job(opt, n, 6), dir_.string());
    ASSERT_NE(one, nullptr);
    ASSERT_NE(many, nullptr);
    int steps = 0;
    for (;; ++steps) {
      StatusOr<StepResult> a = one->Step();
      StatusOr<StepResult> b = many->Step();
      ASSERT_TRUE(a.ok()) << a.status().ToString();
      ASSERT_TRUE(b.ok()) << b.status().ToString();
      ASSERT_EQ(a->examples, b->examples) << opt << " step " << steps;
      EXPECT_NEAR(a->loss, b->loss, 1e-5 * (1 + std::abs(a->loss))) << opt << " step " << steps;
      ASSERT_EQ(a->done, b->done);
      if (a->done) break;
      ASSERT_LT(steps, 100);
    }
    // 100 rows in batches of 6: 17 batches an epoch, 6 steps of 3 (the
    // last with 2 replicas' batches, 4 rows and 6).
    EXPECT_EQ(steps + 1, 12) << opt;
    const std::vector<std::string> names = {"emb", "w"};
    std::vector<Tensor> want = Read(one->train_session(), names);
    for (int r = 0; r < n; ++r) {
      std::vector<Tensor> got = Read(many->replica_session(r), names);
      for (size_t k = 0; k < names.size(); ++k) {
        EXPECT_LT(MaxDiff(want[k], got[k]), 2e-6) << opt << " replica " << r << " " << names[k];
      }
    }
    std::vector<std::string> all = many->graph().variables;
    std::vector<Tensor> first = Read(many->replica_session(0), all);
    for (int r = 1; r < n; ++r) {
      std::vector<Tensor> other = Read(many->replica_session(r), all);
      for (size_t k = 0; k < all.size(); ++k) EXPECT_EQ(MaxDiff(first[k], other[k]), 0.0) << all[k];
    }
  }
}

// The Fashion-MNIST MLP: 3 replicas with batch 32 reach the accuracy of one
// replica with batch 96 (the same global batches: 3000 examples are 31 x 96
// + 24, and 94 batches of 32 are 31 steps of 3 + one of 24).
TEST(ReplicasFashionMnist, ThreeReplicasMatchOneWithTheGlobalBatch) {
  const std::string root = "/usr/share/datasets";
  if (!std::filesystem::exists(root + "/fashion-mnist/train-images-idx3-ubyte.gz")) {
    GTEST_SKIP() << "dataset-fashion-mnist is not installed (scripts/install-deps installs it)";
  }
  const std::string graph = test::kFashionMlpGraph;
  auto job = [&](int replicas, int batch) {
    return R"({"graph": )" + graph + R"(,
      "loss": "loss",
      "optimizer": {"type": "adam", "learning_rate": 0.003},
      "input": {"format": "idx", "files": {"x": "fashion-mnist/train-images-idx3-ubyte.gz",
                                            "y": "fashion-mnist/train-labels-idx1-ubyte.gz"},
                "batch_size": )" + std::to_string(batch) + R"(, "epochs": 3, "max_examples": 3000},
      "eval": {"files": {"x": "fashion-mnist/t10k-images-idx3-ubyte.gz",
                         "y": "fashion-mnist/t10k-labels-idx1-ubyte.gz"},
               "metrics": ["accuracy"], "max_examples": 2000, "batch_size": 500},
      "replicas": )" + std::to_string(replicas) + R"(,
      "seed": 11})";
  };
  std::vector<double> accuracy;
  for (auto [replicas, batch] : {std::pair{1, 96}, std::pair{3, 32}}) {
    auto j = MakeJob(job(replicas, batch), root);
    ASSERT_NE(j, nullptr);
    for (;;) {
      StatusOr<StepResult> r = j->Step();
      ASSERT_TRUE(r.ok()) << r.status().ToString();
      if (r->done) break;
    }
    EXPECT_EQ(j->step(), 96);
    StatusOr<std::map<std::string, double>> m = j->Evaluate();
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    accuracy.push_back(m->at("accuracy"));
  }
  std::printf("accuracy: 1 replica x 96 %.4f, 3 replicas x 32 %.4f\n", accuracy[0], accuracy[1]);
  EXPECT_GT(accuracy[0], 0.7);
  EXPECT_NEAR(accuracy[1], accuracy[0], 0.01);
}

}  // namespace
}  // namespace flowstate

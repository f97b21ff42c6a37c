// Training runs end to end through TrainingJob: they must fail if gradients
// or optimizers are wrong.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>

#include "scheduler/session.h"
#include "api/job_spec.h"
#include "jobs/training_job.h"
#include "tests/jobs/fashion_mlp_graph.h"
#include "tests/server/server_test_util.h"

namespace flowstate {
namespace {

DevicePool* Pool() { return server_test::TestPool(2); }

std::unique_ptr<TrainingJob> MakeJob(const std::string& json, const std::string& root) {
  StatusOr<JobSpec> spec = ParseJobSpec(json);
  EXPECT_TRUE(spec.ok()) << spec.status().ToString();
  if (!spec.ok()) return nullptr;
  TrainingJobOptions o;
  o.data_root = root;
  o.devices = Pool();
  StatusOr<std::unique_ptr<TrainingJob>> j = TrainingJob::Create(*spec, o);
  EXPECT_TRUE(j.ok()) << j.status().ToString();
  if (!j.ok()) return nullptr;
  Status s = (*j)->Start();
  EXPECT_TRUE(s.ok()) << s.ToString();
  return s.ok() ? std::move(j).value() : nullptr;
}

class CsvRegression : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = server_test::FreshTestDir("flowstate_train");
    server_test::WritePointsCsv(dir_ / "points.csv", 256, 3,
                                [](double a, double b) { return 2 * a - 3 * b + 0.5; });
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::string JobJson(const std::string& optimizer) {
    return R"({
      "graph": )" + server_test::LinearGraphJson(true) + R"(,
      "loss": "loss",
      "optimizer": )" + optimizer + R"(,
      "input": {"format": "csv", "files": {"x": "points.csv", "y": "points.csv"},
                "columns": {"x": ["a", "b"], "y": ["target"]}, "batch_size": 16, "epochs": 60},
      "seed": 5
    })";
  }

  std::filesystem::path dir_;
};

TEST_F(CsvRegression, EveryOptimizerFitsALine) {
  for (const char* opt : {R"({"type": "sgd", "learning_rate": 0.1})",
                          R"({"type": "momentum", "learning_rate": 0.05, "momentum": 0.9})",
                          R"({"type": "momentum", "learning_rate": 0.05, "nesterov": true})",
                          R"({"type": "adam", "learning_rate": 0.05})",
                          R"({"type": "adagrad", "learning_rate": 0.5})",
                          R"({"type": "rmsprop", "learning_rate": 0.01})",
                          R"({"type": "sgd", "learning_rate": 0.2, "clip_global_norm": 1.0,
                              "schedule": {"type": "exponential_decay", "decay_steps": 100, "decay_rate": 0.5}})",
                          R"({"type": "adam", "learning_rate": 0.05,
                              "schedule": {"type": "cosine_decay", "decay_steps": 960}})"}) {
    auto job = MakeJob(JobJson(opt), dir_.string());
    ASSERT_NE(job, nullptr) << opt;
    double first = 0, last = 0;
    for (;;) {
      StatusOr<StepResult> r = job->Step();
      ASSERT_TRUE(r.ok()) << opt << ": " << r.status().ToString();
      if (r->step == 1) first = r->loss;
      last = r->loss;
      if (r->done) break;
    }
    EXPECT_LT(last, 1e-2) << opt << " (first loss " << first << ")";
    std::vector<Tensor> out;
    ASSERT_TRUE(job->train_session()->Run({}, {"w", "b"}, {}, &out).ok());
    EXPECT_NEAR(out[0].data<float>()[0], 2.0, 0.1) << opt;
    EXPECT_NEAR(out[0].data<float>()[1], -3.0, 0.1) << opt;
    EXPECT_NEAR(out[1].data<float>()[0], 0.5, 0.1) << opt;
  }
}

TEST_F(CsvRegression, SameSeedSameNumbersBitForBit) {
  std::vector<std::vector<Tensor>> finals;
  for (int run = 0; run < 2; ++run) {
    auto job = MakeJob(JobJson(R"({"type": "adam", "learning_rate": 0.01})"), dir_.string());
    ASSERT_NE(job, nullptr);
    for (int i = 0; i < 50; ++i) ASSERT_TRUE(job->Step().ok());
    std::vector<Tensor> out;
    Status st = job->train_session()->Run({}, {"w", "b", "optimizer/w/adam_v"}, {}, &out);
    ASSERT_TRUE(st.ok()) << st.ToString();
    finals.push_back(out);
  }
  for (size_t k = 0; k < finals[0].size(); ++k) {
    EXPECT_TRUE(TensorsEqual(finals[0][k], finals[1][k])) << k;
  }
}

// An embedding through the whole job: ids from a CSV column (int32), a
// [50] table looked up by Gather, its sparse gradient applied by the
// SparseApply* updates (lazy for momentum, adam, rmsprop). Every optimizer
// must fit table[id] = target(id); rows 40..49 are never used and keep
// their initial value.
class CsvEmbedding : public ::testing::Test {
 protected:
  static double Target(int id) { return 0.1 * id - 2.0; }
  void SetUp() override {
    dir_ = server_test::FreshTestDir("flowstate_embedding");
    std::ofstream f(dir_ / "ids.csv");
    f << "id,target\n";
    std::mt19937 rng(3);
    for (int i = 0; i < 320; ++i) {
      int id = int(rng() % 40);
      f << id << "," << Target(id) << "\n";
    }
    std::ofstream bad(dir_ / "bad.csv");
    bad << "id,target\n1,0.5\n2,0.5\n77,0.5\n3,0.5\n";
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  static std::string JobJson(const std::string& optimizer, const std::string& file = "ids.csv") {
    return R"({
      "graph": {"nodes": [
        {"name": "ids", "op": "Placeholder", "attrs": {"dtype": "int32", "shape": [-1]}},
        {"name": "y", "op": "Placeholder", "attrs": {"dtype": "float32", "shape": [-1]}},
        {"name": "table", "op": "Variable",
         "attrs": {"dtype": "float32", "shape": [50], "init": "constant", "init_value": 0.25}},
        {"name": "rows", "op": "Gather", "inputs": ["table", "ids"]},
        {"name": "d", "op": "Sub", "inputs": ["rows", "y"]},
        {"name": "sq", "op": "Square", "inputs": ["d"]},
        {"name": "axes", "op": "Const", "attrs": {"dtype": "int32", "value": []}},
        {"name": "loss", "op": "Mean", "inputs": ["sq", "axes"]}
      ]},
      "loss": "loss",
      "optimizer": )" + optimizer + R"(,
      "input": {"format": "csv", "files": {"ids": ")" + file + R"(", "y": ")" + file + R"("},
                "columns": {"ids": {"columns": ["id"], "dtype": "int32"}, "y": ["target"]},
                "batch_size": 16, "epochs": 40},
      "seed": 5
    })";
  }

  std::filesystem::path dir_;
};

TEST_F(CsvEmbedding, EveryOptimizerFitsTheTableWithSparseUpdates) {
  for (const char* opt : {R"({"type": "sgd", "learning_rate": 2})",
                          R"({"type": "momentum", "learning_rate": 0.5, "momentum": 0.5})",
                          R"({"type": "adam", "learning_rate": 0.1})",
                          R"({"type": "adagrad", "learning_rate": 1})",
                          R"({"type": "rmsprop", "learning_rate": 0.05})",
                          R"({"type": "sgd", "learning_rate": 2, "clip_global_norm": 1.0})"}) {
    auto job = MakeJob(JobJson(opt), dir_.string());
    ASSERT_NE(job, nullptr) << opt;
    double last = 0;
    for (;;) {
      StatusOr<StepResult> r = job->Step();
      ASSERT_TRUE(r.ok()) << opt << ": " << r.status().ToString();
      last = r->loss;
      if (r->done) break;
    }
    EXPECT_LT(last, 1e-3) << opt;
    std::vector<Tensor> out;
    ASSERT_TRUE(job->train_session()->Run({}, {"table"}, {}, &out).ok());
    const float* t = out[0].data<float>();
    for (int id = 0; id < 40; ++id) EXPECT_NEAR(t[id], Target(id), 0.05) << opt << " id " << id;
    for (int id = 40; id < 50; ++id) EXPECT_EQ(t[id], 0.25f) << opt << ": unused row moved";
  }
}

TEST_F(CsvEmbedding, AnIdOutsideTheTableFailsTheStepNamingTheNodeAndTheIndex) {
  auto job = MakeJob(JobJson(R"({"type": "adam", "learning_rate": 0.1})", "bad.csv"),
                     dir_.string());
  ASSERT_NE(job, nullptr);
  std::vector<Tensor> before;
  ASSERT_TRUE(job->train_session()->Run({}, {"table"}, {}, &before).ok());
  StatusOr<StepResult> r = job->Step();
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kInvalidArgument) << r.status().ToString();
  EXPECT_EQ(r.status().node(), "rows") << r.status().ToString();
  EXPECT_NE(r.status().message().find("= 77 is not in [0, 50)"), std::string::npos)
      << r.status().ToString();
  std::vector<Tensor> after;
  ASSERT_TRUE(job->train_session()->Run({}, {"table"}, {}, &after).ok());
  EXPECT_TRUE(TensorsEqual(before[0], after[0])) << "nothing written";
}

// A short Fashion-MNIST run on a subset: the loss must fall and accuracy rise
// far above chance (0.1); broken gradients cannot do that.
// Trains the Fashion-MNIST job `json` to its end: near chance before
// (accuracy < 0.3), above `min_accuracy` after, the loss down by 40%.
void ExpectLearns(const std::string& json, const std::string& root, double min_accuracy) {
  auto j = MakeJob(json, root);
  ASSERT_NE(j, nullptr);
  StatusOr<std::map<std::string, double>> before = j->Evaluate();
  ASSERT_TRUE(before.ok()) << before.status().ToString();
  for (;;) {
    StatusOr<StepResult> r = j->Step();
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    if (r->done) break;
  }
  StatusOr<std::map<std::string, double>> after = j->Evaluate();
  ASSERT_TRUE(after.ok()) << after.status().ToString();
  EXPECT_LT(before->at("accuracy"), 0.3);
  EXPECT_GT(after->at("accuracy"), min_accuracy);
  EXPECT_LT(after->at("loss"), 0.6 * before->at("loss"));
}

TEST(FashionMnist, ShortTrainingLearns) {
  const std::string root = "/usr/share/datasets";
  if (!std::filesystem::exists(root + "/fashion-mnist/train-images-idx3-ubyte.gz")) {
    GTEST_SKIP() << "dataset-fashion-mnist is not installed (scripts/install-deps installs it)";
  }
  std::string job = R"({
    "graph": )" + std::string(test::kFashionMlpGraph) + R"(,
    "loss": "loss",
    "optimizer": {"type": "adam", "learning_rate": 0.003},
    "input": {"format": "idx", "files": {"x": "fashion-mnist/train-images-idx3-ubyte.gz",
                                          "y": "fashion-mnist/train-labels-idx1-ubyte.gz"},
              "batch_size": 64, "epochs": 3, "max_examples": 3000},
    "eval": {"files": {"x": "fashion-mnist/t10k-images-idx3-ubyte.gz",
                       "y": "fashion-mnist/t10k-labels-idx1-ubyte.gz"},
             "metrics": ["accuracy", "loss"], "max_examples": 1000, "batch_size": 500},
    "seed": 11
  })";
  ExpectLearns(job, root, 0.7);
}

// examples/jobs/fashion_lstm.json on a subset: 3000 training examples in
// batches of `batch` for 2 epochs, evaluated on 1000, without checkpoints;
// `extra` (job fields and a comma) in their place.
std::string LstmOnASubset(int batch, const std::string& extra) {
  std::ifstream f(std::string(FLOWSTATE_SOURCE_DIR) + "/examples/jobs/fashion_lstm.json");
  std::string job((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  auto replace = [&](const std::string& from, const std::string& to) {
    const size_t at = job.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    if (at != std::string::npos) job.replace(at, from.size(), to);
  };
  replace(R"("batch_size": 128, "shuffle": true, "epochs": 3})",
          R"("batch_size": )" + std::to_string(batch) +
              R"(, "shuffle": true, "epochs": 2, "max_examples": 3000})");
  replace(R"("every_epochs": 1, "batch_size": 1000})",
          R"("every_epochs": 1, "batch_size": 500, "max_examples": 1000})");
  replace(R"("checkpoint": {"every_steps": 500, "keep": 3},)", extra);
  return job;
}

// The LSTM example (examples/jobs/fashion_lstm.json, a While over the 28
// rows of each image) on a subset: gradients through the loop must teach it
// far above chance.
TEST(FashionMnist, LstmExampleLearnsOnASubset) {
  const std::string root = "/usr/share/datasets";
  if (!std::filesystem::exists(root + "/fashion-mnist/train-images-idx3-ubyte.gz")) {
    GTEST_SKIP() << "dataset-fashion-mnist is not installed (scripts/install-deps installs it)";
  }
  ExpectLearns(LstmOnASubset(64, ""), root, 0.6);
}

// The same LSTM as two data-parallel replicas (the loop's gradients go
// through the all-reduce like any other): it learns, and the replicas end
// with the same bits in every variable (weights and Adam's slots).
TEST(FashionMnist, LstmExampleAsTwoReplicasLearnsAndStaysIdentical) {
  const std::string root = "/usr/share/datasets";
  if (!std::filesystem::exists(root + "/fashion-mnist/train-images-idx3-ubyte.gz")) {
    GTEST_SKIP() << "dataset-fashion-mnist is not installed (scripts/install-deps installs it)";
  }
  StatusOr<JobSpec> spec = ParseJobSpec(LstmOnASubset(32, R"("replicas": 2,)"));
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  TrainingJobOptions o;
  o.data_root = root;
  o.devices = server_test::TestPool(2);
  StatusOr<std::unique_ptr<TrainingJob>> j = TrainingJob::Create(*spec, o);
  ASSERT_TRUE(j.ok()) << j.status().ToString();
  ASSERT_TRUE((*j)->Start().ok());
  ASSERT_EQ((*j)->num_replicas(), 2);
  StatusOr<std::map<std::string, double>> before = (*j)->Evaluate();
  ASSERT_TRUE(before.ok()) << before.status().ToString();
  for (;;) {
    StatusOr<StepResult> r = (*j)->Step();
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    if (r->done) break;
  }
  StatusOr<std::map<std::string, double>> after = (*j)->Evaluate();
  ASSERT_TRUE(after.ok()) << after.status().ToString();
  EXPECT_LT(before->at("accuracy"), 0.3);
  EXPECT_GT(after->at("accuracy"), 0.6);
  const std::vector<std::string>& all = (*j)->graph().variables;
  std::vector<Tensor> first, second;
  ASSERT_TRUE((*j)->replica_session(0)->Run({}, all, {}, &first).ok());
  ASSERT_TRUE((*j)->replica_session(1)->Run({}, all, {}, &second).ok());
  ASSERT_EQ(first.size(), second.size());
  for (size_t k = 0; k < all.size(); ++k) EXPECT_TRUE(TensorsEqual(first[k], second[k])) << all[k];
}

}  // namespace
}  // namespace flowstate

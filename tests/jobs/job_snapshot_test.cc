// TrainingJob::Snapshot/Restore: a job snapshotted at step S and restored
// into a fresh TrainingJob reaches, at S + k, bit for bit the variables of an
// uninterrupted run (one thread) — with shuffling across epochs and Dropout,
// so the input position and the random streams both have to come back.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <random>

#include "scheduler/session.h"
#include "api/job_spec.h"
#include "jobs/training_job.h"

namespace flowstate {
namespace {

DevicePool* OneThreadPool() {
  static DevicePool* p = [] {
    DevicePoolOptions o;
    o.intra_op_threads = 1;
    return DevicePool::Create(o).value().release();
  }();
  return p;
}

class JobSnapshotTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("flowstate_snapshot_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(dir_);
    std::ofstream f(dir_ / "points.csv");
    f << "a,b,c,target\n";
    std::mt19937 rng(9);
    std::uniform_real_distribution<double> u(-1, 1);
    for (int i = 0; i < 100; ++i) {
      double a = u(rng), b = u(rng), c = u(rng);
      f << a << "," << b << "," << c << "," << (2 * a - 3 * b + c * c) << "\n";
    }
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  // A two-layer regression with Dropout on the hidden layer, Adam (slots
  // and a global step), shuffled batches of 16 over 100 examples (7 per
  // epoch, the last one short).
  std::string JobJson(int hidden = 8, int seed = 5) {
    const std::string h = std::to_string(hidden);
    return R"({
      "graph": {"nodes": [
        {"name": "x", "op": "Placeholder", "attrs": {"dtype": "float32", "shape": [-1, 3]}},
        {"name": "y", "op": "Placeholder", "attrs": {"dtype": "float32", "shape": [-1]}},
        {"name": "w1", "op": "Variable", "attrs": {"dtype": "float32", "shape": [3, )" + h + R"(], "init": "glorot_uniform"}},
        {"name": "b1", "op": "Variable", "attrs": {"dtype": "float32", "shape": [)" + h + R"(], "init": "zeros"}},
        {"name": "w2", "op": "Variable", "attrs": {"dtype": "float32", "shape": [)" + h + R"(, 1], "init": "glorot_uniform"}},
        {"name": "h0", "op": "MatMul", "inputs": ["x", "w1"]},
        {"name": "h1", "op": "BiasAdd", "inputs": ["h0", "b1"]},
        {"name": "h2", "op": "Relu", "inputs": ["h1"]},
        {"name": "drop", "op": "Dropout", "inputs": ["h2"], "attrs": {"rate": 0.3, "seed": 17}},
        {"name": "p", "op": "MatMul", "inputs": ["drop", "w2"]},
        {"name": "flat", "op": "Const", "attrs": {"dtype": "int32", "value": [-1]}},
        {"name": "pred", "op": "Reshape", "inputs": ["p", "flat"]},
        {"name": "sq", "op": "SquaredDifference", "inputs": ["pred", "y"]},
        {"name": "axes", "op": "Const", "attrs": {"dtype": "int32", "value": []}},
        {"name": "loss", "op": "Mean", "inputs": ["sq", "axes"]}
      ]},
      "loss": "loss",
      "optimizer": {"type": "adam", "learning_rate": 0.01},
      "input": {"format": "csv", "files": {"x": "points.csv", "y": "points.csv"},
                "columns": {"x": ["a", "b", "c"], "y": ["target"]}, "batch_size": 16,
                "epochs": 20, "shuffle": true},
      "seed": )" + std::to_string(seed) + R"(
    })";
  }

  std::unique_ptr<TrainingJob> NewJob(const std::string& json) {
    StatusOr<JobSpec> spec = ParseJobSpec(json);
    EXPECT_TRUE(spec.ok()) << spec.status().ToString();
    if (!spec.ok()) return nullptr;
    TrainingJobOptions o;
    o.data_root = dir_.string();
    o.devices = OneThreadPool();
    o.inter_op_threads = 1;
    StatusOr<std::unique_ptr<TrainingJob>> j = TrainingJob::Create(*spec, o);
    EXPECT_TRUE(j.ok()) << j.status().ToString();
    if (!j.ok()) return nullptr;
    Status s = (*j)->Start();
    EXPECT_TRUE(s.ok()) << s.ToString();
    return s.ok() ? std::move(j).value() : nullptr;
  }

  static void Run(TrainingJob* job, int64_t until) {
    while (job->step() < until) {
      StatusOr<StepResult> r = job->Step();
      ASSERT_TRUE(r.ok()) << r.status().ToString();
    }
  }

  // Every variable's value, deep-copied, by name.
  static std::vector<std::pair<std::string, Tensor>> Values(TrainingJob* job) {
    StatusOr<JobSnapshot> s = job->Snapshot();
    EXPECT_TRUE(s.ok()) << s.status().ToString();
    std::vector<std::pair<std::string, Tensor>> out;
    if (!s.ok()) return out;
    for (auto& [name, t] : s->variables) out.emplace_back(name, t.DeepCopy());
    return out;
  }

  // The snapshot as it comes back from a store: tensors copied, metadata
  // through its encoded form.
  static JobSnapshot StoredAndReadBack(const JobSnapshot& s) {
    JobSnapshot back;
    Status st = DecodeSnapshotMetadata(EncodeSnapshotMetadata(s), &back);
    EXPECT_TRUE(st.ok()) << st.ToString();
    for (const auto& [name, t] : s.variables) back.variables.emplace_back(name, t.DeepCopy());
    return back;
  }

  std::filesystem::path dir_;
};

// The hidden width differs: the error names w1, b1 or w2 with both shapes.
bool NamesAModelVariable(const Status& st) {
  const std::string& m = st.message();
  bool named = false;
  for (const char* v : {"'w1'", "'b1'", "'w2'"}) named = named || m.find(v) != std::string::npos;
  return named && m.find("4") != std::string::npos && m.find("8") != std::string::npos;
}

int CountDifferent(const std::vector<std::pair<std::string, Tensor>>& a,
                   const std::vector<std::pair<std::string, Tensor>>& b) {
  EXPECT_EQ(a.size(), b.size());
  int n = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    EXPECT_EQ(a[i].first, b[i].first);
    n += !TensorsEqual(a[i].second, b[i].second);
  }
  return n;
}

TEST_F(JobSnapshotTest, ResumedRunMatchesAnUninterruptedOneBitForBit) {
  constexpr int64_t kS = 23, kK = 30;  // S is mid-epoch 3; S+k crosses 4 epochs more
  auto uninterrupted = NewJob(JobJson());
  ASSERT_NE(uninterrupted, nullptr);
  Run(uninterrupted.get(), kS + kK);
  auto reference = Values(uninterrupted.get());

  auto first = NewJob(JobJson());
  ASSERT_NE(first, nullptr);
  Run(first.get(), kS);
  StatusOr<JobSnapshot> snap = first->Snapshot();
  ASSERT_TRUE(snap.ok()) << snap.status().ToString();
  EXPECT_EQ(snap->step, kS);
  EXPECT_EQ(snap->position, (PipelinePosition{3, 32}));
  EXPECT_TRUE(snap->kernel_states.count("drop")) << "Dropout's random stream is part of the snapshot";
  // Every variable: the model's, Adam's slots and the global step.
  EXPECT_EQ(snap->variables.size(), first->graph().variables.size());
  EXPECT_GT(snap->variables.size(), 3u * 3u);
  JobSnapshot stored = StoredAndReadBack(*snap);
  first.reset();  // the "crash"

  auto resumed = NewJob(JobJson());
  ASSERT_NE(resumed, nullptr);
  Status st = resumed->Restore(stored);
  ASSERT_TRUE(st.ok()) << st.ToString();
  EXPECT_EQ(resumed->step(), kS);
  Run(resumed.get(), kS + kK);
  EXPECT_EQ(CountDifferent(Values(resumed.get()), reference), 0);

  // The test can fail: without the random streams (Dropout starting over)
  // the run diverges.
  JobSnapshot no_rng = StoredAndReadBack(*snap);
  no_rng.kernel_states.clear();
  auto diverged = NewJob(JobJson());
  ASSERT_NE(diverged, nullptr);
  ASSERT_TRUE(diverged->Restore(no_rng).ok());
  Run(diverged.get(), kS + kK);
  EXPECT_GT(CountDifferent(Values(diverged.get()), reference), 0);
}

TEST_F(JobSnapshotTest, LaterStepsDoNotChangeASnapshot) {
  auto job = NewJob(JobJson());
  ASSERT_NE(job, nullptr);
  Run(job.get(), 5);
  StatusOr<JobSnapshot> snap = job->Snapshot();
  ASSERT_TRUE(snap.ok());
  std::vector<Tensor> copies;
  for (const auto& [name, t] : snap->variables) copies.push_back(t.DeepCopy());
  Run(job.get(), 9);
  auto now = Values(job.get());
  int changed = 0;
  for (size_t i = 0; i < copies.size(); ++i) {
    EXPECT_TRUE(TensorsEqual(snap->variables[i].second, copies[i])) << snap->variables[i].first;
    changed += !TensorsEqual(now[i].second, copies[i]);
  }
  EXPECT_GT(changed, 0) << "the job trained, so its variables moved on";
  EXPECT_EQ(snap->step, 5);
}

TEST_F(JobSnapshotTest, RestoreRefusesSnapshotsThatDoNotFit) {
  auto job = NewJob(JobJson());
  ASSERT_NE(job, nullptr);
  Run(job.get(), 2);
  JobSnapshot good = job->Snapshot().value();

  JobSnapshot missing = good;
  missing.variables.erase(missing.variables.begin());
  Status st = job->Restore(missing);
  EXPECT_EQ(st.code(), Code::kInvalidArgument);
  EXPECT_NE(st.message().find("'" + good.variables.front().first + "'"), std::string::npos)
      << st.ToString();

  auto other_shape = NewJob(JobJson(4));
  ASSERT_NE(other_shape, nullptr);
  st = other_shape->Restore(good);
  EXPECT_EQ(st.code(), Code::kInvalidArgument);
  EXPECT_TRUE(NamesAModelVariable(st)) << st.ToString();

  auto other_seed = NewJob(JobJson(8, 6));
  ASSERT_NE(other_seed, nullptr);
  st = other_seed->Restore(good);
  EXPECT_EQ(st.code(), Code::kFailedPrecondition);
  EXPECT_NE(st.message().find("seed"), std::string::npos) << st.ToString();
}

TEST_F(JobSnapshotTest, InitialValuesStartAJobFromAnotherOnesWeights) {
  auto source = NewJob(JobJson());
  ASSERT_NE(source, nullptr);
  Run(source.get(), 10);
  JobSnapshot snap = source->Snapshot().value();

  StatusOr<JobSpec> spec = ParseJobSpec(JobJson(8, 8));
  ASSERT_TRUE(spec.ok());
  StatusOr<TrainingGraph> g = BuildTrainingGraph(*spec);
  ASSERT_TRUE(g.ok());
  EXPECT_TRUE(CheckInitialValues(*g, snap.variables, "init_from").ok());
  TrainingJobOptions o;
  o.data_root = dir_.string();
  o.devices = OneThreadPool();
  auto tuned = TrainingJob::Create(*spec, o).value();
  tuned->SetInitialValues(snap.variables);
  ASSERT_TRUE(tuned->Start().ok());
  EXPECT_EQ(tuned->step(), 0);
  auto values = Values(tuned.get());
  for (const auto& [name, t] : values) {
    if (name != "w1" && name != "b1" && name != "w2") continue;
    for (const auto& [sname, st] : snap.variables) {
      if (sname == name) {
        EXPECT_TRUE(TensorsEqual(t, st)) << name;
      }
    }
  }

  // A variable the checkpoint lacks, or holds in another shape, is named.
  std::vector<std::pair<std::string, Tensor>> without_w2;
  for (const auto& v : snap.variables) {
    if (v.first != "w2") without_w2.push_back(v);
  }
  Status st = CheckInitialValues(*g, without_w2, "init_from");
  EXPECT_EQ(st.code(), Code::kInvalidArgument);
  EXPECT_NE(st.message().find("'w2'"), std::string::npos) << st.ToString();
  StatusOr<JobSpec> other = ParseJobSpec(JobJson(4));
  ASSERT_TRUE(other.ok());
  st = CheckInitialValues(BuildTrainingGraph(*other).value(), snap.variables, "init_from");
  EXPECT_EQ(st.code(), Code::kInvalidArgument);
  EXPECT_TRUE(NamesAModelVariable(st)) << st.ToString();
}

TEST(SnapshotMetadata, RoundTripsAndRefusesOtherText) {
  JobSnapshot s;
  s.step = 41;
  s.position = {2, 48};
  s.seed = 0xfedcba9876543210ull;
  s.kernel_states = {{"drop", std::string("a\0b", 3)}, {"r", "philox4x32 1 2 3 4"}};
  JobSnapshot back;
  ASSERT_TRUE(DecodeSnapshotMetadata(EncodeSnapshotMetadata(s), &back).ok());
  EXPECT_EQ(back.step, 41);
  EXPECT_EQ(back.position, s.position);
  EXPECT_EQ(back.seed, s.seed);
  EXPECT_EQ(back.kernel_states, s.kernel_states);
  for (const char* bad : {"", "{}", "[1]", R"({"format": "flowstate.job_snapshot.v1"})",
                          R"({"format": "flowstate.job_snapshot.v1", "step": 1, "epoch": 0,
                              "offset": 0, "seed": "x"})"}) {
    EXPECT_EQ(DecodeSnapshotMetadata(bad, &back).code(), Code::kInvalidArgument) << bad;
  }
}

}  // namespace
}  // namespace flowstate

// JobManager's history and traces (job_manager.h, "History and traces"):
// a job's steps and evaluations, kept across a restart on the same store
// and removed with the job; exactly the asked steps traced; bounded for a
// long job; NOT_FOUND for an unknown job or an untraced step.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <set>

#include "checkpoints/store.h"
#include "jobs/job_manager.h"
#include "jobs/step_history.h"
#include "tests/jobs/job_store_fixture.h"
#include "tests/server/server_test_util.h"

namespace flowstate {
namespace {

class JobHistoryTest : public server_test::JobStoreFixture {
 protected:
  JobHistoryTest() : JobStoreFixture("flowstate_job_history") {}

  void OpenStore() {
    StatusOr<std::unique_ptr<checkpoints::Store>> s = checkpoints::Store::Open((dir_ / "db").string());
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    store_ = std::move(s).value();
  }

  JobManager* NewManager(bool with_store = true) {
    JobManagerOptions o;
    o.devices = server_test::TestPool(1);
    o.data_root = (dir_ / "data").string();
    o.store = with_store ? store_.get() : nullptr;
    managers_.push_back(std::make_unique<JobManager>(o));
    return managers_.back().get();
  }

  static std::string JobJson(int epochs, const std::string& extra) {
    return R"({
      "name": "line",
      "graph": )" + server_test::LinearGraphJson(false) + R"(,
      "loss": "loss",
      "optimizer": {"type": "adam", "learning_rate": 0.05},
      "input": {"format": "csv", "files": {"x": "points.csv", "y": "points.csv"},
                "columns": {"x": ["a", "b"], "y": ["target"]}, "batch_size": 8,
                "epochs": )" + std::to_string(epochs) + R"(},
      "eval": {"files": {"x": "points.csv", "y": "points.csv"}, "metrics": ["loss"]},
      "seed": 3)" + extra + "}";
  }

  static JobInfo WaitFinished(JobManager* m, const std::string& id) {
    return WaitFor(m, id, [](const JobInfo& j) { return IsTerminal(j.state); });
  }
};

TEST_F(JobHistoryTest, StepsAndEvaluationsSurviveARestartAndGoWithTheJob) {
  OpenStore();
  std::string id;
  JobHistory before;
  {
    JobManager* m = NewManager();
    id = m->Submit(JobJson(3, R"(, "trace": {"steps": [3, 2]})")).value().id;
    JobInfo done = WaitFinished(m, id);
    ASSERT_EQ(done.state, JobState::kSucceeded) << done.error;
    ASSERT_EQ(done.step, 24);  // 64 rows, batches of 8, 3 epochs
    before = m->History(id).value();
    EXPECT_EQ(before.job_id, id);
    ASSERT_EQ(before.steps.size(), 24u);
    for (size_t i = 0; i < before.steps.size(); ++i) {
      EXPECT_EQ(before.steps[i].step, int64_t(i + 1));
      EXPECT_EQ(before.steps[i].epoch, int64_t(i / 8));
      EXPECT_GT(before.steps[i].examples_per_sec, 0);
      EXPECT_GT(before.steps[i].time, 1.7e9);
    }
    EXPECT_LT(before.steps.back().loss, before.steps.front().loss) << "it learns";
    ASSERT_EQ(before.evals.size(), 3u) << "one per epoch";
    for (size_t i = 0; i < 3; ++i) {
      EXPECT_EQ(before.evals[i].step, int64_t(8 * (i + 1)));
      EXPECT_EQ(before.evals[i].metrics.count("loss"), 1u);
    }
    EXPECT_FALSE(before.downsampled);
    EXPECT_EQ(m->TracedSteps(id).value(), (std::vector<int64_t>{2, 3})) << "exactly the asked steps";
    Status missing = m->Trace(id, 4).status();
    EXPECT_EQ(missing.code(), Code::kNotFound);
    EXPECT_NE(missing.message().find("step 4"), std::string::npos) << missing.message();
    EXPECT_NE(missing.message().find("2, 3"), std::string::npos) << missing.message();
    EXPECT_EQ(m->History("job-404").status().code(), Code::kNotFound);
    EXPECT_EQ(m->Trace("job-404", 2).status().code(), Code::kNotFound);
  }
  managers_.clear();  // the server stops
  JobManager* m = NewManager();
  ASSERT_TRUE(m->Recover().ok());
  JobHistory after = m->History(id).value();
  ASSERT_EQ(after.steps.size(), before.steps.size());
  EXPECT_EQ(after.steps.back().step, 24);
  EXPECT_DOUBLE_EQ(after.steps.back().loss, before.steps.back().loss);
  ASSERT_EQ(after.evals.size(), 3u);
  EXPECT_DOUBLE_EQ(after.evals[2].metrics.at("loss"), before.evals[2].metrics.at("loss"));
  ASSERT_EQ(m->TracedSteps(id).value(), (std::vector<int64_t>{2, 3}));
  StatusOr<std::string> trace = m->Trace(id, 2);
  ASSERT_TRUE(trace.ok()) << trace.status().ToString();
  nlohmann::json t = nlohmann::json::parse(*trace);
  EXPECT_EQ(t["displayTimeUnit"], "ms");
  EXPECT_EQ(t["otherData"]["step"], 2);
  std::set<std::string> ops;
  for (const auto& e : t["traceEvents"]) {
    if (e["ph"] == "X") ops.insert(e["cat"].get<std::string>());
  }
  EXPECT_TRUE(ops.count("MatMul")) << "the forward pass";
  EXPECT_TRUE(ops.count("step"));

  // Deleted with the job: nothing of it stays in the store.
  ASSERT_TRUE(m->Delete(id).ok());
  EXPECT_EQ(m->History(id).status().code(), Code::kNotFound);
  using Kind = checkpoints::Store::Kind;
  EXPECT_EQ(store_->GetRecord(Kind::kMeta, "history/" + id).status().code(), Code::kNotFound);
  EXPECT_EQ(store_->GetRecord(Kind::kMeta, "trace/" + id + "/2").status().code(), Code::kNotFound);
  EXPECT_EQ(store_->GetRecord(Kind::kMeta, "trace/" + id + "/3").status().code(), Code::kNotFound);
}

TEST_F(JobHistoryTest, ALongJobsHistoryIsBoundedAndReachesItsLastStep) {
  JobManager* m = NewManager(/*with_store=*/false);
  std::string id = m->Submit(JobJson(1000, R"(, "max_steps": 4500, "trace": {"steps": [4500]})")).value().id;
  JobInfo done = WaitFinished(m, id);
  ASSERT_EQ(done.state, JobState::kSucceeded) << done.error;
  ASSERT_EQ(done.step, 4500);
  JobHistory h = m->History(id).value();
  EXPECT_TRUE(h.downsampled);
  EXPECT_LE(h.steps.size(), StepHistory::kMaxPoints + 1);
  EXPECT_GE(h.steps.size(), StepHistory::kMaxPoints / 2);
  EXPECT_EQ(h.steps.back().step, 4500);
  EXPECT_GE(h.evals.size(), 562u) << "every evaluation is kept (one per epoch of 8 steps)";
  EXPECT_TRUE(m->Trace(id, 4500).ok()) << "in memory without a store";
}

}  // namespace
}  // namespace flowstate

// The training loop shared by `flowstate train` and the job manager
// (jobs/training_loop.h): when it evaluates (every_epochs, the last epoch,
// a max_steps stop) and that the manager evaluates a real job at the same
// steps as the loop driven directly, as `flowstate train` drives it.
#include <gtest/gtest.h>

#include <chrono>
#include <map>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "jobs/job_manager.h"
#include "jobs/training_job.h"
#include "jobs/training_loop.h"
#include "tests/jobs/job_store_fixture.h"
#include "tests/server/server_test_util.h"

namespace flowstate {
namespace {

using namespace std::chrono_literals;
using Next = TrainingLoop::Next;

std::optional<EvalSpec> EvalEvery(int64_t n) {
  EvalSpec e;
  e.every_epochs = n;
  return e;
}

// The steps after which a job of `epochs` x `per_epoch` steps (stopped at
// `max_steps` when > 0) evaluates, with the StepResults TrainingJob gives;
// checks that the loop finishes right after the last step (and its
// evaluation) and never asks for anything after that.
std::vector<int64_t> EvaluatedAfter(const std::optional<EvalSpec>& eval, int64_t epochs, int64_t per_epoch,
                                    int64_t max_steps = 0) {
  int64_t total = epochs * per_epoch;
  if (max_steps > 0) total = std::min(total, max_steps);
  TrainingLoop loop;
  std::vector<int64_t> out;
  int64_t step = 0;
  while (loop.next() != Next::kFinish) {
    if (loop.next() == Next::kEvaluate) {
      out.push_back(step);
      loop.AfterEvaluate();
      continue;
    }
    EXPECT_LT(step, total) << "a step after the last one";
    if (step >= total) break;
    StepResult r;
    r.step = ++step;
    r.epoch = (step - 1) / per_epoch;
    r.epoch_end = step % per_epoch == 0;
    r.done = step == total;
    EXPECT_EQ(loop.AfterStep(eval, r) == Next::kEvaluate, EvalDue(eval, r));
  }
  EXPECT_EQ(step, total);
  return out;
}

TEST(TrainingLoop, EvaluatesEveryNEpochsAndOnceAtTheEnd) {
  using V = std::vector<int64_t>;
  EXPECT_EQ(EvaluatedAfter(EvalEvery(1), 3, 4), (V{4, 8, 12}));
  EXPECT_EQ(EvaluatedAfter(EvalEvery(2), 5, 4), (V{8, 16, 20})) << "the last epoch, not a multiple, too";
  EXPECT_EQ(EvaluatedAfter(EvalEvery(2), 4, 4), (V{8, 16})) << "the last epoch is evaluated once";
  EXPECT_EQ(EvaluatedAfter(EvalEvery(3), 2, 4), (V{8}));
  EXPECT_EQ(EvaluatedAfter(EvalEvery(1), 3, 4, /*max_steps=*/6), (V{4, 6})) << "a max_steps stop mid-epoch";
  EXPECT_EQ(EvaluatedAfter(EvalEvery(1), 3, 4, /*max_steps=*/8), (V{4, 8}));
  EXPECT_EQ(EvaluatedAfter(EvalEvery(1), 1, 1), (V{1}));
  EXPECT_EQ(EvaluatedAfter(std::nullopt, 3, 4), V{}) << "no eval set: never";
  EXPECT_EQ(EvaluatedAfter(std::nullopt, 3, 4, 5), V{});
}

TEST(TrainingLoop, EvalDueCases) {
  StepResult mid;  // inside epoch 0
  mid.step = 1;
  StepResult end_of_2nd;  // the step that ends epoch 1 (the 2nd)
  end_of_2nd.epoch = 1;
  end_of_2nd.epoch_end = true;
  StepResult last_mid_epoch;  // max_steps reached inside an epoch
  last_mid_epoch.done = true;
  EXPECT_FALSE(EvalDue(EvalEvery(1), mid));
  EXPECT_TRUE(EvalDue(EvalEvery(1), end_of_2nd));
  EXPECT_TRUE(EvalDue(EvalEvery(2), end_of_2nd));
  EXPECT_FALSE(EvalDue(EvalEvery(3), end_of_2nd));
  EXPECT_TRUE(EvalDue(EvalEvery(3), last_mid_epoch));
  EXPECT_FALSE(EvalDue(std::nullopt, end_of_2nd));
  EXPECT_FALSE(EvalDue(std::nullopt, last_mid_epoch));
}

class TrainingLoopJobTest : public server_test::JobStoreFixture {
 protected:
  TrainingLoopJobTest() : JobStoreFixture("flowstate_training_loop") {}
};

TEST_F(TrainingLoopJobTest, TheManagerEvaluatesWhereTheTrainCommandsLoopDoes) {
  // 5 epochs of 4 steps, evaluated every 2 epochs.
  std::string json = server_test::JobJson(5, "eval");
  json.replace(json.find("\"seed\""), 0,
               R"("eval": {"format": "csv", "files": {"x": "points.csv"}, "columns": {"x": ["a", "b"]},
                           "metrics": ["loss"], "every_epochs": 2}, )");
  const std::string data_root = (dir_ / "data").string();

  // As `flowstate train` drives it: TrainingJob through TrainingLoop.
  std::vector<int64_t> direct_steps;
  std::map<std::string, double> direct_metrics;
  {
    TrainingJobOptions o;
    o.data_root = data_root;
    o.devices = server_test::TestPool(1);
    o.inter_op_threads = 1;
    std::unique_ptr<TrainingJob> job = TrainingJob::Create(ParseJobSpec(json).value(), o).value();
    ASSERT_TRUE(job->Start().ok());
    TrainingLoop loop;
    while (loop.next() != Next::kFinish) {
      if (loop.next() == Next::kEvaluate) {
        direct_metrics = job->Evaluate().value();
        direct_steps.push_back(job->step());
        loop.AfterEvaluate();
        continue;
      }
      StatusOr<StepResult> r = job->Step();
      ASSERT_TRUE(r.ok()) << r.status().ToString();
      loop.AfterStep(job->spec().eval, *r);
    }
  }
  EXPECT_EQ(direct_steps, (std::vector<int64_t>{8, 16, 20}));

  // The job manager.
  JobManagerOptions o;
  o.devices = server_test::TestPool(1);
  o.data_root = data_root;
  managers_.push_back(std::make_unique<JobManager>(o));
  JobManager* m = managers_.back().get();
  std::string id = m->Submit(json).value().id;
  auto deadline = std::chrono::steady_clock::now() + 60s;
  JobInfo done = m->Get(id).value();
  while (!IsTerminal(done.state) && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(2ms);
    done = m->Get(id).value();
  }
  ASSERT_EQ(JobStateName(done.state), "SUCCEEDED") << done.error;
  std::vector<int64_t> manager_steps;
  auto w = m->Watch(id, /*history=*/true).value();
  while (std::optional<JobEvent> e = w->Next(200ms)) {
    if (e->kind == JobEvent::Kind::kEval) manager_steps.push_back(e->info.step);
  }
  EXPECT_EQ(manager_steps, direct_steps);
  ASSERT_EQ(done.metrics.count("loss"), 1u);
  EXPECT_NEAR(done.metrics.at("loss"), direct_metrics.at("loss"), 1e-6)
      << "the same run, the same final evaluation";
}

}  // namespace
}  // namespace flowstate

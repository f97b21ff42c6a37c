// StepHistory (jobs/step_history.h): the bound and the downsampling rule,
// evaluations, truncation after a resume, and a stored history continued.
#include "jobs/step_history.h"

#include <gtest/gtest.h>

#include <cmath>

#include "api/views_json.h"

namespace flowstate {
namespace {

TEST(StepHistory, KeepsEveryStepUntilFullThenEveryOtherOne) {
  StepHistory h;
  for (int64_t s = 1; s <= 1999; ++s) h.AddStep(s, 0, 1.0 / double(s), 32, 0.01, 1000.0 + double(s));
  JobHistory v = h.View("job-1");
  EXPECT_EQ(v.job_id, "job-1");
  ASSERT_EQ(v.steps.size(), 1999u);
  EXPECT_FALSE(v.downsampled);
  EXPECT_EQ(v.steps[41].step, 42);
  EXPECT_DOUBLE_EQ(v.steps[41].loss, 1.0 / 42);
  EXPECT_DOUBLE_EQ(v.steps[41].examples_per_sec, 3200);
  EXPECT_DOUBLE_EQ(v.steps[41].time, 1042);
  h.AddStep(2000, 0, 0.5, 32, 0.01, 3000);  // full: every other one goes
  v = h.View("job-1");
  EXPECT_TRUE(v.downsampled);
  EXPECT_EQ(v.stride, 2);
  ASSERT_EQ(v.steps.size(), 1000u);
  for (size_t i = 0; i < v.steps.size(); ++i) EXPECT_EQ(v.steps[i].step, int64_t(2 * (i + 1)));
}

TEST(StepHistory, ALongJobStaysBoundedEvenlySpacedAndReachesItsLastStep) {
  StepHistory h;
  const int64_t n = 1000003;
  for (int64_t s = 1; s <= n; ++s) h.AddStep(s, s / 1000, 2.0, 10, 0.001, double(s));
  JobHistory v = h.View("j");
  EXPECT_LE(v.steps.size(), StepHistory::kMaxPoints + 1);
  EXPECT_GE(v.steps.size(), StepHistory::kMaxPoints / 2);
  EXPECT_TRUE(v.downsampled);
  EXPECT_EQ(v.stride, 512);  // 1,000,003 / 512: 1953 kept (below 2000), plus the last
  for (size_t i = 0; i + 1 < v.steps.size(); ++i) EXPECT_EQ(v.steps[i].step % v.stride, 0) << i;
  EXPECT_EQ(v.steps.back().step, n) << "the curve reaches the current step";
}

TEST(StepHistory, EvaluationsAreAllKeptSkippedStepsAreNotAndTruncateForgetsLaterOnes) {
  StepHistory h;
  for (int64_t s = 1; s <= 30; ++s) {
    h.AddStep(s, (s - 1) / 10, s == 7 ? std::nan("") : 1.0, 8, 0.1, double(s));
    if (s % 10 == 0) h.AddEval(s, (s - 1) / 10, {{"accuracy", 0.1 * double(s / 10)}}, double(s));
  }
  JobHistory v = h.View("j");
  EXPECT_EQ(v.steps.size(), 29u) << "the NaN step is not a point";
  ASSERT_EQ(v.evals.size(), 3u);
  EXPECT_DOUBLE_EQ(v.evals[2].metrics.at("accuracy"), 0.30000000000000004);
  const uint64_t version = h.version();
  h.TruncateAfter(30);
  EXPECT_EQ(h.version(), version) << "nothing removed";
  h.TruncateAfter(15);
  v = h.View("j");
  EXPECT_EQ(v.steps.back().step, 15);
  EXPECT_EQ(v.evals.size(), 1u);
  EXPECT_NE(h.version(), version);
}

TEST(StepHistory, AStoredHistoryContinuesWithItsStride) {
  StepHistory h;
  for (int64_t s = 1; s <= 4001; ++s) h.AddStep(s, 0, 1.0, 1, 1, 1);
  h.AddEval(4001, 0, {{"loss", 0.25}}, 5);
  // Through the stored JSON, as a restart reads it.
  StatusOr<JobHistory> stored = JobHistoryFromJson(JobHistoryRecordToJson(h.View("j")));
  ASSERT_TRUE(stored.ok()) << stored.status().ToString();
  StepHistory again(*stored);
  EXPECT_EQ(again.stride(), h.stride());
  EXPECT_EQ(again.View("j").steps.size(), h.View("j").steps.size());
  EXPECT_EQ(again.version(), 0u);
  for (int64_t s = 4002; s <= 8000; ++s) {
    again.AddStep(s, 0, 1.0, 1, 1, 1);
    h.AddStep(s, 0, 1.0, 1, 1, 1);
  }
  JobHistory a = again.View("j"), b = h.View("j");
  ASSERT_EQ(a.steps.size(), b.steps.size());
  for (size_t i = 0; i < a.steps.size(); ++i) EXPECT_EQ(a.steps[i].step, b.steps[i].step) << i;
  EXPECT_EQ(a.evals.size(), 1u);
}

}  // namespace
}  // namespace flowstate

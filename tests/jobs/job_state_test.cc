// The job state machine (jobs/job_state.h): every (state, action) pair is
// allowed or refused as the lifecycle says, with the API's texts; and the
// job manager's public methods (Pause, Resume, Cancel) refuse exactly what
// the table refuses, from a job really in each state.
#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <map>
#include <set>
#include <thread>
#include <tuple>

#include "jobs/job_manager.h"
#include "jobs/job_state.h"
#include "tests/jobs/job_store_fixture.h"
#include "tests/server/server_test_util.h"

namespace flowstate {
namespace {

using namespace std::chrono_literals;
using S = JobState;
using A = JobAction;

// The lifecycle, written out again independently of jobs/job_state.cc.
const std::map<std::pair<S, A>, S>& Expected() {
  static const auto* m = new std::map<std::pair<S, A>, S>{
      {{S::kQueued, A::kAdmit}, S::kRunning},     {{S::kQueued, A::kPause}, S::kPaused},
      {{S::kRunning, A::kPause}, S::kPaused},     {{S::kPaused, A::kResume}, S::kQueued},
      {{S::kQueued, A::kCancel}, S::kCancelled},  {{S::kRunning, A::kCancel}, S::kCancelled},
      {{S::kPaused, A::kCancel}, S::kCancelled},  {{S::kRunning, A::kSucceed}, S::kSucceeded},
      {{S::kQueued, A::kFail}, S::kFailed},       {{S::kRunning, A::kFail}, S::kFailed},
      {{S::kPaused, A::kFail}, S::kFailed},       {{S::kRunning, A::kRequeue}, S::kQueued},
  };
  return *m;
}

TEST(JobStateMachine, EveryStateAndActionIsAllowedOrRefusedAsTheLifecycleSays) {
  int allowed = 0;
  for (S s : kAllJobStates) {
    for (A a : kAllJobActions) {
      SCOPED_TRACE(std::string(JobStateName(s)) + " + " + std::string(JobActionName(a)));
      auto want = Expected().find({s, a});
      std::optional<S> next = JobStateMachine::Next(s, a);
      Status check = JobStateMachine::Check(s, a, "job-7");
      if (want != Expected().end()) {
        ++allowed;
        ASSERT_TRUE(next.has_value());
        EXPECT_EQ(*next, want->second);
        EXPECT_TRUE(check.ok()) << check.ToString();
      } else {
        EXPECT_FALSE(next.has_value()) << "to " << JobStateName(*next);
        EXPECT_EQ(check.code(), Code::kFailedPrecondition);
        EXPECT_NE(check.message().find("job 'job-7' is "), std::string::npos) << check.message();
        EXPECT_NE(check.message().find(JobStateName(s)), std::string::npos) << check.message();
      }
    }
  }
  EXPECT_EQ(allowed, int(Expected().size()));
  EXPECT_EQ(JobStateMachine::Table().size(), Expected().size());
  // Nothing leaves a finished state.
  for (const auto& t : JobStateMachine::Table()) EXPECT_FALSE(IsTerminal(t.from));
}

TEST(JobStateMachine, RefusalsKeepTheApisTexts) {
  EXPECT_EQ(JobStateMachine::Check(S::kSucceeded, A::kCancel, "job-1").message(),
            "job 'job-1' is already SUCCEEDED");
  EXPECT_EQ(JobStateMachine::Check(S::kCancelled, A::kPause, "job-1").message(),
            "job 'job-1' is CANCELLED; only queued or running jobs can be paused");
  EXPECT_EQ(JobStateMachine::Check(S::kRunning, A::kResume, "job-1").message(),
            "job 'job-1' is RUNNING; only paused jobs can be resumed");
}

TEST(JobStateMachine, ACancelOutranksAPendingPause) {
  EXPECT_EQ(JobStateMachine::Merge(std::nullopt, A::kPause), A::kPause);
  EXPECT_EQ(JobStateMachine::Merge(std::nullopt, A::kCancel), A::kCancel);
  EXPECT_EQ(JobStateMachine::Merge(A::kPause, A::kCancel), A::kCancel);
  EXPECT_EQ(JobStateMachine::Merge(A::kCancel, A::kPause), A::kCancel);
}

class JobStateManagerTest : public server_test::JobStoreFixture {
 protected:
  JobStateManagerTest() : JobStoreFixture("flowstate_job_state") {}

  JobManager* NewManager() {
    JobManagerOptions o;
    o.devices = server_test::TestPool(1);
    o.data_root = (dir_ / "data").string();
    o.max_running = 1;
    o.workers = 1;
    managers_.push_back(std::make_unique<JobManager>(o));
    return managers_.back().get();
  }

  // A job that runs far longer than the test (its manager stops it).
  static std::string LongJob() { return server_test::JobJson(100000, "long"); }
  // A job whose loss overflows within a few steps (on_nan "fail").
  static std::string FailingJob() {
    std::string j = server_test::JobJson(50, "nan");
    return j.replace(j.find("0.1"), 3, "1e18");
  }

  // A fresh manager with a job in state `s` (and, for QUEUED and PAUSED, a
  // long job holding the only running slot ahead of it).
  std::pair<JobManager*, std::string> JobIn(S s) {
    JobManager* m = NewManager();
    auto submit = [&](const std::string& json) { return m->Submit(json).value().id; };
    auto running = [](const JobInfo& j) { return j.state == S::kRunning && j.step > 0; };
    std::string id;
    switch (s) {
      case S::kRunning:
        id = submit(LongJob());
        EXPECT_TRUE(running(WaitFor(m, id, running)));
        return {m, id};
      case S::kSucceeded:
      case S::kFailed:
        id = submit(s == S::kFailed ? FailingJob() : server_test::JobJson(1));
        EXPECT_EQ(WaitFor(m, id, [](const JobInfo& j) { return IsTerminal(j.state); }).state, s);
        return {m, id};
      default:
        break;
    }
    std::string blocker = submit(LongJob());
    EXPECT_TRUE(running(WaitFor(m, blocker, running)));
    id = submit(server_test::JobJson(1));
    EXPECT_EQ(m->Get(id).value().state, S::kQueued);
    if (s == S::kPaused) {
      EXPECT_TRUE(m->Pause(id).ok());
    }
    if (s == S::kCancelled) {
      EXPECT_TRUE(m->Cancel(id).ok());
    }
    EXPECT_EQ(m->Get(id).value().state, s);
    return {m, id};
  }
};

TEST_F(JobStateManagerTest, PauseResumeAndCancelRefuseWhatTheTableRefuses) {
  const std::map<A, std::function<Status(JobManager*, const std::string&)>> calls = {
      {A::kPause, [](JobManager* m, const std::string& id) { return m->Pause(id); }},
      {A::kResume, [](JobManager* m, const std::string& id) { return m->Resume(id); }},
      {A::kCancel, [](JobManager* m, const std::string& id) { return m->Cancel(id); }},
  };
  for (S s : kAllJobStates) {
    for (const auto& [a, call] : calls) {
      SCOPED_TRACE(std::string(JobStateName(s)) + " + " + std::string(JobActionName(a)));
      auto [m, id] = JobIn(s);
      ASSERT_EQ(m->Get(id).value().state, s);
      Status got = call(m, id);
      Status want = JobStateMachine::Check(s, a, id);
      EXPECT_EQ(got.code(), want.code()) << got.ToString();
      EXPECT_EQ(got.message(), want.message());
      // An allowed action reaches the table's state (a running job's at
      // the end of its step); a refused one changes nothing.
      S expected = JobStateMachine::Next(s, a).value_or(s);
      JobInfo after = WaitFor(m, id, [&](const JobInfo& j) { return j.state == expected; });
      EXPECT_EQ(JobStateName(after.state), JobStateName(expected));
      managers_.clear();
    }
  }
}

TEST_F(JobStateManagerTest, ResumeWithdrawsAPauseAskedDuringAStep) {
  JobManager* m = NewManager();
  std::string id = m->Submit(LongJob()).value().id;
  WaitFor(m, id, [](const JobInfo& j) { return j.step > 0; });
  // Whether the pause is still pending or already applied, the resume is
  // allowed and the job ends up training again.
  ASSERT_TRUE(m->Pause(id).ok());
  ASSERT_TRUE(m->Resume(id).ok());
  int64_t step = m->Get(id).value().step;
  JobInfo j = WaitFor(m, id, [&](const JobInfo& j) { return j.state == S::kRunning && j.step > step + 2; });
  EXPECT_EQ(JobStateName(j.state), "RUNNING");
  EXPECT_GT(j.step, step + 2);
}

}  // namespace
}  // namespace flowstate

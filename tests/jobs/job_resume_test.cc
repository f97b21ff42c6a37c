// JobManager after a crash at each point of a job's life, in
// process: a manager's fault_point hook (jobs/fault_points.h) copies the
// job's stored records at the point -- what a SIGKILL there would have
// left -- the run goes on to its end, then the records are put back as
// they were at the point and a new manager recovers from them. The job
// must end as the uninterrupted run did (SUCCEEDED at its last step with
// the same metrics, no step past it), a pause or cancel asked before the
// point must be kept, and every event of the history must keep the values
// of its own moment, before and after the restart.
// tests/integration/crash_points.py does the same with real SIGKILLs.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "api/views_json.h"
#include "checkpoints/store.h"
#include "jobs/fault_points.h"
#include "jobs/job_manager.h"
#include "tests/jobs/job_store_fixture.h"
#include "tests/server/server_test_util.h"

namespace flowstate {
namespace {

using namespace std::chrono_literals;
using checkpoints::Store;

class JobResumeTest : public server_test::JobStoreFixture {
 protected:
  JobResumeTest() : JobStoreFixture("flowstate_job_resume") {}

  void SetUp() override {
    JobStoreFixture::SetUp();
    StatusOr<std::unique_ptr<Store>> s = Store::Open((dir_ / "db").string());
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    store_ = std::move(s).value();
  }

  // A manager whose fault point `crash_at` (empty: none) copies the
  // records of every job and its history the first time it is reached.
  JobManager* NewManager(const std::string& crash_at = "") {
    JobManagerOptions o;
    o.devices = server_test::TestPool(1);
    o.data_root = (dir_ / "data").string();
    o.store = store_.get();
    o.max_step_events_per_second = 1000;
    if (!crash_at.empty()) {
      o.fault_point = [this, crash_at](std::string_view point, int64_t) {
        std::lock_guard<std::mutex> l(mu_);
        points_.emplace_back(point);
        if (point != crash_at || !at_crash_.empty()) return;
        std::vector<std::pair<std::string, std::string>> records =
            store_->ListRecords(Store::Kind::kJobs).value();
        for (const auto& [id, text] : records) {
          at_crash_[{Store::Kind::kJobs, id}] = text;
          StatusOr<std::string> h = store_->GetRecord(Store::Kind::kMeta, "history/" + id);
          if (h.ok()) at_crash_[{Store::Kind::kMeta, "history/" + id}] = *h;
        }
      };
    }
    managers_.push_back(std::make_unique<JobManager>(o));
    return managers_.back().get();
  }

  // Ends the managers, puts the records back as they were at the crash,
  // and recovers them with a new manager.
  JobManager* RestartFromCrash() {
    managers_.clear();
    EXPECT_FALSE(at_crash_.empty()) << "the fault point was not reached";
    for (const auto& [key, text] : at_crash_) {
      EXPECT_TRUE(store_->PutRecord(key.first, key.second, text).ok());
    }
    JobManager* m = NewManager();
    Status st = m->Recover();
    EXPECT_TRUE(st.ok()) << st.ToString();
    return m;
  }

  // 2 epochs of 8 steps, a checkpoint every 5 steps (not at the last one),
  // an evaluation after each epoch.
  // `every_steps`: the checkpoint policy's interval.
  static std::string JobJson(int epochs = 2, int every_steps = 5) {
    return R"({
      "name": "line",
      "graph": )" + server_test::LinearGraphJson(false) + R"(,
      "loss": "loss",
      "optimizer": {"type": "adam", "learning_rate": 0.05},
      "input": {"format": "csv", "files": {"x": "points.csv", "y": "points.csv"},
                "columns": {"x": ["a", "b"], "y": ["target"]}, "batch_size": 8,
                "epochs": )" + std::to_string(epochs) + R"(},
      "eval": {"files": {"x": "points.csv", "y": "points.csv"}, "metrics": ["loss"], "every_epochs": 1},
      "checkpoint": {"every_steps": )" + std::to_string(every_steps) + R"(, "keep": 10},
      "seed": 3
    })";
  }

  static JobInfo WaitFinished(JobManager* m, const std::string& id) {
    return WaitFor(m, id, [](const JobInfo& j) { return IsTerminal(j.state); });
  }

  // The replayed history (without the stream's closing current state).
  static std::vector<JobEvent> History(JobManager* m, const std::string& id) {
    auto w = m->Watch(id, true).value();
    std::vector<JobEvent> out;
    while (std::optional<JobEvent> e = w->Next(200ms)) {
      if (e->kind == JobEvent::Kind::kStep) break;
      out.push_back(*e);
    }
    if (!out.empty()) out.pop_back();
    return out;
  }

  static int EvalsAt(JobManager* m, const std::string& id, int64_t step) {
    int n = 0;
    const JobHistory h = m->History(id).value();
    for (const JobHistoryEval& e : h.evals) n += e.step == step;
    return n;
  }

  // The job's uninterrupted run: its final view.
  JobInfo Uninterrupted() {
    JobManager* m = NewManager();
    JobInfo j = WaitFinished(m, m->Submit(JobJson()).value().id);
    managers_.clear();
    return j;
  }

  std::mutex mu_;
  std::vector<std::string> points_;
  std::map<std::pair<Store::Kind, std::string>, std::string> at_crash_;
};

TEST_F(JobResumeTest, TheFaultPointsComeInTheOrderOfTheJobsLife) {
  JobManager* m = NewManager(/*crash_at=*/"none");
  JobInfo j = WaitFinished(m, m->Submit(JobJson()).value().id);
  ASSERT_EQ(j.state, JobState::kSucceeded) << j.error;
  managers_.clear();
  // Policy checkpoints are written on the writer's thread: one may be
  // reported after the last step's "step-done". The rest is in order.
  std::vector<std::string> points;
  for (const std::string& p : points_) {
    if (p != "checkpoint-write:policy") points.push_back(p);
  }
  ASSERT_GE(points.size(), 5u);
  std::vector<std::string> tail(points.end() - 5, points.end());
  EXPECT_EQ(tail, (std::vector<std::string>{"step-done", "checkpoint-write:final", "final-checkpoint-written",
                                            "final-evaluation", "final-evaluation-recorded"}))
      << "the last step's checkpoint before the final evaluation";
  int steps = 0;
  for (const std::string& p : points_) steps += p == fault_points::kStepDone;
  EXPECT_EQ(steps, 16);
  EXPECT_NE(std::find(points_.begin(), points_.end(), "checkpoint-write:policy"), points_.end());
  EXPECT_NE(std::find(points_.begin(), points_.end(), "checkpoint-write:final"), points_.end());
}

// The crash this guards against: training complete, the job not marked finished.
// Before, the job resumed at its last step, tried one more and FAILED
// ("the job has finished").
TEST_F(JobResumeTest, AJobKilledAfterItsLastStepFinishesWithTheSameMetrics) {
  const JobInfo want = Uninterrupted();
  ASSERT_EQ(want.state, JobState::kSucceeded) << want.error;
  ASSERT_EQ(want.step, 16);
  for (std::string_view point : {fault_points::kFinalCheckpointWritten, fault_points::kFinalEvaluation,
                                 fault_points::kFinalEvaluationRecorded}) {
    SCOPED_TRACE(std::string(point));
    at_crash_.clear();
    JobManager* m = NewManager(std::string(point));
    const std::string id = m->Submit(JobJson()).value().id;
    ASSERT_EQ(WaitFinished(m, id).state, JobState::kSucceeded);
    m = RestartFromCrash();
    JobInfo j = WaitFinished(m, id);
    EXPECT_EQ(j.state, JobState::kSucceeded) << j.error;
    EXPECT_EQ(j.error, "");
    EXPECT_EQ(j.step, 16) << "no step past the last one";
    EXPECT_EQ(j.resumed_from_step, 16);
    EXPECT_EQ(j.checkpoint_step, 16);
    ASSERT_EQ(j.metrics.count("loss"), 1u);
    EXPECT_DOUBLE_EQ(j.metrics.at("loss"), want.metrics.at("loss"));
    EXPECT_EQ(EvalsAt(m, id, 16), 1) << "the final evaluation once, not again when it was recorded";
    EXPECT_EQ(EvalsAt(m, id, 8), 1);
    std::vector<JobCheckpointInfo> list = m->ListCheckpoints(id).value();
    ASSERT_FALSE(list.empty());
    EXPECT_EQ(list.back().step, 16);
    // It predicts with its final variables.
    std::vector<Tensor> out;
    Tensor probe = Tensor::FromVector<float>({0.5f, -0.25f}, TensorShape({1, 2}));
    EXPECT_TRUE(m->Predict(id, {{"x", probe}}, {"pred"}, &out).ok());
  }
}

// Killed after an epoch's checkpoint and before that epoch's evaluation:
// the evaluation is not skipped.
TEST_F(JobResumeTest, AnEpochsEvaluationDueAtTheCheckpointIsNotSkipped) {
  const JobInfo want = Uninterrupted();
  // every_steps 8: the policy's one checkpoint is at step 8, the end of epoch 0.
  std::string job = JobJson();
  job.replace(job.find("\"every_steps\": 5"), 16, "\"every_steps\": 8");
  JobManager* m = NewManager();
  const std::string id = m->Submit(job).value().id;
  JobInfo done = WaitFinished(m, id);
  ASSERT_EQ(done.state, JobState::kSucceeded);
  managers_.clear();
  // The store as a crash between step 8's checkpoint and its evaluation
  // leaves it: RUNNING at step 8, no evaluation recorded, checkpoints up to 8.
  StatusOr<JobRecord> r = JobRecordFromJson(store_->GetRecord(Store::Kind::kJobs, id).value());
  ASSERT_TRUE(r.ok());
  r->info.state = JobState::kRunning;
  r->info.metrics.clear();
  r->info.step = 8;
  r->info.finished = 0;
  r->history.clear();
  ASSERT_TRUE(store_->PutRecord(Store::Kind::kJobs, id, JobRecordToJson(*r)).ok());
  ASSERT_TRUE(store_->DeleteRecord(Store::Kind::kMeta, "history/" + id).ok());
  const std::vector<checkpoints::CheckpointInfo> stored = store_->ListCheckpoints(id).value();
  for (const checkpoints::CheckpointInfo& c : stored) {
    if (c.step > 8) {
      ASSERT_TRUE(store_->DeleteCheckpoint(id, c.step).ok());
    }
  }
  m = NewManager();
  ASSERT_TRUE(m->Recover().ok());
  JobInfo j = WaitFinished(m, id);
  EXPECT_EQ(j.state, JobState::kSucceeded) << j.error;
  EXPECT_EQ(j.resumed_from_step, 8);
  EXPECT_EQ(EvalsAt(m, id, 8), 1) << "epoch 0's evaluation after the restart";
  EXPECT_EQ(EvalsAt(m, id, 16), 1);
  EXPECT_DOUBLE_EQ(j.metrics.at("loss"), want.metrics.at("loss"));
}

// A pause or cancel asked during a step is kept when the server dies
// before the step ends (or while the pause's checkpoint is written).
TEST_F(JobResumeTest, APendingPauseOrCancelIsKeptAcrossTheRestart) {
  struct Case {
    std::string point;
    bool cancel;
    JobState want;
  };
  for (const Case& c : {Case{"pause-pending", false, JobState::kPaused},
                        Case{"cancel-pending", true, JobState::kCancelled},
                        Case{"checkpoint-write:pause", false, JobState::kPaused}}) {
    SCOPED_TRACE(c.point);
    at_crash_.clear();
    JobManager* m = NewManager(c.point);
    // Without policy checkpoints where the pause's own is the fault point:
    // a policy one at the step the pause lands on would make it needless.
    const int every = c.point == "checkpoint-write:pause" ? 1000000 : 5;
    const std::string id = m->Submit(JobJson(/*epochs=*/5000, every)).value().id;
    ASSERT_EQ(WaitFor(m, id, [](const JobInfo& j) { return j.step >= 12; }).state, JobState::kRunning);
    ASSERT_TRUE((c.cancel ? m->Cancel(id) : m->Pause(id)).ok());
    EXPECT_EQ(WaitFor(m, id, [](const JobInfo& j) { return j.state != JobState::kRunning; }).state, c.want);
    m = RestartFromCrash();
    JobInfo j = m->Get(id).value();
    EXPECT_EQ(j.state, c.want) << "the request asked before the crash was lost";
    bool said = false;
    for (const JobEvent& e : History(m, id)) {
      said |= e.kind == JobEvent::Kind::kState && e.info.state == c.want;
    }
    EXPECT_TRUE(said) << "the history shows the state change";
    if (c.want == JobState::kPaused) {
      ASSERT_TRUE(m->Resume(id).ok());
      j = WaitFor(m, id, [](const JobInfo& j) { return j.state == JobState::kRunning && j.resumed_from_step >= 0; });
      EXPECT_EQ(j.state, JobState::kRunning);
      ASSERT_TRUE(m->Cancel(id).ok());
    }
    WaitFinished(m, id);
  }
}

// Issue 31, part 3: the events of a job's history keep the values of their
// own moment -- also after a restart, where they were given the job's
// final loss, metrics and error before -- and the replay after the
// restart reads exactly as the stream did live.
TEST_F(JobResumeTest, EventsKeepTheirOwnValuesLiveAndAfterARestart) {
  JobManager* m = NewManager();
  const std::string id = m->Submit(JobJson(/*epochs=*/3)).value().id;
  auto live = m->Watch(id, true).value();
  JobInfo done = WaitFinished(m, id);
  ASSERT_EQ(done.state, JobState::kSucceeded) << done.error;
  std::vector<std::string> streamed;
  while (std::optional<JobEvent> e = live->Next(2s)) {
    if (e->kind != JobEvent::Kind::kStep) streamed.push_back(JobEventDataToJson(*e));
  }
  std::vector<JobEvent> before = History(m, id);
  managers_.clear();
  m = NewManager();
  ASSERT_TRUE(m->Recover().ok());
  std::vector<JobEvent> after = History(m, id);
  ASSERT_EQ(after.size(), before.size());
  std::vector<double> eval_losses;
  for (size_t i = 0; i < after.size(); ++i) {
    EXPECT_EQ(JobEventDataToJson(after[i]), JobEventDataToJson(before[i])) << "event " << i;
    const JobInfo& e = after[i].info;
    if (after[i].kind == JobEvent::Kind::kEval) eval_losses.push_back(e.metrics.at("loss"));
    if (eval_losses.empty()) {
      EXPECT_TRUE(e.metrics.empty()) << "event " << i << " before any evaluation";
    }
    if (after[i].kind == JobEvent::Kind::kCheckpoint && e.checkpoint_step >= 0) {
      EXPECT_NE(after[i].message.find("step " + std::to_string(e.checkpoint_step) + " "), std::string::npos)
          << after[i].message;
    }
  }
  ASSERT_EQ(eval_losses.size(), 3u);
  EXPECT_NE(eval_losses[0], eval_losses[2]) << "each evaluation shows its own metrics";
  EXPECT_EQ(after.front().info.step, 0);
  EXPECT_EQ(after.front().info.loss, 0);
  // The live stream (its replay of what came before it, its opening
  // current state, then the events as they happened) is the history.
  ASSERT_EQ(streamed.size(), before.size() + 1);
  size_t k = 0;
  while (k < before.size() && streamed[k] == JobEventDataToJson(before[k])) ++k;
  streamed.erase(streamed.begin() + k);  // the stream's opening current state
  for (size_t i = 0; i < streamed.size(); ++i) {
    EXPECT_EQ(streamed[i], JobEventDataToJson(before[i])) << "streamed event " << i;
  }
}

}  // namespace
}  // namespace flowstate

// JobManager with a Store: checkpoints by policy, on demand, at pause and
// at the end; jobs reloaded by a new manager on the same store (resume,
// queued, finished jobs that still predict); failed writes; init_from;
// export and import.
#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <random>
#include <thread>

#include "checkpoints/store.h"
#include "jobs/job_manager.h"
#include "tests/jobs/job_store_fixture.h"
#include "tests/server/server_test_util.h"

namespace flowstate {
namespace {

using namespace std::chrono_literals;

DevicePool* Pool() { return server_test::TestPool(1); }

class JobPersistenceTest : public server_test::JobStoreFixture {
 protected:
  JobPersistenceTest() : JobStoreFixture("flowstate_persist") {}

  void OpenStore() {
    checkpoints::StoreOptions so;
    so.fail_writes = [this] { return fail_.load(); };
    StatusOr<std::unique_ptr<checkpoints::Store>> s = checkpoints::Store::Open((dir_ / "db").string(), so);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    store_ = std::move(s).value();
  }

  JobManager* NewManager() {
    JobManagerOptions o;
    o.devices = Pool();
    o.data_root = (dir_ / "data").string();
    o.store = store_.get();
    o.max_step_events_per_second = 1000;
    managers_.push_back(std::make_unique<JobManager>(o));
    return managers_.back().get();
  }

  static std::string JobJson(int epochs, const std::string& checkpoint, const std::string& extra = "") {
    return R"({
      "name": "line",
      "graph": )" + server_test::LinearGraphJson(false) + R"(,
      "loss": "loss",
      "optimizer": {"type": "adam", "learning_rate": 0.05},
      "input": {"format": "csv", "files": {"x": "points.csv", "y": "points.csv"},
                "columns": {"x": ["a", "b"], "y": ["target"]}, "batch_size": 8,
                "epochs": )" + std::to_string(epochs) + R"(},
      "checkpoint": )" + checkpoint + extra + R"(,
      "seed": 3
    })";
  }

  static JobInfo WaitFinished(JobManager* m, const std::string& id) {
    return WaitFor(m, id, [](const JobInfo& j) { return IsTerminal(j.state); });
  }

  // The job's notable events so far (the history replay and its current
  // state), stopping at the first live step summary.
  static std::vector<JobEvent> History(JobManager* m, const std::string& id) {
    auto w = m->Watch(id, true).value();
    std::vector<JobEvent> out;
    while (std::optional<JobEvent> e = w->Next(200ms)) {
      if (e->kind == JobEvent::Kind::kStep) break;
      out.push_back(*e);
    }
    return out;
  }

  std::atomic<bool> fail_{false};
};

TEST_F(JobPersistenceTest, PolicyAndFinalCheckpointsWithRetention) {
  OpenStore();
  JobManager* m = NewManager();
  JobInfo j = m->Submit(JobJson(4, R"({"every_steps": 5, "keep": 2})")).value();
  JobInfo done = WaitFinished(m, j.id);
  ASSERT_EQ(done.state, JobState::kSucceeded) << done.error;
  EXPECT_EQ(done.step, 32);
  EXPECT_EQ(done.checkpoint_step, 32) << "a finished job has a final checkpoint";
  EXPECT_GT(done.checkpoint_bytes, 0);
  EXPECT_EQ(done.checkpoint_failures, 0);
  std::vector<JobCheckpointInfo> list = m->ListCheckpoints(j.id).value();
  ASSERT_EQ(list.size(), 2u) << "keep: 2";
  EXPECT_LT(list[0].step, 32);
  EXPECT_EQ(list[1].step, 32);
  // Policy checkpoints at least 5 steps apart (one that falls due while the
  // previous one is being written waits for it), then the final one.
  std::vector<int64_t> steps;
  for (const JobEvent& e : History(m, j.id)) {
    if (e.kind != JobEvent::Kind::kCheckpoint) continue;
    EXPECT_NE(e.message.find("written"), std::string::npos) << e.message;
    steps.push_back(e.info.checkpoint_step);
  }
  ASSERT_GE(steps.size(), 2u);
  EXPECT_EQ(steps.back(), 32);
  for (size_t i = 1; i + 1 < steps.size(); ++i) EXPECT_GE(steps[i] - steps[i - 1], 5) << i;
}

TEST_F(JobPersistenceTest, RestartResumesRunningJobsAndFinishedOnesStillPredict) {
  OpenStore();
  std::string running_id, finished_id;
  std::vector<Tensor> finished_prediction;
  Tensor probe = Tensor::FromVector<float>({0.5f, -0.25f}, TensorShape({1, 2}));
  {
    JobManager* m = NewManager();
    finished_id = m->Submit(JobJson(1, R"({"keep": 1})")).value().id;
    ASSERT_EQ(WaitFinished(m, finished_id).state, JobState::kSucceeded);
    ASSERT_TRUE(m->Predict(finished_id, {{"x", probe}}, {"pred"}, &finished_prediction).ok());
    running_id = m->Submit(JobJson(20000, R"({"every_steps": 7})")).value().id;
    JobInfo j = WaitFor(m, running_id, [](const JobInfo& j) { return j.step >= 20; });
    ASSERT_EQ(j.state, JobState::kRunning);
    m->Shutdown();  // clean: checkpoints where it stopped
  }
  JobInfo before = managers_.back()->Get(running_id).value();
  EXPECT_EQ(before.checkpoint_step, before.step) << "the shutdown checkpoint";
  managers_.clear();

  JobManager* m = NewManager();
  ASSERT_TRUE(m->Recover().ok());
  ASSERT_EQ(m->List().size(), 2u);
  // The finished job: readable, and it predicts with its final variables.
  JobInfo fin = m->Get(finished_id).value();
  EXPECT_EQ(fin.state, JobState::kSucceeded);
  EXPECT_EQ(fin.step, 8);
  std::vector<Tensor> again;
  Status st = m->Predict(finished_id, {{"x", probe}}, {"pred"}, &again);
  ASSERT_TRUE(st.ok()) << st.ToString();
  EXPECT_TRUE(TensorsEqual(again[0], finished_prediction[0]));
  // The running job: back to RUNNING from the step it had reached.
  JobInfo r = WaitFor(m, running_id, [](const JobInfo& j) { return j.resumed_from_step >= 0; });
  EXPECT_EQ(r.resumed_from_step, before.step);
  EXPECT_EQ(r.state, JobState::kRunning);
  bool resume_event = false;
  for (const JobEvent& e : History(m, running_id)) {
    if (e.kind == JobEvent::Kind::kResume) {
      resume_event = true;
      EXPECT_NE(e.message.find("step " + std::to_string(before.step)), std::string::npos) << e.message;
    }
  }
  EXPECT_TRUE(resume_event);
  // New ids continue after the reloaded ones.
  JobInfo next = m->Submit(JobJson(1, "{}")).value();
  EXPECT_EQ(next.id, "job-3");
  ASSERT_TRUE(m->Cancel(running_id).ok());
}

TEST_F(JobPersistenceTest, FailedWritesAreReportedAndThePreviousCheckpointStays) {
  OpenStore();
  JobManager* m = NewManager();
  JobInfo j = m->Submit(JobJson(20000, R"({"every_steps": 3})")).value();
  JobInfo first = WaitFor(m, j.id, [](const JobInfo& j) { return j.checkpoint_step >= 3; });
  ASSERT_GE(first.checkpoint_step, 3);
  ASSERT_TRUE(m->Pause(j.id).ok());
  JobInfo paused = WaitFor(m, j.id, [](const JobInfo& j) { return j.state == JobState::kPaused; });
  ASSERT_EQ(paused.state, JobState::kPaused);
  int64_t good = WaitFor(m, j.id, [&](const JobInfo& i) { return i.checkpoint_step == paused.step; })
                     .checkpoint_step;
  EXPECT_EQ(good, paused.step) << "pausing writes a checkpoint";

  fail_ = true;
  ASSERT_TRUE(m->Resume(j.id).ok());
  JobInfo failing = WaitFor(m, j.id, [](const JobInfo& j) { return j.checkpoint_failures >= 2; });
  EXPECT_GE(failing.checkpoint_failures, 2);
  EXPECT_FALSE(failing.checkpoint_error.empty());
  EXPECT_EQ(failing.state, JobState::kRunning) << "training goes on";
  EXPECT_EQ(failing.checkpoint_step, good);
  std::vector<JobCheckpointInfo> list = m->ListCheckpoints(j.id).value();
  ASSERT_FALSE(list.empty());
  EXPECT_EQ(list.back().step, good);
  EXPECT_TRUE(store_->ReadCheckpoint(j.id, good).ok()) << "the previous checkpoint stays valid";
  bool failure_event = false;
  for (const JobEvent& e : History(m, j.id)) {
    failure_event = failure_event ||
                    (e.kind == JobEvent::Kind::kCheckpoint && e.message.find("failed") != std::string::npos);
  }
  EXPECT_TRUE(failure_event);

  fail_ = false;
  JobInfo healed = WaitFor(m, j.id, [&](const JobInfo& j) { return j.checkpoint_step > good; });
  EXPECT_GT(healed.checkpoint_step, good) << "writes succeed again once the disk is back: "
                                          << JobStateName(healed.state) << " " << healed.checkpoint_error;
  ASSERT_TRUE(m->Cancel(j.id).ok());
}

TEST_F(JobPersistenceTest, OnDemandInitFromExportAndImport) {
  OpenStore();
  JobManager* m = NewManager();
  JobInfo src = m->Submit(JobJson(2, "{}")).value();
  ASSERT_EQ(WaitFinished(m, src.id).state, JobState::kSucceeded);
  // On demand, of an idle (finished) job: written before the call returns.
  StatusOr<CheckpointRequestResult> c = m->Checkpoint(src.id);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_TRUE(c->written);
  EXPECT_EQ(c->step, 16);
  EXPECT_EQ(m->Checkpoint("job-99").status().code(), Code::kNotFound);

  // init_from: a missing checkpoint and a graph that does not fit are 400s.
  StatusOr<JobInfo> bad = m->Submit(JobJson(1, "{}", R"(, "init_from": {"job": ")" + src.id + R"(", "step": 5})"));
  EXPECT_EQ(bad.status().code(), Code::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("no checkpoint at step 5"), std::string::npos) << bad.status().ToString();
  std::string other = JobJson(1, "{}", R"(, "init_from": {"job": ")" + src.id + R"(", "step": 16})");
  other.replace(other.find("\"shape\": [2, 1]"), 15, "\"shape\": [2, 2]");
  bad = m->Submit(other);
  EXPECT_EQ(bad.status().code(), Code::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("'w'"), std::string::npos) << bad.status().ToString();

  // Fine-tuning starts from the source's weights: its first loss is the
  // trained model's, far below a fresh start's.
  JobInfo tuned = m->Submit(JobJson(1, "{}", R"(, "init_from": {"job": ")" + src.id + R"(", "step": 16})")).value();
  JobInfo fresh = m->Submit(JobJson(1, "{}")).value();
  ASSERT_EQ(WaitFinished(m, tuned.id).state, JobState::kSucceeded);
  ASSERT_EQ(WaitFinished(m, fresh.id).state, JobState::kSucceeded);
  EXPECT_LT(m->Get(tuned.id)->loss, m->Get(fresh.id)->loss);

  // Export, import under a new id, and start a job from the import.
  std::string file = (dir_ / "src.fsck").string();
  ASSERT_TRUE(m->ExportCheckpoint(src.id, 16, file).ok());
  EXPECT_EQ(m->ExportCheckpoint(src.id, 7, file).code(), Code::kNotFound);
  StatusOr<std::pair<std::string, int64_t>> imp = m->ImportCheckpoint(file);
  ASSERT_TRUE(imp.ok()) << imp.status().ToString();
  EXPECT_EQ(imp->first, "import-1");
  EXPECT_EQ(imp->second, 16);
  EXPECT_EQ(m->ListCheckpoints("import-1").value().size(), 1u);
  JobInfo from_import = m->Submit(JobJson(1, "{}", R"(, "init_from": {"job": "import-1", "step": 16})")).value();
  ASSERT_EQ(WaitFinished(m, from_import.id).state, JobState::kSucceeded);
  std::ofstream(dir_ / "junk.fsck") << "not a checkpoint";
  EXPECT_EQ(m->ImportCheckpoint((dir_ / "junk.fsck").string()).status().code(), Code::kInvalidArgument);
}

TEST_F(JobPersistenceTest, EverySecondsAndOnDemandWhileRunning) {
  OpenStore();
  JobManager* m = NewManager();
  JobInfo j = m->Submit(JobJson(20000, R"({"every_seconds": 0.05})")).value();
  auto t0 = std::chrono::steady_clock::now();
  JobInfo first = WaitFor(m, j.id, [](const JobInfo& j) { return j.checkpoint_step >= 0; });
  ASSERT_GE(first.checkpoint_step, 0);
  EXPECT_GE(std::chrono::steady_clock::now() - t0, 40ms) << "not before every_seconds";
  JobInfo later = WaitFor(m, j.id, [&](const JobInfo& j) { return j.checkpoint_step > first.checkpoint_step; });
  EXPECT_GT(later.checkpoint_step, first.checkpoint_step) << "and again after it";
  // On demand while it runs: snapshotted at a step boundary, written behind.
  StatusOr<CheckpointRequestResult> c = m->Checkpoint(j.id);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_FALSE(c->written);
  JobInfo written = WaitFor(m, j.id, [&](const JobInfo& i) { return i.checkpoint_step >= c->step; });
  EXPECT_GE(written.checkpoint_step, c->step);
  EXPECT_TRUE(store_->ReadCheckpoint(j.id, c->step).ok());
  ASSERT_TRUE(m->Cancel(j.id).ok());
  JobInfo cancelled = WaitFinished(m, j.id);
  EXPECT_EQ(cancelled.state, JobState::kCancelled);
  WaitFor(m, j.id, [&](const JobInfo& i) { return i.checkpoint_step == cancelled.step; });
  EXPECT_EQ(m->Get(j.id)->checkpoint_step, cancelled.step) << "cancelling writes a checkpoint";
}

TEST_F(JobPersistenceTest, ASecondStoreOnTheSameDirectoryIsRefused) {
  OpenStore();
  StatusOr<std::unique_ptr<checkpoints::Store>> second = checkpoints::Store::Open((dir_ / "db").string());
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), Code::kFailedPrecondition);
  EXPECT_NE(second.status().message().find("in use"), std::string::npos) << second.status().ToString();
}

}  // namespace
}  // namespace flowstate

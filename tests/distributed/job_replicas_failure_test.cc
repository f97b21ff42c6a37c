// Replicas on the tasks of a cluster when a task goes away: a JobManager job whose replicas run on the 3
// tasks of a LocalCluster, with a checkpoint store; task 2 is stopped
// mid-training. With min_replicas 2 the job resumes from its last
// checkpoint with tasks 0 and 1 (a "resume" event names the step and the
// tasks) and succeeds, its replicas agreeing (a checksum every step); the
// task, restarted, rejoins at the next checkpoint. With min_replicas 3 the
// job waits, and fails naming the task after replica_wait_seconds, or
// resumes with all three when the task comes back. With tables shared by
// the replicas, the lost task's parts come back from the checkpoint.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <thread>

#include "checkpoints/store.h"
#include "distributed/collective_store.h"
#include "distributed/gloo_collective.h"
#include "graph/mutex.h"
#include "jobs/job_manager.h"
#include "tests/distributed/local_cluster.h"
#include "tests/distributed/replica_job_options.h"
#include "tests/server/server_test_util.h"

namespace flowstate {
namespace {

using Clock = std::chrono::steady_clock;
using testing::LocalCluster;

std::string Task(int i) { return "/job:worker/replica:0/task:" + std::to_string(i) + "/device:CPU:0"; }

class ReplicaFailures : public ::testing::Test {
 protected:
  void SetUp() override {
    RegisterGlooCollectiveFactory();
    dir_ = server_test::FreshTestDir("flowstate_replica_failures");
    server_test::WritePointsCsv(dir_ / "points.csv", 100, 7,
                                [](double a, double b) { return 2 * a - 3 * b + 0.5; });
    StatusOr<int> port = store_.Start("127.0.0.1", 0);
    ASSERT_TRUE(port.ok()) << port.status().ToString();
    store_address_ = "127.0.0.1:" + std::to_string(*port);
    StatusOr<std::unique_ptr<checkpoints::Store>> s = checkpoints::Store::Open((dir_ / "db").string());
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    checkpoints_ = std::move(s).value();
  }
  void TearDown() override {
    jobs_.reset();
    checkpoints_.reset();
    std::filesystem::remove_all(dir_);
  }

  // 100 rows, batches of 8, 3 replicas: 5 steps an epoch; a checkpoint
  // every 10 steps, the replicas compared every step.
  std::string Job(int min_replicas, double wait_seconds, int epochs = 40) {
    return R"({
      "graph": )" + server_test::LinearGraphJson(true) + R"(,
      "loss": "loss",
      "optimizer": {"type": "adam", "learning_rate": 0.02},
      "input": {"format": "csv", "files": {"x": "points.csv", "y": "points.csv"},
                "columns": {"x": ["a", "b"], "y": ["target"]}, "batch_size": 8,
                "epochs": )" + std::to_string(epochs) + R"(},
      "checkpoint": {"every_steps": 10},
      "replicas": 3, "devices": [")" + Task(0) + R"(", ")" + Task(1) + R"(", ")" + Task(2) + R"("],
      "min_replicas": )" + std::to_string(min_replicas) + R"(,
      "replica_wait_seconds": )" + std::to_string(wait_seconds) + R"(,
      "check_replicas_every": 1,
      "seed": 5
    })";
  }

  JobManager* Manager(LocalCluster* cluster) {
    JobManagerOptions o;
    o.devices = cluster->task(0).pool.get();
    o.data_root = dir_.string();
    o.store = checkpoints_.get();
    o.max_history_events = 1000;
    o.remote = [cluster] { return static_cast<ClusterView*>(cluster->task(0).cluster.get()); };
    o.collective_store = [this] { return store_address_; };
    o.drop_collective_prefix = [this](const std::string& p) {
      MutexLock l(dropped_mu_);
      dropped_.push_back(p);
      store_.DropPrefix(p);
    };
    jobs_ = std::make_unique<JobManager>(o);
    return jobs_.get();
  }

  // Polls the job until `pred` holds; fails the test after `seconds`.
  static JobInfo WaitFor(JobManager* m, const std::string& id, double seconds,
                         const std::function<bool(const JobInfo&)>& pred, const char* what) {
    const auto deadline = Clock::now() + std::chrono::duration<double>(seconds);
    for (;;) {
      JobInfo j = m->Get(id).value();
      if (pred(j)) return j;
      if (Clock::now() > deadline) {
        ADD_FAILURE() << "not within " << seconds << " s: " << what << " (job " << JobStateName(j.state)
                      << " at step " << j.step << ", error: " << j.error << ")";
        return j;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
  static bool Finished(const JobInfo& j) { return IsTerminal(j.state); }

  // The job's notable events so far (messages of `kind`).
  std::vector<std::string> Events(const std::string& id, JobEvent::Kind kind) {
    std::vector<std::string> out;
    StatusOr<std::unique_ptr<JobEventStream>> s = jobs_->Watch(id, true);
    EXPECT_TRUE(s.ok());
    if (!s.ok()) return out;
    while (std::optional<JobEvent> e = (*s)->Next(std::chrono::milliseconds(0))) {
      if (e->kind == kind && !e->message.empty()) out.push_back(e->message);
    }
    return out;
  }
  static std::string All(const std::vector<std::string>& v) {
    std::string out;
    for (const std::string& s : v) out += "\n  " + s;
    return out;
  }
  static bool Contains(const std::vector<std::string>& v, const std::string& a, const std::string& b = "") {
    for (const std::string& s : v) {
      if (s.find(a) != std::string::npos && s.find(b) != std::string::npos) return true;
    }
    return false;
  }

  std::filesystem::path dir_;
  CollectiveStoreService store_;
  std::string store_address_;
  std::unique_ptr<checkpoints::Store> checkpoints_;
  std::unique_ptr<JobManager> jobs_;
  Mutex dropped_mu_;
  std::vector<std::string> dropped_ ABSL_GUARDED_BY(dropped_mu_);
};

TEST_F(ReplicaFailures, ALostTaskResumesFromTheCheckpointWithTheOthersAndRejoins) {
  LocalCluster cluster(3, 1, 60, dir_.string());
  JobManager* jobs = Manager(&cluster);
  // The reference: the same job, uninterrupted.
  StatusOr<JobInfo> ref = jobs->Submit(Job(/*min_replicas=*/2, 30));
  ASSERT_TRUE(ref.ok()) << ref.status().ToString();
  const JobInfo uninterrupted = WaitFor(jobs, ref->id, 120, Finished, "the reference job finishing");
  ASSERT_EQ(uninterrupted.state, JobState::kSucceeded) << uninterrupted.error;
  StatusOr<JobInfo> info = jobs->Submit(Job(/*min_replicas=*/2, 30));
  ASSERT_TRUE(info.ok()) << info.status().ToString();
  const std::string id = info->id;
  const JobInfo before = WaitFor(
      jobs, id, 60, [](const JobInfo& j) { return j.checkpoint_step >= 10 || IsTerminal(j.state); },
      "a checkpoint at step 10");
  cluster.Stop(2);
  const auto stopped = Clock::now();
  // Resumed with tasks 0 and 1 from a checkpoint.
  const std::string with_two =
      "with 2 of 3 replicas, on /job:worker/task:0, /job:worker/task:1 (lost: /job:worker/task:2";
  JobInfo j = WaitFor(jobs, id, 60, [&](const JobInfo& j) {
    return IsTerminal(j.state) || Contains(Events(id, JobEvent::Kind::kResume), with_two);
  }, "a resume with 2 replicas");
  ASSERT_EQ(j.state, JobState::kRunning) << j.error;
  std::vector<std::string> resumes = Events(id, JobEvent::Kind::kResume);
  EXPECT_TRUE(Contains(resumes, "resumed from the checkpoint at step ", with_two)) << All(resumes);
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - stopped).count(), 20.0)
      << "detecting the lost task and resuming took too long";
  EXPECT_GE(j.resumed_from_step, 10);
  // The job's view says so (GET /v1/jobs/{id}: replicas, replicas_alive, restarts).
  EXPECT_EQ(j.replicas, 3);
  EXPECT_EQ(j.replicas_alive, 2);
  EXPECT_GE(j.restarts, 1);
  // The lost step was announced, and the first membership's keys dropped.
  EXPECT_TRUE(Contains(Events(id, JobEvent::Kind::kState), "the replicas are rebuilt"));
  {
    MutexLock l(dropped_mu_);
    ASSERT_FALSE(dropped_.empty());
    EXPECT_EQ(dropped_.front(), id + "/m0");
  }

  // Task 2 comes back: it rejoins at the job's next checkpoint.
  cluster.Restart(2);
  j = WaitFor(jobs, id, 60, [&](const JobInfo& j) {
    return IsTerminal(j.state) || Contains(Events(id, JobEvent::Kind::kResume), "rejoined: /job:worker/task:2");
  }, "task 2 rejoining");
  resumes = Events(id, JobEvent::Kind::kResume);
  EXPECT_TRUE(Contains(resumes, "with 3 of 3 replicas", "rejoined: /job:worker/task:2")) << All(resumes);

  j = WaitFor(jobs, id, 120, Finished, "the job finishing");
  // Every step compared the replicas' checksums: a difference would fail it.
  EXPECT_EQ(j.state, JobState::kSucceeded) << j.error;
  EXPECT_EQ(j.step, j.total_steps);
  EXPECT_LT(j.loss, before.loss / 4) << "it went on learning";
  // Every membership trained on the job's global batches from its
  // checkpoints: the run is the uninterrupted one's, within float tolerance.
  EXPECT_EQ(j.step, uninterrupted.step);
  EXPECT_NEAR(j.loss, uninterrupted.loss, 1e-3 * (1 + uninterrupted.loss));
  if (HasFailure()) std::printf("resume events:%s\n", All(resumes).c_str());
}

// With tables shared by the replicas (each part on one task), a lost task
// loses the parts it held: the job resumes from its last checkpoint (the
// logical tables, taken at a chunk's end) with tasks 0 and 1 holding the
// parts between them, the task rejoins later, and the run ends as the
// uninterrupted one does.
TEST_F(ReplicaFailures, ALostTaskWithSharedTablesResumesFromTheCheckpoint) {
  testing::WriteIdsCsv(dir_);
  const std::string job = R"({
    "graph": )" + testing::EmbeddingGraphJson() + R"(,
    "loss": "loss",
    "optimizer": {"type": "adam", "learning_rate": 0.02},
    "input": )" + testing::IdsInputJson(50, false) + R"(,
    "checkpoint": {"every_steps": 10},
    "replicas": 3, "devices": [")" + Task(0) + R"(", ")" + Task(1) + R"(", ")" + Task(2) + R"("],
    "partitioned_tables": "shared",
    "min_replicas": 2, "replica_wait_seconds": 30,
    "check_replicas_every": 1,
    "seed": 5
  })";
  LocalCluster cluster(3, 1, 60, dir_.string());
  JobManager* jobs = Manager(&cluster);
  StatusOr<JobInfo> ref = jobs->Submit(job);
  ASSERT_TRUE(ref.ok()) << ref.status().ToString();
  const JobInfo uninterrupted = WaitFor(jobs, ref->id, 120, Finished, "the reference job finishing");
  ASSERT_EQ(uninterrupted.state, JobState::kSucceeded) << uninterrupted.error;
  StatusOr<JobInfo> info = jobs->Submit(job);
  ASSERT_TRUE(info.ok()) << info.status().ToString();
  const std::string id = info->id;
  WaitFor(jobs, id, 60, [](const JobInfo& j) { return j.checkpoint_step >= 10 || IsTerminal(j.state); },
          "a checkpoint at step 10");
  cluster.Stop(2);
  JobInfo j = WaitFor(jobs, id, 60, [&](const JobInfo& j) {
    return IsTerminal(j.state) || Contains(Events(id, JobEvent::Kind::kResume), "with 2 of 3 replicas");
  }, "a resume with 2 replicas");
  ASSERT_EQ(j.state, JobState::kRunning) << j.error;
  EXPECT_GE(j.resumed_from_step, 10);
  cluster.Restart(2);
  j = WaitFor(jobs, id, 60, [&](const JobInfo& j) {
    return IsTerminal(j.state) || Contains(Events(id, JobEvent::Kind::kResume), "rejoined: /job:worker/task:2");
  }, "task 2 rejoining");
  j = WaitFor(jobs, id, 120, Finished, "the job finishing");
  EXPECT_EQ(j.state, JobState::kSucceeded) << j.error;
  EXPECT_EQ(j.step, uninterrupted.step);
  EXPECT_NEAR(j.loss, uninterrupted.loss, 1e-3 * (1 + uninterrupted.loss));
  if (HasFailure()) std::printf("resume events:%s\n", All(Events(id, JobEvent::Kind::kResume)).c_str());
}

TEST_F(ReplicaFailures, FewerThanMinReplicasWaitsThenFailsNamingTheTask) {
  LocalCluster cluster(3, 1, 60, dir_.string());
  JobManager* jobs = Manager(&cluster);
  StatusOr<JobInfo> info = jobs->Submit(Job(/*min_replicas=*/3, /*wait_seconds=*/1.5));
  ASSERT_TRUE(info.ok()) << info.status().ToString();
  const std::string id = info->id;
  WaitFor(jobs, id, 60, [](const JobInfo& j) { return j.step >= 3 || IsTerminal(j.state); }, "3 steps");
  cluster.Stop(2);
  JobInfo j = WaitFor(jobs, id, 30, Finished, "the job failing");
  EXPECT_EQ(j.state, JobState::kFailed);
  EXPECT_NE(j.error.find("/job:worker/task:2"), std::string::npos) << j.error;
  EXPECT_NE(j.error.find("min_replicas 3"), std::string::npos) << j.error;
  std::vector<std::string> states = Events(id, JobEvent::Kind::kState);
  EXPECT_TRUE(Contains(states, "waiting for replicas: 2 of 3 alive", "/job:worker/task:2")) << All(states);
}

TEST_F(ReplicaFailures, FewerThanMinReplicasWaitsForTheTaskToComeBack) {
  LocalCluster cluster(3, 1, 60, dir_.string());
  JobManager* jobs = Manager(&cluster);
  StatusOr<JobInfo> info = jobs->Submit(Job(/*min_replicas=*/3, /*wait_seconds=*/60, /*epochs=*/20));
  ASSERT_TRUE(info.ok()) << info.status().ToString();
  const std::string id = info->id;
  WaitFor(jobs, id, 60, [](const JobInfo& j) { return j.checkpoint_step >= 10 || IsTerminal(j.state); },
          "a checkpoint at step 10");
  cluster.Stop(2);
  WaitFor(jobs, id, 30, [&](const JobInfo& j) {
    return IsTerminal(j.state) || Contains(Events(id, JobEvent::Kind::kState), "waiting for replicas");
  }, "the job waiting");
  EXPECT_EQ(jobs->Get(id)->state, JobState::kRunning);
  // While it waits, the view counts the replicas alive now, not those of
  // the membership that ran before.
  EXPECT_EQ(jobs->Get(id)->replicas_alive, 2);
  EXPECT_EQ(jobs->Get(id)->replicas, 3);
  cluster.Restart(2);
  JobInfo j = WaitFor(jobs, id, 120, Finished, "the job finishing");
  EXPECT_EQ(j.state, JobState::kSucceeded) << j.error;
  std::vector<std::string> resumes = Events(id, JobEvent::Kind::kResume);
  EXPECT_TRUE(Contains(resumes, "with 3 of 3 replicas, on /job:worker/task:0, /job:worker/task:1, "
                                "/job:worker/task:2"))
      << All(resumes);
}

}  // namespace
}  // namespace flowstate

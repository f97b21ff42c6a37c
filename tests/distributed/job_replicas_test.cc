// Data-parallel replicas on the tasks of a cluster: a
// TrainingJob whose "devices" name /job:worker/task:i runs replica i's
// graph on task i (a LocalCluster: 3 tasks in this process, each behind its
// own gRPC server), joined by a GlooCollective meeting in a
// CollectiveStoreService; it trains like the same job's replicas in one
// process, with every replica holding the same variables.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <filesystem>
#include <functional>
#include <optional>
#include <tuple>
#include <thread>

#include "distributed/collective_store.h"
#include "distributed/gloo_collective.h"
#include "jobs/job_manager.h"
#include "jobs/training_job.h"
#include "scheduler/replica_comm.h"
#include "tests/distributed/local_cluster.h"
#include "tests/distributed/replica_job_options.h"
#include "tests/server/server_test_util.h"

namespace flowstate {
namespace {

using testing::LocalCluster;

std::string Task(int i) { return "/job:worker/replica:0/task:" + std::to_string(i) + "/device:CPU:0"; }

// A job's `, "devices": [...]` naming these tasks' CPUs, in order.
std::string OnTasks(std::initializer_list<int> tasks) {
  std::string list;
  for (int t : tasks) list += std::string(list.empty() ? "" : ", ") + "\"" + Task(t) + "\"";
  return R"(, "devices": [)" + list + "]";
}

double MaxDiff(const Tensor& a, const Tensor& b) {
  double d = 0;
  for (int64_t i = 0; i < a.num_elements(); ++i) {
    d = std::max(d, std::abs(a.ElementAsDouble(i) - b.ElementAsDouble(i)));
  }
  return d;
}

std::vector<Tensor> Read(Session* s, const std::vector<std::string>& names) {
  std::vector<Tensor> out;
  Status st = s->Run({}, names, {}, &out);
  EXPECT_TRUE(st.ok()) << st.ToString();
  return out;
}

class ReplicasAcrossTasks : public ::testing::Test {
 protected:
  void SetUp() override {
    RegisterGlooCollectiveFactory();
    dir_ = server_test::FreshTestDir("flowstate_replicas_cluster");
    // 100 rows, batches of 8: the last step of an epoch leaves replicas
    // without a batch (they join with 0 examples).
    server_test::WritePointsCsv(dir_ / "points.csv", 100, 7,
                                [](double a, double b) { return 2 * a - 3 * b + 0.5; });
    StatusOr<int> port = store_.Start("127.0.0.1", 0);
    ASSERT_TRUE(port.ok()) << port.status().ToString();
    store_address_ = "127.0.0.1:" + std::to_string(*port);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::string Job(int replicas, const std::string& devices) {
    return R"({
      "graph": )" + server_test::LinearGraphJson(true) + R"(,
      "loss": "loss",
      "optimizer": {"type": "adam", "learning_rate": 0.05},
      "input": {"format": "csv", "files": {"x": "points.csv", "y": "points.csv"},
                "columns": {"x": ["a", "b"], "y": ["target"]}, "batch_size": 8, "epochs": 3},
      "replicas": )" + std::to_string(replicas) + devices + R"(,
      "check_replicas_every": 5,
      "seed": 5
    })";
  }

  // A job's options for replicas on `cluster`'s tasks, task 0 its master,
  // meeting in this test's store under `prefix`.
  TrainingJobOptions Across(LocalCluster& cluster, const std::string& prefix) {
    return testing::ReplicasAcross(cluster, store_address_, prefix, dir_.string());
  }

  // What `flowstate serve` as task 0 of `cluster` gives its job manager.
  JobManagerOptions ManagerOn(LocalCluster& cluster) {
    JobManagerOptions o;
    o.devices = cluster.task(0).pool.get();
    o.data_root = dir_.string();
    o.remote = [&cluster] { return static_cast<ClusterView*>(cluster.task(0).cluster.get()); };
    o.collective_store = [this] { return store_address_; };
    return o;
  }

  StatusOr<std::unique_ptr<TrainingJob>> Make(const std::string& json, TrainingJobOptions o) {
    StatusOr<JobSpec> spec = ParseJobSpec(json);
    if (!spec.ok()) return spec.status();
    o.data_root = dir_.string();
    o.allreduce_timeout = std::chrono::seconds(30);  // a hang becomes a failure
    FS_ASSIGN_OR_RETURN(std::unique_ptr<TrainingJob> j, TrainingJob::Create(*spec, o));
    FS_RETURN_IF_ERROR(j->Start());
    return j;
  }

  std::filesystem::path dir_;
  CollectiveStoreService store_;
  std::string store_address_;
};

TEST_F(ReplicasAcrossTasks, ThreeTasksTrainLikeThreeReplicasInOneProcess) {
  constexpr int kN = 3;
  LocalCluster cluster(kN, 1, 60, dir_.string());
  StatusOr<std::unique_ptr<TrainingJob>> many =
      Make(Job(kN, OnTasks({0, 1, 2})), Across(cluster, "job-1/m0"));
  ASSERT_TRUE(many.ok()) << many.status().ToString();
  TrainingJobOptions local;
  local.devices = server_test::TestPool(1);
  StatusOr<std::unique_ptr<TrainingJob>> one = Make(Job(kN, ""), local);
  ASSERT_TRUE(one.ok()) << one.status().ToString();

  int steps = 0;
  for (;;) {
    StatusOr<StepResult> a = (*one)->Step();
    StatusOr<StepResult> b = (*many)->Step();
    ASSERT_TRUE(a.ok()) << a.status().ToString();
    ASSERT_TRUE(b.ok()) << b.status().ToString();
    ++steps;
    EXPECT_EQ(a->examples, b->examples) << "step " << steps;
    EXPECT_NEAR(a->loss, b->loss, 1e-4 * (1 + std::abs(a->loss))) << "step " << steps;
    ASSERT_EQ(a->done, b->done);
    if (a->done) break;
    ASSERT_LT(steps, 1000);
  }
  EXPECT_EQ(steps, (*one)->total_steps());
  // Replicas 1 and 2 ran on their tasks: each holds a worker session (their
  // variables and their Gloo participant).
  EXPECT_GE(cluster.task(1).service->num_sessions(), 1);
  EXPECT_GE(cluster.task(2).service->num_sessions(), 1);
  std::vector<std::string> names = {"w", "b"};
  std::vector<Tensor> want = Read((*one)->train_session(), names);
  for (int r = 0; r < kN; ++r) {
    std::vector<Tensor> got = Read((*many)->replica_session(r), names);
    for (size_t k = 0; k < names.size(); ++k) {
      EXPECT_LT(MaxDiff(want[k], got[k]), 1e-4) << "replica " << r << " " << names[k];
    }
  }
}

// A checkpoint of 3 replicas across tasks restores into replicas across
// tasks (fed to their graphs' restore nodes): into 3, the run goes on as if
// uninterrupted; into 2 with batches_per_step 3 (what the job manager runs
// when task 2 is lost), it trains on the same global batches, to the same
// variables within float tolerance.
TEST_F(ReplicasAcrossTasks, ACheckpointRestoresIntoReplicasOnTheTasks) {
  LocalCluster cluster(3, 1, 60, dir_.string());
  auto options = [&](const std::string& prefix, int batches_per_step) {
    TrainingJobOptions o = Across(cluster, prefix);
    o.batches_per_step = batches_per_step;
    return o;
  };
  const std::string all3 = OnTasks({0, 1, 2});
  const std::string two = OnTasks({0, 1});
  StatusOr<std::unique_ptr<TrainingJob>> a = Make(Job(3, all3), options("a/m0", 0));
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  std::vector<double> losses;
  std::optional<JobSnapshot> at8;
  for (;;) {
    StatusOr<StepResult> r = (*a)->Step();
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    losses.push_back(r->loss);
    if (r->step == 8) {
      StatusOr<JobSnapshot> s = (*a)->Snapshot();
      ASSERT_TRUE(s.ok()) << s.status().ToString();
      at8 = *s;
    }
    if (r->done) break;
    ASSERT_LT(losses.size(), 1000u);
  }
  ASSERT_TRUE(at8.has_value());
  std::vector<std::string> names = {"w", "b"};
  std::vector<Tensor> want = Read((*a)->train_session(), names);
  for (auto [devices, n, prefix] : {std::tuple{all3, 3, "b/m0"}, std::tuple{two, 2, "c/m0"}}) {
    StatusOr<std::unique_ptr<TrainingJob>> b = Make(Job(n, devices), options(prefix, 3));
    ASSERT_TRUE(b.ok()) << b.status().ToString();
    Status st = (*b)->Restore(*at8);
    ASSERT_TRUE(st.ok()) << st.ToString();
    EXPECT_EQ((*b)->total_steps(), int64_t(losses.size())) << n;
    for (;;) {
      StatusOr<StepResult> r = (*b)->Step();
      ASSERT_TRUE(r.ok()) << r.status().ToString();
      ASSERT_LE(r->step, int64_t(losses.size()));
      EXPECT_NEAR(r->loss, losses[r->step - 1], 1e-5 * (1 + std::abs(r->loss)))
          << n << " replicas, step " << r->step;
      if (r->done) {
        EXPECT_EQ(r->step, int64_t(losses.size()));
        break;
      }
    }
    for (int r = 0; r < n; ++r) {
      std::vector<Tensor> got = Read((*b)->replica_session(r), names);
      for (size_t k = 0; k < names.size(); ++k) {
        EXPECT_LT(MaxDiff(want[k], got[k]), 1e-5) << n << " replicas: replica " << r << " " << names[k];
      }
    }
  }
}

// The job manager (what `flowstate serve` runs) hands the cluster and the
// collective store to its jobs: a submitted job trains on 2 tasks.
TEST_F(ReplicasAcrossTasks, AJobManagerJobRunsItsReplicasOnTheTasks) {
  LocalCluster cluster(2, 1, 60, dir_.string());
  JobManager jobs(ManagerOn(cluster));
  StatusOr<JobInfo> info =
      jobs.Submit(Job(2, OnTasks({0, 1})));
  ASSERT_TRUE(info.ok()) << info.status().ToString();
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  StatusOr<JobInfo> now = jobs.Get(info->id);
  while (now.ok() && now->state != JobState::kSucceeded && now->state != JobState::kFailed) {
    ASSERT_LT(std::chrono::steady_clock::now(), deadline) << "the job did not end within 60 s";
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    now = jobs.Get(info->id);
  }
  ASSERT_TRUE(now.ok()) << now.status().ToString();
  EXPECT_EQ(now->state, JobState::kSucceeded) << now->error;
  EXPECT_EQ(now->step, now->total_steps);
  EXPECT_GT(now->step, 0);
  jobs.Shutdown();
}

// Each task reads its own copy of the input beneath its own data root: with
// task 1's copy holding other targets (same rows and shapes) the replicas
// still agree with each other (one all-reduced model) but end elsewhere
// than with identical copies, so task 1 trained on its file, not on
// batches sent from here. A task without the file, or with a copy of
// another size, fails the start naming the task and the file.
TEST_F(ReplicasAcrossTasks, EachTaskReadsItsOwnCopyOfTheInput) {
  const std::filesystem::path other = dir_ / "task1", empty = dir_ / "task2", short_copy = dir_ / "task2s";
  for (const auto& d : {other, empty, short_copy}) std::filesystem::create_directories(d);
  server_test::WritePointsCsv(other / "points.csv", 100, 7,
                              [](double a, double b) { return 20 * a + 30 * b - 5; });
  server_test::WritePointsCsv(short_copy / "points.csv", 90, 7,
                              [](double a, double b) { return 2 * a - 3 * b + 0.5; });
  // Trains the job on a cluster whose tasks read beneath `roots`; *w: the
  // final w (copied out: the tensors' memory belongs to the cluster).
  auto train = [&](const std::vector<std::string>& roots, std::vector<double>* w) -> Status {
    LocalCluster cluster(3, 1, 60, roots);
    FS_ASSIGN_OR_RETURN(std::unique_ptr<TrainingJob> j,
                        Make(Job(3, OnTasks({0, 1, 2})), Across(cluster, "own-input/" + std::to_string(roots.size()) + roots[1] + roots[2])));
    for (int steps = 0;; ++steps) {
      FS_ASSIGN_OR_RETURN(StepResult r, j->Step());
      if (r.done) break;
      if (steps > 1000) return Internal("the job did not end");
    }
    std::vector<Tensor> w0 = Read(j->replica_session(0), {"w"});
    for (int r = 1; r < 3; ++r) {
      std::vector<Tensor> got = Read(j->replica_session(r), {"w"});
      EXPECT_EQ(MaxDiff(got[0], w0[0]), 0.0) << "replica " << r << " differs from replica 0";
    }
    w->clear();
    for (int64_t k = 0; k < w0[0].num_elements(); ++k) w->push_back(w0[0].ElementAsDouble(k));
    return Status();
  };
  auto max_diff = [](const std::vector<double>& a, const std::vector<double>& b) {
    double d = 0;
    for (size_t k = 0; k < a.size() && k < b.size(); ++k) d = std::max(d, std::abs(a[k] - b[k]));
    return d;
  };
  const std::string root = dir_.string();
  std::vector<double> same, differs;
  Status s = train({root, root, root}, &same);
  ASSERT_TRUE(s.ok()) << s.ToString();
  s = train({root, other.string(), root}, &differs);
  ASSERT_TRUE(s.ok()) << s.ToString();
  ASSERT_EQ(same.size(), 2u);
  EXPECT_GT(max_diff(same, differs), 0.1) << "task 1's own copy did not change what was trained";

  std::vector<double> unused;
  s = train({root, root, empty.string()}, &unused);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), Code::kNotFound) << s.ToString();
  EXPECT_NE(s.message().find("task:2"), std::string::npos) << s.ToString();
  EXPECT_NE(s.message().find("points.csv"), std::string::npos) << s.ToString();
  EXPECT_NE(s.message().find(empty.string()), std::string::npos) << s.ToString();
  s = train({root, root, short_copy.string()}, &unused);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), Code::kFailedPrecondition) << s.ToString();
  EXPECT_NE(s.message().find("task:2"), std::string::npos) << s.ToString();
  EXPECT_NE(s.message().find("90 examples, the master's copy has 100"), std::string::npos) << s.ToString();
}

// Placement by default: in a cluster, "replicas": 3 without devices runs
// one replica on each of the 3 tasks, in task order, replica 0 on the task
// that received the job; the job view says where each runs. With
// replicas_per_task 2, 4 replicas go two on each of 2 tasks; more than the
// tasks can hold is refused naming them.
TEST_F(ReplicasAcrossTasks, ReplicasArePlacedOnePerTaskWithoutDevices) {
  LocalCluster cluster(3, 1, 60, dir_.string());
  JobManager jobs(ManagerOn(cluster));
  auto run = [&](const std::string& json, int replicas, const std::vector<std::string>& want) {
    SCOPED_TRACE(json.substr(json.rfind("\"replicas\"")));
    StatusOr<JobInfo> info = jobs.Submit(json);
    ASSERT_TRUE(info.ok()) << info.status().ToString();
    ASSERT_EQ(info->placement.size(), size_t(replicas));
    for (int r = 0; r < replicas; ++r) EXPECT_EQ(info->placement[r].device, want[r]) << "replica " << r;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(90);
    StatusOr<JobInfo> now = jobs.Get(info->id);
    bool seen_all_alive = false;
    std::vector<int> sessions(3, 0);
    while (now.ok() && !IsTerminal(now->state)) {
      ASSERT_LT(std::chrono::steady_clock::now(), deadline) << "the job did not end within 90 s";
      if (now->state == JobState::kRunning && now->replicas_alive == replicas) {
        bool all = true;
        for (const JobInfo::Replica& p : now->placement) all = all && p.alive;
        seen_all_alive = seen_all_alive || all;
      }
      for (int t = 1; t < 3; ++t) sessions[t] = std::max(sessions[t], cluster.task(t).service->num_sessions());
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
      now = jobs.Get(info->id);
    }
    ASSERT_TRUE(now.ok()) << now.status().ToString();
    EXPECT_EQ(now->state, JobState::kSucceeded) << now->error;
    EXPECT_EQ(now->step, now->total_steps);
    EXPECT_TRUE(seen_all_alive) << "no poll saw every replica alive while the job ran";
    // Each task that holds replicas held a worker session per replica of it.
    for (int t = 1; t < 3; ++t) {
      const int on_task = int(std::count(want.begin(), want.end(), "/job:worker/task:" + std::to_string(t)));
      if (on_task > 0) EXPECT_GE(sessions[t], on_task) << "task " << t;
      else EXPECT_EQ(sessions[t], 0) << "task " << t;
    }
  };
  const std::string t0 = "/job:worker/task:0", t1 = "/job:worker/task:1", t2 = "/job:worker/task:2";
  // Long enough (6 epochs) for the polls to see the job running.
  auto job = [&](int replicas, const std::string& extra) {
    std::string j = Job(replicas, extra);
    const std::string three = "\"epochs\": 3";
    j.replace(j.find(three), three.size(), "\"epochs\": 6");
    return j;
  };
  run(job(3, ""), 3, {t0, t1, t2});
  run(job(4, R"(, "replicas_per_task": 2)"), 4, {t0, t0, t1, t1});
  run(job(2, ""), 2, {t0, t1});

  StatusOr<JobInfo> too_many = jobs.Submit(Job(7, R"(, "replicas_per_task": 2)"));
  ASSERT_FALSE(too_many.ok());
  EXPECT_EQ(too_many.status().code(), Code::kInvalidArgument) << too_many.status().ToString();
  EXPECT_NE(too_many.status().message().find("need 4 tasks; the cluster has 3"), std::string::npos)
      << too_many.status().ToString();
  EXPECT_NE(too_many.status().message().find(t2), std::string::npos) << too_many.status().ToString();
  jobs.Shutdown();
}

// The replicas on the tasks run chunks of steps on their own (about 0.2 s
// each, up to an epoch's end or a replica check): a pause or cancel asked
// mid-chunk lands at the chunk's end within a second, never by a collective
// timeout; a resumed job trains to the end with its replicas agreeing.
TEST_F(ReplicasAcrossTasks, PauseAndCancelLandAtTheEndOfAChunk) {
  // 2400 rows in batches of 8 over 3 replicas: 100 steps an epoch.
  server_test::WritePointsCsv(dir_ / "points.csv", 2400, 7,
                              [](double a, double b) { return 2 * a - 3 * b + 0.5; });
  LocalCluster cluster(3, 1, 60, dir_.string());
  JobManager jobs(ManagerOn(cluster));
  auto job = [&] {
    std::string j = Job(3, "");
    const std::string every = "\"check_replicas_every\": 5";
    j.replace(j.find(every), every.size(), "\"check_replicas_every\": 50");
    return j;
  };
  auto wait = [&](const std::string& id, double seconds, const std::function<bool(const JobInfo&)>& pred,
                  const char* what) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
    for (;;) {
      JobInfo now = jobs.Get(id).value();
      if (pred(now)) return now;
      if (std::chrono::steady_clock::now() > deadline) {
        ADD_FAILURE() << what << " not within " << seconds << " s (" << JobStateName(now.state) << " at step "
                      << now.step << ": " << now.error << ")";
        return now;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
  };
  StatusOr<JobInfo> a = jobs.Submit(job());
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  wait(a->id, 60, [](const JobInfo& j) { return j.step >= 20; }, "step 20");
  ASSERT_TRUE(jobs.Pause(a->id).ok());
  const auto asked = std::chrono::steady_clock::now();
  JobInfo paused = wait(a->id, 10, [](const JobInfo& j) { return j.state == JobState::kPaused; }, "PAUSED");
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - asked).count(), 2.0);
  EXPECT_LT(paused.step, paused.total_steps);
  ASSERT_TRUE(jobs.Resume(a->id).ok());
  JobInfo done = wait(a->id, 120, [](const JobInfo& j) { return IsTerminal(j.state); }, "the end");
  EXPECT_EQ(done.state, JobState::kSucceeded) << done.error;
  EXPECT_EQ(done.step, done.total_steps);

  StatusOr<JobInfo> b = jobs.Submit(job());
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  wait(b->id, 60, [](const JobInfo& j) { return j.step >= 20; }, "step 20");
  ASSERT_TRUE(jobs.Cancel(b->id).ok());
  JobInfo cancelled = wait(b->id, 10, [](const JobInfo& j) { return IsTerminal(j.state); }, "CANCELLED");
  EXPECT_EQ(cancelled.state, JobState::kCancelled) << cancelled.error;
  jobs.Shutdown();
}

// Backup replicas across tasks: replica 2 (on task 2) straggles 400 ms a
// step. Without a backup replica every step waits for it, and the replicas
// on other tasks report that wait (their _ReplicaCommStats); with one, the
// other two decide each step in the store's race and the straggler is
// dropped from every step, its batch abandoned; the replicas still agree.
// Runs job `j` to its end: the steps, and how many were full (`full`
// examples); fails the test on an error.
void RunToEnd(TrainingJob* j, int64_t full_examples, int64_t* steps, int64_t* full) {
  *steps = *full = 0;
  for (;;) {
    StatusOr<StepResult> r = j->Step();
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    ++*steps;
    if (r->examples == full_examples) ++*full;
    EXPECT_TRUE(std::isfinite(r->loss));
    if (r->done) break;
    ASSERT_LT(*steps, 100);
  }
}

// The largest difference of replica r's "w" and "b" from replica 0's, once
// they agree or 20 s passed (a replica that ended its last chunk late is
// done within moments).
double DiffFromReplicaZero(TrainingJob* j, int r) {
  std::vector<Tensor> first = Read(j->replica_session(0), {"w", "b"});
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  double diff = 1;
  while (diff != 0 && std::chrono::steady_clock::now() < deadline) {
    std::vector<Tensor> other = Read(j->replica_session(r), {"w", "b"});
    diff = std::max(MaxDiff(first[0], other[0]), MaxDiff(first[1], other[1]));
    if (diff != 0) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return diff;
}

// Backup replicas in the tasks' own chunks of steps (no straggler of the
// test's: whoever comes third is dropped): every full step drops exactly
// one replica, the dropped one receives the contributors' result, and the
// replica checks (every 5 steps, a late replica's compared when it comes)
// all pass; at the end the three are identical.
TEST_F(ReplicasAcrossTasks, BackupReplicasRunInChunksAndStayIdentical) {
  LocalCluster cluster(3, 1, 60, dir_.string());
  StatusOr<std::unique_ptr<TrainingJob>> j =
      Make(Job(3, OnTasks({0, 1, 2}) + R"(, "backup_replicas": 1)"), Across(cluster, "chunked/m0"));
  ASSERT_TRUE(j.ok()) << j.status().ToString();
  int64_t steps = 0, full = 0;
  RunToEnd(j->get(), 24, &steps, &full);
  // 100 rows in batches of 8 for 3 epochs: 5 steps an epoch, the last of
  // each with one batch (nobody dropped: fewer replicas have examples than
  // the two places).
  EXPECT_EQ(steps, 15);
  EXPECT_EQ(full, 12);
  std::vector<int64_t> dropped = (*j)->dropped_steps();
  ASSERT_EQ(dropped.size(), 3u);
  EXPECT_EQ(dropped[0] + dropped[1] + dropped[2], full);
  for (int r = 1; r < 3; ++r) EXPECT_EQ(DiffFromReplicaZero(j->get(), r), 0.0) << "replica " << r;
}

// Two replicas, one backup: each step goes on with whichever comes first
// alone (a subgroup round of one), the other receives its result.
TEST_F(ReplicasAcrossTasks, OneOfTwoContributesEachStepAndTheOtherFollows) {
  LocalCluster cluster(2, 1, 60, dir_.string());
  StatusOr<std::unique_ptr<TrainingJob>> j =
      Make(Job(2, OnTasks({0, 1}) + R"(, "backup_replicas": 1)"), Across(cluster, "one-of-two/m0"));
  ASSERT_TRUE(j.ok()) << j.status().ToString();
  int64_t steps = 0, full = 0;
  RunToEnd(j->get(), 16, &steps, &full);
  // 13 batches an epoch, 2 a step: 7 steps, the last with one batch.
  EXPECT_EQ(steps, 21);
  std::vector<int64_t> dropped = (*j)->dropped_steps();
  ASSERT_EQ(dropped.size(), 2u);
  EXPECT_EQ(dropped[0] + dropped[1], full);
  EXPECT_EQ(DiffFromReplicaZero(j->get(), 1), 0.0);
}

TEST_F(ReplicasAcrossTasks, BackupReplicasDropTheStragglerOnItsTask) {
  LocalCluster cluster(3, 1, 60, dir_.string());
  auto run = [&](int backup, std::vector<StepResult>* steps, std::vector<int64_t>* dropped) {
    TrainingJobOptions o = Across(cluster, "straggler-" + std::to_string(backup) + "/m0");
    o.test_straggler = {/*replica=*/2, /*delay_ms=*/400};
    StatusOr<std::unique_ptr<TrainingJob>> j =
        Make(Job(3, OnTasks({0, 1, 2}) + ", \"backup_replicas\": " + std::to_string(backup) +
                        R"(, "max_steps": 6)"),
             o);
    ASSERT_TRUE(j.ok()) << j.status().ToString();
    for (;;) {
      StatusOr<StepResult> r = (*j)->Step();
      ASSERT_TRUE(r.ok()) << r.status().ToString();
      steps->push_back(*r);
      if (r->done) break;
      ASSERT_LT(steps->size(), 100u);
    }
    *dropped = (*j)->dropped_steps();
    std::vector<Tensor> first = Read((*j)->replica_session(0), {"w", "b"});
    for (int r = 1; r < 3; ++r) {
      std::vector<Tensor> other = Read((*j)->replica_session(r), {"w", "b"});
      for (size_t k = 0; k < other.size(); ++k) EXPECT_EQ(MaxDiff(first[k], other[k]), 0.0) << r;
    }
  };
  auto median = [](const std::vector<StepResult>& steps) {
    std::vector<double> t;
    for (const StepResult& r : steps) t.push_back(r.replicas[0].step_seconds);
    std::sort(t.begin(), t.end());
    return t[t.size() / 2];
  };
  std::vector<StepResult> without, with;
  std::vector<int64_t> dropped0, dropped1;
  run(0, &without, &dropped0);
  run(1, &with, &dropped1);
  ASSERT_EQ(without.size(), 6u);
  ASSERT_EQ(with.size(), 6u);
  EXPECT_GE(median(without), 0.35);  // every step waits for the straggler
  EXPECT_LT(median(with), 0.25);     // the other two decide it
  EXPECT_TRUE(dropped0.empty());
  // 100 rows in batches of 8: step 5 is the epoch's last batch alone (the
  // straggler has none then, so it neither waits nor is dropped).
  int64_t full = 0;
  for (const StepResult& r : with) {
    EXPECT_TRUE(std::isfinite(r.loss));
    EXPECT_EQ(r.replicas[1].dropped_steps, 0) << "step " << r.step;
    EXPECT_EQ(r.replicas[2].examples, 0) << "step " << r.step;
    if (r.examples < 24) continue;
    ++full;
    EXPECT_EQ(r.replicas[2].dropped_steps, 1) << "step " << r.step;
  }
  EXPECT_EQ(full, 5);
  EXPECT_EQ(dropped1, (std::vector<int64_t>{0, 0, full}));
  // Replica 1 runs on task 1: its wait for the straggler is its own,
  // reported from there, and so are its bytes.
  for (const StepResult& r : without) {
    if (r.examples < 24) continue;
    EXPECT_GT(r.replicas[1].allreduce_seconds, 0.2) << "step " << r.step;
    EXPECT_GT(r.replicas[1].allreduce_bytes, 0) << "step " << r.step;
    EXPECT_GT(r.replicas[2].allreduce_bytes, 0) << "step " << r.step;
  }
}

// A contributor that stops in the middle of a step (here: replica 2's
// communication thread, held for 5 s before its reduction, as if its
// process were stopped there) does not hold the others: the waiting
// contributor gives the step up after its stall timeout, every replica
// applies a zero gradient for it, the steps after go on without replica 2,
// and when it comes back it catches up; the replicas stay identical. With
// batches of 8 an epoch's last step has one batch, fewer than the two
// places: it is decided without the held replica after the stall timeout
// (it would wait for every replica to arrive); with batches of 5 it has
// two and is decided as any other.
TEST_F(ReplicasAcrossTasks, AContributorStoppedMidStepIsGivenUpAndTheOthersGoOn) {
  LocalCluster cluster(3, 1, 60, dir_.string());
  // {batch, steps in 8 epochs of 100 rows, full steps (3 batches)}
  for (auto [batch, want_steps, want_full] : {std::tuple{5, 56, 48}, std::tuple{8, 40, 32}}) {
    SCOPED_TRACE("batch " + std::to_string(batch));
    std::string job = Job(3, OnTasks({0, 1, 2}) + R"(, "backup_replicas": 1)");
    job.replace(job.find(R"("batch_size": 8)"), 15, R"("batch_size": )" + std::to_string(batch));
    job.replace(job.find(R"("epochs": 3)"), 11, R"("epochs": 8)");
    StatusOr<std::unique_ptr<TrainingJob>> j =
        Make(job, Across(cluster, "stalled-" + std::to_string(batch) + "/m0"));
    ASSERT_TRUE(j.ok()) << j.status().ToString();
    using Clock = std::chrono::steady_clock;
    std::atomic<int64_t> stalled_step{-1};
    std::atomic<Clock::rep> stall_begin{0}, stall_end{0};
    std::atomic<int> ended_while_held{0};
    ReplicaComm::SetTestStallHook([&](int rank, int64_t step, int bucket) {
      int64_t none = -1;
      if (rank != 2 || step < 8 || bucket != 0 || !stalled_step.compare_exchange_strong(none, step)) {
        return;
      }
      stall_begin = Clock::now().time_since_epoch().count();
      // Held until three steps have ended without it (each one-batch
      // epoch end waits a stall timeout, 4x a step period, which a loaded
      // CI stretches), or for 60 s: without giving its step up, the
      // others end none and the check below fails.
      const auto deadline = Clock::now() + std::chrono::seconds(60);
      while (ended_while_held.load() < 3 && Clock::now() < deadline) {
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
      stall_end = Clock::now().time_since_epoch().count();
    });
    struct HookReset {
      ~HookReset() { ReplicaComm::SetTestStallHook(nullptr); }
    } reset;
    std::vector<Clock::rep> ended;
    int64_t steps = 0, full = 0;
    for (;;) {
      StatusOr<StepResult> r = (*j)->Step();
      ASSERT_TRUE(r.ok()) << r.status().ToString();
      ended.push_back(Clock::now().time_since_epoch().count());
      if (stall_begin.load() != 0 && ended.back() > stall_begin.load() && stall_end.load() == 0) {
        ++ended_while_held;
      }
      ++steps;
      if (r->examples == 3 * batch) ++full;
      EXPECT_TRUE(std::isfinite(r->loss));
      if (r->done) break;
      ASSERT_LT(steps, 200);
    }
    EXPECT_EQ(steps, want_steps);
    EXPECT_EQ(full, want_full);
    ASSERT_GE(stalled_step.load(), 8) << "replica 2 never contributed after step 8";
    ASSERT_GT(stall_end.load(), 0);
    // Steps ended while replica 2 was held (the bounded lag stops the
    // others some chunks later): without giving its step up, none would
    // have.
    int during = 0;
    for (Clock::rep t : ended) during += t > stall_begin.load() && t < stall_end.load() ? 1 : 0;
    EXPECT_GE(during, 3) << "replica 2 held at step " << stalled_step.load();
    // The given-up step counts as dropped for its two contributors,
    // besides the one replica dropped from every full step (a replica
    // without a batch at an epoch's end is not dropped).
    std::vector<int64_t> dropped = (*j)->dropped_steps();
    ASSERT_EQ(dropped.size(), 3u);
    const int64_t extra = dropped[0] + dropped[1] + dropped[2] - full;
    EXPECT_GE(extra, 2) << dropped[0] << " " << dropped[1] << " " << dropped[2] << " full " << full;
    EXPECT_EQ(extra % 2, 0);
    for (int r = 1; r < 3; ++r) EXPECT_EQ(DiffFromReplicaZero(j->get(), r), 0.0) << "replica " << r;
  }
}

// init_from's values (another job's checkpoint) start every replica, the
// ones on other tasks through their restore nodes; the first step keeps
// them equal.
TEST_F(ReplicasAcrossTasks, InitFromReachesTheReplicasOnTheTasks) {
  LocalCluster cluster(2, 1, 60, dir_.string());
  StatusOr<JobSpec> spec = ParseJobSpec(Job(2, OnTasks({0, 1})));
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  StatusOr<std::unique_ptr<TrainingJob>> j = TrainingJob::Create(*spec, Across(cluster, "init-from/m0"));
  ASSERT_TRUE(j.ok()) << j.status().ToString();
  const Tensor w = Tensor::FromVector<float>({0.25f, -1.5f}, TensorShape({2, 1}));
  const Tensor b = Tensor::FromVector<float>({3.0f}, TensorShape({1}));
  (*j)->SetInitialValues({{"w", w}, {"b", b}});
  Status st = (*j)->Start();
  ASSERT_TRUE(st.ok()) << st.ToString();
  for (int r = 0; r < 2; ++r) {
    std::vector<Tensor> got = Read((*j)->replica_session(r), {"w", "b"});
    EXPECT_EQ(MaxDiff(got[0], w), 0.0) << "replica " << r;
    EXPECT_EQ(MaxDiff(got[1], b), 0.0) << "replica " << r;
  }
  StatusOr<StepResult> step = (*j)->Step();
  ASSERT_TRUE(step.ok()) << step.status().ToString();
  std::vector<Tensor> first = Read((*j)->replica_session(0), {"w", "b"});
  std::vector<Tensor> second = Read((*j)->replica_session(1), {"w", "b"});
  EXPECT_EQ(MaxDiff(first[0], second[0]), 0.0);
  EXPECT_GT(MaxDiff(first[0], w), 0.0) << "the step trained from the given values";
}

TEST_F(ReplicasAcrossTasks, ReplicaZeroMustBeOnThisTask) {
  LocalCluster cluster(2, 1, 60, dir_.string());
  StatusOr<std::unique_ptr<TrainingJob>> j = Make(Job(2, OnTasks({1, 0})), Across(cluster, "job-2/m0"));
  ASSERT_FALSE(j.ok());
  EXPECT_EQ(j.status().code(), Code::kInvalidArgument) << j.status().ToString();
  EXPECT_NE(j.status().message().find("devices[0]"), std::string::npos) << j.status().ToString();
}

}  // namespace
}  // namespace flowstate

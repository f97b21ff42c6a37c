// JobManager's replicas on the tasks of a cluster (job_manager.h, "Replicas
// on the tasks of a cluster"): the membership a job (re)starts with, a lost
// replica's task, and a task that rejoins at a checkpoint.
#include <algorithm>
#include <thread>

#include "devices/device_name.h"
#include "jobs/job_manager.h"
#include "jobs/replica_placement.h"
#include "jobs/job_manager_internal.h"
#include "scheduler/cluster_view.h"
#include "graph/mutex.h"

namespace flowstate {
namespace {

using Clock = std::chrono::steady_clock;

// Rebuilds in a row without a step before the job fails with the last error.
constexpr int kMaxRebuildsWithoutStep = 5;
// How often a job short of min_replicas looks at the heartbeats again.
constexpr auto kWaitPoll = std::chrono::milliseconds(200);

std::string Join(const std::vector<std::string>& v) {
  std::string out;
  for (const std::string& s : v) out += (out.empty() ? "" : ", ") + s;
  return out;
}

bool IsMembershipCode(Code c) {
  return c == Code::kUnavailable || c == Code::kDeadlineExceeded || c == Code::kAborted ||
         c == Code::kCancelled;
}

}  // namespace

TrainingJobOptions JobManager::RunnerOptions() const {
  TrainingJobOptions o;
  o.data_root = options_.data_root;
  o.read_model = options_.read_model;
  o.devices = options_.devices;
  o.inter_op_pool = inter_op_pool_.get();
  o.max_shape_bytes = options_.max_shape_bytes;
  if (options_.remote) o.remote = options_.remote();
  if (options_.collective_store) o.collective_store = options_.collective_store();
  o.test_straggler = options_.test_straggler;
  return o;
}

Status JobManager::PlaceReplicas(JobSpec* spec) const {
  if (spec->replicas <= 1 || !spec->devices.empty()) return Status();
  ClusterView* remote = options_.remote ? options_.remote() : nullptr;
  std::vector<std::string> tasks = remote != nullptr ? remote->Tasks() : std::vector<std::string>{};
  if (tasks.size() <= 1) return Status();  // one process: every replica here
  // This task first, then the others in the spec's order.
  const std::string self = remote->local_task();
  auto it = std::find(tasks.begin(), tasks.end(), self);
  if (it != tasks.end()) std::rotate(tasks.begin(), it, it + 1);
  const int n = spec->replicas, t = int(tasks.size());
  const int per_task = spec->replicas_per_task > 0 ? spec->replicas_per_task : (n + t - 1) / t;
  if (int64_t(per_task) * t < n) {
    return InvalidArgument("replicas: " + std::to_string(n) + " replicas at replicas_per_task " +
                           std::to_string(per_task) + " need " +
                           std::to_string((n + per_task - 1) / per_task) + " tasks; the cluster has " +
                           std::to_string(t) + " (" + Join(tasks) + ")");
  }
  for (int i = 0; i < n; ++i) spec->devices.push_back(tasks[size_t(i / per_task)]);
  return Status();
}

std::string JobManager::ReplicaTask(const JobSpec& spec, int i) const {
  return ReplicaTaskOf(spec, i, *options_.devices);
}

bool JobManager::AcrossTasks(const JobSpec& spec) const {
  return ReplicasAcrossTasks(spec, *options_.devices);
}

JobSpec JobManager::ReplicaZeroSpec(const JobSpec& spec) {
  JobSpec m = spec;
  m.replicas = 1;
  m.min_replicas = 1;
  m.devices.resize(std::min<size_t>(m.devices.size(), 1));
  return m;
}

bool JobManager::PrepareMembership(const std::shared_ptr<Job>& job) {
  Job* j = job.get();
  const JobSpec& spec = j->spec;  // fixed since Submit
  ClusterView* remote = options_.remote ? options_.remote() : nullptr;
  bool waiting;
  {
    MutexLock l(mu_);
    waiting = j->membership.wait_until.has_value();
  }
  if (!waiting && remote != nullptr) {
    // One heartbeat round now (at most the heartbeat deadline): a task that
    // just went away is known as such. While waiting, the heartbeats'
    // own rounds say when it is back.
    remote->ReportUnavailable();
    uint64_t generation = 0;
    (void)remote->RemoteDevices(&generation);
  }
  std::vector<int> alive;
  std::vector<std::string> alive_tasks, lost;
  for (int i = 0; i < spec.replicas; ++i) {
    const std::string task = ReplicaTask(spec, i);
    std::string why = "the cluster has not started yet";
    if (task.empty() || (remote != nullptr && remote->TaskUp(task, nullptr, &why))) {
      alive.push_back(i);
      alive_tasks.push_back(!task.empty() ? task : remote != nullptr ? remote->local_task() : "this task");
    } else {
      lost.push_back(task + ": " + why);
    }
  }
  if (int(alive.size()) < spec.min_replicas) {
    MutexLock l(mu_);
    if (j->info.state != JobState::kRunning) return false;
    const auto now = Clock::now();
    j->membership.alive_while_waiting = int(alive.size());
    if (!j->membership.wait_until) {
      j->membership.wait_until =
          now + std::chrono::duration_cast<Clock::duration>(
                    std::chrono::duration<double>(spec.replica_wait_seconds));
      PublishLocked(j, JobEvent::Kind::kState,
                    "waiting for replicas: " + std::to_string(alive.size()) + " of " +
                        std::to_string(spec.replicas) + " alive, min_replicas is " +
                        std::to_string(spec.min_replicas) + " (lost: " + Join(lost) +
                        "); the job fails if they are not back within " +
                        std::to_string(int64_t(spec.replica_wait_seconds)) + " s");
    } else if (now >= *j->membership.wait_until) {
      TransitionLocked(j, JobAction::kFail,
                       "only " + std::to_string(alive.size()) + " of " +
                           std::to_string(spec.replicas) + " replicas alive (min_replicas " +
                           std::to_string(spec.min_replicas) + ") for " +
                           std::to_string(int64_t(spec.replica_wait_seconds)) +
                           " s (replica_wait_seconds): lost " + Join(lost) +
                           (j->membership.last_error.empty()
                                ? ""
                                : "; the step failed with: " + j->membership.last_error));
      return false;
    }
    const auto until = std::min(now + kWaitPoll, *j->membership.wait_until);
    l.Unlock();
    std::this_thread::sleep_until(until);
    return false;
  }

  // The job as this membership runs it: the alive replicas, in order.
  JobSpec m = spec;
  m.replicas = int(alive.size());
  m.devices.clear();
  for (int i : alive) m.devices.push_back(spec.devices[i]);
  m.min_replicas = std::min(m.min_replicas, m.replicas);
  int number;
  {
    MutexLock l(mu_);
    number = j->membership.number;
  }
  TrainingJobOptions o = RunnerOptions();
  o.collective_prefix = j->info.id + "/m" + std::to_string(number);
  // The job's global batch whatever the membership: the survivors each
  // train on more of it.
  o.batches_per_step = spec.replicas;
  StatusOr<std::unique_ptr<TrainingJob>> runner = TrainingJob::Create(m, o);
  std::shared_ptr<TrainingJob> old;
  {
    MutexLock l(mu_);
    if (!runner.ok()) {
      TransitionLocked(j, JobAction::kFail, "replicas: " + runner.status().ToString());
      return false;
    }
    // It resumes from the newest checkpoint: the one being written first.
    while (j->pending_writes != 0) checkpoint_cv_.Wait(mu_);
    if (j->info.state != JobState::kRunning) return false;
    old = std::move(j->runner);
    j->runner = std::move(runner).value();
    j->membership.replicas = alive;
    j->membership.number = number + 1;
    j->membership.wait_until.reset();
    std::string note = "with " + std::to_string(alive.size()) + " of " +
                       std::to_string(spec.replicas) + " replicas, on " + Join(alive_tasks);
    if (!lost.empty()) note += " (lost: " + Join(lost) + ")";
    if (!j->membership.rejoined.empty()) {
      note += " (rejoined: " + Join(j->membership.rejoined) + ")";
      j->membership.rejoined.clear();
    }
    j->membership.note = std::move(note);
  }
  old.reset();  // its sessions close (on the tasks too) without the lock
  if (number > 0 && options_.drop_collective_prefix) {
    options_.drop_collective_prefix(j->info.id + "/m" + std::to_string(number - 1));
  }
  return true;
}

bool JobManager::OnReplicaFailureLocked(Job* j, const Status& s, const std::string& what) {
  if (!AcrossTasks(j->spec)) return false;
  bool lost = IsMembershipCode(s.code());
  ClusterView* remote = options_.remote ? options_.remote() : nullptr;
  if (!lost && remote != nullptr) {
    // Any error while a replica's task does not answer its heartbeats.
    for (int i = 0; i < j->spec.replicas && !lost; ++i) {
      const std::string task = ReplicaTask(j->spec, i);
      lost = !task.empty() && !remote->TaskUp(task, nullptr, nullptr);
    }
  }
  if (!lost || ++j->membership.rebuilds_without_step > kMaxRebuildsWithoutStep) return false;
  j->membership.last_error = s.ToString();
  j->started = false;
  j->restore_on_start = true;
  j->was_running = true;
  j->loop = TrainingLoop();
  PublishLocked(j, JobEvent::Kind::kState,
                what + ": " + s.ToString() +
                    "; the replicas are rebuilt with the tasks alive, from the last checkpoint");
  return true;
}

void JobManager::MaybeRejoinLocked(Job* j) {
  if (!j->started || j->mid_chunk || !AcrossTasks(j->spec) ||
      int(j->membership.replicas.size()) >= j->spec.replicas) {
    return;
  }
  ClusterView* remote = options_.remote ? options_.remote() : nullptr;
  if (remote == nullptr) return;
  std::vector<std::string> back;
  for (int i = 0; i < j->spec.replicas; ++i) {
    if (std::count(j->membership.replicas.begin(), j->membership.replicas.end(), i)) continue;
    const std::string task = ReplicaTask(j->spec, i);
    if (!task.empty() && remote->TaskUp(task, nullptr, nullptr)) back.push_back(task);
  }
  if (back.empty()) return;
  j->membership.rejoined = back;
  j->started = false;
  j->restore_on_start = true;
  j->was_running = true;
  j->loop = TrainingLoop();
  PublishLocked(j, JobEvent::Kind::kState,
                Join(back) + " answer(s) again: the job is rebuilt with them at its checkpoint of step " +
                    std::to_string(j->info.step));
}

}  // namespace flowstate

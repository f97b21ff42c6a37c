#include "distributed/cluster.h"

#include <malloc.h>

#include <atomic>
#include <chrono>
#include <map>
#include <random>
#include <thread>

#include <grpcpp/grpcpp.h>

#include "api/worker.grpc.pb.h"
#include "api/worker.pb.h"
#include "distributed/grpc_worker_internal.h"
#include "distributed/wire_internal.h"
#include "graph/mutex.h"
#include "graph/periodic_thread.h"
#include "scheduler/rendezvous.h"
#include "scheduler/step_id.h"
#include "scheduler/thread_pool.h"
#include "scheduler/worker.h"

namespace flowstate {

using namespace distributed_internal;  // NOLINT: this library's private helpers

namespace {

std::string TaskName(const TaskId& t) { return "/job:" + t.job + "/task:" + std::to_string(t.index); }

// Ids from a random start, so that masters of one cluster do not collide.
class RandomStepIds final : public StepIdSource {
 public:
  RandomStepIds() {
    std::random_device rd;
    uint64_t r = (uint64_t(rd()) << 32) ^ uint64_t(rd());
    next_ = int64_t(r % (uint64_t(1) << 61)) + (int64_t(1) << 40);
  }
  int64_t Next() override { return next_.fetch_add(1, std::memory_order_relaxed); }

 private:
  std::atomic<int64_t> next_{1};
};

}  // namespace

const char* ClusterTaskStateName(ClusterTaskInfo::State s) {
  return s == ClusterTaskInfo::State::kUp ? "UP" : "UNREACHABLE";
}

class Cluster::Impl {
 public:
  struct Task {
    ClusterTaskInfo info;
    std::chrono::steady_clock::time_point last;
    std::shared_ptr<::grpc::Channel> channel;   // null for this task
    std::shared_ptr<wpb::Worker::Stub> stub;    // on `channel`: the heartbeats'; null for this task
    std::shared_ptr<CallTracker> tracker = std::make_shared<CallTracker>();
    std::vector<std::shared_ptr<RemoteDevice>> remote_devices;
  };

  ClusterOptions options;
  std::string self_name;
  uint64_t incarnation = 0;
  RandomStepIds step_ids;
  // Hands pulled tensors to their _Recvs (declared before the rendezvous:
  // it outlives them).
  std::unique_ptr<ThreadPool> delivery;
  std::unique_ptr<RendezvousMgr> rendezvous;

  mutable Mutex mu;
  // The list, and each Task's channel, stub and tracker, are fixed once
  // Create returns; a Task's info, last and remote_devices are guarded by
  // mu (not said to the compiler: a nested struct cannot name it).
  std::vector<Task> tasks;
  std::map<std::string, size_t> by_name;  // immutable after Create
  std::atomic<uint64_t> generation{1};
  std::atomic<bool> stale{true};

  Mutex round_mu;  // one heartbeat round at a time
  std::unique_ptr<PeriodicThread> heartbeat;  // Round() every heartbeat_interval_s

  TaskConnection ConnectionTo(const std::string& task) const {
    auto it = by_name.find(task);
    if (it == by_name.end()) return {};
    return {tasks[it->second].channel, tasks[it->second].tracker};
  }

  void Round();
};

void Cluster::Impl::Round() {
  MutexLock round(round_mu);
  struct Probe {
    size_t index;
    uint64_t mark;  // the calls to the task started before this round
    ::grpc::ClientContext ctx;
    wpb::GetStatusRequest req;
    wpb::GetStatusResponse resp;
    ::grpc::Status status;
  };
  std::vector<std::unique_ptr<Probe>> probes;
  for (size_t i = 0; i < tasks.size(); ++i) {
    if (tasks[i].stub == nullptr) continue;
    auto p = std::make_unique<Probe>();
    p->index = i;
    p->mark = tasks[i].tracker->Mark();
    p->ctx.set_deadline(DeadlineIn(options.heartbeat_deadline_s));
    // A task that is back answers even while the channel waits to reconnect.
    p->ctx.set_wait_for_ready(true);
    probes.push_back(std::move(p));
  }
  Mutex done_mu;
  CondVar done_cv;
  size_t remaining = probes.size();
  for (auto& p : probes) {
    Probe* raw = p.get();
    tasks[raw->index].stub->async()->GetStatus(&raw->ctx, &raw->req, &raw->resp,
                                               [&, raw](::grpc::Status s) {
                                                 raw->status = std::move(s);
                                                 MutexLock l(done_mu);
                                                 if (--remaining == 0) done_cv.NotifyAll();
                                               });
  }
  {
    // Every call has its deadline, so this ends; the extra second covers
    // gRPC's own lateness in reporting it.
    MutexLock l(done_mu);
    while (remaining != 0) done_cv.Wait(done_mu);
  }
  const auto now = std::chrono::steady_clock::now();
  MutexLock l(mu);
  for (auto& p : probes) {
    Task& t = tasks[p->index];
    if (!p->status.ok()) {
      t.info.state = ClusterTaskInfo::State::kUnreachable;
      t.info.last_error = CallFailed(t.info.name, "GetStatus", p->status).message();
      t.tracker->CancelBefore(p->mark, "GetStatus: " + p->status.error_message());
      continue;
    }
    const wpb::GetStatusResponse& r = p->resp;
    if (r.job() != t.info.task.job || r.task_index() != t.info.task.index) {
      t.info.state = ClusterTaskInfo::State::kUnreachable;
      t.info.last_error = "the server at " + t.info.address + " is /job:" + r.job() + "/task:" +
                          std::to_string(r.task_index()) + ", not " + t.info.name;
      // Calls waiting for this address would reach the wrong task.
      t.tracker->CancelBefore(p->mark, t.info.last_error);
      continue;
    }
    t.info.state = ClusterTaskInfo::State::kUp;
    t.info.last_error.clear();
    t.last = now;
    std::vector<ClusterDeviceInfo> devices;
    for (const wpb::DeviceAttributes& d : r.devices()) {
      devices.push_back({d.name(), d.device_type(), d.description(), d.host_memory(),
                         d.memory_limit_bytes(), d.bytes_in_use()});
    }
    bool changed = r.incarnation() != t.info.incarnation || devices.size() != t.info.devices.size();
    for (size_t i = 0; !changed && i < devices.size(); ++i) {
      changed = devices[i].name != t.info.devices[i].name;
    }
    t.info.devices = std::move(devices);
    if (!changed) continue;
    t.info.incarnation = r.incarnation();
    t.remote_devices.clear();
    for (const ClusterDeviceInfo& d : t.info.devices) {
      StatusOr<DeviceName> parsed = DeviceName::Parse(d.name);
      if (!parsed.ok()) continue;
      t.remote_devices.push_back(std::make_shared<RemoteDevice>(
          d.name, *parsed, d.host_memory ? MemoryType::kHost : MemoryType::kDevice,
          r.incarnation(), d.description));
    }
    generation.fetch_add(1);
  }
}

Cluster::Cluster(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Cluster::~Cluster() {
  if (impl_->heartbeat != nullptr) impl_->heartbeat->Stop();
}

StatusOr<std::unique_ptr<Cluster>> Cluster::Create(const ClusterOptions& options) {
  if (options.devices == nullptr) return InvalidArgument("ClusterOptions.devices is required");
  const ClusterSpec& spec = options.spec;
  if (spec.jobs.empty()) return InvalidArgument("cluster: the cluster spec has no jobs");
  auto job = spec.jobs.find(spec.self.job);
  if (job == spec.jobs.end() || spec.self.index < 0 ||
      spec.self.index >= int(job->second.size())) {
    return InvalidArgument("task: " + TaskName(spec.self) + " is not a task of the cluster");
  }
  if (options.tune_malloc) {
    mallopt(M_MMAP_THRESHOLD, 32 << 20);
    mallopt(M_TRIM_THRESHOLD, 1 << 30);
  }
  auto impl = std::make_unique<Impl>();
  impl->options = options;
  impl->self_name = TaskName(spec.self);
  impl->incarnation = options.incarnation != 0 ? options.incarnation : ProcessIncarnation();
  for (Device* d : options.devices->devices()) {
    const DeviceName& n = d->parsed_name();
    if (n.job != spec.self.job || n.task != spec.self.index) {
      return InvalidArgument("device '" + d->name() + "' is not named for this task (" +
                             impl->self_name + "): set the device pool's job and task");
    }
  }
  for (const auto& [job_name, addresses] : spec.jobs) {
    for (size_t i = 0; i < addresses.size(); ++i) {
      Impl::Task t;
      t.info.task = TaskId{job_name, int(i)};
      t.info.name = TaskName(t.info.task);
      t.info.address = addresses[i];
      t.info.is_self = t.info.task == spec.self;
      if (t.info.is_self) {
        t.info.state = ClusterTaskInfo::State::kUp;
        t.info.incarnation = impl->incarnation;
        t.info.seconds_since_heartbeat = 0;
        for (Device* d : options.devices->devices()) {
          AllocatorStats st = d->allocator()->Stats();
          t.info.devices.push_back({d->name(), d->type(), d->Description(),
                                    d->memory_type() == MemoryType::kHost, st.bytes_limit,
                                    st.bytes_in_use});
        }
      } else {
        std::shared_ptr<::grpc::Channel> channel = NewWorkerChannel(
            addresses[i], options.heartbeat_interval_s > 0 ? options.heartbeat_interval_s : 1.0,
            options.heartbeat_deadline_s);
        t.stub = wpb::Worker::NewStub(channel);
        t.channel = channel;
      }
      impl->by_name[t.info.name] = impl->tasks.size();
      impl->tasks.push_back(std::move(t));
    }
  }
  Impl* raw = impl.get();
  const std::string self = impl->self_name;
  const double timeout = options.step_timeout_s;
  DevicePool* pool = options.devices;
  impl->delivery = std::make_unique<ThreadPool>(0);
  ThreadPool* delivery = impl->delivery.get();
  impl->rendezvous = std::make_unique<RendezvousMgr>([raw, self, timeout, pool, delivery](int64_t step_id) {
    return NewDistributedRendezvous(
        step_id, self, [raw](const std::string& task) { return raw->ConnectionTo(task); },
        // A received tensor is allocated from its device's (host-memory)
        // allocator: counted against its limit, and its freed blocks reused.
        [pool](std::string_view device) -> Allocator* {
          Device* d = pool->FindByName(device);
          return d == nullptr ? nullptr : d->host_allocator();
        },
        delivery, timeout);
  });
  std::unique_ptr<Cluster> c(new Cluster(std::move(impl)));
  if (options.heartbeat_interval_s > 0) {
    c->impl_->heartbeat = std::make_unique<PeriodicThread>(
        std::chrono::microseconds(int64_t(options.heartbeat_interval_s * 1e6)), [raw] { raw->Round(); },
        /*run_first=*/true);
  }
  return c;
}

const ClusterSpec& Cluster::spec() const { return impl_->options.spec; }
DevicePool* Cluster::devices() const { return impl_->options.devices; }

std::vector<ClusterTaskInfo> Cluster::Snapshot() const {
  const auto now = std::chrono::steady_clock::now();
  std::vector<ClusterTaskInfo> out;
  MutexLock l(impl_->mu);
  for (const Impl::Task& t : impl_->tasks) {
    ClusterTaskInfo info = t.info;
    if (t.info.is_self) {
      info.devices.clear();
      for (Device* d : impl_->options.devices->devices()) {
        AllocatorStats st = d->allocator()->Stats();
        info.devices.push_back({d->name(), d->type(), d->Description(),
                                d->memory_type() == MemoryType::kHost, st.bytes_limit,
                                st.bytes_in_use});
      }
    } else if (t.info.incarnation != 0) {
      info.seconds_since_heartbeat = std::chrono::duration<double>(now - t.last).count();
    }
    out.push_back(std::move(info));
  }
  return out;
}

void Cluster::HeartbeatNow() { impl_->Round(); }

std::string Cluster::local_task() const { return impl_->self_name; }

std::vector<std::string> Cluster::Tasks() const {
  std::vector<std::string> out;
  for (const TaskId& t : impl_->options.spec.tasks()) out.push_back(t.DeviceNamePrefix());
  return out;
}
std::string Cluster::TaskHost(const std::string& task) const {
  auto it = impl_->by_name.find(task);
  if (it == impl_->by_name.end()) return "";
  MutexLock l(impl_->mu);
  return TaskAddressHost(impl_->tasks[it->second].info.address);
}
uint64_t Cluster::local_incarnation() const { return impl_->incarnation; }

std::vector<std::shared_ptr<RemoteDevice>> Cluster::RemoteDevices(uint64_t* generation) {
  bool never = false;
  {
    MutexLock l(impl_->mu);
    for (const Impl::Task& t : impl_->tasks) never = never || t.info.incarnation == 0;
  }
  if (impl_->stale.exchange(false) || never) HeartbeatNow();
  std::vector<std::shared_ptr<RemoteDevice>> out;
  MutexLock l(impl_->mu);
  *generation = impl_->generation.load();  // bumped under mu with the devices
  for (const Impl::Task& t : impl_->tasks) {
    out.insert(out.end(), t.remote_devices.begin(), t.remote_devices.end());
  }
  return out;
}

std::vector<std::string> Cluster::UnreachableTasks() const {
  std::vector<std::string> out;
  MutexLock l(impl_->mu);
  for (const Impl::Task& t : impl_->tasks) {
    if (t.info.incarnation == 0) out.push_back(t.info.name + " at " + t.info.address);
  }
  return out;
}

bool Cluster::TaskUp(const std::string& task, uint64_t* incarnation, std::string* why) const {
  MutexLock l(impl_->mu);
  for (const Impl::Task& t : impl_->tasks) {
    if (t.info.name != task) continue;
    if (incarnation != nullptr) *incarnation = t.info.incarnation;
    const bool up = t.info.is_self || (t.info.state == ClusterTaskInfo::State::kUp &&
                                       t.info.incarnation != 0);
    if (!up && why != nullptr) {
      *why = t.info.last_error.empty() ? "no heartbeat answered yet" : t.info.last_error;
    }
    return up;
  }
  if (why != nullptr) *why = "not a task of the cluster";
  return false;
}

uint64_t Cluster::generation() const { return impl_->generation.load(); }

StatusOr<std::unique_ptr<Worker>> Cluster::NewWorker(const std::string& task,
                                                     const std::string& session_handle) {
  TaskConnection conn = impl_->ConnectionTo(task);
  if (conn.channel == nullptr) return InvalidArgument("task " + task + " is not a remote task of the cluster");
  RemoteWorkerOptions o;
  o.task = task;
  o.channel = std::move(conn.channel);
  o.tracker = std::move(conn.tracker);
  o.session_handle = session_handle;
  o.master_task = impl_->self_name;
  o.master_incarnation = impl_->incarnation;
  o.rpc_timeout_s = impl_->options.rpc_timeout_s;
  o.step_timeout_s = impl_->options.step_timeout_s;
  return NewGrpcRemoteWorker(std::move(o));
}

RendezvousMgr* Cluster::rendezvous_mgr() { return impl_->rendezvous.get(); }
StepIdSource* Cluster::step_ids() { return &impl_->step_ids; }
void Cluster::ReportUnavailable() { impl_->stale.store(true); }

}  // namespace flowstate

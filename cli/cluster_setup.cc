#include "cli/cluster_setup.h"

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>

#include "distributed/cluster.h"
#include "distributed/collective_store.h"
#include "distributed/gloo_collective.h"
#include "distributed/registry.h"
#include "distributed/worker_service.h"
#include "graph/mutex.h"
#include "server/grpc/grpc_server.h"

namespace flowstate {

StatusOr<ClusterSpec> ResolveClusterSpec(const config::ServerConfig& cfg,
                                         const char* (*getenv)(const char*)) {
  const bool type_set = !cfg.task.type.empty(), index_set = cfg.task.index != -1;
  const int index = int(std::clamp<int64_t>(cfg.task.index, -(int64_t{1} << 30), int64_t{1} << 30));
  ClusterSpec spec;
  if (!cfg.cluster.empty()) {
    spec.jobs = cfg.cluster;
    spec.self.job = cfg.task.type;
    spec.self.index = index;
    if (type_set && !index_set) {
      return InvalidArgument("task.index: required with a cluster (this task's index in job '" +
                             cfg.task.type + "')");
    }
    FS_RETURN_IF_ERROR(ValidateClusterSpec(spec, "cluster", "task"));
    return spec;
  }
  FS_ASSIGN_OR_RETURN(spec, ClusterSpecFromEnvironment(getenv));
  if (type_set || index_set) {
    if (spec.empty()) {
      return InvalidArgument("task: given (type '" + cfg.task.type + "', index " + std::to_string(cfg.task.index) +
                             ") but there is no cluster (no `cluster` in the configuration, no "
                             "TF_CONFIG, no MASTER_ADDR/MASTER_PORT/WORLD_SIZE/RANK)");
    }
    if (type_set) spec.self.job = cfg.task.type;
    if (index_set) spec.self.index = index;
    FS_RETURN_IF_ERROR(ValidateClusterSpec(spec, "cluster", "task"));
  }
  return spec;
}

namespace {

// "host" of "host:port" / "[v6]:port" (brackets kept).
std::string HostOf(const std::string& address) {
  size_t colon = address.rfind(':');
  return colon == std::string::npos ? address : address.substr(0, colon);
}

std::string PortOf(const std::string& address) {
  size_t colon = address.rfind(':');
  return colon == std::string::npos ? "" : address.substr(colon + 1);
}

}  // namespace

StatusOr<std::unique_ptr<ClusterRuntime>> ClusterRuntime::Prepare(const ClusterSpec& spec,
                                                                  const config::ServerConfig& cfg,
                                                                  GrpcServerOptions* go) {
  std::unique_ptr<ClusterRuntime> rt(new ClusterRuntime());
  {
    MutexLock l(rt->mu_);
    rt->spec_ = spec;
  }
  rt->cfg_ = cfg;
  if (!spec.registry.empty() && spec.self.index == 0) {
    // Task 0 of a MASTER_* cluster: the registry, also at MASTER_PORT on the
    // gRPC address's host (the same interfaces as the rest of the gRPC API)
    // unless the gRPC address already is that port.
    rt->registry_ = std::make_unique<ClusterRegistry>(spec.num_tasks());
    ClusterRegistry* registry = rt->registry_.get();
    go->builder_hooks.push_back([registry](::grpc::ServerBuilder& b) { b.RegisterService(registry->service()); });
    const std::string master_port = PortOf(spec.registry);
    if (PortOf(cfg.grpc.address) != master_port) {
      go->extra_addresses.push_back(HostOf(cfg.grpc.address) + ":" + master_port);
    }
  }
  // Every task serves the worker service on its gRPC port; it answers
  // UNAVAILABLE until Start attaches it to the cluster.
  WorkerServiceOptions wo;
  wo.inter_op_threads = cfg.jobs.inter_op_threads;
  wo.orphan_session_seconds = cfg.cluster_options.orphan_session_seconds;
  wo.data_root = cfg.data_root;
  rt->worker_ = std::make_unique<WorkerService>(nullptr, wo);
  WorkerService* ws = rt->worker_.get();
  go->builder_hooks.push_back([ws](::grpc::ServerBuilder& b) { ws->RegisterOn(&b); });
  // And the collective store (Gloo's rendezvous for data-parallel replicas):
  // the master task of a job serves its group's keys under the job's prefix.
  rt->collective_store_ = std::make_unique<CollectiveStoreService>();
  // Its replicas' _CreateReplicaComm kernels make Gloo participants.
  RegisterGlooCollectiveFactory();
  CollectiveStoreService* store = rt->collective_store_.get();
  go->builder_hooks.push_back([store](::grpc::ServerBuilder& b) { store->RegisterOn(&b); });
  return rt;
}

ClusterRuntime::~ClusterRuntime() {
  // Before the cluster it uses: pending calls are answered, sessions go.
  if (worker_ != nullptr) worker_->Shutdown();
  if (collective_store_ != nullptr) collective_store_->Shutdown();
}

ClusterSpec ClusterRuntime::spec() const {
  MutexLock l(mu_);
  return spec_;
}

Status ClusterRuntime::Start(int grpc_port, DevicePool* devices, const std::atomic<bool>* cancel) {
  ClusterSpec spec = this->spec();
  if (!spec.registry.empty()) {
    std::string listen_host = HostOf(cfg_.grpc.address);
    std::string host = AdvertisedHost(cfg_.cluster_options.advertise_host, listen_host);
    if (host.find(':') != std::string::npos && host.front() != '[') host = "[" + host + "]";
    const std::string advertise = host + ":" + std::to_string(grpc_port);
    std::fprintf(stderr, "flowstate: joining the cluster: rank %d of %d at %s, task 0's registry at %s\n",
                 spec.self.index, spec.num_tasks(), spec.self.index == 0 ? spec.registry.c_str() : advertise.c_str(),
                 spec.registry.c_str());
    const auto timeout = std::chrono::milliseconds(int64_t(cfg_.cluster_options.join_timeout_seconds * 1000));
    FS_ASSIGN_OR_RETURN(spec, JoinCluster(spec, advertise, registry_.get(), timeout,
                                          std::chrono::milliseconds(100), cancel));
    MutexLock l(mu_);
    spec_ = spec;
  }
  ClusterOptions co;
  co.spec = spec;
  co.devices = devices;
  co.heartbeat_interval_s = cfg_.cluster_options.heartbeat_interval_seconds;
  co.heartbeat_deadline_s = cfg_.cluster_options.heartbeat_deadline_seconds;
  if (cfg_.cluster_options.step_deadline_seconds > 0) {
    co.step_timeout_s = cfg_.cluster_options.step_deadline_seconds;
  }
  FS_ASSIGN_OR_RETURN(cluster_, Cluster::Create(co));
  worker_->Attach(cluster_.get());
  started_cluster_.store(cluster_.get());
  return Status::OK();
}

ClusterView* ClusterRuntime::cluster_view() const { return started_cluster_.load(); }

void ClusterRuntime::DropCollectivePrefix(const std::string& prefix) const {
  if (collective_store_ != nullptr) collective_store_->DropPrefix(prefix);
}

ClusterInfo ClusterRuntime::View() const {
  ClusterInfo c;
  if (Cluster* cluster = started_cluster_.load()) {
    // As the heartbeats see the tasks. The service fills in this task's own
    // live devices, incarnation and time.
    const double now = std::chrono::duration<double>(
                           std::chrono::system_clock::now().time_since_epoch()).count();
    for (const ClusterTaskInfo& t : cluster->Snapshot()) {
      TaskInfo i;
      i.job = t.task.job;
      i.index = t.task.index;
      i.address = t.address;
      i.is_self = t.is_self;
      i.state = t.state == ClusterTaskInfo::State::kUp ? TaskState::kUp : TaskState::kUnreachable;
      i.incarnation = t.incarnation;
      if (t.seconds_since_heartbeat >= 0) {
        i.last_heartbeat = now - t.seconds_since_heartbeat;
      }
      i.error = t.last_error;
      for (const ClusterDeviceInfo& d : t.devices) {
        DeviceInfo di;
        di.name = d.name;
        di.type = d.type;
        di.description = d.description;
        di.bytes_limit = d.memory_limit_bytes;
        di.bytes_in_use = d.bytes_in_use;
        i.devices.push_back(std::move(di));
      }
      c.tasks.push_back(std::move(i));
    }
    return c;
  }
  // Before Start (a MASTER_* world still assembling): the other tasks with
  // their addresses and no state learnt: UNREACHABLE, never heard from.
  MutexLock l(mu_);
  for (const TaskId& t : spec_.tasks()) {
    TaskInfo i;
    i.job = t.job;
    i.index = t.index;
    i.address = spec_.address(t).ok() ? *spec_.address(t) : "";
    i.is_self = t == spec_.self;
    if (!i.is_self) {
      i.state = TaskState::kUnreachable;
      i.error = "this task has not joined the cluster yet";
    }
    c.tasks.push_back(std::move(i));
  }
  return c;
}

}  // namespace flowstate

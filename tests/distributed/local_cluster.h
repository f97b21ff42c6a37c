// LocalCluster: n tasks of job "worker" in this test process, each with its
// own DevicePool (named /job:worker/task:i), Cluster and WorkerService on a
// loopback port picked by the system; tasks can be stopped and restarted
// (same port, new incarnation). A master Session runs on task 0. Each
// task's worker sessions read replica input under its data root ("": none;
// SetDataRoot changes one task's from its next restart).
#ifndef FLOWSTATE_TESTS_DISTRIBUTED_LOCAL_CLUSTER_H_
#define FLOWSTATE_TESTS_DISTRIBUTED_LOCAL_CLUSTER_H_

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "devices/device_pool.h"
#include "distributed/cluster.h"
#include "distributed/worker_service.h"
#include "scheduler/session.h"

namespace flowstate::testing {

struct LocalTask {
  std::unique_ptr<DevicePool> pool;
  std::unique_ptr<WorkerService> service;
  std::unique_ptr<Cluster> cluster;
  int port = 0;
  // While the task is stopped: a socket bound (not listening) to its port,
  // so that no other test process running at the same time is handed that
  // port and answers calls meant for this task; -1 otherwise.
  int port_hold = -1;
};

class LocalCluster {
 public:
  explicit LocalCluster(int n, int cpus_per_task = 1, double orphan_session_seconds = 60,
                        const std::string& data_root = "")
      : LocalCluster(n, cpus_per_task, orphan_session_seconds, std::vector<std::string>(n, data_root)) {}
  // Task i's data root is data_roots[i].
  LocalCluster(int n, int cpus_per_task, double orphan_session_seconds,
               std::vector<std::string> data_roots)
      : cpus_(cpus_per_task),
        orphan_session_seconds_(orphan_session_seconds),
        data_roots_(std::move(data_roots)),
        tasks_(n) {
    data_roots_.resize(size_t(n));
    for (int i = 0; i < n; ++i) StartServer(i, 0);
    for (int i = 0; i < n; ++i) spec_.jobs["worker"].push_back(Address(i));
    for (int i = 0; i < n; ++i) Attach(i);
  }
  ~LocalCluster() {
    for (int i = int(tasks_.size()) - 1; i >= 0; --i) {
      Stop(i);
      Release(i);
    }
  }

  void SetDataRoot(int i, const std::string& root) { data_roots_[i] = root; }
  std::string Address(int i) const { return "127.0.0.1:" + std::to_string(tasks_[i].port); }
  LocalTask& task(int i) { return tasks_[i]; }

  // The server goes away (calls in flight fail UNAVAILABLE), then its state.
  // Its port is held from the moment the server lets it go (not after the
  // task's state is torn down, which takes a heartbeat's join), so that the
  // window in which another process could be handed it is a millisecond.
  void Stop(int i) {
    LocalTask& t = tasks_[i];
    if (t.service) t.service->Shutdown();
    if (t.port_hold < 0 && t.port > 0) t.port_hold = HoldPortOnceFree(t.port);
    t.service.reset();
    t.cluster.reset();
    t.pool.reset();
  }
  // A new process, as far as the others can tell: same port, new incarnation.
  void Restart(int i) {
    Release(i);  // just before the new server binds the port again
    StartServer(i, tasks_[i].port);
    Attach(i);
  }

  std::unique_ptr<Session> NewSession(const GraphDef& graph, Status* status = nullptr) {
    SessionOptions o;
    o.devices = tasks_[0].pool.get();
    o.remote = tasks_[0].cluster.get();
    o.inter_op_threads = 2;
    StatusOr<std::unique_ptr<Session>> s = Session::Create(graph, o);
    if (status != nullptr) *status = s.status();
    return s.ok() ? std::move(s).value() : nullptr;
  }

 private:
  // A socket bound to 127.0.0.1:port, never listening: a connection to it
  // is refused, as to a dead task. No SO_REUSEPORT: with it, another
  // process's gRPC server (which sets SO_REUSEPORT) could be handed the
  // same port by bind(0) and answer in the stopped task's place. Only
  // SO_REUSEADDR, so a port in TIME_WAIT can still be held. -1 if it
  // cannot bind.
  static int HoldPort(int port) {
    int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) return -1;
    int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons(uint16_t(port));
    if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
      ::close(fd);
      return -1;
    }
    return fd;
  }
  // HoldPort, retried every millisecond for up to 2 s while the stopped
  // server's listener is still closing.
  static int HoldPortOnceFree(int port) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
    for (;;) {
      int fd = HoldPort(port);
      if (fd >= 0 || std::chrono::steady_clock::now() > deadline) return fd;
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }
  void Release(int i) {
    if (tasks_[i].port_hold >= 0) ::close(tasks_[i].port_hold);
    tasks_[i].port_hold = -1;
  }
  void StartServer(int i, int port) {
    LocalTask& t = tasks_[i];
    DevicePoolOptions po;
    po.job = "worker";
    po.task = i;
    po.num_cpu_devices = cpus_;
    po.intra_op_threads = 1;
    t.pool = DevicePool::Create(po).value();
    WorkerServiceOptions wo;
    wo.inter_op_threads = 2;
    wo.orphan_session_seconds = orphan_session_seconds_;
    wo.data_root = data_roots_[i];
    t.service = std::make_unique<WorkerService>(nullptr, wo);
    t.port = t.service->Start("127.0.0.1", port).value();
  }
  void Attach(int i) {
    LocalTask& t = tasks_[i];
    ClusterOptions o;
    o.spec = spec_;
    o.spec.self = TaskId{"worker", i};
    o.devices = t.pool.get();
    std::random_device rd;
    o.incarnation = (uint64_t(rd()) << 32) | rd() | 1;
    o.heartbeat_interval_s = 0.2;
    o.heartbeat_deadline_s = 1.0;
    o.rpc_timeout_s = 5;
    o.step_timeout_s = 60;
    t.cluster = Cluster::Create(o).value();
    t.service->Attach(t.cluster.get());
  }

  int cpus_;
  double orphan_session_seconds_;
  std::vector<std::string> data_roots_;
  std::vector<LocalTask> tasks_;
  ClusterSpec spec_;
};

}  // namespace flowstate::testing

#endif  // FLOWSTATE_TESTS_DISTRIBUTED_LOCAL_CLUSTER_H_

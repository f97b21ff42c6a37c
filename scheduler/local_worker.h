// LocalWorker: the in-process Worker. It owns the executors of the
// partitions registered with it and the kernels of their stateful nodes
// (KernelCache: one per worker, so a node keeps its random stream whichever
// signature runs it), and runs partitions on the devices of a DevicePool.
//
// A step whose partition exchanges tensors gets a step entry: the step's
// rendezvous (from the RendezvousMgr, by step id), the cancellation managers
// of its running partitions and its first error; AbortStep fails all of it
// at once. A partition that exchanges nothing, run with RunGraphSync, runs on
// the caller's thread with no entry and no allocation beyond the executor's;
// the master cancels it through RunGraphArgs::cancellation.
//
// Ownership: the devices, the ResourceMgr, the inter-op pool and a given
// RendezvousMgr are not owned and must outlive the worker. Thread-safe.
#ifndef FLOWSTATE_SCHEDULER_LOCAL_WORKER_H_
#define FLOWSTATE_SCHEDULER_LOCAL_WORKER_H_

#include <atomic>
#include <memory>
#include <unordered_map>
#include <vector>

#include "devices/device_pool.h"
#include "graph/mutex.h"
#include "scheduler/executor.h"
#include "scheduler/rendezvous.h"
#include "scheduler/worker.h"

namespace flowstate {

class ThreadPool;

struct LocalWorkerOptions {
  DevicePool* devices = nullptr;       // required
  ResourceMgr* resources = nullptr;    // required: the session's state
  ThreadPool* inter_op_pool = nullptr; // expensive ready nodes; inline when null
  // The rendezvous of the steps; null: the worker's own. Step ids must be
  // unique among the users of one manager.
  RendezvousMgr* rendezvous_mgr = nullptr;
};

class LocalWorker final : public Worker {
 public:
  explicit LocalWorker(const LocalWorkerOptions& options);
  ~LocalWorker() override;  // REQUIRES: every graph deregistered, no step running

  StatusOr<RegisteredGraph*> RegisterGraph(RegisterGraphRequest request) override;
  void DeregisterGraph(RegisteredGraph* graph) override;
  bool MayWait(const RegisteredGraph* graph) const override;
  void RunGraph(RegisteredGraph* graph, const RunGraphArgs& args, StatusCallback done) override;
  Status RunGraphSync(RegisteredGraph* graph, const RunGraphArgs& args) override;
  void AbortStep(int64_t step_id, const Status& status) override;
  void CleanupStep(int64_t step_id) override;
  StatusOr<std::map<std::string, std::string>> ExportKernelStates() override;
  Status ImportKernelStates(const std::map<std::string, std::string>& states) override;
  void ClearKernelStates() override;

  RendezvousMgr* rendezvous_mgr() const { return rendezvous_; }
  // Step entries held now (for tests and leak checks).
  int num_steps() const;

 private:
  struct Graph;
  struct Step {
    std::shared_ptr<Rendezvous> rendezvous;
    // One per running partition of the step.
    std::vector<std::shared_ptr<CancellationManager>> running;
    Status first_error;
  };

  LocalWorkerOptions options_;
  std::unique_ptr<RendezvousMgr> own_rendezvous_;
  RendezvousMgr* rendezvous_ = nullptr;
  KernelCache kernel_cache_;

  mutable Mutex mu_;
  std::unordered_map<Graph*, std::unique_ptr<Graph>> graphs_ ABSL_GUARDED_BY(mu_);
  std::unordered_map<int64_t, Step> steps_ ABSL_GUARDED_BY(mu_);
  // steps_.size(), read without the lock: CleanupStep skips the lock when 0.
  std::atomic<int> num_steps_{0};
};

}  // namespace flowstate

#endif  // FLOWSTATE_SCHEDULER_LOCAL_WORKER_H_

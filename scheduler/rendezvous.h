// Rendezvous: where a step's _Send and _Recv nodes meet. Each cross-device
// edge of a partitioned graph becomes a _Send on the producer's device and a
// _Recv on the consumer's, sharing a key (CreateRendezvousKey); the first to
// arrive waits for the other.
//
// `Rendezvous` is the interface the kernels see; one instance serves one
// step. `LocalRendezvous` is the in-process table; a rendezvous that pulls
// tensors from another task implements the same interface (distributed/).
// `RendezvousMgr` hands out the rendezvous of each step by step id, so that
// every partition of a step on one worker meets in the same one and a step
// can be aborted by id (by a master that only knows the id).
//
// Thread safety: all three are thread-safe. Receivers never block a thread:
// RecvAsync calls `done` when the value arrives (possibly on the sender's
// thread) or when the step is aborted.
//
// A dead value (the untaken side of a conditional, or a loop's last
// iteration, crossing partitions) is sent and received as an uninitialized
// Tensor, the dead mark; every live value is initialized.
//
// Ownership: RendezvousMgr owns the
// rendezvous of live steps until Cleanup(step_id); callers that keep the
// shared_ptr from Find() keep it alive past that.
#ifndef FLOWSTATE_SCHEDULER_RENDEZVOUS_H_
#define FLOWSTATE_SCHEDULER_RENDEZVOUS_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>

#include "graph/mutex.h"
#include "graph/status.h"
#include "graph/tensor.h"

namespace flowstate {

class Rendezvous {
 public:
  using DoneCallback = std::function<void(const Status&, const Tensor&)>;

  virtual ~Rendezvous() = default;

  // ALREADY_EXISTS if the key was sent before in this step; the abort status
  // after StartAbort().
  virtual Status Send(const std::string& key, const Tensor& value) = 0;
  // Calls `done` once: with the value sent under `key`, or with the abort
  // status (now, or when StartAbort() comes first). ALREADY_EXISTS when the
  // key is already being received.
  virtual void RecvAsync(const std::string& key, DoneCallback done) = 0;
  // Fails every pending and future Recv (and Send) with `status`
  // (CANCELLED when `status` is OK). Only the first call counts.
  virtual void StartAbort(const Status& status) = 0;
};

// The in-process table. Destroying it aborts what still waits (CANCELLED).
class LocalRendezvous final : public Rendezvous {
 public:
  LocalRendezvous() = default;
  ~LocalRendezvous() override;

  Status Send(const std::string& key, const Tensor& value) override;
  void RecvAsync(const std::string& key, DoneCallback done) override;
  void StartAbort(const Status& status) override;

 private:
  struct Item {
    bool has_value = false;
    Tensor value;
    DoneCallback waiter;
  };
  Mutex mu_;
  Status aborted_ ABSL_GUARDED_BY(mu_);
  std::unordered_map<std::string, Item> table_ ABSL_GUARDED_BY(mu_);
};

// The key under which the _Send of tensor (or control edge) `name` on
// `src_device` and its _Recv on `dst_device` meet:
// "<src_device>;<src_incarnation, hex>;<dst_device>;<name>". The sender's
// incarnation makes a key from before a task restarted differ from every
// key after it, so a restarted task never matches a stale tensor.
std::string CreateRendezvousKey(std::string_view src_device, uint64_t src_incarnation,
                                std::string_view dst_device, std::string_view name);

// The incarnation of this process's devices: random and non-zero, fixed for
// the life of the process.
uint64_t ProcessIncarnation();

// The rendezvous of each live step, by step id. Step ids must be unique
// among the steps that share a manager (one per worker).
class RendezvousMgr {
 public:
  // Makes the rendezvous of a new step; null: a LocalRendezvous.
  using Factory = std::function<std::shared_ptr<Rendezvous>(int64_t step_id)>;
  explicit RendezvousMgr(Factory factory = nullptr);
  ~RendezvousMgr();  // aborts the steps still held (CANCELLED)

  // The rendezvous of `step_id`, created on first use. A step aborted
  // before it is found gets an already aborted rendezvous.
  std::shared_ptr<Rendezvous> Find(int64_t step_id);
  // Forgets the step (its rendezvous is aborted with CANCELLED once the
  // last holder lets go, as any LocalRendezvous). Call when the step ended
  // on every worker. A no-op for an unknown step.
  void Cleanup(int64_t step_id);
  // Fails every pending and future Send/Recv of the step with `status`, at
  // once; other steps are untouched. The step stays known (aborted) until
  // Cleanup(step_id).
  void AbortStep(int64_t step_id, const Status& status);
  // Steps held now (for tests and leak checks).
  int num_steps() const;

 private:
  Factory factory_;
  mutable Mutex mu_;
  std::unordered_map<int64_t, std::shared_ptr<Rendezvous>> steps_ ABSL_GUARDED_BY(mu_);
};

}  // namespace flowstate

#endif  // FLOWSTATE_SCHEDULER_RENDEZVOUS_H_

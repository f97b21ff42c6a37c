// Collective: all-reduce across the replicas of a data-parallel step. Each
// participant (rank 0..size-1) holds one Collective and calls AllReduce with
// its own list of tensors; the call returns once every rank has called, with
// every rank's tensors replaced by the element-wise sum (or mean) over the
// ranks. The all-reduce ops call this interface; the in-process
// implementation below serves N replicas in one process (one thread each),
// and implementations over Gloo or NCCL (distributed/) serve ranks in other
// processes.
//
// Contract of every implementation:
// - Calls meet by order: the k-th AllReduce of every rank forms one round.
//   Every rank passes the same number of tensors with the same dtypes and
//   shapes, and the same op; otherwise every rank of the round gets
//   INVALID_ARGUMENT naming the first rank that differs from rank 0.
// - Deterministic: each element is reduced in an order fixed by the
//   implementation, the group size and the tensors' dtypes and shapes,
//   whatever order the ranks arrive in, so two runs with the same inputs are
//   bit-identical and every rank gets the same bytes. InProcessCollective
//   reduces in rank order, ((x0 + x1) + x2) ...; GlooCollective
//   (distributed/gloo_collective.h) in ring order, a rotation of it per
//   chunk of the buffer (the same for integers, and for floats at 2 ranks;
//   floats at 3 or more ranks may differ from rank order in the last bits).
// - A round that some rank has not joined by a caller's deadline fails for
//   every rank of it (those waiting now and those that come later) with
//   DEADLINE_EXCEEDED naming the missing ranks; nobody hangs.
// - Abort(status) fails every pending and later call of every rank at once
//   with `status`; the group cannot be used again. (Across processes, the
//   other ranks fail at their next communication, naming the rank that
//   aborted.)
//
// Thread safety: each participant is used by one thread at a time (its
// replica); different participants are used from different threads, and
// Abort may be called from any thread at any time.
//
// StepRace (below) decides, for a job with backup replicas, which replicas
// contribute to each step; every implementation is thread-safe.
#ifndef FLOWSTATE_SCHEDULER_COLLECTIVE_H_
#define FLOWSTATE_SCHEDULER_COLLECTIVE_H_

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "graph/status.h"
#include "graph/tensor.h"

namespace flowstate {

enum class ReduceOp {
  kSum,
  kMean,  // the sum divided by the number of ranks (truncated for integers)
};

class Collective {
 public:
  using Deadline = std::chrono::steady_clock::time_point;

  virtual ~Collective() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;

  // Reduces `tensors` (float32, float64, int32 or int64, host memory)
  // across the ranks: on success each holds the result. A tensor whose
  // buffer nobody else shares is overwritten (or given another buffer
  // holding the result); one whose buffer is shared
  // is replaced by a new tensor (other holders keep the old value). On
  // error the tensors are unchanged, except that when the group itself fails
  // mid-transfer (it cannot be used again then), an implementation across
  // processes may leave a tensor whose buffer nobody else shares partly
  // reduced (GlooCollective reduces those in place).
  virtual Status AllReduce(std::vector<Tensor>* tensors, ReduceOp op, Deadline deadline) = 0;

  // Concatenates every rank's tensors along their first dimension, in rank
  // order: on success (*tensors)[i] holds rank 0's rows of it, then rank
  // 1's, ... (what sparse gradients travel by: their rows, not the dense
  // tensor). The ranks' i-th tensors agree in dtype (as AllReduce takes)
  // and in every dimension but the first; a rank may have no rows. Two
  // rounds of AllReduce, matched by call order like the others: the ranks'
  // row counts, then each rank's rows placed at its offset among zeros
  // (x + 0 is x exactly, so the result is the concatenation, bit for bit).
  // On error the tensors are unchanged.
  virtual Status AllGather(std::vector<Tensor>* tensors, Deadline deadline);

  // Fails every pending and later call of the group with `status`
  // (CANCELLED when OK). The first call counts.
  virtual void Abort(const Status& status) = 0;

  // Rounds of some ranks only, and transfers between two ranks: what backup
  // replicas need so that a step goes on without a slow replica, which
  // receives the step's result later (scheduler/replica_comm.h). An
  // implementation that offers them says so; the others answer
  // UNIMPLEMENTED. Unlike AllReduce, these calls are matched by `tag` (every
  // party passes the same one, unique among the calls in flight), not by
  // call order, and nothing checks that the parties' tensors agree: the
  // caller passes the same dtypes and shapes everywhere.
  virtual bool supports_subgroups() const { return false; }
  // The sum of `tensors` over `members` (increasing ranks, this one among
  // them); the other ranks take no part.
  virtual Status AllReduceAmong(std::vector<Tensor>* tensors, const std::vector<int>& members,
                                uint32_t tag, Deadline deadline);
  // Sends `tensors` to rank `to`; returns once they are sent. May run on
  // another thread than this participant's other calls.
  virtual Status Send(const std::vector<Tensor>& tensors, int to, uint32_t tag, Deadline deadline);
  // Receives what rank `from` sent with `tag` into `tensors` (their own
  // buffers, which nobody else shares; the sizes the sender sent).
  virtual Status Recv(std::vector<Tensor>* tensors, int from, uint32_t tag, Deadline deadline);
  // Gives up the subgroup round or receive of `tag` on this rank, whether it
  // is in progress (another thread may call this) or comes later: it
  // returns ABORTED at once with its tensors as they were, and the group
  // stays usable for other tags. A peer may still be in that round; what
  // this rank had posted for it stays with the collective until it is
  // destroyed, so a late peer's data lands there and nowhere else.
  virtual void Abandon(uint32_t tag);
};

// N participants in one process. Create() makes the whole group; rank i is
// element i. Participants share the group's state; each may be destroyed
// when its replica is done with it.
class InProcessCollective final : public Collective {
 public:
  // REQUIRES: size >= 1.
  static std::vector<std::unique_ptr<InProcessCollective>> Create(int size);

  int rank() const override { return rank_; }
  int size() const override;
  Status AllReduce(std::vector<Tensor>* tensors, ReduceOp op, Deadline deadline) override;
  void Abort(const Status& status) override;

  struct Group;  // the shared state; defined in collective.cc

 private:
  InProcessCollective(std::shared_ptr<Group> group, int rank)
      : group_(std::move(group)), rank_(rank) {}

  std::shared_ptr<Group> group_;
  int rank_;
};

// Collectives across processes, made by name: a library that implements
// one (distributed/gloo_collective.h: "gloo") registers a factory at start
// (RegisterCollectiveFactory), and the _CreateReplicaComm kernel of a task
// makes its replica's participant through CreateCollective without linking
// that library. Thread-safe.
struct CollectiveGroupSpec {
  std::string kind;           // the registered factory, e.g. "gloo"
  std::string store_address;  // "host:port" of the rendezvous store
  std::string prefix;         // the membership's keys in the store
  int rank = 0;
  int size = 1;
  std::chrono::milliseconds timeout{30000};  // bounds the rendezvous
  std::string host;                          // where this rank listens; empty: the default
};
using CollectiveFactory =
    std::function<StatusOr<std::unique_ptr<Collective>>(const CollectiveGroupSpec&)>;
// Registers (or replaces) the factory of `kind`.
void RegisterCollectiveFactory(const std::string& kind, CollectiveFactory factory);
// NOT_FOUND naming the kind when no factory is registered for it.
StatusOr<std::unique_ptr<Collective>> CreateCollective(const CollectiveGroupSpec& spec);

// Who contributes to each step when only the first `contributors` of
// `replicas` replicas to finish their backward pass count. Steps are
// numbered by the replicas' ReplicaComm (steps begun), which agree. Each
// participant holds a StepRace: replicas in one process share one
// LocalStepRace; replicas on several tasks each hold one made by
// CreateStepRace, which meet in the group's store (distributed/).
//
// Every replica calls Decide once a step (its ReplicaComm does, when the
// step's first bucket is handed in). The step's contributors are the first
// `contributors` replicas with examples to arrive, or, when fewer replicas
// have examples in the step (the last step of an epoch), every replica
// with examples once all have arrived. Exactly one arrival decides the step,
// and every replica gets the same decision.
class StepRace {
 public:
  struct Decision {
    bool contributes = false;  // this replica's gradients count
    std::vector<int> members;  // the step's contributors, increasing
  };

  virtual ~StepRace() = default;

  // Arrives at `step` (`has_examples`: it has examples to contribute) and
  // waits, until `deadline`, for the step's decision. A replica with
  // examples that arrives after the places are taken is dropped from the
  // step (Dropped counts it). `settle_after` > 0: a replica with examples
  // that has waited that long for an undecided step decides it with the
  // replicas with examples arrived so far (the others are stalled, or it
  // is an epoch's last step and one without examples is): the first
  // decision written wins, this one or the arrival's that fills the places.
  virtual StatusOr<Decision> Decide(int64_t step, int rank, bool has_examples,
                                    std::chrono::steady_clock::time_point deadline,
                                    std::chrono::milliseconds settle_after =
                                        std::chrono::milliseconds(0)) = 0;
  // Whether `step` is decided already (a replica that finds its next step
  // decided without it is behind: it catches up instead of computing).
  virtual StatusOr<bool> Decided(int64_t step) = 0;
  // Waits up to `delay` (a straggler's extra time) or until `step` has its
  // contributors without `rank`: then `rank` is dropped from the step and
  // true is returned (it abandons the step's computation and arrives
  // without examples).
  virtual StatusOr<bool> WaitDecidedWithout(int64_t step, int rank,
                                            std::chrono::milliseconds delay) = 0;
  // How a step whose reduction stalls ends the same way on every replica
  // (a contributor stopped in the middle of it: across processes the
  // contributors give the step up rather than wait for it). The first
  // proposal for a step wins: kDone from a contributor whose reduction of
  // the step's last bucket completed, kAbandoned from one that waited past
  // its stall timeout. Every replica then applies the step's result
  // (kDone) or a zero gradient (kAbandoned), so they stay identical.
  enum class Outcome { kOpen, kDone, kAbandoned };
  // Proposes `proposal` (kDone or kAbandoned) for `step`; returns the
  // step's outcome (the first proposal's).
  virtual StatusOr<Outcome> Settle(int64_t step, Outcome proposal,
                                   std::chrono::steady_clock::time_point deadline) = 0;
  // The step's outcome so far (kOpen: no proposal yet).
  virtual StatusOr<Outcome> OutcomeOf(int64_t step) = 0;
  // `rank` contributed to `step`, which was abandoned: it counts as
  // dropped from it (Dropped). Once per rank and step.
  virtual Status RecordAbandoned(int64_t step, int rank) = 0;
  // Every replica is done with `step`: its bookkeeping may go.
  virtual Status End(int64_t step) = 0;
  // How many steps each replica was dropped from (abandoned steps count
  // for their contributors).
  virtual StatusOr<std::vector<int64_t>> Dropped() = 0;
};

// Races across processes, made by the kind of their collective (a library
// that implements one registers a factory, as for CreateCollective): rank
// `spec.rank` of `spec.size`, meeting under `spec.prefix` in the store at
// `spec.store_address`. Thread-safe.
using StepRaceFactory = std::function<StatusOr<std::shared_ptr<StepRace>>(
    const CollectiveGroupSpec& spec, int contributors)>;
void RegisterStepRaceFactory(const std::string& kind, StepRaceFactory factory);
// NOT_FOUND naming the kind when no factory is registered for it.
StatusOr<std::shared_ptr<StepRace>> CreateStepRace(const CollectiveGroupSpec& spec,
                                                   int contributors);

}  // namespace flowstate

#endif  // FLOWSTATE_SCHEDULER_COLLECTIVE_H_

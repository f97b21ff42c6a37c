// StoreStepRace: scheduler/'s StepRace for replicas on several tasks (a job
// with backup replicas whose replicas run in different processes). The
// ranks race in the group's collective store (distributed/collective_store.h,
// served by the master task), under "<prefix>/race":
//
//   "<prefix>/race/<step>"  arrivals   one Add per rank: 2^rank for a rank
//                                      with examples, 2^(rank+32) without
//                           decided    the contributors' bits, set by the
//                                      one arrival that decides the step
//                           outcome    "done" or "abandoned": the first
//                                      proposal (Settle), set if absent
//   "<prefix>/race"         dropped/<rank>  steps that rank was dropped from
//
// Each Add returns the arrivals so far, so exactly one rank sees the step
// decided by its own arrival: the one that makes the ranks with examples
// `contributors`, or (fewer ranks with examples: an epoch's last step) the
// last of all `size` to arrive. It sets "decided" (if absent); the others
// wait for it (a store Wait, bounded by the caller's deadline) and read it.
// A rank with examples that waits longer than its `settle_after` sets it
// itself (if absent) to the ranks with examples arrived so far; whichever
// is set first is the decision everyone reads. So a rank
// spends one round trip on a step it decides, three on the others; and a
// contributor one more at the step's end, to settle its outcome. End
// drops the step's prefix, once every rank is done with it. The store's
// errors come back as Status naming the store. At most 31 ranks.
//
// Ownership: each rank holds its own StoreStepRace (the master's job holds
// rank 0's; a task's _CreateReplicaComm kernel holds its rank's in the
// ReplicaComm). Thread-safe (the client is).
#ifndef FLOWSTATE_DISTRIBUTED_STORE_STEP_RACE_H_
#define FLOWSTATE_DISTRIBUTED_STORE_STEP_RACE_H_

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "distributed/collective_store.h"
#include "scheduler/collective.h"

namespace flowstate {

class StoreStepRace final : public StepRace {
 public:
  // `spec`: the group (store address, membership prefix, rank, size, and
  // `timeout`, which bounds each store call).
  StoreStepRace(const CollectiveGroupSpec& spec, int contributors);

  StatusOr<Decision> Decide(int64_t step, int rank, bool has_examples,
                            std::chrono::steady_clock::time_point deadline,
                            std::chrono::milliseconds settle_after =
                                std::chrono::milliseconds(0)) override;
  StatusOr<bool> Decided(int64_t step) override;
  StatusOr<bool> WaitDecidedWithout(int64_t step, int rank,
                                    std::chrono::milliseconds delay) override;
  StatusOr<Outcome> Settle(int64_t step, Outcome proposal,
                           std::chrono::steady_clock::time_point deadline) override;
  StatusOr<Outcome> OutcomeOf(int64_t step) override;
  Status RecordAbandoned(int64_t step, int rank) override;
  Status End(int64_t step) override;
  StatusOr<std::vector<int64_t>> Dropped() override;

 private:
  std::string StepPrefix(int64_t step) const;
  // A decision as the store holds it (the contributors' bits).
  static Status ParseMembers(const std::string& v, uint64_t* members);
  CollectiveStoreClient::Deadline Deadline() const;

  const CollectiveGroupSpec spec_;
  const int contributors_;
  const std::string prefix_;  // "<membership>/race"
  std::shared_ptr<CollectiveStoreClient> store_;
};

// Registers StoreStepRace as the race of "gloo" groups (RegisterStepRaceFactory).
void RegisterStoreStepRaceFactory();

}  // namespace flowstate

#endif  // FLOWSTATE_DISTRIBUTED_STORE_STEP_RACE_H_

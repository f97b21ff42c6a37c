// StoreStepRace: scheduler/'s StepRace for replicas on several tasks (a job
// with backup replicas whose replicas run in different processes). The
// ranks race in the group's collective store (distributed/collective_store.h,
// served by the master task), under "<prefix>/race":
//
//   "<prefix>/race/<step>"  quota      contributors of the step (Begin)
//                           tickets    arrivals so far (Add)
//                           decided    set by the arrival that fills the quota
//   "<prefix>/race"         dropped/<rank>  steps that rank was dropped from
//
// Arrive takes a ticket (one Add) and reads the quota (one Get): the first
// `quota` tickets contribute; a later one counts itself dropped.
// WaitDecidedWithout waits for "decided" (a store Wait, bounded by the
// delay). End drops the step's prefix, so the store holds one step at a
// time. The store's errors come back as Status naming the store.
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

  Status Begin(int64_t step, int contributors) override;
  StatusOr<bool> Arrive(int64_t step, int rank) override;
  StatusOr<bool> WaitDecidedWithout(int64_t step, int rank,
                                    std::chrono::milliseconds delay) override;
  Status End(int64_t step) override;
  StatusOr<std::vector<int64_t>> Dropped() override;

 private:
  std::string StepPrefix(int64_t step) const;
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

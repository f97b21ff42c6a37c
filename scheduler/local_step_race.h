// LocalStepRace: the race of backup replicas in one process
// (scheduler/collective.h, StepRace): the first `contributors` replicas
// with examples to arrive at a step contribute to it, and every replica
// learns who they were. Replicas across processes meet in the collective
// store instead (distributed/store_step_race.h).
//
// Thread-safe (one mutex; waits on its condition variable).
#ifndef FLOWSTATE_SCHEDULER_LOCAL_STEP_RACE_H_
#define FLOWSTATE_SCHEDULER_LOCAL_STEP_RACE_H_

#include <chrono>
#include <cstdint>
#include <map>
#include <vector>

#include "graph/mutex.h"
#include "graph/status.h"
#include "scheduler/collective.h"

namespace flowstate {

// The race of replicas in one process (scheduler/collective.h, StepRace).
class LocalStepRace final : public StepRace {
 public:
  LocalStepRace(int replicas, int contributors);

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
  struct StepState {
    std::vector<int> with;  // arrivals with examples, in order
    int arrived = 0;
    bool decided = false;
    std::vector<int> members;  // once decided, increasing
    Outcome outcome = Outcome::kOpen;
  };

  const int replicas_;
  const int quota_;
  mutable Mutex mu_;
  CondVar cv_;
  std::map<int64_t, StepState> steps_ ABSL_GUARDED_BY(mu_);
  std::vector<int64_t> dropped_ ABSL_GUARDED_BY(mu_);
};

}  // namespace flowstate

#endif  // FLOWSTATE_SCHEDULER_LOCAL_STEP_RACE_H_

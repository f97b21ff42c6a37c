#include "scheduler/local_step_race.h"

#include <algorithm>

namespace flowstate {

LocalStepRace::LocalStepRace(int replicas, int contributors)
    : replicas_(replicas), quota_(contributors), dropped_(replicas, 0) {}

StatusOr<StepRace::Decision> LocalStepRace::Decide(int64_t step, int rank, bool has_examples,
                                                   std::chrono::steady_clock::time_point deadline,
                                                   std::chrono::milliseconds settle_after) {
  MutexLock l(mu_);
  StepState& s = steps_[step];
  ++s.arrived;
  if (has_examples) s.with.push_back(rank);
  const int with = int(s.with.size());
  if (!s.decided && ((has_examples && with == quota_) || (s.arrived == replicas_ && with < quota_))) {
    s.decided = true;
    s.members = s.with;
    std::sort(s.members.begin(), s.members.end());
    cv_.NotifyAll();
  }
  if (has_examples && settle_after.count() > 0) {
    const auto settle = std::min(deadline, std::chrono::steady_clock::now() + settle_after);
    while (!s.decided && cv_.WaitUntil(mu_, settle)) {
    }
    if (!s.decided && std::chrono::steady_clock::now() < deadline) {
      // Waited long enough: the step goes on with who has come.
      s.decided = true;
      s.members = s.with;
      std::sort(s.members.begin(), s.members.end());
      cv_.NotifyAll();
    }
  }
  while (!s.decided && cv_.WaitUntil(mu_, deadline)) {
  }
  if (!s.decided) {
    return DeadlineExceeded("backup replicas: step " + std::to_string(step) +
                            " was not decided by the deadline (rank " + std::to_string(rank) + ")");
  }
  Decision d;
  d.members = s.members;
  d.contributes = std::binary_search(d.members.begin(), d.members.end(), rank);
  if (has_examples && !d.contributes) ++dropped_[rank];
  return d;
}

StatusOr<bool> LocalStepRace::Decided(int64_t step) {
  MutexLock l(mu_);
  auto it = steps_.find(step);
  return it != steps_.end() && it->second.decided;
}

StatusOr<bool> LocalStepRace::WaitDecidedWithout(int64_t step, int rank,
                                                 std::chrono::milliseconds delay) {
  MutexLock l(mu_);
  StepState& s = steps_[step];
  const auto until = std::chrono::steady_clock::now() + delay;
  while (!s.decided && cv_.WaitUntil(mu_, until)) {
  }
  if (!s.decided) return false;
  ++dropped_[rank];
  return true;
}

StatusOr<StepRace::Outcome> LocalStepRace::Settle(int64_t step, Outcome proposal,
                                                  std::chrono::steady_clock::time_point) {
  MutexLock l(mu_);
  StepState& s = steps_[step];
  if (s.outcome == Outcome::kOpen) s.outcome = proposal;
  return s.outcome;
}

StatusOr<StepRace::Outcome> LocalStepRace::OutcomeOf(int64_t step) {
  MutexLock l(mu_);
  auto it = steps_.find(step);
  return it == steps_.end() ? Outcome::kOpen : it->second.outcome;
}

Status LocalStepRace::RecordAbandoned(int64_t, int rank) {
  MutexLock l(mu_);
  ++dropped_[rank];
  return Status();
}

Status LocalStepRace::End(int64_t step) {
  MutexLock l(mu_);
  steps_.erase(step);
  return Status();
}

StatusOr<std::vector<int64_t>> LocalStepRace::Dropped() {
  MutexLock l(mu_);
  return dropped_;
}

}  // namespace flowstate

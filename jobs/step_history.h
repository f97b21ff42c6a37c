// StepHistory: a job's loss curve and evaluations (api/views.h JobHistory),
// bounded for a job of any length. The job manager keeps one per job
// (GET /v1/jobs/{id}/history) and `flowstate train --plot` one per run, so
// the rule is the same for both:
//
//   A step is kept when its number is a multiple of the stride (1 at
//   first). When kMaxPoints steps are held, every other one is dropped --
//   those that are not multiples of twice the stride -- and the stride
//   doubles. So a long job keeps between kMaxPoints / 2 and kMaxPoints
//   evenly spaced steps, plus its latest step when that is not one of them
//   (so the curve reaches the current step); evaluations are all kept.
//
// Steps whose update was skipped (a NaN/Inf loss, on_nan "skip_step") are
// not recorded: their loss is not a number to plot.
//
// Value type; no synchronization of its own.
#ifndef FLOWSTATE_JOBS_STEP_HISTORY_H_
#define FLOWSTATE_JOBS_STEP_HISTORY_H_

#include <cstdint>
#include <map>
#include <string>

#include "api/views.h"

namespace flowstate {

class StepHistory {
 public:
  static constexpr size_t kMaxPoints = 2000;

  StepHistory() = default;
  // Continues a stored history (JobHistory::stride and its points).
  explicit StepHistory(JobHistory stored);

  // One step: `examples` in `seconds`, ending at `time` (seconds since the
  // Unix epoch).
  void AddStep(int64_t step, int64_t epoch, double loss, int64_t examples, double seconds, double time);
  void AddEval(int64_t step, int64_t epoch, const std::map<std::string, double>& metrics, double time);
  // Forgets steps and evaluations after `step` (a job resumed from the
  // checkpoint at `step` runs them again).
  void TruncateAfter(int64_t step);
  // Whether an evaluation at `step` is recorded.
  bool HasEvalAt(int64_t step) const;

  // The history with its job id (the latest step last).
  JobHistory View(const std::string& job_id) const;
  // Changes since construction (AddStep, AddEval, TruncateAfter that removed
  // something): the writer compares it with what it last stored.
  uint64_t version() const { return version_; }
  int64_t stride() const { return h_.stride; }
  size_t num_steps() const { return h_.steps.size() + (latest_.step > 0 ? 1 : 0); }

 private:
  JobHistory h_;
  // The last step when it is not a multiple of the stride (step 0: none),
  // so the curve reaches the job's current step.
  JobHistoryStep latest_;
  uint64_t version_ = 0;
};

}  // namespace flowstate

#endif  // FLOWSTATE_JOBS_STEP_HISTORY_H_

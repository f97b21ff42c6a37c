#include "jobs/step_history.h"

#include <algorithm>
#include <cmath>
#include <utility>

namespace flowstate {

StepHistory::StepHistory(JobHistory stored) : h_(std::move(stored)) {
  h_.stride = std::max<int64_t>(1, h_.stride);
  // A stored history holds the latest step among its points: take it out
  // again when it is not a multiple of the stride.
  if (!h_.steps.empty() && h_.steps.back().step % h_.stride != 0) {
    latest_ = h_.steps.back();
    h_.steps.pop_back();
  }
}

void StepHistory::AddStep(int64_t step, int64_t epoch, double loss, int64_t examples, double seconds,
                          double time) {
  if (!std::isfinite(loss) || step <= 0) return;
  JobHistoryStep s;
  s.step = step;
  s.epoch = epoch;
  s.loss = loss;
  s.examples_per_sec = seconds > 0 ? double(examples) / seconds : 0;
  s.time = time;
  ++version_;
  latest_ = JobHistoryStep();
  if (step % h_.stride != 0) {
    latest_ = s;
    return;
  }
  h_.steps.push_back(s);
  if (h_.steps.size() < kMaxPoints) return;
  // Full: keep the multiples of twice the stride.
  const int64_t stride = h_.stride * 2;
  h_.steps.erase(std::remove_if(h_.steps.begin(), h_.steps.end(),
                                [&](const JobHistoryStep& p) { return p.step % stride != 0; }),
                 h_.steps.end());
  h_.stride = stride;
  h_.downsampled = true;
  if (step % stride != 0) latest_ = s;  // the curve still reaches it
}

void StepHistory::AddEval(int64_t step, int64_t epoch, const std::map<std::string, double>& metrics,
                          double time) {
  JobHistoryEval e;
  e.step = step;
  e.epoch = epoch;
  e.time = time;
  e.metrics = metrics;
  h_.evals.push_back(std::move(e));
  ++version_;
}

void StepHistory::TruncateAfter(int64_t step) {
  const size_t before = h_.steps.size() + h_.evals.size() + (latest_.step > 0 ? 1 : 0);
  std::erase_if(h_.steps, [&](const JobHistoryStep& p) { return p.step > step; });
  std::erase_if(h_.evals, [&](const JobHistoryEval& e) { return e.step > step; });
  if (latest_.step > step) latest_ = JobHistoryStep();
  if (h_.steps.size() + h_.evals.size() + (latest_.step > 0 ? 1 : 0) != before) ++version_;
}

bool StepHistory::HasEvalAt(int64_t step) const {
  return std::any_of(h_.evals.begin(), h_.evals.end(), [&](const JobHistoryEval& e) { return e.step == step; });
}

JobHistory StepHistory::View(const std::string& job_id) const {
  JobHistory v = h_;
  v.job_id = job_id;
  if (latest_.step > 0) v.steps.push_back(latest_);
  v.downsampled = h_.stride > 1;
  return v;
}

}  // namespace flowstate

// TrainingLoop: what a training job does next -- a step, an evaluation, or
// finish -- the one loop of `flowstate train` (cli/train_command.cc) and of
// the server's job manager (jobs/job_manager.cc), so that both evaluate at
// the same points. The driver asks next(), does that with its TrainingJob
// (Step, Evaluate), and reports it (AfterStep, AfterEvaluate); checkpoints,
// events and progress stay the driver's.
//
// Value type, no ownership; not thread-safe (one driver per job at a time,
// as for TrainingJob).
#ifndef FLOWSTATE_JOBS_TRAINING_LOOP_H_
#define FLOWSTATE_JOBS_TRAINING_LOOP_H_

#include <optional>

#include "api/job_spec.h"
#include "jobs/training_job.h"

namespace flowstate {

// The evaluation rule. After a step, a job with an eval set evaluates when
// the step ended an epoch whose number (counting from 1) is a multiple of
// eval.every_epochs, or when it was the job's last step (its last epoch or
// max_steps): every run ends with one evaluation of its final variables.
bool EvalDue(const std::optional<EvalSpec>& eval, const StepResult& r);

class TrainingLoop {
 public:
  enum class Next { kStep, kEvaluate, kFinish };

  Next next() const { return next_; }
  // After a step: kEvaluate when EvalDue, else kFinish after the last
  // step, else kStep.
  Next AfterStep(const std::optional<EvalSpec>& eval, const StepResult& r) {
    last_step_done_ = r.done;
    next_ = EvalDue(eval, r) ? Next::kEvaluate : r.done ? Next::kFinish : Next::kStep;
    return next_;
  }
  // After an evaluation: kFinish when it followed the last step, else kStep.
  Next AfterEvaluate() {
    next_ = last_step_done_ ? Next::kFinish : Next::kStep;
    return next_;
  }
  // A job restored from a checkpoint (after a restart, or a rebuild of its
  // replicas) goes on from there: `last` is the step the checkpoint holds
  // (TrainingJob::LastStep; step 0: none) and `evaluated` whether that
  // step's evaluation is already recorded. kEvaluate when one is due there
  // and not recorded, else kFinish when training is complete (the job
  // needs no further step), else kStep.
  Next Resume(const std::optional<EvalSpec>& eval, const StepResult& last, bool evaluated) {
    last_step_done_ = last.done;
    next_ = last.step > 0 && !evaluated && EvalDue(eval, last) ? Next::kEvaluate
            : last.done                                       ? Next::kFinish
                                                              : Next::kStep;
    return next_;
  }

 private:
  Next next_ = Next::kStep;
  bool last_step_done_ = false;
};

inline bool EvalDue(const std::optional<EvalSpec>& eval, const StepResult& r) {
  return eval.has_value() &&
         ((r.epoch_end && eval->every_epochs > 0 && (r.epoch + 1) % eval->every_epochs == 0) || r.done);
}

}  // namespace flowstate

#endif  // FLOWSTATE_JOBS_TRAINING_LOOP_H_

// The job lifecycle's one table (job_state.h).
#include "jobs/job_state.h"

namespace flowstate {
namespace {

using S = JobState;
using A = JobAction;

constexpr JobStateMachine::Transition kTable[] = {
    {S::kQueued, A::kAdmit, S::kRunning},
    {S::kQueued, A::kPause, S::kPaused},
    {S::kRunning, A::kPause, S::kPaused},
    {S::kPaused, A::kResume, S::kQueued},
    {S::kQueued, A::kCancel, S::kCancelled},
    {S::kRunning, A::kCancel, S::kCancelled},
    {S::kPaused, A::kCancel, S::kCancelled},
    {S::kRunning, A::kSucceed, S::kSucceeded},
    {S::kRunning, A::kFail, S::kFailed},
    {S::kQueued, A::kFail, S::kFailed},  // reloaded after a restart, it cannot run
    {S::kPaused, A::kFail, S::kFailed},  // the same, for a paused job
    {S::kRunning, A::kRequeue, S::kQueued},
};

}  // namespace

std::string_view JobActionName(JobAction a) {
  switch (a) {
    case A::kAdmit: return "admit";
    case A::kPause: return "pause";
    case A::kResume: return "resume";
    case A::kCancel: return "cancel";
    case A::kSucceed: return "succeed";
    case A::kFail: return "fail";
    case A::kRequeue: return "requeue";
  }
  return "unknown";
}

std::span<const JobStateMachine::Transition> JobStateMachine::Table() { return kTable; }

std::optional<JobState> JobStateMachine::Next(JobState from, JobAction action) {
  for (const Transition& t : kTable) {
    if (t.from == from && t.action == action) return t.to;
  }
  return std::nullopt;
}

Status JobStateMachine::Check(JobState from, JobAction action, const std::string& id) {
  if (Next(from, action)) return Status();
  const std::string is = "job '" + id + "' is " + std::string(JobStateName(from));
  switch (action) {
    case A::kCancel:
      return FailedPrecondition("job '" + id + "' is already " + std::string(JobStateName(from)));
    case A::kPause: return FailedPrecondition(is + "; only queued or running jobs can be paused");
    case A::kResume: return FailedPrecondition(is + "; only paused jobs can be resumed");
    case A::kAdmit: return FailedPrecondition(is + "; only queued jobs can be admitted");
    case A::kSucceed: return FailedPrecondition(is + "; only running jobs can succeed");
    case A::kFail: return FailedPrecondition(is + "; only unfinished jobs can fail");
    case A::kRequeue: return FailedPrecondition(is + "; only running jobs can be requeued");
  }
  return FailedPrecondition(is);
}

JobAction JobStateMachine::Merge(std::optional<JobAction> pending, JobAction request) {
  if (pending == A::kCancel) return A::kCancel;
  return request;
}

}  // namespace flowstate

// JobStateMachine: the job lifecycle as one table. The states are
// api/views.h's JobState (QUEUED, RUNNING, PAUSED, SUCCEEDED, FAILED,
// CANCELLED); the actions that move a job between them, and which state
// each allowed (state, action) pair leads to, are written once in
// JobStateMachine::Table(). The job manager asks Check() before every
// change of state, so the answer the API gives to a refused request
// (FAILED_PRECONDITION and its text) comes from here as well.
//
// A pause or cancel asked while a worker runs the job's step takes effect
// at the end of that step: the manager keeps it as the job's one pending
// action (Merge says which of two requests wins), not a flag per action.
//
// Only static, pure functions over a constant table: thread-safe.
#ifndef FLOWSTATE_JOBS_JOB_STATE_H_
#define FLOWSTATE_JOBS_JOB_STATE_H_

#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "api/views.h"
#include "graph/status.h"

namespace flowstate {

// What moves a job from one state to another.
enum class JobAction {
  kAdmit,    // QUEUED -> RUNNING: it got a running slot on its devices
  kPause,    // QUEUED or RUNNING -> PAUSED (a client's request)
  kResume,   // PAUSED -> QUEUED (a client's request)
  kCancel,   // any unfinished state -> CANCELLED (a client's request)
  kSucceed,  // RUNNING -> SUCCEEDED: its last step (and evaluation) is done
  kFail,     // any unfinished state -> FAILED: a step, an evaluation, its
             // start or its reload after a restart failed
  kRequeue,  // RUNNING -> QUEUED: recovered after a restart, it waits for a
             // slot again and resumes from its latest checkpoint
};
inline constexpr JobAction kAllJobActions[] = {JobAction::kAdmit,   JobAction::kPause,
                                               JobAction::kResume,  JobAction::kCancel,
                                               JobAction::kSucceed, JobAction::kFail,
                                               JobAction::kRequeue};
inline constexpr JobState kAllJobStates[] = {JobState::kQueued,    JobState::kRunning,
                                             JobState::kPaused,    JobState::kSucceeded,
                                             JobState::kFailed,    JobState::kCancelled};
std::string_view JobActionName(JobAction a);  // "admit", "pause", ...

class JobStateMachine {
 public:
  struct Transition {
    JobState from;
    JobAction action;
    JobState to;
  };
  // Every allowed transition; a (state, action) pair not in it is refused.
  static std::span<const Transition> Table();
  // The state `action` leads to from `from`; nullopt when refused.
  static std::optional<JobState> Next(JobState from, JobAction action);
  // OK when allowed; else FAILED_PRECONDITION with the API's text for job
  // `id` ("job 'job-3' is SUCCEEDED; only paused jobs can be resumed").
  static Status Check(JobState from, JobAction action, const std::string& id);
  // The action pending at the end of a RUNNING job's step after `request`
  // (kPause or kCancel) is asked while `pending` waits: a cancel outranks
  // a pause.
  static JobAction Merge(std::optional<JobAction> pending, JobAction request);
};

}  // namespace flowstate

#endif  // FLOWSTATE_JOBS_JOB_STATE_H_

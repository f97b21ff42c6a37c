// Fault points: the named moments of a job's life at which a test can stop
// the server to kill it there (JobManagerOptions::fault_point). They exist
// so that a crash test chooses the moment of a SIGKILL deterministically
// instead of by timing; nothing a client sends reaches them. The job
// manager calls the hook, when one is set, with one of these names and the
// job's step, holding its lock (so no other thread of the manager moves
// on while the hook stops the process).
//
// What is durable at each point is what the restart has to go on from:
//
//   step-done                 a step's result is recorded in memory; its
//                             checkpoint (if the policy wants one) is not
//                             taken yet.
//   final-checkpoint-written  the last step's checkpoint is written; the
//                             final evaluation has not started, the job
//                             is RUNNING in the store.
//   final-evaluation          the final evaluation has computed its
//                             metrics; none of them is recorded.
//   final-evaluation-recorded the final evaluation's metrics and event are
//                             stored; SUCCEEDED is not.
//   pause-pending             a step ended with a pause asked during it:
//   cancel-pending            the request is stored with the job, nothing
//                             of it is applied (no checkpoint, no state).
//   checkpoint-write:<reason> the writer is about to write a checkpoint
//                             taken for <reason> ("pause", "cancel",
//                             "policy", "final", ...): the state change
//                             that came with it (PAUSED, CANCELLED) is
//                             stored, the checkpoint is not.
//
// Besides the points, the one injected slowness: Straggler, a replica that
// waits before each step (TrainingJobOptions::test_straggler and
// JobManagerOptions::test_straggler set it; no job spec does).
//
// Constants and a plain struct: thread-safe.
#ifndef FLOWSTATE_JOBS_FAULT_POINTS_H_
#define FLOWSTATE_JOBS_FAULT_POINTS_H_

#include <cstdint>
#include <string_view>

namespace flowstate::fault_points {

inline constexpr std::string_view kStepDone = "step-done";
inline constexpr std::string_view kFinalCheckpointWritten = "final-checkpoint-written";
inline constexpr std::string_view kFinalEvaluation = "final-evaluation";
inline constexpr std::string_view kFinalEvaluationRecorded = "final-evaluation-recorded";
inline constexpr std::string_view kPausePending = "pause-pending";
inline constexpr std::string_view kCancelPending = "cancel-pending";
// Followed by the checkpoint's reason: "checkpoint-write:pause".
inline constexpr std::string_view kCheckpointWritePrefix = "checkpoint-write:";

// Replica `replica` waits delay_ms before each step's computation, unless
// the step is decided without it first (backup replicas), when it abandons
// its batch. A job with one runs every step from its master process (no
// chunks of steps on the tasks). replica < 0: none.
struct Straggler {
  int replica = -1;
  int64_t delay_ms = 0;
};

}  // namespace flowstate::fault_points

#endif  // FLOWSTATE_JOBS_FAULT_POINTS_H_

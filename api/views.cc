#include "api/views.h"

namespace flowstate {

std::string_view JobStateName(JobState s) {
  switch (s) {
    case JobState::kQueued: return "QUEUED";
    case JobState::kRunning: return "RUNNING";
    case JobState::kPaused: return "PAUSED";
    case JobState::kSucceeded: return "SUCCEEDED";
    case JobState::kFailed: return "FAILED";
    case JobState::kCancelled: return "CANCELLED";
  }
  return "UNKNOWN";
}

bool IsTerminal(JobState s) {
  return s == JobState::kSucceeded || s == JobState::kFailed || s == JobState::kCancelled;
}

std::string_view JobEventKindName(JobEvent::Kind k) {
  switch (k) {
    case JobEvent::Kind::kState: return "state";
    case JobEvent::Kind::kStep: return "step";
    case JobEvent::Kind::kEval: return "eval";
    case JobEvent::Kind::kCheckpoint: return "checkpoint";
    case JobEvent::Kind::kResume: return "resume";
    case JobEvent::Kind::kNan: return "nan";
  }
  return "state";
}

std::string_view TaskStateName(TaskState s) {
  switch (s) {
    case TaskState::kUp: return "UP";
    case TaskState::kUnreachable: return "UNREACHABLE";
  }
  return "UNREACHABLE";
}

std::string TaskInfo::name() const {
  return "/job:" + job + "/replica:0/task:" + std::to_string(index);
}

}  // namespace flowstate

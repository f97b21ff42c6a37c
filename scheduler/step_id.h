// StepIdSource: where a session's step ids come from. Every step gets one id,
// used for its rendezvous, its RunStats and its abort. A master that drives
// several sessions or tasks hands all of them one source, so ids stay unique
// across the cluster; a session without one uses a LocalStepIdSource of its
// own.
//
// Implementations must be thread-safe (Next() is called by concurrent
// steps). LocalStepIdSource is lock-free and owns nothing.
#ifndef FLOWSTATE_SCHEDULER_STEP_ID_H_
#define FLOWSTATE_SCHEDULER_STEP_ID_H_

#include <atomic>
#include <cstdint>

namespace flowstate {

class StepIdSource {
 public:
  virtual ~StepIdSource() = default;
  // A positive id never returned before by this source.
  virtual int64_t Next() = 0;
};

// 1, 2, 3, ... (or from `first`), from one atomic counter.
class LocalStepIdSource final : public StepIdSource {
 public:
  explicit LocalStepIdSource(int64_t first = 1) : next_(first) {}
  int64_t Next() override { return next_.fetch_add(1, std::memory_order_relaxed); }

 private:
  std::atomic<int64_t> next_;
};

}  // namespace flowstate

#endif  // FLOWSTATE_SCHEDULER_STEP_ID_H_

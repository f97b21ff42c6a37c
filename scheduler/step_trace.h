// StepTraceCollector: where one traced step's time went, op by op. The
// caller creates one right before Session::Run (RunOptions::trace), the
// executors of the step's local partitions record every kernel they run
// into it (device, thread, start, duration, bytes), and the caller reads
// the events after Run returned and calls Finish(). The frontends render it
// as Chrome trace JSON (api/views.h StepTrace, jobs/step_trace_view.h).
//
// Tracing off is a null pointer in the executor's arguments: one
// predictable branch per op and nothing else (bench/executor_bench.cc).
// Partitions on other tasks of a cluster are not traced (their workers
// ignore the pointer).
//
// Times are nanoseconds since the collector was created (steady clock).
// A thread is its Linux thread id (gettid), so a trace lines up with perf
// and top; 0 elsewhere.
//
// Thread safety: Record() may be called from many threads at once; the
// readers after the step ended.
#ifndef FLOWSTATE_SCHEDULER_STEP_TRACE_H_
#define FLOWSTATE_SCHEDULER_STEP_TRACE_H_

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>
#include "graph/mutex.h"

namespace flowstate {

class OpKernel;

class StepTraceCollector {
 public:
  struct Event {
    std::string node, op;
    int device = 0;       // index into devices()
    int64_t thread = 0;   // the OS thread id
    int64_t start_ns = 0, duration_ns = 0;
    // The sizes of the op's outputs (tensors; 0 for references), and the
    // bytes it allocated through its context (new outputs and scratch;
    // an output that reuses an input's buffer allocates nothing).
    int64_t output_bytes = 0, allocated_bytes = 0;
  };

  StepTraceCollector();

  // Nanoseconds since the collector was created.
  int64_t NowNs() const;
  // One kernel that ran on `device` (a full device name) from start_ns to
  // end_ns, on the calling thread.
  void Record(const std::string& device, const OpKernel& kernel, int64_t start_ns, int64_t end_ns,
              int64_t output_bytes, int64_t allocated_bytes);
  // The end of the step (the wall time of the trace); the first call counts.
  void Finish();

  // In the order recorded.
  std::vector<Event> events() const;
  // Device names by index, in the order they first recorded an op.
  std::vector<std::string> devices() const;
  // Finish() minus creation; 0 before Finish().
  int64_t wall_ns() const;
  // When the collector was created, in seconds since the Unix epoch.
  double start_time() const { return start_time_; }

 private:
  const std::chrono::steady_clock::time_point origin_;
  const double start_time_;
  mutable Mutex mu_;
  std::vector<Event> events_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> devices_ ABSL_GUARDED_BY(mu_);
  int64_t wall_ns_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace flowstate

#endif  // FLOWSTATE_SCHEDULER_STEP_TRACE_H_

#include "scheduler/step_trace.h"

#include <algorithm>

#ifdef __linux__
#include <sys/syscall.h>
#include <unistd.h>
#endif

#include "devices/op_kernel.h"
#include "graph/mutex.h"

namespace flowstate {
namespace {

int64_t ThisThreadId() {
#ifdef __linux__
  thread_local const int64_t id = int64_t(syscall(SYS_gettid));
  return id;
#else
  return 0;
#endif
}

}  // namespace

StepTraceCollector::StepTraceCollector()
    : origin_(std::chrono::steady_clock::now()),
      start_time_(std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch())
                      .count()) {}

int64_t StepTraceCollector::NowNs() const {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - origin_)
      .count();
}

void StepTraceCollector::Record(const std::string& device, const OpKernel& kernel, int64_t start_ns,
                                int64_t end_ns, int64_t output_bytes, int64_t allocated_bytes) {
  Event e;
  e.node = kernel.name();
  e.op = kernel.type_string();
  e.thread = ThisThreadId();
  e.start_ns = start_ns;
  e.duration_ns = std::max<int64_t>(0, end_ns - start_ns);
  e.output_bytes = output_bytes;
  e.allocated_bytes = allocated_bytes;
  MutexLock l(mu_);
  auto it = std::find(devices_.begin(), devices_.end(), device);
  if (it == devices_.end()) it = devices_.insert(devices_.end(), device);
  e.device = int(it - devices_.begin());
  events_.push_back(std::move(e));
}

void StepTraceCollector::Finish() {
  const int64_t now = NowNs();
  MutexLock l(mu_);
  if (wall_ns_ == 0) wall_ns_ = std::max<int64_t>(1, now);
}

std::vector<StepTraceCollector::Event> StepTraceCollector::events() const {
  MutexLock l(mu_);
  return events_;
}

std::vector<std::string> StepTraceCollector::devices() const {
  MutexLock l(mu_);
  return devices_;
}

int64_t StepTraceCollector::wall_ns() const {
  MutexLock l(mu_);
  return wall_ns_;
}

}  // namespace flowstate

// Sessions for engine tests (scheduler/, gradients/): one process-wide CPU
// device pool and session constructors over it. Header-only, so that only
// the test binaries that include it link the scheduler. Thread-safe (the
// pool is made once).
#ifndef FLOWSTATE_TESTS_UTIL_SESSION_UTIL_H_
#define FLOWSTATE_TESTS_UTIL_SESSION_UTIL_H_

#include <memory>

#include "devices/device_pool.h"
#include "scheduler/session.h"

namespace flowstate::test {

// One CPU device with one intra-op thread and no allocator cache (a freed
// block goes back at once, so bytes_in_use is what tensors hold). Never
// destroyed.
inline DevicePool* SharedTestPool() {
  static DevicePool* pool = [] {
    DevicePoolOptions o;
    o.intra_op_threads = 1;
    o.cpu_cache_bytes = 0;
    return DevicePool::Create(o).value().release();
  }();
  return pool;
}

inline StatusOr<std::unique_ptr<Session>> TryNewSession(const GraphDef& g, int inter_op_threads) {
  SessionOptions o;
  o.devices = SharedTestPool();
  o.inter_op_threads = inter_op_threads;
  return Session::Create(g, o);
}

// The same, REQUIRING success.
inline std::unique_ptr<Session> NewSession(const GraphDef& g, int inter_op_threads) {
  StatusOr<std::unique_ptr<Session>> s = TryNewSession(g, inter_op_threads);
  s.status().CheckOk();
  return std::move(s).value();
}

}  // namespace flowstate::test

#endif  // FLOWSTATE_TESTS_UTIL_SESSION_UTIL_H_

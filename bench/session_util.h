// Sessions for the engine's benchmarks: one over a device pool with one
// inter-op thread (the caller's: cheap nodes run inline), aborting on error.
#ifndef FLOWSTATE_BENCH_SESSION_UTIL_H_
#define FLOWSTATE_BENCH_SESSION_UTIL_H_

#include <memory>

#include "devices/device_pool.h"
#include "scheduler/session.h"

namespace flowstate::bench {

inline std::unique_ptr<Session> NewSession(DevicePool* pool, const GraphDef& g) {
  SessionOptions o;
  o.devices = pool;
  o.inter_op_threads = 1;
  auto s = Session::Create(g, o);
  s.status().CheckOk();
  return std::move(s).value();
}

}  // namespace flowstate::bench

#endif  // FLOWSTATE_BENCH_SESSION_UTIL_H_

// InlinePolicy: whether a request that may be expensive (a session step, a
// predict) runs on the transport thread that read it, or is handed to a
// worker pool. Running inline saves a hand-off each way -- on an idle
// machine each one wakes a sleeping core, tens of microseconds -- while the
// pool keeps a long step from holding a transport thread that other
// connections need.
//
// A request runs inline when the last request with the same key (the route
// and its session or job id) took less than `threshold`, its body is at most
// twice as big as that one's (plus 4 KiB: a step's cost follows its
// inputs), and fewer than `max_inline` requests run inline at that moment,
// so that transport threads stay free for other connections. A key not seen
// yet is handed off (its first run measures it). The table of keys is
// bounded (cleared when full). The caller runs inline only steps that
// cannot wait or run unbounded (no queue, Recv, collective or loop:
// Session::StepMayWait); such a step's length follows its inputs, which the
// body-size rule bounds, so a key's next run is as quick as its last.
//
// Thread-safe; shared by the transport threads of one frontend.
#ifndef FLOWSTATE_SERVER_INLINE_POLICY_H_
#define FLOWSTATE_SERVER_INLINE_POLICY_H_

#include <chrono>
#include <cstddef>
#include <string>
#include <unordered_map>
#include "graph/mutex.h"

namespace flowstate {

class InlinePolicy {
 public:
  struct Options {
    // 0: never inline.
    std::chrono::microseconds threshold{500};
    // Requests that may run inline at once; 0: never inline.
    int max_inline = 1;
    size_t max_keys = 4096;
  };

  // What Finish records for a request that turned out to be one that may
  // wait (its step holds a queue or a loop): the next of its key is handed
  // off, and measured there.
  static constexpr std::chrono::nanoseconds kMayWait = std::chrono::hours(1);

  explicit InlinePolicy(const Options& options) : options_(options) {}

  // True when the request of `key` should run now on the caller's thread;
  // the caller then owns an inline slot and must call Finish(key, took,
  // true) after it.
  bool BeginInline(const std::string& key, size_t body_bytes);
  // Records how long the request of `key` (of `body_bytes`) took; `inlined`
  // gives the slot of BeginInline back.
  void Finish(const std::string& key, size_t body_bytes, std::chrono::nanoseconds took,
              bool inlined);

  int inline_now() const;

 private:
  const Options options_;
  mutable Mutex mu_;
  struct Last {
    std::chrono::nanoseconds took;
    size_t body_bytes;
  };
  std::unordered_map<std::string, Last> last_ ABSL_GUARDED_BY(mu_);
  int inline_now_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace flowstate

#endif  // FLOWSTATE_SERVER_INLINE_POLICY_H_

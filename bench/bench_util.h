// The benchmark runner's two pieces: a timing loop and the output format.
//
// BestSecondsPerCall(fn) runs fn once to warm up, then `reps` repetitions,
// each calling fn until at least `min_seconds` have passed, and returns the
// best repetition's time per call (the least disturbed by the rest of the
// machine). BestSecondsPerCallAlternating(fns) does the same for several
// functions side by side: each repetition runs every function in turn for
// `min_seconds`, so a change in the machine's load falls on all of them
// alike, and returns each one's best repetition.
//
// Every figure is printed as one JSON line on stdout:
//   {"name": "matmul_f32/flowstate/1024/t1", "value": 118.2, "unit": "GFLOP/s",
//    "ratio_to": "matmul_f32/openblas/1024/t1", "ratio": 0.97}
// with "ratio_to" and "ratio" null for a figure that compares with nothing.
// Diagnostics go to stderr, so stdout stays machine-readable.
//
// Header-only; not thread-safe (a benchmark is one thread driving kernels).
#ifndef FLOWSTATE_BENCH_BENCH_UTIL_H_
#define FLOWSTATE_BENCH_BENCH_UTIL_H_

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <string>
#include <vector>

namespace flowstate::bench {

struct TimingOptions {
  double min_seconds = 0.5;  // per repetition
  int reps = 3;
};

// Reads --min-time=S and --reps=N from the command line (for quick runs).
inline TimingOptions ParseTimingOptions(int argc, char** argv) {
  TimingOptions o;
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], "--min-time=", 11) == 0) o.min_seconds = std::atof(argv[i] + 11);
    if (std::strncmp(argv[i], "--reps=", 7) == 0) o.reps = std::max(1, std::atoi(argv[i] + 7));
  }
  return o;
}

inline std::vector<double> BestSecondsPerCallAlternating(
    const std::vector<std::function<void()>>& fns, const TimingOptions& o = {}) {
  using Clock = std::chrono::steady_clock;
  // Warm up each: caches, lazily started thread pools, JIT-ed kernels.
  for (const auto& fn : fns) fn();
  std::vector<double> best(fns.size(), std::numeric_limits<double>::infinity());
  for (int r = 0; r < o.reps; ++r) {
    for (size_t i = 0; i < fns.size(); ++i) {
      int64_t calls = 0;
      const Clock::time_point start = Clock::now();
      double elapsed = 0;
      do {
        fns[i]();
        ++calls;
        elapsed = std::chrono::duration<double>(Clock::now() - start).count();
      } while (elapsed < o.min_seconds);
      best[i] = std::min(best[i], elapsed / double(calls));
    }
  }
  return best;
}

inline double BestSecondsPerCall(const std::function<void()>& fn, const TimingOptions& o = {}) {
  return BestSecondsPerCallAlternating({fn}, o)[0];
}

// One figure; ratio_to empty means "not a comparison" (printed as nulls).
inline void PrintFigure(const std::string& name, double value, const std::string& unit,
                        const std::string& ratio_to = "", double ratio = 0) {
  if (ratio_to.empty()) {
    std::printf("{\"name\": \"%s\", \"value\": %.4g, \"unit\": \"%s\", \"ratio_to\": null, "
                "\"ratio\": null}\n",
                name.c_str(), value, unit.c_str());
  } else {
    std::printf("{\"name\": \"%s\", \"value\": %.4g, \"unit\": \"%s\", \"ratio_to\": \"%s\", "
                "\"ratio\": %.3f}\n",
                name.c_str(), value, unit.c_str(), ratio_to.c_str(), ratio);
  }
  std::fflush(stdout);
}

}  // namespace flowstate::bench

#endif  // FLOWSTATE_BENCH_BENCH_UTIL_H_

// PeriodicThread: calls its function every interval, first at once with
// run_first, and Stop wakes it at once (not at the end of an interval).
#include "graph/periodic_thread.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

namespace flowstate {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

TEST(PeriodicThread, CallsEveryIntervalAndStopsAtOnce) {
  std::atomic<int> calls{0};
  PeriodicThread t(milliseconds(20), [&] { ++calls; });
  const auto until = Clock::now() + std::chrono::seconds(10);
  while (calls.load() < 3 && Clock::now() < until) std::this_thread::sleep_for(milliseconds(5));
  EXPECT_GE(calls.load(), 3);
  t.Stop();
  const int after = calls.load();
  std::this_thread::sleep_for(milliseconds(60));
  EXPECT_EQ(calls.load(), after);  // no call after Stop
  t.Stop();                        // a second Stop is a no-op
}

TEST(PeriodicThread, RunFirstCallsBeforeTheFirstIntervalAndStopDoesNotWaitForOne) {
  std::atomic<int> calls{0};
  const auto start = Clock::now();
  {
    PeriodicThread t(std::chrono::hours(1), [&] { ++calls; }, /*run_first=*/true);
    const auto until = Clock::now() + std::chrono::seconds(10);
    while (calls.load() < 1 && Clock::now() < until) std::this_thread::sleep_for(milliseconds(1));
  }  // the destructor stops it: an hour's interval must not hold it
  EXPECT_EQ(calls.load(), 1);
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(10));
}

}  // namespace
}  // namespace flowstate

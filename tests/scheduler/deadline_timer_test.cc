// DeadlineTimer: callbacks run once their deadline passes, in deadline
// order; Cancel() removes one not run yet, and waits for one running now.
#include "scheduler/deadline_timer.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <mutex>
#include <thread>
#include <vector>

namespace flowstate {
namespace {

using Clock = DeadlineTimer::Clock;
using std::chrono::milliseconds;
using std::chrono::seconds;

TEST(DeadlineTimer, RunsCallbacksInDeadlineOrderAfterTheirDeadline) {
  DeadlineTimer timer;
  std::mutex mu;
  std::vector<int> order;
  std::promise<void> all;
  const auto t0 = Clock::now();
  std::vector<Clock::time_point> ran(3);
  for (int k : {2, 0, 1}) {
    timer.Schedule(t0 + milliseconds(20 * (k + 1)), [&, k] {
      std::lock_guard<std::mutex> l(mu);
      ran[k] = Clock::now();
      order.push_back(k);
      if (order.size() == 3) all.set_value();
    });
  }
  ASSERT_EQ(all.get_future().wait_for(seconds(5)), std::future_status::ready);
  EXPECT_EQ(order, (std::vector<int>{0, 1, 2}));
  for (int k = 0; k < 3; ++k) EXPECT_GE(ran[k], t0 + milliseconds(20 * (k + 1)));
}

TEST(DeadlineTimer, CancelRemovesACallbackNotRunYet) {
  DeadlineTimer timer;
  std::atomic<bool> ran{false};
  const uint64_t id = timer.Schedule(Clock::now() + milliseconds(50), [&] { ran = true; });
  EXPECT_TRUE(timer.Cancel(id));
  std::this_thread::sleep_for(milliseconds(100));
  EXPECT_FALSE(ran.load());
  EXPECT_FALSE(timer.Cancel(id));  // gone: nothing to remove, nothing running
}

TEST(DeadlineTimer, CancelWaitsForACallbackRunningNow) {
  DeadlineTimer timer;
  std::promise<void> started;
  std::atomic<bool> finished{false};
  const uint64_t id = timer.Schedule(Clock::now(), [&] {
    started.set_value();
    std::this_thread::sleep_for(milliseconds(100));
    finished = true;
  });
  ASSERT_EQ(started.get_future().wait_for(seconds(5)), std::future_status::ready);
  EXPECT_FALSE(timer.Cancel(id));
  EXPECT_TRUE(finished.load());  // Cancel returned only after it
}

}  // namespace
}  // namespace flowstate

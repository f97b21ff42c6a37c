// StepThreads: a thread for each waiting step, so that steps blocked
// forever never hold up the one that would free them; idle threads end;
// Stop() runs what is queued and refuses more.
#include "server/step_threads.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <thread>

namespace flowstate {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

TEST(StepThreads, BlockedFunctionsNeverHoldUpTheOneThatFreesThem) {
  StepThreads threads(StepThreads::Options{});
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  std::atomic<int> waiting{0}, done{0};
  // More blocked "dequeues" than any fixed pool here would have.
  for (int i = 0; i < 32; ++i) {
    ASSERT_TRUE(threads.Schedule([&] {
      ++waiting;
      released.wait();
      ++done;
    }));
  }
  const auto deadline = std::chrono::steady_clock::now() + seconds(10);
  while (waiting.load() < 32 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(milliseconds(1));
  }
  ASSERT_EQ(waiting.load(), 32);
  EXPECT_EQ(threads.num_busy(), 32);
  // The "QueueClose" still runs at once.
  std::promise<void> closed;
  ASSERT_TRUE(threads.Schedule([&] { release.set_value(); closed.set_value(); }));
  ASSERT_EQ(closed.get_future().wait_for(seconds(5)), std::future_status::ready);
  threads.Stop();
  EXPECT_EQ(done.load(), 32);
}

TEST(StepThreads, AtTheCapWorkQueuesAndRuns) {
  StepThreads::Options o;
  o.max_threads = 2;
  StepThreads threads(o);
  std::atomic<int> ran{0};
  for (int i = 0; i < 50; ++i) {
    ASSERT_TRUE(threads.Schedule([&] {
      std::this_thread::sleep_for(milliseconds(1));
      ++ran;
    }));
  }
  EXPECT_LE(threads.num_threads(), 2);
  threads.Stop();
  EXPECT_EQ(ran.load(), 50);
  EXPECT_FALSE(threads.Schedule([] {}));
}

TEST(StepThreads, IdleThreadsEndDownToKeepIdle) {
  StepThreads::Options o;
  o.keep_idle = 1;
  o.idle_timeout = milliseconds(50);
  StepThreads threads(o);
  std::promise<void> go;
  std::shared_future<void> start = go.get_future().share();
  std::atomic<int> running{0};
  for (int i = 0; i < 8; ++i) {
    ASSERT_TRUE(threads.Schedule([&] {
      ++running;
      start.wait();
    }));
  }
  const auto deadline = std::chrono::steady_clock::now() + seconds(10);
  while (running.load() < 8 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(milliseconds(1));
  }
  EXPECT_EQ(threads.num_threads(), 8);
  go.set_value();
  while (threads.num_threads() > 1 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(milliseconds(5));
  }
  EXPECT_EQ(threads.num_threads(), 1);
  // An ended thread is joined and replaced on demand.
  std::promise<void> ran;
  ASSERT_TRUE(threads.Schedule([&] { ran.set_value(); }));
  EXPECT_EQ(ran.get_future().wait_for(seconds(5)), std::future_status::ready);
}

}  // namespace
}  // namespace flowstate

// InlinePolicy: which step requests run on the transport thread.
#include "server/inline_policy.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

namespace flowstate {
namespace {

using std::chrono::microseconds;

InlinePolicy::Options Opts(int64_t threshold_us, int max_inline, size_t max_keys = 4096) {
  InlinePolicy::Options o;
  o.threshold = microseconds(threshold_us);
  o.max_inline = max_inline;
  o.max_keys = max_keys;
  return o;
}

TEST(InlinePolicyTest, AKeyRunsInlineOnlyAfterAQuickRun) {
  InlinePolicy p(Opts(500, 1));
  EXPECT_FALSE(p.BeginInline("run a"));  // never seen: measured on the pool
  p.Finish("run a", microseconds(100), /*inlined=*/false);
  ASSERT_TRUE(p.BeginInline("run a"));
  EXPECT_EQ(p.inline_now(), 1);
  p.Finish("run a", microseconds(2000), /*inlined=*/true);  // it got slow
  EXPECT_EQ(p.inline_now(), 0);
  EXPECT_FALSE(p.BeginInline("run a"));
  p.Finish("run a", microseconds(499), false);
  EXPECT_TRUE(p.BeginInline("run a"));
  p.Finish("run a", microseconds(10), true);
  // Keys are separate: another session's first run goes to the pool.
  EXPECT_FALSE(p.BeginInline("run b"));
  // Exactly the threshold is not below it.
  p.Finish("run b", microseconds(500), false);
  EXPECT_FALSE(p.BeginInline("run b"));
}

TEST(InlinePolicyTest, AtMostMaxInlineAtOnce) {
  InlinePolicy p(Opts(500, 2));
  for (const char* k : {"a", "b", "c"}) p.Finish(k, microseconds(1), false);
  EXPECT_TRUE(p.BeginInline("a"));
  EXPECT_TRUE(p.BeginInline("b"));
  EXPECT_FALSE(p.BeginInline("c"));  // both slots taken
  EXPECT_EQ(p.inline_now(), 2);
  p.Finish("a", microseconds(1), true);
  EXPECT_TRUE(p.BeginInline("c"));
  p.Finish("b", microseconds(1), true);
  p.Finish("c", microseconds(1), true);
  EXPECT_EQ(p.inline_now(), 0);
}

TEST(InlinePolicyTest, ZeroThresholdOrZeroSlotsNeverInline) {
  InlinePolicy off(Opts(0, 1));
  off.Finish("a", microseconds(1), false);
  EXPECT_FALSE(off.BeginInline("a"));
  InlinePolicy no_slots(Opts(500, 0));
  no_slots.Finish("a", microseconds(1), false);
  EXPECT_FALSE(no_slots.BeginInline("a"));
}

TEST(InlinePolicyTest, TheKeyTableIsBounded) {
  InlinePolicy p(Opts(500, 1, /*max_keys=*/4));
  for (int i = 0; i < 4; ++i) p.Finish("k" + std::to_string(i), microseconds(1), false);
  EXPECT_TRUE(p.BeginInline("k0"));
  p.Finish("k0", microseconds(1), true);
  // A fifth key clears the table: the old keys are measured again.
  p.Finish("k4", microseconds(1), false);
  EXPECT_FALSE(p.BeginInline("k0"));
  EXPECT_TRUE(p.BeginInline("k4"));
  p.Finish("k4", microseconds(1), true);
}

TEST(InlinePolicyTest, ConcurrentCallersNeverExceedTheSlots) {
  InlinePolicy p(Opts(500, 2));
  p.Finish("k", microseconds(1), false);
  std::atomic<int> now{0}, peak{0}, inlined{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 2000; ++i) {
        bool in = p.BeginInline("k");
        if (in) {
          int n = ++now;
          int seen = peak.load();
          while (n > seen && !peak.compare_exchange_weak(seen, n)) {
          }
          ++inlined;
          --now;
        }
        p.Finish("k", microseconds(1), in);
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_LE(peak.load(), 2);
  EXPECT_GT(inlined.load(), 0);
  EXPECT_EQ(p.inline_now(), 0);
}

}  // namespace
}  // namespace flowstate

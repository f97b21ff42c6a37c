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
  EXPECT_FALSE(p.BeginInline("run a", 100));  // never seen: measured on the pool
  p.Finish("run a", 100, microseconds(100), /*inlined=*/false);
  ASSERT_TRUE(p.BeginInline("run a", 100));
  EXPECT_EQ(p.inline_now(), 1);
  p.Finish("run a", 100, microseconds(2000), /*inlined=*/true);  // it got slow
  EXPECT_EQ(p.inline_now(), 0);
  EXPECT_FALSE(p.BeginInline("run a", 100));
  p.Finish("run a", 100, microseconds(499), false);
  EXPECT_TRUE(p.BeginInline("run a", 100));
  p.Finish("run a", 100, microseconds(10), true);
  // Keys are separate: another session's first run goes to the pool.
  EXPECT_FALSE(p.BeginInline("run b", 100));
  // Exactly the threshold is not below it.
  p.Finish("run b", 100, microseconds(500), false);
  EXPECT_FALSE(p.BeginInline("run b", 100));
}

TEST(InlinePolicyTest, MuchBiggerInputsGoToThePool) {
  InlinePolicy p(Opts(500, 1));
  p.Finish("run a", 10000, microseconds(100), false);
  EXPECT_TRUE(p.BeginInline("run a", 2 * 10000 + 4096));  // up to twice + 4 KiB
  p.Finish("run a", 10000, microseconds(100), true);
  EXPECT_FALSE(p.BeginInline("run a", 2 * 10000 + 4097));
  EXPECT_TRUE(p.BeginInline("run a", 10));  // smaller is fine
  p.Finish("run a", 10, microseconds(100), true);
  // The small run is now the reference: 5 KiB is over 2 x 10 + 4 KiB.
  EXPECT_FALSE(p.BeginInline("run a", 5000));
}

TEST(InlinePolicyTest, AtMostMaxInlineAtOnce) {
  InlinePolicy p(Opts(500, 2));
  for (const char* k : {"a", "b", "c"}) p.Finish(k, 100, microseconds(1), false);
  EXPECT_TRUE(p.BeginInline("a", 100));
  EXPECT_TRUE(p.BeginInline("b", 100));
  EXPECT_FALSE(p.BeginInline("c", 100));  // both slots taken
  EXPECT_EQ(p.inline_now(), 2);
  p.Finish("a", 100, microseconds(1), true);
  EXPECT_TRUE(p.BeginInline("c", 100));
  p.Finish("b", 100, microseconds(1), true);
  p.Finish("c", 100, microseconds(1), true);
  EXPECT_EQ(p.inline_now(), 0);
}

TEST(InlinePolicyTest, ZeroThresholdOrZeroSlotsNeverInline) {
  InlinePolicy off(Opts(0, 1));
  off.Finish("a", 100, microseconds(1), false);
  EXPECT_FALSE(off.BeginInline("a", 100));
  InlinePolicy no_slots(Opts(500, 0));
  no_slots.Finish("a", 100, microseconds(1), false);
  EXPECT_FALSE(no_slots.BeginInline("a", 100));
}

TEST(InlinePolicyTest, TheKeyTableIsBounded) {
  InlinePolicy p(Opts(500, 1, /*max_keys=*/4));
  for (int i = 0; i < 4; ++i) p.Finish("k" + std::to_string(i), 100, microseconds(1), false);
  EXPECT_TRUE(p.BeginInline("k0", 100));
  p.Finish("k0", 100, microseconds(1), true);
  // A fifth key clears the table: the old keys are measured again.
  p.Finish("k4", 100, microseconds(1), false);
  EXPECT_FALSE(p.BeginInline("k0", 100));
  EXPECT_TRUE(p.BeginInline("k4", 100));
  p.Finish("k4", 100, microseconds(1), true);
}

TEST(InlinePolicyTest, ConcurrentCallersNeverExceedTheSlots) {
  InlinePolicy p(Opts(500, 2));
  p.Finish("k", 100, microseconds(1), false);
  std::atomic<int> now{0}, peak{0}, inlined{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 2000; ++i) {
        bool in = p.BeginInline("k", 100);
        if (in) {
          int n = ++now;
          int seen = peak.load();
          while (n > seen && !peak.compare_exchange_weak(seen, n)) {
          }
          ++inlined;
          --now;
        }
        p.Finish("k", 100, microseconds(1), in);
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

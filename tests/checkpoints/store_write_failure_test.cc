// A write of the store that fails (StoreOptions::fail_writes): the previous
// checkpoint stays, the store recovers by itself, and a checkpoint reported
// failed is never listed or read, though part of its write reached the disk.
#include "checkpoints/store.h"

#include <gtest/gtest.h>

#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "tests/checkpoints/store_test_util.h"
#include "tests/util/temp_dir.h"

namespace flowstate::checkpoints {
namespace {

using store_test::ExpectSameSnapshot;
using store_test::kBothPaths;
using store_test::MakeSnapshot;
using store_test::MustOpen;
using test_util::TempDir;

TEST(Store, FailedWritesLeaveThePreviousCheckpointAndRecover) {
 for (int64_t ingest : kBothPaths) {
  SCOPED_TRACE("ingest_min_bytes " + std::to_string(ingest));
  TempDir dir;
  std::atomic<bool> fail{false};
  StoreOptions o;
  o.ingest_min_bytes = ingest;
  o.fail_writes = [&] { return fail.load(); };
  Snapshot one = MakeSnapshot(1, 1), two = MakeSnapshot(2, 2), three = MakeSnapshot(3, 3);
  {
    auto store = MustOpen(dir.path(), o);
    ASSERT_TRUE(store);
    ASSERT_TRUE(store->WriteCheckpoint("j", one).ok());
    fail = true;
    Status s = store->WriteCheckpoint("j", two);
    ASSERT_FALSE(s.ok());
    EXPECT_NE(s.message().find("injected write failure"), std::string::npos) << s.ToString();
    EXPECT_NE(s.message().find("step 2"), std::string::npos) << s.ToString();
    EXPECT_FALSE(store->PutRecord(Store::Kind::kJobs, "j", "x").ok());
    // Reads still work and see only the complete checkpoint.
    auto got = store->ReadLatestCheckpoint("j");
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    ExpectSameSnapshot(one, *got);
    EXPECT_EQ(store->ListCheckpoints("j")->size(), 1u);
    fail = false;
    Status r = store->WriteCheckpoint("j", three);
    ASSERT_TRUE(r.ok()) << r.ToString();
    auto list = store->ListCheckpoints("j");
    ASSERT_EQ(list->size(), 2u);
    EXPECT_EQ((*list)[1].step, 3);
  }
  auto store = MustOpen(dir.path());
  auto list = store->ListCheckpoints("j");
  ASSERT_TRUE(list.ok());
  ASSERT_EQ(list->size(), 2u);
  EXPECT_EQ((*list)[0].step, 1);
  EXPECT_EQ((*list)[1].step, 3);
  ExpectSameSnapshot(one, *store->ReadCheckpoint("j", 1));
  ExpectSameSnapshot(three, *store->ReadCheckpoint("j", 3));
  EXPECT_EQ(store->ReadCheckpoint("j", 2).status().code(), Code::kNotFound);
 }
}

// A write can fail after some of its files' writes went through: the log
// record appended, its sync failed. The database reopened to recover (or
// the read-only fallback while the disk still fails) replays that record.
// A checkpoint reported failed must still never be listed or read, before
// recovery, after it, and after the store is reopened. Both write paths: a
// small checkpoint's log record, and a big one's ingestion, whose MANIFEST
// record (appended, its sync failed) names a table file that the failed
// ingestion deleted -- the store must still reopen.
TEST(Store, ACheckpointReportedFailedIsNeverListedThoughPartOfItsWriteWentThrough) {
 for (int64_t ingest : kBothPaths) {
  SCOPED_TRACE("ingest_min_bytes " + std::to_string(ingest));
  TempDir dir;
  // -1: no failure; n >= 0: n more file writes go through, then all fail.
  // Only this thread's writes (the log is written by the writing thread):
  // RocksDB's background flushes, whose number varies, never fail.
  std::atomic<int> passes{-1};
  const std::thread::id writer = std::this_thread::get_id();
  StoreOptions o;
  o.ingest_min_bytes = ingest;
  o.fail_writes = [&] {
    if (std::this_thread::get_id() != writer) return false;
    int p = passes.load();
    while (p > 0 && !passes.compare_exchange_weak(p, p - 1)) {
    }
    return p == 0;
  };
  std::vector<int64_t> failed, written = {1};
  {
    auto store = MustOpen(dir.path(), o);
    ASSERT_TRUE(store);
    ASSERT_TRUE(store->WriteCheckpoint("j", MakeSnapshot(1, 1)).ok());
    int64_t step = 1;
    for (int n = 0; n < 12; ++n) {
      SCOPED_TRACE("failing after " + std::to_string(n) + " writes");
      passes = n;
      ++step;
      if (store->WriteCheckpoint("j", MakeSnapshot(step, uint32_t(step))).ok()) {
        written.push_back(step);
      } else {
        failed.push_back(step);
      }
      // While the disk fails, reads go on (the read-only fallback).
      StatusOr<std::vector<CheckpointInfo>> list = store->ListCheckpoints("j");
      ASSERT_TRUE(list.ok()) << list.status().ToString();
      std::vector<int64_t> listed;
      for (const CheckpointInfo& c : *list) listed.push_back(c.step);
      EXPECT_EQ(listed, written);
      for (int64_t f : failed) EXPECT_EQ(store->ReadCheckpoint("j", f).status().code(), Code::kNotFound) << f;
      // The disk is back: the next write recovers first.
      passes = -1;
      ++step;
      Status w = store->WriteCheckpoint("j", MakeSnapshot(step, uint32_t(step)));
      ASSERT_TRUE(w.ok()) << w.ToString();
      written.push_back(step);
      list = store->ListCheckpoints("j");
      ASSERT_TRUE(list.ok()) << list.status().ToString();
      listed.clear();
      for (const CheckpointInfo& c : *list) listed.push_back(c.step);
      EXPECT_EQ(listed, written);
    }
    // Some writes failed part-way, some before anything went through.
    EXPECT_FALSE(failed.empty());
  }
  auto store = MustOpen(dir.path());
  StatusOr<std::vector<CheckpointInfo>> list = store->ListCheckpoints("j");
  ASSERT_TRUE(list.ok()) << list.status().ToString();
  std::vector<int64_t> listed;
  for (const CheckpointInfo& c : *list) listed.push_back(c.step);
  EXPECT_EQ(listed, written);
  for (int64_t w : written) ExpectSameSnapshot(MakeSnapshot(w, uint32_t(w)), *store->ReadCheckpoint("j", w));
 }
}

}  // namespace
}  // namespace flowstate::checkpoints

// The RocksDB store: round trips, checksums, the format version, the lock,
// injected write failures, retention, export files and the Save/Restore ops.
// Corruption is made with raw RocksDB access using the keys of FORMAT.md.
#include "checkpoints/store.h"

#include <gtest/gtest.h>
#include <rocksdb/db.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <random>
#include <thread>

#include "checkpoints/format.h"
#include "graph/op_builders.h"
#include "graph/scope.h"
#include "scheduler/session.h"
#include "state/resource_mgr.h"
#include "state/tensor_store.h"
#include "tests/checkpoints/store_test_util.h"
#include "tests/util/temp_dir.h"

namespace flowstate::checkpoints {
namespace {

namespace fs = std::filesystem;

using test_util::TempDir;

using store_test::ExpectSameSnapshot;
using store_test::kBothPaths;
using store_test::MakeSnapshot;
using store_test::MustOpen;
using store_test::RandomTensor;

// Raw access to the database of a closed Store (every column family).
struct RawDb {
  explicit RawDb(const std::string& dir) {
    std::string path = dir + "/store";
    std::vector<std::string> names;
    EXPECT_TRUE(rocksdb::DB::ListColumnFamilies(rocksdb::DBOptions(), path, &names).ok());
    std::vector<rocksdb::ColumnFamilyDescriptor> d;
    for (auto& n : names) d.emplace_back(n, rocksdb::ColumnFamilyOptions());
    rocksdb::Status s = rocksdb::DB::Open(rocksdb::DBOptions(), path, d, &handles, &db);
    EXPECT_TRUE(s.ok()) << s.ToString();
    for (size_t i = 0; i < names.size(); ++i) cf[names[i]] = handles[i];
  }
  ~RawDb() {
    for (auto* h : handles) db->DestroyColumnFamilyHandle(h);
    delete db;
  }
  rocksdb::DB* db = nullptr;
  std::vector<rocksdb::ColumnFamilyHandle*> handles;
  std::map<std::string, rocksdb::ColumnFamilyHandle*> cf;
};

// The CRC-32C of FORMAT.md, against a bitwise reference: lengths around the
// 3 x 8 KiB blocks of the interleaved fast path, and Extend over splits.
TEST(Crc32c, MatchesTheBitwiseDefinition) {
  auto reference = [](const uint8_t* p, size_t n) {
    uint32_t c = 0xffffffffu;
    for (size_t i = 0; i < n; ++i) {
      c ^= p[i];
      for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
    }
    return ~c;
  };
  EXPECT_EQ(internal::Crc32c("123456789", 9), 0xE3069283u);
  std::vector<uint8_t> data(3 * 8192 * 3 + 101);
  std::mt19937 rng(3);
  for (auto& b : data) b = uint8_t(rng());
  for (size_t n : {size_t(0), size_t(7), size_t(3 * 8192 - 1), size_t(3 * 8192), size_t(3 * 8192 + 9),
                   size_t(6 * 8192 + 5), data.size()}) {
    EXPECT_EQ(internal::Crc32c(data.data(), n), reference(data.data(), n)) << n;
  }
  for (size_t split : {size_t(1), size_t(8191), size_t(30000)}) {
    uint32_t c = internal::Crc32c(data.data(), split);
    c = internal::Crc32cExtend(c, data.data() + split, data.size() - split);
    EXPECT_EQ(c, reference(data.data(), data.size())) << split;
  }
}

TEST(Store, RoundTripsEveryDtypeAndShapeAcrossReopen) {
  TempDir dir;
  Snapshot snap;
  snap.step = 42;
  snap.metadata = std::string("\0\1binary metadata", 18);
  uint32_t seed = 1;
  const std::vector<TensorShape> shapes = {TensorShape(), TensorShape({0}), TensorShape({5}),
                                           TensorShape({2, 0, 3}), TensorShape({2, 3, 4})};
  for (DataType dt : AllDataTypes()) {
    for (size_t i = 0; i < shapes.size(); ++i) {
      snap.tensors.push_back({std::string(DataTypeName(dt)) + "/" + std::to_string(i),
                              RandomTensor(dt, shapes[i], seed++)});
    }
  }
  {
    auto store = MustOpen(dir.path());
    ASSERT_TRUE(store);
    ASSERT_TRUE(store->WriteCheckpoint("job-1", snap).ok());
    auto got = store->ReadCheckpoint("job-1", 42);
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    ExpectSameSnapshot(snap, *got);
  }
  auto store = MustOpen(dir.path());
  ASSERT_TRUE(store);
  auto got = store->ReadLatestCheckpoint("job-1");
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  ExpectSameSnapshot(snap, *got);
  for (const auto& t : got->tensors) {
    EXPECT_EQ(reinterpret_cast<uintptr_t>(t.value.raw_data()) % 64, 0u) << t.name;
  }
  auto list = store->ListCheckpoints("job-1");
  ASSERT_TRUE(list.ok());
  ASSERT_EQ(list->size(), 1u);
  int64_t bytes = 0;
  for (const auto& t : snap.tensors) bytes += int64_t(t.value.TotalBytes());
  EXPECT_EQ((*list)[0].bytes, bytes);
  EXPECT_EQ((*list)[0].num_tensors, int64_t(snap.tensors.size()));
  EXPECT_GT((*list)[0].unix_micros, 0);
  EXPECT_EQ(store->ReadCheckpoint("job-1", 41).status().code(), Code::kNotFound);
  EXPECT_EQ(store->ReadLatestCheckpoint("job-2").status().code(), Code::kNotFound);
}

TEST(Store, RefusesBadInput) {
  TempDir dir;
  auto store = MustOpen(dir.path());
  Snapshot s = MakeSnapshot(1, 1);
  EXPECT_EQ(store->WriteCheckpoint("", s).code(), Code::kInvalidArgument);
  EXPECT_EQ(store->WriteCheckpoint(std::string("a\0b", 3), s).code(), Code::kInvalidArgument);
  s.tensors.push_back(s.tensors[0]);
  Status dup = store->WriteCheckpoint("j", s);
  EXPECT_EQ(dup.code(), Code::kInvalidArgument);
  EXPECT_NE(dup.message().find("dense/kernel"), std::string::npos) << dup.ToString();
  s = MakeSnapshot(-1, 1);
  EXPECT_EQ(store->WriteCheckpoint("j", s).code(), Code::kInvalidArgument);
  EXPECT_EQ(store->RetainLatest("j", 0).code(), Code::kInvalidArgument);
  EXPECT_TRUE(store->ListCheckpoints("j")->empty());
}

TEST(Store, ChecksumMismatchIsDataLossNamingJobStepAndVariable) {
  TempDir dir;
  {
    auto store = MustOpen(dir.path());
    ASSERT_TRUE(store->WriteCheckpoint("job-7", MakeSnapshot(3, 5)).ok());
    ASSERT_TRUE(store->PutVariables("job-7", MakeSnapshot(3, 5).tensors).ok());
  }
  {
    RawDb raw(dir.path());
    std::string key = internal::CheckpointKey(internal::kTensorTag, "job-7", 3) + "dense/bias";
    std::string v;
    ASSERT_TRUE(raw.db->Get(rocksdb::ReadOptions(), raw.cf["checkpoints"], key, &v).ok());
    v[v.size() - 2] ^= 0x10;  // one bit of the last float's bytes
    ASSERT_TRUE(raw.db->Put(rocksdb::WriteOptions(), raw.cf["checkpoints"], key, v).ok());
    std::string vkey = internal::VariableKey("job-7", "dense/kernel");
    ASSERT_TRUE(raw.db->Get(rocksdb::ReadOptions(), raw.cf["variables"], vkey, &v).ok());
    v[9] ^= 1;  // the rank, in the header
    ASSERT_TRUE(raw.db->Put(rocksdb::WriteOptions(), raw.cf["variables"], vkey, v).ok());
  }
  auto store = MustOpen(dir.path());
  auto got = store->ReadCheckpoint("job-7", 3);
  ASSERT_EQ(got.status().code(), Code::kDataLoss) << got.status().ToString();
  const std::string& m = got.status().message();
  EXPECT_NE(m.find("job-7"), std::string::npos) << m;
  EXPECT_NE(m.find("step 3"), std::string::npos) << m;
  EXPECT_NE(m.find("dense/bias"), std::string::npos) << m;
  EXPECT_NE(m.find("checksum"), std::string::npos) << m;
  auto var = store->GetVariable("job-7", "dense/kernel");
  EXPECT_EQ(var.status().code(), Code::kDataLoss);
  EXPECT_NE(var.status().message().find("dense/kernel"), std::string::npos);
  EXPECT_NE(var.status().message().find("checksum"), std::string::npos) << var.status().ToString();
  EXPECT_TRUE(store->GetVariable("job-7", "dense/bias").ok());
}

// Checkpoints of 32 MiB and more are ingested as a table file, and restores
// over 32 MiB split the chunks with a second thread: the same guarantees.
TEST(Store, BigCheckpointRoundTripAndCorruption) {
  TempDir dir;
  Snapshot big = MakeSnapshot(5, 11);
  big.tensors.push_back({"embedding", RandomTensor(DataType::kFloat32, TensorShape({9000, 1000}), 12)});
  big.tensors.push_back({"z/slot", RandomTensor(DataType::kFloat32, TensorShape({1000, 1000}), 13)});
  {
    auto store = MustOpen(dir.path());
    ASSERT_TRUE(store->WriteCheckpoint("big", big).ok());
    ExpectSameSnapshot(big, *store->ReadCheckpoint("big", 5));
    EXPECT_TRUE(fs::is_empty(dir.path() + "/ingest"));  // the table file was moved in
    ASSERT_TRUE(store->Flush().ok());
    auto got = store->ReadCheckpoint("big", 5);
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    ExpectSameSnapshot(big, *got);
    for (size_t i = 1; i < got->tensors.size(); ++i) {
      EXPECT_LT(got->tensors[i - 1].name, got->tensors[i].name);
    }
  }
  {
    RawDb raw(dir.path());
    // Chunk 20 of "embedding" (ordinal 2 in name order).
    std::string key = internal::ChunkKey("big", 5, 2, 20);
    std::string v;
    ASSERT_TRUE(raw.db->Get(rocksdb::ReadOptions(), raw.cf["checkpoints"], key, &v).ok());
    ASSERT_EQ(v.size(), internal::kChunkBytes);
    v[v.size() / 2] ^= 0x01;
    ASSERT_TRUE(raw.db->Put(rocksdb::WriteOptions(), raw.cf["checkpoints"], key, v).ok());
    ASSERT_TRUE(raw.db->Flush(rocksdb::FlushOptions(), raw.cf["checkpoints"]).ok());
  }
  auto store = MustOpen(dir.path());
  auto got = store->ReadCheckpoint("big", 5);
  ASSERT_EQ(got.status().code(), Code::kDataLoss) << got.status().ToString();
  EXPECT_NE(got.status().message().find("job 'big' step 5 variable 'embedding' chunk 20"), std::string::npos)
      << got.status().message();
  EXPECT_NE(got.status().message().find("checksum"), std::string::npos) << got.status().message();
}

// Both write paths (a synced WriteBatch below StoreOptions::ingest_min_bytes,
// an ingested table file at or above it) store the same chunked records.

TEST(Store, CorruptAndMissingChunksAreDataLossNamingTheVariable) {
  for (int64_t ingest : kBothPaths) {
    SCOPED_TRACE("ingest_min_bytes " + std::to_string(ingest));
    TempDir dir;
    StoreOptions o;
    o.ingest_min_bytes = ingest;
    Snapshot s = MakeSnapshot(4, 3);
    // 2.4 MB: three chunks, the last one short.
    s.tensors.push_back({"embedding", RandomTensor(DataType::kFloat32, TensorShape({600000}), 4)});
    {
      auto store = MustOpen(dir.path(), o);
      ASSERT_TRUE(store->WriteCheckpoint("j", s).ok());
      ExpectSameSnapshot(s, *store->ReadCheckpoint("j", 4));
    }
    const std::string last = internal::ChunkKey("j", 4, 2, 2);  // "embedding" is ordinal 2
    {
      RawDb raw(dir.path());
      std::string v;
      ASSERT_TRUE(raw.db->Get(rocksdb::ReadOptions(), raw.cf["checkpoints"], last, &v).ok());
      EXPECT_EQ(v.size(), 2400000 - 2 * internal::kChunkBytes);
      v[7] ^= 0x40;
      ASSERT_TRUE(raw.db->Put(rocksdb::WriteOptions(), raw.cf["checkpoints"], last, v).ok());
    }
    {
      auto store = MustOpen(dir.path(), o);
      auto got = store->ReadCheckpoint("j", 4);
      ASSERT_EQ(got.status().code(), Code::kDataLoss) << got.status().ToString();
      EXPECT_NE(got.status().message().find("job 'j' step 4 variable 'embedding' chunk 2"), std::string::npos)
          << got.status().message();
      EXPECT_NE(got.status().message().find("checksum"), std::string::npos) << got.status().message();
    }
    {
      RawDb raw(dir.path());
      ASSERT_TRUE(raw.db->Delete(rocksdb::WriteOptions(), raw.cf["checkpoints"], last).ok());
    }
    auto store = MustOpen(dir.path(), o);
    auto got = store->ReadCheckpoint("j", 4);
    ASSERT_EQ(got.status().code(), Code::kDataLoss) << got.status().ToString();
    EXPECT_NE(got.status().message().find("incomplete"), std::string::npos) << got.status().message();
    EXPECT_NE(got.status().message().find("'embedding' has 2 of its 3 chunks"), std::string::npos)
        << got.status().message();
  }
}

// A store of format version 1 (tensor data inline in the tensor record) is
// read, and upgraded to the current version on open.
TEST(Store, FormatVersion1CheckpointsAreReadAndTheStoreUpgraded) {
  TempDir dir;
  Snapshot s = MakeSnapshot(8, 21);
  {
    auto store = MustOpen(dir.path());
  }
  {
    RawDb raw(dir.path());
    auto* h = raw.cf["checkpoints"];
    int64_t bytes = 0;
    for (const NamedTensor& t : s.tensors) {
      std::string rec = internal::EncodeTensorHeader(t.value);
      rec.append(static_cast<const char*>(t.value.raw_data()), t.value.TotalBytes());
      bytes += int64_t(t.value.TotalBytes());
      ASSERT_TRUE(raw.db->Put(rocksdb::WriteOptions(), h,
                              internal::CheckpointKey(internal::kTensorTag, "old", 8) + t.name, rec).ok());
    }
    internal::IndexRecord idx;
    idx.step = 8;
    idx.bytes = bytes;
    idx.num_tensors = int64_t(s.tensors.size());
    idx.metadata_crc = internal::Crc32c(s.metadata.data(), s.metadata.size());
    idx.metadata_bytes = int64_t(s.metadata.size());
    ASSERT_TRUE(raw.db->Put(rocksdb::WriteOptions(), h, internal::CheckpointKey(internal::kMetadataTag, "old", 8),
                            s.metadata).ok());
    ASSERT_TRUE(raw.db->Put(rocksdb::WriteOptions(), h, internal::CheckpointKey(internal::kIndexTag, "old", 8),
                            internal::EncodeIndex(idx)).ok());
    ASSERT_TRUE(raw.db->Put(rocksdb::WriteOptions(), raw.cf["meta"], "flowstate.format_version", "1").ok());
  }
  {
    auto store = MustOpen(dir.path());
    auto got = store->ReadCheckpoint("old", 8);
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    ExpectSameSnapshot(s, *got);
  }
  RawDb raw(dir.path());
  std::string v;
  ASSERT_TRUE(raw.db->Get(rocksdb::ReadOptions(), raw.cf["meta"], "flowstate.format_version", &v).ok());
  EXPECT_EQ(v, std::to_string(kFormatVersion));
}

TEST(Store, MissingTensorRecordIsDataLoss) {
  TempDir dir;
  {
    auto store = MustOpen(dir.path());
    ASSERT_TRUE(store->WriteCheckpoint("j", MakeSnapshot(9, 1)).ok());
  }
  {
    RawDb raw(dir.path());
    std::string key = internal::CheckpointKey(internal::kTensorTag, "j", 9) + "global_step";
    ASSERT_TRUE(raw.db->Delete(rocksdb::WriteOptions(), raw.cf["checkpoints"], key).ok());
  }
  auto store = MustOpen(dir.path());
  auto got = store->ReadCheckpoint("j", 9);
  EXPECT_EQ(got.status().code(), Code::kDataLoss);
  EXPECT_NE(got.status().message().find("incomplete"), std::string::npos) << got.status().ToString();
}

TEST(Store, NewerFormatVersionIsRefusedNamingBothVersions) {
  TempDir dir;
  {
    auto store = MustOpen(dir.path());
    ASSERT_TRUE(store->PutRecord(Store::Kind::kJobs, "j", "{}").ok());
    EXPECT_EQ(store->PutRecord(Store::Kind::kMeta, "flowstate.format_version", "9").code(),
              Code::kInvalidArgument);
  }
  {
    RawDb raw(dir.path());
    std::string v;
    ASSERT_TRUE(raw.db->Get(rocksdb::ReadOptions(), raw.cf["meta"], "flowstate.format_version", &v).ok());
    EXPECT_EQ(v, std::to_string(kFormatVersion));
    ASSERT_TRUE(raw.db->Put(rocksdb::WriteOptions(), raw.cf["meta"], "flowstate.format_version",
                            std::to_string(kFormatVersion + 1)).ok());
  }
  auto s = Store::Open(dir.path());
  ASSERT_EQ(s.status().code(), Code::kFailedPrecondition) << s.status().ToString();
  const std::string& m = s.status().message();
  EXPECT_NE(m.find("format version " + std::to_string(kFormatVersion + 1)), std::string::npos) << m;
  EXPECT_NE(m.find("format version " + std::to_string(kFormatVersion) + " "), std::string::npos) << m;
  // The refused store was not changed: the record is still there for a newer binary.
  RawDb raw(dir.path());
  std::string v;
  EXPECT_TRUE(raw.db->Get(rocksdb::ReadOptions(), raw.cf["jobs"], "j", &v).ok());
}

// Run by SecondProcessIsRefusedWithAClearMessage in a child process.
TEST(Store, ChildProcessOpen) {
  const char* dir = std::getenv("FLOWSTATE_STORE_TEST_CHILD_DIR");
  if (dir == nullptr) GTEST_SKIP() << "only run as the child of SecondProcessIsRefused...";
  auto s = Store::Open(dir);
  ASSERT_EQ(s.status().code(), Code::kFailedPrecondition) << s.status().ToString();
  EXPECT_NE(s.status().message().find("is in use by another flowstate process"), std::string::npos)
      << s.status().message();
  EXPECT_NE(s.status().message().find(std::string(dir)), std::string::npos);
}

TEST(Store, SecondProcessIsRefusedWithAClearMessage) {
  TempDir dir;
  auto store = MustOpen(dir.path());
  ASSERT_TRUE(store->WriteCheckpoint("j", MakeSnapshot(1, 1)).ok());
  pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    ::setenv("FLOWSTATE_STORE_TEST_CHILD_DIR", dir.path().c_str(), 1);
    const char* argv[] = {"store_test", "--gtest_filter=Store.ChildProcessOpen", nullptr};
    ::execv("/proc/self/exe", const_cast<char* const*>(argv));
    ::_exit(127);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "the child's Open was not refused as expected";
  // The first store is unharmed.
  EXPECT_TRUE(store->ReadCheckpoint("j", 1).ok());
  // In the same process too.
  auto again = Store::Open(dir.path());
  EXPECT_EQ(again.status().code(), Code::kFailedPrecondition);
}

Snapshot IngestedSnapshot(int64_t step) {
  Snapshot s = MakeSnapshot(step, uint32_t(step));
  s.tensors.push_back({"embedding", RandomTensor(DataType::kFloat32, TensorShape({600000}), uint32_t(step))});
  return s;
}

// Run by KilledWhileWritingIngestedCheckpointsLeavesOnlyWholeOnes in a child
// process: writes ingested checkpoints (with retention) until killed.
TEST(Store, ChildWritesCheckpointsUntilKilled) {
  const char* dir = std::getenv("FLOWSTATE_STORE_TEST_WRITER_DIR");
  if (dir == nullptr) GTEST_SKIP() << "only run as the child of KilledWhileWritingIngested...";
  StoreOptions o;
  o.ingest_min_bytes = 0;
  auto store = MustOpen(dir, o);
  ASSERT_TRUE(store);
  auto list = store->ListCheckpoints("j");
  ASSERT_TRUE(list.ok());
  int64_t step = list->empty() ? 1 : list->back().step + 1;
  for (bool first = true;; ++step, first = false) {
    ASSERT_TRUE(store->WriteCheckpoint("j", IngestedSnapshot(step)).ok());
    ASSERT_TRUE(store->RetainLatest("j", 3).ok());
    if (first) std::ofstream(std::string(dir) + "/writing") << step;
  }
}

// kill -9 while checkpoints are being written as ingested table files: after
// a restart every listed checkpoint reads back whole, and writing goes on.
TEST(Store, KilledWhileWritingIngestedCheckpointsLeavesOnlyWholeOnes) {
  TempDir dir;
  std::mt19937 rng(5);
  int64_t last = 0;
  for (int round = 0; round < 3; ++round) {
    fs::remove(dir.path() + "/writing");
    pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      ::setenv("FLOWSTATE_STORE_TEST_WRITER_DIR", dir.path().c_str(), 1);
      const char* argv[] = {"checkpoints_test", "--gtest_filter=Store.ChildWritesCheckpointsUntilKilled", nullptr};
      ::execv("/proc/self/exe", const_cast<char* const*>(argv));
      ::_exit(127);
    }
    for (int i = 0; i < 2000 && !fs::exists(dir.path() + "/writing"); ++i) ::usleep(10000);
    ASSERT_TRUE(fs::exists(dir.path() + "/writing")) << "the writer did not start";
    ::usleep(useconds_t(rng() % 200000));  // somewhere in a later write
    ::kill(pid, SIGKILL);
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    ASSERT_TRUE(WIFSIGNALED(status)) << "the writer exited by itself: " << status;
    auto store = MustOpen(dir.path());
    ASSERT_TRUE(store);
    auto list = store->ListCheckpoints("j");
    ASSERT_TRUE(list.ok());
    ASSERT_FALSE(list->empty());
    EXPECT_LE(list->size(), 4u);  // 3 kept, plus one whose retention the kill caught
    EXPECT_GT(list->back().step, last);
    last = list->back().step;
    for (const CheckpointInfo& c : *list) {
      auto got = store->ReadCheckpoint("j", c.step);
      ASSERT_TRUE(got.ok()) << "step " << c.step << ": " << got.status().ToString();
      ExpectSameSnapshot(IngestedSnapshot(c.step), *got);
    }
  }
}

TEST(Store, RetainLatestDeleteAndJobData) {
 for (int64_t ingest : kBothPaths) {
  SCOPED_TRACE("ingest_min_bytes " + std::to_string(ingest));
  TempDir dir;
  StoreOptions o;
  o.ingest_min_bytes = ingest;
  auto store = MustOpen(dir.path(), o);
  for (int64_t step : {10, 2, 30, 4, 50}) ASSERT_TRUE(store->WriteCheckpoint("a", MakeSnapshot(step, uint32_t(step))).ok());
  ASSERT_TRUE(store->WriteCheckpoint("b", MakeSnapshot(1, 1)).ok());
  // Steps sort numerically (big-endian keys), not as text.
  auto list = store->ListCheckpoints("a");
  std::vector<int64_t> steps;
  for (auto& i : *list) steps.push_back(i.step);
  EXPECT_EQ(steps, (std::vector<int64_t>{2, 4, 10, 30, 50}));
  ASSERT_TRUE(store->RetainLatest("a", 2).ok());
  steps.clear();
  // A named list: `*store->ListCheckpoints(...)` in the range-for would be a
  // reference into a temporary that dies before the loop runs.
  StatusOr<std::vector<CheckpointInfo>> retained = store->ListCheckpoints("a");
  ASSERT_TRUE(retained.ok()) << retained.status().ToString();
  for (auto& i : *retained) steps.push_back(i.step);
  EXPECT_EQ(steps, (std::vector<int64_t>{30, 50}));
  EXPECT_EQ(store->ReadCheckpoint("a", 10).status().code(), Code::kNotFound);
  ExpectSameSnapshot(MakeSnapshot(50, 50), *store->ReadLatestCheckpoint("a"));
  // Rewriting a step replaces it whole.
  Snapshot smaller = MakeSnapshot(50, 7);
  smaller.tensors.pop_back();
  ASSERT_TRUE(store->WriteCheckpoint("a", smaller).ok());
  ExpectSameSnapshot(smaller, *store->ReadCheckpoint("a", 50));
  ASSERT_TRUE(store->DeleteCheckpoint("a", 30).ok());
  EXPECT_EQ(store->DeleteCheckpoint("a", 30).code(), Code::kNotFound);
  ASSERT_TRUE(store->PutRecord(Store::Kind::kJobs, "a", "{\"state\":\"RUNNING\"}").ok());
  ASSERT_TRUE(store->PutVariables("a", smaller.tensors).ok());
  ASSERT_TRUE(store->DeleteJobData("a").ok());
  EXPECT_TRUE(store->ListCheckpoints("a")->empty());
  EXPECT_EQ(store->GetRecord(Store::Kind::kJobs, "a").status().code(), Code::kNotFound);
  EXPECT_EQ(store->GetVariables("a").status().code(), Code::kNotFound);
  // Other jobs are untouched (and "a" is not a prefix match for "ab").
  EXPECT_TRUE(store->ReadCheckpoint("b", 1).ok());
  // Replacing with other names: none of the old tensors or chunks survive.
  Snapshot renamed = MakeSnapshot(1, 3);
  renamed.tensors[0].name = "renamed/kernel";
  ASSERT_TRUE(store->WriteCheckpoint("b", renamed).ok());
  ExpectSameSnapshot(renamed, *store->ReadCheckpoint("b", 1));
  ASSERT_TRUE(store->Flush().ok());
  ExpectSameSnapshot(renamed, *store->ReadCheckpoint("b", 1));
 }
}

TEST(Store, RecordsAndVariables) {
  TempDir dir;
  auto store = MustOpen(dir.path());
  ASSERT_TRUE(store->PutRecord(Store::Kind::kJobs, "j2", "two").ok());
  ASSERT_TRUE(store->PutRecord(Store::Kind::kJobs, "j1", "one").ok());
  ASSERT_TRUE(store->PutRecord(Store::Kind::kGraphs, "g", "{}", /*sync=*/false).ok());
  ASSERT_TRUE(store->PutRecord(Store::Kind::kMeta, "server.id", "x").ok());
  EXPECT_EQ(*store->GetRecord(Store::Kind::kJobs, "j1"), "one");
  EXPECT_EQ(store->GetRecord(Store::Kind::kGraphs, "j1").status().code(), Code::kNotFound);
  auto jobs = store->ListRecords(Store::Kind::kJobs);
  ASSERT_EQ(jobs->size(), 2u);
  EXPECT_EQ((*jobs)[0], std::make_pair(std::string("j1"), std::string("one")));
  auto meta = store->ListRecords(Store::Kind::kMeta);  // reserved keys are not listed
  ASSERT_EQ(meta->size(), 1u);
  EXPECT_EQ((*meta)[0].first, "server.id");
  ASSERT_TRUE(store->DeleteRecord(Store::Kind::kJobs, "j1").ok());
  EXPECT_EQ(store->ListRecords(Store::Kind::kJobs)->size(), 1u);

  std::vector<NamedTensor> vars = MakeSnapshot(1, 9).tensors;
  ASSERT_TRUE(store->PutVariables("job", vars).ok());
  ASSERT_TRUE(store->PutVariables("job2", {{"w", Tensor::Scalar<float>(1)}}).ok());
  auto got = store->GetVariables("job");
  ASSERT_TRUE(got.ok());
  ASSERT_EQ(got->size(), 3u);
  EXPECT_EQ((*got)[0].name, "dense/bias");
  EXPECT_TRUE(TensorsEqual((*got)[0].value, vars[1].value));
  // Put replaces the whole scope.
  ASSERT_TRUE(store->PutVariables("job", {{"only", Tensor::Scalar<int32_t>(3)}}).ok());
  EXPECT_EQ(store->GetVariables("job")->size(), 1u);
  EXPECT_EQ(store->GetVariable("job", "dense/bias").status().code(), Code::kNotFound);
  EXPECT_EQ(store->GetVariable("job", "only")->scalar<int32_t>(), 3);
  EXPECT_EQ(store->GetVariables("job2")->size(), 1u);
  EXPECT_GT(*store->DiskBytes(), 0);
  EXPECT_TRUE(store->Flush().ok());
}

TEST(Export, RoundTripAndCorruptFiles) {
  TempDir dir;
  Snapshot s = MakeSnapshot(77, 3);
  s.tensors.push_back({"empty", Tensor(DataType::kFloat64, TensorShape({0, 3}))});
  s.tensors.push_back({"flags", RandomTensor(DataType::kBool, TensorShape({7}), 4)});
  const std::string path = dir.path() + "/model.fsckpt";
  ASSERT_TRUE(ExportSnapshot(s, path).ok());
  EXPECT_FALSE(fs::exists(path + ".tmp"));
  auto got = ImportSnapshot(path);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(got->step, 77);
  EXPECT_EQ(got->metadata, s.metadata);
  ASSERT_EQ(got->tensors.size(), s.tensors.size());
  for (size_t i = 0; i < s.tensors.size(); ++i) {  // the file keeps the order
    EXPECT_EQ(got->tensors[i].name, s.tensors[i].name);
    EXPECT_TRUE(TensorsEqual(got->tensors[i].value, s.tensors[i].value)) << s.tensors[i].name;
  }

  std::string bytes;
  {
    std::ifstream in(path, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), {});
  }
  auto write = [&](const std::string& name, const std::string& b) {
    std::ofstream(dir.path() + "/" + name, std::ios::binary) << b;
    return dir.path() + "/" + name;
  };
  // A flipped bit in dense/bias's data (the second tensor, after kernel's).
  std::string flipped = bytes;
  size_t pos = flipped.find("dense/bias");
  ASSERT_NE(pos, std::string::npos);
  flipped[pos + 10 + 8 + 8 + 8 + 2] ^= 0x40;
  // The file comes from outside the store: what is wrong with it is
  // INVALID_ARGUMENT saying what, naming the file as the caller asks.
  auto bad = ImportSnapshot(write("flipped", flipped), "the upload");
  EXPECT_EQ(bad.status().code(), Code::kInvalidArgument);
  EXPECT_EQ(bad.status().message(),
            "the upload is not a valid flowstate checkpoint export: tensor 'dense/bias' fails its checksum");
  auto trunc = ImportSnapshot(write("trunc", bytes.substr(0, bytes.size() - 20)));
  EXPECT_EQ(trunc.status().code(), Code::kInvalidArgument) << trunc.status().ToString();
  EXPECT_NE(trunc.status().message().find("truncated at byte " + std::to_string(bytes.size() - 20)),
            std::string::npos) << trunc.status().ToString();
  EXPECT_NE(trunc.status().message().find(dir.path() + "/trunc"), std::string::npos)
      << "without a name the path names the file";
  std::string meta = bytes;
  meta[40] ^= 1;  // inside the metadata
  auto m = ImportSnapshot(write("meta", meta), "the upload");
  EXPECT_EQ(m.status().code(), Code::kInvalidArgument);
  EXPECT_NE(m.status().message().find("the header fails its checksum"), std::string::npos);
  EXPECT_EQ(ImportSnapshot(write("extra", bytes + "x")).status().code(), Code::kInvalidArgument);
  auto notours = ImportSnapshot(write("text", "hello, this is not a checkpoint file at all"), "f");
  EXPECT_EQ(notours.status().code(), Code::kInvalidArgument);
  EXPECT_NE(notours.status().message().find("bad magic"), std::string::npos);
  EXPECT_EQ(ImportSnapshot(write("short", "FSC"), "f").status().code(), Code::kInvalidArgument);
  std::string newer = bytes;
  newer[8] = 9;
  auto nv = ImportSnapshot(write("newer", newer));
  EXPECT_EQ(nv.status().code(), Code::kFailedPrecondition);
  EXPECT_EQ(ImportSnapshot(dir.path() + "/absent").status().code(), Code::kNotFound);
}

// ---- Save and Restore ops in a session ----------------------------------------

class SaveRestoreOps : public ::testing::Test {
 protected:
  static DevicePool* Pool() {
    static DevicePool* pool = [] {
      DevicePoolOptions o;
      o.intra_op_threads = 1;
      return DevicePool::Create(o).value().release();
    }();
    return pool;
  }
  std::unique_ptr<Session> NewSession(const Scope& root) {
    SessionOptions o;
    o.devices = Pool();
    o.inter_op_threads = 1;
    auto s = Session::Create(root.graph_def(), o);
    EXPECT_TRUE(s.ok()) << s.status().ToString();
    return s.ok() ? std::move(s).value() : nullptr;
  }
};

TEST_F(SaveRestoreOps, SaveInOneSessionRestoreInAnother) {
  TempDir dir;
  std::shared_ptr<Store> store = MustOpen(dir.path());
  ASSERT_TRUE(store);
  const Tensor w0 = Tensor::FromVector<float>({1.5f, -2, 3, 4, 5, 6}, TensorShape({2, 3}));
  {
    Scope root;
    Output w = ops::Variable(root.WithOpName("w"), TensorShape({2, 3}), DataType::kFloat32);
    Output step = ops::Variable(root.WithOpName("step"), TensorShape(), DataType::kInt64);
    ops::Assign(root.WithOpName("init_w"), w, ops::Const(root, w0));
    ops::Assign(root.WithOpName("init_step"), step, ops::Const(root, Tensor::Scalar<int64_t>(12)));
    ops::Save(root.WithOpName("save"), "model/ckpt", {"w", "global_step"}, {w, step});
    auto s = NewSession(root);
    ASSERT_TRUE(s);
    std::vector<Tensor> out;
    ASSERT_TRUE(s->Run({}, {}, {"init_w", "init_step"}, &out).ok());
    // Without a tensor store: FAILED_PRECONDITION naming the node.
    Status none = s->Run({}, {}, {"save"}, &out);
    EXPECT_EQ(none.code(), Code::kFailedPrecondition) << none.ToString();
    EXPECT_EQ(none.node(), "save");
    ASSERT_TRUE(SetTensorStore(s->resource_manager(), NewTensorStore(store)).ok());
    Status saved = s->Run({}, {}, {"save"}, &out);
    ASSERT_TRUE(saved.ok()) << saved.ToString();
  }
  Scope root;
  Output w = ops::Variable(root.WithOpName("w"), TensorShape({2, 3}), DataType::kFloat32);
  ops::Assign(root.WithOpName("restore_w"), w,
              ops::Restore(root.WithOpName("read_w"), "model/ckpt", "w", DataType::kFloat32));
  ops::Restore(root.WithOpName("read_step"), "model/ckpt", "global_step", DataType::kInt64);
  ops::Restore(root.WithOpName("wrong_dtype"), "model/ckpt", "w", DataType::kFloat64);
  ops::Restore(root.WithOpName("absent"), "model/ckpt", "nope", DataType::kFloat32);
  auto s = NewSession(root);
  ASSERT_TRUE(s);
  ASSERT_TRUE(SetTensorStore(s->resource_manager(), NewTensorStore(store)).ok());
  std::vector<Tensor> out;
  Status r = s->Run({}, {}, {"restore_w"}, &out);
  ASSERT_TRUE(r.ok()) << r.ToString();
  ASSERT_TRUE(s->Run({}, {"w", "read_step"}, {}, &out).ok());
  EXPECT_TRUE(TensorsEqual(out[0], w0)) << out[0].DebugString();
  EXPECT_EQ(out[1].scalar<int64_t>(), 12);
  Status wrong = s->Run({}, {"wrong_dtype"}, {}, &out);
  EXPECT_EQ(wrong.code(), Code::kInvalidArgument);
  EXPECT_EQ(wrong.node(), "wrong_dtype");
  EXPECT_NE(wrong.message().find("float32"), std::string::npos) << wrong.ToString();
  Status absent = s->Run({}, {"absent"}, {}, &out);
  EXPECT_EQ(absent.code(), Code::kNotFound);
  EXPECT_NE(absent.message().find("nope"), std::string::npos) << absent.ToString();
  // The saved tensors live in the variables column family under "save/<prefix>".
  EXPECT_EQ(store->GetVariables("save/model/ckpt")->size(), 2u);
}

TEST_F(SaveRestoreOps, BadSaveNodesAreRefusedAtGraphTime) {
  Scope root;
  Output a = ops::Const(root.WithOpName("a"), Tensor::Scalar<float>(1));
  ops::Save(root.WithOpName("save"), "p", {"x", "y"}, {a});
  SessionOptions o;
  o.devices = Pool();
  auto s = Session::Create(root.graph_def(), o);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().node(), "save") << s.status().ToString();
  EXPECT_NE(s.status().message().find("tensor_names"), std::string::npos) << s.status().ToString();
  Scope r2;
  ops::Save(r2.WithOpName("dup"), "p", {"x", "x"},
            {ops::Const(r2, Tensor::Scalar<float>(1)), ops::Const(r2, Tensor::Scalar<int32_t>(2))});
  auto s2 = Session::Create(r2.graph_def(), o);
  ASSERT_FALSE(s2.ok());
  EXPECT_NE(s2.status().message().find("appears twice"), std::string::npos) << s2.status().ToString();
}

}  // namespace
}  // namespace flowstate::checkpoints

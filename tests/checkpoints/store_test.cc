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
#include <filesystem>
#include <fstream>
#include <random>

#include "checkpoints/format.h"
#include "graph/ops.h"
#include "graph/scope.h"
#include "scheduler/session.h"
#include "state/resource_mgr.h"
#include "state/tensor_store.h"

namespace flowstate::checkpoints {
namespace {

namespace fs = std::filesystem;

class TempDir {
 public:
  TempDir() {
    std::string tmpl = (fs::temp_directory_path() / "flowstate_store_test_XXXXXX").string();
    char* p = ::mkdtemp(tmpl.data());
    EXPECT_NE(p, nullptr);
    path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

std::unique_ptr<Store> MustOpen(const std::string& dir, const StoreOptions& o = {}) {
  auto s = Store::Open(dir, o);
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  return s.ok() ? std::move(s).value() : nullptr;
}

Tensor RandomTensor(DataType dt, const TensorShape& shape, uint32_t seed) {
  Tensor t(dt, shape);
  std::mt19937 rng(seed);
  auto* p = static_cast<uint8_t*>(t.raw_data());
  for (size_t i = 0; i < t.TotalBytes(); ++i) p[i] = uint8_t(rng());
  if (dt == DataType::kBool) {
    for (size_t i = 0; i < t.TotalBytes(); ++i) p[i] &= 1;
  }
  return t;
}

Snapshot MakeSnapshot(int64_t step, uint32_t seed) {
  Snapshot s;
  s.step = step;
  s.metadata = "pipeline position " + std::to_string(step) + std::string("\0rng", 4);
  s.tensors.push_back({"dense/kernel", RandomTensor(DataType::kFloat32, TensorShape({3, 4}), seed)});
  s.tensors.push_back({"dense/bias", RandomTensor(DataType::kFloat32, TensorShape({4}), seed + 1)});
  s.tensors.push_back({"global_step", Tensor::Scalar<int64_t>(step)});
  return s;
}

void ExpectSameSnapshot(const Snapshot& want, const Snapshot& got) {
  EXPECT_EQ(got.step, want.step);
  EXPECT_EQ(got.metadata, want.metadata);
  ASSERT_EQ(got.tensors.size(), want.tensors.size());
  // The store returns tensors sorted by name.
  std::map<std::string, Tensor> w;
  for (const auto& t : want.tensors) w[t.name] = t.value;
  for (const auto& t : got.tensors) {
    ASSERT_TRUE(w.count(t.name)) << t.name;
    EXPECT_TRUE(TensorsEqual(w[t.name], t.value)) << t.name << ": " << t.value.DebugString();
  }
}

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

// Checkpoints over 32 MiB are checksummed on a second thread while they are
// copied: the same guarantees.
TEST(Store, BigCheckpointRoundTripAndCorruption) {
  TempDir dir;
  Snapshot big = MakeSnapshot(5, 11);
  big.tensors.push_back({"embedding", RandomTensor(DataType::kFloat32, TensorShape({9000, 1000}), 12)});
  big.tensors.push_back({"z/slot", RandomTensor(DataType::kFloat32, TensorShape({1000, 1000}), 13)});
  {
    auto store = MustOpen(dir.path());
    ASSERT_TRUE(store->WriteCheckpoint("big", big).ok());
    ExpectSameSnapshot(big, *store->ReadCheckpoint("big", 5));  // from the memtable
    ASSERT_TRUE(store->Flush().ok());
    auto got = store->ReadCheckpoint("big", 5);  // from table files
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    ExpectSameSnapshot(big, *got);
    for (size_t i = 1; i < got->tensors.size(); ++i) {
      EXPECT_LT(got->tensors[i - 1].name, got->tensors[i].name);
    }
  }
  {
    RawDb raw(dir.path());
    std::string key = internal::CheckpointKey(internal::kTensorTag, "big", 5) + "embedding";
    std::string v;
    ASSERT_TRUE(raw.db->Get(rocksdb::ReadOptions(), raw.cf["checkpoints"], key, &v).ok());
    v[v.size() / 2] ^= 0x01;
    ASSERT_TRUE(raw.db->Put(rocksdb::WriteOptions(), raw.cf["checkpoints"], key, v).ok());
    ASSERT_TRUE(raw.db->Flush(rocksdb::FlushOptions(), raw.cf["checkpoints"]).ok());
  }
  auto store = MustOpen(dir.path());
  auto got = store->ReadCheckpoint("big", 5);
  ASSERT_EQ(got.status().code(), Code::kDataLoss) << got.status().ToString();
  EXPECT_NE(got.status().message().find("job 'big' step 5 variable 'embedding'"), std::string::npos)
      << got.status().message();
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

TEST(Store, FailedWritesLeaveThePreviousCheckpointAndRecover) {
  TempDir dir;
  std::atomic<bool> fail{false};
  StoreOptions o;
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

TEST(Store, RetainLatestDeleteAndJobData) {
  TempDir dir;
  auto store = MustOpen(dir.path());
  for (int64_t step : {10, 2, 30, 4, 50}) ASSERT_TRUE(store->WriteCheckpoint("a", MakeSnapshot(step, uint32_t(step))).ok());
  ASSERT_TRUE(store->WriteCheckpoint("b", MakeSnapshot(1, 1)).ok());
  // Steps sort numerically (big-endian keys), not as text.
  auto list = store->ListCheckpoints("a");
  std::vector<int64_t> steps;
  for (auto& i : *list) steps.push_back(i.step);
  EXPECT_EQ(steps, (std::vector<int64_t>{2, 4, 10, 30, 50}));
  ASSERT_TRUE(store->RetainLatest("a", 2).ok());
  steps.clear();
  for (auto& i : *store->ListCheckpoints("a")) steps.push_back(i.step);
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
  auto bad = ImportSnapshot(write("flipped", flipped));
  EXPECT_EQ(bad.status().code(), Code::kDataLoss);
  EXPECT_NE(bad.status().message().find("dense/bias"), std::string::npos) << bad.status().ToString();
  auto trunc = ImportSnapshot(write("trunc", bytes.substr(0, bytes.size() - 20)));
  EXPECT_EQ(trunc.status().code(), Code::kDataLoss) << trunc.status().ToString();
  EXPECT_NE(trunc.status().message().find("truncated"), std::string::npos);
  std::string meta = bytes;
  meta[40] ^= 1;  // inside the metadata
  EXPECT_EQ(ImportSnapshot(write("meta", meta)).status().code(), Code::kDataLoss);
  auto notours = ImportSnapshot(write("text", "hello, this is not a checkpoint file at all"));
  EXPECT_EQ(notours.status().code(), Code::kInvalidArgument);
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

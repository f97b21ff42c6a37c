// PRIVATE to the store (store.cc, store_records.cc): Store::Impl -- the
// RocksDB handles, column families and the checkpoint write paths -- and the
// helpers both files use (column-family options, status conversion, the
// fault-injecting FileSystem of StoreOptions::fail_writes). Thread safety is
// Store's (store.h).
#ifndef FLOWSTATE_CHECKPOINTS_STORE_INTERNAL_H_
#define FLOWSTATE_CHECKPOINTS_STORE_INTERNAL_H_

#include "checkpoints/store.h"

#include <rocksdb/db.h>
#include <rocksdb/env.h>
#include <rocksdb/file_system.h>
#include <rocksdb/options.h>
#include <rocksdb/slice.h>
#include <rocksdb/sst_file_writer.h>
#include <rocksdb/table.h>
#include <rocksdb/write_batch.h>
#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <map>
#include <mutex>
#include <set>
#include <shared_mutex>
#include <thread>

#include "checkpoints/format.h"


namespace flowstate::checkpoints {

namespace store_internal {

using internal::CheckId;

inline constexpr const char* kFormatKey = "flowstate.format_version";
inline constexpr const char* kCfNames[] = {"graphs", "jobs", "variables", "checkpoints", "meta"};
enum Cf { kGraphsCf = 0, kJobsCf, kVariablesCf, kCheckpointsCf, kMetaCf, kNumCfs };

// ---------------------------------------------------------------------------
// StoreOptions::fail_writes: a FileSystem whose writable files fail while the
// hook says so.

class FailingWritableFile final : public rocksdb::FSWritableFileOwnerWrapper {
 public:
  FailingWritableFile(std::unique_ptr<rocksdb::FSWritableFile> f, std::function<bool()> fail)
      : FSWritableFileOwnerWrapper(std::move(f)), fail_(std::move(fail)) {}
  rocksdb::IOStatus Append(const rocksdb::Slice& d, const rocksdb::IOOptions& o,
                           rocksdb::IODebugContext* dbg) override {
    if (fail_()) return Injected();
    return FSWritableFileOwnerWrapper::Append(d, o, dbg);
  }
  rocksdb::IOStatus Append(const rocksdb::Slice& d, const rocksdb::IOOptions& o,
                           const rocksdb::DataVerificationInfo& v,
                           rocksdb::IODebugContext* dbg) override {
    if (fail_()) return Injected();
    return FSWritableFileOwnerWrapper::Append(d, o, v, dbg);
  }
  rocksdb::IOStatus PositionedAppend(const rocksdb::Slice& d, uint64_t off,
                                     const rocksdb::IOOptions& o,
                                     rocksdb::IODebugContext* dbg) override {
    if (fail_()) return Injected();
    return FSWritableFileOwnerWrapper::PositionedAppend(d, off, o, dbg);
  }
  rocksdb::IOStatus Sync(const rocksdb::IOOptions& o, rocksdb::IODebugContext* dbg) override {
    if (fail_()) return Injected();
    return FSWritableFileOwnerWrapper::Sync(o, dbg);
  }
  rocksdb::IOStatus Fsync(const rocksdb::IOOptions& o, rocksdb::IODebugContext* dbg) override {
    if (fail_()) return Injected();
    return FSWritableFileOwnerWrapper::Fsync(o, dbg);
  }
  static rocksdb::IOStatus Injected() {
    return rocksdb::IOStatus::IOError("injected write failure (StoreOptions::fail_writes)");
  }

 private:
  std::function<bool()> fail_;
};

class FailingFileSystem final : public rocksdb::FileSystemWrapper {
 public:
  FailingFileSystem(std::shared_ptr<rocksdb::FileSystem> base, std::function<bool()> fail)
      : FileSystemWrapper(base), fail_(std::move(fail)) {}
  const char* Name() const override { return "FlowstateFailingFileSystem"; }
  rocksdb::IOStatus NewWritableFile(const std::string& f, const rocksdb::FileOptions& o,
                                    std::unique_ptr<rocksdb::FSWritableFile>* r,
                                    rocksdb::IODebugContext* dbg) override {
    if (fail_()) return FailingWritableFile::Injected();
    std::unique_ptr<rocksdb::FSWritableFile> base;
    rocksdb::IOStatus s = target()->NewWritableFile(f, o, &base, dbg);
    if (s.ok()) r->reset(new FailingWritableFile(std::move(base), fail_));
    return s;
  }
  rocksdb::IOStatus ReopenWritableFile(const std::string& f, const rocksdb::FileOptions& o,
                                       std::unique_ptr<rocksdb::FSWritableFile>* r,
                                       rocksdb::IODebugContext* dbg) override {
    if (fail_()) return FailingWritableFile::Injected();
    std::unique_ptr<rocksdb::FSWritableFile> base;
    rocksdb::IOStatus s = target()->ReopenWritableFile(f, o, &base, dbg);
    if (s.ok()) r->reset(new FailingWritableFile(std::move(base), fail_));
    return s;
  }
  rocksdb::IOStatus ReuseWritableFile(const std::string& f, const std::string& old,
                                      const rocksdb::FileOptions& o,
                                      std::unique_ptr<rocksdb::FSWritableFile>* r,
                                      rocksdb::IODebugContext* dbg) override {
    if (fail_()) return FailingWritableFile::Injected();
    std::unique_ptr<rocksdb::FSWritableFile> base;
    rocksdb::IOStatus s = target()->ReuseWritableFile(f, old, o, &base, dbg);
    if (s.ok()) r->reset(new FailingWritableFile(std::move(base), fail_));
    return s;
  }

 private:
  std::function<bool()> fail_;
};

// ---------------------------------------------------------------------------

inline Status FromRocks(const rocksdb::Status& s, const std::string& what) {
  if (s.ok()) return Status();
  std::string m = what + ": " + s.ToString();
  if (s.IsNotFound()) return NotFound(m);
  if (s.IsCorruption()) return DataLoss(m);
  if (s.IsInvalidArgument()) return InvalidArgument(m);
  if (s.IsIOError() || s.IsBusy() || s.IsTimedOut() || s.IsTryAgain()) return Unavailable(m);
  return Internal(m);
}

inline rocksdb::ColumnFamilyOptions TensorCfOptions() {
  rocksdb::ColumnFamilyOptions o;
  // Tensor bytes do not compress, and big sequential values want a big
  // memtable (one checkpoint is one batch) and table files that are written
  // once and not rewritten by compactions.
  o.compression = rocksdb::kNoCompression;
  o.write_buffer_size = 256 << 20;
  o.max_write_buffer_number = 4;
  o.target_file_size_base = 256 << 20;
  o.max_bytes_for_level_base = 1ull << 30;
  rocksdb::BlockBasedTableOptions t;
  t.block_size = 64 << 10;
  // Values carry their own CRC32C; the block checksum only has to guard
  // keys and index blocks, and XXH3 is several times faster than the
  // CRC32C of a portable RocksDB build (about 1 GB/s, measured).
  t.checksum = rocksdb::kXXH3;
  o.table_factory.reset(rocksdb::NewBlockBasedTableFactory(t));
  return o;
}

inline rocksdb::ColumnFamilyOptions CfOptions(const std::string& name) {
  if (name == "checkpoints" || name == "variables") return TensorCfOptions();
  return rocksdb::ColumnFamilyOptions();
}

// Restored tensors of 1 MiB and more get their pages from one
// mmap(MAP_POPULATE): the kernel allocates and zeroes them in one call
// instead of taking a page fault per 4 KiB page during the copy (the
// faults cost more than the copy itself). Smaller ones, and every
// Deallocate of them, go to the host allocator. Never destroyed.
class PopulatedAllocator final : public Allocator {
 public:
  static constexpr size_t kMinBytes = 1 << 20;
  std::string_view Name() const override { return "checkpoint-restore"; }
  void* Allocate(size_t bytes, size_t alignment) override {
    if (bytes < kMinBytes) return HostAllocator()->Allocate(bytes, alignment);
    if (alignment > 4096) return nullptr;  // mappings are page-aligned
    void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
    return p == MAP_FAILED ? nullptr : p;
  }
  void Deallocate(void* ptr, size_t bytes) override {
    if (bytes < kMinBytes) {
      HostAllocator()->Deallocate(ptr, bytes);
      return;
    }
    ::munmap(ptr, bytes);
  }
};

inline Allocator* RestoreAllocator() {
  static Allocator* a = new PopulatedAllocator();
  return a;
}

inline int64_t NowMicros() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

inline std::string Describe(const std::string& job, int64_t step) {
  return "job '" + job + "' step " + std::to_string(step);
}

}  // namespace store_internal

// Impl and the two .cc files use the helpers unqualified.
using namespace store_internal;  // NOLINT: private to the store

struct Store::Impl {
  std::string dir;
  std::string path;
  std::string ingest_dir;  // <dir>/ingest: checkpoint table files before ingestion
  std::atomic<uint64_t> ingest_seq{0};
  StoreOptions options;
  std::unique_ptr<rocksdb::Env> env;  // with the failing FileSystem, when hooked

  // db, handles and cf change only when the database is reopened after a
  // failed write: readers and writers hold db_mu shared, a reopen exclusive.
  std::shared_mutex db_mu;
  rocksdb::DB* db = nullptr;  // null after a reopen that failed
  std::vector<rocksdb::ColumnFamilyHandle*> handles;  // every CF opened (incl. unknown ones)
  rocksdb::ColumnFamilyHandle* cf[kNumCfs] = {};

  std::mutex mu;                   // guards the fields below
  bool needs_recovery = false;     // a write failed; recover before the next one
  bool read_only = false;          // db is the read-only fallback of OpenReadOnly()
  std::map<std::string, std::shared_ptr<std::mutex>> job_mu;  // serializes a job's writes

  ~Impl() { CloseDb(); }

  void CloseDb() {
    if (db != nullptr) {
      for (auto* h : handles) db->DestroyColumnFamilyHandle(h);
      db->Close().PermitUncheckedError();
      delete db;
    }
    db = nullptr;
    read_only = false;
    handles.clear();
    for (auto& c : cf) c = nullptr;
  }

  Status OpenDb(bool exists);

  // After a failed reopen: the database read-only (no LOCK, no writes), so
  // that reads keep working. Leaves db null when even that fails.
  void OpenReadOnly() {
    rocksdb::DBOptions dbo;
    if (env) dbo.env = env.get();
    std::vector<std::string> names;
    if (!rocksdb::DB::ListColumnFamilies(dbo, path, &names).ok()) return;
    std::vector<rocksdb::ColumnFamilyDescriptor> descs;
    for (const std::string& n : names) descs.emplace_back(n, CfOptions(n));
    if (!rocksdb::DB::OpenForReadOnly(dbo, path, descs, &handles, &db).ok()) {
      db = nullptr;
      handles.clear();
      return;
    }
    read_only = true;
    for (size_t i = 0; i < names.size(); ++i) {
      for (int c = 0; c < kNumCfs; ++c) {
        if (names[i] == kCfNames[c]) cf[c] = handles[i];
      }
    }
  }

  // Held for every use of the database. Writers pass recover=true: after a
  // failed write RocksDB keeps refusing writes (its background error), so the
  // next writer asks it to Resume() and, when it cannot, closes and reopens
  // the database — a restart without the process restarting.
  StatusOr<std::shared_lock<std::shared_mutex>> Use(bool recover) {
    if (recover) {
      bool need;
      {
        std::lock_guard<std::mutex> l(mu);
        need = needs_recovery;
      }
      if (need) {
        std::unique_lock<std::shared_mutex> x(db_mu);
        std::lock_guard<std::mutex> l(mu);
        if (needs_recovery) {
          if (db == nullptr || read_only || !db->Resume().ok()) {
            CloseDb();
            Status s = OpenDb(/*exists=*/true);
            if (!s.ok()) {
              // Still failing: keep serving reads from a read-only instance
              // and try again on the next write.
              CloseDb();
              OpenReadOnly();
              return Unavailable("the store is recovering from a write error: " + s.message());
            }
          }
          needs_recovery = false;
        }
      }
    }
    std::shared_lock<std::shared_mutex> r(db_mu);
    if (db == nullptr) {
      return Unavailable("the store " + path + " is unavailable after a write error");
    }
    return r;
  }

  std::shared_ptr<std::mutex> JobMutex(const std::string& job) {
    std::lock_guard<std::mutex> l(mu);
    auto& m = job_mu[job];
    if (!m) m = std::make_shared<std::mutex>();
    return m;
  }

  // Writes a batch; after a failed write, first asks RocksDB to leave its
  // background-error state (the fault may have gone).
  // REQUIRES: db_mu held (Use(true)).
  Status Write(rocksdb::WriteBatch* batch, bool sync, const std::string& what) {
    rocksdb::WriteOptions wo;
    wo.sync = sync;
    rocksdb::Status s = db->Write(wo, batch);
    if (!s.ok()) {
      std::lock_guard<std::mutex> l(mu);
      needs_recovery = true;
    }
    return FromRocks(s, what);
  }

  rocksdb::ColumnFamilyHandle* KindCf(Kind k) const {
    switch (k) {
      case Kind::kGraphs: return cf[kGraphsCf];
      case Kind::kJobs: return cf[kJobsCf];
      case Kind::kMeta: return cf[kMetaCf];
    }
    return cf[kMetaCf];
  }

  // Calls fn(key, value) for every key in [begin, end) of `h`.
  template <typename Fn>
  Status Scan(rocksdb::ColumnFamilyHandle* h, const std::string& begin, const std::string& end,
              const rocksdb::ReadOptions& base, Fn&& fn) {
    rocksdb::ReadOptions ro = base;
    rocksdb::Slice upper(end);
    ro.iterate_upper_bound = &upper;
    std::unique_ptr<rocksdb::Iterator> it(db->NewIterator(ro, h));
    for (it->Seek(begin); it->Valid(); it->Next()) {
      FS_RETURN_IF_ERROR(fn(it->key(), it->value()));
    }
    return FromRocks(it->status(), "reading the store");
  }

  void AddTensor(rocksdb::WriteBatch* b, rocksdb::ColumnFamilyHandle* h, const std::string& key,
                 const Tensor& t, int64_t* bytes) {
    std::string header = internal::EncodeTensorHeader(t);
    rocksdb::Slice k(key);
    rocksdb::Slice parts[2] = {rocksdb::Slice(header),
                               rocksdb::Slice(static_cast<const char*>(t.raw_data()),
                                              t.TotalBytes())};
    // SliceParts: the batch's buffer is the only copy of the tensor bytes.
    b->Put(h, rocksdb::SliceParts(&k, 1), rocksdb::SliceParts(parts, 2)).PermitUncheckedError();
    *bytes += int64_t(t.TotalBytes());
  }
};

namespace store_internal {

inline Status CheckTensors(const std::vector<NamedTensor>& tensors, const std::string& what) {
  std::set<std::string_view> seen;
  for (const NamedTensor& t : tensors) {
    if (t.name.empty()) return InvalidArgument(what + ": a tensor has an empty name");
    if (!t.value.IsInitialized()) {
      return InvalidArgument(what + ": tensor '" + t.name + "' is not initialized");
    }
    if (!seen.insert(t.name).second) {
      return InvalidArgument(what + ": tensor name '" + t.name + "' appears twice");
    }
  }
  return Status();
}

}  // namespace store_internal

}  // namespace flowstate::checkpoints

#endif  // FLOWSTATE_CHECKPOINTS_STORE_INTERNAL_H_

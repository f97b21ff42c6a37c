// PRIVATE to the store (store.cc, store_records.cc): Store::Impl -- the
// RocksDB handles, column families and the checkpoint write paths -- and the
// helpers both files use (column-family options, status conversion, the
// store's FileSystem with the fault injection of StoreOptions::fail_writes
// and disk_full, its info log and its recovery from write errors). Thread
// safety is
// Store's (store.h).
#ifndef FLOWSTATE_CHECKPOINTS_STORE_INTERNAL_H_
#define FLOWSTATE_CHECKPOINTS_STORE_INTERNAL_H_

#include "checkpoints/store.h"

#include <rocksdb/db.h>
#include <rocksdb/env.h>
#include <rocksdb/file_system.h>
#include <rocksdb/listener.h>
#include <rocksdb/options.h>
#include <rocksdb/slice.h>
#include <rocksdb/sst_file_writer.h>
#include <rocksdb/table.h>
#include <rocksdb/write_batch.h>
#include <fcntl.h>
#include <pthread.h>
#include <sys/mman.h>
#include <sys/statvfs.h>
#include <sys/time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdarg>
#include <cstdio>
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
// The store's FileSystem: the default one, with two changes.
//  - The write-ahead log is not preallocated. RocksDB fallocate()s a log in
//    blocks of 1.1 x write_buffer_size (282 MiB with the tensor families'
//    256 MiB memtables) or max_total_wal_size: space a small checkpoint
//    never uses, which on a small disk (or tmpfs, where it is memory) ran
//    out before the data did.
//  - The test hooks StoreOptions::fail_writes (an I/O error) and disk_full
//    (ENOSPC): while one returns true, every write of a database file fails.

class FailingWritableFile final : public rocksdb::FSWritableFileOwnerWrapper {
 public:
  FailingWritableFile(std::unique_ptr<rocksdb::FSWritableFile> f,
                      std::function<rocksdb::IOStatus()> fail)
      : FSWritableFileOwnerWrapper(std::move(f)), fail_(std::move(fail)) {}
  rocksdb::IOStatus Append(const rocksdb::Slice& d, const rocksdb::IOOptions& o,
                           rocksdb::IODebugContext* dbg) override {
    if (rocksdb::IOStatus s = fail_(); !s.ok()) return s;
    return FSWritableFileOwnerWrapper::Append(d, o, dbg);
  }
  rocksdb::IOStatus Append(const rocksdb::Slice& d, const rocksdb::IOOptions& o,
                           const rocksdb::DataVerificationInfo& v,
                           rocksdb::IODebugContext* dbg) override {
    if (rocksdb::IOStatus s = fail_(); !s.ok()) return s;
    return FSWritableFileOwnerWrapper::Append(d, o, v, dbg);
  }
  rocksdb::IOStatus PositionedAppend(const rocksdb::Slice& d, uint64_t off,
                                     const rocksdb::IOOptions& o,
                                     rocksdb::IODebugContext* dbg) override {
    if (rocksdb::IOStatus s = fail_(); !s.ok()) return s;
    return FSWritableFileOwnerWrapper::PositionedAppend(d, off, o, dbg);
  }
  rocksdb::IOStatus Sync(const rocksdb::IOOptions& o, rocksdb::IODebugContext* dbg) override {
    if (rocksdb::IOStatus s = fail_(); !s.ok()) return s;
    return FSWritableFileOwnerWrapper::Sync(o, dbg);
  }
  rocksdb::IOStatus Fsync(const rocksdb::IOOptions& o, rocksdb::IODebugContext* dbg) override {
    if (rocksdb::IOStatus s = fail_(); !s.ok()) return s;
    return FSWritableFileOwnerWrapper::Fsync(o, dbg);
  }

 private:
  std::function<rocksdb::IOStatus()> fail_;
};

class StoreFileSystem final : public rocksdb::FileSystemWrapper {
 public:
  StoreFileSystem(std::shared_ptr<rocksdb::FileSystem> base, std::function<bool()> fail_writes,
                  std::function<bool()> disk_full)
      : FileSystemWrapper(base), fail_writes_(std::move(fail_writes)), disk_full_(std::move(disk_full)) {}
  const char* Name() const override { return "FlowstateStoreFileSystem"; }

  rocksdb::FileOptions OptimizeForLogWrite(const rocksdb::FileOptions& o,
                                           const rocksdb::DBOptions& db) const override {
    rocksdb::FileOptions r = target()->OptimizeForLogWrite(o, db);
    r.allow_fallocate = false;
    return r;
  }

  // The injected error, or OK.
  rocksdb::IOStatus Injected() const {
    if (disk_full_ && disk_full_()) {
      return rocksdb::IOStatus::NoSpace("injected full disk (StoreOptions::disk_full)",
                                        "No space left on device");
    }
    if (fail_writes_ && fail_writes_()) {
      return rocksdb::IOStatus::IOError("injected write failure (StoreOptions::fail_writes)");
    }
    return rocksdb::IOStatus::OK();
  }

  rocksdb::IOStatus NewWritableFile(const std::string& f, const rocksdb::FileOptions& o,
                                    std::unique_ptr<rocksdb::FSWritableFile>* r,
                                    rocksdb::IODebugContext* dbg) override {
    return Wrap(r, [&](std::unique_ptr<rocksdb::FSWritableFile>* b) {
      return target()->NewWritableFile(f, o, b, dbg);
    });
  }
  rocksdb::IOStatus ReopenWritableFile(const std::string& f, const rocksdb::FileOptions& o,
                                       std::unique_ptr<rocksdb::FSWritableFile>* r,
                                       rocksdb::IODebugContext* dbg) override {
    return Wrap(r, [&](std::unique_ptr<rocksdb::FSWritableFile>* b) {
      return target()->ReopenWritableFile(f, o, b, dbg);
    });
  }
  rocksdb::IOStatus ReuseWritableFile(const std::string& f, const std::string& old,
                                      const rocksdb::FileOptions& o,
                                      std::unique_ptr<rocksdb::FSWritableFile>* r,
                                      rocksdb::IODebugContext* dbg) override {
    return Wrap(r, [&](std::unique_ptr<rocksdb::FSWritableFile>* b) {
      return target()->ReuseWritableFile(f, old, o, b, dbg);
    });
  }

 private:
  template <typename Open>
  rocksdb::IOStatus Wrap(std::unique_ptr<rocksdb::FSWritableFile>* r, Open&& open) {
    if (!fail_writes_ && !disk_full_) return open(r);
    if (rocksdb::IOStatus s = Injected(); !s.ok()) return s;
    std::unique_ptr<rocksdb::FSWritableFile> base;
    rocksdb::IOStatus s = open(&base);
    if (s.ok()) r->reset(new FailingWritableFile(std::move(base), [this] { return Injected(); }));
    return s;
  }

  std::function<bool()> fail_writes_, disk_full_;
};

// RocksDB's info log (<store>/LOG), written with plain write(2)s. RocksDB's
// own logger writes through a WritableFileWriter that, once a write of it
// failed (a full disk), aborts the process on its next line (the assertion
// `sync_without_flush_called_` of Debian's build) -- before the failed
// checkpoint was even reported. Here a line that cannot be written is
// dropped. An existing LOG is renamed LOG.old.<micros> first, RocksDB's own
// name, so its purge of old info logs (keep_log_file_num) applies. The log
// stops growing at 64 MiB. Thread-safe: one O_APPEND write per line.
class StoreInfoLog final : public rocksdb::Logger {
 public:
  explicit StoreInfoLog(const std::string& db_path)
      : rocksdb::Logger(rocksdb::InfoLogLevel::INFO_LEVEL) {
    const std::string log = db_path + "/LOG";
    if (::access(log.c_str(), F_OK) == 0) {
      (void)::rename(log.c_str(), (log + ".old." + std::to_string(Micros())).c_str());
    }
    fd_ = ::open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  }
  ~StoreInfoLog() override {
    if (fd_ >= 0) ::close(fd_);
  }
  using rocksdb::Logger::Logv;
  void Logv(const char* format, va_list ap) override {
    if (fd_ < 0 || bytes_.load(std::memory_order_relaxed) > kMaxBytes) return;
    char buf[2048];
    struct timeval now;
    ::gettimeofday(&now, nullptr);
    struct tm t;
    ::localtime_r(&now.tv_sec, &t);
    int n = std::snprintf(buf, sizeof buf, "%04d/%02d/%02d-%02d:%02d:%02d.%06ld %lx ",
                          t.tm_year + 1900, t.tm_mon + 1, t.tm_mday, t.tm_hour, t.tm_min,
                          t.tm_sec, long(now.tv_usec), (unsigned long)::pthread_self());
    if (n < 0) return;
    va_list copy;
    va_copy(copy, ap);
    int m = std::vsnprintf(buf + n, sizeof buf - size_t(n) - 1, format, copy);
    va_end(copy);
    if (m < 0) return;
    size_t len = std::min(size_t(n) + size_t(m), sizeof buf - 2);
    if (buf[len - 1] != '\n') buf[len++] = '\n';
    const ssize_t w = ::write(fd_, buf, len);  // ENOSPC and others: the line is dropped
    if (w > 0) bytes_.fetch_add(size_t(w), std::memory_order_relaxed);
  }
  size_t GetLogFileSize() const override { return bytes_.load(std::memory_order_relaxed); }

 private:
  static constexpr size_t kMaxBytes = size_t(64) << 20;
  static int64_t Micros() {
    return std::chrono::duration_cast<std::chrono::microseconds>(
               std::chrono::system_clock::now().time_since_epoch())
        .count();
  }
  int fd_ = -1;
  std::atomic<size_t> bytes_{0};
};

// Turns off RocksDB's own recovery from background errors: from a full
// disk it waits, polling every 5 s, until the disk has a whole memtable's
// worth free (256 MiB here), and like a manual DB::Resume() it leaves the
// database half-stopped in RocksDB 7.8 (see Store::Impl::Recover). The store
// recovers by itself instead, on the next write.
class ManualRecovery final : public rocksdb::EventListener {
 public:
  const char* Name() const override { return "FlowstateManualRecovery"; }
  void OnErrorRecoveryBegin(rocksdb::BackgroundErrorReason, rocksdb::Status bg_error,
                            bool* auto_recovery) override {
    bg_error.PermitUncheckedError();
    *auto_recovery = false;
  }
};

// ---------------------------------------------------------------------------

inline Status FromRocks(const rocksdb::Status& s, const std::string& what) {
  if (s.ok()) return Status();
  std::string m = what + ": " + s.ToString();
  if (s.IsNoSpace()) return ResourceExhausted(what + ": disk full: " + s.ToString());
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
  std::unique_ptr<rocksdb::Env> env;  // over StoreFileSystem
  std::shared_ptr<rocksdb::Logger> info_log;  // StoreInfoLog, one per Store (reopens share it)
  std::shared_ptr<rocksdb::EventListener> listener = std::make_shared<ManualRecovery>();

  // db, handles and cf change only when the database is reopened after a
  // failed write: readers and writers hold db_mu shared, a reopen exclusive.
  std::shared_mutex db_mu;
  rocksdb::DB* db = nullptr;  // null after a reopen that failed
  std::vector<rocksdb::ColumnFamilyHandle*> handles;  // every CF opened (incl. unknown ones)
  rocksdb::ColumnFamilyHandle* cf[kNumCfs] = {};

  std::mutex mu;                   // guards the fields below
  bool needs_recovery = false;     // a write failed; recover before the next one
  bool read_only = false;          // db is the read-only fallback of OpenReadOnly()
  Status write_error;              // why writes fail while needs_recovery (may be OK: unknown yet)
  std::chrono::steady_clock::time_point next_reopen;  // no reopen attempt before this
  std::map<std::string, std::shared_ptr<std::mutex>> job_mu;  // serializes a job's writes
  // Checkpoints (job, step) whose write was reported failed. Part of such a
  // write may have reached the disk (the log record appended, its sync
  // failed) and the reopen of Recover() or of the read-only fallback replays
  // it: until Recover() has deleted them they are left out of listings and
  // reads, so that what was reported failed is never restored. Kept in
  // memory only: after a crash such a checkpoint is found whole, as if its
  // write had succeeded.
  std::set<std::pair<std::string, int64_t>> unsettled;

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

  // What every open of the database (read-write or read-only) shares.
  rocksdb::DBOptions BaseDbOptions() const {
    rocksdb::DBOptions dbo;
    dbo.env = env.get();
    dbo.info_log = info_log;
    dbo.listeners.push_back(listener);
    return dbo;
  }

  Status OpenDb(bool exists);
  // OpenDb, and when it fails on a table file the MANIFEST names but the
  // directory lacks -- a failed ingestion whose MANIFEST record reached the
  // disk (appended; its sync failed) although RocksDB then deleted the
  // ingested file -- links the table files of failed ingestions kept in
  // ingest_dir (KeepFailedIngestion) under that name and opens again.
  Status OpenDbRestoringIngestions(bool exists);
  // Keeps the table file `file` of a failed ingestion in ingest_dir for
  // OpenDbRestoringIngestions (ingest_dir is cleared by Open and after a
  // recovery).
  void KeepFailedIngestion(const std::string& file);

  // After a failed reopen: the database read-only (no LOCK, no writes), so
  // that reads keep working. Leaves db null when even that fails.
  void OpenReadOnly() {
    rocksdb::DBOptions dbo = BaseDbOptions();
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

  // True when the store's file system has less than 1 MiB free (RocksDB
  // reports some failures of a full disk without saying so, e.g. "Unable to
  // persist Options file").
  bool DiskNearlyFull() const {
    struct statvfs v;
    return ::statvfs(path.c_str(), &v) == 0 && uint64_t(v.f_bavail) * v.f_frsize < (1u << 20);
  }

  // The read-only fallback after `s` (a failed open for writing): reads go
  // on; the next write after reopen_interval_ms tries to open for writing.
  // REQUIRES: db_mu exclusive (or no other user yet) and mu.
  Status FallBackToReadOnly(const Status& s) {
    CloseDb();
    OpenReadOnly();
    needs_recovery = true;
    next_reopen = std::chrono::steady_clock::now() +
                  std::chrono::milliseconds(options.reopen_interval_ms);
    if (s.code() == Code::kResourceExhausted || DiskNearlyFull()) {
      write_error = ResourceExhausted("the store " + path +
                                      " is read-only until its disk has free space again "
                                      "(disk full): " + s.message());
    } else {
      write_error = Unavailable("the store is recovering from a write error: " + s.message());
    }
    return write_error;
  }

  // Leaves RocksDB's background-error state after a failed write by closing
  // and reopening the database -- a restart without the process restarting:
  // the log is replayed and flushed to table files, a new log started. Not
  // DB::Resume(): in RocksDB 7.8 a manual Resume() clears the error but not
  // the "stopped" flag, and the next IngestExternalFile() then aborts the
  // process (assertion `number > 0`; StoreDiskFull.InjectedFullDisk... with
  // ingestion shows it). While the disk is still full the reopen fails and
  // the database is served read-only (FallBackToReadOnly); the next attempt
  // comes reopen_interval_ms later (other errors: on the next write).
  // REQUIRES: db_mu exclusive and mu.
  Status Recover() {
    if ((db == nullptr || read_only) && write_error.code() == Code::kResourceExhausted &&
        std::chrono::steady_clock::now() < next_reopen) {
      return write_error.ok() ? Unavailable("the store " + path + " is recovering from a write error")
                              : write_error;
    }
    CloseDb();
    Status s = OpenDbRestoringIngestions(/*exists=*/true);
    if (!s.ok()) return FallBackToReadOnly(s);
    ClearFailedIngestions();
    if (!unsettled.empty()) {
      rocksdb::WriteBatch b;
      for (const auto& [job, step] : unsettled) DeleteCheckpointRecords(&b, job, step);
      rocksdb::WriteOptions wo;
      wo.sync = true;
      if (Status d = FromRocks(db->Write(wo, &b), "deleting the checkpoints whose write failed"); !d.ok()) {
        write_error = d;
        return d;  // still needs_recovery: the next writer reopens again
      }
      unsettled.clear();
    }
    needs_recovery = false;
    write_error = Status();
    return Status();
  }

  // Held for every use of the database. Writers pass recover=true: after a
  // failed write RocksDB keeps refusing writes (its background error), so the
  // next writer recovers first (Recover()).
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
        if (needs_recovery) FS_RETURN_IF_ERROR(Recover());
      }
    }
    std::shared_lock<std::shared_mutex> r(db_mu);
    if (db == nullptr) {
      return Unavailable("the store " + path + " is unavailable after a write error");
    }
    return r;
  }

  // Removes the table files KeepFailedIngestion kept (the database links
  // any it needed under its own name).
  void ClearFailedIngestions() {
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator(ingest_dir, ec)) {
      if (e.path().filename().string().rfind("failed-", 0) == 0) std::filesystem::remove(e.path(), ec);
    }
  }

  // Adds the deletion of every record of checkpoint (job, step) to `b`.
  void DeleteCheckpointRecords(rocksdb::WriteBatch* b, const std::string& job, int64_t step) const {
    rocksdb::ColumnFamilyHandle* h = cf[kCheckpointsCf];
    b->Delete(h, internal::CheckpointKey(internal::kIndexTag, job, step)).PermitUncheckedError();
    b->Delete(h, internal::CheckpointKey(internal::kMetadataTag, job, step)).PermitUncheckedError();
    b->DeleteRange(h, internal::CheckpointKey(internal::kTensorTag, job, step),
                   internal::CheckpointKey(internal::kTensorTag, job, step + 1))
        .PermitUncheckedError();
    b->DeleteRange(h, internal::CheckpointKey(internal::kChunkTag, job, step),
                   internal::CheckpointKey(internal::kChunkTag, job, step + 1))
        .PermitUncheckedError();
  }

  // Records how the write of checkpoint (job, step) ended: a failed one
  // that replaced nothing is unsettled until recovery deletes it; a
  // replacing one is the old or the new version, both whole.
  void CheckpointWritten(const std::string& job, int64_t step, bool replacing, const Status& s) {
    std::lock_guard<std::mutex> l(mu);
    if (s.ok()) {
      unsettled.erase({job, step});
    } else if (!replacing) {
      unsettled.insert({job, step});
    }
  }

  // True while checkpoint (job, step)'s failed write is unsettled.
  bool Unsettled(const std::string& job, int64_t step) {
    std::lock_guard<std::mutex> l(mu);
    return unsettled.count({job, step}) > 0;
  }

  // Marks the store for recovery after the failed write `s`.
  void WriteFailed(const Status& s) {
    std::lock_guard<std::mutex> l(mu);
    needs_recovery = true;
    write_error = s;
  }

  std::shared_ptr<std::mutex> JobMutex(const std::string& job) {
    std::lock_guard<std::mutex> l(mu);
    auto& m = job_mu[job];
    if (!m) m = std::make_shared<std::mutex>();
    return m;
  }

  // Writes a batch; a failure marks the store for recovery, which the next
  // writer does first (Use(true)).
  // REQUIRES: db_mu held (Use(true)).
  Status Write(rocksdb::WriteBatch* batch, bool sync, const std::string& what) {
    rocksdb::WriteOptions wo;
    wo.sync = sync;
    rocksdb::Status s = db->Write(wo, batch);
    Status st = FromRocks(s, what);
    if (!s.ok()) WriteFailed(st);
    return st;
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

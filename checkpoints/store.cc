// The RocksDB-backed Store. Layouts: checkpoints/FORMAT.md and format.h.
#include "checkpoints/store.h"

#include <rocksdb/db.h>
#include <sys/mman.h>
#include <rocksdb/env.h>
#include <rocksdb/file_system.h>
#include <rocksdb/options.h>
#include <rocksdb/slice.h>
#include <rocksdb/sst_file_writer.h>
#include <rocksdb/table.h>
#include <rocksdb/write_batch.h>

#include <algorithm>
#include <cstring>
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
namespace {

using internal::CheckId;

constexpr const char* kFormatKey = "flowstate.format_version";
constexpr const char* kCfNames[] = {"graphs", "jobs", "variables", "checkpoints", "meta"};
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

Status FromRocks(const rocksdb::Status& s, const std::string& what) {
  if (s.ok()) return Status();
  std::string m = what + ": " + s.ToString();
  if (s.IsNotFound()) return NotFound(m);
  if (s.IsCorruption()) return DataLoss(m);
  if (s.IsInvalidArgument()) return InvalidArgument(m);
  if (s.IsIOError() || s.IsBusy() || s.IsTimedOut() || s.IsTryAgain()) return Unavailable(m);
  return Internal(m);
}

rocksdb::ColumnFamilyOptions TensorCfOptions() {
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

rocksdb::ColumnFamilyOptions CfOptions(const std::string& name) {
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

Allocator* RestoreAllocator() {
  static Allocator* a = new PopulatedAllocator();
  return a;
}

int64_t NowMicros() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string Describe(const std::string& job, int64_t step) {
  return "job '" + job + "' step " + std::to_string(step);
}

}  // namespace

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

namespace {

Status CheckTensors(const std::vector<NamedTensor>& tensors, const std::string& what) {
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

}  // namespace

Store::Store(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Store::~Store() = default;
const std::string& Store::dir() const { return impl_->dir; }

StatusOr<std::unique_ptr<Store>> Store::Open(const std::string& dir, const StoreOptions& options) {
  if (dir.empty()) return InvalidArgument("the data directory must not be empty");
  auto impl = std::make_unique<Impl>();
  impl->dir = dir;
  impl->path = (std::filesystem::path(dir) / "store").string();
  impl->options = options;
  std::error_code ec;
  const bool exists = std::filesystem::exists(std::filesystem::path(impl->path) / "CURRENT", ec);
  if (!exists && !options.create_if_missing) {
    return NotFound("no flowstate store in data directory " + dir);
  }
  if (!exists) {
    std::filesystem::create_directories(impl->path, ec);
    if (ec) {
      return PermissionDenied("cannot create data directory " + impl->path + ": " + ec.message());
    }
  }
  if (options.fail_writes) {
    auto fs = std::make_shared<FailingFileSystem>(rocksdb::FileSystem::Default(),
                                                  options.fail_writes);
    impl->env = rocksdb::NewCompositeEnv(fs);
  }
  FS_RETURN_IF_ERROR(impl->OpenDb(exists));
  // Table files of checkpoints that a crash caught before their ingestion
  // were never part of the store: remove them.
  impl->ingest_dir = (std::filesystem::path(dir) / "ingest").string();
  std::filesystem::remove_all(impl->ingest_dir, ec);
  std::filesystem::create_directories(impl->ingest_dir, ec);
  if (ec) {
    return PermissionDenied("cannot create directory " + impl->ingest_dir + ": " + ec.message());
  }
  return std::unique_ptr<Store>(new Store(std::move(impl)));
}

Status Store::Impl::OpenDb(bool exists) {
  rocksdb::DBOptions dbo;
  dbo.create_if_missing = options.create_if_missing;
  dbo.create_missing_column_families = false;
  dbo.max_background_jobs = 2;
  dbo.keep_log_file_num = 4;
  dbo.max_manifest_file_size = 64 << 20;
  // Table files are mapped: a restore copies each tensor once, from the
  // page cache into the tensor, instead of pread()ing it into a block buffer
  // first.
  dbo.allow_mmap_reads = true;
  if (env) dbo.env = env.get();

  std::vector<std::string> names = {rocksdb::kDefaultColumnFamilyName};
  if (exists) {
    names.clear();
    rocksdb::Status s = rocksdb::DB::ListColumnFamilies(dbo, path, &names);
    if (!s.ok()) return FromRocks(s, "opening store " + path);
  }
  std::vector<rocksdb::ColumnFamilyDescriptor> descs;
  for (const std::string& n : names) descs.emplace_back(n, CfOptions(n));
  rocksdb::Status s = rocksdb::DB::Open(dbo, path, descs, &handles, &db);
  if (!s.ok()) {
    db = nullptr;
    handles.clear();
    std::string m = s.ToString();
    if (s.IsIOError() && (m.find("lock") != std::string::npos || m.find("LOCK") != std::string::npos)) {
      return FailedPrecondition("data directory " + dir +
                                " is in use by another flowstate process (lock " + path +
                                "/LOCK is held: " + m + ")");
    }
    return FromRocks(s, "opening store " + path);
  }
  for (size_t i = 0; i < names.size(); ++i) {
    for (int c = 0; c < kNumCfs; ++c) {
      if (names[i] == kCfNames[c]) cf[c] = handles[i];
    }
  }

  // The format version, before anything is changed.
  if (cf[kMetaCf] != nullptr) {
    std::string v;
    rocksdb::Status g = db->Get(rocksdb::ReadOptions(), cf[kMetaCf], kFormatKey, &v);
    if (g.ok()) {
      int64_t version = 0;
      try {
        version = std::stoll(v);
      } catch (...) {
        return DataLoss("store " + path + " has an unreadable format version '" + v + "'");
      }
      if (version > kFormatVersion) {
        return FailedPrecondition("store " + path + " has format version " +
                                  std::to_string(version) + ", newer than format version " +
                                  std::to_string(kFormatVersion) +
                                  " that this flowstate binary reads; use a newer flowstate");
      }
    } else if (!g.IsNotFound()) {
      return FromRocks(g, "reading the format version of " + path);
    }
  }
  for (int c = 0; c < kNumCfs; ++c) {
    if (cf[c] != nullptr) continue;
    rocksdb::ColumnFamilyHandle* h = nullptr;
    rocksdb::Status cs = db->CreateColumnFamily(CfOptions(kCfNames[c]), kCfNames[c], &h);
    if (!cs.ok()) return FromRocks(cs, "creating column family " + std::string(kCfNames[c]));
    handles.push_back(h);
    cf[c] = h;
  }
  std::string v;
  rocksdb::Status g = db->Get(rocksdb::ReadOptions(), cf[kMetaCf], kFormatKey, &v);
  // An older store is upgraded in place: this binary reads its records and
  // writes newer ones, which older binaries must then refuse.
  if (g.IsNotFound() || (g.ok() && std::stoll(v) < kFormatVersion)) {
    rocksdb::WriteBatch b;
    b.Put(cf[kMetaCf], kFormatKey, std::to_string(kFormatVersion)).PermitUncheckedError();
    rocksdb::WriteOptions wo;
    wo.sync = true;
    return FromRocks(db->Write(wo, &b), "writing the format version");
  }
  return FromRocks(g, "reading the format version of " + path);
}

// --- checkpoints --------------------------------------------------------------

Status Store::WriteCheckpoint(const std::string& job_id, const Snapshot& snap) {
  FS_ASSIGN_OR_RETURN(auto db_use, impl_->Use(/*recover=*/true));
  FS_RETURN_IF_ERROR(CheckId(job_id, "job id"));
  if (snap.step < 0) return InvalidArgument("checkpoint step must be >= 0, got " + std::to_string(snap.step));
  const std::string what = "checkpoint of " + Describe(job_id, snap.step);
  FS_RETURN_IF_ERROR(CheckTensors(snap.tensors, what));
  Impl& m = *impl_;
  auto job_lock = m.JobMutex(job_id);
  std::lock_guard<std::mutex> l(*job_lock);

  rocksdb::ColumnFamilyHandle* h = m.cf[kCheckpointsCf];
  const int64_t step = snap.step;
  const std::string index_key = internal::CheckpointKey(internal::kIndexTag, job_id, step);
  std::string old;
  rocksdb::Status g = m.db->Get(rocksdb::ReadOptions(), h, index_key, &old);
  const bool replacing = g.ok();
  if (!g.ok() && !g.IsNotFound()) return FromRocks(g, what);

  // Tensors in name order: ordinal i is the i-th name, so that the chunk
  // keys (ordinal, index) sort like the data and a table file can be
  // written front to back.
  std::vector<const NamedTensor*> sorted;
  for (const NamedTensor& t : snap.tensors) sorted.push_back(&t);
  std::sort(sorted.begin(), sorted.end(),
            [](const NamedTensor* a, const NamedTensor* b) { return a->name < b->name; });
  constexpr uint32_t kChunk = internal::kChunkBytes;
  int64_t bytes = 0;
  for (const NamedTensor* t : sorted) bytes += int64_t(t->value.TotalBytes());
  internal::IndexRecord idx;
  idx.step = step;
  idx.unix_micros = NowMicros();
  idx.bytes = bytes;
  idx.num_tensors = int64_t(snap.tensors.size());
  idx.metadata_crc = internal::Crc32c(snap.metadata.data(), snap.metadata.size());
  idx.metadata_bytes = int64_t(snap.metadata.size());
  const std::string index = internal::EncodeIndex(idx);
  const std::string meta_key = internal::CheckpointKey(internal::kMetadataTag, job_id, step);
  const std::string tensor_prefix = internal::CheckpointKey(internal::kTensorTag, job_id, step);
  const std::string tensors_begin = tensor_prefix;
  const std::string tensors_end = internal::CheckpointKey(internal::kTensorTag, job_id, step + 1);
  const std::string chunks_begin = internal::CheckpointKey(internal::kChunkTag, job_id, step);
  const std::string chunks_end = internal::CheckpointKey(internal::kChunkTag, job_id, step + 1);
  // Calls put(key, value) for every record in key order: chunks, index,
  // metadata, tensor headers. A chunk's CRC is computed just before it is
  // handed on, while it is in cache for the copy that follows; the headers
  // that carry the CRCs come last in key order.
  auto for_each_record = [&](auto&& put) -> Status {
    std::vector<std::string> headers(sorted.size());
    std::vector<uint32_t> crcs;
    for (size_t i = 0; i < sorted.size(); ++i) {
      const Tensor& t = sorted[i]->value;
      const char* d = static_cast<const char*>(t.raw_data());
      const size_t n = t.TotalBytes();
      crcs.clear();
      uint32_t c = 0;
      for (size_t off = 0; off < n; off += kChunk, ++c) {
        const size_t len = std::min<size_t>(kChunk, n - off);
        crcs.push_back(internal::Crc32c(d + off, len));
        FS_RETURN_IF_ERROR(put(internal::ChunkKey(job_id, step, uint32_t(i), c), rocksdb::Slice(d + off, len)));
      }
      headers[i] = internal::EncodeChunkedTensorHeader(t, uint32_t(i), kChunk, crcs);
    }
    FS_RETURN_IF_ERROR(put(index_key, rocksdb::Slice(index)));
    FS_RETURN_IF_ERROR(put(meta_key, rocksdb::Slice(snap.metadata)));
    for (size_t i = 0; i < sorted.size(); ++i) {
      FS_RETURN_IF_ERROR(put(tensor_prefix + sorted[i]->name, rocksdb::Slice(headers[i])));
    }
    return Status();
  };

  if (bytes < m.options.ingest_min_bytes) {
    size_t reserve = 256 + snap.metadata.size() + size_t(bytes);
    for (const NamedTensor* t : sorted) {
      const size_t chunks = t->value.TotalBytes() / kChunk + 1;
      reserve += 128 + 8 * size_t(t->value.rank()) + 2 * t->name.size() + 48 * chunks;
    }
    rocksdb::WriteBatch batch(reserve);
    if (replacing) {
      batch.DeleteRange(h, chunks_begin, chunks_end).PermitUncheckedError();
      batch.DeleteRange(h, tensors_begin, tensors_end).PermitUncheckedError();
    }
    FS_RETURN_IF_ERROR(for_each_record([&](const std::string& k, const rocksdb::Slice& v) -> Status {
      batch.Put(h, k, v).PermitUncheckedError();
      return Status();
    }));
    return m.Write(&batch, /*sync=*/true, "writing " + what);
  }

  // Big checkpoints: one table file, written once from the tensors' buffers
  // (no WAL, memtable or flush copies), synced, and ingested atomically —
  // one MANIFEST record makes all of it visible, or none of it.
  const std::string file = m.ingest_dir + "/" + std::to_string(++m.ingest_seq) + ".sst";
  rocksdb::Options o(rocksdb::DBOptions(), CfOptions("checkpoints"));
  if (m.env) o.env = m.env.get();
  // invalidate_page_cache=false: a restore soon after reads from the cache.
  rocksdb::SstFileWriter w(rocksdb::EnvOptions(), o, h, /*invalidate_page_cache=*/false);
  struct Unlink {
    std::string f;
    ~Unlink() {
      std::error_code ec;
      std::filesystem::remove(f, ec);  // gone already when ingestion moved it
    }
  } unlink{file};
  auto rs = [&](const rocksdb::Status& st) { return FromRocks(st, "writing " + what); };
  FS_RETURN_IF_ERROR(rs(w.Open(file)));
  if (replacing) {
    // The file's tombstones cover only older sequence numbers: they delete
    // the replaced checkpoint's records, not this file's.
    FS_RETURN_IF_ERROR(rs(w.DeleteRange(chunks_begin, chunks_end)));
    FS_RETURN_IF_ERROR(rs(w.DeleteRange(tensors_begin, tensors_end)));
  }
  FS_RETURN_IF_ERROR(for_each_record([&](const std::string& k, const rocksdb::Slice& v) {
    return rs(w.Put(k, v));
  }));
  FS_RETURN_IF_ERROR(rs(w.Finish()));  // fsyncs the file
  rocksdb::IngestExternalFileOptions io;
  io.move_files = true;            // hard link, no copy
  io.write_global_seqno = false;   // the sequence number lives in the MANIFEST
  rocksdb::Status st = m.db->IngestExternalFile(h, {file}, io);
  if (!st.ok()) {
    std::lock_guard<std::mutex> ml(m.mu);
    m.needs_recovery = true;
  }
  return rs(st);
}

StatusOr<Snapshot> Store::ReadCheckpoint(const std::string& job_id, int64_t step) {
  FS_ASSIGN_OR_RETURN(auto db_use, impl_->Use(/*recover=*/false));
  FS_RETURN_IF_ERROR(CheckId(job_id, "job id"));
  Impl& m = *impl_;
  rocksdb::ColumnFamilyHandle* h = m.cf[kCheckpointsCf];
  const std::string what = Describe(job_id, step);
  // One implicit snapshot for the whole read, so a concurrent rewrite or
  // deletion of the same checkpoint is never seen half-way.
  const rocksdb::Snapshot* dbsnap = m.db->GetSnapshot();
  struct Release {
    rocksdb::DB* db;
    const rocksdb::Snapshot* s;
    ~Release() { db->ReleaseSnapshot(s); }
  } release{m.db, dbsnap};
  rocksdb::ReadOptions ro;
  ro.snapshot = dbsnap;
  std::string v;
  rocksdb::Status g = m.db->Get(ro, h, internal::CheckpointKey(internal::kIndexTag, job_id, step), &v);
  if (g.IsNotFound()) return NotFound("job '" + job_id + "' has no checkpoint at step " + std::to_string(step));
  FS_RETURN_IF_ERROR(FromRocks(g, "reading checkpoint of " + what));
  FS_ASSIGN_OR_RETURN(internal::IndexRecord idx, internal::DecodeIndex(v, what));

  Snapshot snap;
  snap.step = step;
  g = m.db->Get(ro, h, internal::CheckpointKey(internal::kMetadataTag, job_id, step), &snap.metadata);
  if (g.IsNotFound()) return DataLoss("checkpoint of " + what + " has no metadata record");
  FS_RETURN_IF_ERROR(FromRocks(g, "reading checkpoint of " + what));
  if (int64_t(snap.metadata.size()) != idx.metadata_bytes ||
      internal::Crc32c(snap.metadata.data(), snap.metadata.size()) != idx.metadata_crc) {
    return DataLoss("checkpoint of " + what + ": metadata fails its checksum");
  }

  ro.fill_cache = false;  // a restore reads each block once
  // Every value carries its own CRC32C, checked below; RocksDB's block
  // checksum would be a second pass over the same bytes.
  ro.verify_checksums = false;
  auto label = [&](const std::string& name) { return what + " variable '" + name + "'"; };
  // Tensor records, in name order. Version 2 (chunked) ones get their
  // tensor allocated here and filled from the chunk records below; version
  // 1 ones (stores of format version 1) hold their data inline.
  struct Chunked {
    size_t slot;  // in snap.tensors
    internal::ChunkedTensorHeader header;
    uint64_t received = 0;
  };
  std::vector<Chunked> chunked;
  std::vector<int64_t> by_ordinal;  // ordinal -> index into `chunked`, -1 if none
  int64_t bytes = 0;
  snap.tensors.reserve(size_t(idx.num_tensors));
  FS_RETURN_IF_ERROR(m.Scan(h, internal::CheckpointKey(internal::kTensorTag, job_id, step),
                            internal::CheckpointKey(internal::kTensorTag, job_id, step + 1), ro,
                            [&](const rocksdb::Slice& k, const rocksdb::Slice& val) -> Status {
    const size_t prefix = 1 + job_id.size() + 1 + 8;
    std::string name(k.data() + prefix, k.size() - prefix);
    std::string_view rec(val.data(), val.size());
    if (internal::TensorRecordVersion(rec) == internal::kChunkedTensorRecordVersion) {
      FS_ASSIGN_OR_RETURN(internal::ChunkedTensorHeader hd,
                          internal::DecodeChunkedTensorHeader(rec, label(name)));
      if (hd.ordinal >= uint64_t(idx.num_tensors)) {
        return DataLoss("corrupt tensor record for " + label(name) + ": ordinal " + std::to_string(hd.ordinal) + " out of range");
      }
      if (by_ordinal.empty()) by_ordinal.assign(size_t(idx.num_tensors), -1);
      if (by_ordinal[hd.ordinal] >= 0) {
        return DataLoss("corrupt tensor record for " + label(name) + ": ordinal " + std::to_string(hd.ordinal) + " used twice");
      }
      FS_ASSIGN_OR_RETURN(Tensor t, Tensor::Allocate(RestoreAllocator(), hd.dtype, hd.shape));
      by_ordinal[hd.ordinal] = int64_t(chunked.size());
      chunked.push_back({snap.tensors.size(), std::move(hd), 0});
      snap.tensors.push_back({std::move(name), std::move(t)});
    } else {
      FS_ASSIGN_OR_RETURN(Tensor t, internal::DecodeTensorRecord(rec, label(name)));
      bytes += int64_t(t.TotalBytes());
      snap.tensors.push_back({std::move(name), std::move(t)});
    }
    return Status();
  }));
  if (int64_t(snap.tensors.size()) != idx.num_tensors) {
    return DataLoss("checkpoint of " + what + " is incomplete: its index records " +
                    std::to_string(idx.num_tensors) + " tensors, the store holds " +
                    std::to_string(snap.tensors.size()));
  }
  if (!chunked.empty()) {
    // The chunks, in key order (ordinal, index), as views of pinned
    // values (blocks of mapped table files, or the memtable's arena, stay
    // valid while `it` lives); then each is copied straight into its tensor
    // and checksummed there in cache-sized pieces, so the bytes cross
    // memory once. Big restores split the chunks with a helper thread.
    const std::string chunks_begin = internal::CheckpointKey(internal::kChunkTag, job_id, step);
    const std::string chunks_end = internal::CheckpointKey(internal::kChunkTag, job_id, step + 1);
    rocksdb::ReadOptions cro = ro;
    cro.pin_data = true;
    rocksdb::Slice upper(chunks_end);
    cro.iterate_upper_bound = &upper;
    std::unique_ptr<rocksdb::Iterator> it(m.db->NewIterator(cro, h));
    struct Piece {
      Chunked* c;
      uint32_t index;
      rocksdb::Slice data;
    };
    std::vector<Piece> pieces;
    size_t total = 0;
    for (it->Seek(chunks_begin); it->Valid(); it->Next()) {
      const rocksdb::Slice k = it->key(), val = it->value();
      if (k.size() != chunks_begin.size() + 8) return DataLoss("malformed chunk key in checkpoint of " + what);
      const auto* kp = reinterpret_cast<const uint8_t*>(k.data() + chunks_begin.size());
      const uint32_t ordinal = uint32_t(kp[0]) << 24 | uint32_t(kp[1]) << 16 | uint32_t(kp[2]) << 8 | kp[3];
      const uint32_t index = uint32_t(kp[4]) << 24 | uint32_t(kp[5]) << 16 | uint32_t(kp[6]) << 8 | kp[7];
      if (ordinal >= by_ordinal.size() || by_ordinal[ordinal] < 0) {
        return DataLoss("checkpoint of " + what + " has a chunk of unknown tensor " + std::to_string(ordinal));
      }
      Chunked& c = chunked[size_t(by_ordinal[ordinal])];
      const uint64_t off = uint64_t(index) * c.header.chunk_bytes;
      if (index >= c.header.chunk_crcs.size() ||
          val.size() != std::min<uint64_t>(c.header.chunk_bytes, c.header.bytes - off)) {
        return DataLoss("corrupt tensor record for " + label(snap.tensors[c.slot].name) + ": bad chunk " +
                        std::to_string(index));
      }
      ++c.received;  // keys are unique, so received == chunks means every chunk
      pieces.push_back({&c, index, val});
      total += val.size();
    }
    FS_RETURN_IF_ERROR(FromRocks(it->status(), "reading checkpoint of " + what));
    std::atomic<size_t> next{0};
    std::atomic<int64_t> bad{-1};  // a piece that failed its checksum
    auto work = [&] {
      for (size_t i; (i = next.fetch_add(1)) < pieces.size() && bad.load() < 0;) {
        const Piece& pc = pieces[i];
        char* dst = static_cast<char*>(snap.tensors[pc.c->slot].value.raw_data()) +
                    uint64_t(pc.index) * pc.c->header.chunk_bytes;
        uint32_t crc = 0;
        constexpr size_t kPiece = 256 << 10;
        for (size_t p = 0; p < pc.data.size(); p += kPiece) {
          const size_t n = std::min(kPiece, pc.data.size() - p);
          std::memcpy(dst + p, pc.data.data() + p, n);
          crc = internal::Crc32cExtend(crc, dst + p, n);
        }
        if (crc != pc.c->header.chunk_crcs[pc.index]) bad.store(int64_t(i));
      }
    };
    if (total >= (32u << 20) && std::thread::hardware_concurrency() >= 2) {
      std::thread helper(work);
      work();
      helper.join();
    } else {
      work();
    }
    if (bad.load() >= 0) {
      const Piece& pc = pieces[size_t(bad.load())];
      const uint32_t want = pc.c->header.chunk_crcs[pc.index];
      return internal::ChecksumMismatch(
          label(snap.tensors[pc.c->slot].name) + " chunk " + std::to_string(pc.index), want,
          internal::Crc32c(pc.data.data(), pc.data.size()));
    }
    for (const Chunked& c : chunked) {
      if (c.received != c.header.chunk_crcs.size()) {
        return DataLoss("checkpoint of " + what + " is incomplete: " + label(snap.tensors[c.slot].name) +
                        " has " + std::to_string(c.received) + " of its " +
                        std::to_string(c.header.chunk_crcs.size()) + " chunks");
      }
      bytes += int64_t(c.header.bytes);
    }
  }
  if (bytes != idx.bytes) {
    return DataLoss("checkpoint of " + what + " is incomplete: its index records " +
                    std::to_string(idx.bytes) + " bytes, the store holds " + std::to_string(bytes));
  }
  return snap;
}

StatusOr<std::vector<CheckpointInfo>> Store::ListCheckpoints(const std::string& job_id) {
  FS_ASSIGN_OR_RETURN(auto db_use, impl_->Use(/*recover=*/false));
  FS_RETURN_IF_ERROR(CheckId(job_id, "job id"));
  std::vector<CheckpointInfo> out;
  const std::string begin = internal::JobPrefix(internal::kIndexTag, job_id);
  std::string end = begin;
  end.back() = '\1';
  FS_RETURN_IF_ERROR(impl_->Scan(impl_->cf[kCheckpointsCf], begin, end, rocksdb::ReadOptions(),
                                 [&](const rocksdb::Slice& k, const rocksdb::Slice& v) -> Status {
    if (k.size() != begin.size() + 8) return DataLoss("malformed checkpoint index key of job '" + job_id + "'");
    int64_t step = int64_t(internal::DecodeBigEndian64(k.data() + begin.size()));
    FS_ASSIGN_OR_RETURN(internal::IndexRecord r,
                        internal::DecodeIndex(std::string_view(v.data(), v.size()), Describe(job_id, step)));
    out.push_back({job_id, step, r.unix_micros, r.bytes, r.num_tensors});
    return Status();
  }));
  return out;
}

StatusOr<Snapshot> Store::ReadLatestCheckpoint(const std::string& job_id) {
  // A concurrent RetainLatest may delete the listed one before it is read:
  // list again then.
  for (int attempt = 0;; ++attempt) {
    FS_ASSIGN_OR_RETURN(std::vector<CheckpointInfo> list, ListCheckpoints(job_id));
    if (list.empty()) return NotFound("job '" + job_id + "' has no checkpoint");
    StatusOr<Snapshot> s = ReadCheckpoint(job_id, list.back().step);
    if (s.ok() || s.status().code() != Code::kNotFound || attempt == 2) return s;
  }
}

Status Store::DeleteCheckpoint(const std::string& job_id, int64_t step) {
  FS_ASSIGN_OR_RETURN(auto db_use, impl_->Use(/*recover=*/true));
  FS_RETURN_IF_ERROR(CheckId(job_id, "job id"));
  Impl& m = *impl_;
  auto job_lock = m.JobMutex(job_id);
  std::lock_guard<std::mutex> l(*job_lock);
  rocksdb::ColumnFamilyHandle* h = m.cf[kCheckpointsCf];
  const std::string index_key = internal::CheckpointKey(internal::kIndexTag, job_id, step);
  std::string v;
  rocksdb::Status g = m.db->Get(rocksdb::ReadOptions(), h, index_key, &v);
  if (g.IsNotFound()) return NotFound("job '" + job_id + "' has no checkpoint at step " + std::to_string(step));
  FS_RETURN_IF_ERROR(FromRocks(g, "deleting checkpoint of " + Describe(job_id, step)));
  rocksdb::WriteBatch b;
  b.Delete(h, index_key).PermitUncheckedError();
  b.Delete(h, internal::CheckpointKey(internal::kMetadataTag, job_id, step)).PermitUncheckedError();
  b.DeleteRange(h, internal::CheckpointKey(internal::kTensorTag, job_id, step),
                internal::CheckpointKey(internal::kTensorTag, job_id, step + 1))
      .PermitUncheckedError();
  b.DeleteRange(h, internal::CheckpointKey(internal::kChunkTag, job_id, step),
                internal::CheckpointKey(internal::kChunkTag, job_id, step + 1))
      .PermitUncheckedError();
  return m.Write(&b, true, "deleting checkpoint of " + Describe(job_id, step));
}

Status Store::RetainLatest(const std::string& job_id, int keep) {
  if (keep < 1) return InvalidArgument("checkpoint.keep must be >= 1, got " + std::to_string(keep));
  FS_ASSIGN_OR_RETURN(std::vector<CheckpointInfo> list, ListCheckpoints(job_id));
  for (size_t i = 0; i + size_t(keep) < list.size(); ++i) {
    Status s = DeleteCheckpoint(job_id, list[i].step);
    if (!s.ok() && s.code() != Code::kNotFound) return s;
  }
  return Status();
}

// --- variables --------------------------------------------------------------------

Status Store::PutVariables(const std::string& scope, const std::vector<NamedTensor>& tensors) {
  FS_ASSIGN_OR_RETURN(auto db_use, impl_->Use(/*recover=*/true));
  FS_RETURN_IF_ERROR(CheckId(scope, "variable scope"));
  const std::string what = "variables of '" + scope + "'";
  FS_RETURN_IF_ERROR(CheckTensors(tensors, what));
  Impl& m = *impl_;
  size_t reserve = 64;
  for (const NamedTensor& t : tensors) reserve += t.value.TotalBytes() + t.name.size() + 128;
  rocksdb::WriteBatch b(reserve);
  rocksdb::ColumnFamilyHandle* h = m.cf[kVariablesCf];
  b.DeleteRange(h, internal::VariableKey(scope, ""), scope + '\1').PermitUncheckedError();
  int64_t bytes = 0;
  for (const NamedTensor& t : tensors) m.AddTensor(&b, h, internal::VariableKey(scope, t.name), t.value, &bytes);
  return m.Write(&b, true, "writing " + what);
}

StatusOr<std::vector<NamedTensor>> Store::GetVariables(const std::string& scope) {
  FS_ASSIGN_OR_RETURN(auto db_use, impl_->Use(/*recover=*/false));
  FS_RETURN_IF_ERROR(CheckId(scope, "variable scope"));
  std::vector<NamedTensor> out;
  const std::string begin = internal::VariableKey(scope, "");
  rocksdb::ReadOptions ro;
  ro.fill_cache = false;
  FS_RETURN_IF_ERROR(impl_->Scan(impl_->cf[kVariablesCf], begin, scope + '\1', ro,
                                 [&](const rocksdb::Slice& k, const rocksdb::Slice& v) -> Status {
    std::string name(k.data() + begin.size(), k.size() - begin.size());
    FS_ASSIGN_OR_RETURN(Tensor t, internal::DecodeTensorRecord(std::string_view(v.data(), v.size()),
                                                               "scope '" + scope + "' variable '" + name + "'"));
    out.push_back({std::move(name), std::move(t)});
    return Status();
  }));
  if (out.empty()) return NotFound("no variables stored under '" + scope + "'");
  return out;
}

StatusOr<Tensor> Store::GetVariable(const std::string& scope, const std::string& name) {
  FS_ASSIGN_OR_RETURN(auto db_use, impl_->Use(/*recover=*/false));
  FS_RETURN_IF_ERROR(CheckId(scope, "variable scope"));
  rocksdb::PinnableSlice v;
  rocksdb::Status g = impl_->db->Get(rocksdb::ReadOptions(), impl_->cf[kVariablesCf],
                                     internal::VariableKey(scope, name), &v);
  if (g.IsNotFound()) return NotFound("no variable '" + name + "' stored under '" + scope + "'");
  FS_RETURN_IF_ERROR(FromRocks(g, "reading variable '" + name + "' of '" + scope + "'"));
  return internal::DecodeTensorRecord(std::string_view(v.data(), v.size()),
                                      "scope '" + scope + "' variable '" + name + "'");
}

Status Store::DeleteVariables(const std::string& scope) {
  FS_ASSIGN_OR_RETURN(auto db_use, impl_->Use(/*recover=*/true));
  FS_RETURN_IF_ERROR(CheckId(scope, "variable scope"));
  rocksdb::WriteBatch b;
  b.DeleteRange(impl_->cf[kVariablesCf], internal::VariableKey(scope, ""), scope + '\1')
      .PermitUncheckedError();
  return impl_->Write(&b, true, "deleting variables of '" + scope + "'");
}

Status Store::DeleteJobData(const std::string& job_id) {
  FS_ASSIGN_OR_RETURN(auto db_use, impl_->Use(/*recover=*/true));
  FS_RETURN_IF_ERROR(CheckId(job_id, "job id"));
  Impl& m = *impl_;
  auto job_lock = m.JobMutex(job_id);
  std::lock_guard<std::mutex> l(*job_lock);
  rocksdb::WriteBatch b;
  for (char tag : {internal::kIndexTag, internal::kMetadataTag, internal::kTensorTag, internal::kChunkTag}) {
    std::string begin = internal::JobPrefix(tag, job_id);
    std::string end = begin;
    end.back() = '\1';
    b.DeleteRange(m.cf[kCheckpointsCf], begin, end).PermitUncheckedError();
  }
  b.DeleteRange(m.cf[kVariablesCf], internal::VariableKey(job_id, ""), job_id + '\1')
      .PermitUncheckedError();
  b.Delete(m.cf[kJobsCf], job_id).PermitUncheckedError();
  return m.Write(&b, true, "deleting the data of job '" + job_id + "'");
}

// --- records ----------------------------------------------------------------------

Status Store::PutRecord(Kind kind, const std::string& key, const std::string& value, bool sync) {
  FS_ASSIGN_OR_RETURN(auto db_use, impl_->Use(/*recover=*/true));
  if (key.empty()) return InvalidArgument("record key must not be empty");
  if (kind == Kind::kMeta && key.starts_with("flowstate.")) {
    return InvalidArgument("meta key '" + key + "' is reserved");
  }
  rocksdb::WriteBatch b;
  b.Put(impl_->KindCf(kind), key, value).PermitUncheckedError();
  return impl_->Write(&b, sync, "writing record '" + key + "'");
}

StatusOr<std::string> Store::GetRecord(Kind kind, const std::string& key) {
  FS_ASSIGN_OR_RETURN(auto db_use, impl_->Use(/*recover=*/false));
  std::string v;
  rocksdb::Status g = impl_->db->Get(rocksdb::ReadOptions(), impl_->KindCf(kind), key, &v);
  if (g.IsNotFound()) return NotFound("no record '" + key + "'");
  FS_RETURN_IF_ERROR(FromRocks(g, "reading record '" + key + "'"));
  return v;
}

StatusOr<std::vector<std::pair<std::string, std::string>>> Store::ListRecords(Kind kind) {
  FS_ASSIGN_OR_RETURN(auto db_use, impl_->Use(/*recover=*/false));
  std::vector<std::pair<std::string, std::string>> out;
  std::unique_ptr<rocksdb::Iterator> it(impl_->db->NewIterator(rocksdb::ReadOptions(), impl_->KindCf(kind)));
  for (it->SeekToFirst(); it->Valid(); it->Next()) {
    if (kind == Kind::kMeta && it->key().starts_with("flowstate.")) continue;
    out.emplace_back(it->key().ToString(), it->value().ToString());
  }
  FS_RETURN_IF_ERROR(FromRocks(it->status(), "listing records"));
  return out;
}

Status Store::DeleteRecord(Kind kind, const std::string& key) {
  FS_ASSIGN_OR_RETURN(auto db_use, impl_->Use(/*recover=*/true));
  if (kind == Kind::kMeta && key.starts_with("flowstate.")) {
    return InvalidArgument("meta key '" + key + "' is reserved");
  }
  rocksdb::WriteBatch b;
  b.Delete(impl_->KindCf(kind), key).PermitUncheckedError();
  return impl_->Write(&b, true, "deleting record '" + key + "'");
}

StatusOr<int64_t> Store::DiskBytes() {
  std::error_code ec;
  int64_t total = 0;
  for (const auto& e : std::filesystem::directory_iterator(impl_->path, ec)) {
    if (e.is_regular_file(ec)) total += int64_t(e.file_size(ec));
  }
  if (ec) return Internal("sizing " + impl_->path + ": " + ec.message());
  return total;
}

Status Store::Flush() {
  FS_ASSIGN_OR_RETURN(auto db_use, impl_->Use(/*recover=*/true));
  rocksdb::FlushOptions fo;
  fo.wait = true;
  std::vector<rocksdb::ColumnFamilyHandle*> hs(impl_->cf, impl_->cf + kNumCfs);
  return FromRocks(impl_->db->Flush(fo, hs), "flushing the store");
}

}  // namespace flowstate::checkpoints

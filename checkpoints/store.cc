// The RocksDB-backed Store. Layouts: checkpoints/FORMAT.md and format.h.
#include "checkpoints/store.h"

#include <rocksdb/db.h>
#include <rocksdb/env.h>
#include <rocksdb/file_system.h>
#include <rocksdb/options.h>
#include <rocksdb/slice.h>
#include <rocksdb/table.h>
#include <rocksdb/write_batch.h>

#include <algorithm>
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
  o.table_factory.reset(rocksdb::NewBlockBasedTableFactory(t));
  return o;
}

rocksdb::ColumnFamilyOptions CfOptions(const std::string& name) {
  if (name == "checkpoints" || name == "variables") return TensorCfOptions();
  return rocksdb::ColumnFamilyOptions();
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
  if (g.IsNotFound()) {
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

  size_t reserve = 64 + snap.metadata.size();
  for (const NamedTensor& t : snap.tensors) reserve += t.value.TotalBytes() + t.name.size() + 128;
  rocksdb::WriteBatch batch(reserve);
  rocksdb::ColumnFamilyHandle* h = m.cf[kCheckpointsCf];
  const std::string index_key = internal::CheckpointKey(internal::kIndexTag, job_id, snap.step);
  std::string old;
  rocksdb::Status g = m.db->Get(rocksdb::ReadOptions(), h, index_key, &old);
  if (g.ok()) {  // replacing a checkpoint of the same step
    batch.DeleteRange(h, internal::CheckpointKey(internal::kTensorTag, job_id, snap.step),
                      internal::CheckpointKey(internal::kTensorTag, job_id, snap.step + 1))
        .PermitUncheckedError();
  } else if (!g.IsNotFound()) {
    return FromRocks(g, what);
  }
  int64_t bytes = 0;
  const std::string tensor_prefix = internal::CheckpointKey(internal::kTensorTag, job_id, snap.step);
  for (const NamedTensor& t : snap.tensors) {
    m.AddTensor(&batch, h, tensor_prefix + t.name, t.value, &bytes);
  }
  internal::IndexRecord idx;
  idx.step = snap.step;
  idx.unix_micros = NowMicros();
  idx.bytes = bytes;
  idx.num_tensors = int64_t(snap.tensors.size());
  idx.metadata_crc = internal::Crc32c(snap.metadata.data(), snap.metadata.size());
  idx.metadata_bytes = int64_t(snap.metadata.size());
  batch.Put(h, internal::CheckpointKey(internal::kMetadataTag, job_id, snap.step), snap.metadata)
      .PermitUncheckedError();
  batch.Put(h, index_key, internal::EncodeIndex(idx)).PermitUncheckedError();
  return m.Write(&batch, /*sync=*/true, "writing " + what);
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

  const std::string begin = internal::CheckpointKey(internal::kTensorTag, job_id, step);
  const std::string end = internal::CheckpointKey(internal::kTensorTag, job_id, step + 1);
  ro.fill_cache = false;  // a restore reads each block once
  // Every value carries its own CRC32C, checked below; RocksDB's block
  // checksum would be a second pass over the same bytes.
  ro.verify_checksums = false;
  ro.pin_data = true;  // values stay valid (mapped table files) while `it` lives
  rocksdb::Slice upper(end);
  ro.iterate_upper_bound = &upper;
  std::unique_ptr<rocksdb::Iterator> it(m.db->NewIterator(ro, h));
  struct Pending {
    std::string name;
    std::string_view record;
  };
  std::vector<Pending> pending;  // views of pinned records, decoded below
  size_t pending_bytes = 0;
  int64_t bytes = 0;
  snap.tensors.reserve(size_t(idx.num_tensors));
  auto label = [&](const std::string& name) { return what + " variable '" + name + "'"; };
  for (it->Seek(begin); it->Valid(); it->Next()) {
    std::string name(it->key().data() + begin.size(), it->key().size() - begin.size());
    std::string_view rec(it->value().data(), it->value().size());
    // With pin_data the blocks an iterator loaded stay pinned while it
    // lives; values (plain Puts, no merges or blob indirection in this
    // family) lie inside those blocks or in the memtable's arena, so the
    // views stay valid until `it` is destroyed.
    pending_bytes += rec.size();
    pending.push_back({std::move(name), rec});
  }
  FS_RETURN_IF_ERROR(FromRocks(it->status(), "reading checkpoint of " + what));
  if (pending_bytes < (32u << 20)) {
    for (Pending& p : pending) {
      FS_ASSIGN_OR_RETURN(Tensor t, internal::DecodeTensorRecord(p.record, label(p.name)));
      bytes += int64_t(t.TotalBytes());
      snap.tensors.push_back({std::move(p.name), std::move(t)});
    }
  } else {
    // Big checkpoints: a helper thread checksums the records while this one
    // copies them into their tensors, so a restore costs about one pass.
    std::vector<uint32_t> crcs(pending.size());
    std::thread crc_thread([&] {
      for (size_t i = 0; i < pending.size(); ++i) crcs[i] = internal::TensorRecordCrc(pending[i].record);
    });
    struct Join {
      std::thread* t;
      ~Join() {
        if (t != nullptr) t->join();
      }
    } join{&crc_thread};
    std::vector<Tensor> out(pending.size());
    std::vector<uint32_t> want(pending.size());
    for (size_t i = 0; i < pending.size(); ++i) {
      FS_ASSIGN_OR_RETURN(internal::TensorRecordHeader hd,
                          internal::ParseTensorHeader(pending[i].record, label(pending[i].name)));
      FS_ASSIGN_OR_RETURN(out[i], Tensor::Allocate(HostAllocator(), hd.dtype, hd.shape));
      out[i].CopyFromBytes(pending[i].record.data() + hd.header_bytes,
                           pending[i].record.size() - hd.header_bytes);
      want[i] = hd.crc;
    }
    crc_thread.join();
    join.t = nullptr;
    for (size_t i = 0; i < pending.size(); ++i) {
      if (crcs[i] != want[i]) return internal::ChecksumMismatch(label(pending[i].name), want[i], crcs[i]);
      bytes += int64_t(out[i].TotalBytes());
      snap.tensors.push_back({std::move(pending[i].name), std::move(out[i])});
    }
  }
  std::sort(snap.tensors.begin(), snap.tensors.end(),
            [](const NamedTensor& a, const NamedTensor& b) { return a.name < b.name; });
  if (int64_t(snap.tensors.size()) != idx.num_tensors || bytes != idx.bytes) {
    return DataLoss("checkpoint of " + what + " is incomplete: its index records " +
                    std::to_string(idx.num_tensors) + " tensors of " + std::to_string(idx.bytes) +
                    " bytes, the store holds " + std::to_string(snap.tensors.size()) +
                    " of " + std::to_string(bytes));
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
  for (char tag : {internal::kIndexTag, internal::kMetadataTag, internal::kTensorTag}) {
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

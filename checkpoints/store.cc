// The RocksDB-backed Store. Layouts: checkpoints/FORMAT.md and format.h.
#include "checkpoints/store.h"

#include <sys/mman.h>

#include <algorithm>
#include <cctype>
#include <cstring>
#include <filesystem>

#include "checkpoints/store_internal.h"

namespace flowstate::checkpoints {


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
  impl->env = rocksdb::NewCompositeEnv(std::make_shared<StoreFileSystem>(
      rocksdb::FileSystem::Default(), options.fail_writes, options.disk_full));
  impl->info_log = std::make_shared<StoreInfoLog>(impl->path);
  impl->ingest_dir = (std::filesystem::path(dir) / "ingest").string();
  Status opened = impl->OpenDbRestoringIngestions(exists);
  if (!opened.ok()) {
    // A full disk: an existing store is served read-only until there is room.
    if (!exists || (opened.code() != Code::kResourceExhausted &&
                    !(opened.code() == Code::kUnavailable && impl->DiskNearlyFull()))) {
      return opened;
    }
    std::lock_guard<std::mutex> l(impl->mu);
    (void)impl->FallBackToReadOnly(opened);
    if (impl->db == nullptr) return opened;
  }
  // Table files of checkpoints that a crash caught before their ingestion
  // were never part of the store, and those of failed ingestions the open
  // did not need: remove them. (On a full disk the directory may not be
  // creatable; big checkpoints then fail until it is.)
  std::filesystem::remove_all(impl->ingest_dir, ec);
  std::filesystem::create_directories(impl->ingest_dir, ec);
  if (ec && ec != std::errc::no_space_on_device) {
    return PermissionDenied("cannot create directory " + impl->ingest_dir + ": " + ec.message());
  }
  return std::unique_ptr<Store>(new Store(std::move(impl)));
}

Status Store::WriteStatus() {
  std::lock_guard<std::mutex> l(impl_->mu);
  if (!impl_->needs_recovery) return Status();
  return impl_->write_error.ok() ? Unavailable("a write of the store " + impl_->path +
                                               " failed; the next write recovers first")
                                 : impl_->write_error;
}

void Store::Impl::KeepFailedIngestion(const std::string& file) {
  std::error_code ec;
  std::filesystem::rename(file, ingest_dir + "/failed-" + std::to_string(++ingest_seq) + ".sst", ec);
}

Status Store::Impl::OpenDbRestoringIngestions(bool exists) {
  Status s = OpenDb(exists);
  std::vector<std::filesystem::path> kept;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(ingest_dir, ec)) {
    if (e.path().filename().string().rfind("failed-", 0) == 0) kept.push_back(e.path());
  }
  // RocksDB names the missing file "<number>.ldb" (its legacy name, tried
  // after ".sst"): "... No such file or directory: While open a file for
  // random read: <store>/000076.ldb ...".
  for (size_t attempt = 0; !s.ok() && attempt < kept.size(); ++attempt) {
    const std::string& m = s.message();
    const size_t at = m.find("No such file or directory");
    if (at == std::string::npos) return s;
    size_t end = m.find(".ldb", at), alt = m.find(".sst", at);
    end = std::min(end, alt);
    if (end == std::string::npos) return s;
    size_t begin = end;
    while (begin > 0 && std::isdigit(static_cast<unsigned char>(m[begin - 1]))) --begin;
    if (begin == end) return s;
    const std::string name = path + "/" + m.substr(begin, end - begin) + ".sst";
    // The kept file whose size the MANIFEST records opens; try each.
    Status next = s;
    for (const auto& k : kept) {
      std::filesystem::create_hard_link(k, name, ec);
      if (ec) continue;
      next = OpenDb(exists);
      if (next.ok() || next.message().find(name.substr(path.size() + 1)) == std::string::npos) break;
      std::filesystem::remove(name, ec);  // not this one
    }
    s = next;
  }
  return s;
}

Status Store::Impl::OpenDb(bool exists) {
  rocksdb::DBOptions dbo = BaseDbOptions();
  dbo.max_total_wal_size = uint64_t(std::max<int64_t>(options.max_wal_bytes, 1 << 20));
  // One bound on the memtables of every column family together (each
  // would otherwise grow to its own 64 MiB before a flush): the server's
  // memory stays flat however many jobs have written records.
  dbo.db_write_buffer_size = size_t(std::max<int64_t>(options.max_memtable_bytes, 1 << 20));
  dbo.create_if_missing = options.create_if_missing;
  dbo.create_missing_column_families = false;
  dbo.max_background_jobs = 2;
  dbo.keep_log_file_num = 4;
  dbo.max_manifest_file_size = 64 << 20;
  // Table files are mapped: a restore copies each tensor once, from the
  // page cache into the tensor, instead of pread()ing it into a block buffer
  // first.
  dbo.allow_mmap_reads = true;

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
    Status written = m.Write(&batch, /*sync=*/true, "writing " + what);
    m.CheckpointWritten(job_id, step, replacing, written);
    return written;
  }

  // Big checkpoints: one table file, written once from the tensors' buffers
  // (no WAL, memtable or flush copies), synced, and ingested atomically —
  // one MANIFEST record makes all of it visible, or none of it.
  const std::string file = m.ingest_dir + "/" + std::to_string(++m.ingest_seq) + ".sst";
  rocksdb::Options o(m.BaseDbOptions(), CfOptions("checkpoints"));
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
    m.WriteFailed(rs(st));
    m.KeepFailedIngestion(file);  // the Unlink then finds nothing to remove
  }
  m.CheckpointWritten(job_id, step, replacing, rs(st));
  return rs(st);
}

StatusOr<Snapshot> Store::ReadCheckpoint(const std::string& job_id, int64_t step) {
  FS_ASSIGN_OR_RETURN(auto db_use, impl_->Use(/*recover=*/false));
  FS_RETURN_IF_ERROR(CheckId(job_id, "job id"));
  Impl& m = *impl_;
  rocksdb::ColumnFamilyHandle* h = m.cf[kCheckpointsCf];
  const std::string what = Describe(job_id, step);
  if (m.Unsettled(job_id, step)) {
    return NotFound("job '" + job_id + "' has no checkpoint at step " + std::to_string(step) +
                    " (its write failed)");
  }
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

}  // namespace flowstate::checkpoints

// Store: the server's durable state — one RocksDB database under the data
// directory with a column family per kind of record (graphs, jobs,
// variables, checkpoints, meta). Key and record layouts are documented in
// checkpoints/FORMAT.md.
//
// A checkpoint is a Snapshot of one job (every variable, including optimizer
// slots and the global step, plus opaque caller metadata such as the input
// pipeline position and kernel RNG states) written in one atomic, synced
// RocksDB update together with its index record — a WriteBatch with
// sync=true, or for big checkpoints one ingested table file: after a crash it
// is there whole or not at all. Every tensor record carries dtype, shape and a CRC32C
// checksum; a record that fails it is DATA_LOSS naming job, step and
// variable and is never returned as numbers.
//
// Ownership and threads: one Store per data directory per process (RocksDB's
// LOCK file refuses a second opener, in this or another process). All
// methods are thread-safe; writes of different jobs may run concurrently.
// The Store owns the database; destroying it closes the database. No RocksDB
// type appears in this header.
#ifndef FLOWSTATE_CHECKPOINTS_STORE_H_
#define FLOWSTATE_CHECKPOINTS_STORE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "graph/status.h"
#include "graph/tensor.h"
#include "state/tensor_store.h"

namespace flowstate::checkpoints {

// The on-disk format this binary writes (meta key "flowstate.format_version").
// Opening a store with a newer version is FAILED_PRECONDITION.
inline constexpr int64_t kFormatVersion = 2;

struct NamedTensor {
  std::string name;  // variable name; any bytes but must be non-empty
  Tensor value;      // host tensor, any dtype and shape (scalar, empty)
};

struct Snapshot {
  int64_t step = 0;                  // global step the snapshot was taken after (>= 0)
  std::vector<NamedTensor> tensors;  // every variable incl. optimizer slots and global step
  std::string metadata;              // opaque bytes owned by the caller (pipeline position,
                                     // kernel RNG states, ...), stored with the checkpoint
};

// One checkpoint's index record.
struct CheckpointInfo {
  std::string job_id;
  int64_t step = 0;
  int64_t unix_micros = 0;  // when it was written
  int64_t bytes = 0;        // tensor data bytes (without headers and metadata)
  int64_t num_tensors = 0;
};

struct StoreOptions {
  bool create_if_missing = true;
  // Test hook (disk errors): while set and returning true, every write of a
  // database file (WAL, SST, blob, MANIFEST) fails with an I/O error, through
  // a RocksDB FileSystem wrapper. Writes fail cleanly; once it returns false
  // again the store recovers by itself on the next write.
  std::function<bool()> fail_writes;
  // Test hook (a full disk): the same, with the error a full disk gives
  // (ENOSPC, "No space left on device"). The store reports it as
  // RESOURCE_EXHAUSTED and resumes writing once the hook returns false.
  std::function<bool()> disk_full;
  // The write-ahead log's total size before RocksDB flushes the memtables
  // whose records it holds, so that deleted checkpoints leave the log: it
  // bounds the log on disk (without it, small checkpoints stayed in the log
  // until 256 MiB of them had been written). The log is never preallocated.
  int64_t max_wal_bytes = int64_t(64) << 20;
  // The memtables of all column families together, before RocksDB flushes
  // the largest (the records and small checkpoints written since the last
  // flush are held in memory up to this much).
  int64_t max_memtable_bytes = int64_t(32) << 20;
  // After a write error the next write first recovers (it reopens the
  // database). A reopen that fails leaves the store read-only; when it
  // failed for want of space, the next attempt comes no sooner than this
  // many milliseconds later (writes before then fail at once with the same
  // RESOURCE_EXHAUSTED), other errors are retried on the next write.
  int64_t reopen_interval_ms = 1000;
  // Checkpoints with at least this many tensor bytes are written as one
  // table file ingested atomically (no WAL, memtable and flush copies);
  // smaller ones as one synced WriteBatch. Both are whole or absent after a
  // crash (checkpoints/FORMAT.md). Below 32 MiB the batch is the better
  // neighbour to training: each ingested file is compacted in the
  // background soon, while batches of small checkpoints reach a flush only
  // every 256 MiB (BENCHMARKS.md, "Checkpoints"). Tests set 0 to exercise
  // ingestion.
  int64_t ingest_min_bytes = int64_t(32) << 20;
};

class Store {
 public:
  // The small-record column families the server uses directly.
  enum class Kind { kGraphs, kJobs, kMeta };

  // Opens or creates the database in <dir>/store (creating <dir>).
  // FAILED_PRECONDITION "data directory <dir> is in use by another flowstate
  // process (lock <dir>/store/LOCK ...)" when RocksDB's lock is held;
  // FAILED_PRECONDITION naming both versions when the stored format version
  // is newer than kFormatVersion; NOT_FOUND when absent and
  // !create_if_missing. On a full disk an existing store opens read-only
  // (WriteStatus() says why; writes fail with RESOURCE_EXHAUSTED until there
  // is room again, then the store reopens for writing by itself); a new one
  // is RESOURCE_EXHAUSTED.
  static StatusOr<std::unique_ptr<Store>> Open(const std::string& dir,
                                               const StoreOptions& options = {});
  ~Store();
  Store(const Store&) = delete;
  Store& operator=(const Store&) = delete;

  const std::string& dir() const;
  // OK while writes work; otherwise the error the last write (or the
  // recovery after it) got, e.g. RESOURCE_EXHAUSTED when the disk is full.
  // The next write tries to recover first.
  Status WriteStatus();

  // --- checkpoints column family ---------------------------------------
  // Writes the snapshot and its index record in one atomic update that is
  // durable when this returns (a synced WriteBatch, or an ingested table file
  // at or above StoreOptions::ingest_min_bytes); replaces an existing
  // checkpoint of the same step. Tensors are stored in 1 MiB chunks with a
  // CRC32C each. INVALID_ARGUMENT for an empty or
  // malformed job id (no '\0'), negative step, empty or duplicate tensor
  // name, uninitialized tensor; the I/O error when the write fails
  // (RESOURCE_EXHAUSTED naming the full disk, UNAVAILABLE/INTERNAL for other
  // errors), in which case nothing of it is visible.
  Status WriteCheckpoint(const std::string& job_id, const Snapshot& snapshot);
  // NOT_FOUND if absent; DATA_LOSS naming job, step and variable when a
  // record fails its checksum or the checkpoint is incomplete.
  StatusOr<Snapshot> ReadCheckpoint(const std::string& job_id, int64_t step);
  // The checkpoint of the highest step; NOT_FOUND if the job has none.
  StatusOr<Snapshot> ReadLatestCheckpoint(const std::string& job_id);
  // Index records of the job's checkpoints, ascending by step (empty if none).
  StatusOr<std::vector<CheckpointInfo>> ListCheckpoints(const std::string& job_id);
  // NOT_FOUND if absent.
  Status DeleteCheckpoint(const std::string& job_id, int64_t step);
  // Keeps the `keep` checkpoints of highest step, deletes the others
  // (INVALID_ARGUMENT if keep < 1).
  Status RetainLatest(const std::string& job_id, int keep);

  // --- variables column family -----------------------------------------
  // The latest committed values under a scope (a job id, or "save/<prefix>"
  // for the Save op): PutVariables replaces the scope whole, in one synced
  // batch. GetVariables returns them sorted by name (NOT_FOUND if none);
  // GetVariable one (NOT_FOUND naming it). Checksums as for checkpoints.
  Status PutVariables(const std::string& scope, const std::vector<NamedTensor>& tensors);
  StatusOr<std::vector<NamedTensor>> GetVariables(const std::string& scope);
  StatusOr<Tensor> GetVariable(const std::string& scope, const std::string& name);
  Status DeleteVariables(const std::string& scope);

  // Checkpoints, variables (scope job_id) and the kJobs record of a job.
  Status DeleteJobData(const std::string& job_id);

  // --- small records (graphs, jobs, meta) --------------------------------
  // Job specs and states, graphs (JSON text), anything small. Keys starting
  // with "flowstate." in kMeta are reserved (INVALID_ARGUMENT).
  Status PutRecord(Kind kind, const std::string& key, const std::string& value,
                   bool sync = true);
  StatusOr<std::string> GetRecord(Kind kind, const std::string& key);  // NOT_FOUND
  // Every record of the kind, ascending by key.
  StatusOr<std::vector<std::pair<std::string, std::string>>> ListRecords(Kind kind);
  Status DeleteRecord(Kind kind, const std::string& key);  // OK when absent

  // Approximate bytes the database occupies on disk (SST, blob and WAL files).
  StatusOr<int64_t> DiskBytes();
  // Flushes memtables to table files (tests, benchmarks, clean shutdown).
  Status Flush();

  struct Impl;

 private:
  explicit Store(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// A TensorStore (state/tensor_store.h) for the Save/Restore ops on `store`:
// prefix P lives in the variables column family under scope "save/P".
// The store must outlive nothing in particular: the TensorStore shares it.
std::shared_ptr<TensorStore> NewTensorStore(std::shared_ptr<Store> store);

// The portable single-file format ("FSCK" files, checkpoints/FORMAT.md):
// magic, version, the step, the metadata and every tensor by name with dtype,
// shape, bytes and checksum. ExportSnapshot writes to a temporary file,
// fsyncs and renames, so `path` is whole or absent. ImportSnapshot reads it
// back. The file comes from outside the store (a user, an upload), so
// whatever is wrong with its bytes is INVALID_ARGUMENT saying what: bad
// magic, a header or tensor 'X' failing its checksum, truncated at byte N,
// a corrupt shape, bytes after the trailer; FAILED_PRECONDITION for a newer
// version; NOT_FOUND/UNAVAILABLE when it cannot be opened or read. Messages
// name the file as `name` (e.g. "the uploaded checkpoint"), or as `path`
// when `name` is empty, so a server's scratch path never reaches a client.
Status ExportSnapshot(const Snapshot& snapshot, const std::string& path);
StatusOr<Snapshot> ImportSnapshot(const std::string& path, const std::string& name = "");

}  // namespace flowstate::checkpoints

#endif  // FLOWSTATE_CHECKPOINTS_STORE_H_

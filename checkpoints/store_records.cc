// The store's records, variables and listings (store.h): checkpoint lists,
// deletion and retention, variable scopes, job records, disk use. The
// checkpoint write and read paths are store.cc.
#include <algorithm>
#include <set>

#include "checkpoints/store_internal.h"

namespace flowstate::checkpoints {

StatusOr<std::vector<CheckpointInfo>> Store::ListCheckpoints(const std::string& job_id) {
  FS_ASSIGN_OR_RETURN(auto db_use, impl_->Use(/*recover=*/false));
  FS_RETURN_IF_ERROR(CheckId(job_id, "job id"));
  std::vector<CheckpointInfo> out;
  std::set<int64_t> unsettled;
  {
    std::lock_guard<std::mutex> l(impl_->mu);
    for (const auto& [job, step] : impl_->unsettled) {
      if (job == job_id) unsettled.insert(step);
    }
  }
  const std::string begin = internal::JobPrefix(internal::kIndexTag, job_id);
  std::string end = begin;
  end.back() = '\1';
  FS_RETURN_IF_ERROR(impl_->Scan(impl_->cf[kCheckpointsCf], begin, end, rocksdb::ReadOptions(),
                                 [&](const rocksdb::Slice& k, const rocksdb::Slice& v) -> Status {
    if (k.size() != begin.size() + 8) return DataLoss("malformed checkpoint index key of job '" + job_id + "'");
    int64_t step = int64_t(internal::DecodeBigEndian64(k.data() + begin.size()));
    FS_ASSIGN_OR_RETURN(internal::IndexRecord r,
                        internal::DecodeIndex(std::string_view(v.data(), v.size()), Describe(job_id, step)));
    if (!unsettled.count(step)) out.push_back({job_id, step, r.unix_micros, r.bytes, r.num_tensors});
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
  m.DeleteCheckpointRecords(&b, job_id, step);
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

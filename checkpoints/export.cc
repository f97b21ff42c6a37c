// The portable single-file format (FORMAT.md, "Export files"), and the
// TensorStore of the Save/Restore ops.
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <set>

#include "checkpoints/format.h"
#include "checkpoints/store.h"

namespace flowstate::checkpoints {
namespace {

using internal::Crc32c;
using internal::Crc32cExtend;
using internal::DecodeFixed32;
using internal::DecodeFixed64;
using internal::PutFixed32;
using internal::PutFixed64;

constexpr char kMagic[8] = {'F', 'S', 'C', 'K', 'P', 'T', '\r', '\n'};
constexpr char kTrailer[8] = {'F', 'S', 'C', 'K', 'E', 'N', 'D', '\n'};
constexpr uint32_t kExportVersion = 1;

std::string Errno(const std::string& what, const std::string& path) {
  return what + " " + path + ": " + std::strerror(errno);
}

class File {
 public:
  ~File() {
    if (fd_ >= 0) ::close(fd_);
  }
  int fd_ = -1;
};

Status WriteAll(int fd, const void* data, size_t n, const std::string& path) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    ssize_t w = ::write(fd, p, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      return Unavailable(Errno("cannot write", path));
    }
    p += w;
    n -= size_t(w);
  }
  return Status();
}

// Reads exactly n bytes; DATA_LOSS naming `what` at end of file.
Status ReadAll(int fd, void* data, size_t n, const std::string& path, const std::string& what) {
  char* p = static_cast<char*>(data);
  while (n > 0) {
    ssize_t r = ::read(fd, p, n);
    if (r < 0) {
      if (errno == EINTR) continue;
      return Unavailable(Errno("cannot read", path));
    }
    if (r == 0) return DataLoss(path + " is truncated (in " + what + ")");
    p += r;
    n -= size_t(r);
  }
  return Status();
}

}  // namespace

Status ExportSnapshot(const Snapshot& s, const std::string& path) {
  if (s.step < 0) return InvalidArgument("snapshot step must be >= 0");
  std::set<std::string_view> seen;
  for (const NamedTensor& t : s.tensors) {
    if (t.name.empty() || !t.value.IsInitialized() || !seen.insert(t.name).second) {
      return InvalidArgument("snapshot tensor '" + t.name + "' is unnamed, uninitialized or repeated");
    }
  }
  const std::string tmp = path + ".tmp";
  File f;
  f.fd_ = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (f.fd_ < 0) return Unavailable(Errno("cannot create", tmp));
  auto fail = [&](Status st) {
    ::close(f.fd_);
    f.fd_ = -1;
    ::unlink(tmp.c_str());
    return st;
  };
  std::string h(kMagic, 8);
  PutFixed32(&h, kExportVersion);
  std::string body;
  PutFixed64(&body, uint64_t(s.step));
  PutFixed64(&body, uint64_t(s.tensors.size()));
  PutFixed64(&body, uint64_t(s.metadata.size()));
  body += s.metadata;
  PutFixed32(&h, Crc32c(body.data(), body.size()));
  h += body;
  Status st = WriteAll(f.fd_, h.data(), h.size(), tmp);
  if (!st.ok()) return fail(st);
  for (const NamedTensor& t : s.tensors) {
    std::string e;
    PutFixed32(&e, uint32_t(t.name.size()));
    e += t.name;
    e.push_back(char(t.value.dtype()));
    e.append(3, '\0');
    PutFixed32(&e, uint32_t(t.value.rank()));
    for (int i = 0; i < t.value.rank(); ++i) PutFixed64(&e, uint64_t(t.value.dim(i)));
    PutFixed64(&e, uint64_t(t.value.TotalBytes()));
    uint32_t crc = Crc32cExtend(Crc32c(e.data(), e.size()), t.value.raw_data(), t.value.TotalBytes());
    std::string c;
    PutFixed32(&c, crc);
    e.insert(0, c);
    st = WriteAll(f.fd_, e.data(), e.size(), tmp);
    if (st.ok()) st = WriteAll(f.fd_, t.value.raw_data(), t.value.TotalBytes(), tmp);
    if (!st.ok()) return fail(st);
  }
  st = WriteAll(f.fd_, kTrailer, 8, tmp);
  if (!st.ok()) return fail(st);
  if (::fsync(f.fd_) != 0) return fail(Unavailable(Errno("cannot fsync", tmp)));
  if (::close(f.fd_) != 0) {
    f.fd_ = -1;
    ::unlink(tmp.c_str());
    return Unavailable(Errno("cannot close", tmp));
  }
  f.fd_ = -1;
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    Status e = Unavailable(Errno("cannot rename " + tmp + " to", path));
    ::unlink(tmp.c_str());
    return e;
  }
  std::string parent = std::filesystem::path(path).parent_path().string();
  if (parent.empty()) parent = ".";
  int dfd = ::open(parent.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
  return Status();
}

StatusOr<Snapshot> ImportSnapshot(const std::string& path) {
  File f;
  f.fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (f.fd_ < 0) {
    if (errno == ENOENT) return NotFound("no file " + path);
    return Unavailable(Errno("cannot open", path));
  }
  char head[8 + 4 + 4 + 24];
  ssize_t got = ::read(f.fd_, head, sizeof head);  // short files are not ours
  if (got < 8 || std::memcmp(head, kMagic, 8) != 0) {
    return InvalidArgument(path + " is not a flowstate checkpoint export (bad magic)");
  }
  if (got < ssize_t(sizeof head)) return DataLoss(path + " is truncated (in the header)");
  const uint32_t version = DecodeFixed32(head + 8);
  if (version > kExportVersion) {
    return FailedPrecondition(path + " has export format version " + std::to_string(version) +
                              ", newer than version " + std::to_string(kExportVersion) +
                              " that this flowstate binary reads");
  }
  const uint32_t header_crc = DecodeFixed32(head + 12);
  Snapshot s;
  s.step = int64_t(DecodeFixed64(head + 16));
  const uint64_t n = DecodeFixed64(head + 24);
  const uint64_t meta_len = DecodeFixed64(head + 32);
  const uint64_t file_size = uint64_t(std::filesystem::file_size(path));
  if (meta_len > file_size || n > file_size) return DataLoss(path + ": corrupt header");
  s.metadata.resize(meta_len);
  FS_RETURN_IF_ERROR(ReadAll(f.fd_, s.metadata.data(), meta_len, path, "the metadata"));
  uint32_t crc = Crc32cExtend(Crc32c(head + 16, 24), s.metadata.data(), meta_len);
  if (crc != header_crc) return DataLoss(path + ": the header fails its checksum");
  for (uint64_t i = 0; i < n; ++i) {
    const std::string where = "tensor #" + std::to_string(i);
    char b[8];
    FS_RETURN_IF_ERROR(ReadAll(f.fd_, b, 8, path, where));
    const uint32_t want = DecodeFixed32(b);
    const uint32_t name_len = DecodeFixed32(b + 4);
    if (name_len == 0 || name_len > (1u << 20)) return DataLoss(path + ": " + where + " has a corrupt name length");
    std::string e(b + 4, 4);
    std::string name(name_len, '\0');
    FS_RETURN_IF_ERROR(ReadAll(f.fd_, name.data(), name_len, path, where));
    e += name;
    const std::string what = path + ": tensor '" + name + "'";
    char fixed[8];
    FS_RETURN_IF_ERROR(ReadAll(f.fd_, fixed, 8, path, "tensor '" + name + "'"));
    e.append(fixed, 8);
    const uint8_t dt = uint8_t(fixed[0]);
    const uint32_t rank = DecodeFixed32(fixed + 4);
    if (dt == 0 || dt >= kNumDataTypes || rank > 64) return DataLoss(what + " has a corrupt header");
    std::string dims_raw(8 * size_t(rank) + 8, '\0');
    FS_RETURN_IF_ERROR(ReadAll(f.fd_, dims_raw.data(), dims_raw.size(), path, "tensor '" + name + "'"));
    e += dims_raw;
    std::vector<int64_t> dims(rank);
    for (uint32_t d = 0; d < rank; ++d) {
      uint64_t v = DecodeFixed64(dims_raw.data() + 8 * d);
      if (v > uint64_t(INT64_MAX)) return DataLoss(what + " has a corrupt shape");
      dims[d] = int64_t(v);
    }
    const uint64_t bytes = DecodeFixed64(dims_raw.data() + 8 * rank);
    StatusOr<TensorShape> shape = TensorShape::Make(dims);
    if (!shape.ok() || bytes > file_size ||
        uint64_t(shape->num_elements()) * DataTypeSize(DataType(dt)) != bytes) {
      return DataLoss(what + " has a corrupt shape");
    }
    FS_ASSIGN_OR_RETURN(Tensor t, Tensor::Allocate(HostAllocator(), DataType(dt), *shape));
    FS_RETURN_IF_ERROR(ReadAll(f.fd_, t.raw_data(), bytes, path, "tensor '" + name + "'"));
    if (Crc32cExtend(Crc32c(e.data(), e.size()), t.raw_data(), bytes) != want) {
      return DataLoss(what + " fails its checksum");
    }
    s.tensors.push_back({std::move(name), std::move(t)});
  }
  char tail[8];
  FS_RETURN_IF_ERROR(ReadAll(f.fd_, tail, 8, path, "the trailer"));
  if (std::memcmp(tail, kTrailer, 8) != 0) return DataLoss(path + ": bad trailer");
  return s;
}

// --- TensorStore for Save/Restore ---------------------------------------------

namespace {

class RocksTensorStore final : public TensorStore {
 public:
  explicit RocksTensorStore(std::shared_ptr<Store> store) : store_(std::move(store)) {}
  Status Write(const std::string& prefix,
               const std::vector<std::pair<std::string, Tensor>>& tensors) override {
    if (prefix.empty()) return InvalidArgument("the save prefix must not be empty");
    std::vector<NamedTensor> named;
    named.reserve(tensors.size());
    for (const auto& [n, t] : tensors) named.push_back({n, t});
    return store_->PutVariables(Scope(prefix), named);
  }
  StatusOr<Tensor> Read(const std::string& prefix, const std::string& name) override {
    if (prefix.empty()) return InvalidArgument("the save prefix must not be empty");
    return store_->GetVariable(Scope(prefix), name);
  }

 private:
  static std::string Scope(const std::string& prefix) { return "save/" + prefix; }
  std::shared_ptr<Store> store_;
};

}  // namespace

std::shared_ptr<TensorStore> NewTensorStore(std::shared_ptr<Store> store) {
  return std::make_shared<RocksTensorStore>(std::move(store));
}

}  // namespace flowstate::checkpoints

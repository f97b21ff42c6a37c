// The portable single-file format (FORMAT.md, "Export files"), and the
// TensorStore of the Save/Restore ops.
#include <fcntl.h>
#include <sys/stat.h>
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

// Reads an export file front to back. Every error names the file by its
// label (never a server path for an upload) and, for a file that ends early,
// the byte offset and the part being read.
class Reader {
 public:
  Reader(int fd, std::string label) : fd_(fd), label_(std::move(label)) {}
  Status Read(void* data, size_t n, const std::string& what) {
    char* p = static_cast<char*>(data);
    while (n > 0) {
      ssize_t r = ::read(fd_, p, n);
      if (r < 0) {
        if (errno == EINTR) continue;
        return Unavailable("cannot read " + label_ + ": " + std::strerror(errno));
      }
      if (r == 0) return Bad("truncated at byte " + std::to_string(offset_) + " (in " + what + ")");
      p += r;
      n -= size_t(r);
      offset_ += uint64_t(r);
    }
    return Status();
  }
  // INVALID_ARGUMENT: the bytes are not a valid export (whoever sent them).
  Status Bad(const std::string& why) const {
    return InvalidArgument(label_ + " is not a valid flowstate checkpoint export: " + why);
  }
  uint64_t offset() const { return offset_; }

 private:
  int fd_;
  std::string label_;
  uint64_t offset_ = 0;
};

// A tensor name from the file, quoted and cut short for messages.
std::string Quote(const std::string& name) {
  return "'" + (name.size() <= 64 ? name : name.substr(0, 64) + "...") + "'";
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

StatusOr<Snapshot> ImportSnapshot(const std::string& path, const std::string& name) {
  const std::string label = name.empty() ? path : name;
  File f;
  f.fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (f.fd_ < 0) {
    if (errno == ENOENT) return NotFound("no file " + label);
    return Unavailable("cannot open " + label + ": " + std::strerror(errno));
  }
  struct stat st;
  if (::fstat(f.fd_, &st) != 0) return Unavailable("cannot read " + label + ": " + std::strerror(errno));
  const uint64_t file_size = uint64_t(st.st_size);
  Reader in(f.fd_, label);
  char head[8 + 4 + 4 + 24];
  if (file_size < 8) return in.Bad("bad magic (the file is " + std::to_string(file_size) + " bytes)");
  FS_RETURN_IF_ERROR(in.Read(head, 8, "the magic"));
  if (std::memcmp(head, kMagic, 8) != 0) {
    if (std::memcmp(head, "PK\x03\x04", 4) == 0 || std::memcmp(head, "PK\x05\x06", 4) == 0) {
      return in.Bad("it is a zip archive, such as a NumPy .npz export; only .fsck exports "
                    "(the default format) can be imported");
    }
    return in.Bad("bad magic (not an FSCK file)");
  }
  FS_RETURN_IF_ERROR(in.Read(head + 8, sizeof head - 8, "the header"));
  const uint32_t version = DecodeFixed32(head + 8);
  if (version > kExportVersion) {
    return FailedPrecondition(label + " has export format version " + std::to_string(version) +
                              ", newer than version " + std::to_string(kExportVersion) +
                              " that this flowstate binary reads");
  }
  const uint32_t header_crc = DecodeFixed32(head + 12);
  Snapshot s;
  s.step = int64_t(DecodeFixed64(head + 16));
  const uint64_t n = DecodeFixed64(head + 24);
  const uint64_t meta_len = DecodeFixed64(head + 32);
  if (meta_len > file_size || n > file_size) return in.Bad("corrupt header (counts larger than the file)");
  s.metadata.resize(meta_len);
  FS_RETURN_IF_ERROR(in.Read(s.metadata.data(), meta_len, "the metadata"));
  uint32_t crc = Crc32cExtend(Crc32c(head + 16, 24), s.metadata.data(), meta_len);
  if (crc != header_crc) return in.Bad("the header fails its checksum");
  if (s.step < 0) return in.Bad("negative step " + std::to_string(s.step));
  std::set<std::string> names;
  for (uint64_t i = 0; i < n; ++i) {
    const std::string where = "tensor #" + std::to_string(i);
    char b[8];
    FS_RETURN_IF_ERROR(in.Read(b, 8, where));
    const uint32_t want = DecodeFixed32(b);
    const uint32_t name_len = DecodeFixed32(b + 4);
    if (name_len == 0 || name_len > (1u << 20)) return in.Bad(where + " has a corrupt name length");
    std::string e(b + 4, 4);
    std::string tname(name_len, '\0');
    FS_RETURN_IF_ERROR(in.Read(tname.data(), name_len, where + "'s name"));
    e += tname;
    const std::string what = "tensor " + Quote(tname);
    char fixed[8];
    FS_RETURN_IF_ERROR(in.Read(fixed, 8, what));
    e.append(fixed, 8);
    const uint8_t dt = uint8_t(fixed[0]);
    const uint32_t rank = DecodeFixed32(fixed + 4);
    if (dt == 0 || dt >= kNumDataTypes || rank > 64) return in.Bad(what + " has a corrupt header");
    std::string dims_raw(8 * size_t(rank) + 8, '\0');
    FS_RETURN_IF_ERROR(in.Read(dims_raw.data(), dims_raw.size(), what));
    e += dims_raw;
    std::vector<int64_t> dims(rank);
    for (uint32_t d = 0; d < rank; ++d) {
      uint64_t v = DecodeFixed64(dims_raw.data() + 8 * d);
      if (v > uint64_t(INT64_MAX)) return in.Bad(what + " has a corrupt shape");
      dims[d] = int64_t(v);
    }
    const uint64_t bytes = DecodeFixed64(dims_raw.data() + 8 * rank);
    StatusOr<TensorShape> shape = TensorShape::Make(dims);
    if (!shape.ok() || bytes > file_size ||
        uint64_t(shape->num_elements()) * DataTypeSize(DataType(dt)) != bytes) {
      return in.Bad(what + " has a corrupt shape");
    }
    FS_ASSIGN_OR_RETURN(Tensor t, Tensor::Allocate(HostAllocator(), DataType(dt), *shape));
    FS_RETURN_IF_ERROR(in.Read(t.raw_data(), bytes, what + "'s data"));
    if (Crc32cExtend(Crc32c(e.data(), e.size()), t.raw_data(), bytes) != want) {
      return in.Bad(what + " fails its checksum");
    }
    if (!names.insert(tname).second) return in.Bad(what + " appears twice");
    s.tensors.push_back({std::move(tname), std::move(t)});
  }
  char tail[8];
  FS_RETURN_IF_ERROR(in.Read(tail, 8, "the trailer"));
  if (std::memcmp(tail, kTrailer, 8) != 0) return in.Bad("bad trailer");
  if (in.offset() != file_size) {
    return in.Bad(std::to_string(file_size - in.offset()) + " bytes after the trailer");
  }
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

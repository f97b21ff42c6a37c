#include "jobs/dataset_uploads.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <random>
#include <utility>

#include "state/data_path.h"
#include "state/npy.h"

namespace flowstate {
namespace {

constexpr const char* kPartial = ".partial";

// A descriptor closed when it goes out of scope.
class Fd {
 public:
  explicit Fd(int fd = -1) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) close(fd_);
  }
  Fd(Fd&& o) noexcept : fd_(o.fd_) { o.fd_ = -1; }
  Fd& operator=(Fd&& o) noexcept {
    std::swap(fd_, o.fd_);
    return *this;
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

std::string Errno() { return std::strerror(errno); }

bool IsDatasetId(std::string_view id) {
  if (id.size() != 15 || id.substr(0, 3) != "ds-") return false;
  for (char c : id.substr(3)) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

std::string NewId() {
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  static const char kHex[] = "0123456789abcdef";
  std::string id = "ds-";
  uint64_t v = rng();
  for (int i = 0; i < 12; ++i, v >>= 4) id += kHex[v & 15];
  return id;
}

// uploads/ beneath the root, made when `create`; never through a link.
StatusOr<Fd> OpenDir(const std::string& data_root, bool create) {
  Fd root(open(data_root.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (root.get() < 0) {
    return FailedPrecondition("the server's data root cannot be opened: " + Errno());
  }
  if (create && mkdirat(root.get(), DatasetUploads::kDir, 0750) != 0 && errno != EEXIST) {
    return FailedPrecondition("the server cannot write beneath its data root (" +
                              std::string(DatasetUploads::kDir) + "/): " + Errno());
  }
  int fd = openat(root.get(), DatasetUploads::kDir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return Fd();  // no uploads yet
    if (errno == ELOOP || errno == ENOTDIR) {
      return PermissionDenied(std::string(DatasetUploads::kDir) +
                              "/ beneath the data root is not a directory (a link?)");
    }
    return FailedPrecondition("the uploads directory cannot be opened: " + Errno());
  }
  return Fd(fd);
}

// The dataset file of `id` in `dir`: "<id>.npz", "<id>.npy" or
// "<id>.partial" (empty when none), with its status.
std::string FindFile(int dir, const std::string& id, struct stat* st) {
  for (const char* ext : {".npz", ".npy", kPartial}) {
    std::string name = id + ext;
    if (fstatat(dir, name.c_str(), st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st->st_mode)) return name;
  }
  return "";
}

// The dataset files in `dir`, by name.
std::vector<std::string> DatasetFiles(int dir) {
  std::vector<std::string> names;
  int copy = dup(dir);
  if (copy < 0) return names;
  DIR* d = fdopendir(copy);
  if (d == nullptr) {
    close(copy);
    return names;
  }
  while (dirent* e = readdir(d)) {
    std::string name = e->d_name;
    size_t dot = name.find('.');
    if (dot != std::string::npos && IsDatasetId(std::string_view(name).substr(0, dot))) {
      names.push_back(name);
    }
  }
  closedir(d);
  std::sort(names.begin(), names.end());
  return names;
}

// The view of the dataset stored as `name` in `dir`.
DatasetInfo View(const std::string& data_root, const std::string& name, const struct stat& st) {
  DatasetInfo info;
  info.id = name.substr(0, name.find('.'));
  info.complete = name.size() < std::strlen(kPartial) ||
                  name.compare(name.size() - std::strlen(kPartial), std::string::npos, kPartial) != 0;
  info.path = std::string(DatasetUploads::kDir) + "/" + name;
  info.bytes = int64_t(st.st_size);
  info.modified = double(st.st_mtim.tv_sec) + double(st.st_mtim.tv_nsec) * 1e-9;
  if (info.complete) {
    StatusOr<DataFile> f = OpenDataFile(data_root, info.path);
    StatusOr<std::vector<NpyArrayInfo>> arrays =
        f.ok() ? ListNpyArrays(std::move(f).value(), /*read_data=*/false) : f.status();
    if (arrays.ok()) {
      for (const NpyArrayInfo& a : *arrays) {
        info.arrays.push_back({a.name, std::string(DataTypeName(a.dtype)), a.dims});
      }
    }
  }
  return info;
}

}  // namespace

StatusOr<DatasetInfo> DatasetUploads::Append(const std::string& id, int64_t offset,
                                            std::string_view chunk, bool final) {
  MutexLock l(mu_);
  FS_ASSIGN_OR_RETURN(Fd dir, OpenDir(options_.data_root, /*create=*/true));
  std::string dataset = id;
  Fd file;
  if (id.empty()) {
    if (offset != 0) return InvalidArgument("offset: a new dataset starts at offset 0");
    // Partial uploads nobody finished are deleted first.
    const auto now = std::chrono::system_clock::now();
    std::vector<std::string> names = DatasetFiles(dir.get());
    int live = 0;
    for (const std::string& name : names) {
      struct stat st;
      if (name.ends_with(kPartial) && fstatat(dir.get(), name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 &&
          now - std::chrono::system_clock::from_time_t(st.st_mtim.tv_sec) > options_.abandon_after) {
        unlinkat(dir.get(), name.c_str(), 0);
        continue;
      }
      ++live;
    }
    if (live >= options_.max_datasets) {
      return ResourceExhausted("the server holds " + std::to_string(live) +
                               " datasets, its limit (limits.max_datasets); delete one first");
    }
    dataset = NewId();
    file = Fd(openat(dir.get(), (dataset + kPartial).c_str(),
                     O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0640));
    if (file.get() < 0) return Unavailable("the dataset cannot be created: " + Errno());
  } else {
    if (!IsDatasetId(id)) return NotFound("no dataset '" + id.substr(0, 64) + "'");
    struct stat st;
    std::string name = FindFile(dir.get(), id, &st);
    if (name.empty()) return NotFound("no dataset '" + id + "'");
    if (!name.ends_with(kPartial)) {
      return FailedPrecondition("dataset '" + id + "' is complete; upload a new one");
    }
    if (offset != int64_t(st.st_size)) {
      return FailedPrecondition("offset: dataset '" + id + "' has " + std::to_string(st.st_size) +
                                " bytes; the next chunk starts at offset " +
                                std::to_string(st.st_size));
    }
    file = Fd(openat(dir.get(), name.c_str(), O_WRONLY | O_NOFOLLOW | O_CLOEXEC));
    if (file.get() < 0) return Unavailable("dataset '" + id + "' cannot be written: " + Errno());
  }
  const std::string partial = dataset + kPartial;
  if (int64_t(chunk.size()) > options_.max_dataset_bytes - offset) {
    if (id.empty()) unlinkat(dir.get(), partial.c_str(), 0);
    return ResourceExhausted("dataset '" + dataset + "' would be " +
                             std::to_string(offset + int64_t(chunk.size())) +
                             " bytes, over the limit of " + std::to_string(options_.max_dataset_bytes) +
                             " (limits.max_dataset_bytes)");
  }
  size_t written = 0;
  while (written < chunk.size()) {
    ssize_t n = pwrite(file.get(), chunk.data() + written, chunk.size() - written,
                       off_t(offset + int64_t(written)));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int err = n < 0 ? errno : ENOSPC;
      // The dataset keeps what it had: the client may send the chunk again.
      if (ftruncate(file.get(), off_t(offset)) != 0 || id.empty()) unlinkat(dir.get(), partial.c_str(), 0);
      if (err == ENOSPC || err == EDQUOT) {
        return ResourceExhausted("no space left on the data root's disk for dataset '" + dataset +
                                 "' (" + std::to_string(chunk.size()) + " bytes at offset " +
                                 std::to_string(offset) + ")");
      }
      return Unavailable("writing dataset '" + dataset + "' failed: " + std::strerror(err));
    }
    written += size_t(n);
  }
  if (final) {
    if (fsync(file.get()) != 0) {
      unlinkat(dir.get(), partial.c_str(), 0);
      return Unavailable("writing dataset '" + dataset + "' failed: " + Errno());
    }
    // The whole file is read through before any job may name it -- after
    // its headers have said how much that is: an archive's members may
    // inflate to far more than the upload (a few KB of deflated zeros can
    // declare terabytes), and their data is bounded like the file.
    const std::string path = std::string(kDir) + "/" + partial;
    StatusOr<bool> npz = false;
    StatusOr<std::vector<NpyArrayInfo>> arrays = Internal("not read");
    for (bool read_data : {false, true}) {
      StatusOr<DataFile> f = OpenDataFile(options_.data_root, path);
      if (!f.ok()) return f.status();
      npz = IsNpzFile(*f);
      arrays = npz.ok() ? ListNpyArrays(std::move(f).value(), read_data) : npz.status();
      if (!arrays.ok() || read_data) break;
      int64_t total = 0;
      for (const NpyArrayInfo& a : *arrays) {
        if (__builtin_add_overflow(total, a.data_bytes, &total)) total = INT64_MAX;
      }
      if (total > options_.max_dataset_bytes) {
        arrays = Status(ResourceExhausted(
            "its arrays hold " + std::to_string(total) + " bytes uncompressed, over the limit of " +
            std::to_string(options_.max_dataset_bytes) + " (limits.max_dataset_bytes)"));
        break;
      }
    }
    if (!arrays.ok()) {
      unlinkat(dir.get(), partial.c_str(), 0);
      if (arrays.status().code() == Code::kResourceExhausted) {
        return ResourceExhausted("dataset '" + dataset + "' was deleted: " + arrays.status().message());
      }
      // The client's file is what is wrong: 400, not a server-side data loss.
      return InvalidArgument("dataset '" + dataset + "' is not an .npy or .npz file Flowstate reads, "
                             "and was deleted: " + arrays.status().message());
    }
    const std::string done = dataset + (*npz ? ".npz" : ".npy");
    if (renameat(dir.get(), partial.c_str(), dir.get(), done.c_str()) != 0) {
      return Unavailable("completing dataset '" + dataset + "' failed: " + Errno());
    }
    fsync(dir.get());
  }
  struct stat st;
  std::string name = FindFile(dir.get(), dataset, &st);
  if (name.empty()) return Internal("dataset '" + dataset + "' vanished while it was written");
  return View(options_.data_root, name, st);
}

StatusOr<DatasetInfo> DatasetUploads::Get(const std::string& id) const {
  if (!IsDatasetId(id)) return NotFound("no dataset '" + id.substr(0, 64) + "'");
  MutexLock l(mu_);
  FS_ASSIGN_OR_RETURN(Fd dir, OpenDir(options_.data_root, /*create=*/false));
  struct stat st;
  std::string name = dir.get() < 0 ? "" : FindFile(dir.get(), id, &st);
  if (name.empty()) return NotFound("no dataset '" + id + "'");
  return View(options_.data_root, name, st);
}

std::vector<DatasetInfo> DatasetUploads::List() const {
  MutexLock l(mu_);
  std::vector<DatasetInfo> out;
  StatusOr<Fd> dir = OpenDir(options_.data_root, /*create=*/false);
  if (!dir.ok() || dir->get() < 0) return out;
  for (const std::string& name : DatasetFiles(dir->get())) {
    struct stat st;
    if (fstatat(dir->get(), name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st.st_mode)) {
      out.push_back(View(options_.data_root, name, st));
    }
  }
  return out;
}

Status DatasetUploads::Delete(const std::string& id) {
  if (!IsDatasetId(id)) return NotFound("no dataset '" + id.substr(0, 64) + "'");
  MutexLock l(mu_);
  FS_ASSIGN_OR_RETURN(Fd dir, OpenDir(options_.data_root, /*create=*/false));
  struct stat st;
  std::string name = dir.get() < 0 ? "" : FindFile(dir.get(), id, &st);
  if (name.empty()) return NotFound("no dataset '" + id + "'");
  if (unlinkat(dir.get(), name.c_str(), 0) != 0) {
    return Unavailable("dataset '" + id + "' cannot be deleted: " + Errno());
  }
  return Status();
}

}  // namespace flowstate

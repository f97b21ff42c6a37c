// Data paths: where the dataset files of a training job may come from.
//
// A job names its files relative to a data root (the server's configured
// directory; kDefaultDataRoot when none is configured). OpenDataFile()
// opens such a file *beneath* the root: ".." that climbs out of it, an
// absolute path elsewhere, and symbolic links whose target lies outside the
// root are all refused with PERMISSION_DENIED, and a file outside the root is
// never opened. The check is made on the file actually opened, not on the
// path's text, so a link placed under the root cannot lead a job to
// /etc/passwd, and a link swapped in between a check and the open changes
// nothing. Symbolic links that stay inside the root keep working (a dataset
// directory may link to a shared copy elsewhere in the same root). The root
// itself may be, or lie under, a symbolic link: the administrator chose it.
//
// How: Linux openat2(2) with RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS relative
// to the opened root (the kernel refuses every escape while it walks the
// path). Where that is unavailable (kernels before 5.6) or refuses a link
// that is absolute but points inside the root, the path's real location is
// computed first (realpath) and refused when outside the root, then the
// file is opened without blocking and the descriptor's own path
// (/proc/self/fd) is checked again.
//
// Readers (state/idx_reader.h, state/csv_reader.h) read from the returned
// descriptor. Messages name the file by the path as the job gave it, never
// the server's absolute path.
//
// Pure functions of their arguments and the file system; thread-safe.
#ifndef FLOWSTATE_STATE_DATA_PATH_H_
#define FLOWSTATE_STATE_DATA_PATH_H_

#include <string>

#include "graph/status.h"

namespace flowstate {

// Where Debian's dataset packages install their files (dataset-fashion-mnist
// puts its four .gz files under fashion-mnist/ here).
inline constexpr const char* kDefaultDataRoot = "/usr/share/datasets";

// An open, read-only descriptor of a regular file beneath the data root.
// Owns the descriptor (closed when destroyed); movable, not copyable; one
// thread at a time.
class DataFile {
 public:
  DataFile() = default;
  DataFile(int fd, std::string name) : fd_(fd), name_(std::move(name)) {}
  ~DataFile();
  DataFile(DataFile&& o) noexcept : fd_(o.fd_), name_(std::move(o.name_)) { o.fd_ = -1; }
  DataFile& operator=(DataFile&& o) noexcept;
  DataFile(const DataFile&) = delete;
  DataFile& operator=(const DataFile&) = delete;

  int fd() const { return fd_; }
  // The path as the job gave it: what messages call the file.
  const std::string& name() const { return name_; }
  // Hands the descriptor over (the caller closes it); -1 afterwards.
  int Release() {
    int fd = fd_;
    fd_ = -1;
    return fd;
  }

 private:
  int fd_ = -1;
  std::string name_;
};

// Opens `path` (relative to `data_root`, or absolute and inside it) for
// reading, beneath the root as described above. `data_root` may be relative
// (to the working directory). Errors, each naming `path` as given:
//   INVALID_ARGUMENT   `path` or `data_root` is empty or contains a NUL byte,
//                      or the file is not a regular file;
//   PERMISSION_DENIED  the path is the root itself, lies outside it, or
//                      leads outside it through a symbolic link; or the
//                      file may not be read;
//   NOT_FOUND          nothing exists at the path, or the root is missing.
StatusOr<DataFile> OpenDataFile(const std::string& data_root, const std::string& path);

// OpenDataFile(), then the file's absolute, lexically normalized path (for
// existence checks at job submission; read through OpenDataFile()). Same
// errors.
StatusOr<std::string> ResolveDataPath(const std::string& data_root, const std::string& path);

namespace data_path_internal {
// OpenDataFile() as on a kernel without openat2(2) (the fallback), for tests.
StatusOr<DataFile> OpenDataFileWithoutOpenat2(const std::string& data_root,
                                              const std::string& path);
}  // namespace data_path_internal

}  // namespace flowstate

#endif  // FLOWSTATE_STATE_DATA_PATH_H_

#include "state/data_path.h"

#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <system_error>
#include <vector>

namespace flowstate {
namespace {

namespace fs = std::filesystem;

// The non-empty components of a normalized absolute path ("/a/b/" -> "/",
// "a", "b"); a trailing separator yields an empty last element, dropped here.
std::vector<fs::path> Components(const fs::path& p) {
  std::vector<fs::path> out;
  for (const fs::path& c : p) {
    if (!c.empty()) out.push_back(c);
  }
  return out;
}

// The lexical check, before anything is opened: the absolute root and the
// path relative to it.
struct Lexical {
  fs::path root;
  fs::path relative;
};

StatusOr<Lexical> CheckLexically(const std::string& data_root, const std::string& path) {
  if (path.empty()) return InvalidArgument("dataset path is empty");
  if (data_root.empty()) {
    return InvalidArgument("data root is empty (resolving '" + path + "')");
  }
  if (path.find('\0') != std::string::npos || data_root.find('\0') != std::string::npos) {
    return InvalidArgument("dataset path '" + path + "' contains a NUL byte");
  }
  std::error_code ec;
  fs::path root = fs::absolute(fs::path(data_root), ec);
  if (ec) return InvalidArgument("cannot make the data root absolute: " + ec.message());
  root = root.lexically_normal();
  // operator/ keeps an absolute right-hand side as is.
  const fs::path resolved = (root / fs::path(path)).lexically_normal();
  const std::vector<fs::path> root_parts = Components(root);
  const std::vector<fs::path> parts = Components(resolved);
  bool inside = parts.size() > root_parts.size();
  for (size_t i = 0; inside && i < root_parts.size(); ++i) inside = parts[i] == root_parts[i];
  if (!inside) return PermissionDenied("dataset path '" + path + "' escapes the data root");
  Lexical out;
  out.root = root;
  for (size_t i = root_parts.size(); i < parts.size(); ++i) out.relative /= parts[i];
  return out;
}

Status Escapes(const std::string& path) {
  return PermissionDenied("dataset path '" + path +
                          "' leads outside the data root through a symbolic link");
}

Status OpenError(int err, const std::string& path) {
  switch (err) {
    case ENOENT:
    case ENOTDIR:
      return NotFound("dataset file '" + path + "' does not exist");
    case EACCES:
    case EPERM:
      return PermissionDenied("dataset file '" + path + "' may not be read: " + std::strerror(err));
    case EXDEV:
    case ELOOP:
      return Escapes(path);
    default:
      return Unavailable("cannot open dataset file '" + path + "': " + std::strerror(err));
  }
}

// Takes an opened descriptor: it must be a regular file; blocking again.
StatusOr<DataFile> Finish(int fd, const std::string& path) {
  DataFile f(fd, path);
  struct stat st;
  if (::fstat(fd, &st) != 0) return OpenError(errno, path);
  if (!S_ISREG(st.st_mode)) return InvalidArgument("dataset path '" + path + "' is not a regular file");
  const int flags = ::fcntl(fd, F_GETFL);
  if (flags >= 0) (void)::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
  return f;
}

// True when `p` lies strictly inside directory `root` (both canonical).
bool Inside(const std::string& p, const std::string& root) {
  if (root == "/") return p.size() > 1 && p[0] == '/';
  return p.size() > root.size() + 1 && p.compare(0, root.size(), root) == 0 && p[root.size()] == '/';
}

std::string RealPath(const std::string& p, int* err) {
  std::unique_ptr<char, decltype(&std::free)> r(::realpath(p.c_str(), nullptr), &std::free);
  if (!r) {
    *err = errno;
    return "";
  }
  return r.get();
}

// The fallback: the real location first (nothing outside the root is
// opened), then the descriptor's own path once more.
StatusOr<DataFile> OpenChecked(const Lexical& lex, const std::string& path) {
  int err = 0;
  const std::string real_root = RealPath(lex.root.string(), &err);
  if (real_root.empty()) {
    return err == ENOENT ? NotFound("the data root does not exist (opening '" + path + "')")
                         : OpenError(err, path);
  }
  const std::string real = RealPath((lex.root / lex.relative).string(), &err);
  if (real.empty()) {
    if (err != ENOENT && err != ENOTDIR) return OpenError(err, path);
    // Missing: NOT_FOUND only when the part that exists lies inside the
    // root (no probing for files elsewhere through a link).
    fs::path existing = lex.relative;
    std::string resolved;
    while (resolved.empty() && existing.has_relative_path() && existing != existing.parent_path()) {
      existing = existing.parent_path();
      resolved = RealPath((lex.root / existing).string(), &err);
    }
    if (resolved.empty()) resolved = real_root;
    if (resolved != real_root && !Inside(resolved, real_root)) return Escapes(path);
    return OpenError(ENOENT, path);
  }
  if (!Inside(real, real_root)) return Escapes(path);
  // O_NOFOLLOW: a link swapped in since is refused (ELOOP); O_NONBLOCK: a
  // FIFO does not block the open (Finish() refuses it).
  const int fd = ::open(real.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK | O_NOFOLLOW);
  if (fd < 0) return OpenError(errno, path);
  DataFile f(fd, path);
  char buf[PATH_MAX + 1];
  const std::string proc = "/proc/self/fd/" + std::to_string(fd);
  const ssize_t n = ::readlink(proc.c_str(), buf, PATH_MAX);
  if (n > 0 && !Inside(std::string(buf, size_t(n)), real_root)) return Escapes(path);
  return Finish(f.Release(), path);
}

StatusOr<DataFile> Open(const std::string& data_root, const std::string& path, bool use_openat2) {
  FS_ASSIGN_OR_RETURN(Lexical lex, CheckLexically(data_root, path));
  if (use_openat2) {
    const int root = ::open(lex.root.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (root < 0) {
      const int err = errno;
      if (err == ENOENT || err == ENOTDIR) {
        return NotFound("the data root does not exist (opening '" + path + "')");
      }
      return OpenError(err, path);
    }
    struct open_how how;
    std::memset(&how, 0, sizeof how);
    how.flags = O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK;
    how.resolve = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS;
    const long fd = ::syscall(SYS_openat2, root, lex.relative.c_str(), &how, sizeof how);
    const int err = errno;
    ::close(root);
    if (fd >= 0) return Finish(int(fd), path);
    // ENOSYS (or EPERM/EINVAL/E2BIG from a sandbox or an old kernel): no
    // usable openat2. EXDEV: the walk left the root, perhaps through an
    // absolute link that points back inside it -- the check below decides.
    if (err != ENOSYS && err != EPERM && err != EINVAL && err != E2BIG && err != EXDEV) {
      return OpenError(err, path);
    }
  }
  return OpenChecked(lex, path);
}

}  // namespace

DataFile::~DataFile() {
  if (fd_ >= 0) ::close(fd_);
}

DataFile& DataFile::operator=(DataFile&& o) noexcept {
  if (this != &o) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = o.fd_;
    name_ = std::move(o.name_);
    o.fd_ = -1;
  }
  return *this;
}

StatusOr<DataFile> OpenDataFile(const std::string& data_root, const std::string& path) {
  return Open(data_root, path, /*use_openat2=*/true);
}

StatusOr<std::string> ResolveDataPath(const std::string& data_root, const std::string& path) {
  FS_ASSIGN_OR_RETURN(DataFile f, OpenDataFile(data_root, path));
  FS_ASSIGN_OR_RETURN(Lexical lex, CheckLexically(data_root, path));
  return (lex.root / lex.relative).string();
}

namespace data_path_internal {
StatusOr<DataFile> OpenDataFileWithoutOpenat2(const std::string& data_root,
                                              const std::string& path) {
  return Open(data_root, path, /*use_openat2=*/false);
}
}  // namespace data_path_internal

}  // namespace flowstate

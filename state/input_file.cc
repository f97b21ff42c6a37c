#include "state/input_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <system_error>

namespace flowstate {
namespace {

gzFile Gz(void* handle) { return static_cast<gzFile>(handle); }

// gzread takes an unsigned count; stay well inside it.
constexpr size_t kMaxChunk = size_t{1} << 30;

}  // namespace

StatusOr<std::unique_ptr<InputFile>> InputFile::Open(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
  if (fd < 0) {
    const int err = errno;
    const std::string msg = "cannot open '" + path + "': " + std::strerror(err);
    return err == EACCES ? PermissionDenied(msg) : NotFound(msg);
  }
  DataFile file(fd, path);
  struct stat st;
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    return InvalidArgument("'" + path + "' is not a regular file");
  }
  const int flags = ::fcntl(fd, F_GETFL);
  if (flags >= 0) (void)::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
  return Open(std::move(file));
}

StatusOr<std::unique_ptr<InputFile>> InputFile::Open(DataFile file) {
  // Sniff the gzip magic ourselves so compressed() is known up front; gzread
  // itself handles either kind transparently.
  unsigned char magic[2] = {0, 0};
  const bool compressed =
      ::pread(file.fd(), magic, 2, 0) == 2 && magic[0] == 0x1f && magic[1] == 0x8b;
  std::string name = file.name();
  const int fd = file.Release();
  gzFile gz = gzdopen(fd, "rb");  // owns fd from here
  if (gz == nullptr) {
    ::close(fd);
    return Unavailable("cannot read '" + name + "': out of memory");
  }
  gzbuffer(gz, 1 << 17);
  return std::unique_ptr<InputFile>(new InputFile(std::move(name), gz, compressed));
}

InputFile::~InputFile() { gzclose(Gz(handle_)); }

StatusOr<size_t> InputFile::Read(void* dst, size_t n) {
  char* out = static_cast<char*>(dst);
  size_t done = 0;
  while (done < n) {
    const size_t want = std::min(n - done, kMaxChunk);
    const int got = gzread(Gz(handle_), out + done, static_cast<unsigned>(want));
    if (got < 0) {
      int errnum = 0;
      const char* msg = gzerror(Gz(handle_), &errnum);
      return DataLoss("'" + path_ + "' is corrupt: " +
                      (errnum == Z_ERRNO ? std::strerror(errno) : std::string(msg)));
    }
    done += size_t(got);
    if (size_t(got) < want) {
      // End of data, or a gzip stream cut short (zlib reports that as an
      // error after a short read).
      int errnum = 0;
      const char* msg = gzerror(Gz(handle_), &errnum);
      if (errnum != Z_OK) {
        return DataLoss("'" + path_ + "' is corrupt or truncated: " + std::string(msg));
      }
      break;
    }
  }
  return done;
}

Status InputFile::ReadExactly(void* dst, size_t n, std::string_view what) {
  FS_ASSIGN_OR_RETURN(size_t got, Read(dst, n));
  if (got != n) {
    return DataLoss("'" + path_ + "' is truncated: it ends after " + std::to_string(got) +
                    " of the " + std::to_string(n) + " bytes of " + std::string(what));
  }
  return Status::OK();
}

namespace {

StatusOr<std::string> ReadAll(std::unique_ptr<InputFile> file) {
  std::string out;
  constexpr size_t kChunk = size_t{1} << 20;
  while (true) {
    const size_t old = out.size();
    out.resize(old + kChunk);
    FS_ASSIGN_OR_RETURN(size_t got, file->Read(out.data() + old, kChunk));
    out.resize(old + got);
    if (got < kChunk) break;
  }
  return out;
}

}  // namespace

StatusOr<std::string> ReadInputFile(const std::string& path) {
  FS_ASSIGN_OR_RETURN(std::unique_ptr<InputFile> file, InputFile::Open(path));
  return ReadAll(std::move(file));
}

StatusOr<std::string> ReadInputFile(DataFile file) {
  FS_ASSIGN_OR_RETURN(std::unique_ptr<InputFile> f, InputFile::Open(std::move(file)));
  return ReadAll(std::move(f));
}

}  // namespace flowstate

// InputFile: sequential reads from a dataset file that may be gzip-compressed.
//
// Open() looks at the file's first bytes: a gzip stream (magic 1f 8b) is
// inflated while reading, anything else is read as is, so "train.idx" and
// "train.idx.gz" read the same. Errors name the file (by its DataFile name,
// the path as the job gave it): NOT_FOUND or PERMISSION_DENIED when it cannot
// be opened, INVALID_ARGUMENT when it is not a regular file, DATA_LOSS for a
// corrupt or truncated gzip stream or a file shorter than a ReadExactly()
// asks for. No message quotes the file's content.
//
// An InputFile owns its file handle and closes it when destroyed. It is not
// synchronized: one thread at a time. (zlib stays out of this header.)
#ifndef FLOWSTATE_STATE_INPUT_FILE_H_
#define FLOWSTATE_STATE_INPUT_FILE_H_

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>

#include "graph/status.h"
#include "state/data_path.h"

namespace flowstate {

class InputFile {
 public:
  // `path` is used as given (for dataset files use the DataFile overload).
  static StatusOr<std::unique_ptr<InputFile>> Open(const std::string& path);
  // Reads the file opened beneath the data root (OpenDataFile); takes over
  // its descriptor. path() is file.name().
  static StatusOr<std::unique_ptr<InputFile>> Open(DataFile file);
  ~InputFile();
  InputFile(const InputFile&) = delete;
  InputFile& operator=(const InputFile&) = delete;

  const std::string& path() const { return path_; }
  // True when the file is a gzip stream.
  bool compressed() const { return compressed_; }

  // Reads up to `n` bytes into `dst`; returns how many were read, fewer than
  // `n` only at the end of the data (0 there).
  StatusOr<size_t> Read(void* dst, size_t n);
  // Reads exactly `n` bytes; DATA_LOSS "<path>: truncated ... reading <what>"
  // when the data ends first.
  Status ReadExactly(void* dst, size_t n, std::string_view what);

 private:
  InputFile(std::string path, void* handle, bool compressed)
      : path_(std::move(path)), handle_(handle), compressed_(compressed) {}

  const std::string path_;
  void* const handle_;  // zlib's gzFile
  const bool compressed_;
};

// The whole (inflated) content of a file, e.g. a CSV file.
StatusOr<std::string> ReadInputFile(const std::string& path);
StatusOr<std::string> ReadInputFile(DataFile file);

}  // namespace flowstate

#endif  // FLOWSTATE_STATE_INPUT_FILE_H_

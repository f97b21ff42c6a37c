// The fuzz entry of the checkpoint import file (entries.h): the input is
// written to one in-memory file (memfd), which ImportSnapshot opens by its
// /proc/self/fd path, as it opens an uploaded file.
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <string>

#include "checkpoints/format.h"
#include "checkpoints/store.h"
#include "fuzz/entries.h"
#include "fuzz/entries_internal.h"

namespace flowstate::fuzz {
namespace {

// The in-memory file, made on first use; its path.
const std::string& InputFile() {
  static const std::string path = [] {
    int fd = ::memfd_create("flowstate_fuzz_checkpoint", MFD_CLOEXEC);
    if (fd < 0) Fail("CheckpointImport", "memfd_create failed");
    return "/proc/self/fd/" + std::to_string(fd);
  }();
  return path;
}

void WriteInput(std::string_view input) {
  const std::string& path = InputFile();
  int fd = std::stoi(path.substr(path.rfind('/') + 1));
  if (::ftruncate(fd, 0) != 0) Fail("CheckpointImport", "ftruncate failed");
  size_t off = 0;
  while (off < input.size()) {
    ssize_t n = ::pwrite(fd, input.data() + off, input.size() - off, off_t(off));
    if (n <= 0) Fail("CheckpointImport", "pwrite failed");
    off += size_t(n);
  }
}

namespace ci = checkpoints::internal;

void PutCrc(std::string* s, size_t at, uint32_t crc) {
  std::string c;
  ci::PutFixed32(&c, crc);
  s->replace(at, 4, c);
}

// The input with every checksum an export file has made right (a fuzzer
// cannot guess a CRC, and the parts behind one are the ones worth reaching),
// following ImportSnapshot's walk (checkpoints/FORMAT.md, "Export files") as
// far as the lengths allow.
std::string WithExportChecksums(std::string_view input) {
  std::string f(input);
  const char* p = f.data();
  if (f.size() < 40 || std::memcmp(p, "FSCKPT\r\n", 8) != 0) return f;
  const uint64_t meta_len = ci::DecodeFixed64(p + 32);
  if (meta_len > f.size() - 40) return f;
  PutCrc(&f, 12, ci::Crc32cExtend(ci::Crc32c(p + 16, 24), p + 40, meta_len));
  const uint64_t n = ci::DecodeFixed64(p + 24);
  size_t off = 40 + size_t(meta_len);
  for (uint64_t i = 0; i < n && f.size() - off >= 8; ++i) {
    const uint32_t name_len = ci::DecodeFixed32(p + off + 4);
    size_t at = off + 8 + size_t(name_len);  // the dtype
    if (name_len == 0 || name_len > (1u << 20) || at > f.size() || f.size() - at < 8) break;
    const uint32_t rank = ci::DecodeFixed32(p + at + 4);
    at += 8;
    if (rank > 64 || f.size() - at < 8 * size_t(rank) + 8) break;
    at += 8 * size_t(rank);
    const uint64_t bytes = ci::DecodeFixed64(p + at);
    at += 8;
    if (bytes > f.size() - at) break;
    const size_t end = at + size_t(bytes);
    PutCrc(&f, off, ci::Crc32c(p + off + 4, end - off - 4));
    off = end;
  }
  return f;
}

// The store's records (tensor, chunked tensor header, index) of `bytes`: a
// corrupt record is DATA_LOSS.
void Records(std::string_view bytes) {
  const std::string what = "fuzz record";
  StatusOr<Tensor> t = ci::DecodeTensorRecord(bytes, what);
  CheckClientError(t.status(), "CheckpointImport(record)", true);
  if (t.ok()) CheckTensor(*t, "CheckpointImport(record)");
  CheckClientError(ci::DecodeChunkedTensorHeader(bytes, what).status(),
                   "CheckpointImport(chunked)", true);
  CheckClientError(ci::DecodeIndex(bytes, what).status(), "CheckpointImport(index)", true);
}

Status Import(std::string_view file) {
  WriteInput(file);
  StatusOr<checkpoints::Snapshot> s = checkpoints::ImportSnapshot(InputFile());
  CheckClientError(s.status(), "CheckpointImport", /*data_loss_ok=*/true);
  if (!s.ok()) return s.status();
  for (const checkpoints::NamedTensor& t : s->tensors) {
    if (t.name.empty()) Fail("CheckpointImport", "a tensor without a name");
    CheckTensor(t.value, "CheckpointImport");
  }
  return Status();
}

}  // namespace

Status CheckpointImport(std::string_view input) {
  // Each as it is and with its checksums made right.
  Records(input);
  if (input.size() >= 4) {
    std::string fixed(input);
    PutCrc(&fixed, 0, ci::Crc32c(fixed.data() + 4, fixed.size() - 4));
    Records(fixed);
  }
  (void)Import(input);
  return Import(WithExportChecksums(input));
}

}  // namespace flowstate::fuzz

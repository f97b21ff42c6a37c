// The .npz export (npz.h): .npy headers, and the zip container written by
// libzip from one streaming source per member (header, then the tensor's own
// buffer), so no tensor is copied.
#include "checkpoints/npz.h"

#include <zip.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <set>

namespace flowstate::checkpoints {
namespace {

// One member being written: the .npy header, then `data`. libzip pulls it
// through Callback when the archive is closed.
struct Member {
  std::string header;
  const char* data = nullptr;
  uint64_t data_bytes = 0;
  std::vector<float> widened;  // bfloat16 tensors, as float32
  uint64_t pos = 0;
  zip_error_t error;
  Member() { zip_error_init(&error); }
  ~Member() { zip_error_fini(&error); }
  Member(const Member&) = delete;
  Member& operator=(const Member&) = delete;
  uint64_t size() const { return header.size() + data_bytes; }
};

zip_int64_t Callback(void* state, void* data, zip_uint64_t len, zip_source_cmd_t cmd) {
  Member* m = static_cast<Member*>(state);
  switch (cmd) {
    case ZIP_SOURCE_OPEN:
      m->pos = 0;
      return 0;
    case ZIP_SOURCE_READ: {
      char* out = static_cast<char*>(data);
      uint64_t n = 0;
      while (n < len && m->pos < m->size()) {
        const bool in_header = m->pos < m->header.size();
        const char* src = in_header ? m->header.data() + m->pos : m->data + (m->pos - m->header.size());
        const uint64_t left = in_header ? m->header.size() - m->pos : m->size() - m->pos;
        const uint64_t k = std::min<uint64_t>(left, len - n);
        std::memcpy(out + n, src, k);
        n += k;
        m->pos += k;
      }
      return zip_int64_t(n);
    }
    case ZIP_SOURCE_CLOSE:
      return 0;
    case ZIP_SOURCE_STAT: {
      zip_stat_t* st = ZIP_SOURCE_GET_ARGS(zip_stat_t, data, len, &m->error);
      if (st == nullptr) return -1;
      zip_stat_init(st);
      st->size = m->size();
      st->valid |= ZIP_STAT_SIZE;
      return sizeof(zip_stat_t);
    }
    case ZIP_SOURCE_ERROR:
      return zip_error_to_data(&m->error, data, len);
    case ZIP_SOURCE_FREE:
      return 0;  // the Member belongs to ExportSnapshotNpz
    case ZIP_SOURCE_SUPPORTS:
      return zip_source_make_command_bitmap(ZIP_SOURCE_OPEN, ZIP_SOURCE_READ, ZIP_SOURCE_CLOSE,
                                            ZIP_SOURCE_STAT, ZIP_SOURCE_ERROR, ZIP_SOURCE_FREE, -1);
    default:
      zip_error_set(&m->error, ZIP_ER_OPNOTSUPP, 0);
      return -1;
  }
}

// OK when `name` can be a member path: '/'-separated segments, none empty,
// "." or "..", and no control characters (so extracting the archive with
// any unzip stays inside its folder).
Status CheckMemberName(const std::string& name) {
  auto bad = [&](const char* why) {
    return InvalidArgument("tensor '" + name + "' cannot be named in an .npz archive: " + why);
  };
  if (name.empty()) return bad("the name is empty");
  size_t start = 0;
  while (start <= name.size()) {
    size_t end = name.find('/', start);
    if (end == std::string::npos) end = name.size();
    std::string_view seg(name.data() + start, end - start);
    if (seg.empty()) return bad("it has an empty path segment (a leading, trailing or double '/')");
    if (seg == "." || seg == "..") return bad("it has a '.' or '..' path segment");
    start = end + 1;
  }
  for (unsigned char c : name) {
    if (c < 0x20 || c == 0x7f) return bad("it has a control character");
  }
  return Status();
}

std::string ZipError(zip_error_t* e) { return zip_error_strerror(e); }

// libzip writes no file for an archive without members: an empty zip is its
// end-of-central-directory record alone, 22 bytes.
Status WriteEmptyArchive(const std::string& path) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out.write("PK\x05\x06", 4);
    const char zeros[18] = {};
    out.write(zeros, sizeof zeros);
    if (!out.good()) return Unavailable("cannot write " + tmp);
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) return Unavailable("cannot rename " + tmp + " to " + path + ": " + ec.message());
  return Status();
}

}  // namespace

std::string_view ExportFormatName(ExportFormat format) {
  return format == ExportFormat::kNpz ? "npz" : "fsck";
}

std::string_view ExportFormatExtension(ExportFormat format) {
  return format == ExportFormat::kNpz ? ".npz" : ".fsck";
}

StatusOr<ExportFormat> ParseExportFormat(std::string_view text) {
  if (text == "fsck") return ExportFormat::kFsck;
  if (text == "npz") return ExportFormat::kNpz;
  return InvalidArgument("format: expected \"fsck\" (the default; re-importable) or \"npz\" "
                         "(NumPy), got '" + std::string(text.substr(0, 64)) + "'");
}

Status ExportSnapshotNpz(const Snapshot& snapshot, const std::string& path,
                         std::vector<std::string>* converted) {
  std::vector<std::unique_ptr<Member>> members;
  std::set<std::string_view> seen;
  for (const NamedTensor& t : snapshot.tensors) {
    FS_RETURN_IF_ERROR(CheckMemberName(t.name));
    if (!t.value.IsInitialized() || !seen.insert(t.name).second) {
      return InvalidArgument("snapshot tensor '" + t.name + "' is uninitialized or repeated");
    }
    const std::string_view descr = NpyDescr(t.value.dtype());
    if (descr.empty()) return InvalidArgument("tensor '" + t.name + "' has no dtype");
    auto m = std::make_unique<Member>();
    m->header = NpyHeader(descr, t.value.shape().dims());
    m->data = static_cast<const char*>(t.value.raw_data());
    m->data_bytes = t.value.TotalBytes();
    if (t.value.dtype() == DataType::kBFloat16) {
      const uint16_t* bits = static_cast<const uint16_t*>(t.value.raw_data());
      m->widened.resize(size_t(t.value.num_elements()));
      for (size_t i = 0; i < m->widened.size(); ++i) {
        const uint32_t w = uint32_t(bits[i]) << 16;
        std::memcpy(&m->widened[i], &w, 4);
      }
      m->data = reinterpret_cast<const char*>(m->widened.data());
      m->data_bytes = m->widened.size() * sizeof(float);
      if (converted != nullptr) converted->push_back(t.name);
    }
    members.push_back(std::move(m));
  }

  if (members.empty()) return WriteEmptyArchive(path);
  int err = 0;
  // ZIP_TRUNCATE: replace whatever is at `path`. libzip writes the archive
  // to a temporary file beside it and renames it in zip_close.
  zip_t* za = zip_open(path.c_str(), ZIP_CREATE | ZIP_TRUNCATE, &err);
  if (za == nullptr) {
    zip_error_t e;
    zip_error_init_with_code(&e, err);
    Status s = Unavailable("cannot create " + path + ": " + ZipError(&e));
    zip_error_fini(&e);
    return s;
  }
  auto fail = [&](const std::string& what) {
    Status s = Unavailable(what + ": " + ZipError(zip_get_error(za)));
    zip_discard(za);
    return s;
  };
  for (size_t i = 0; i < members.size(); ++i) {
    zip_source_t* src = zip_source_function(za, Callback, members[i].get());
    if (src == nullptr) return fail("cannot add tensor '" + snapshot.tensors[i].name + "'");
    const std::string entry = snapshot.tensors[i].name + ".npy";
    zip_int64_t idx = zip_file_add(za, entry.c_str(), src, ZIP_FL_ENC_GUESS);
    if (idx < 0) {
      zip_source_free(src);
      return fail("cannot add tensor '" + snapshot.tensors[i].name + "'");
    }
    if (zip_set_file_compression(za, zip_uint64_t(idx), ZIP_CM_STORE, 0) != 0) {
      return fail("cannot store tensor '" + snapshot.tensors[i].name + "'");
    }
  }
  if (zip_close(za) != 0) return fail("cannot write " + path);
  return Status();
}

Status ExportSnapshotAs(const Snapshot& snapshot, const std::string& path, ExportFormat format,
                        std::vector<std::string>* converted) {
  if (format == ExportFormat::kNpz) return ExportSnapshotNpz(snapshot, path, converted);
  return ExportSnapshot(snapshot, path);
}

}  // namespace flowstate::checkpoints

// NumPy array files (npy.h): the header's dict literal parsed by hand (a
// few keys of a Python literal; numpy's own reader is Python), the .npz
// container read with libzip, .npy files through InputFile (so a gzipped
// .npy reads too).
#include "state/npy.h"

#include <sys/stat.h>
#include <unistd.h>
#include <zip.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <optional>
#include <utility>

#include "graph/allocator.h"
#include "state/input_file.h"

namespace flowstate {
namespace {

// The most header bytes accepted (numpy itself writes a few hundred).
constexpr uint32_t kMaxHeaderBytes = 1 << 20;

// Where array bytes come from: an .npy file (InputFile) or an archive member.
class ArrayBytes {
 public:
  virtual ~ArrayBytes() = default;
  // What messages call the array: "'d.npy'" or "'d.npz' member 'x.npy'".
  virtual const std::string& where() const = 0;
  virtual StatusOr<size_t> Read(void* dst, size_t n) = 0;
  Status ReadExactly(void* dst, size_t n, std::string_view what) {
    auto* p = static_cast<unsigned char*>(dst);
    size_t got = 0;
    while (got < n) {
      FS_ASSIGN_OR_RETURN(size_t r, Read(p + got, n - got));
      if (r == 0) {
        return DataLoss(where() + ": truncated after " + std::to_string(got) + " of " +
                        std::to_string(n) + " bytes reading " + std::string(what));
      }
      got += r;
    }
    return Status();
  }
};

class FileBytes : public ArrayBytes {
 public:
  explicit FileBytes(std::unique_ptr<InputFile> f) : f_(std::move(f)), where_("'" + f_->path() + "'") {}
  const std::string& where() const override { return where_; }
  StatusOr<size_t> Read(void* dst, size_t n) override { return f_->Read(dst, n); }

 private:
  std::unique_ptr<InputFile> f_;
  std::string where_;
};

std::string ZipErrorText(zip_error_t* e) { return zip_error_strerror(e); }

// An archive opened from a data file's descriptor; discarded (never written).
class ZipArchive {
 public:
  static StatusOr<std::unique_ptr<ZipArchive>> Open(DataFile file) {
    int err = 0;
    zip_t* z = zip_fdopen(file.fd(), ZIP_CHECKCONS, &err);
    if (z == nullptr) {
      zip_error_t e;
      zip_error_init_with_code(&e, err);
      std::string text = ZipErrorText(&e);
      zip_error_fini(&e);
      return InvalidArgument("'" + file.name() + "' is not a readable .npz (zip) archive: " + text);
    }
    file.Release();  // the archive owns the descriptor now
    return std::unique_ptr<ZipArchive>(new ZipArchive(z, file.name()));
  }
  ~ZipArchive() { zip_discard(z_); }
  ZipArchive(const ZipArchive&) = delete;
  ZipArchive& operator=(const ZipArchive&) = delete;

  zip_t* get() const { return z_; }
  const std::string& name() const { return name_; }
  int64_t num_entries() const { return zip_get_num_entries(z_, 0); }

 private:
  ZipArchive(zip_t* z, std::string name) : z_(z), name_(std::move(name)) {}
  zip_t* const z_;
  const std::string name_;
};

class MemberBytes : public ArrayBytes {
 public:
  static StatusOr<std::unique_ptr<MemberBytes>> Open(const ZipArchive& a, zip_uint64_t index) {
    zip_stat_t st;
    zip_stat_init(&st);
    if (zip_stat_index(a.get(), index, 0, &st) != 0 || !(st.valid & ZIP_STAT_NAME) ||
        !(st.valid & ZIP_STAT_SIZE)) {
      return DataLoss("'" + a.name() + "': member " + std::to_string(index) + " cannot be read: " +
                      ZipErrorText(zip_get_error(a.get())));
    }
    std::string where = "'" + a.name() + "' member '" + st.name + "'";
    zip_file_t* f = zip_fopen_index(a.get(), index, 0);
    if (f == nullptr) {
      return InvalidArgument(where + " cannot be read: " + ZipErrorText(zip_get_error(a.get())));
    }
    return std::unique_ptr<MemberBytes>(new MemberBytes(f, st.name, std::move(where), st.size));
  }
  ~MemberBytes() override { zip_fclose(f_); }
  const std::string& where() const override { return where_; }
  const std::string& member() const { return member_; }
  uint64_t size() const { return size_; }
  StatusOr<size_t> Read(void* dst, size_t n) override {
    zip_int64_t r = zip_fread(f_, dst, n);
    if (r < 0) return DataLoss(where_ + ": " + ZipErrorText(zip_file_get_error(f_)));
    return size_t(r);
  }

 private:
  MemberBytes(zip_file_t* f, std::string member, std::string where, uint64_t size)
      : f_(f), member_(std::move(member)), where_(std::move(where)), size_(size) {}
  zip_file_t* const f_;
  const std::string member_;
  const std::string where_;
  const uint64_t size_;
};

// --- The header's dict: {'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), }

class DictReader {
 public:
  DictReader(std::string_view text, const std::string& where) : s_(text), where_(where) {}

  Status Read(std::string* descr, bool* fortran, std::vector<int64_t>* shape) {
    bool has_descr = false, has_fortran = false, has_shape = false;
    FS_RETURN_IF_ERROR(Expect('{'));
    while (true) {
      SkipSpace();
      if (Peek() == '}') break;
      FS_ASSIGN_OR_RETURN(std::string key, String());
      FS_RETURN_IF_ERROR(Expect(':'));
      SkipSpace();
      if (key == "descr") {
        if (Peek() != '\'' && Peek() != '"') {
          return Bad("its dtype is not a simple one (a structured dtype?); Flowstate reads arrays "
                     "of one numeric dtype");
        }
        FS_ASSIGN_OR_RETURN(*descr, String());
        has_descr = true;
      } else if (key == "fortran_order") {
        if (Word("True")) {
          *fortran = true;
        } else if (Word("False")) {
          *fortran = false;
        } else {
          return Bad("'fortran_order' is neither True nor False");
        }
        has_fortran = true;
      } else if (key == "shape") {
        FS_RETURN_IF_ERROR(Shape(shape));
        has_shape = true;
      } else {
        return Bad("its header has an unknown key '" + key.substr(0, 32) + "'");
      }
      SkipSpace();
      if (Peek() == ',') {
        ++i_;
        continue;
      }
      SkipSpace();
      if (Peek() != '}') return Bad("expected ',' or '}' in its header");
    }
    ++i_;
    SkipSpace();
    if (i_ != s_.size()) return Bad("its header has text after the dict");
    if (!has_descr || !has_fortran || !has_shape) {
      return Bad("its header lacks one of 'descr', 'fortran_order', 'shape'");
    }
    return Status();
  }

 private:
  char Peek() const { return i_ < s_.size() ? s_[i_] : '\0'; }
  void SkipSpace() {
    while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\t' || s_[i_] == '\n' || s_[i_] == '\r')) ++i_;
  }
  Status Bad(const std::string& why) const {
    return InvalidArgument(where_ + " is not a NumPy array file Flowstate reads: " + why);
  }
  Status Expect(char c) {
    SkipSpace();
    if (Peek() != c) return Bad(std::string("expected '") + c + "' in its header");
    ++i_;
    return Status();
  }
  bool Word(std::string_view w) {
    if (s_.substr(i_, w.size()) != w) return false;
    i_ += w.size();
    return true;
  }
  StatusOr<std::string> String() {
    char q = Peek();
    if (q != '\'' && q != '"') return Bad("expected a quoted string in its header");
    size_t end = s_.find(q, i_ + 1);
    if (end == std::string_view::npos || end - i_ > 64) return Bad("an unterminated string in its header");
    std::string v(s_.substr(i_ + 1, end - i_ - 1));
    i_ = end + 1;
    return v;
  }
  Status Shape(std::vector<int64_t>* shape) {
    if (Peek() != '(') return Bad("'shape' is not a tuple");
    ++i_;
    while (true) {
      SkipSpace();
      if (Peek() == ')') break;
      if (Peek() < '0' || Peek() > '9') return Bad("'shape' holds something other than sizes");
      int64_t v = 0;
      while (Peek() >= '0' && Peek() <= '9') {
        if (v > (int64_t{1} << 55)) return Bad("a size in 'shape' is too large");
        v = v * 10 + (Peek() - '0');
        ++i_;
      }
      if (Peek() == 'L') ++i_;  // Python 2's long literals
      if (shape->size() >= size_t(kMaxRank)) {
        return Bad("'shape' has more than " + std::to_string(kMaxRank) + " dimensions");
      }
      shape->push_back(v);
      SkipSpace();
      if (Peek() == ',') {
        ++i_;
      } else if (Peek() != ')') {
        return Bad("expected ',' or ')' in 'shape'");
      }
    }
    ++i_;
    return Status();
  }

  std::string_view s_;
  size_t i_ = 0;
  const std::string& where_;
};

StatusOr<DataType> DtypeOfDescr(const std::string& descr, const std::string& where) {
  auto refuse = [&](const std::string& why) {
    return InvalidArgument(where + " holds dtype '" + descr.substr(0, 32) + "'" + why +
                           "; Flowstate reads float32, float64, int32, int64, uint8, bool and "
                           "float16 (little-endian)");
  };
  if (descr.size() < 3) return refuse("");
  const char order = descr[0];
  const std::string code = descr.substr(1);
  static const std::pair<const char*, DataType> kCodes[] = {
      {"f4", DataType::kFloat32}, {"f8", DataType::kFloat64}, {"i4", DataType::kInt32},
      {"i8", DataType::kInt64},   {"u1", DataType::kUInt8},   {"b1", DataType::kBool},
      {"f2", DataType::kFloat16}};
  for (const auto& [c, dtype] : kCodes) {
    if (code != c) continue;
    const bool one_byte = DataTypeSize(dtype) == 1;
    if (order == '<' || order == '=' || (one_byte && (order == '|' || order == '>'))) return dtype;
    if (order == '>') return refuse(" (big-endian: save it with .astype('<" + code + "'))");
    return refuse("");
  }
  return refuse("");
}

// Reads the magic, version and header of the array in `in`.
StatusOr<NpyArrayInfo> ReadHeader(ArrayBytes* in) {
  const std::string& where = in->where();
  unsigned char pre[8];
  FS_RETURN_IF_ERROR(in->ReadExactly(pre, 8, "the .npy magic"));
  if (std::memcmp(pre, "\x93NUMPY", 6) != 0) {
    return InvalidArgument(where + " is not a NumPy .npy array (bad magic)");
  }
  const int major = pre[6];
  uint32_t header_bytes = 0;
  if (major == 1) {
    unsigned char len[2];
    FS_RETURN_IF_ERROR(in->ReadExactly(len, 2, "the .npy header length"));
    header_bytes = uint32_t(len[0]) | uint32_t(len[1]) << 8;
  } else if (major == 2 || major == 3) {
    unsigned char len[4];
    FS_RETURN_IF_ERROR(in->ReadExactly(len, 4, "the .npy header length"));
    header_bytes = uint32_t(len[0]) | uint32_t(len[1]) << 8 | uint32_t(len[2]) << 16 |
                   uint32_t(len[3]) << 24;
  } else {
    return InvalidArgument(where + " has .npy format version " + std::to_string(major) +
                           "; Flowstate reads versions 1 to 3");
  }
  if (header_bytes > kMaxHeaderBytes) {
    return InvalidArgument(where + " declares a .npy header of " + std::to_string(header_bytes) +
                           " bytes, over the limit of " + std::to_string(kMaxHeaderBytes));
  }
  std::string text(header_bytes, '\0');
  FS_RETURN_IF_ERROR(in->ReadExactly(text.data(), header_bytes, "the .npy header"));
  std::string descr;
  bool fortran = false;
  NpyArrayInfo info;
  FS_RETURN_IF_ERROR(DictReader(text, where).Read(&descr, &fortran, &info.dims));
  FS_ASSIGN_OR_RETURN(info.dtype, DtypeOfDescr(descr, where));
  if (fortran && info.dims.size() > 1) {
    return InvalidArgument(where + " is stored in Fortran order; save it in C order "
                           "(numpy.ascontiguousarray) first");
  }
  info.data_bytes = int64_t(DataTypeSize(info.dtype));
  for (int64_t d : info.dims) {
    if (__builtin_mul_overflow(info.data_bytes, d, &info.data_bytes)) {
      return InvalidArgument(where + " declares an array too large to hold");
    }
  }
  return info;
}

// Reads the data after the header into a new tensor, and checks that
// nothing follows it.
StatusOr<Tensor> ReadData(ArrayBytes* in, const NpyArrayInfo& info) {
  FS_ASSIGN_OR_RETURN(TensorShape shape, TensorShape::Make(info.dims));
  FS_ASSIGN_OR_RETURN(Tensor t, Tensor::Allocate(HostAllocator(), info.dtype, shape));
  FS_RETURN_IF_ERROR(in->ReadExactly(
      t.raw_data(), size_t(info.data_bytes),
      "the " + std::string(DataTypeName(info.dtype)) + shape.ToString() + " array data"));
  unsigned char extra;
  FS_ASSIGN_OR_RETURN(size_t trailing, in->Read(&extra, 1));
  if (trailing != 0) {
    return DataLoss(in->where() + " has bytes after the " + std::string(DataTypeName(info.dtype)) +
                    shape.ToString() + " array its header declares");
  }
  if (info.dtype == DataType::kBool) {
    // numpy writes 0 and 1; anything else is not a bool Flowstate may hold.
    const auto* b = static_cast<const unsigned char*>(t.raw_data());
    for (int64_t i = 0; i < info.data_bytes; ++i) {
      if (b[i] > 1) return InvalidArgument(in->where() + ": bool element " + std::to_string(i) + " is neither 0 nor 1");
    }
  }
  return t;
}

// Reads through the data without keeping it, checking its length.
Status SkipData(ArrayBytes* in, const NpyArrayInfo& info) {
  std::vector<unsigned char> buf(1 << 20);
  int64_t left = info.data_bytes;
  while (left > 0) {
    size_t n = size_t(std::min<int64_t>(left, int64_t(buf.size())));
    FS_RETURN_IF_ERROR(in->ReadExactly(buf.data(), n, "the array data its header declares"));
    left -= int64_t(n);
  }
  FS_ASSIGN_OR_RETURN(size_t trailing, in->Read(buf.data(), 1));
  if (trailing != 0) return DataLoss(in->where() + " has bytes after the array its header declares");
  return Status();
}

// The index of member `key` + ".npy" of the archive; NOT_FOUND listing
// (a few of) the members.
StatusOr<zip_uint64_t> FindMember(const ZipArchive& a, const std::string& key) {
  const std::string wanted = key + ".npy";
  zip_int64_t i = zip_name_locate(a.get(), wanted.c_str(), 0);
  if (i >= 0) return zip_uint64_t(i);
  std::string names;
  const int64_t n = a.num_entries();
  for (int64_t k = 0; k < n && k < 8; ++k) {
    const char* m = zip_get_name(a.get(), zip_uint64_t(k), 0);
    names += std::string(k ? ", '" : "'") + (m ? m : "?") + "'";
  }
  if (n > 8) names += ", ...";
  return NotFound("'" + a.name() + "' has no array '" + key + "' (member '" + wanted +
                  "'); its members: " + (names.empty() ? "none" : names));
}

template <typename Fn>
auto WithArray(DataFile file, const std::string& key, Fn fn) -> decltype(fn(nullptr)) {
  FS_ASSIGN_OR_RETURN(bool npz, IsNpzFile(file));
  if (!npz) {
    FS_ASSIGN_OR_RETURN(std::unique_ptr<InputFile> f, InputFile::Open(std::move(file)));
    FileBytes in(std::move(f));
    return fn(&in);
  }
  FS_ASSIGN_OR_RETURN(std::unique_ptr<ZipArchive> a, ZipArchive::Open(std::move(file)));
  FS_ASSIGN_OR_RETURN(zip_uint64_t index, FindMember(*a, key));
  FS_ASSIGN_OR_RETURN(std::unique_ptr<MemberBytes> in, MemberBytes::Open(*a, index));
  return fn(in.get());
}

}  // namespace

std::string_view NpyDescr(DataType dtype) {
  switch (dtype) {
    case DataType::kFloat32: return "<f4";
    case DataType::kFloat64: return "<f8";
    case DataType::kInt32: return "<i4";
    case DataType::kInt64: return "<i8";
    case DataType::kUInt8: return "|u1";
    case DataType::kBool: return "|b1";
    case DataType::kFloat16: return "<f2";
    case DataType::kBFloat16: return "<f4";  // widened: numpy has no bfloat16
    case DataType::kInvalid: break;
  }
  return "";
}

std::string NpyHeader(std::string_view descr, std::span<const int64_t> shape) {
  std::string dict = "{'descr': '" + std::string(descr) + "', 'fortran_order': False, 'shape': (";
  for (size_t i = 0; i < shape.size(); ++i) {
    dict += (i ? ", " : "") + std::to_string(shape[i]);
  }
  if (shape.size() == 1) dict += ",";
  dict += "), }";
  // magic (6) + version (2) + header length (2) + dict + padding + '\n'.
  const size_t unpadded = 10 + dict.size() + 1;
  dict.append((64 - unpadded % 64) % 64, ' ');
  dict += '\n';
  std::string out("\x93NUMPY\x01\x00", 8);
  out.push_back(char(dict.size() & 0xff));
  out.push_back(char(dict.size() >> 8));  // < 64 KiB: rank <= 64
  return out + dict;
}

StatusOr<bool> IsNpzFile(const DataFile& file) {
  unsigned char magic[4];
  ssize_t n = pread(file.fd(), magic, 4, 0);
  if (n < 0) return DataLoss("'" + file.name() + "': " + std::strerror(errno));
  return n == 4 && std::memcmp(magic, "PK\x03\x04", 4) == 0;
}

StatusOr<std::vector<NpyArrayInfo>> ListNpyArrays(DataFile file, bool read_data) {
  FS_ASSIGN_OR_RETURN(bool npz, IsNpzFile(file));
  std::vector<NpyArrayInfo> out;
  if (!npz) {
    FS_ASSIGN_OR_RETURN(std::unique_ptr<InputFile> f, InputFile::Open(std::move(file)));
    FileBytes in(std::move(f));
    FS_ASSIGN_OR_RETURN(NpyArrayInfo info, ReadHeader(&in));
    if (read_data) FS_RETURN_IF_ERROR(SkipData(&in, info));
    out.push_back(std::move(info));
    return out;
  }
  FS_ASSIGN_OR_RETURN(std::unique_ptr<ZipArchive> a, ZipArchive::Open(std::move(file)));
  const int64_t n = a->num_entries();
  if (n <= 0) return InvalidArgument("'" + a->name() + "' is an .npz archive without arrays");
  for (int64_t k = 0; k < n; ++k) {
    FS_ASSIGN_OR_RETURN(std::unique_ptr<MemberBytes> in, MemberBytes::Open(*a, zip_uint64_t(k)));
    const std::string& m = in->member();
    if (m.size() <= 4 || m.compare(m.size() - 4, 4, ".npy") != 0) {
      return InvalidArgument(in->where() + " is not an .npy array (an .npz holds only <name>.npy members)");
    }
    FS_ASSIGN_OR_RETURN(NpyArrayInfo info, ReadHeader(in.get()));
    if (read_data) FS_RETURN_IF_ERROR(SkipData(in.get(), info));
    info.name = m.substr(0, m.size() - 4);
    out.push_back(std::move(info));
  }
  return out;
}

StatusOr<Tensor> ReadNpyArray(DataFile file, const std::string& key) {
  return WithArray(std::move(file), key, [](ArrayBytes* in) -> StatusOr<Tensor> {
    FS_ASSIGN_OR_RETURN(NpyArrayInfo info, ReadHeader(in));
    return ReadData(in, info);
  });
}

StatusOr<NpyArrayInfo> ReadNpyInfo(DataFile file, const std::string& key) {
  return WithArray(std::move(file), key, [&](ArrayBytes* in) -> StatusOr<NpyArrayInfo> {
    FS_ASSIGN_OR_RETURN(NpyArrayInfo info, ReadHeader(in));
    return info;
  });
}

StatusOr<Dataset> LoadNpyDataset(const std::string& data_root,
                                 const std::map<std::string, std::string>& files) {
  if (files.empty()) return InvalidArgument("an npy dataset needs at least one file");
  std::map<std::string, Tensor> components;
  const std::string* first = nullptr;
  int64_t first_count = 0;
  for (const auto& [name, path] : files) {
    StatusOr<DataFile> opened = OpenDataFile(data_root, path);
    if (!opened.ok()) return opened.status().WithPrefix("component '" + name + "'");
    StatusOr<Tensor> t = ReadNpyArray(std::move(opened).value(), name);
    if (!t.ok()) return t.status().WithPrefix("component '" + name + "'");
    if (t->shape().rank() == 0) {
      return InvalidArgument("component '" + name + "': '" + path +
                             "' holds a scalar; a component needs one row per example");
    }
    if (first == nullptr) {
      first = &name;
      first_count = t->dim(0);
    } else if (t->dim(0) != first_count) {
      return InvalidArgument("the arrays disagree on the number of examples: component '" + *first +
                             "' has " + std::to_string(first_count) + ", component '" + name +
                             "' has " + std::to_string(t->dim(0)));
    }
    components.emplace(name, std::move(t).value());
  }
  return Dataset::Make(std::move(components));
}

}  // namespace flowstate

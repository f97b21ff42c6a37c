#include "state/idx_reader.h"

#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "graph/allocator.h"
#include "state/data_path.h"
#include "state/input_file.h"

namespace flowstate {
namespace {

StatusOr<DataType> IdxDataType(const std::string& path, uint8_t code) {
  switch (code) {
    case 0x08:
      return DataType::kUInt8;
    case 0x0C:
      return DataType::kInt32;
    case 0x0D:
      return DataType::kFloat32;
    case 0x0E:
      return DataType::kFloat64;
    case 0x09:
      return InvalidArgument("'" + path +
                             "' stores signed bytes (IDX type 0x09); Flowstate has no int8 dtype");
    case 0x0B:
      return InvalidArgument("'" + path +
                             "' stores int16 (IDX type 0x0B); Flowstate has no int16 dtype");
    default: {
      static const char kHex[] = "0123456789ABCDEF";
      const std::string hex = {kHex[code >> 4], kHex[code & 15]};
      return InvalidArgument("'" + path + "' has unknown IDX type code 0x" + hex);
    }
  }
}

uint32_t BigEndian32(const unsigned char* p) {
  return uint32_t(p[0]) << 24 | uint32_t(p[1]) << 16 | uint32_t(p[2]) << 8 | uint32_t(p[3]);
}

// Reverses the bytes of each `width`-byte element in place (IDX is
// big-endian, every supported host little-endian).
void SwapToHost(unsigned char* data, size_t bytes, size_t width) {
  if (width == 1) return;
  for (size_t i = 0; i + width <= bytes; i += width) {
    for (size_t a = i, b = i + width - 1; a < b; ++a, --b) std::swap(data[a], data[b]);
  }
}

StatusOr<IdxHeader> ReadHeader(InputFile* file) {
  const std::string& path = file->path();
  unsigned char magic[4];
  FS_RETURN_IF_ERROR(file->ReadExactly(magic, 4, "the IDX magic number"));
  if (magic[0] != 0 || magic[1] != 0) {
    return InvalidArgument("'" + path + "' is not an IDX file (bad magic number)");
  }
  IdxHeader h;
  FS_ASSIGN_OR_RETURN(h.dtype, IdxDataType(path, magic[2]));
  const int rank = magic[3];
  if (rank < 1 || rank > kMaxRank) {
    return InvalidArgument("'" + path + "' has IDX rank " + std::to_string(rank) +
                           "; supported ranks are 1 to " + std::to_string(kMaxRank));
  }
  unsigned char raw_dims[4 * kMaxRank];
  FS_RETURN_IF_ERROR(file->ReadExactly(raw_dims, 4 * size_t(rank), "the IDX dimensions"));
  for (int i = 0; i < rank; ++i) h.dims.push_back(int64_t(BigEndian32(raw_dims + 4 * i)));
  return h;
}

StatusOr<Tensor> ReadIdx(std::unique_ptr<InputFile> file) {
  const std::string& path = file->path();
  FS_ASSIGN_OR_RETURN(IdxHeader header, ReadHeader(file.get()));
  const DataType dtype = header.dtype;
  const std::vector<int64_t>& dims = header.dims;
  int64_t bytes = int64_t(DataTypeSize(dtype));
  for (int64_t d : dims) {
    if (__builtin_mul_overflow(bytes, d, &bytes)) {
      return InvalidArgument("'" + path + "' declares a tensor too large to hold");
    }
  }
  FS_ASSIGN_OR_RETURN(TensorShape shape, TensorShape::Make(dims));
  FS_ASSIGN_OR_RETURN(Tensor t, Tensor::Allocate(HostAllocator(), dtype, shape));

  auto* data = static_cast<unsigned char*>(t.raw_data());
  FS_RETURN_IF_ERROR(file->ReadExactly(
      data, size_t(bytes),
      "the " + std::string(DataTypeName(dtype)) + shape.ToString() + " IDX data"));
  // Reading past the end also lets zlib check the gzip trailer (CRC, size).
  unsigned char extra;
  FS_ASSIGN_OR_RETURN(size_t trailing, file->Read(&extra, 1));
  if (trailing != 0) {
    return DataLoss("'" + path + "' has bytes after the " + std::string(DataTypeName(dtype)) +
                    shape.ToString() + " IDX data its header declares");
  }
  SwapToHost(data, size_t(bytes), DataTypeSize(dtype));
  return t;
}

}  // namespace

StatusOr<Tensor> ReadIdxFile(const std::string& path) {
  FS_ASSIGN_OR_RETURN(std::unique_ptr<InputFile> file, InputFile::Open(path));
  return ReadIdx(std::move(file));
}

StatusOr<Tensor> ReadIdxFile(DataFile file) {
  FS_ASSIGN_OR_RETURN(std::unique_ptr<InputFile> f, InputFile::Open(std::move(file)));
  return ReadIdx(std::move(f));
}

StatusOr<IdxHeader> ReadIdxHeader(DataFile file) {
  FS_ASSIGN_OR_RETURN(std::unique_ptr<InputFile> f, InputFile::Open(std::move(file)));
  return ReadHeader(f.get());
}

StatusOr<Dataset> LoadIdxDataset(const std::string& data_root,
                                 const std::map<std::string, std::string>& files) {
  if (files.empty()) return InvalidArgument("an IDX dataset needs at least one file");
  std::map<std::string, Tensor> components;
  const std::string* first_file = nullptr;
  int64_t first_count = 0;
  for (const auto& [name, file] : files) {
    StatusOr<DataFile> opened = OpenDataFile(data_root, file);
    if (!opened.ok()) return opened.status().WithPrefix("component '" + name + "'");
    StatusOr<Tensor> t = ReadIdxFile(std::move(opened).value());
    if (!t.ok()) return t.status().WithPrefix("component '" + name + "'");
    if (first_file == nullptr) {
      first_file = &file;
      first_count = t->dim(0);
    } else if (t->dim(0) != first_count) {
      return InvalidArgument("IDX files disagree on the number of examples: '" + *first_file +
                             "' has " + std::to_string(first_count) + ", '" + file + "' has " +
                             std::to_string(t->dim(0)));
    }
    components.emplace(name, std::move(t).value());
  }
  return Dataset::Make(std::move(components));
}

}  // namespace flowstate

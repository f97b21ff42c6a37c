// IDX files: the format of MNIST and Fashion-MNIST, read into Tensors.
//
// An IDX file is a 4-byte magic number {0, 0, type, rank}, `rank` big-endian
// uint32 dimensions, then the elements in row-major order, big-endian. The
// type byte maps onto our dtypes where one exists:
//   0x08 unsigned byte -> uint8      0x0C int32   -> int32
//   0x0D float32       -> float32    0x0E float64 -> float64
// 0x09 (signed byte) and 0x0B (int16) have no Flowstate dtype and are
// refused with INVALID_ARGUMENT rather than silently widened: the pipeline
// yields what the file stores. Files may be gzip-compressed or plain (see
// InputFile); elements are converted to host byte order.
//
// Errors name the file: INVALID_ARGUMENT for a bad magic number, an
// unsupported type code, a rank of 0 or above kMaxRank, or a size that
// overflows; DATA_LOSS for data that ends early, trailing bytes after the
// last element, or a corrupt gzip stream.
//
// Free functions without shared state; thread-safe.
#ifndef FLOWSTATE_STATE_IDX_READER_H_
#define FLOWSTATE_STATE_IDX_READER_H_

#include <map>
#include <vector>
#include <string>

#include "graph/status.h"
#include "graph/tensor.h"
#include "state/data_path.h"
#include "state/dataset.h"

namespace flowstate {

// Reads one IDX file at `path` (used as given). The tensor's shape is the
// file's dimensions, so dimension 0 counts the examples.
StatusOr<Tensor> ReadIdxFile(const std::string& path);
// The same from a file opened beneath the data root; errors name file.name().
StatusOr<Tensor> ReadIdxFile(DataFile file);

// An IDX file's header: what ReadIdxFile would return, without the data.
struct IdxHeader {
  DataType dtype = DataType::kInvalid;
  std::vector<int64_t> dims;
};
StatusOr<IdxHeader> ReadIdxHeader(DataFile file);

// Reads one IDX file per component: `files` maps a component name to a path
// opened beneath `data_root` (OpenDataFile: PERMISSION_DENIED when it or a
// link on its way escapes the root, NOT_FOUND when missing). INVALID_ARGUMENT, naming both
// files, when the files disagree on dimension 0 (the number of examples);
// INVALID_ARGUMENT when `files` is empty.
StatusOr<Dataset> LoadIdxDataset(const std::string& data_root,
                                 const std::map<std::string, std::string>& files);

}  // namespace flowstate

#endif  // FLOWSTATE_STATE_IDX_READER_H_

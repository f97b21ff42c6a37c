// NumPy's array files, read and written: `.npy` (one array: a header that is
// a Python dict literal, then the elements in C order) and `.npz` (a zip
// archive of `.npy` members, stored or deflated, as numpy.savez and
// numpy.savez_compressed write it). What a job's `"format": "npy"` input
// reads (state/data_source.h), what the dataset uploads check
// (state/dataset_uploads.h), and the headers of the checkpoint export
// (checkpoints/npz.h).
//
// dtypes, both ways: float32 '<f4', float64 '<f8', int32 '<i4', int64 '<i8',
// uint8 '|u1', bool '|b1', float16 '<f2' (little-endian; '=' and, for one-byte
// types, '<' / '|' accepted). Anything else — big-endian, int8, int16,
// uint16+, complex, strings, objects, structured dtypes — is refused with
// INVALID_ARGUMENT naming the file and the descriptor; so is
// `fortran_order: True` (saved from a transposed view: `np.ascontiguousarray`
// first). Flowstate's bfloat16, which numpy lacks, is written as '<f4'.
//
// Errors name the file as the job gave it (and the member of an archive):
// INVALID_ARGUMENT for what is not an array file of a supported dtype,
// DATA_LOSS for data shorter or longer than its header declares or a corrupt
// archive. No message quotes the file's content beyond the descriptor.
//
// Free functions without shared state; thread-safe. (libzip stays out of
// this header.)
#ifndef FLOWSTATE_STATE_NPY_H_
#define FLOWSTATE_STATE_NPY_H_

#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "graph/status.h"
#include "graph/tensor.h"
#include "graph/types.h"
#include "state/data_path.h"
#include "state/dataset.h"

namespace flowstate {

// The descriptor a `dtype` is written with ("<f4"); "" for kInvalid.
std::string_view NpyDescr(DataType dtype);
// A version 1.0 `.npy` header (magic, version, length, the dict padded with
// spaces and '\n' to a multiple of 64 bytes) for an array of `shape`.
std::string NpyHeader(std::string_view descr, std::span<const int64_t> shape);

// What a header declares.
struct NpyArrayInfo {
  std::string name;  // "" for a .npy file; the member's key in an .npz ("x" for "x.npy")
  DataType dtype = DataType::kInvalid;
  std::vector<int64_t> dims;
  int64_t data_bytes = 0;  // elements * element size
};

// Whether the file's first bytes are a zip archive's ("PK\3\4"), i.e. an
// .npz, rather than an .npy.
StatusOr<bool> IsNpzFile(const DataFile& file);

// Every array of an .npy (one, name "") or .npz file (in archive order).
// With `read_data`, each array's data is read through (not kept) and its
// length checked against its header (DATA_LOSS when they differ; an
// archive's CRCs are checked too); without, only the headers are read. An
// .npz member that is not an .npy file is INVALID_ARGUMENT naming it.
StatusOr<std::vector<NpyArrayInfo>> ListNpyArrays(DataFile file, bool read_data = true);

// The array `key` of the file: the whole .npy (any `key`), or the member
// `key` + ".npy" of an .npz (NOT_FOUND naming the key and the members there
// are). ReadNpyInfo reads only its header.
StatusOr<Tensor> ReadNpyArray(DataFile file, const std::string& key);
StatusOr<NpyArrayInfo> ReadNpyInfo(DataFile file, const std::string& key);

// `files` maps a component name to a file beneath `data_root`; the
// component is the file's array (an .npy) or its member named after the
// component (an .npz), so {"x": "uploads/d.npz", "y": "uploads/d.npz"} reads
// d.npz's x.npy and y.npy. Errors are prefixed "component '<name>'";
// INVALID_ARGUMENT when the arrays disagree on dimension 0 (the number of
// examples), or one has rank 0.
StatusOr<Dataset> LoadNpyDataset(const std::string& data_root,
                                 const std::map<std::string, std::string>& files);

}  // namespace flowstate

#endif  // FLOWSTATE_STATE_NPY_H_

// A checkpoint as a NumPy .npz archive (FORMAT.md, "NumPy export"), and the
// choice between the two export formats.
//
// The archive holds one `<name>.npy` member per tensor of the snapshot, in
// the snapshot's order, stored (not compressed), so `numpy.load(path)[name]`
// is the variable with its dtype and shape, C order. Names keep their '/'
// ("dense1/w" -> member "dense1/w.npy", key "dense1/w"). The snapshot's
// metadata (input position, RNG states) is Flowstate's own and is not
// written. dtypes: float32 '<f4', float64 '<f8', int32 '<i4', int64 '<i8',
// uint8 '|u1', bool '|b1', float16 '<f2'; bfloat16, which numpy lacks, is
// written as float32 '<f4', exactly (every bfloat16 is a float32 whose low
// 16 bits are zero). The zip container is libzip's; members over 4 GiB get
// zip64 records, smaller ones plain zip records.
//
// The .fsck file (store.h, ExportSnapshot) stays the format that
// ImportSnapshot reads back; an .npz is for numpy and is refused by import
// with a message saying so.
//
// Pure functions of their arguments; thread-safe.
#ifndef FLOWSTATE_CHECKPOINTS_NPZ_H_
#define FLOWSTATE_CHECKPOINTS_NPZ_H_

#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "checkpoints/store.h"
#include "graph/status.h"
#include "graph/tensor.h"
#include "state/npy.h"

namespace flowstate::checkpoints {

enum class ExportFormat { kFsck, kNpz };
std::string_view ExportFormatName(ExportFormat format);  // "fsck", "npz"
// The file name extension, with its dot: ".fsck", ".npz".
std::string_view ExportFormatExtension(ExportFormat format);
// "fsck" or "npz"; anything else is INVALID_ARGUMENT naming the field:
// "format: expected \"fsck\" or \"npz\", got 'zip'".
StatusOr<ExportFormat> ParseExportFormat(std::string_view text);

// The .npy headers (NpyDescr, NpyHeader) are state/npy.h's.

// Writes `snapshot` to `path` as an .npz archive (via a temporary file
// beside it, renamed when complete, so `path` is whole or absent).
// INVALID_ARGUMENT for a tensor whose name cannot be a relative member path
// (empty segments, "." or "..", control characters), uninitialized or
// repeated; UNAVAILABLE when the file cannot be written. Tensor names are
// listed in `*converted` (when not null) when written in another dtype
// (bfloat16 -> float32).
Status ExportSnapshotNpz(const Snapshot& snapshot, const std::string& path,
                         std::vector<std::string>* converted = nullptr);

// ExportSnapshot or ExportSnapshotNpz.
Status ExportSnapshotAs(const Snapshot& snapshot, const std::string& path, ExportFormat format,
                        std::vector<std::string>* converted = nullptr);

}  // namespace flowstate::checkpoints

#endif  // FLOWSTATE_CHECKPOINTS_NPZ_H_

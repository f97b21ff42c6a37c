// The meaning of a StridedSlice (NumPy basic indexing: x[1:-1:2, ..., None,
// 3]), worked out once from the input shape and the begin/end/strides vectors
// and masks, and shared by the op's shape function and its kernels.
// Pure functions; thread-safe.
#ifndef FLOWSTATE_GRAPH_STRIDED_SLICE_H_
#define FLOWSTATE_GRAPH_STRIDED_SLICE_H_

#include <cstdint>
#include <vector>

#include "graph/status.h"

namespace flowstate {

struct StridedSliceMasks {
  int64_t begin = 0, end = 0, ellipsis = 0, new_axis = 0, shrink_axis = 0;
};

struct StridedSlicePlan {
  // One entry per input dimension: take `length` elements starting at
  // `begin`, stepping by `stride` (which may be negative).
  struct Dim {
    int64_t begin = 0;
    int64_t stride = 1;
    int64_t length = 0;
  };
  std::vector<Dim> dims;
  // The output's shape (shrunk axes removed, new axes inserted).
  std::vector<int64_t> output_shape;
  // True when the slice is the whole input in order (the output can share
  // the input's buffer).
  bool is_identity = false;
};

// INVALID_ARGUMENT for a zero stride, more than one ellipsis, vectors of
// different lengths, or a shrunk index out of range.
StatusOr<StridedSlicePlan> PlanStridedSlice(const std::vector<int64_t>& input_shape,
                                            const std::vector<int64_t>& begin,
                                            const std::vector<int64_t>& end,
                                            const std::vector<int64_t>& strides,
                                            const StridedSliceMasks& masks);

}  // namespace flowstate

#endif  // FLOWSTATE_GRAPH_STRIDED_SLICE_H_

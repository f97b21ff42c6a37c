#include "graph/strided_slice.h"

#include <algorithm>
#include <bit>

namespace flowstate {

StatusOr<StridedSlicePlan> PlanStridedSlice(const std::vector<int64_t>& shape,
                                            const std::vector<int64_t>& begin,
                                            const std::vector<int64_t>& end,
                                            const std::vector<int64_t>& strides,
                                            const StridedSliceMasks& m) {
  const int n = int(begin.size());
  if (end.size() != begin.size() || strides.size() != begin.size()) {
    return InvalidArgument("begin, end and strides must have the same length, got " +
                           std::to_string(begin.size()) + ", " + std::to_string(end.size()) +
                           " and " + std::to_string(strides.size()));
  }
  if (std::popcount(uint64_t(m.ellipsis)) > 1) {
    return InvalidArgument("at most one ellipsis is allowed");
  }
  const int rank = int(shape.size());
  int consuming = 0;
  for (int i = 0; i < n; ++i) {
    bool is_new = (m.new_axis >> i) & 1;
    bool is_ell = (m.ellipsis >> i) & 1;
    if (!is_new && !is_ell) ++consuming;
  }
  if (consuming > rank) {
    return InvalidArgument("slice indexes " + std::to_string(consuming) +
                           " dimensions of a rank-" + std::to_string(rank) + " input");
  }
  StridedSlicePlan plan;
  plan.dims.resize(rank);
  for (int d = 0; d < rank; ++d) plan.dims[d] = {0, 1, shape[d]};
  std::vector<bool> dim_done(rank, false);

  int d = 0;  // next input dimension
  bool saw_ellipsis = false;
  for (int i = 0; i < n; ++i) {
    if ((m.ellipsis >> i) & 1) {
      int covered = rank - consuming;
      for (int k = 0; k < covered; ++k, ++d) plan.output_shape.push_back(shape[d]);
      saw_ellipsis = true;
      continue;
    }
    if ((m.new_axis >> i) & 1) {
      plan.output_shape.push_back(1);
      continue;
    }
    const int64_t dim = shape[d];
    const int64_t s = strides[i];
    if (s == 0) return InvalidArgument("stride " + std::to_string(i) + " is zero");
    StridedSlicePlan::Dim& pd = plan.dims[d];
    if ((m.shrink_axis >> i) & 1) {
      int64_t idx = begin[i] < 0 ? begin[i] + dim : begin[i];
      if (idx < 0 || idx >= dim) {
        return InvalidArgument("index " + std::to_string(begin[i]) + " is out of range for a "
                               "dimension of size " + std::to_string(dim));
      }
      pd = {idx, 1, 1};
      ++d;
      continue;
    }
    int64_t b, e;
    if (s > 0) {
      b = ((m.begin >> i) & 1) ? 0 : begin[i];
      e = ((m.end >> i) & 1) ? dim : end[i];
      if (b < 0) b += dim;
      if (e < 0) e += dim;
      b = std::clamp<int64_t>(b, 0, dim);
      e = std::clamp<int64_t>(e, 0, dim);
      pd = {b, s, e > b ? (e - b + s - 1) / s : 0};
    } else {
      b = ((m.begin >> i) & 1) ? dim - 1 : begin[i];
      e = ((m.end >> i) & 1) ? -1 : end[i];
      if (!((m.begin >> i) & 1) && b < 0) b += dim;
      if (!((m.end >> i) & 1) && e < 0) e += dim;
      b = std::clamp<int64_t>(b, -1, dim - 1);
      e = std::clamp<int64_t>(e, -1, dim - 1);
      pd = {b, s, b > e ? (b - e + (-s) - 1) / (-s) : 0};
    }
    plan.output_shape.push_back(pd.length);
    ++d;
  }
  (void)saw_ellipsis;
  for (; d < rank; ++d) plan.output_shape.push_back(shape[d]);

  plan.is_identity = true;
  for (int k = 0; k < rank; ++k) {
    const auto& pd = plan.dims[k];
    if (!(pd.begin == 0 && pd.stride == 1 && pd.length == shape[k])) plan.is_identity = false;
  }
  return plan;
}

}  // namespace flowstate

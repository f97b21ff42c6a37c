// BCast: NumPy broadcasting of up to four tensor shapes, reduced to a form
// that element-wise kernels iterate fast.
//
//   BCast b({x.shape(), y.shape()});
//   if (!b.ok()) return InvalidArgument(b.error(), name());
//   b.ForEachRun(0, b.output_size(), [&](int64_t o, const int64_t* in, int64_t n) {
//     // output elements o .. o+n-1 read x at in[0] + k * b.inner_stride(0)
//     // and y at in[1] + k * b.inner_stride(1), k = 0 .. n-1.
//   });
//
// Broadcasting follows NumPy: shapes are aligned at their last dimension,
// missing leading dimensions count as 1, and in every dimension each input
// is either 1 (repeated) or the output's size. A 0-sized dimension
// broadcasts only with 0 or 1.
//
// For iteration the output is "collapsed": dimensions of size 1 are dropped
// and adjacent dimensions in which every input is broadcast the same way are
// merged, so [8, 16, 32] + [32] becomes [128, 32] + [1, 32] (a row
// broadcast), a same-shape or scalar operation becomes rank 1 and
// [2, 1, 3] + [4, 1] becomes [2, 4, 3] with strides (3, 0, 1) and (0, 1, 0).
// Strides are in elements and are 0 along broadcast dimensions; the inner
// stride of every input is therefore 0 (repeated) or 1 (contiguous), which
// lets a kernel pick a specialized inner loop once, outside the iteration.
//
// Besides the element-wise kernels, gradients of broadcasting ops use
// ReductionAxes() to sum an output gradient back to an input's shape.
//
// A BCast is an immutable value after construction; ForEachRun is const and
// may be called from several threads on disjoint ranges at once.
#ifndef FLOWSTATE_DEVICES_CPU_BROADCAST_H_
#define FLOWSTATE_DEVICES_CPU_BROADCAST_H_

#include <algorithm>
#include <array>
#include <cstdint>
#include <initializer_list>
#include <span>
#include <string>
#include <vector>

#include "graph/status.h"
#include "graph/tensor_shape.h"

namespace flowstate {

class BCast {
 public:
  static constexpr int kMaxInputs = 4;

  // REQUIRES: 1 <= shapes.size() <= kMaxInputs (asserted).
  explicit BCast(std::span<const TensorShape> shapes);
  BCast(std::initializer_list<TensorShape> shapes)
      : BCast(std::span<const TensorShape>(shapes.begin(), shapes.size())) {}

  // False when the shapes do not broadcast; error() then says why
  // ("shapes [2, 3] and [4] cannot be broadcast together") and nothing
  // below is meaningful.
  bool ok() const { return ok_; }
  const std::string& error() const { return error_; }
  // INVALID_ARGUMENT with error(), naming `node`. REQUIRES: !ok().
  Status ErrorStatus(std::string_view prefix, std::string node) const;

  int num_inputs() const { return num_inputs_; }
  const TensorShape& output_shape() const { return output_shape_; }
  int64_t output_size() const { return output_shape_.num_elements(); }

  // Input i has as many elements as the output, laid out the same way (no
  // broadcasting needed for it).
  bool is_full(int i) const { return input_sizes_[i] == output_size(); }
  // Input i has exactly one element.
  bool is_scalar(int i) const { return input_sizes_[i] == 1; }
  // Every input has the output's shape up to size-1 dimensions.
  bool all_full() const;

  // The collapsed iteration space (rank() >= 1; a scalar output is [1]).
  int rank() const { return rank_; }
  int64_t dim(int d) const { return dims_[d]; }
  // Element stride of input i along collapsed dimension d (0 if broadcast).
  int64_t stride(int i, int d) const { return strides_[i][d]; }
  // stride(i, rank() - 1): 0 (input i repeats along the inner run) or 1.
  int64_t inner_stride(int i) const { return strides_[i][rank_ - 1]; }
  // Bit i set when inner_stride(i) == 1. Kernels switch on it once.
  unsigned inner_contiguous_mask() const;
  // Length of the innermost collapsed dimension: the longest run.
  int64_t inner_size() const { return dims_[rank_ - 1]; }

  // Axes of output_shape() along which input i is repeated (missing from
  // it, or 1 in it where the output is not 1), ascending: summing the
  // output gradient over them and reshaping gives input i's gradient.
  std::vector<int64_t> ReductionAxes(int i) const;

  // Calls fn(int64_t out_offset, const int64_t* in_offsets, int64_t n) for
  // consecutive runs that together cover output elements [begin, end) in
  // order. A run is output elements out_offset .. out_offset + n - 1; for
  // each, input i's element is in_offsets[i] + k * inner_stride(i). Runs
  // never cross the innermost collapsed dimension, so n <= inner_size().
  // REQUIRES: ok() and 0 <= begin <= end <= output_size().
  template <typename Fn>
  void ForEachRun(int64_t begin, int64_t end, Fn&& fn) const;

 private:
  bool ok_ = true;
  std::string error_;
  int num_inputs_ = 0;
  TensorShape output_shape_;
  std::array<TensorShape, kMaxInputs> inputs_{};
  std::array<int64_t, kMaxInputs> input_sizes_{};
  int rank_ = 1;
  std::array<int64_t, kMaxRank> dims_{};
  std::array<std::array<int64_t, kMaxRank>, kMaxInputs> strides_{};
};

template <typename Fn>
void BCast::ForEachRun(int64_t begin, int64_t end, Fn&& fn) const {
  if (begin >= end) return;
  const int r = rank_, k = num_inputs_;
  std::array<int64_t, kMaxInputs> off{};
  if (r == 1) {  // same shape or scalar broadcast: one run
    for (int i = 0; i < k; ++i) off[i] = begin * strides_[i][0];
    fn(begin, off.data(), end - begin);
    return;
  }
  if (r == 2) {  // row, column or outer broadcast: rows of dims_[1]
    const int64_t inner = dims_[1];
    int64_t row = begin / inner, col = begin % inner;
    for (int64_t out = begin; out < end; ++row, col = 0) {
      int64_t n = std::min(inner - col, end - out);
      for (int i = 0; i < k; ++i) off[i] = row * strides_[i][0] + col * strides_[i][1];
      fn(out, off.data(), n);
      out += n;
    }
    return;
  }
  // The multi-index of `begin` and the input offsets it maps to.
  std::array<int64_t, kMaxRank> idx{};
  int64_t rem = begin;
  for (int d = r - 1; d >= 0; --d) {
    idx[d] = rem % dims_[d];
    rem /= dims_[d];
    for (int i = 0; i < k; ++i) off[i] += idx[d] * strides_[i][d];
  }
  const int64_t inner = dims_[r - 1];
  int64_t out = begin;
  while (out < end) {
    int64_t n = std::min(inner - idx[r - 1], end - out);
    fn(out, off.data(), n);
    out += n;
    if (out >= end) break;
    // n reached the end of the inner dimension: go to the next row.
    for (int i = 0; i < k; ++i) off[i] -= idx[r - 1] * strides_[i][r - 1];
    idx[r - 1] = 0;
    for (int d = r - 2; d >= 0; --d) {
      for (int i = 0; i < k; ++i) off[i] += strides_[i][d];
      if (++idx[d] < dims_[d]) break;
      for (int i = 0; i < k; ++i) off[i] -= dims_[d] * strides_[i][d];
      idx[d] = 0;
    }
  }
}

}  // namespace flowstate

#endif  // FLOWSTATE_DEVICES_CPU_BROADCAST_H_

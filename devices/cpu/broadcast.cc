#include "devices/cpu/broadcast.h"

#include <cassert>

namespace flowstate {

BCast::BCast(std::span<const TensorShape> shapes) {
  assert(!shapes.empty() && shapes.size() <= size_t(kMaxInputs));
  num_inputs_ = int(shapes.size());
  int out_rank = 0;
  bool same = true;
  for (int i = 0; i < num_inputs_; ++i) {
    inputs_[i] = shapes[i];
    input_sizes_[i] = shapes[i].num_elements();
    out_rank = std::max(out_rank, shapes[i].rank());
    same = same && shapes[i] == shapes[0];
  }
  if (same) {  // the common case: no broadcasting at all
    output_shape_ = shapes[0];
    rank_ = 1;
    dims_[0] = output_shape_.num_elements();
    for (int i = 0; i < num_inputs_; ++i) strides_[i][0] = 1;
    return;
  }

  // The output shape, and per output dimension which inputs repeat.
  std::array<int64_t, kMaxRank> out{};
  std::array<unsigned, kMaxRank> repeat{};  // bit i: input i is 1 there
  for (int d = 0; d < out_rank; ++d) {
    out[d] = 1;
    for (int i = 0; i < num_inputs_; ++i) {
      int di = d - (out_rank - shapes[i].rank());
      int64_t s = di >= 0 ? shapes[i].dim(di) : 1;
      if (s == 1) continue;
      if (out[d] == 1) {
        out[d] = s;
      } else if (out[d] != s) {
        ok_ = false;
      }
    }
    for (int i = 0; i < num_inputs_; ++i) {
      int di = d - (out_rank - shapes[i].rank());
      int64_t s = di >= 0 ? shapes[i].dim(di) : 1;
      if (s == 1 && out[d] != 1) repeat[d] |= 1u << i;
    }
  }
  if (!ok_) {
    error_ = "shapes ";
    for (int i = 0; i < num_inputs_; ++i) {
      if (i > 0) error_ += i + 1 == num_inputs_ ? " and " : ", ";
      error_ += shapes[i].ToString();
    }
    error_ += " cannot be broadcast together";
    return;
  }
  output_shape_ = TensorShape(std::span<const int64_t>(out.data(), size_t(out_rank)));

  // Collapse: drop size-1 dimensions, merge neighbours repeated alike.
  std::array<unsigned, kMaxRank> cmask{};
  rank_ = 0;
  for (int d = 0; d < out_rank; ++d) {
    if (out[d] == 1) continue;
    if (rank_ > 0 && cmask[rank_ - 1] == repeat[d]) {
      dims_[rank_ - 1] *= out[d];
    } else {
      dims_[rank_] = out[d];
      cmask[rank_] = repeat[d];
      ++rank_;
    }
  }
  if (rank_ == 0) {  // every dimension is 1
    rank_ = 1;
    dims_[0] = 1;
    cmask[0] = 0;
  }
  for (int i = 0; i < num_inputs_; ++i) {
    int64_t acc = 1;
    for (int d = rank_ - 1; d >= 0; --d) {
      if (cmask[d] & (1u << i)) {
        strides_[i][d] = 0;
      } else {
        strides_[i][d] = acc;
        acc *= dims_[d];
      }
    }
  }
}

Status BCast::ErrorStatus(std::string_view prefix, std::string node) const {
  std::string m(prefix);
  if (!m.empty()) m += ": ";
  return InvalidArgument(m + error_, std::move(node));
}

bool BCast::all_full() const {
  for (int i = 0; i < num_inputs_; ++i) {
    if (!is_full(i)) return false;
  }
  return true;
}

unsigned BCast::inner_contiguous_mask() const {
  unsigned m = 0;
  for (int i = 0; i < num_inputs_; ++i) {
    if (strides_[i][rank_ - 1] != 0) m |= 1u << i;
  }
  return m;
}

std::vector<int64_t> BCast::ReductionAxes(int i) const {
  std::vector<int64_t> axes;
  const TensorShape& in = inputs_[i];
  int out_rank = output_shape_.rank();
  for (int d = 0; d < out_rank; ++d) {
    int di = d - (out_rank - in.rank());
    if (di < 0 || (in.dim(di) == 1 && output_shape_.dim(d) != 1)) axes.push_back(d);
  }
  return axes;
}

}  // namespace flowstate

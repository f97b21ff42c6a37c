#include "graph/tensor_shape.h"

#include <cassert>

namespace flowstate {

TensorShape::TensorShape(std::initializer_list<int64_t> dims)
    : TensorShape(std::span<const int64_t>(dims.begin(), dims.size())) {}

TensorShape::TensorShape(std::span<const int64_t> dims) {
  assert(dims.size() <= size_t(kMaxRank));
  rank_ = static_cast<int8_t>(dims.size());
  for (int i = 0; i < rank_; ++i) {
    assert(dims[i] >= 0);
    dims_[i] = dims[i];
  }
  Recompute();
}

StatusOr<TensorShape> TensorShape::Make(std::span<const int64_t> dims) {
  if (dims.size() > size_t(kMaxRank)) {
    return InvalidArgument("shape has rank " + std::to_string(dims.size()) +
                           ", more than the maximum " + std::to_string(kMaxRank));
  }
  int64_t n = 1;
  for (int64_t d : dims) {
    if (d < 0) {
      return InvalidArgument("shape dimension " + std::to_string(d) +
                             " is negative");
    }
    if (d != 0 && n > (int64_t(1) << 62) / d) {
      return InvalidArgument("shape has too many elements");
    }
    n *= d;
  }
  return TensorShape(dims);
}

void TensorShape::Recompute() {
  int64_t n = 1;
  for (int i = 0; i < rank_; ++i) n *= dims_[i];
  num_elements_ = n;
}

void TensorShape::set_dim(int i, int64_t d) {
  assert(i >= 0 && i < rank_ && d >= 0);
  dims_[i] = d;
  Recompute();
}

void TensorShape::AddDim(int64_t d) {
  assert(rank_ < kMaxRank && d >= 0);
  dims_[rank_++] = d;
  num_elements_ *= d;
}

void TensorShape::InsertDim(int i, int64_t d) {
  assert(rank_ < kMaxRank && i >= 0 && i <= rank_);
  for (int j = rank_; j > i; --j) dims_[j] = dims_[j - 1];
  dims_[i] = d;
  ++rank_;
  Recompute();
}

void TensorShape::RemoveDim(int i) {
  assert(i >= 0 && i < rank_);
  for (int j = i; j + 1 < rank_; ++j) dims_[j] = dims_[j + 1];
  --rank_;
  Recompute();
}

bool TensorShape::operator==(const TensorShape& o) const {
  if (rank_ != o.rank_) return false;
  for (int i = 0; i < rank_; ++i) {
    if (dims_[i] != o.dims_[i]) return false;
  }
  return true;
}

static std::string DimsToString(const int64_t* d, int n) {
  std::string s = "[";
  for (int i = 0; i < n; ++i) {
    if (i) s += ", ";
    s += d[i] < 0 ? std::string("?") : std::to_string(d[i]);
  }
  return s + "]";
}

std::string TensorShape::ToString() const { return DimsToString(dims_.data(), rank_); }

bool PartialShape::IsFullyDefined() const {
  if (!known_) return false;
  for (int64_t d : dims_) {
    if (d < 0) return false;
  }
  return true;
}

int64_t PartialShape::num_elements() const {
  if (!IsFullyDefined()) return -1;
  int64_t n = 1;
  for (int64_t d : dims_) n *= d;
  return n;
}

bool PartialShape::IsCompatibleWith(const TensorShape& shape) const {
  if (!known_) return true;
  if (int(dims_.size()) != shape.rank()) return false;
  for (int i = 0; i < shape.rank(); ++i) {
    if (dims_[i] >= 0 && dims_[i] != shape.dim(i)) return false;
  }
  return true;
}

bool PartialShape::IsCompatibleWith(const PartialShape& other) const {
  if (!known_ || !other.known_) return true;
  if (dims_.size() != other.dims_.size()) return false;
  for (size_t i = 0; i < dims_.size(); ++i) {
    if (dims_[i] >= 0 && other.dims_[i] >= 0 && dims_[i] != other.dims_[i]) {
      return false;
    }
  }
  return true;
}

TensorShape PartialShape::ToTensorShape() const {
  assert(IsFullyDefined());
  return TensorShape(std::span<const int64_t>(dims_));
}

std::string PartialShape::ToString() const {
  if (!known_) return "<unknown>";
  return DimsToString(dims_.data(), int(dims_.size()));
}

}  // namespace flowstate

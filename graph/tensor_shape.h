// TensorShape: the dimensions of a concrete tensor (rank <= kMaxRank, every
// dimension >= 0), stored inline without allocation. PartialShape: a shape
// as known before a graph runs, where the rank or any dimension may be
// unknown (-1); shape inference works on PartialShapes.
//
// Both are value types: cheap to copy, not synchronized.
#ifndef FLOWSTATE_GRAPH_TENSOR_SHAPE_H_
#define FLOWSTATE_GRAPH_TENSOR_SHAPE_H_

#include <array>
#include <cstdint>
#include <initializer_list>
#include <span>
#include <string>
#include <vector>

#include "graph/status.h"

namespace flowstate {

inline constexpr int kMaxRank = 8;

class TensorShape {
 public:
  TensorShape() = default;  // a scalar
  // REQUIRES: dims.size() <= kMaxRank and every dim >= 0 (asserted). Use
  // Make() to check untrusted input.
  TensorShape(std::initializer_list<int64_t> dims);
  explicit TensorShape(std::span<const int64_t> dims);

  static StatusOr<TensorShape> Make(std::span<const int64_t> dims);

  int rank() const { return rank_; }
  int64_t dim(int i) const { return dims_[i]; }
  std::span<const int64_t> dims() const { return {dims_.data(), size_t(rank_)}; }
  std::vector<int64_t> dim_vector() const { return {dims_.begin(), dims_.begin() + rank_}; }
  int64_t num_elements() const { return num_elements_; }

  void set_dim(int i, int64_t d);
  void AddDim(int64_t d);          // REQUIRES: rank() < kMaxRank
  void InsertDim(int i, int64_t d);
  void RemoveDim(int i);

  bool IsScalar() const { return rank_ == 0; }
  bool IsVector() const { return rank_ == 1; }
  bool IsMatrix() const { return rank_ == 2; }

  bool operator==(const TensorShape& o) const;
  bool operator!=(const TensorShape& o) const { return !(*this == o); }

  std::string ToString() const;  // "[2, 3]"

 private:
  void Recompute();
  std::array<int64_t, kMaxRank> dims_{};
  int8_t rank_ = 0;
  int64_t num_elements_ = 1;
};

class PartialShape {
 public:
  PartialShape() = default;  // unknown rank
  PartialShape(std::initializer_list<int64_t> dims) : known_(true), dims_(dims) {}
  explicit PartialShape(std::vector<int64_t> dims) : known_(true), dims_(std::move(dims)) {}
  PartialShape(const TensorShape& s) : known_(true), dims_(s.dim_vector()) {}

  static PartialShape Unknown() { return PartialShape(); }
  static PartialShape UnknownOfRank(int rank) {
    return PartialShape(std::vector<int64_t>(rank, -1));
  }

  bool rank_known() const { return known_; }
  int rank() const { return known_ ? int(dims_.size()) : -1; }  // -1 when unknown
  int64_t dim(int i) const { return dims_[i]; }  // -1 when unknown
  const std::vector<int64_t>& dims() const { return dims_; }
  bool IsFullyDefined() const;
  // -1 unless fully defined.
  int64_t num_elements() const;

  // True when a tensor of `shape` is a possible value.
  bool IsCompatibleWith(const TensorShape& shape) const;
  bool IsCompatibleWith(const PartialShape& other) const;
  // REQUIRES: IsFullyDefined().
  TensorShape ToTensorShape() const;

  bool operator==(const PartialShape& o) const { return known_ == o.known_ && dims_ == o.dims_; }
  std::string ToString() const;  // "[?, 784]" or "<unknown>"

 private:
  bool known_ = false;
  std::vector<int64_t> dims_;
};

}  // namespace flowstate

#endif  // FLOWSTATE_GRAPH_TENSOR_SHAPE_H_

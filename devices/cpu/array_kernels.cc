// Array kernels that reshape, describe, fill or permute a tensor: Reshape,
// ExpandDims, Squeeze (all zero-copy), Shape, Size, Rank, Fill, Range and
// Transpose. RegisterArrayKernels also registers the kernels of
// slice_kernels.cc (Slice, StridedSlice, Concat, Split) and gather_kernels.cc
// (Gather, Tile).
//
// Data movement dispatches on the element size, so one instantiation
// serves float32, int32 and so on; every kernel is registered for all
// eight dtypes (its "T" constraint). Index-typed inputs (shape, perm, axis,
// dims) may be int32 or int64 and are read at run time.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "devices/cpu/array_kernel_util.h"

namespace flowstate::internal {
namespace {

std::string ShapeString(const std::vector<int64_t>& dims) {
  std::string s = "[";
  for (size_t i = 0; i < dims.size(); ++i) s += (i ? ", " : "") + std::to_string(dims[i]);
  return s + "]";
}

// Output 0 = `in` viewed with `shape` (same element count).
void SetReshapedOutput(OpKernelContext* ctx, const Tensor& in, const TensorShape& shape) {
  ctx->set_output(0, in.Reshaped(shape).value());
}

class ReshapeOp final : public OpKernel {
 public:
  using OpKernel::OpKernel;
  bool IsExpensive() const override { return false; }

  void Compute(OpKernelContext* ctx) override {
    const Tensor& in = ctx->input(0);
    std::vector<int64_t> dims;
    FS_OP_REQUIRES_OK(ctx, ReadIndexVector(*this, ctx->input(1), "shape", &dims));
    FS_OP_REQUIRES(ctx, dims.size() <= size_t(kMaxRank),
                   KernelError(*this, "shape " + ShapeString(dims) + " has more than " +
                                          std::to_string(kMaxRank) + " dimensions"));
    int unknown = -1;
    int64_t known = 1;
    for (int i = 0; i < int(dims.size()); ++i) {
      if (dims[i] == -1) {
        FS_OP_REQUIRES(ctx, unknown < 0,
                       KernelError(*this, "shape " + ShapeString(dims) + " has more than one -1"));
        unknown = i;
        continue;
      }
      FS_OP_REQUIRES(ctx, dims[i] >= 0,
                     KernelError(*this, "shape " + ShapeString(dims) +
                                            " has a negative dimension " + std::to_string(dims[i])));
      FS_OP_REQUIRES(ctx, !__builtin_mul_overflow(known, dims[i], &known),
                     KernelError(*this, "shape " + ShapeString(dims) + " has too many elements"));
    }
    const int64_t n = in.num_elements();
    const std::string what = "cannot reshape " + in.shape().ToString() + " (" +
                             std::to_string(n) + " elements) to " + ShapeString(dims);
    if (unknown >= 0) {
      FS_OP_REQUIRES(ctx, known != 0 && n % known == 0, KernelError(*this, what));
      dims[unknown] = n / known;
    } else {
      FS_OP_REQUIRES(ctx, known == n, KernelError(*this, what));
    }
    SetReshapedOutput(ctx, in, TensorShape(dims));
  }
};

class ExpandDimsOp final : public OpKernel {
 public:
  using OpKernel::OpKernel;
  bool IsExpensive() const override { return false; }

  void Compute(OpKernelContext* ctx) override {
    const Tensor& in = ctx->input(0);
    int64_t axis;
    FS_OP_REQUIRES_OK(ctx, ReadIndexScalar(*this, ctx->input(1), "axis", &axis));
    const int rank = in.rank();
    FS_OP_REQUIRES(ctx, axis >= -rank - 1 && axis <= rank,
                   KernelError(*this, "axis " + std::to_string(axis) + " is out of range [" +
                                          std::to_string(-rank - 1) + ", " +
                                          std::to_string(rank) + "] for an input of shape " +
                                          in.shape().ToString()));
    FS_OP_REQUIRES(ctx, rank < kMaxRank,
                   KernelError(*this, "the input already has the maximum rank " +
                                          std::to_string(kMaxRank)));
    if (axis < 0) axis += rank + 1;
    TensorShape shape = in.shape();
    shape.InsertDim(int(axis), 1);
    SetReshapedOutput(ctx, in, shape);
  }
};

class SqueezeOp final : public OpKernel {
 public:
  explicit SqueezeOp(OpKernelConstruction* c) : OpKernel(c) { (void)c->GetAttr("axis", &axes_); }
  bool IsExpensive() const override { return false; }

  void Compute(OpKernelContext* ctx) override {
    const Tensor& in = ctx->input(0);
    const int rank = in.rank();
    bool drop[kMaxRank] = {};
    for (int64_t a : axes_) {
      FS_OP_REQUIRES(ctx, a >= -rank && a < rank,
                     KernelError(*this, "axis " + std::to_string(a) +
                                            " is out of range for an input of shape " +
                                            in.shape().ToString()));
      const int k = int(a < 0 ? a + rank : a);
      FS_OP_REQUIRES(ctx, in.dim(k) == 1,
                     KernelError(*this, "cannot squeeze dimension " + std::to_string(a) +
                                            " of shape " + in.shape().ToString() +
                                            ": its size is not 1"));
      drop[k] = true;
    }
    TensorShape shape;
    for (int k = 0; k < rank; ++k) {
      if (axes_.empty() ? in.dim(k) == 1 : drop[k]) continue;
      shape.AddDim(in.dim(k));
    }
    SetReshapedOutput(ctx, in, shape);
  }

 private:
  std::vector<int64_t> axes_;
};

// Writes `values` into output 0 as int32 or int64 (the kernel's out_type).
void EmitIndexOutput(OpKernelContext* ctx, const OpKernel& k, const TensorShape& shape,
                     std::span<const int64_t> values) {
  const bool is32 = k.output_type(0) == DataType::kInt32;
  for (int64_t v : values) {
    FS_OP_REQUIRES(ctx, !is32 || v <= std::numeric_limits<int32_t>::max(),
                   KernelError(k, "value " + std::to_string(v) +
                                      " does not fit in out_type int32; use int64"));
  }
  Tensor* out = nullptr;
  if (!ctx->allocate_output(0, shape, &out).ok()) return;
  for (size_t i = 0; i < values.size(); ++i) {
    if (is32) {
      out->data<int32_t>()[i] = int32_t(values[i]);
    } else {
      out->data<int64_t>()[i] = values[i];
    }
  }
}

class ShapeOp final : public OpKernel {
 public:
  using OpKernel::OpKernel;
  bool IsExpensive() const override { return false; }
  void Compute(OpKernelContext* ctx) override {
    const TensorShape& s = ctx->input(0).shape();
    EmitIndexOutput(ctx, *this, TensorShape({int64_t(s.rank())}), s.dims());
  }
};

class SizeOp final : public OpKernel {
 public:
  using OpKernel::OpKernel;
  bool IsExpensive() const override { return false; }
  void Compute(OpKernelContext* ctx) override {
    const int64_t n = ctx->input(0).num_elements();
    EmitIndexOutput(ctx, *this, TensorShape(), std::span<const int64_t>(&n, 1));
  }
};

class RankOp final : public OpKernel {
 public:
  using OpKernel::OpKernel;
  bool IsExpensive() const override { return false; }
  void Compute(OpKernelContext* ctx) override {
    ctx->set_output(0, Tensor::Scalar<int32_t>(ctx->input(0).rank()));
  }
};

class FillOp final : public OpKernel {
 public:
  using OpKernel::OpKernel;

  void Compute(OpKernelContext* ctx) override {
    std::vector<int64_t> dims;
    FS_OP_REQUIRES_OK(ctx, ReadIndexVector(*this, ctx->input(0), "dims", &dims));
    const Tensor& value = ctx->input(1);
    FS_OP_REQUIRES(ctx, value.rank() == 0,
                   KernelError(*this, "value must be a scalar, got shape " +
                                          value.shape().ToString()));
    StatusOr<TensorShape> shape = TensorShape::Make(dims);
    FS_OP_REQUIRES(ctx, shape.ok(),
                   KernelError(*this, "dims " + ShapeString(dims) + ": " +
                                          shape.status().message()));
    Tensor* out = nullptr;
    if (!ctx->allocate_output(0, *shape, &out).ok()) return;
    DispatchByElementSize(value.dtype(), [&]<typename U>() {
      U v;
      std::memcpy(&v, value.raw_data(), sizeof(U));
      U* d = static_cast<U*>(out->raw_data());
      ctx->device()->ParallelFor(out->num_elements(), int64_t(sizeof(U)),
                                 [&](int64_t b, int64_t e) { std::fill(d + b, d + e, v); });
    });
  }
};

template <typename T>
class RangeOp final : public OpKernel {
 public:
  using OpKernel::OpKernel;

  void Compute(OpKernelContext* ctx) override {
    for (int i = 0; i < 3; ++i) {
      static constexpr const char* kNames[] = {"start", "limit", "delta"};
      FS_OP_REQUIRES(ctx, ctx->input(i).rank() == 0,
                     KernelError(*this, std::string(kNames[i]) + " must be a scalar, got shape " +
                                            ctx->input(i).shape().ToString()));
    }
    const T start = ctx->input(0).scalar<T>();
    const T limit = ctx->input(1).scalar<T>();
    const T delta = ctx->input(2).scalar<T>();
    FS_OP_REQUIRES(ctx, delta != T(0), KernelError(*this, "delta must not be zero"));
    int64_t n = 0;
    if constexpr (std::is_integral_v<T>) {
      // Differences in unsigned arithmetic, exact over the whole int64 range.
      if ((delta > 0 && limit > start) || (delta < 0 && limit < start)) {
        const uint64_t span = delta > 0 ? uint64_t(limit) - uint64_t(start)
                                        : uint64_t(start) - uint64_t(limit);
        const uint64_t step = delta > 0 ? uint64_t(delta) : uint64_t(0) - uint64_t(delta);
        const uint64_t count = span / step + (span % step != 0);
        FS_OP_REQUIRES(ctx, count < (uint64_t(1) << 62),
                       KernelError(*this, "the range has too many elements"));
        n = int64_t(count);
      }
    } else {
      // In double, as the shape function counts, so both agree.
      const double s = double(start), l = double(limit), d = double(delta);
      if ((d > 0 && l > s) || (d < 0 && l < s)) {
        const double count = std::ceil((l - s) / d);
        FS_OP_REQUIRES(ctx, count < 0x1p62,
                       KernelError(*this, "the range has too many elements"));
        n = int64_t(count);
      }
    }
    Tensor* out = nullptr;
    if (!ctx->allocate_output(0, TensorShape({n}), &out).ok()) return;
    T* o = out->data<T>();
    if constexpr (std::is_integral_v<T>) {
      const uint64_t s = uint64_t(int64_t(start)), d = uint64_t(int64_t(delta));
      for (int64_t i = 0; i < n; ++i) o[i] = T(int64_t(s + uint64_t(i) * d));
    } else {
      const double s = double(start), d = double(delta);
      for (int64_t i = 0; i < n; ++i) o[i] = T(s + double(i) * d);
    }
  }
};

class TransposeOp final : public OpKernel {
 public:
  using OpKernel::OpKernel;

  void Compute(OpKernelContext* ctx) override {
    const Tensor& in = ctx->input(0);
    std::vector<int64_t> perm;
    FS_OP_REQUIRES_OK(ctx, ReadIndexVector(*this, ctx->input(1), "perm", &perm));
    const int rank = in.rank();
    FS_OP_REQUIRES(ctx, int(perm.size()) == rank,
                   KernelError(*this, "perm " + ShapeString(perm) + " has " +
                                          std::to_string(perm.size()) +
                                          " entries for an input of shape " +
                                          in.shape().ToString()));
    bool seen[kMaxRank] = {};
    for (int64_t p : perm) {
      FS_OP_REQUIRES(ctx, p >= 0 && p < rank && !seen[p],
                     KernelError(*this, "perm " + ShapeString(perm) +
                                            " is not a permutation of [0, " +
                                            std::to_string(rank) + ")"));
      seen[p] = true;
    }
    int64_t in_strides[kMaxRank];
    RowMajorStrides(in.shape(), in_strides);
    StridedCopyPlan plan;
    plan.rank = rank;
    TensorShape out_shape;
    for (int i = 0; i < rank; ++i) {
      plan.len[i] = in.dim(int(perm[i]));
      plan.stride[i] = in_strides[perm[i]];
      out_shape.AddDim(plan.len[i]);
    }
    // An order-preserving permutation (identity, or one that only moves
    // dimensions of size 1) simplifies to one run and shares the buffer.
    EmitStridedCopy(ctx, in, plan, out_shape);
  }
};

}  // namespace

void RegisterArrayKernels(KernelRegistry* r) {
  for (DataType t : AllDataTypes()) {
    auto def = [t](const char* op) { return KernelDef(op).TypeConstraint("T", t); };
    MustRegister(r, def("Reshape"), MakeKernel<ReshapeOp>);
    MustRegister(r, def("ExpandDims"), MakeKernel<ExpandDimsOp>);
    MustRegister(r, def("Squeeze"), MakeKernel<SqueezeOp>);
    MustRegister(r, def("Shape"), MakeKernel<ShapeOp>);
    MustRegister(r, def("Size"), MakeKernel<SizeOp>);
    MustRegister(r, def("Rank"), MakeKernel<RankOp>);
    MustRegister(r, def("Fill"), MakeKernel<FillOp>);
    MustRegister(r, def("Transpose"), MakeKernel<TransposeOp>);
  }
  auto range = [](DataType t) { return KernelDef("Range").TypeConstraint("Tidx", t); };
  MustRegister(r, range(DataType::kFloat32), MakeKernel<RangeOp<float>>);
  MustRegister(r, range(DataType::kFloat64), MakeKernel<RangeOp<double>>);
  MustRegister(r, range(DataType::kInt32), MakeKernel<RangeOp<int32_t>>);
  MustRegister(r, range(DataType::kInt64), MakeKernel<RangeOp<int64_t>>);
  RegisterSliceKernels(r);
  RegisterGatherKernels(r);
}

}  // namespace flowstate::internal

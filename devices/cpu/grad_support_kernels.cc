// Shape and data-movement ops that gradient functions emit:
// BroadcastGradientArgs, BroadcastTo, ConcatOffset, StridedSliceGrad,
// InvertPermutation and ReducedShape. (The summing ones, UnsortedSegmentSum,
// TileGrad and ProdGrad, are in grad_support_reduce_kernels.cc.)
//
// Semantics (TensorFlow's unless noted):
// - BroadcastGradientArgs(s0, s1): shapes aligned at the last dimension,
//   missing leading dimensions counting as 1. r_i lists, ascending, the axes
//   of the broadcast shape where operand i has 1 and the result does not,
//   plus the axes where every operand has 1 (both r0 and r1 list those).
//   Incompatible shapes or negative dimensions are INVALID_ARGUMENT.
// - BroadcastTo(input, shape): NumPy broadcasting of input to exactly
//   `shape` (input may not be larger in any dimension); every dtype, copied
//   by element size; the input's buffer is shared when nothing changes.
// - ConcatOffset(concat_dim, shapes...): concat_dim may be negative; every
//   shape must have the same rank and agree outside concat_dim.
// - StridedSliceGrad(shape, begin, end, strides, dy): a zero tensor of
//   `shape` with dy written where StridedSlice (with the same masks) read;
//   dy must have the slice's shape. The slice is planned by
//   graph/strided_slice.h, exactly as the forward kernel plans it. When the
//   slice is the whole input, the output shares dy's buffer.
// - InvertPermutation(x): y[x[i]] = i; x must be a permutation of 0..n-1
//   (a value out of range or repeated is INVALID_ARGUMENT).
// - ReducedShape(input_shape, axes): input_shape with the reduced axes set
//   to 1; empty axes = every axis; negative axes count from the end.
#include <algorithm>
#include <cstring>

#include "devices/cpu/broadcast.h"
#include "devices/cpu/nn_grad_support_common.h"
#include "graph/strided_slice.h"

namespace flowstate::internal {
namespace {

using nn::VectorString;

// Writes `v` into output `o` as a vector of T.
template <typename T>
void EmitVector(OpKernelContext* ctx, int o, const std::vector<int64_t>& v) {
  Tensor* out = nullptr;
  if (!ctx->allocate_output(o, TensorShape({int64_t(v.size())}), &out).ok()) return;
  T* d = out->template data<T>();
  for (size_t i = 0; i < v.size(); ++i) d[i] = T(v[i]);
}

Status CheckNonNegative(const OpKernel& k, const std::vector<int64_t>& dims, const char* what) {
  for (int64_t d : dims) {
    if (d < 0) {
      return KernelError(
          k, std::string(what) + " " + VectorString(dims) + " has a negative dimension");
    }
  }
  return Status();
}

// ---------------------------------------------------------------------------

template <typename T>
class BroadcastGradientArgsOp final : public OpKernel {
 public:
  using OpKernel::OpKernel;
  bool IsExpensive() const override { return false; }

  void Compute(OpKernelContext* ctx) override {
    std::vector<int64_t> s0, s1;
    FS_OP_REQUIRES_OK(ctx, ReadIndexVector(*this, ctx->input(0), "s0", &s0));
    FS_OP_REQUIRES_OK(ctx, ReadIndexVector(*this, ctx->input(1), "s1", &s1));
    FS_OP_REQUIRES_OK(ctx, CheckNonNegative(*this, s0, "s0"));
    FS_OP_REQUIRES_OK(ctx, CheckNonNegative(*this, s1, "s1"));
    const int64_t rank = int64_t(std::max(s0.size(), s1.size()));
    const int64_t pad0 = rank - int64_t(s0.size()), pad1 = rank - int64_t(s1.size());
    std::vector<int64_t> r0, r1;
    for (int64_t a = 0; a < rank; ++a) {
      const int64_t d0 = a < pad0 ? 1 : s0[size_t(a - pad0)];
      const int64_t d1 = a < pad1 ? 1 : s1[size_t(a - pad1)];
      if (d0 == d1) {
        if (d0 == 1) {
          r0.push_back(a);
          r1.push_back(a);
        }
      } else if (d0 == 1) {
        r0.push_back(a);
      } else if (d1 == 1) {
        r1.push_back(a);
      } else {
        ctx->SetStatus(
            KernelError(*this, "shapes " + VectorString(s0) + " and " + VectorString(s1) +
                                   " cannot be broadcast together (axis " + std::to_string(a) +
                                   " of the "
                                   "result: " +
                                   std::to_string(d0) + " vs " + std::to_string(d1) + ")"));
        return;
      }
    }
    EmitVector<T>(ctx, 0, r0);
    EmitVector<T>(ctx, 1, r1);
  }
};

// ---------------------------------------------------------------------------

class BroadcastToOp final : public OpKernel {
 public:
  using OpKernel::OpKernel;

  void Compute(OpKernelContext* ctx) override {
    const Tensor& in = ctx->input(0);
    std::vector<int64_t> dims;
    FS_OP_REQUIRES_OK(ctx, ReadIndexVector(*this, ctx->input(1), "shape", &dims));
    StatusOr<TensorShape> target = TensorShape::Make(dims);
    FS_OP_REQUIRES(ctx, target.ok(), KernelError(*this, "shape: " + target.status().message()));
    const std::string cannot =
        "cannot broadcast input of shape " + in.shape().ToString() + " to " + target->ToString();
    FS_OP_REQUIRES(ctx, in.rank() <= target->rank(), KernelError(*this, cannot));
    if (in.shape() == *target) {
      ctx->forward_input(0, 0);
      return;
    }
    BCast b({in.shape(), *target});
    FS_OP_REQUIRES(ctx, b.ok() && b.output_shape() == *target, KernelError(*this, cannot));
    Tensor* out = nullptr;
    FS_OP_REQUIRES_OK(ctx, ctx->allocate_output(0, *target, &out));
    DispatchByElementSize(in.dtype(), [&]<typename U>() {
      const U* src = static_cast<const U*>(in.raw_data());
      U* dst = static_cast<U*>(out->raw_data());
      const bool contiguous = b.inner_stride(0) == 1;
      cwise::Shard(ctx, b.output_size(), 1, [&](int64_t begin, int64_t end) {
        b.ForEachRun(begin, end, [&](int64_t o, const int64_t* off, int64_t n) {
          if (contiguous) {
            std::memcpy(dst + o, src + off[0], size_t(n) * sizeof(U));
          } else {
            std::fill_n(dst + o, n, src[off[0]]);
          }
        });
      });
    });
  }
};

// ---------------------------------------------------------------------------

class ConcatOffsetOp final : public OpKernel {
 public:
  using OpKernel::OpKernel;
  bool IsExpensive() const override { return false; }

  void Compute(OpKernelContext* ctx) override {
    const int n = ctx->num_inputs() - 1;
    int64_t axis = 0;
    FS_OP_REQUIRES_OK(ctx, ReadIndexScalar(*this, ctx->input(0), "concat_dim", &axis));
    std::vector<std::vector<int64_t>> shapes(static_cast<size_t>(n));
    for (int i = 0; i < n; ++i) {
      const std::string what = "shape " + std::to_string(i);
      FS_OP_REQUIRES_OK(ctx, ReadIndexVector(*this, ctx->input(1 + i), what.c_str(), &shapes[i]));
    }
    const int64_t rank = int64_t(shapes[0].size());
    FS_OP_REQUIRES(ctx, axis >= -rank && axis < rank,
                   KernelError(*this, "concat_dim " + std::to_string(axis) + " is out of range [" +
                                          std::to_string(-rank) + ", " + std::to_string(rank) +
                                          ") for shapes of rank " + std::to_string(rank)));
    const size_t a = size_t(axis < 0 ? axis + rank : axis);
    int64_t offset = 0;
    for (int i = 0; i < n; ++i) {
      const std::vector<int64_t>& s = shapes[size_t(i)];
      bool same = int64_t(s.size()) == rank;
      for (size_t d = 0; same && d < s.size(); ++d) same = d == a || s[d] == shapes[0][d];
      FS_OP_REQUIRES(ctx, same,
                     KernelError(*this, "shape " + std::to_string(i) + " " + VectorString(s) +
                                            " does not match shape 0 " + VectorString(shapes[0]) +
                                            " outside dimension " + std::to_string(a)));
      std::vector<int64_t> off(size_t(rank), 0);
      off[a] = offset;
      offset += s[a];
      EmitVector<int32_t>(ctx, i, off);
    }
  }
};

// ---------------------------------------------------------------------------

class StridedSliceGradOp final : public OpKernel {
 public:
  explicit StridedSliceGradOp(OpKernelConstruction* c) : OpKernel(c) {
    (void)c->GetAttr("begin_mask", &masks_.begin);
    (void)c->GetAttr("end_mask", &masks_.end);
    (void)c->GetAttr("ellipsis_mask", &masks_.ellipsis);
    (void)c->GetAttr("new_axis_mask", &masks_.new_axis);
    (void)c->GetAttr("shrink_axis_mask", &masks_.shrink_axis);
  }

  void Compute(OpKernelContext* ctx) override {
    std::vector<int64_t> dims, begin, end, strides;
    FS_OP_REQUIRES_OK(ctx, ReadIndexVector(*this, ctx->input(0), "shape", &dims));
    FS_OP_REQUIRES_OK(ctx, ReadIndexVector(*this, ctx->input(1), "begin", &begin));
    FS_OP_REQUIRES_OK(ctx, ReadIndexVector(*this, ctx->input(2), "end", &end));
    FS_OP_REQUIRES_OK(ctx, ReadIndexVector(*this, ctx->input(3), "strides", &strides));
    StatusOr<TensorShape> shape = TensorShape::Make(dims);
    FS_OP_REQUIRES(ctx, shape.ok(), KernelError(*this, "shape: " + shape.status().message()));
    StatusOr<StridedSlicePlan> sp = PlanStridedSlice(dims, begin, end, strides, masks_);
    FS_OP_REQUIRES(ctx, sp.ok(), KernelError(*this, sp.status().message()));
    const Tensor& dy = ctx->input(4);
    FS_OP_REQUIRES(
        ctx, dy.shape().dim_vector() == sp->output_shape,
        KernelError(*this, "dy has shape " + dy.shape().ToString() + " but the slice of " +
                               shape->ToString() + " has shape " + VectorString(sp->output_shape)));
    if (sp->is_identity) {
      ctx->set_output(0, dy.Reshaped(*shape).value());
      return;
    }
    Tensor* out = nullptr;
    FS_OP_REQUIRES_OK(ctx, ctx->allocate_output(0, *shape, &out));
    if (out->TotalBytes() > 0) std::memset(out->raw_data(), 0, out->TotalBytes());
    if (dy.num_elements() == 0) return;
    int64_t out_strides[kMaxRank];
    RowMajorStrides(*shape, out_strides);
    StridedCopyPlan plan;  // where each dy element goes in the output
    plan.rank = shape->rank();
    for (int d = 0; d < plan.rank; ++d) {
      const StridedSlicePlan::Dim& pd = sp->dims[size_t(d)];
      plan.len[d] = pd.length;
      plan.stride[d] = pd.stride * out_strides[d];
      plan.offset += pd.begin * out_strides[d];
    }
    plan.Simplify();
    if (plan.rank == 0) {
      plan.rank = 1;
      plan.len[0] = 1;
      plan.stride[0] = 1;
    }
    DispatchByElementSize(dy.dtype(), [&]<typename U>() {
      Scatter(ctx, plan, static_cast<const U*>(dy.raw_data()), static_cast<U*>(out->raw_data()));
    });
  }

 private:
  template <typename U>
  static void Scatter(OpKernelContext* ctx, const StridedCopyPlan& p, const U* src, U* dst) {
    const int outer = p.rank - 1;
    const int64_t cols = p.len[outer], s = p.stride[outer];
    int64_t rows = 1;
    for (int k = 0; k < outer; ++k) rows *= p.len[k];
    ctx->device()->ParallelFor(rows, cols * int64_t(sizeof(U)) + 8, [&](int64_t r0, int64_t r1) {
      int64_t idx[kMaxRank] = {};
      int64_t off = p.offset;
      for (int64_t k = outer - 1, rem = r0; k >= 0; --k) {
        idx[k] = rem % p.len[k];
        rem /= p.len[k];
        off += idx[k] * p.stride[k];
      }
      for (int64_t r = r0; r < r1; ++r) {
        const U* from = src + r * cols;
        U* to = dst + off;
        if (s == 1) {
          std::memcpy(to, from, size_t(cols) * sizeof(U));
        } else {
          for (int64_t j = 0; j < cols; ++j) to[j * s] = from[j];
        }
        for (int k = outer - 1; k >= 0; --k) {  // next row
          off += p.stride[k];
          if (++idx[k] < p.len[k]) break;
          off -= idx[k] * p.stride[k];
          idx[k] = 0;
        }
      }
    });
  }

  StridedSliceMasks masks_;
};

// ---------------------------------------------------------------------------

template <typename T>
class InvertPermutationOp final : public OpKernel {
 public:
  using OpKernel::OpKernel;
  bool IsExpensive() const override { return false; }

  void Compute(OpKernelContext* ctx) override {
    const Tensor& x = ctx->input(0);
    FS_OP_REQUIRES(ctx, x.rank() == 1,
                   KernelError(*this, "x must be a vector, got shape " + x.shape().ToString()));
    const int64_t n = x.num_elements();
    Tensor* out = nullptr;
    FS_OP_REQUIRES_OK(ctx, ctx->allocate_output(0, x.shape(), &out));
    const T* p = x.template data<T>();
    T* y = out->template data<T>();
    std::fill_n(y, n, T(-1));
    for (int64_t i = 0; i < n; ++i) {
      const int64_t v = int64_t(p[i]);
      FS_OP_REQUIRES(ctx, v >= 0 && v < n,
                     KernelError(*this, "x[" + std::to_string(i) + "] = " + std::to_string(v) +
                                            " is outside [0, " + std::to_string(n) +
                                            "): x is not a permutation"));
      FS_OP_REQUIRES(
          ctx, y[v] < 0,
          KernelError(*this, "x[" + std::to_string(i) + "] = " + std::to_string(v) + " repeats x[" +
                                 std::to_string(int64_t(y[v])) + "]: x is not a permutation"));
      y[v] = T(i);
    }
  }
};

// ---------------------------------------------------------------------------

class ReducedShapeOp final : public OpKernel {
 public:
  using OpKernel::OpKernel;
  bool IsExpensive() const override { return false; }

  void Compute(OpKernelContext* ctx) override {
    std::vector<int64_t> dims;
    FS_OP_REQUIRES_OK(ctx, ReadIndexVector(*this, ctx->input(0), "input_shape", &dims));
    std::vector<bool> reduce;
    FS_OP_REQUIRES_OK(ctx, nn::ReadReductionAxes(*this, ctx->input(1), int(dims.size()), &reduce));
    for (size_t d = 0; d < dims.size(); ++d) {
      if (reduce[d]) dims[d] = 1;
    }
    EmitVector<int32_t>(ctx, 0, dims);
  }
};

}  // namespace

void RegisterGradSupportKernels(KernelRegistry* r) {
  const DataType kIndex[] = {DataType::kInt32, DataType::kInt64};
  MustRegister(r, KernelDef("BroadcastGradientArgs").TypeConstraint("T", DataType::kInt32),
               MakeKernel<BroadcastGradientArgsOp<int32_t>>);
  MustRegister(r, KernelDef("BroadcastGradientArgs").TypeConstraint("T", DataType::kInt64),
               MakeKernel<BroadcastGradientArgsOp<int64_t>>);
  MustRegister(r, KernelDef("InvertPermutation").TypeConstraint("T", DataType::kInt32),
               MakeKernel<InvertPermutationOp<int32_t>>);
  MustRegister(r, KernelDef("InvertPermutation").TypeConstraint("T", DataType::kInt64),
               MakeKernel<InvertPermutationOp<int64_t>>);
  MustRegister(r, KernelDef("ConcatOffset"), MakeKernel<ConcatOffsetOp>);
  for (DataType idx : kIndex) {
    MustRegister(r, KernelDef("ReducedShape").TypeConstraint("Tidx", idx),
                 MakeKernel<ReducedShapeOp>);
    for (DataType t : AllDataTypes()) {
      MustRegister(r, KernelDef("BroadcastTo").TypeConstraint("T", t).TypeConstraint("Tidx", idx),
                   MakeKernel<BroadcastToOp>);
      MustRegister(
          r, KernelDef("StridedSliceGrad").TypeConstraint("T", t).TypeConstraint("Index", idx),
          MakeKernel<StridedSliceGradOp>);
    }
  }
}

}  // namespace flowstate::internal

// Slice, StridedSlice, Concat and Split. Slices lower to the strided-copy
// engine of array_kernel_util.cc, which shares the input's buffer whenever the
// selection is one contiguous run; Split shares it whenever the pieces are
// contiguous (splitting dimension 0, or any dimension after leading 1s);
// Concat and the other Splits memcpy contiguous rows.
#include <algorithm>
#include <cstring>

#include "devices/cpu/array_kernel_util.h"
#include "graph/strided_slice.h"

namespace flowstate::internal {
namespace {

std::string VectorString(const std::vector<int64_t>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + "]";
}

// Copies `n` elements; short runs with a loop the compiler can unroll,
// long ones with memcpy.
template <typename U>
inline void CopyRun(U* dst, const U* src, int64_t n) {
  if (n <= 8) {
    for (int64_t i = 0; i < n; ++i) dst[i] = src[i];
  } else {
    std::memcpy(dst, src, size_t(n) * sizeof(U));
  }
}

class SliceOp final : public OpKernel {
 public:
  using OpKernel::OpKernel;

  void Compute(OpKernelContext* ctx) override {
    const Tensor& in = ctx->input(0);
    std::vector<int64_t> begin, size;
    FS_OP_REQUIRES_OK(ctx, ReadIndexVector(*this, ctx->input(1), "begin", &begin));
    FS_OP_REQUIRES_OK(ctx, ReadIndexVector(*this, ctx->input(2), "size", &size));
    const int rank = in.rank();
    FS_OP_REQUIRES(ctx, int(begin.size()) == rank && int(size.size()) == rank,
                   KernelError(*this, "begin " + VectorString(begin) + " and size " +
                                          VectorString(size) +
                                          " must have one entry per dimension of the input " +
                                          in.shape().ToString()));
    int64_t strides[kMaxRank];
    RowMajorStrides(in.shape(), strides);
    StridedCopyPlan plan;
    plan.rank = rank;
    TensorShape out_shape;
    for (int d = 0; d < rank; ++d) {
      const int64_t b = begin[d], dim = in.dim(d);
      FS_OP_REQUIRES(ctx, b >= 0 && b <= dim,
                     KernelError(*this, "begin[" + std::to_string(d) + "] = " +
                                            std::to_string(b) + " is out of range [0, " +
                                            std::to_string(dim) + "] for input shape " +
                                            in.shape().ToString()));
      int64_t s = size[d];
      if (s == -1) s = dim - b;
      FS_OP_REQUIRES(ctx, s >= 0 && s <= dim - b,
                     KernelError(*this, "size[" + std::to_string(d) + "] = " +
                                            std::to_string(size[d]) +
                                            " is out of range for begin " + std::to_string(b) +
                                            " in input shape " + in.shape().ToString() +
                                            " (use -1 for the rest)"));
      plan.len[d] = s;
      plan.stride[d] = strides[d];
      plan.offset += b * strides[d];
      out_shape.AddDim(s);
    }
    EmitStridedCopy(ctx, in, plan, out_shape);
  }
};

class StridedSliceOp final : public OpKernel {
 public:
  explicit StridedSliceOp(OpKernelConstruction* c) : OpKernel(c) {
    (void)c->GetAttr("begin_mask", &masks_.begin);
    (void)c->GetAttr("end_mask", &masks_.end);
    (void)c->GetAttr("ellipsis_mask", &masks_.ellipsis);
    (void)c->GetAttr("new_axis_mask", &masks_.new_axis);
    (void)c->GetAttr("shrink_axis_mask", &masks_.shrink_axis);
  }

  void Compute(OpKernelContext* ctx) override {
    const Tensor& in = ctx->input(0);
    std::vector<int64_t> begin, end, strides;
    FS_OP_REQUIRES_OK(ctx, ReadIndexVector(*this, ctx->input(1), "begin", &begin));
    FS_OP_REQUIRES_OK(ctx, ReadIndexVector(*this, ctx->input(2), "end", &end));
    FS_OP_REQUIRES_OK(ctx, ReadIndexVector(*this, ctx->input(3), "strides", &strides));
    StatusOr<StridedSlicePlan> sp =
        PlanStridedSlice(in.shape().dim_vector(), begin, end, strides, masks_);
    FS_OP_REQUIRES(ctx, sp.ok(), KernelError(*this, sp.status().message()));
    StatusOr<TensorShape> out_shape = TensorShape::Make(sp->output_shape);
    FS_OP_REQUIRES(ctx, out_shape.ok(), KernelError(*this, out_shape.status().message()));
    int64_t in_strides[kMaxRank];
    RowMajorStrides(in.shape(), in_strides);
    StridedCopyPlan plan;
    plan.rank = in.rank();
    for (int d = 0; d < in.rank(); ++d) {
      const StridedSlicePlan::Dim& pd = sp->dims[d];
      plan.len[d] = pd.length;
      plan.stride[d] = pd.stride * in_strides[d];
      plan.offset += pd.begin * in_strides[d];
    }
    EmitStridedCopy(ctx, in, plan, *out_shape);
  }

 private:
  StridedSliceMasks masks_;
};

class ConcatOp final : public OpKernel {
 public:
  using OpKernel::OpKernel;

  void Compute(OpKernelContext* ctx) override {
    const int n = ctx->num_inputs() - 1;
    int64_t axis;
    FS_OP_REQUIRES_OK(ctx, ReadIndexScalar(*this, ctx->input(n), "axis", &axis));
    const Tensor& first = ctx->input(0);
    const int rank = first.rank();
    FS_OP_REQUIRES(ctx, rank >= 1, KernelError(*this, "cannot concatenate scalars"));
    FS_OP_REQUIRES(ctx, axis >= -rank && axis < rank,
                   KernelError(*this, "axis " + std::to_string(axis) + " is out of range [" +
                                          std::to_string(-rank) + ", " + std::to_string(rank) +
                                          ") for inputs of rank " + std::to_string(rank)));
    const int a = int(axis < 0 ? axis + rank : axis);
    TensorShape out_shape = first.shape();
    int64_t total = 0;
    for (int i = 0; i < n; ++i) {
      const TensorShape& s = ctx->input(i).shape();
      bool same = s.rank() == rank;
      for (int d = 0; same && d < rank; ++d) same = d == a || s.dim(d) == first.dim(d);
      FS_OP_REQUIRES(ctx, same,
                     KernelError(*this, "input " + std::to_string(i) + " has shape " +
                                            s.ToString() + ", which does not match input 0's " +
                                            first.shape().ToString() +
                                            " outside dimension " + std::to_string(a)));
      total += s.dim(a);
    }
    out_shape.set_dim(a, total);
    if (n == 1) {
      ctx->set_output(0, first);
      return;
    }
    Tensor* out = nullptr;
    if (!ctx->allocate_output(0, out_shape, &out).ok()) return;
    int64_t outer = 1;
    for (int d = 0; d < a; ++d) outer *= first.dim(d);
    if (out->num_elements() == 0) return;
    const int64_t out_row = out->num_elements() / outer;
    DispatchByElementSize(first.dtype(), [&]<typename U>() {
      U* dst = static_cast<U*>(out->raw_data());
      std::vector<const U*> src(n);
      std::vector<int64_t> row(n);
      for (int i = 0; i < n; ++i) {
        src[i] = static_cast<const U*>(ctx->input(i).raw_data());
        row[i] = ctx->input(i).num_elements() / outer;
      }
      if (outer == 1) {
        for (int i = 0; i < n; ++i) {
          ParallelMemcpy(ctx->device(), dst, src[i], size_t(row[i]) * sizeof(U));
          dst += row[i];
        }
        return;
      }
      ctx->device()->ParallelFor(outer, out_row * int64_t(sizeof(U)) + 8 * n,
                                 [&](int64_t b, int64_t e) {
                                   for (int64_t o = b; o < e; ++o) {
                                     U* d = dst + o * out_row;
                                     for (int i = 0; i < n; ++i) {
                                       CopyRun(d, src[i] + o * row[i], row[i]);
                                       d += row[i];
                                     }
                                   }
                                 });
    });
  }
};

class SplitOp final : public OpKernel {
 public:
  using OpKernel::OpKernel;

  void Compute(OpKernelContext* ctx) override {
    int64_t axis;
    FS_OP_REQUIRES_OK(ctx, ReadIndexScalar(*this, ctx->input(0), "axis", &axis));
    const Tensor& in = ctx->input(1);
    const int rank = in.rank();
    const int num = ctx->num_outputs();
    FS_OP_REQUIRES(ctx, rank >= 1, KernelError(*this, "cannot split a scalar"));
    FS_OP_REQUIRES(ctx, axis >= -rank && axis < rank,
                   KernelError(*this, "axis " + std::to_string(axis) + " is out of range [" +
                                          std::to_string(-rank) + ", " + std::to_string(rank) +
                                          ") for value of shape " + in.shape().ToString()));
    const int a = int(axis < 0 ? axis + rank : axis);
    const int64_t dim = in.dim(a);
    FS_OP_REQUIRES(ctx, dim % num == 0,
                   KernelError(*this, "dimension " + std::to_string(a) + " of value shape " +
                                          in.shape().ToString() + " does not split evenly into " +
                                          std::to_string(num) + " parts"));
    if (num == 1) {
      ctx->set_output(0, in);
      return;
    }
    const int64_t piece = dim / num;
    TensorShape out_shape = in.shape();
    out_shape.set_dim(a, piece);
    int64_t outer = 1, inner = 1;
    for (int d = 0; d < a; ++d) outer *= in.dim(d);
    for (int d = a + 1; d < rank; ++d) inner *= in.dim(d);
    if (outer == 1) {
      // Every piece is a contiguous run of rows: share the buffer.
      Tensor rows = in.Reshaped(TensorShape({dim, inner})).value();
      for (int i = 0; i < num; ++i) {
        ctx->set_output(i, rows.Slice(i * piece, (i + 1) * piece).Reshaped(out_shape).value());
      }
      return;
    }
    std::vector<Tensor*> outs(num);
    for (int i = 0; i < num; ++i) {
      if (!ctx->allocate_output(i, out_shape, &outs[i]).ok()) return;
    }
    if (in.num_elements() == 0) return;
    const int64_t run = piece * inner;  // elements of one output row
    DispatchByElementSize(in.dtype(), [&]<typename U>() {
      const U* src = static_cast<const U*>(in.raw_data());
      // Unit u: row u % outer of output u / outer.
      ctx->device()->ParallelFor(int64_t(num) * outer, run * int64_t(sizeof(U)) + 8,
                                 [&](int64_t b, int64_t e) {
                                   for (int64_t u = b; u < e; ++u) {
                                     const int64_t i = u / outer, o = u % outer;
                                     U* dst = static_cast<U*>(outs[i]->raw_data());
                                     CopyRun(dst + o * run, src + (o * num + i) * run, run);
                                   }
                                 });
    });
  }
};

}  // namespace

void RegisterSliceKernels(KernelRegistry* r) {
  for (DataType t : AllDataTypes()) {
    auto def = [t](const char* op) { return KernelDef(op).TypeConstraint("T", t); };
    MustRegister(r, def("Slice"), MakeKernel<SliceOp>);
    MustRegister(r, def("StridedSlice"), MakeKernel<StridedSliceOp>);
    MustRegister(r, def("Concat"), MakeKernel<ConcatOp>);
    MustRegister(r, def("Split"), MakeKernel<SplitOp>);
  }
}

}  // namespace flowstate::internal

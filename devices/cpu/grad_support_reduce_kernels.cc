// The summing ops that gradient functions emit: UnsortedSegmentSum,
// TileGrad and ProdGrad.
//
// Semantics:
// - UnsortedSegmentSum(data, segment_ids, num_segments): output[i, ...] =
//   sum of data[j..., ...] over the j with segment_ids[j...] == i; a segment
//   no id names is 0. segment_ids' shape must be a prefix of data's. As in
//   TensorFlow, a NEGATIVE id drops its row (so callers can mask rows with
//   -1); an id >= num_segments is INVALID_ARGUMENT naming the node, the
//   position and the id, as is a negative num_segments. Integer sums wrap.
//   Rows are added in order (for floats, in T); large rows are split by
//   columns over the intra-op pool, so the result does not depend on the
//   thread count.
// - TileGrad(multiples, grad): output[i] = sum over the tiles of grad, the
//   output's shape being grad's divided by multiples (each multiple >= 1
//   and dividing its dimension, else INVALID_ARGUMENT). Accumulated in
//   double; the output shares grad's buffer when every multiple is 1.
// - ProdGrad(input, axis, grad): d prod(input, axis) / d input * grad, where
//   grad has the reduced shape with kept dimensions (1s). Each element gets
//   the product of the OTHER elements of its group (exclusive prefix times
//   exclusive suffix products, no division), so zeros in the input are
//   exact. axis: 0-D or 1-D, empty = every axis, negative counts from the
//   end, duplicates allowed.
#include <algorithm>
#include <vector>

#include "devices/cpu/nn_grad_support_common.h"

namespace flowstate::internal {
namespace {

template <typename T>
inline T AddWrapped(T a, T b) {
  if constexpr (std::is_integral_v<T>) {
    return cwise::WrapAdd(a, b);
  } else {
    return a + b;
  }
}

template <typename T, typename I>
class UnsortedSegmentSumOp final : public OpKernel {
 public:
  using OpKernel::OpKernel;

  void Compute(OpKernelContext* ctx) override {
    const Tensor& data = ctx->input(0);
    const Tensor& ids = ctx->input(1);
    int64_t num = 0;
    FS_OP_REQUIRES_OK(ctx, ReadIndexScalar(*this, ctx->input(2), "num_segments", &num));
    FS_OP_REQUIRES(ctx, num >= 0,
                   KernelError(*this, "num_segments must be >= 0, got " + std::to_string(num)));
    bool prefix = ids.rank() <= data.rank();
    for (int d = 0; prefix && d < ids.rank(); ++d) prefix = ids.dim(d) == data.dim(d);
    FS_OP_REQUIRES(
        ctx, prefix,
        KernelError(*this, "segment_ids of shape " + ids.shape().ToString() +
                               " must be a prefix of data's shape " + data.shape().ToString()));
    std::vector<int64_t> out_dims{num};
    int64_t inner = 1;
    for (int d = ids.rank(); d < data.rank(); ++d) {
      out_dims.push_back(data.dim(d));
      inner *= data.dim(d);
    }
    StatusOr<TensorShape> out_shape = TensorShape::Make(out_dims);
    FS_OP_REQUIRES(ctx, out_shape.ok(),
                   KernelError(*this, "output: " + out_shape.status().message()));
    const int64_t n = ids.num_elements();
    const I* id = ids.template data<I>();
    for (int64_t j = 0; j < n; ++j) {
      FS_OP_REQUIRES(
          ctx, int64_t(id[j]) < num,
          KernelError(*this, "segment_ids[" + std::to_string(j) +
                                 "] = " + std::to_string(int64_t(id[j])) + " is out of range [0, " +
                                 std::to_string(num) + ") of num_segments"));
    }
    Tensor* out = nullptr;
    FS_OP_REQUIRES_OK(ctx, ctx->allocate_output(0, *out_shape, &out));
    T* y = out->template data<T>();
    std::fill_n(y, out->num_elements(), T(0));
    if (inner == 0 || n == 0) return;
    const T* x = data.template data<T>();
    // Column blocks of 256: each task owns its columns of every segment.
    constexpr int64_t kCols = 256;
    const int64_t col_blocks = (inner + kCols - 1) / kCols;
    ctx->device()->ParallelFor(col_blocks, n * std::min(inner, kCols), [&](int64_t c0, int64_t c1) {
      const int64_t b = c0 * kCols, e = std::min(inner, c1 * kCols);
      for (int64_t j = 0; j < n; ++j) {
        const int64_t s = int64_t(id[j]);
        if (s < 0) continue;  // dropped, as in TensorFlow
        const T* from = x + j * inner;
        T* to = y + s * inner;
        for (int64_t c = b; c < e; ++c) to[c] = AddWrapped(to[c], from[c]);
      }
    });
  }
};

// ---------------------------------------------------------------------------

template <typename T>
class TileGradOp final : public OpKernel {
 public:
  using OpKernel::OpKernel;

  void Compute(OpKernelContext* ctx) override {
    std::vector<int64_t> m;
    FS_OP_REQUIRES_OK(ctx, ReadIndexVector(*this, ctx->input(0), "multiples", &m));
    const Tensor& grad = ctx->input(1);
    const int rank = grad.rank();
    FS_OP_REQUIRES(ctx, int(m.size()) == rank,
                   KernelError(*this, "multiples " + nn::VectorString(m) +
                                          " must have one entry per dimension of grad " +
                                          grad.shape().ToString()));
    TensorShape out_shape;
    bool all_one = true;
    for (int d = 0; d < rank; ++d) {
      FS_OP_REQUIRES(
          ctx, m[size_t(d)] >= 1 && grad.dim(d) % m[size_t(d)] == 0,
          KernelError(*this, "dimension " + std::to_string(d) + " of grad " +
                                 grad.shape().ToString() +
                                 " is not a positive multiple of multiples[" + std::to_string(d) +
                                 "] = " + std::to_string(m[size_t(d)])));
      out_shape.AddDim(grad.dim(d) / m[size_t(d)]);
      all_one &= m[size_t(d)] == 1;
    }
    if (all_one) {
      ctx->forward_input(1, 0);
      return;
    }
    Tensor* out = nullptr;
    FS_OP_REQUIRES_OK(ctx, ctx->allocate_output(0, out_shape, &out));
    if (out->num_elements() == 0) return;
    // Output row o (over dims 0..rank-2) sums, for every tile t of those
    // dims, grad row (t_k * d_k + o_k)_k, itself m_last runs of d_last.
    const int outer = rank - 1;
    const int64_t d_last = out_shape.dim(outer), m_last = m[size_t(outer)];
    int64_t gstride[kMaxRank] = {};  // grad row strides, in rows
    for (int64_t k = outer - 1, s = 1; k >= 0; --k) {
      gstride[k] = s;
      s *= grad.dim(int(k));
    }
    int64_t out_rows = 1, tiles = 1;
    for (int k = 0; k < outer; ++k) {
      out_rows *= out_shape.dim(k);
      tiles *= m[size_t(k)];
    }
    const int64_t grow = grad.dim(outer);  // = m_last * d_last
    const T* g = grad.template data<T>();
    T* y = out->template data<T>();
    ctx->device()->ParallelFor(out_rows, tiles * grow + 8, [&](int64_t r0, int64_t r1) {
      std::vector<double> acc(static_cast<size_t>(d_last));
      int64_t o_idx[kMaxRank], t_idx[kMaxRank];
      for (int64_t r = r0; r < r1; ++r) {
        int64_t rem = r;
        for (int k = outer - 1; k >= 0; --k) {
          o_idx[k] = rem % out_shape.dim(k);
          rem /= out_shape.dim(k);
          t_idx[k] = 0;
        }
        std::fill(acc.begin(), acc.end(), 0.0);
        for (int64_t t = 0; t < tiles; ++t) {
          int64_t grow_index = 0;
          for (int k = 0; k < outer; ++k) {
            grow_index += (t_idx[k] * out_shape.dim(k) + o_idx[k]) * gstride[k];
          }
          const T* src = g + grow_index * grow;
          for (int64_t q = 0; q < m_last; ++q, src += d_last) {
            for (int64_t j = 0; j < d_last; ++j) acc[size_t(j)] += double(src[j]);
          }
          for (int k = outer - 1; k >= 0; --k) {  // next tile
            if (++t_idx[k] < m[size_t(k)]) break;
            t_idx[k] = 0;
          }
        }
        T* dst = y + r * d_last;
        for (int64_t j = 0; j < d_last; ++j) dst[j] = T(acc[size_t(j)]);
      }
    });
  }
};

// ---------------------------------------------------------------------------

template <typename T>
class ProdGradOp final : public OpKernel {
 public:
  using OpKernel::OpKernel;

  void Compute(OpKernelContext* ctx) override {
    const Tensor& x = ctx->input(0);
    const Tensor& grad = ctx->input(2);
    const int rank = x.rank();
    std::vector<bool> reduce;
    FS_OP_REQUIRES_OK(ctx, nn::ReadReductionAxes(*this, ctx->input(1), rank, &reduce));
    TensorShape kept = x.shape();
    for (int d = 0; d < rank; ++d) {
      if (reduce[size_t(d)]) kept.set_dim(d, 1);
    }
    FS_OP_REQUIRES(ctx, grad.shape() == kept,
                   KernelError(*this, "grad has shape " + grad.shape().ToString() +
                                          " but reducing input " + x.shape().ToString() +
                                          " with kept dimensions gives " + kept.ToString()));
    Tensor* out = nullptr;
    FS_OP_REQUIRES_OK(ctx, ctx->allocate_output(0, x.shape(), &out));
    if (x.num_elements() == 0) return;
    // Collapse: drop size-1 dims and merge neighbours of the same kind.
    struct Dims {
      int rank = 0;
      int64_t len[kMaxRank] = {}, stride[kMaxRank] = {};
      int64_t size = 1;
    } kd, rd;
    int64_t stride = 1;
    int last_kind = -1;
    for (int d = rank - 1; d >= 0; --d) {
      const int64_t len = x.dim(d);
      if (len == 1) continue;
      const int kind = reduce[size_t(d)] ? 1 : 0;
      Dims& t = kind ? rd : kd;
      if (kind == last_kind) {
        t.len[t.rank - 1] *= len;
      } else {
        t.len[t.rank] = len;
        t.stride[t.rank] = stride;
        ++t.rank;
      }
      t.size *= len;
      stride *= len;
      last_kind = kind;
    }
    // Collected innermost first; make them outermost first.
    for (Dims* t : {&kd, &rd}) {
      std::reverse(t->len, t->len + t->rank);
      std::reverse(t->stride, t->stride + t->rank);
    }
    const T* in = x.template data<T>();
    const T* g = grad.template data<T>();
    T* y = out->template data<T>();
    const int64_t groups = kd.size, group_len = rd.size;
    const bool contiguous = rd.rank == 1 && rd.stride[0] == 1;
    ctx->device()->ParallelFor(groups, 6 * group_len + 16, [&](int64_t k0, int64_t k1) {
      const size_t scratch = contiguous ? 0 : static_cast<size_t>(group_len);
      std::vector<T> v(scratch), o(static_cast<size_t>(group_len));
      std::vector<int64_t> offs(scratch);
      for (int64_t k = k0; k < k1; ++k) {
        int64_t base = 0;
        for (int64_t q = kd.rank - 1, rem = k; q >= 0; --q) {
          base += (rem % kd.len[q]) * kd.stride[q];
          rem /= kd.len[q];
        }
        const T* vals = in + base;
        if (!contiguous) {  // gather the group with an odometer over rd
          int64_t idx[kMaxRank] = {};
          int64_t off = 0;
          for (int64_t j = 0; j < group_len; ++j) {
            offs[size_t(j)] = off;
            v[size_t(j)] = in[base + off];
            for (int q = rd.rank - 1; q >= 0; --q) {
              off += rd.stride[q];
              if (++idx[q] < rd.len[q]) break;
              off -= idx[q] * rd.stride[q];
              idx[q] = 0;
            }
          }
          vals = v.data();
        }
        T p = T(1);
        for (int64_t j = 0; j < group_len; ++j) {
          o[size_t(j)] = p;
          p *= vals[j];
        }
        T s = g[k];
        for (int64_t j = group_len - 1; j >= 0; --j) {
          o[size_t(j)] *= s;
          s *= vals[j];
        }
        if (contiguous) {
          std::copy(o.begin(), o.end(), y + base);
        } else {
          for (int64_t j = 0; j < group_len; ++j) y[base + offs[size_t(j)]] = o[size_t(j)];
        }
      }
    });
  }
};

}  // namespace

void RegisterGradReduceKernels(KernelRegistry* r) {
  const DataType kIndex[] = {DataType::kInt32, DataType::kInt64};
  auto segment = [&]<typename T>() {
    for (DataType num : kIndex) {
      auto def = [&](DataType ids) {
        return KernelDef("UnsortedSegmentSum")
            .TypeConstraint("T", kDataTypeOf<T>)
            .TypeConstraint("Tindices", ids)
            .TypeConstraint("Tnum", num);
      };
      MustRegister(r, def(DataType::kInt32), MakeKernel<UnsortedSegmentSumOp<T, int32_t>>);
      MustRegister(r, def(DataType::kInt64), MakeKernel<UnsortedSegmentSumOp<T, int64_t>>);
    }
  };
  cwise::ForEachType(cwise::SignedTypes{}, segment);
  auto floats = [&]<typename T>() {
    for (DataType idx : kIndex) {
      MustRegister(r,
                   KernelDef("TileGrad")
                       .TypeConstraint("T", kDataTypeOf<T>)
                       .TypeConstraint("Tmultiples", idx),
                   MakeKernel<TileGradOp<T>>);
      MustRegister(
          r, KernelDef("ProdGrad").TypeConstraint("T", kDataTypeOf<T>).TypeConstraint("Tidx", idx),
          MakeKernel<ProdGradOp<T>>);
    }
  };
  cwise::ForEachType(cwise::FloatTypes{}, floats);
}

}  // namespace flowstate::internal

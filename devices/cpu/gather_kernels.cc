// Gather (rows of params along an axis, at int32/int64 indices, checked
// before anything is copied) and Tile (an input repeated along each
// dimension). Both copy contiguous runs with memcpy and split big outputs
// across the device's intra-op threads. Unique (the distinct values of an
// index vector in order of first occurrence, and where each element went).
// PartitionIds and DynamicStitch: the routing of a lookup in a partitioned
// table (graph/partitioned_variables.h) -- each id's part and local row, and
// the parts' rows put back in the ids' order.
#include <algorithm>
#include <cstring>
#include <limits>
#include <unordered_map>
#include <vector>

#include "devices/cpu/array_kernel_util.h"
#include "graph/partitioned_variables.h"

namespace flowstate::internal {
namespace {

class GatherOp final : public OpKernel {
 public:
  explicit GatherOp(OpKernelConstruction* c) : OpKernel(c) { (void)c->GetAttr("axis", &axis_); }

  void Compute(OpKernelContext* ctx) override {
    const Tensor& params = ctx->input(0);
    const Tensor& indices = ctx->input(1);
    const int rank = params.rank();
    FS_OP_REQUIRES(ctx, rank >= 1,
                   KernelError(*this, "params must have rank >= 1, got a scalar"));
    FS_OP_REQUIRES(ctx, axis_ >= -rank && axis_ < rank,
                   KernelError(*this, "axis " + std::to_string(axis_) +
                                          " is out of range for params of shape " +
                                          params.shape().ToString()));
    const int a = int(axis_ < 0 ? axis_ + rank : axis_);
    std::vector<int64_t> dims;
    for (int d = 0; d < a; ++d) dims.push_back(params.dim(d));
    for (int64_t d : indices.shape().dims()) dims.push_back(d);
    for (int d = a + 1; d < rank; ++d) dims.push_back(params.dim(d));
    StatusOr<TensorShape> out_shape = TensorShape::Make(dims);
    FS_OP_REQUIRES(ctx, out_shape.ok(), KernelError(*this, out_shape.status().message()));
    if (indices.dtype() == DataType::kInt32) {
      Gather<int32_t>(ctx, params, indices, a, *out_shape);
    } else {
      Gather<int64_t>(ctx, params, indices, a, *out_shape);
    }
  }

 private:
  template <typename Index>
  void Gather(OpKernelContext* ctx, const Tensor& params, const Tensor& indices, int a,
              const TensorShape& out_shape) {
    const Index* idx = indices.data<Index>();
    const int64_t n = indices.num_elements();
    const int64_t limit = params.dim(a);
    for (int64_t i = 0; i < n; ++i) {
      FS_OP_REQUIRES(ctx, idx[i] >= 0 && idx[i] < limit,
                     KernelError(*this, "indices[" + std::to_string(i) + "] = " +
                                            std::to_string(idx[i]) + " is not in [0, " +
                                            std::to_string(limit) + ") (dimension " +
                                            std::to_string(a) + " of params " +
                                            params.shape().ToString() + ")"));
    }
    Tensor* out = nullptr;
    if (!ctx->allocate_output(0, out_shape, &out).ok()) return;
    if (out->num_elements() == 0) return;
    int64_t outer = 1;
    for (int d = 0; d < a; ++d) outer *= params.dim(d);
    const int64_t inner = params.num_elements() / (outer * limit);
    DispatchByElementSize(params.dtype(), [&]<typename U>() {
      const U* src = static_cast<const U*>(params.raw_data());
      U* dst = static_cast<U*>(out->raw_data());
      // Unit u: output row u, taken from row idx[u % n] of block u / n.
      ctx->device()->ParallelFor(outer * n, inner * int64_t(sizeof(U)) + 4,
                                 [&](int64_t b, int64_t e) {
        int64_t o = b / n, i = b % n;
        for (int64_t u = b; u < e; ++u) {
          const U* from = src + (o * limit + int64_t(idx[i])) * inner;
          if (inner == 1) {
            dst[u] = *from;
          } else if (inner <= 8) {
            for (int64_t k = 0; k < inner; ++k) dst[u * inner + k] = from[k];
          } else {
            std::memcpy(dst + u * inner, from, size_t(inner) * sizeof(U));
          }
          if (++i == n) {
            i = 0;
            ++o;
          }
        }
      });
    });
  }

  int64_t axis_ = 0;
};

class TileOp final : public OpKernel {
 public:
  using OpKernel::OpKernel;

  void Compute(OpKernelContext* ctx) override {
    const Tensor& in = ctx->input(0);
    std::vector<int64_t> mult;
    FS_OP_REQUIRES_OK(ctx, ReadIndexVector(*this, ctx->input(1), "multiples", &mult));
    const int rank = in.rank();
    FS_OP_REQUIRES(ctx, int(mult.size()) == rank,
                   KernelError(*this, "multiples has " + std::to_string(mult.size()) +
                                          " entries for an input of shape " +
                                          in.shape().ToString()));
    std::vector<int64_t> dims(rank);
    bool all_one = true;
    for (int d = 0; d < rank; ++d) {
      FS_OP_REQUIRES(ctx, mult[d] >= 0,
                     KernelError(*this, "multiples[" + std::to_string(d) + "] = " +
                                            std::to_string(mult[d]) + " is negative"));
      FS_OP_REQUIRES(ctx, !__builtin_mul_overflow(in.dim(d), mult[d], &dims[d]),
                     KernelError(*this, "the tiled shape is too large"));
      all_one &= mult[d] == 1;
    }
    StatusOr<TensorShape> out_shape = TensorShape::Make(dims);
    FS_OP_REQUIRES(ctx, out_shape.ok(), KernelError(*this, out_shape.status().message()));
    if (all_one) {
      ctx->set_output(0, in);
      return;
    }
    Tensor* out = nullptr;
    if (!ctx->allocate_output(0, *out_shape, &out).ok()) return;
    if (out->num_elements() == 0) return;
    DispatchByElementSize(in.dtype(), [&]<typename U>() {
      Tile<U>(ctx->device(), in, static_cast<U*>(out->raw_data()), dims);
    });
  }

 private:
  // Output row r (over all dimensions but the last) is input row
  // (r_k mod in.dim(k))_k repeated multiples[last] times; a row is filled by
  // copying the input row once and then doubling what is already written.
  template <typename U>
  static void Tile(Device* device, const Tensor& in, U* dst, const std::vector<int64_t>& dims) {
    const int rank = in.rank();
    const U* src = static_cast<const U*>(in.raw_data());
    const int outer_rank = rank - 1;
    const int64_t cols = in.dim(rank - 1), row_len = dims[rank - 1];
    int64_t strides[kMaxRank];
    RowMajorStrides(in.shape(), strides);
    int64_t rows = 1;
    for (int k = 0; k < outer_rank; ++k) rows *= dims[k];
    device->ParallelFor(rows, row_len * int64_t(sizeof(U)) + 16, [&](int64_t b, int64_t e) {
      int64_t idx[kMaxRank], off = 0;  // output index; input offset
      int64_t rem = b;
      for (int k = outer_rank - 1; k >= 0; --k) {
        idx[k] = rem % dims[k];
        rem /= dims[k];
        off += (idx[k] % in.dim(k)) * strides[k];
      }
      for (int64_t r = b; r < e; ++r) {
        U* d = dst + r * row_len;
        const U* from = src + off;
        for (int64_t j = 0; j < cols; ++j) d[j] = from[j];
        for (int64_t filled = cols; filled < row_len;) {
          const int64_t n = std::min(filled, row_len - filled);
          std::memcpy(d + filled, d, size_t(n) * sizeof(U));
          filled += n;
        }
        for (int k = outer_rank - 1; k >= 0; --k) {
          const int64_t dk = in.dim(k);
          ++idx[k];
          off += strides[k];
          if (idx[k] % dk == 0) off -= dk * strides[k];
          if (idx[k] < dims[k]) break;
          idx[k] = 0;
        }
      }
    });
  }
};


template <typename T, typename I>
class UniqueOp final : public OpKernel {
 public:
  using OpKernel::OpKernel;

  void Compute(OpKernelContext* ctx) override {
    const Tensor& x = ctx->input(0);
    FS_OP_REQUIRES(ctx, x.rank() == 1,
                   KernelError(*this, "x must be a vector, got shape " + x.shape().ToString()));
    const int64_t n = x.num_elements();
    FS_OP_REQUIRES(ctx, n <= int64_t(std::numeric_limits<I>::max()),
                   KernelError(*this, "x has " + std::to_string(n) +
                                          " elements, too many for out_idx"));
    const T* v = x.data<T>();
    Tensor* idx = nullptr;
    FS_OP_REQUIRES_OK(ctx, ctx->allocate_output(1, x.shape(), &idx));
    I* where = idx->data<I>();
    std::unordered_map<T, I> seen;
    seen.reserve(size_t(n));
    std::vector<T> distinct;
    for (int64_t i = 0; i < n; ++i) {
      auto [it, fresh] = seen.emplace(v[i], I(distinct.size()));
      if (fresh) distinct.push_back(v[i]);
      where[i] = it->second;
    }
    Tensor* y = nullptr;
    FS_OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({int64_t(distinct.size())}), &y));
    std::copy(distinct.begin(), distinct.end(), y->data<T>());
  }
};

// Ids -> for each part, its ids' local rows and their positions.
template <typename I>
class PartitionIdsOp final : public OpKernel {
 public:
  explicit PartitionIdsOp(OpKernelConstruction* c) : OpKernel(c) {
    std::string strategy;
    (void)c->GetAttr("num_partitions", &layout_.partitions);
    (void)c->GetAttr("rows", &layout_.rows);
    (void)c->GetAttr("strategy", &strategy);
    (void)c->GetAttr("table", &table_);
    layout_.strategy = strategy == "div" ? PartitionStrategy::kDiv : PartitionStrategy::kMod;
  }

  void Compute(OpKernelContext* ctx) override {
    const Tensor& ids = ctx->input(0);
    const I* id = ids.data<I>();
    const int64_t n = ids.num_elements();
    const int64_t P = layout_.partitions;
    FS_OP_REQUIRES(ctx, n <= int64_t(std::numeric_limits<int32_t>::max()),
                   KernelError(*this, "too many ids (" + std::to_string(n) + ")"));
    std::vector<int64_t> count(static_cast<size_t>(P), 0);
    for (int64_t i = 0; i < n; ++i) {
      FS_OP_REQUIRES(ctx, id[i] >= 0 && int64_t(id[i]) < layout_.rows,
                     KernelError(*this, "indices[" + std::to_string(i) + "] = " +
                                            std::to_string(id[i]) + " is not in [0, " +
                                            std::to_string(layout_.rows) +
                                            ") (the rows of the partitioned table '" + table_ +
                                            "')"));
      ++count[size_t(layout_.Locate(int64_t(id[i])).first)];
    }
    std::vector<I*> local(static_cast<size_t>(P));
    std::vector<int32_t*> pos(static_cast<size_t>(P));
    for (int64_t p = 0; p < P; ++p) {
      Tensor* l = nullptr;
      Tensor* q = nullptr;
      FS_OP_REQUIRES_OK(ctx, ctx->allocate_output(int(p), TensorShape({count[size_t(p)]}), &l));
      FS_OP_REQUIRES_OK(ctx,
                        ctx->allocate_output(int(P + p), TensorShape({count[size_t(p)]}), &q));
      local[size_t(p)] = l->data<I>();
      pos[size_t(p)] = q->data<int32_t>();
    }
    for (int64_t i = 0; i < n; ++i) {
      auto [p, r] = layout_.Locate(int64_t(id[i]));
      *local[size_t(p)]++ = I(r);
      *pos[size_t(p)]++ = int32_t(i);
    }
  }

 private:
  PartitionLayout layout_;
  std::string table_;
};

class DynamicStitchOp final : public OpKernel {
 public:
  using OpKernel::OpKernel;

  void Compute(OpKernelContext* ctx) override {
    const int n = ctx->num_inputs() / 2;
    // The row shape: data[i].shape minus indices[i].shape, the same for all.
    const Tensor& d0 = ctx->input(n);
    const int r0 = ctx->input(0).rank();
    FS_OP_REQUIRES(ctx, d0.rank() >= r0,
                   KernelError(*this, "data[0] of shape " + d0.shape().ToString() +
                                          " does not start with the shape of indices[0] " +
                                          ctx->input(0).shape().ToString()));
    std::vector<int64_t> row(d0.shape().dims().begin() + r0, d0.shape().dims().end());
    int64_t rows = 0, total = 0;
    for (int i = 0; i < n; ++i) {
      const Tensor& idx = ctx->input(i);
      const Tensor& data = ctx->input(n + i);
      std::vector<int64_t> want = idx.shape().dim_vector();
      want.insert(want.end(), row.begin(), row.end());
      FS_OP_REQUIRES(ctx, data.shape().dim_vector() == want,
                     KernelError(*this, "data[" + std::to_string(i) + "] has shape " +
                                            data.shape().ToString() + ", expected " +
                                            TensorShape(want).ToString() +
                                            " (indices[" + std::to_string(i) +
                                            "].shape + the row shape)"));
      const int32_t* v = idx.data<int32_t>();
      for (int64_t j = 0; j < idx.num_elements(); ++j) {
        FS_OP_REQUIRES(ctx, v[j] >= 0,
                       KernelError(*this, "indices[" + std::to_string(i) + "][" +
                                              std::to_string(j) + "] = " + std::to_string(v[j]) +
                                              " is negative"));
        rows = std::max<int64_t>(rows, int64_t(v[j]) + 1);
      }
      total += idx.num_elements();
    }
    std::vector<int64_t> out_dims{rows};
    out_dims.insert(out_dims.end(), row.begin(), row.end());
    Tensor* out = nullptr;
    FS_OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape(out_dims), &out));
    const size_t row_bytes = size_t(TensorShape(row).num_elements()) * DataTypeSize(d0.dtype());
    char* dst = static_cast<char*>(out->raw_data());
    if (total < rows && row_bytes > 0) std::memset(dst, 0, size_t(rows) * row_bytes);
    if (row_bytes == 0) return;
    for (int i = 0; i < n; ++i) {
      const Tensor& idx = ctx->input(i);
      const int32_t* v = idx.data<int32_t>();
      const char* src = static_cast<const char*>(ctx->input(n + i).raw_data());
      for (int64_t j = 0; j < idx.num_elements(); ++j) {
        std::memcpy(dst + size_t(v[j]) * row_bytes, src + size_t(j) * row_bytes, row_bytes);
      }
    }
  }
};

}  // namespace

void RegisterGatherKernels(KernelRegistry* r) {
  for (DataType t : AllDataTypes()) {
    MustRegister(r, KernelDef("Gather").TypeConstraint("Tparams", t), MakeKernel<GatherOp>);
    MustRegister(r, KernelDef("Tile").TypeConstraint("T", t), MakeKernel<TileOp>);
  }
  auto unique = [&]<typename T, typename I>() {
    MustRegister(r,
                 KernelDef("Unique")
                     .TypeConstraint("T", kDataTypeOf<T>)
                     .TypeConstraint("out_idx", kDataTypeOf<I>),
                 MakeKernel<UniqueOp<T, I>>);
  };
  for (DataType t : AllDataTypes()) {
    MustRegister(r, KernelDef("DynamicStitch").TypeConstraint("T", t), MakeKernel<DynamicStitchOp>);
  }
  MustRegister(r, KernelDef("PartitionIds").TypeConstraint("Tindices", DataType::kInt32),
               MakeKernel<PartitionIdsOp<int32_t>>);
  MustRegister(r, KernelDef("PartitionIds").TypeConstraint("Tindices", DataType::kInt64),
               MakeKernel<PartitionIdsOp<int64_t>>);
  unique.operator()<int32_t, int32_t>();
  unique.operator()<int32_t, int64_t>();
  unique.operator()<int64_t, int32_t>();
  unique.operator()<int64_t, int64_t>();
}

}  // namespace flowstate::internal

// The helpers of array_kernel_util.h: index-vector reading, parallel memcpy and
// the strided-copy engine behind Transpose, Slice and StridedSlice.
#include "devices/cpu/array_kernel_util.h"

#include <algorithm>
#include <cstring>

namespace flowstate::internal {
namespace {

// Tile edge of the blocked transpose: a 32 x 32 tile of 8-byte elements is
// 8 KiB, so a source and a destination tile stay in L1.
constexpr int64_t kTile = 32;

// Odometer over the first `rank` dimensions of a plan: tracks the source
// offset of the current index as it advances in row-major order.
struct Odometer {
  const StridedCopyPlan& p;
  int rank;
  int64_t idx[kMaxRank] = {};
  int64_t off;

  Odometer(const StridedCopyPlan& plan, int r, int64_t linear) : p(plan), rank(r), off(plan.offset) {
    for (int k = rank - 1; k >= 0; --k) {
      idx[k] = linear % p.len[k];
      linear /= p.len[k];
      off += idx[k] * p.stride[k];
    }
  }
  void Next() {
    for (int k = rank - 1; k >= 0; --k) {
      off += p.stride[k];
      if (++idx[k] < p.len[k]) return;
      off -= idx[k] * p.stride[k];
      idx[k] = 0;
    }
  }
};

// Rows of `cols` elements, source elements `stride` apart.
template <typename U>
void CopyRows(Device* device, const U* src, U* dst, const StridedCopyPlan& p) {
  const int outer_rank = p.rank - 1;
  const int64_t cols = p.len[p.rank - 1];
  const int64_t s = p.stride[p.rank - 1];
  int64_t rows = 1;
  for (int k = 0; k < outer_rank; ++k) rows *= p.len[k];
  device->ParallelFor(rows, cols * int64_t(sizeof(U)) + 8, [&](int64_t begin, int64_t end) {
    Odometer od(p, outer_rank, begin);
    U* d = dst + begin * cols;
    for (int64_t r = begin; r < end; ++r, d += cols) {
      const U* from = src + od.off;
      if (s == 1) {
        std::memcpy(d, from, size_t(cols) * sizeof(U));
      } else {
        for (int64_t j = 0; j < cols; ++j) d[j] = from[j * s];
      }
      od.Next();
    }
  });
}

// The innermost two output dimensions are a transpose of the source: the
// second-to-last has source stride 1, the last does not. Copies tile by
// tile so both sides stay in cache.
template <typename U>
void CopyTransposed(Device* device, const U* src, U* dst, const StridedCopyPlan& p) {
  const int outer_rank = p.rank - 2;
  const int64_t rows = p.len[p.rank - 2], cols = p.len[p.rank - 1];
  const int64_t s = p.stride[p.rank - 1];
  int64_t outer = 1;
  for (int k = 0; k < outer_rank; ++k) outer *= p.len[k];
  const int64_t row_blocks = (rows + kTile - 1) / kTile;
  const int64_t cost = kTile * cols * int64_t(sizeof(U)) * 2;
  device->ParallelFor(outer * row_blocks, cost, [&](int64_t begin, int64_t end) {
    Odometer od(p, outer_rank, begin / row_blocks);
    int64_t o = begin / row_blocks;
    for (int64_t u = begin; u < end; ++u) {
      const int64_t ob = u / row_blocks;
      while (o < ob) {
        od.Next();
        ++o;
      }
      const int64_t i0 = (u % row_blocks) * kTile, i1 = std::min(rows, i0 + kTile);
      const U* base = src + od.off;
      U* out = dst + ob * rows * cols;
      for (int64_t j0 = 0; j0 < cols; j0 += kTile) {
        const int64_t j1 = std::min(cols, j0 + kTile);
        for (int64_t i = i0; i < i1; ++i) {
          U* d = out + i * cols;
          const U* from = base + i;
          for (int64_t j = j0; j < j1; ++j) d[j] = from[j * s];
        }
      }
    }
  });
}

}  // namespace

Status KernelError(const OpKernel& k, const std::string& message) {
  return InvalidArgument("node '" + k.name() + "' (" + k.type_string() + "): " + message, k.name());
}

Status ReadIndexVector(const OpKernel& k, const Tensor& t, const char* what,
                       std::vector<int64_t>* out) {
  if (t.rank() != 1) {
    return KernelError(k, std::string(what) + " must be a vector, got shape " +
                              t.shape().ToString());
  }
  const int64_t n = t.num_elements();
  out->resize(size_t(n));
  if (t.dtype() == DataType::kInt32) {
    const int32_t* d = t.data<int32_t>();
    for (int64_t i = 0; i < n; ++i) (*out)[i] = d[i];
  } else if (t.dtype() == DataType::kInt64) {
    const int64_t* d = t.data<int64_t>();
    for (int64_t i = 0; i < n; ++i) (*out)[i] = d[i];
  } else {
    return KernelError(k, std::string(what) + " must be int32 or int64, got " +
                              std::string(DataTypeName(t.dtype())));
  }
  return Status();
}

Status ReadIndexScalar(const OpKernel& k, const Tensor& t, const char* what, int64_t* out) {
  if (t.num_elements() != 1 || t.rank() > 1) {
    return KernelError(k, std::string(what) + " must be a scalar, got shape " +
                              t.shape().ToString());
  }
  if (t.dtype() == DataType::kInt32) {
    *out = t.data<int32_t>()[0];
  } else if (t.dtype() == DataType::kInt64) {
    *out = t.data<int64_t>()[0];
  } else {
    return KernelError(k, std::string(what) + " must be int32 or int64, got " +
                              std::string(DataTypeName(t.dtype())));
  }
  return Status();
}

void ParallelMemcpy(Device* device, void* dst, const void* src, size_t bytes) {
  constexpr size_t kChunk = size_t(1) << 18;
  if (bytes < 4 * kChunk || device->num_threads() <= 1) {
    if (bytes) std::memcpy(dst, src, bytes);
    return;
  }
  const int64_t chunks = int64_t((bytes + kChunk - 1) / kChunk);
  device->ParallelFor(chunks, int64_t(kChunk / 4), [&](int64_t begin, int64_t end) {
    size_t b = size_t(begin) * kChunk, e = std::min(bytes, size_t(end) * kChunk);
    std::memcpy(static_cast<char*>(dst) + b, static_cast<const char*>(src) + b, e - b);
  });
}

void RowMajorStrides(const TensorShape& shape, int64_t* strides) {
  int64_t s = 1;
  for (int k = shape.rank() - 1; k >= 0; --k) {
    strides[k] = s;
    s *= shape.dim(k);
  }
}

int64_t StridedCopyPlan::num_elements() const {
  int64_t n = 1;
  for (int k = 0; k < rank; ++k) n *= len[k];
  return n;
}

void StridedCopyPlan::Simplify() {
  int r = 0;
  for (int k = 0; k < rank; ++k) {
    if (len[k] == 1) continue;
    if (r > 0 && stride[r - 1] == len[k] * stride[k]) {
      len[r - 1] *= len[k];
      stride[r - 1] = stride[k];
    } else {
      len[r] = len[k];
      stride[r] = stride[k];
      ++r;
    }
  }
  rank = r;
}

void EmitStridedCopy(OpKernelContext* ctx, const Tensor& in, StridedCopyPlan plan,
                     const TensorShape& out_shape) {
  const int64_t n = plan.num_elements();
  Tensor* out = nullptr;
  if (n == 0) {
    (void)ctx->allocate_output(0, out_shape, &out);  // an error is recorded on ctx
    return;
  }
  plan.Simplify();
  if (plan.rank == 0 || (plan.rank == 1 && plan.stride[0] == 1)) {
    // One increasing run: a window of the input's buffer.
    Tensor flat = in.Reshaped(TensorShape({in.num_elements()})).value();
    ctx->set_output(0, flat.Slice(plan.offset, plan.offset + n).Reshaped(out_shape).value());
    return;
  }
  if (!ctx->allocate_output(0, out_shape, &out).ok()) return;
  DispatchByElementSize(in.dtype(), [&]<typename U>() {
    const U* src = static_cast<const U*>(in.raw_data());
    U* dst = static_cast<U*>(out->raw_data());
    const int r = plan.rank;
    if (r >= 2 && plan.stride[r - 2] == 1 && plan.stride[r - 1] != 1) {
      CopyTransposed<U>(ctx->device(), src, dst, plan);
    } else {
      CopyRows<U>(ctx->device(), src, dst, plan);
    }
  });
}

}  // namespace flowstate::internal

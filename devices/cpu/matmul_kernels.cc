// MatMul and BatchMatMul on the CPU.
//
// One GEMM routine serves both kernels (row-major C = op(A) × op(B)):
//   - Products of m·n·k <= kSmallGemm run inline through Eigen: a
//     dnnl_sgemm call costs ~0.5 µs before it starts, which Eigen beats up
//     to about 48³.
//   - From m·n·k >= kParallelGemm on, the larger of m and n is split into
//     blocks of kSplitStep rows (columns), spread over the device's
//     intra-op pool with Device::ParallelFor. Below that, waking a pool
//     thread (tens of µs on the VM) costs more than the second core gives.
//   - Each block is one single-threaded GEMM: dnnl_sgemm for float32 when
//     built with oneDNN (FLOWSTATE_HAVE_ONEDNN), Eigen's product on mapped
//     row-major matrices otherwise (float64, or no oneDNN).
//
// Threads: Debian's libdnnl 2.6 threads with OpenMP, and its own OpenMP
// team is deliberately not used: before each call the calling thread's
// OpenMP thread count is set to 1 (omp_set_num_threads touches only the
// calling thread's ICV), so the device's pool stays the one intra-op thread
// budget. A team of num_threads() per call is up to ~1.6x faster on an idle
// machine for mid-sized products, but OpenMP threads spin at barriers and
// collapse as soon as the cores are shared: on the 2-core VM while other
// builds ran, a 128³ product fell to 0.3–3 GFLOP/s (pool split: 40–80) and
// 1024³ to 20–60 (pool split: 40–130). Concurrent kernels would also each
// start a team, oversubscribing the cores. Eigen's threading is off as
// well (it needs -fopenmp, which these files are not built with).
// BENCHMARKS.md ("MatMul") has the measurements.
//
// BatchMatMul runs the same routine per matrix; when the matrices are small
// and many it spreads whole matrices over the pool instead.

// g++ 12 at -O3 -march=native reports false "may be used uninitialized"
// warnings inside Eigen's AVX-512 GEMM kernels (the _mm512_undefined_*()
// operands of avx512fintrin.h); they come from the instantiations below.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include <algorithm>
#include <string>
#include <type_traits>
#include <vector>

#include <Eigen/Core>

#ifdef FLOWSTATE_HAVE_ONEDNN
#include <omp.h>
#include <oneapi/dnnl/dnnl.h>
#endif

#include "devices/cpu/register_kernels.h"

namespace flowstate::internal {
namespace {

// Up to this m·n·k Eigen's inline product beats a dnnl_sgemm call
// (measured on the 2-core Sapphire Rapids VM: equal at 48³, Eigen 3x
// faster at 16³).
constexpr int64_t kSmallGemm = 48 * 48 * 48;
// From this m·n·k (256³) on a product is split across the device's threads.
constexpr int64_t kParallelGemm = int64_t{1} << 24;
// Rows or columns per unit of the split (a multiple of the register tiles
// of dnnl's and Eigen's AVX-512 kernels).
constexpr int64_t kSplitStep = 16;

template <typename T>
using RowMatrix = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
template <typename T>
using StridedMap = Eigen::Map<const RowMatrix<T>, Eigen::Unaligned, Eigen::OuterStride<>>;

// One block product on the calling thread, BLAS-style: C[m, n] = op(A) ×
// op(B), row-major with leading dimensions; A is [k, m] when ta (else
// [m, k]), B is [n, k] when tb (else [k, n]).
template <typename T>
void EigenGemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const T* a, int64_t lda,
               const T* b, int64_t ldb, T* c, int64_t ldc) {
  StridedMap<T> A(a, ta ? k : m, ta ? m : k, Eigen::OuterStride<>(lda));
  StridedMap<T> B(b, tb ? n : k, tb ? k : n, Eigen::OuterStride<>(ldb));
  Eigen::Map<RowMatrix<T>, Eigen::Unaligned, Eigen::OuterStride<>> C(c, m, n,
                                                                     Eigen::OuterStride<>(ldc));
  if (ta && tb) {
    C.noalias() = A.transpose() * B.transpose();
  } else if (ta) {
    C.noalias() = A.transpose() * B;
  } else if (tb) {
    C.noalias() = A * B.transpose();
  } else {
    C.noalias() = A * B;
  }
}

template <typename T>
void SerialGemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const T* a, int64_t lda,
                const T* b, int64_t ldb, T* c, int64_t ldc) {
#ifdef FLOWSTATE_HAVE_ONEDNN
  if constexpr (std::is_same_v<T, float>) {
    if (m * n * k > kSmallGemm) {
      if (omp_get_max_threads() != 1) omp_set_num_threads(1);
      const dnnl_status_t s = dnnl_sgemm(ta ? 'T' : 'N', tb ? 'T' : 'N', m, n, k, 1.0f, a, lda, b,
                                         ldb, 0.0f, c, ldc);
      if (s == dnnl_success) return;
      // dnnl rejects only malformed arguments, which the kernels rule out;
      // fall back to Eigen rather than fail the step.
    }
  }
#endif
  EigenGemm(ta, tb, m, n, k, a, lda, b, ldb, c, ldc);
}

// C = op(A) × op(B), all row-major and contiguous; REQUIRES m, n, k > 0.
// `threaded`: may use the device's threads (else runs on the caller's).
template <typename T>
void Gemm(Device* device, bool threaded, bool ta, bool tb, int64_t m, int64_t n, int64_t k,
          const T* a, const T* b, T* c) {
  const int64_t lda = ta ? m : k, ldb = tb ? k : n;
  if (!threaded || device->num_threads() == 1 || m * n * k < kParallelGemm) {
    SerialGemm(ta, tb, m, n, k, a, lda, b, ldb, c, n);
    return;
  }
  // Split the larger output dimension; each block reads all of the other
  // operand. op(A) rows [r0, r1) start at row r0 of A (or its column r0
  // when transposed); op(B) columns likewise.
  const bool by_rows = m >= n;
  const int64_t extent = by_rows ? m : n;
  const int64_t units = (extent + kSplitStep - 1) / kSplitStep;
  // About 32 flops per cycle: the cost of one unit in cycles.
  const int64_t cost = std::max<int64_t>(1, 2 * kSplitStep * (by_rows ? n : m) * k / 32);
  device->ParallelFor(units, cost, [&](int64_t u0, int64_t u1) {
    const int64_t lo = u0 * kSplitStep, hi = std::min(extent, u1 * kSplitStep);
    if (by_rows) {
      SerialGemm(ta, tb, hi - lo, n, k, a + (ta ? lo : lo * lda), lda, b, ldb, c + lo * n, n);
    } else {
      SerialGemm(ta, tb, m, hi - lo, k, a, lda, b + (tb ? lo * ldb : lo), ldb, c + lo, n);
    }
  });
}

template <typename T>
class MatMulOp final : public OpKernel {
 public:
  explicit MatMulOp(OpKernelConstruction* c) : OpKernel(c) {
    if (!c->GetAttr("transpose_a", &ta_).ok()) return;
    if (!c->GetAttr("transpose_b", &tb_).ok()) return;
  }

  void Compute(OpKernelContext* ctx) override {
    const Tensor& a = ctx->input(0);
    const Tensor& b = ctx->input(1);
    FS_OP_REQUIRES(ctx, a.rank() == 2 && b.rank() == 2,
                   InvalidArgument("both inputs must be matrices, got shapes " +
                                       a.shape().ToString() + " and " + b.shape().ToString(),
                                   name()));
    const int64_t m = a.dim(ta_ ? 1 : 0), k = a.dim(ta_ ? 0 : 1);
    const int64_t kb = b.dim(tb_ ? 1 : 0), n = b.dim(tb_ ? 0 : 1);
    FS_OP_REQUIRES(ctx, k == kb,
                   InvalidArgument("inner dimensions differ: " + a.shape().ToString() +
                                       (ta_ ? "ᵀ" : "") + " × " + b.shape().ToString() +
                                       (tb_ ? "ᵀ" : ""),
                                   name()));
    Tensor* out = nullptr;
    FS_OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({m, n}), &out));
    if (m == 0 || n == 0) return;
    if (k == 0) {
      std::fill_n(out->data<T>(), m * n, T(0));
      return;
    }
    Gemm<T>(ctx->device(), true, ta_, tb_, m, n, k, a.data<T>(), b.data<T>(), out->data<T>());
  }

 private:
  bool ta_ = false;
  bool tb_ = false;
};

template <typename T>
class BatchMatMulOp final : public OpKernel {
 public:
  explicit BatchMatMulOp(OpKernelConstruction* c) : OpKernel(c) {
    if (!c->GetAttr("adj_x", &adj_x_).ok()) return;
    if (!c->GetAttr("adj_y", &adj_y_).ok()) return;
  }

  void Compute(OpKernelContext* ctx) override {
    const Tensor& x = ctx->input(0);
    const Tensor& y = ctx->input(1);
    FS_OP_REQUIRES(ctx, x.rank() >= 2 && y.rank() >= 2,
                   InvalidArgument("inputs must have rank >= 2, got " + x.shape().ToString() +
                                       " and " + y.shape().ToString(),
                                   name()));
    const int rx = x.rank(), ry = y.rank();
    const int64_t m = x.dim(adj_x_ ? rx - 1 : rx - 2), k = x.dim(adj_x_ ? rx - 2 : rx - 1);
    const int64_t ky = y.dim(adj_y_ ? ry - 1 : ry - 2), n = y.dim(adj_y_ ? ry - 2 : ry - 1);
    FS_OP_REQUIRES(ctx, k == ky,
                   InvalidArgument("inner dimensions differ: " + x.shape().ToString() + " and " +
                                       y.shape().ToString(),
                                   name()));
    // Broadcast the batch dims (right-aligned, NumPy rules); record for each
    // output matrix which x and y matrices it multiplies.
    const int rb = std::max(rx, ry) - 2;
    TensorShape out_shape;
    std::vector<int64_t> bx(rb), by(rb);  // batch dims of x and y, padded with 1s
    for (int i = 0; i < rb; ++i) {
      const int ix = i - (rb - (rx - 2)), iy = i - (rb - (ry - 2));
      bx[i] = ix >= 0 ? x.dim(ix) : 1;
      by[i] = iy >= 0 ? y.dim(iy) : 1;
      FS_OP_REQUIRES(ctx, bx[i] == by[i] || bx[i] == 1 || by[i] == 1,
                     InvalidArgument("batch dimensions do not broadcast: " +
                                         x.shape().ToString() + " and " + y.shape().ToString(),
                                     name()));
      out_shape.AddDim(bx[i] == 1 ? by[i] : bx[i]);
    }
    const int64_t batch = out_shape.num_elements();
    out_shape.AddDim(m);
    out_shape.AddDim(n);
    Tensor* out = nullptr;
    FS_OP_REQUIRES_OK(ctx, ctx->allocate_output(0, out_shape, &out));
    if (out->num_elements() == 0) return;
    T* c = out->data<T>();
    if (k == 0) {
      std::fill_n(c, out->num_elements(), T(0));
      return;
    }
    std::vector<int64_t> xi(batch), yi(batch);
    for (int64_t bi = 0; bi < batch; ++bi) {
      int64_t rest = bi, ox = 0, oy = 0, sx = 1, sy = 1;
      for (int d = rb - 1; d >= 0; --d) {
        const int64_t extent = out_shape.dim(d), at = rest % extent;
        rest /= extent;
        if (bx[d] != 1) ox += at * sx;
        if (by[d] != 1) oy += at * sy;
        sx *= bx[d];
        sy *= by[d];
      }
      xi[bi] = ox;
      yi[bi] = oy;
    }
    const T* xd = x.data<T>();
    const T* yd = y.data<T>();
    Device* device = ctx->device();
    auto one = [&](int64_t bi, bool threaded) {
      Gemm<T>(device, threaded, adj_x_, adj_y_, m, n, k, xd + xi[bi] * m * k,
              yd + yi[bi] * k * n, c + bi * m * n);
    };
    // Products too small to split: one matrix per task, each on one thread.
    const int64_t work = m * n * k;
    if (batch > 1 && work < kParallelGemm) {
      device->ParallelFor(batch, std::max<int64_t>(1, work / 16), [&](int64_t b0, int64_t e0) {
        for (int64_t bi = b0; bi < e0; ++bi) one(bi, false);
      });
    } else {
      for (int64_t bi = 0; bi < batch; ++bi) one(bi, true);
    }
  }

 private:
  bool adj_x_ = false;
  bool adj_y_ = false;
};

template <typename T>
void RegisterForType(KernelRegistry* r) {
  MustRegister(r, KernelDef("MatMul").TypeConstraint("T", kDataTypeOf<T>), MakeKernel<MatMulOp<T>>);
  MustRegister(r, KernelDef("BatchMatMul").TypeConstraint("T", kDataTypeOf<T>),
               MakeKernel<BatchMatMulOp<T>>);
}

}  // namespace

void RegisterMatMulKernels(KernelRegistry* r) {
  RegisterForType<float>(r);
  RegisterForType<double>(r);
}

}  // namespace flowstate::internal

// MaxPool, MaxPoolGrad, AvgPool and AvgPoolGrad on the CPU, float32 and
// float64, NHWC, with TensorFlow's SAME/VALID window arithmetic
// (nn_kernels_common.h).
//
// Plain loops: for each output pixel the window's cells are visited row by
// row and combined channel-wise (the inner loop runs over the contiguous
// channels, which the compiler vectorizes). The forward ops spread rows of
// output pixels over the device's threads; the gradients spread whole
// images, because overlapping windows add into the same input cells.
//
//  - Max: the first maximum of a window, in row-major order, wins a tie
//    (as TensorFlow's CPU kernels); MaxPoolGrad recomputes the argmax from
//    orig_input and routes each window's gradient there (orig_output only
//    has its shape checked).
//  - Avg: SAME windows average only the cells inside the input; the
//    gradient is spread evenly over those cells.
//
// A oneDNN pooling primitive was not used: these loops cost well under a
// millisecond on the Fashion-MNIST CNN's pools (BENCHMARKS.md) and settle
// ties exactly as TensorFlow does.
#include <algorithm>
#include <limits>
#include <string>
#include <vector>

#include "devices/cpu/nn_kernels_common.h"
#include "devices/cpu/register_kernels.h"

namespace flowstate::internal {
namespace {

// The geometry of one pooling: input [n, h, w, c], output [n, oh, ow, c].
struct PoolGeometry {
  int64_t n = 0, h = 0, w = 0, c = 0, oh = 0, ow = 0;
  int64_t kh = 1, kw = 1, sh = 1, sw = 1, pad_top = 0, pad_left = 0;

  // The window of output (i, j), clipped to the input: rows [h0, h1),
  // columns [w0, w1).
  void Window(int64_t i, int64_t j, int64_t* h0, int64_t* h1, int64_t* w0, int64_t* w1) const {
    const int64_t hs = i * sh - pad_top, ws = j * sw - pad_left;
    *h0 = std::max<int64_t>(hs, 0);
    *h1 = std::min(hs + kh, h);
    *w0 = std::max<int64_t>(ws, 0);
    *w1 = std::min(ws + kw, w);
  }
  TensorShape output_shape() const { return TensorShape({n, oh, ow, c}); }
};

PoolGeometry MakePoolGeometry(int64_t n, int64_t h, int64_t w, int64_t c, const WindowAttrs& a) {
  PoolGeometry g;
  g.n = n, g.h = h, g.w = w, g.c = c;
  g.kh = a.ksize_h, g.kw = a.ksize_w, g.sh = a.stride_h, g.sw = a.stride_w;
  const WindowDim dh = ComputeWindowDim(h, a.ksize_h, a.stride_h, 1, a.same);
  const WindowDim dw = ComputeWindowDim(w, a.ksize_w, a.stride_w, 1, a.same);
  g.oh = dh.out, g.pad_top = dh.pad_before;
  g.ow = dw.out, g.pad_left = dw.pad_before;
  return g;
}

// Channels whose argmax MaxPoolGrad tracks at once.
constexpr int64_t kBlock = 64;

// Cycles per output pixel, roughly.
int64_t PixelCost(const PoolGeometry& g) { return std::max<int64_t>(1, g.kh * g.kw * g.c / 4); }

// The forward loop of MaxPool and AvgPool: each output pixel's channels
// start at `init`, take combine(out, in) over every cell of the window,
// then finish(out, number of cells). Rows of output are split over the
// device's threads.
template <typename T, typename Combine, typename Finish>
void PoolWindows(OpKernelContext* ctx, const PoolGeometry& g, const T* xd, T* yd, T init,
                 Combine combine, Finish finish) {
  const int64_t c = g.c;
  ctx->device()->ParallelFor(g.n * g.oh, g.ow * PixelCost(g), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t n = r / g.oh, i = r % g.oh;
      const T* image = xd + n * g.h * g.w * c;
      for (int64_t j = 0; j < g.ow; ++j) {
        T* out = yd + (r * g.ow + j) * c;
        std::fill_n(out, c, init);
        int64_t h0, h1, w0, w1;
        g.Window(i, j, &h0, &h1, &w0, &w1);
        for (int64_t a = h0; a < h1; ++a) {
          for (int64_t b = w0; b < w1; ++b) {
            const T* in = image + (a * g.w + b) * c;
            for (int64_t q = 0; q < c; ++q) combine(out[q], in[q]);
          }
        }
        finish(out, (h1 - h0) * (w1 - w0));
      }
    }
  });
}

class PoolKernelBase : public OpKernel {
 public:
  explicit PoolKernelBase(OpKernelConstruction* c) : OpKernel(c) {
    if (!ParsePoolAttrs(c, &attrs_).ok()) return;
  }

 protected:
  // The geometry of pooling an input of `shape`; INVALID_ARGUMENT unless it
  // is NHWC.
  StatusOr<PoolGeometry> Geometry(const TensorShape& shape, const char* what) const {
    if (shape.rank() != 4) {
      return InvalidArgument(std::string(what) + " must be NHWC (rank 4), got " +
                                 shape.ToString(),
                             name());
    }
    return MakePoolGeometry(shape.dim(0), shape.dim(1), shape.dim(2), shape.dim(3), attrs_);
  }
  Status CheckShape(const Tensor& t, const TensorShape& want, const char* what) const {
    if (t.shape() == want) return Status();
    return InvalidArgument(std::string(what) + " must have the pooled shape " + want.ToString() +
                               ", got " + ShapeString(t),
                           name());
  }

  WindowAttrs attrs_;
};

template <typename T>
class MaxPoolOp final : public PoolKernelBase {
 public:
  using PoolKernelBase::PoolKernelBase;

  void Compute(OpKernelContext* ctx) override {
    const Tensor& x = ctx->input(0);
    StatusOr<PoolGeometry> geometry = Geometry(x.shape(), "input");
    FS_OP_REQUIRES_OK(ctx, geometry.status());
    const PoolGeometry g = *geometry;
    Tensor* y = nullptr;
    FS_OP_REQUIRES_OK(ctx, ctx->allocate_output(0, g.output_shape(), &y));
    if (y->num_elements() == 0) return;
    PoolWindows(ctx, g, x.data<T>(), y->data<T>(), -std::numeric_limits<T>::infinity(),
                [](T& out, T in) { out = in > out ? in : out; }, [](T*, int64_t) {});
  }
};

template <typename T>
class MaxPoolGradOp final : public PoolKernelBase {
 public:
  using PoolKernelBase::PoolKernelBase;

  void Compute(OpKernelContext* ctx) override {
    const Tensor& x = ctx->input(0);
    const Tensor& y = ctx->input(1);
    const Tensor& dy = ctx->input(2);
    StatusOr<PoolGeometry> geometry = Geometry(x.shape(), "orig_input");
    FS_OP_REQUIRES_OK(ctx, geometry.status());
    const PoolGeometry g = *geometry;
    FS_OP_REQUIRES_OK(ctx, CheckShape(y, g.output_shape(), "orig_output"));
    FS_OP_REQUIRES_OK(ctx, CheckShape(dy, g.output_shape(), "grad"));
    Tensor* dx = nullptr;
    FS_OP_REQUIRES_OK(ctx, ctx->allocate_output(0, x.shape(), &dx));
    if (dx->num_elements() == 0) return;
    const T* xd = x.data<T>();
    const T* dyd = dy.data<T>();
    T* dxd = dx->data<T>();
    const int64_t c = g.c, in_image = g.h * g.w * c;
    FS_OP_REQUIRES(ctx, in_image <= std::numeric_limits<int32_t>::max(),
                   InvalidArgument("orig_input images of more than 2^31 elements are not supported",
                                   name()));
    // Windows that do not overlap (stride >= window) each own their cells;
    // when they also tile the whole input no cell needs zeroing first.
    const bool disjoint = g.sh >= g.kh && g.sw >= g.kw;
    const bool covering = g.sh == g.kh && g.sw == g.kw && g.oh * g.sh - g.pad_top >= g.h &&
                          g.ow * g.sw - g.pad_left >= g.w;
    ctx->device()->ParallelFor(g.n, g.oh * g.ow * PixelCost(g), [&](int64_t n0, int64_t n1) {
      // The argmax of kBlock channels at a time, in registers-sized local
      // arrays (branch-free selects, so the compiler vectorizes them).
      T best[kBlock];
      int32_t at[kBlock];  // offset of the best cell in the image
      for (int64_t n = n0; n < n1; ++n) {
        const T* image = xd + n * in_image;
        T* grad = dxd + n * in_image;
        if (!covering) std::fill_n(grad, in_image, T(0));
        for (int64_t i = 0; i < g.oh; ++i) {
          for (int64_t j = 0; j < g.ow; ++j) {
            int64_t h0, h1, w0, w1;
            g.Window(i, j, &h0, &h1, &w0, &w1);
            if (h0 >= h1 || w0 >= w1) continue;
            const T* g_out = dyd + ((n * g.oh + i) * g.ow + j) * c;
            for (int64_t q0 = 0; q0 < c; q0 += kBlock) {
              const int64_t qn = std::min<int64_t>(kBlock, c - q0);
              const int32_t first = int32_t((h0 * g.w + w0) * c + q0);
              for (int64_t q = 0; q < qn; ++q) {
                best[q] = image[first + q];
                at[q] = first;
              }
              for (int64_t a = h0; a < h1; ++a) {
                for (int64_t b = w0; b < w1; ++b) {
                  const int32_t cell = int32_t((a * g.w + b) * c + q0);
                  const T* in = image + cell;
                  for (int64_t q = 0; q < qn; ++q) {
                    const bool greater = in[q] > best[q];  // strictly: the first maximum wins
                    best[q] = greater ? in[q] : best[q];
                    at[q] = greater ? cell : at[q];
                  }
                }
              }
              if (!disjoint) {
                for (int64_t q = 0; q < qn; ++q) grad[at[q] + q] += g_out[q0 + q];
                continue;
              }
              // Disjoint windows: write every cell of this one (no zeroing
              // pass, no read-modify-write).
              for (int64_t a = h0; a < h1; ++a) {
                for (int64_t b = w0; b < w1; ++b) {
                  const int32_t cell = int32_t((a * g.w + b) * c + q0);
                  T* out = grad + cell;
                  for (int64_t q = 0; q < qn; ++q) out[q] = at[q] == cell ? g_out[q0 + q] : T(0);
                }
              }
            }
          }
        }
      }
    });
  }
};

template <typename T>
class AvgPoolOp final : public PoolKernelBase {
 public:
  using PoolKernelBase::PoolKernelBase;

  void Compute(OpKernelContext* ctx) override {
    const Tensor& x = ctx->input(0);
    StatusOr<PoolGeometry> geometry = Geometry(x.shape(), "value");
    FS_OP_REQUIRES_OK(ctx, geometry.status());
    const PoolGeometry g = *geometry;
    Tensor* y = nullptr;
    FS_OP_REQUIRES_OK(ctx, ctx->allocate_output(0, g.output_shape(), &y));
    if (y->num_elements() == 0) return;
    PoolWindows(ctx, g, x.data<T>(), y->data<T>(), T(0), [](T& out, T in) { out += in; },
                [c = g.c](T* out, int64_t cells) {
                  const T scale = T(1) / T(std::max<int64_t>(cells, 1));
                  for (int64_t q = 0; q < c; ++q) out[q] *= scale;
                });
  }
};

template <typename T>
class AvgPoolGradOp final : public PoolKernelBase {
 public:
  using PoolKernelBase::PoolKernelBase;

  void Compute(OpKernelContext* ctx) override {
    const Tensor& sizes = ctx->input(0);
    const Tensor& dy = ctx->input(1);
    FS_OP_REQUIRES(ctx, sizes.dtype() == DataType::kInt32 && sizes.rank() == 1 && sizes.dim(0) == 4,
                   InvalidArgument("orig_input_shape must be an int32 vector of 4 entries, got " +
                                       std::string(DataTypeName(sizes.dtype())) +
                                       ShapeString(sizes),
                                   name()));
    std::vector<int64_t> dims(4);
    for (int i = 0; i < 4; ++i) {
      dims[size_t(i)] = sizes.data<int32_t>()[i];
      FS_OP_REQUIRES(ctx, dims[size_t(i)] >= 0,
                     InvalidArgument("orig_input_shape must not be negative, got " +
                                         sizes.DebugString(),
                                     name()));
    }
    const TensorShape in_shape({dims[0], dims[1], dims[2], dims[3]});
    const PoolGeometry g = MakePoolGeometry(dims[0], dims[1], dims[2], dims[3], attrs_);
    FS_OP_REQUIRES_OK(ctx, CheckShape(dy, g.output_shape(), "grad"));
    Tensor* dx = nullptr;
    FS_OP_REQUIRES_OK(ctx, ctx->allocate_output(0, in_shape, &dx));
    if (dx->num_elements() == 0) return;
    const T* dyd = dy.data<T>();
    T* dxd = dx->data<T>();
    const int64_t c = g.c, in_image = g.h * g.w * c;
    ctx->device()->ParallelFor(g.n, g.oh * g.ow * PixelCost(g), [&](int64_t n0, int64_t n1) {
      std::vector<T> share(static_cast<size_t>(c));
      for (int64_t n = n0; n < n1; ++n) {
        T* grad = dxd + n * in_image;
        std::fill_n(grad, in_image, T(0));
        for (int64_t i = 0; i < g.oh; ++i) {
          for (int64_t j = 0; j < g.ow; ++j) {
            int64_t h0, h1, w0, w1;
            g.Window(i, j, &h0, &h1, &w0, &w1);
            if (h0 >= h1 || w0 >= w1) continue;
            const T scale = T(1) / T((h1 - h0) * (w1 - w0));
            const T* g_out = dyd + ((n * g.oh + i) * g.ow + j) * c;
            for (int64_t q = 0; q < c; ++q) share[size_t(q)] = g_out[q] * scale;
            for (int64_t a = h0; a < h1; ++a) {
              for (int64_t b = w0; b < w1; ++b) {
                T* cell = grad + (a * g.w + b) * c;
                for (int64_t q = 0; q < c; ++q) cell[q] += share[size_t(q)];
              }
            }
          }
        }
      }
    });
  }
};

template <typename T>
void RegisterForType(KernelRegistry* r) {
  const DataType t = kDataTypeOf<T>;
  MustRegister(r, KernelDef("MaxPool").TypeConstraint("T", t), MakeKernel<MaxPoolOp<T>>);
  MustRegister(r, KernelDef("MaxPoolGrad").TypeConstraint("T", t), MakeKernel<MaxPoolGradOp<T>>);
  MustRegister(r, KernelDef("AvgPool").TypeConstraint("T", t), MakeKernel<AvgPoolOp<T>>);
  MustRegister(r, KernelDef("AvgPoolGrad").TypeConstraint("T", t), MakeKernel<AvgPoolGradOp<T>>);
}

}  // namespace

void RegisterPoolKernels(KernelRegistry* r) {
  RegisterForType<float>(r);
  RegisterForType<double>(r);
}

}  // namespace flowstate::internal

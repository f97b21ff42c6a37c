// im2col + Eigen GEMM convolutions (see conv_gemm.h).

// g++ 12 at -O3 -march=native reports false "may be used uninitialized"
// warnings inside Eigen's AVX-512 GEMM kernels (as in matmul_kernels.cc).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include "devices/cpu/conv_gemm.h"
#include "graph/mutex.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include <Eigen/Core>

namespace flowstate::internal {
namespace {

// Elements of one block of patches (256 KiB of float32): big enough for an
// efficient GEMM, small enough to stay in L2.
constexpr int64_t kPatchElements = int64_t{1} << 16;

template <typename T>
using RowMatrix = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
template <typename T>
using ConstMap = Eigen::Map<const RowMatrix<T>>;
template <typename T>
using Map = Eigen::Map<RowMatrix<T>>;

bool IsPointwise(const Conv2DGeometry& g) {
  return g.kh == 1 && g.kw == 1 && g.stride_h == 1 && g.stride_w == 1 && g.pad_top == 0 &&
         g.pad_left == 0 && g.pad_bottom == 0 && g.pad_right == 0 && g.oh == g.h && g.ow == g.w;
}

// Output pixels per block of patches.
int64_t BlockPixels(const Conv2DGeometry& g) {
  return std::max<int64_t>(1, kPatchElements / std::max<int64_t>(1, g.kh * g.kw * g.c));
}

// Writes the patches of output pixels [p0, p1) (pixel p = (n·oh + i)·ow +
// j) as rows of `col` [p1 - p0, kh·kw·c].
template <typename T>
void Im2Col(const Conv2DGeometry& g, const T* x, int64_t p0, int64_t p1, T* col) {
  const int64_t c = g.c, k = g.kh * g.kw * c;
  for (int64_t p = p0; p < p1; ++p) {
    const int64_t n = p / (g.oh * g.ow), rem = p % (g.oh * g.ow);
    const int64_t i = rem / g.ow, j = rem % g.ow;
    T* row = col + (p - p0) * k;
    const T* image = x + n * g.h * g.w * c;
    for (int64_t a = 0; a < g.kh; ++a) {
      const int64_t ih = i * g.stride_h - g.pad_top + a * g.dilation_h;
      for (int64_t b = 0; b < g.kw; ++b) {
        const int64_t iw = j * g.stride_w - g.pad_left + b * g.dilation_w;
        T* dst = row + (a * g.kw + b) * c;
        if (ih < 0 || ih >= g.h || iw < 0 || iw >= g.w) {
          std::fill_n(dst, c, T(0));
        } else {
          std::memcpy(dst, image + (ih * g.w + iw) * c, size_t(c) * sizeof(T));
        }
      }
    }
  }
}

// Adds the rows of `col` (patches of output pixels [p0, p1)) back into the
// input positions they were taken from.
template <typename T>
void Col2ImAdd(const Conv2DGeometry& g, const T* col, int64_t p0, int64_t p1, T* dx) {
  const int64_t c = g.c, k = g.kh * g.kw * c;
  for (int64_t p = p0; p < p1; ++p) {
    const int64_t n = p / (g.oh * g.ow), rem = p % (g.oh * g.ow);
    const int64_t i = rem / g.ow, j = rem % g.ow;
    const T* row = col + (p - p0) * k;
    T* image = dx + n * g.h * g.w * c;
    for (int64_t a = 0; a < g.kh; ++a) {
      const int64_t ih = i * g.stride_h - g.pad_top + a * g.dilation_h;
      if (ih < 0 || ih >= g.h) continue;
      for (int64_t b = 0; b < g.kw; ++b) {
        const int64_t iw = j * g.stride_w - g.pad_left + b * g.dilation_w;
        if (iw < 0 || iw >= g.w) continue;
        const T* src = row + (a * g.kw + b) * c;
        T* dst = image + (ih * g.w + iw) * c;
        for (int64_t q = 0; q < c; ++q) dst[q] += src[q];
      }
    }
  }
}

template <typename T>
StatusOr<Tensor> Scratch(Device* device, int64_t elements) {
  return Tensor::Allocate(device->allocator(), kDataTypeOf<T>, TensorShape({elements}));
}

// Cost in cycles of one output pixel's GEMM row (about 16 flops a cycle).
int64_t PixelCost(const Conv2DGeometry& g) {
  return std::max<int64_t>(1, 2 * g.kh * g.kw * g.c * g.o / 16);
}

}  // namespace

template <typename T>
Status Conv2DForwardGemm(Device* device, const Conv2DGeometry& g, const T* x, const T* f, T* y) {
  const int64_t pixels = g.n * g.oh * g.ow, k = g.kh * g.kw * g.c;
  if (pixels == 0 || g.o == 0) return Status();
  if (k == 0) {
    std::fill_n(y, pixels * g.o, T(0));
    return Status();
  }
  ConstMap<T> filter(f, k, g.o);
  if (IsPointwise(g)) {
    device->ParallelFor(pixels, PixelCost(g), [&](int64_t p0, int64_t p1) {
      Map<T>(y + p0 * g.o, p1 - p0, g.o).noalias() =
          ConstMap<T>(x + p0 * g.c, p1 - p0, g.c) * filter;
    });
    return Status();
  }
  const int64_t block = BlockPixels(g);
  const int64_t blocks = (pixels + block - 1) / block;
  Status status;
  Mutex mu;
  device->ParallelFor(blocks, block * PixelCost(g), [&](int64_t b0, int64_t b1) {
    StatusOr<Tensor> col = Scratch<T>(device, block * k);
    if (!col.ok()) {
      MutexLock l(mu);
      status = col.status();
      return;
    }
    T* c = col->template data<T>();
    for (int64_t b = b0; b < b1; ++b) {
      const int64_t p0 = b * block, p1 = std::min(pixels, p0 + block);
      Im2Col(g, x, p0, p1, c);
      Map<T>(y + p0 * g.o, p1 - p0, g.o).noalias() = ConstMap<T>(c, p1 - p0, k) * filter;
    }
  });
  return status;
}

template <typename T>
Status Conv2DBackpropInputGemm(Device* device, const Conv2DGeometry& g, const T* f, const T* dy,
                               T* dx) {
  if (g.input_size() == 0) return Status();
  const int64_t k = g.kh * g.kw * g.c, image_pixels = g.oh * g.ow;
  if (image_pixels == 0 || g.o == 0) {
    std::fill_n(dx, g.input_size(), T(0));
    return Status();
  }
  ConstMap<T> filter(f, k, g.o);
  if (IsPointwise(g)) {
    device->ParallelFor(g.n * image_pixels, PixelCost(g), [&](int64_t p0, int64_t p1) {
      Map<T>(dx + p0 * g.c, p1 - p0, g.c).noalias() =
          ConstMap<T>(dy + p0 * g.o, p1 - p0, g.o) * filter.transpose();
    });
    return Status();
  }
  const int64_t block = std::min(BlockPixels(g), image_pixels);
  Status status;
  Mutex mu;
  device->ParallelFor(g.n, image_pixels * PixelCost(g), [&](int64_t n0, int64_t n1) {
    StatusOr<Tensor> col = Scratch<T>(device, block * k);
    if (!col.ok()) {
      MutexLock l(mu);
      status = col.status();
      return;
    }
    T* c = col->template data<T>();
    std::fill_n(dx + n0 * g.h * g.w * g.c, (n1 - n0) * g.h * g.w * g.c, T(0));
    for (int64_t p0 = n0 * image_pixels; p0 < n1 * image_pixels; p0 += block) {
      const int64_t p1 = std::min(n1 * image_pixels, p0 + block);
      Map<T>(c, p1 - p0, k).noalias() = ConstMap<T>(dy + p0 * g.o, p1 - p0, g.o) * filter.transpose();
      Col2ImAdd(g, c, p0, p1, dx);
    }
  });
  return status;
}

template <typename T>
Status Conv2DBackpropFilterGemm(Device* device, const Conv2DGeometry& g, const T* x, const T* dy,
                                T* df) {
  const int64_t pixels = g.n * g.oh * g.ow, k = g.kh * g.kw * g.c;
  if (g.filter_size() == 0) return Status();
  std::fill_n(df, g.filter_size(), T(0));
  if (pixels == 0) return Status();
  const bool pointwise = IsPointwise(g);
  const int64_t block = BlockPixels(g);
  const int64_t blocks = (pixels + block - 1) / block;
  // One partial gradient per shard (shard 0 accumulates into df itself).
  const int64_t shards = std::min<int64_t>(device->num_threads(), blocks);
  std::vector<Tensor> partial(size_t(shards - 1));
  for (Tensor& t : partial) {
    FS_ASSIGN_OR_RETURN(t, Scratch<T>(device, g.filter_size()));
    std::fill_n(t.data<T>(), g.filter_size(), T(0));
  }
  Status status;
  Mutex mu;
  const int64_t shard_cost = blocks / shards * block * PixelCost(g);
  device->ParallelFor(shards, shard_cost, [&](int64_t s0, int64_t s1) {
    Tensor col;
    if (!pointwise) {
      StatusOr<Tensor> t = Scratch<T>(device, block * k);
      if (!t.ok()) {
        MutexLock l(mu);
        status = t.status();
        return;
      }
      col = std::move(t).value();
    }
    for (int64_t s = s0; s < s1; ++s) {
      Map<T> acc(s == 0 ? df : partial[size_t(s - 1)].template data<T>(), k, g.o);
      for (int64_t b = blocks * s / shards; b < blocks * (s + 1) / shards; ++b) {
        const int64_t p0 = b * block, p1 = std::min(pixels, p0 + block);
        const T* patches = x + p0 * g.c;  // pointwise: the input rows themselves
        if (!pointwise) {
          Im2Col(g, x, p0, p1, col.template data<T>());
          patches = col.template data<T>();
        }
        acc.noalias() += ConstMap<T>(patches, p1 - p0, k).transpose() *
                         ConstMap<T>(dy + p0 * g.o, p1 - p0, g.o);
      }
    }
  });
  for (const Tensor& t : partial) {
    const T* p = t.data<T>();
    for (int64_t i = 0; i < g.filter_size(); ++i) df[i] += p[i];
  }
  return status;
}

template Status Conv2DForwardGemm<float>(Device*, const Conv2DGeometry&, const float*,
                                         const float*, float*);
template Status Conv2DForwardGemm<double>(Device*, const Conv2DGeometry&, const double*,
                                          const double*, double*);
template Status Conv2DBackpropInputGemm<float>(Device*, const Conv2DGeometry&, const float*,
                                               const float*, float*);
template Status Conv2DBackpropInputGemm<double>(Device*, const Conv2DGeometry&, const double*,
                                                const double*, double*);
template Status Conv2DBackpropFilterGemm<float>(Device*, const Conv2DGeometry&, const float*,
                                                const float*, float*);
template Status Conv2DBackpropFilterGemm<double>(Device*, const Conv2DGeometry&, const double*,
                                                 const double*, double*);

}  // namespace flowstate::internal

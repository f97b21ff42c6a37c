// Activations and their gradients (Relu, Relu6, LeakyRelu, Elu, Sigmoid,
// Tanh, Softplus and the *Grad ops), Cos, Sin and Floor, BiasAdd and
// BiasAddGrad, for float32 and float64; and RegisterNnKernels, which
// registers every kernel of the nn_*.cc and grad_support*.cc files.
//
// Element-wise kernels write into their input's buffer when nobody else
// holds it. Comparisons and products are plain loops the compiler
// vectorizes; exp, expm1, log1p, tanh, sin and cos use Eigen's vectorized
// functions on contiguous blocks (see nn_grad_support_common.h: results do
// not depend on the thread count).
//
// Semantics of the edge cases:
// - NaN propagates through every activation (Relu(NaN) is NaN, as in
//   PyTorch); the *Grad ops treat a NaN feature as "not positive" (0 or
//   alpha * gradient), like TensorFlow.
// - Sigmoid is computed as 1 / (1 + e) or e / (1 + e) with e = exp(-|x|),
//   so neither tail loses relative accuracy (Eigen's logistic() does, by
//   up to 1e-3 in float32); Softplus is max(x, 0) + log1p(exp(-|x|)) and
//   SoftplusGrad is gradients * sigmoid(features), both without overflow.
// - Elu uses expm1 (accurate near 0); EluGrad takes Elu's outputs.
// - exp results below the smallest normal number are flushed to 0 (Eigen's
//   exp is inexact there): Sigmoid(-1000) and Softplus(-1000) are exactly
//   0; the absolute error is below 1.2e-38 (float32) or 2.3e-308.
// - BiasAdd adds the bias along the last dimension (data_format must be
//   NHWC); BiasAddGrad sums over every other dimension, accumulating in
//   double over fixed blocks of rows (bit-identical on any thread count).
//
// GCC 12 reports -W(maybe-)uninitialized inside its own AVX-512 intrinsics
// (the `__Y = __Y` of _mm512_undefined_*, GCC bug 105593) when Eigen's
// packet math is inlined; the location is the intrinsic header, so
// silencing it while the headers are read silences only that.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <Eigen/Core>
#pragma GCC diagnostic pop

#include <algorithm>
#include <cmath>
#include <vector>

#include "devices/cpu/nn_grad_support_common.h"

namespace flowstate::internal {
namespace {

template <typename T>
using ArrayMap = Eigen::Map<Eigen::Array<T, Eigen::Dynamic, 1>>;
template <typename T>
using ConstArrayMap = Eigen::Map<const Eigen::Array<T, Eigen::Dynamic, 1>>;

// Scratch blocks for two-step Eigen expressions (exp once, use it twice).
constexpr int64_t kSub = 256;

// sigmoid(x[i]) into y[i], n <= kSub; y may be x.
template <typename T>
void SigmoidSub(const T* x, T* y, int64_t n) {
  T e_buf[kSub];
  ConstArrayMap<T> X(x, n);
  ArrayMap<T> E(e_buf, n);
  E = (-X.abs()).exp();
  nn::FlushTinyExp(e_buf, n);
  // (Eigen 3.4's select() is not vectorized; this loop is.)
  for (int64_t i = 0; i < n; ++i) {
    const T r = T(1) / (T(1) + e_buf[i]);
    y[i] = x[i] >= T(0) ? r : e_buf[i] * r;
  }
}

template <typename T, typename Fn>
void ForSubBlocks(int64_t n, Fn&& fn) {
  for (int64_t s = 0; s < n; s += kSub) fn(s, std::min(kSub, n - s));
}

// ---------------------------------------------------------------------------
// Unary functors: Run(x, y, n, alpha) computes y[0, n) from x[0, n); y may
// be x. kCost: rough cycles per element.

struct ReluF {
  static constexpr int kCost = 1;
  template <typename T>
  static void Run(const T* x, T* y, int64_t n, T) {
    for (int64_t i = 0; i < n; ++i) y[i] = x[i] < T(0) ? T(0) : x[i];
  }
};
struct Relu6F {
  static constexpr int kCost = 1;
  template <typename T>
  static void Run(const T* x, T* y, int64_t n, T) {
    for (int64_t i = 0; i < n; ++i) {
      const T v = x[i] < T(0) ? T(0) : x[i];
      y[i] = v > T(6) ? T(6) : v;
    }
  }
};
struct LeakyReluF {
  static constexpr int kCost = 1;
  template <typename T>
  static void Run(const T* x, T* y, int64_t n, T alpha) {
    for (int64_t i = 0; i < n; ++i) y[i] = x[i] > T(0) ? x[i] : alpha * x[i];
  }
};
struct EluF {
  static constexpr int kCost = 10;
  template <typename T>
  static void Run(const T* x, T* y, int64_t n, T) {
    ForSubBlocks<T>(n, [&](int64_t s, int64_t m) {
      T e_buf[kSub];
      ArrayMap<T>(e_buf, m) = ConstArrayMap<T>(x + s, m).expm1();
      for (int64_t i = 0; i < m; ++i) y[s + i] = x[s + i] > T(0) ? x[s + i] : e_buf[i];
    });
  }
};
struct SigmoidF {
  static constexpr int kCost = 8;
  template <typename T>
  static void Run(const T* x, T* y, int64_t n, T) {
    ForSubBlocks<T>(n, [&](int64_t s, int64_t m) { SigmoidSub(x + s, y + s, m); });
  }
};
struct TanhF {
  static constexpr int kCost = 8;
  template <typename T>
  static void Run(const T* x, T* y, int64_t n, T) {
    ArrayMap<T>(y, n) = ConstArrayMap<T>(x, n).tanh();
  }
};
struct SoftplusF {
  static constexpr int kCost = 12;
  template <typename T>
  static void Run(const T* x, T* y, int64_t n, T) {
    ForSubBlocks<T>(n, [&](int64_t s, int64_t m) {
      T e_buf[kSub];
      ConstArrayMap<T> X(x + s, m);
      ArrayMap<T> E(e_buf, m);
      E = (-X.abs()).exp();
      nn::FlushTinyExp(e_buf, m);
      ArrayMap<T>(y + s, m) = X.max(T(0)) + E.log1p();
    });
  }
};
struct CosF {
  static constexpr int kCost = 10;
  template <typename T>
  static void Run(const T* x, T* y, int64_t n, T) {
    ArrayMap<T>(y, n) = ConstArrayMap<T>(x, n).cos();
  }
};
struct SinF {
  static constexpr int kCost = 10;
  template <typename T>
  static void Run(const T* x, T* y, int64_t n, T) {
    ArrayMap<T>(y, n) = ConstArrayMap<T>(x, n).sin();
  }
};
struct FloorF {
  static constexpr int kCost = 1;
  template <typename T>
  static void Run(const T* x, T* y, int64_t n, T) {
    for (int64_t i = 0; i < n; ++i) y[i] = std::floor(x[i]);
  }
};

// ---------------------------------------------------------------------------
// Binary (gradient) functors: Run(a, b, y, n, alpha) with a, b the op's two
// inputs in definition order; y may be a or b.

struct ReluGradF {  // (gradients, features)
  static constexpr int kCost = 1;
  template <typename T>
  static void Run(const T* g, const T* f, T* y, int64_t n, T) {
    for (int64_t i = 0; i < n; ++i) y[i] = f[i] > T(0) ? g[i] : T(0);
  }
};
struct Relu6GradF {  // (gradients, features)
  static constexpr int kCost = 1;
  template <typename T>
  static void Run(const T* g, const T* f, T* y, int64_t n, T) {
    for (int64_t i = 0; i < n; ++i) y[i] = (f[i] > T(0)) & (f[i] < T(6)) ? g[i] : T(0);
  }
};
struct LeakyReluGradF {  // (gradients, features)
  static constexpr int kCost = 1;
  template <typename T>
  static void Run(const T* g, const T* f, T* y, int64_t n, T alpha) {
    for (int64_t i = 0; i < n; ++i) y[i] = f[i] > T(0) ? g[i] : alpha * g[i];
  }
};
struct EluGradF {  // (gradients, outputs)
  static constexpr int kCost = 1;
  template <typename T>
  static void Run(const T* g, const T* out, T* y, int64_t n, T) {
    for (int64_t i = 0; i < n; ++i) y[i] = out[i] > T(0) ? g[i] : g[i] * (out[i] + T(1));
  }
};
struct SigmoidGradF {  // (y, dy)
  static constexpr int kCost = 1;
  template <typename T>
  static void Run(const T* s, const T* dy, T* y, int64_t n, T) {
    for (int64_t i = 0; i < n; ++i) y[i] = dy[i] * s[i] * (T(1) - s[i]);
  }
};
struct TanhGradF {  // (y, dy)
  static constexpr int kCost = 1;
  template <typename T>
  static void Run(const T* t, const T* dy, T* y, int64_t n, T) {
    for (int64_t i = 0; i < n; ++i) y[i] = dy[i] * (T(1) - t[i] * t[i]);
  }
};
struct SoftplusGradF {  // (gradients, features)
  static constexpr int kCost = 9;
  template <typename T>
  static void Run(const T* g, const T* f, T* y, int64_t n, T) {
    ForSubBlocks<T>(n, [&](int64_t s, int64_t m) {
      T sig[kSub];
      SigmoidSub(f + s, sig, m);
      for (int64_t i = 0; i < m; ++i) y[s + i] = g[s + i] * sig[i];
    });
  }
};

// Reads attr alpha when the op has one (LeakyRelu, LeakyReluGrad).
template <typename T>
T AlphaAttr(OpKernelConstruction* c) {
  double alpha = 0;
  if (c->op_def().FindAttr("alpha") != nullptr) (void)c->GetAttr("alpha", &alpha);
  return T(alpha);
}

template <typename T, typename F>
class UnaryOp final : public OpKernel {
 public:
  explicit UnaryOp(OpKernelConstruction* c) : OpKernel(c), alpha_(AlphaAttr<T>(c)) {}

  void Compute(OpKernelContext* ctx) override {
    const T* x = ctx->input(0).template data<T>();  // before forwarding
    const TensorShape shape = ctx->input(0).shape();
    Tensor* out = nullptr;
    FS_OP_REQUIRES_OK(ctx, ctx->forward_input_or_allocate_output({0}, 0, shape, &out));
    T* y = out->template data<T>();
    const T alpha = alpha_;
    nn::ShardBlocks(ctx, shape.num_elements(), F::kCost,
                    [&](int64_t b, int64_t e) { F::template Run<T>(x + b, y + b, e - b, alpha); });
  }

 private:
  T alpha_;
};

template <typename T, typename F>
class BinaryOp final : public OpKernel {
 public:
  explicit BinaryOp(OpKernelConstruction* c) : OpKernel(c), alpha_(AlphaAttr<T>(c)) {}

  void Compute(OpKernelContext* ctx) override {
    const Tensor& a = ctx->input(0);
    const Tensor& b = ctx->input(1);
    FS_OP_REQUIRES(ctx, a.shape() == b.shape(),
                   KernelError(*this, "inputs must have the same shape, got " +
                                          a.shape().ToString() + " and " + b.shape().ToString()));
    const T* pa = a.template data<T>();
    const T* pb = b.template data<T>();
    const TensorShape shape = a.shape();
    Tensor* out = nullptr;
    FS_OP_REQUIRES_OK(ctx, ctx->forward_input_or_allocate_output({0, 1}, 0, shape, &out));
    T* y = out->template data<T>();
    const T alpha = alpha_;
    nn::ShardBlocks(ctx, shape.num_elements(), F::kCost, [&](int64_t s, int64_t e) {
      F::template Run<T>(pa + s, pb + s, y + s, e - s, alpha);
    });
  }

 private:
  T alpha_;
};

// ---------------------------------------------------------------------------
// BiasAdd and BiasAddGrad.

// (Construction errors get the node's name prefixed by the registry.)
Status CheckNhwc(const OpKernel& k, OpKernelConstruction* c) {
  std::string format = "NHWC";
  (void)c->GetAttr("data_format", &format);
  if (format == "NHWC") return Status();
  return InvalidArgument("data_format \"" + format +
                             "\" is not supported on CPU; the bias is added along the last "
                             "dimension (NHWC)",
                         k.name());
}

template <typename T>
class BiasAddOp final : public OpKernel {
 public:
  explicit BiasAddOp(OpKernelConstruction* c) : OpKernel(c) { c->SetStatus(CheckNhwc(*this, c)); }

  void Compute(OpKernelContext* ctx) override {
    const Tensor& value = ctx->input(0);
    const Tensor& bias = ctx->input(1);
    FS_OP_REQUIRES(ctx, value.rank() >= 1,
                   KernelError(*this, "value must have rank >= 1, got a scalar"));
    FS_OP_REQUIRES(
        ctx, bias.rank() == 1,
        KernelError(*this, "bias must be a vector, got shape " + bias.shape().ToString()));
    const int64_t cols = value.dim(value.rank() - 1);
    FS_OP_REQUIRES(ctx, bias.dim(0) == cols,
                   KernelError(*this, "bias of shape " + bias.shape().ToString() +
                                          " does not match the last dimension of value " +
                                          value.shape().ToString()));
    const T* x = value.template data<T>();
    const T* b = bias.template data<T>();
    const TensorShape shape = value.shape();
    Tensor* out = nullptr;
    FS_OP_REQUIRES_OK(ctx, ctx->forward_input_or_allocate_output({0}, 0, shape, &out));
    if (cols == 0) return;
    T* y = out->template data<T>();
    cwise::Shard(ctx, shape.num_elements() / cols, cols + 4, [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        const T* xr = x + r * cols;
        T* yr = y + r * cols;
        for (int64_t c = 0; c < cols; ++c) yr[c] = xr[c] + b[c];
      }
    });
  }
};

template <typename T>
class BiasAddGradOp final : public OpKernel {
 public:
  explicit BiasAddGradOp(OpKernelConstruction* c) : OpKernel(c) {
    c->SetStatus(CheckNhwc(*this, c));
  }

  void Compute(OpKernelContext* ctx) override {
    const Tensor& g = ctx->input(0);
    FS_OP_REQUIRES(ctx, g.rank() >= 1,
                   KernelError(*this, "out_backprop must have rank >= 1, got a scalar"));
    const int64_t cols = g.dim(g.rank() - 1);
    Tensor* out = nullptr;
    FS_OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({cols}), &out));
    T* y = out->template data<T>();
    if (cols == 0) return;
    const int64_t rows = g.num_elements() / cols;
    // Rows are summed `lanes` at a time into an accumulator of lanes * cols
    // doubles (at least 64 wide, so narrow biases vectorize too), in blocks
    // of about 32K elements whose partial sums are added in order.
    const int64_t lanes = std::max<int64_t>(1, (64 + cols - 1) / cols);
    const int64_t width = lanes * cols;
    const int64_t block_rows = lanes * std::max<int64_t>(1, (int64_t(1) << 15) / width);
    const int64_t blocks = (rows + block_rows - 1) / block_rows;
    std::vector<double> partial(size_t(blocks * cols), 0.0);
    const T* x = g.template data<T>();
    ctx->device()->ParallelFor(blocks, block_rows * cols, [&](int64_t b0, int64_t b1) {
      std::vector<double> acc(static_cast<size_t>(width));
      for (int64_t blk = b0; blk < b1; ++blk) {
        std::fill(acc.begin(), acc.end(), 0.0);
        const int64_t r0 = blk * block_rows, r1 = std::min(rows, r0 + block_rows);
        int64_t r = r0;
        for (; r + lanes <= r1; r += lanes) {
          const T* xr = x + r * cols;
          for (int64_t k = 0; k < width; ++k) acc[size_t(k)] += double(xr[k]);
        }
        for (; r < r1; ++r) {
          const T* xr = x + r * cols;
          for (int64_t c = 0; c < cols; ++c) acc[size_t(c)] += double(xr[c]);
        }
        double* p = partial.data() + blk * cols;
        for (int64_t l = 0; l < lanes; ++l) {
          for (int64_t c = 0; c < cols; ++c) p[c] += acc[size_t(l * cols + c)];
        }
      }
    });
    for (int64_t c = 0; c < cols; ++c) {
      double s = 0;
      for (int64_t blk = 0; blk < blocks; ++blk) s += partial[size_t(blk * cols + c)];
      y[c] = T(s);
    }
  }
};

template <typename F>
void RegisterUnary(KernelRegistry* r, const char* op) {
  MustRegister(r, KernelDef(op).TypeConstraint("T", DataType::kFloat32),
               MakeKernel<UnaryOp<float, F>>);
  MustRegister(r, KernelDef(op).TypeConstraint("T", DataType::kFloat64),
               MakeKernel<UnaryOp<double, F>>);
}

template <typename F>
void RegisterBinary(KernelRegistry* r, const char* op) {
  MustRegister(r, KernelDef(op).TypeConstraint("T", DataType::kFloat32),
               MakeKernel<BinaryOp<float, F>>);
  MustRegister(r, KernelDef(op).TypeConstraint("T", DataType::kFloat64),
               MakeKernel<BinaryOp<double, F>>);
}

}  // namespace

void RegisterNnActivationKernels(KernelRegistry* r) {
  RegisterUnary<ReluF>(r, "Relu");
  RegisterUnary<Relu6F>(r, "Relu6");
  RegisterUnary<LeakyReluF>(r, "LeakyRelu");
  RegisterUnary<EluF>(r, "Elu");
  RegisterUnary<SigmoidF>(r, "Sigmoid");
  RegisterUnary<TanhF>(r, "Tanh");
  RegisterUnary<SoftplusF>(r, "Softplus");
  RegisterUnary<CosF>(r, "Cos");
  RegisterUnary<SinF>(r, "Sin");
  RegisterUnary<FloorF>(r, "Floor");
  RegisterBinary<ReluGradF>(r, "ReluGrad");
  RegisterBinary<Relu6GradF>(r, "Relu6Grad");
  RegisterBinary<LeakyReluGradF>(r, "LeakyReluGrad");
  RegisterBinary<EluGradF>(r, "EluGrad");
  RegisterBinary<SigmoidGradF>(r, "SigmoidGrad");
  RegisterBinary<TanhGradF>(r, "TanhGrad");
  RegisterBinary<SoftplusGradF>(r, "SoftplusGrad");
  for (DataType t : {DataType::kFloat32, DataType::kFloat64}) {
    const bool f32 = t == DataType::kFloat32;
    MustRegister(r, KernelDef("BiasAdd").TypeConstraint("T", t),
                 f32 ? MakeKernel<BiasAddOp<float>> : MakeKernel<BiasAddOp<double>>);
    MustRegister(r, KernelDef("BiasAddGrad").TypeConstraint("T", t),
                 f32 ? MakeKernel<BiasAddGradOp<float>> : MakeKernel<BiasAddGradOp<double>>);
  }
}

void RegisterNnKernels(KernelRegistry* r) {
  RegisterNnActivationKernels(r);
  RegisterNnLossKernels(r);
  RegisterNnDropoutKernels(r);
  RegisterGradSupportKernels(r);
  RegisterGradReduceKernels(r);
}

}  // namespace flowstate::internal

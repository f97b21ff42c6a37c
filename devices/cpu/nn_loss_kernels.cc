// Softmax and LogSoftmax over the last dimension, the cross-entropy losses
// (SoftmaxCrossEntropyWithLogits, SparseSoftmaxCrossEntropyWithLogits,
// SigmoidCrossEntropyWithLogits) and L2Loss, for float32 and float64.
//
// Row ops (softmax, log-softmax, both cross entropies) hand whole rows to
// the intra-op pool; each row is stabilised by subtracting its maximum, so
// exp only ever sees arguments <= 0, and is computed with Eigen's
// vectorized exp, log and sums on the contiguous row.
//
// Semantics of the edge cases:
// - A row whose maximum is not finite (it holds +inf or NaN, or is all
//   -inf) comes out as NaN (softmax, log-softmax, loss and backprop), as
//   exp(inf - inf) makes it in TensorFlow. A -inf logit in an otherwise
//   finite row (a mask) gets probability exactly 0 (log-softmax -inf).
// - exp results below the smallest normal number are flushed to 0 (Eigen's
//   exp does not give them exactly): an absolute error below 1.2e-38
//   (float32) or 2.3e-308 (float64) in a probability.
// - SoftmaxCrossEntropyWithLogits: loss = sum(labels * (log(sum(exp(s))) -
//   s)) with s = features - max, computed as log(sum(exp(s))) * sum(labels)
//   - sum(labels * s); backprop = softmax(features) - labels. Labels need
//   not be distributions. Features and labels are [batch, classes] of the
//   same shape (no broadcasting). As in TensorFlow, a -inf feature makes
//   its row's loss NaN even where its label is 0 (0 * inf); mask with a
//   large finite negative number instead.
// - SparseSoftmaxCrossEntropyWithLogits: every label is checked before any
//   output is written; one outside [0, classes) is INVALID_ARGUMENT naming
//   the node, the row and the label (also for an empty class dimension).
// - SigmoidCrossEntropyWithLogits: max(x, 0) - x * z + log1p(exp(-|x|)),
//   which never overflows; labels and logits must have the same shape.
// - L2Loss: sum(t²) / 2 accumulated in double (a float32 square is exact
//   in double) in 16 independent lanes over fixed blocks of 32K elements,
//   the block sums added in order: the result does not depend on the
//   thread count.
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

#include <cmath>
#include <limits>
#include <vector>

#include "devices/cpu/nn_grad_support_common.h"

namespace flowstate::internal {
namespace {

template <typename T>
using ArrayMap = Eigen::Map<Eigen::Array<T, Eigen::Dynamic, 1>>;
template <typename T>
using ConstArrayMap = Eigen::Map<const Eigen::Array<T, Eigen::Dynamic, 1>>;

template <typename T>
constexpr T kNaN = std::numeric_limits<T>::quiet_NaN();

template <typename T>
constexpr T kMinNormal = std::numeric_limits<T>::min();

// y[i] = e[i] * scale - sub[i] (sub may be null), with the tiny exp results
// flushed to 0 as nn::FlushTinyExp does; e may be y.
template <typename T>
void ScaleExp(const T* e, T scale, const T* sub, T* y, int64_t n) {
  if (sub == nullptr) {
    for (int64_t i = 0; i < n; ++i) y[i] = (e[i] < kMinNormal<T> ? T(0) : e[i]) * scale;
  } else {
    for (int64_t i = 0; i < n; ++i) y[i] = (e[i] < kMinNormal<T> ? T(0) : e[i]) * scale - sub[i];
  }
}

// Rows per task: about 64K cycles of work.
int64_t RowCost(int64_t cols) { return 12 * cols + 40; }

// ---------------------------------------------------------------------------
// Softmax and LogSoftmax.

template <typename T, bool kLog>
void SoftmaxRow(const T* x, T* y, int64_t n) {
  ConstArrayMap<T> X(x, n);
  ArrayMap<T> Y(y, n);
  const T m = X.maxCoeff();
  if (!std::isfinite(m)) {
    Y.setConstant(kNaN<T>);
    return;
  }
  if constexpr (kLog) {
    Y = X - m;
    const T s = Y.exp().sum();  // >= 1: the maximum contributes exp(0)
    Y -= std::log(s);
  } else {
    Y = (X - m).exp();
    ScaleExp<T>(y, T(1) / Y.sum(), nullptr, y, n);
  }
}

template <typename T, bool kLog>
class SoftmaxOp final : public OpKernel {
 public:
  using OpKernel::OpKernel;

  void Compute(OpKernelContext* ctx) override {
    const Tensor& in = ctx->input(0);
    FS_OP_REQUIRES(ctx, in.rank() >= 1,
                   KernelError(*this, "logits must have rank >= 1, got a scalar"));
    const T* x = in.template data<T>();
    const TensorShape shape = in.shape();
    Tensor* out = nullptr;
    FS_OP_REQUIRES_OK(ctx, ctx->forward_input_or_allocate_output({0}, 0, shape, &out));
    const int64_t cols = shape.dim(shape.rank() - 1);
    if (cols == 0) return;
    T* y = out->template data<T>();
    ctx->device()->ParallelFor(shape.num_elements() / cols, RowCost(cols),
                               [&](int64_t r0, int64_t r1) {
                                 for (int64_t r = r0; r < r1; ++r) {
                                   SoftmaxRow<T, kLog>(x + r * cols, y + r * cols, cols);
                                 }
                               });
  }
};

// ---------------------------------------------------------------------------
// Cross entropies.

Status CheckLogits(const OpKernel& k, const Tensor& features) {
  if (features.rank() != 2) {
    return KernelError(
        k, "features (logits) must be [batch, classes], got shape " + features.shape().ToString());
  }
  return Status();
}

template <typename T>
class SoftmaxXentOp final : public OpKernel {
 public:
  using OpKernel::OpKernel;

  void Compute(OpKernelContext* ctx) override {
    const Tensor& features = ctx->input(0);
    const Tensor& labels = ctx->input(1);
    FS_OP_REQUIRES_OK(ctx, CheckLogits(*this, features));
    FS_OP_REQUIRES(
        ctx, labels.shape() == features.shape(),
        KernelError(*this, "labels of shape " + labels.shape().ToString() +
                               " do not match features of shape " + features.shape().ToString()));
    const int64_t rows = features.dim(0), cols = features.dim(1);
    const T* x = features.template data<T>();
    const T* l = labels.template data<T>();
    const TensorShape shape = features.shape();
    Tensor* loss = nullptr;
    Tensor* backprop = nullptr;
    FS_OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({rows}), &loss));
    // Only features may be overwritten: labels are read to the end.
    FS_OP_REQUIRES_OK(ctx, ctx->forward_input_or_allocate_output({0}, 1, shape, &backprop));
    T* lo = loss->template data<T>();
    T* bp = backprop->template data<T>();
    ctx->device()->ParallelFor(rows, RowCost(cols) + 4 * cols, [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        ConstArrayMap<T> X(x + r * cols, cols), L(l + r * cols, cols);
        ArrayMap<T> B(bp + r * cols, cols);
        if (cols == 0) {
          lo[r] = T(0);
          continue;
        }
        const T m = X.maxCoeff();
        if (!std::isfinite(m)) {
          lo[r] = kNaN<T>;
          B.setConstant(kNaN<T>);
          continue;
        }
        const T dot = (L * (X - m)).sum();
        const T label_sum = L.sum();
        B = (X - m).exp();
        const T s = B.sum();
        lo[r] = std::log(s) * label_sum - dot;
        ScaleExp<T>(bp + r * cols, T(1) / s, l + r * cols, bp + r * cols, cols);
      }
    });
  }
};

template <typename T, typename L>
class SparseSoftmaxXentOp final : public OpKernel {
 public:
  using OpKernel::OpKernel;

  void Compute(OpKernelContext* ctx) override {
    const Tensor& features = ctx->input(0);
    const Tensor& labels = ctx->input(1);
    FS_OP_REQUIRES_OK(ctx, CheckLogits(*this, features));
    FS_OP_REQUIRES(
        ctx, labels.rank() == 1 && labels.dim(0) == features.dim(0),
        KernelError(*this, "labels must be a vector of " + std::to_string(features.dim(0)) +
                               " class indices (one per row of features " +
                               features.shape().ToString() + "), got shape " +
                               labels.shape().ToString()));
    const int64_t rows = features.dim(0), cols = features.dim(1);
    const L* lab = labels.template data<L>();
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t c = int64_t(lab[r]);
      FS_OP_REQUIRES(ctx, c >= 0 && c < cols,
                     KernelError(*this, "label " + std::to_string(c) + " of row " +
                                            std::to_string(r) + " is outside the valid range [0, " +
                                            std::to_string(cols) + ") of classes"));
    }
    const T* x = features.template data<T>();
    const TensorShape shape = features.shape();
    Tensor* loss = nullptr;
    Tensor* backprop = nullptr;
    FS_OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({rows}), &loss));
    FS_OP_REQUIRES_OK(ctx, ctx->forward_input_or_allocate_output({0}, 1, shape, &backprop));
    T* lo = loss->template data<T>();
    T* bp = backprop->template data<T>();
    ctx->device()->ParallelFor(rows, RowCost(cols), [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        ConstArrayMap<T> X(x + r * cols, cols);
        ArrayMap<T> B(bp + r * cols, cols);
        const int64_t c = int64_t(lab[r]);
        const T m = X.maxCoeff();
        if (!std::isfinite(m)) {
          lo[r] = kNaN<T>;
          B.setConstant(kNaN<T>);
          continue;
        }
        const T shifted_label = X[c] - m;
        B = (X - m).exp();
        const T s = B.sum();
        lo[r] = std::log(s) - shifted_label;
        ScaleExp<T>(bp + r * cols, T(1) / s, nullptr, bp + r * cols, cols);
        B[c] -= T(1);
      }
    });
  }
};

template <typename T>
class SigmoidXentOp final : public OpKernel {
 public:
  using OpKernel::OpKernel;

  void Compute(OpKernelContext* ctx) override {
    const Tensor& labels = ctx->input(0);
    const Tensor& logits = ctx->input(1);
    FS_OP_REQUIRES(ctx, labels.shape() == logits.shape(),
                   KernelError(*this, "labels of shape " + labels.shape().ToString() +
                                          " and logits of shape " + logits.shape().ToString() +
                                          " must have the same shape"));
    const T* z = labels.template data<T>();
    const T* x = logits.template data<T>();
    const TensorShape shape = logits.shape();
    Tensor* out = nullptr;
    FS_OP_REQUIRES_OK(ctx, ctx->forward_input_or_allocate_output({1, 0}, 0, shape, &out));
    T* y = out->template data<T>();
    nn::ShardBlocks(ctx, shape.num_elements(), 12, [&](int64_t b, int64_t e) {
      constexpr int64_t kSub = 256;
      T e_buf[kSub];
      for (int64_t s = b; s < e; s += kSub) {
        const int64_t m = std::min(kSub, e - s);
        ConstArrayMap<T> X(x + s, m), Z(z + s, m);
        ArrayMap<T> E(e_buf, m);
        E = (-X.abs()).exp();
        nn::FlushTinyExp(e_buf, m);
        ArrayMap<T>(y + s, m) = X.max(T(0)) - X * Z + E.log1p();
      }
    });
  }
};

// ---------------------------------------------------------------------------
// L2Loss.

template <typename T>
double SumOfSquares(const T* x, int64_t n) {
  constexpr int kLanes = 16;
  double acc[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (int k = 0; k < kLanes; ++k) acc[k] += double(x[i + k]) * double(x[i + k]);
  }
  for (int k = 0; i < n; ++i, ++k) acc[k] += double(x[i]) * double(x[i]);
  for (int w = kLanes / 2; w > 0; w /= 2) {
    for (int k = 0; k < w; ++k) acc[k] += acc[k + w];
  }
  return acc[0];
}

template <typename T>
class L2LossOp final : public OpKernel {
 public:
  using OpKernel::OpKernel;

  void Compute(OpKernelContext* ctx) override {
    const Tensor& t = ctx->input(0);
    Tensor* out = nullptr;
    FS_OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape(), &out));
    constexpr int64_t kChunk = int64_t(1) << 15;
    const int64_t n = t.num_elements();
    const int64_t chunks = (n + kChunk - 1) / kChunk;
    std::vector<double> partial(static_cast<size_t>(chunks));
    const T* x = t.template data<T>();
    ctx->device()->ParallelFor(chunks, kChunk, [&](int64_t c0, int64_t c1) {
      for (int64_t c = c0; c < c1; ++c) {
        const int64_t b = c * kChunk;
        partial[size_t(c)] = SumOfSquares(x + b, std::min(kChunk, n - b));
      }
    });
    double s = 0;
    for (double p : partial) s += p;
    *out->template data<T>() = T(s / 2);
  }
};

template <typename T>
void RegisterFor(KernelRegistry* r) {
  const DataType t = kDataTypeOf<T>;
  auto def = [t](const char* op) { return KernelDef(op).TypeConstraint("T", t); };
  MustRegister(r, def("Softmax"), MakeKernel<SoftmaxOp<T, false>>);
  MustRegister(r, def("LogSoftmax"), MakeKernel<SoftmaxOp<T, true>>);
  MustRegister(r, def("SoftmaxCrossEntropyWithLogits"), MakeKernel<SoftmaxXentOp<T>>);
  MustRegister(r, def("SigmoidCrossEntropyWithLogits"), MakeKernel<SigmoidXentOp<T>>);
  MustRegister(r, def("L2Loss"), MakeKernel<L2LossOp<T>>);
  auto sparse = [&](DataType l) {
    return def("SparseSoftmaxCrossEntropyWithLogits").TypeConstraint("Tlabels", l);
  };
  MustRegister(r, sparse(DataType::kInt32), MakeKernel<SparseSoftmaxXentOp<T, int32_t>>);
  MustRegister(r, sparse(DataType::kInt64), MakeKernel<SparseSoftmaxXentOp<T, int64_t>>);
  MustRegister(r, sparse(DataType::kUInt8), MakeKernel<SparseSoftmaxXentOp<T, uint8_t>>);
}

}  // namespace

void RegisterNnLossKernels(KernelRegistry* r) {
  RegisterFor<float>(r);
  RegisterFor<double>(r);
}

}  // namespace flowstate::internal

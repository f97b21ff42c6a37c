// Unary element-wise kernels: Neg, Abs, Sign, Square, Reciprocal and
// LogicalNot (plain loops the compiler vectorizes), Exp and Log (Eigen's
// vectorized math on contiguous arrays), Sqrt and Rsqrt (hardware square
// roots). The output reuses the input's buffer when no one else holds it;
// large inputs are split over the device's intra-op pool.
//
// Semantics of the edge cases:
// - Integer Neg and Abs wrap: Neg(INT_MIN) == Abs(INT_MIN) == INT_MIN;
//   integer Square wraps modulo 2^bits.
// - Sign(NaN) is NaN and Sign(±0) is ±0 (NumPy).
// - Exp and Log give std::exp / std::log results at the edges where Eigen's
//   vectorized versions cut corners: Eigen clamps exp's argument (so
//   exp(-inf) would not be 0, and exp(88.7f) would be inf), flushes log's denormal arguments and may lose
//   NaNs. Each block of 16 KiB is scanned for such arguments first
//   and they (only) are recomputed with <cmath>.
// - Sqrt is IEEE's correctly rounded square root; Rsqrt is 1 / Sqrt.
// GCC 12 reports -W(maybe-)uninitialized inside its own AVX-512 intrinsics
// (the `__Y = __Y` of _mm512_undefined_*, GCC bug 105593) when Eigen's
// packet math is inlined; the warning's location is the intrinsic header, so
// silencing it while the headers are read silences only that.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <Eigen/Core>
#if defined(__AVX__)
#include <immintrin.h>
#endif
#pragma GCC diagnostic pop

#include <algorithm>
#include <cmath>
#include <limits>

#include "devices/cpu/cwise_kernels_common.h"

namespace flowstate::internal {
namespace {

template <typename T>
using ArrayMap = Eigen::Map<Eigen::Array<T, Eigen::Dynamic, 1>>;
template <typename T>
using ConstArrayMap = Eigen::Map<const Eigen::Array<T, Eigen::Dynamic, 1>>;

// Functors with a scalar Apply (plain loop) or a Run over a contiguous
// array (Eigen). kCost: rough cycles per element (measured, AVX-512).

struct NegF {
  static constexpr int kCost = 1;
  template <typename T>
  static T Apply(T x) {
    if constexpr (std::is_integral_v<T>) return cwise::WrapNeg(x);
    else return -x;
  }
};
struct AbsF {
  static constexpr int kCost = 1;
  template <typename T>
  static T Apply(T x) {
    if constexpr (std::is_integral_v<T>) return x < 0 ? cwise::WrapNeg(x) : x;
    else return std::abs(x);
  }
};
struct SignF {
  static constexpr int kCost = 1;
  template <typename T>
  static T Apply(T x) {
    if constexpr (std::is_integral_v<T>) return T((x > 0) - (x < 0));
    else return x > 0 ? T(1) : (x < 0 ? T(-1) : x);  // ±0 and NaN unchanged
  }
};
struct SquareF {
  static constexpr int kCost = 1;
  template <typename T>
  static T Apply(T x) {
    if constexpr (std::is_integral_v<T>) return cwise::WrapMul(x, x);
    else return x * x;
  }
};
struct ReciprocalF {
  static constexpr int kCost = 2;
  template <typename T>
  static T Apply(T x) {
    return T(1) / x;
  }
};
struct LogicalNotF {
  static constexpr int kCost = 1;
  static bool Apply(bool x) { return !x; }
};

// Eigen over blocks, with the arguments for which Eigen is not exact
// (Special) recomputed by the scalar Fallback. Special must be branch-free
// (`&`, not `&&`) so the scan vectorizes.
template <typename T, typename Eig, typename Special, typename Fallback>
void EigenWithFallback(const T* x, T* y, int64_t n, Eig eig, Special special,
                       Fallback fallback) {
  constexpr int64_t kBlock = 16384 / sizeof(T);  // a stack copy if needed
  for (int64_t s = 0; s < n; s += kBlock) {
    const int64_t m = std::min(kBlock, n - s);
    const T* xs = x + s;
    T* ys = y + s;
    int any = 0;
    for (int64_t i = 0; i < m; ++i) any |= int(special(xs[i]));
    if (any == 0) {
      eig(xs, ys, m);
      continue;
    }
    T saved[kBlock];  // x may be y (in place)
    std::copy(xs, xs + m, saved);
    eig(saved, ys, m);
    for (int64_t i = 0; i < m; ++i) {
      if (special(saved[i])) ys[i] = fallback(saved[i]);
    }
  }
}

struct ExpF {
  static constexpr int kCost = 3;
  template <typename T>
  static void Run(const T* x, T* y, int64_t n) {
    // Outside [kLow, kHigh] Eigen's result drifts: below, exp(x) is no
    // longer a normal number and Eigen clamps x; above, Eigen overflows to
    // inf before the true result does. NaN fails the comparison too.
    constexpr T kLow = std::is_same_v<T, float> ? T(-87) : T(-708);
    constexpr T kHigh = std::is_same_v<T, float> ? T(88) : T(709);
    EigenWithFallback(
        x, y, n, [](const T* a, T* b, int64_t m) { ArrayMap<T>(b, m) = ConstArrayMap<T>(a, m).exp(); },
        [](T v) { return !((v >= kLow) & (v <= kHigh)); }, [](T v) { return std::exp(v); });
  }
};
struct LogF {
  static constexpr int kCost = 5;
  template <typename T>
  static void Run(const T* x, T* y, int64_t n) {
    // Zero, negatives, denormals, inf and NaN go to std::log.
    EigenWithFallback(
        x, y, n, [](const T* a, T* b, int64_t m) { ArrayMap<T>(b, m) = ConstArrayMap<T>(a, m).log(); },
        [](T v) {
          return !((v >= std::numeric_limits<T>::min()) & (v <= std::numeric_limits<T>::max()));
        },
        [](T v) { return std::log(v); });
  }
};
// Sqrt and Rsqrt use the hardware's correctly rounded square root rather
// than Eigen's, which with EIGEN_FAST_MATH (the default) is a refined
// reciprocal-square-root estimate: a bit or two off, and on AVX-512 its
// double version even returns NaN for +inf. GCC does not vectorize
// std::sqrt itself (errno), hence the intrinsics, with a scalar tail.
template <bool kReciprocal, typename T>
void SqrtArray(const T* x, T* y, int64_t n) {
  int64_t i = 0;
#if defined(__AVX__)
  if constexpr (std::is_same_v<T, float>) {
    for (; i + 8 <= n; i += 8) {
      __m256 r = _mm256_sqrt_ps(_mm256_loadu_ps(x + i));
      if constexpr (kReciprocal) r = _mm256_div_ps(_mm256_set1_ps(1.0f), r);
      _mm256_storeu_ps(y + i, r);
    }
  } else {
    for (; i + 4 <= n; i += 4) {
      __m256d r = _mm256_sqrt_pd(_mm256_loadu_pd(x + i));
      if constexpr (kReciprocal) r = _mm256_div_pd(_mm256_set1_pd(1.0), r);
      _mm256_storeu_pd(y + i, r);
    }
  }
#endif
  for (; i < n; ++i) y[i] = kReciprocal ? T(1) / std::sqrt(x[i]) : std::sqrt(x[i]);
}
struct SqrtF {
  static constexpr int kCost = 2;
  template <typename T>
  static void Run(const T* x, T* y, int64_t n) {
    SqrtArray<false>(x, y, n);
  }
};
struct RsqrtF {  // 1 / sqrt(x), two correct roundings
  static constexpr int kCost = 3;
  template <typename T>
  static void Run(const T* x, T* y, int64_t n) {
    SqrtArray<true>(x, y, n);
  }
};

template <typename F, typename T>
concept HasRun = requires(const T* x, T* y) { F::template Run<T>(x, y, int64_t{0}); };

template <typename T, typename F>
class UnaryOp final : public OpKernel {
 public:
  using OpKernel::OpKernel;

  void Compute(OpKernelContext* ctx) override {
    const T* x = ctx->input(0).template data<T>();  // before forwarding
    const TensorShape shape = ctx->input(0).shape();
    Tensor* out = nullptr;
    FS_OP_REQUIRES_OK(ctx, ctx->forward_input_or_allocate_output({0}, 0, shape, &out));
    T* y = out->template data<T>();
    cwise::Shard(ctx, shape.num_elements(), F::kCost, [&](int64_t begin, int64_t end) {
      if constexpr (HasRun<F, T>) {
        F::template Run<T>(x + begin, y + begin, end - begin);
      } else {
        for (int64_t i = begin; i < end; ++i) y[i] = F::Apply(x[i]);
      }
    });
  }
};

template <typename F, typename... Ts>
void RegisterUnary(KernelRegistry* r, const char* op, cwise::Types<Ts...> types) {
  cwise::ForEachType(types, [&]<typename T>() {
    MustRegister(r, KernelDef(op).TypeConstraint("T", kDataTypeOf<T>), MakeKernel<UnaryOp<T, F>>);
  });
}

}  // namespace

void RegisterCwiseUnaryKernels(KernelRegistry* r) {
  using cwise::FloatTypes;
  using cwise::SignedTypes;
  RegisterUnary<NegF>(r, "Neg", SignedTypes{});
  RegisterUnary<AbsF>(r, "Abs", SignedTypes{});
  RegisterUnary<SignF>(r, "Sign", SignedTypes{});
  RegisterUnary<SquareF>(r, "Square", cwise::NumericTypes{});
  RegisterUnary<ExpF>(r, "Exp", FloatTypes{});
  RegisterUnary<LogF>(r, "Log", FloatTypes{});
  RegisterUnary<SqrtF>(r, "Sqrt", FloatTypes{});
  RegisterUnary<RsqrtF>(r, "Rsqrt", FloatTypes{});
  RegisterUnary<ReciprocalF>(r, "Reciprocal", FloatTypes{});
  MustRegister(r, KernelDef("LogicalNot"), MakeKernel<UnaryOp<bool, LogicalNotF>>);
}

}  // namespace flowstate::internal

// Cast between every pair of the eight dtypes: one kernel per (SrcT, DstT),
// each a plain conversion loop the compiler vectorizes (float16 goes
// through Half's float conversions, one call per element).
//
// Semantics (every input has a defined result; none is UB):
// - SrcT == DstT forwards the input buffer (no copy).
// - floating → integer truncates toward zero and saturates: values at or
//   beyond the destination's range give its min/max (uint8: negatives give
//   0, 256.0 and above give 255), NaN gives 0. (Java/Rust `as` semantics;
//   C++'s static_cast is undefined there.)
// - integer → integer wraps modulo 2^bits (int64 300 → uint8 44, as in C++20,
//   NumPy and TensorFlow).
// - anything → bool is x != 0 (NaN → true); bool → anything is 0 or 1.
// - → float16/bfloat16 rounds to nearest even (through float32 for float64
//   and integer sources, so a float64 can round twice); overflow gives ±inf.
// - float64 → float32 rounds to nearest; out of range gives ±inf (IEEE).
#include <bit>
#include <limits>

#include "devices/cpu/cwise_kernels_common.h"

namespace flowstate::internal {
namespace {

template <typename T>
inline constexpr bool kIs16BitFloat = std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>;

// float ⇄ bfloat16 inline (the same rounding and NaN rule as BFloat16's
// out-of-line constructor in graph/types.cc, but vectorizable).
inline BFloat16 FloatToBFloat16(float f) {
  uint32_t x = std::bit_cast<uint32_t>(f);
  BFloat16 r;
  r.bits = (x & 0x7fffffffu) > 0x7f800000u
               ? uint16_t((x >> 16) | 0x40u)
               : uint16_t((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
  return r;
}
inline float BFloat16ToFloat(BFloat16 b) { return std::bit_cast<float>(uint32_t(b.bits) << 16); }

// A floating value widened to the type arithmetic is done in.
template <typename T>
inline auto Widen(T x) {
  if constexpr (std::is_same_v<T, BFloat16>) return BFloat16ToFloat(x);
  else if constexpr (std::is_same_v<T, Half>) return float(x);
  else return x;
}

// Floating → integer: truncate, saturate, NaN → 0.
template <typename I, typename F>
inline I SaturatingCast(F x) {
  using L = std::numeric_limits<I>;
  // 2^digits is exact in F: the first value past the top of I's range.
  constexpr F kHi = F(uint64_t{1} << L::digits);
  constexpr F kLo = L::is_signed ? -kHi : F(-1);
  if (!(x == x)) return I(0);
  if (x >= kHi) return L::max();
  if (x <= kLo) return L::min();
  return static_cast<I>(x);
}

template <typename Src, typename Dst>
inline Dst CastValue(Src x) {
  if constexpr (std::is_same_v<Dst, bool>) {
    if constexpr (kIs16BitFloat<Src>) return Widen(x) != 0.0f;
    else return x != Src(0);
  } else if constexpr (std::is_same_v<Src, bool>) {
    if constexpr (std::is_same_v<Dst, BFloat16>) return FloatToBFloat16(x ? 1.0f : 0.0f);
    else if constexpr (std::is_same_v<Dst, Half>) return Half(x ? 1.0f : 0.0f);
    else return Dst(x ? 1 : 0);
  } else if constexpr (std::is_same_v<Dst, BFloat16>) {
    return FloatToBFloat16(float(Widen(x)));
  } else if constexpr (std::is_same_v<Dst, Half>) {
    return Half(float(Widen(x)));
  } else if constexpr (std::is_integral_v<Dst>) {
    if constexpr (std::is_integral_v<Src>) return static_cast<Dst>(x);  // wraps
    else return SaturatingCast<Dst>(Widen(x));
  } else {  // float or double destination
    return static_cast<Dst>(Widen(x));
  }
}

template <typename Src, typename Dst>
class CastOp final : public OpKernel {
 public:
  using OpKernel::OpKernel;

  void Compute(OpKernelContext* ctx) override {
    if constexpr (std::is_same_v<Src, Dst>) {
      ctx->forward_input(0, 0);
    } else {
      const Tensor& in = ctx->input(0);
      Tensor* out = nullptr;
      FS_OP_REQUIRES_OK(ctx, ctx->allocate_output(0, in.shape(), &out));
      const Src* x = in.template data<Src>();
      Dst* y = out->template data<Dst>();
      constexpr int kCost = kIs16BitFloat<Src> || kIs16BitFloat<Dst> ? 8 : 1;
      cwise::Shard(ctx, in.num_elements(), kCost, [&](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i) y[i] = CastValue<Src, Dst>(x[i]);
      });
    }
  }
};

}  // namespace

void RegisterCastKernels(KernelRegistry* r) {
  cwise::ForEachType(cwise::AllTypes{}, [&]<typename Src>() {
    cwise::ForEachType(cwise::AllTypes{}, [&]<typename Dst>() {
      MustRegister(r,
                   KernelDef("Cast")
                       .TypeConstraint("SrcT", kDataTypeOf<Src>)
                       .TypeConstraint("DstT", kDataTypeOf<Dst>),
                   MakeKernel<CastOp<Src, Dst>>);
    });
  });
}

}  // namespace flowstate::internal

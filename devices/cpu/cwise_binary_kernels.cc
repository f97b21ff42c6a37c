// Binary element-wise kernels with NumPy broadcasting: arithmetic (Add, Sub,
// Mul, Div, Pow, Maximum, Minimum, SquaredDifference), comparisons (Equal,
// NotEqual, Less, LessEqual, Greater, GreaterEqual) and LogicalAnd/Or.
//
// Each op is a functor with a scalar Apply(a, b); BinaryOp drives it over a
// BCast (devices/cpu/broadcast.h). The inner loop is chosen once per call
// from the inputs' inner strides (both contiguous, one repeated), so
// same-shape, scalar and row-broadcast operations run as plain loops that
// the compiler vectorizes; any other broadcast walks the collapsed index
// space run by run. The output reuses an input's buffer when no one else
// holds it.
//
// Semantics of the edge cases:
// - Integer Add/Sub/Mul/SquaredDifference/Pow wrap modulo 2^bits (no UB).
// - Integer Div truncates toward zero; a zero divisor anywhere in y is
//   INVALID_ARGUMENT (checked before computing, so no SIGFPE);
//   INT_MIN / -1 wraps to INT_MIN.
// - Integer Pow with a negative exponent is INVALID_ARGUMENT (as in NumPy:
//   "integers to negative integer powers are not allowed"); x^0 is 1,
//   including 0^0.
// - Float Maximum/Minimum propagate NaN (NumPy's maximum, torch.maximum).
// - Float Div/Pow follow IEEE (x/0 is ±inf or NaN, std::pow).
#include <cmath>
#include <limits>
#include <string>

#include "devices/cpu/cwise_kernels_common.h"

namespace flowstate::internal {
namespace {

using cwise::WrapAdd;
using cwise::WrapMul;
using cwise::WrapSub;

// ---------------------------------------------------------------------------
// Functors. kCost: rough cycles per element, for sharding.

struct AddF {
  static constexpr int kCost = 1;
  template <typename T>
  static T Apply(T a, T b) {
    if constexpr (std::is_integral_v<T>) return WrapAdd(a, b);
    else return a + b;
  }
};
struct SubF {
  static constexpr int kCost = 1;
  template <typename T>
  static T Apply(T a, T b) {
    if constexpr (std::is_integral_v<T>) return WrapSub(a, b);
    else return a - b;
  }
};
struct MulF {
  static constexpr int kCost = 1;
  template <typename T>
  static T Apply(T a, T b) {
    if constexpr (std::is_integral_v<T>) return WrapMul(a, b);
    else return a * b;
  }
};
struct DivF {
  static constexpr int kCost = 8;
  template <typename T>
  static T Apply(T a, T b) {
    if constexpr (std::is_integral_v<T> && std::is_signed_v<T>) {
      if (b == -1) return cwise::WrapNeg(a);  // INT_MIN / -1 would trap
    }
    return a / b;  // integers: b != 0 was checked by Check()
  }
  // Integer division by zero is an error; floats follow IEEE.
  template <typename T>
  static std::string Check(const T* y, int64_t n) {
    if constexpr (std::is_integral_v<T>) {
      bool zero = false;
      for (int64_t i = 0; i < n; ++i) zero |= y[i] == T(0);
      if (zero) return "integer division by zero";
    }
    return "";
  }
};
struct PowF {
  static constexpr int kCost = 40;
  template <typename T>
  static T Apply(T a, T b) {
    if constexpr (std::is_floating_point_v<T>) {
      return std::pow(a, b);
    } else {  // b >= 0, checked by Check(); square-and-multiply, wrapping
      using W = cwise::WrapType<T>;
      W result = 1, base = W(a);
      for (W e = W(b); e != 0; e >>= 1) {
        if (e & 1) result *= base;
        base *= base;
      }
      return T(result);
    }
  }
  template <typename T>
  static std::string Check(const T* y, int64_t n) {
    if constexpr (std::is_integral_v<T> && std::is_signed_v<T>) {
      bool negative = false;
      for (int64_t i = 0; i < n; ++i) negative |= y[i] < T(0);
      if (negative) return "integers to negative integer powers are not allowed";
    }
    return "";
  }
};
struct MaximumF {
  static constexpr int kCost = 1;
  template <typename T>
  static T Apply(T a, T b) {
    if constexpr (std::is_floating_point_v<T>) return (a > b || a != a) ? a : b;
    else return a > b ? a : b;
  }
};
struct MinimumF {
  static constexpr int kCost = 1;
  template <typename T>
  static T Apply(T a, T b) {
    if constexpr (std::is_floating_point_v<T>) return (a < b || a != a) ? a : b;
    else return a < b ? a : b;
  }
};
struct SquaredDifferenceF {
  static constexpr int kCost = 2;
  template <typename T>
  static T Apply(T a, T b) {
    if constexpr (std::is_integral_v<T>) {
      T d = WrapSub(a, b);
      return WrapMul(d, d);
    } else {
      T d = a - b;
      return d * d;
    }
  }
};

#define FS_COMPARE_FUNCTOR(Name, expr)    \
  struct Name {                           \
    static constexpr int kCost = 1;       \
    template <typename T>                 \
    static bool Apply(T a, T b) {         \
      return expr;                        \
    }                                     \
  };
FS_COMPARE_FUNCTOR(EqualF, a == b)
FS_COMPARE_FUNCTOR(NotEqualF, a != b)
FS_COMPARE_FUNCTOR(LessF, a < b)
FS_COMPARE_FUNCTOR(LessEqualF, a <= b)
FS_COMPARE_FUNCTOR(GreaterF, a > b)
FS_COMPARE_FUNCTOR(GreaterEqualF, a >= b)
FS_COMPARE_FUNCTOR(LogicalAndF, a && b)
FS_COMPARE_FUNCTOR(LogicalOrF, a || b)
#undef FS_COMPARE_FUNCTOR

template <typename F, typename T>
concept HasCheck = requires(const T* y) { F::template Check<T>(y, int64_t{0}); };

// ---------------------------------------------------------------------------
// The inner loop over one run: SA/SB say whether a/b advance (stride 1) or
// repeat one element (stride 0). A repeated element is loaded once, so the
// loop vectorizes even when the output aliases the other input.
template <typename F, bool SA, bool SB, typename T, typename Out>
inline void BinaryRun(const T* a, const T* b, Out* o, int64_t n) {
  if constexpr (SA && SB) {
    for (int64_t i = 0; i < n; ++i) o[i] = F::Apply(a[i], b[i]);
  } else if constexpr (SA) {
    const T bv = *b;
    for (int64_t i = 0; i < n; ++i) o[i] = F::Apply(a[i], bv);
  } else if constexpr (SB) {
    const T av = *a;
    for (int64_t i = 0; i < n; ++i) o[i] = F::Apply(av, b[i]);
  } else {
    const Out v = F::Apply(*a, *b);
    for (int64_t i = 0; i < n; ++i) o[i] = v;
  }
}

template <typename F, typename T, typename Out>
void RunBinary(OpKernelContext* ctx, const BCast& bc, const T* a, const T* b, Out* o) {
  auto go = [&]<bool SA, bool SB>() {
    cwise::Shard(ctx, bc.output_size(), F::kCost, [&](int64_t begin, int64_t end) {
      bc.ForEachRun(begin, end, [&](int64_t oo, const int64_t* io, int64_t n) {
        BinaryRun<F, SA, SB>(a + io[0], b + io[1], o + oo, n);
      });
    });
  };
  switch (bc.inner_contiguous_mask()) {
    case 3: go.template operator()<true, true>(); break;
    case 1: go.template operator()<true, false>(); break;
    case 2: go.template operator()<false, true>(); break;
    default: go.template operator()<false, false>(); break;
  }
}

// z = F(x, y) with broadcasting; T the input type, Out the output type.
template <typename T, typename Out, typename F>
class BinaryOp final : public OpKernel {
 public:
  using OpKernel::OpKernel;

  void Compute(OpKernelContext* ctx) override {
    const Tensor& x = ctx->input(0);
    const Tensor& y = ctx->input(1);
    BCast bc({x.shape(), y.shape()});
    FS_OP_REQUIRES(ctx, bc.ok(), bc.ErrorStatus(type_string(), name()));
    // Take the data pointers now: forwarding empties the input slot.
    const T* a = x.template data<T>();
    const T* b = y.template data<T>();
    if constexpr (HasCheck<F, T>) {
      if (bc.output_size() > 0) {
        std::string err = F::template Check<T>(b, y.num_elements());
        FS_OP_REQUIRES(ctx, err.empty(), InvalidArgument(type_string() + ": " + err, name()));
      }
    }
    Tensor* out = nullptr;
    FS_OP_REQUIRES_OK(ctx, ctx->forward_input_or_allocate_output({0, 1}, 0, bc.output_shape(), &out));
    if (bc.output_size() == 0) return;
    RunBinary<F>(ctx, bc, a, b, out->template data<Out>());
  }
};

template <typename F, typename... Ts>
void RegisterArith(KernelRegistry* r, const char* op, cwise::Types<Ts...> types) {
  cwise::ForEachType(types, [&]<typename T>() {
    MustRegister(r, KernelDef(op).TypeConstraint("T", kDataTypeOf<T>),
                 MakeKernel<BinaryOp<T, T, F>>);
  });
}

template <typename F, typename... Ts>
void RegisterCompare(KernelRegistry* r, const char* op, cwise::Types<Ts...> types) {
  cwise::ForEachType(types, [&]<typename T>() {
    MustRegister(r, KernelDef(op).TypeConstraint("T", kDataTypeOf<T>),
                 MakeKernel<BinaryOp<T, bool, F>>);
  });
}

}  // namespace

void RegisterCwiseBinaryKernels(KernelRegistry* r) {
  using cwise::NumericTypes;
  RegisterArith<AddF>(r, "Add", NumericTypes{});
  RegisterArith<SubF>(r, "Sub", NumericTypes{});
  RegisterArith<MulF>(r, "Mul", NumericTypes{});
  RegisterArith<DivF>(r, "Div", NumericTypes{});
  RegisterArith<PowF>(r, "Pow", NumericTypes{});
  RegisterArith<MaximumF>(r, "Maximum", NumericTypes{});
  RegisterArith<MinimumF>(r, "Minimum", NumericTypes{});
  RegisterArith<SquaredDifferenceF>(r, "SquaredDifference", NumericTypes{});

  using WithBool = cwise::Types<float, double, int32_t, int64_t, uint8_t, bool>;
  RegisterCompare<EqualF>(r, "Equal", WithBool{});
  RegisterCompare<NotEqualF>(r, "NotEqual", WithBool{});
  RegisterCompare<LessF>(r, "Less", NumericTypes{});
  RegisterCompare<LessEqualF>(r, "LessEqual", NumericTypes{});
  RegisterCompare<GreaterF>(r, "Greater", NumericTypes{});
  RegisterCompare<GreaterEqualF>(r, "GreaterEqual", NumericTypes{});

  MustRegister(r, KernelDef("LogicalAnd"), MakeKernel<BinaryOp<bool, bool, LogicalAndF>>);
  MustRegister(r, KernelDef("LogicalOr"), MakeKernel<BinaryOp<bool, bool, LogicalOrF>>);
}

}  // namespace flowstate::internal

// Internal to the element-wise CPU kernels (devices/cpu/cwise_*.cc): the
// registration functions of each file, sharding over the intra-op pool, and
// integer arithmetic that wraps instead of overflowing (signed overflow is
// undefined behaviour in C++; two's-complement wrap-around is what
// TensorFlow and NumPy users see).
//
// Everything here is header-only templates or declarations; no Eigen.
#ifndef FLOWSTATE_DEVICES_CPU_CWISE_KERNELS_COMMON_H_
#define FLOWSTATE_DEVICES_CPU_CWISE_KERNELS_COMMON_H_

#include <cstdint>
#include <type_traits>

#include "devices/cpu/broadcast.h"
#include "devices/cpu/register_kernels.h"

namespace flowstate::internal {

// Called by RegisterCwiseKernels (cwise_kernels.cc).
void RegisterCwiseUnaryKernels(KernelRegistry* r);   // cwise_unary_kernels.cc
void RegisterCwiseBinaryKernels(KernelRegistry* r);  // cwise_binary_kernels.cc
void RegisterCastKernels(KernelRegistry* r);         // cwise_cast_kernels.cc

namespace cwise {

// Below this much work (elements × cycles per element) a kernel runs on the
// calling thread without touching the pool (CpuDevice shards at ~50k cycles).
inline constexpr int64_t kInlineCost = 100000;

// Runs fn(begin, end) over disjoint ranges covering [0, n): inline for small
// work, else on the device's intra-op pool.
template <typename Fn>
void Shard(OpKernelContext* ctx, int64_t n, int64_t cost_per_element, Fn&& fn) {
  if (n <= 0) return;
  Device* d = ctx->device();
  if (n * cost_per_element < kInlineCost || d->num_threads() <= 1) {
    fn(int64_t{0}, n);
    return;
  }
  d->ParallelFor(n, cost_per_element, [&fn](int64_t b, int64_t e) { fn(b, e); });
}

// Integer arithmetic modulo 2^bits, defined for every input.
template <typename T>
using WrapType = std::conditional_t<(sizeof(T) < sizeof(unsigned)), unsigned,
                                    std::make_unsigned_t<T>>;
template <typename T>
inline T WrapAdd(T a, T b) {
  return T(WrapType<T>(a) + WrapType<T>(b));
}
template <typename T>
inline T WrapSub(T a, T b) {
  return T(WrapType<T>(a) - WrapType<T>(b));
}
template <typename T>
inline T WrapMul(T a, T b) {
  return T(WrapType<T>(a) * WrapType<T>(b));
}
template <typename T>
inline T WrapNeg(T a) {
  return T(WrapType<T>(0) - WrapType<T>(a));
}

// Type lists for registration loops.
template <typename... Ts>
struct Types {};
template <typename... Ts, typename Fn>
void ForEachType(Types<Ts...>, Fn&& fn) {
  (fn.template operator()<Ts>(), ...);
}
using NumericTypes = Types<float, double, int32_t, int64_t, uint8_t>;
using SignedTypes = Types<float, double, int32_t, int64_t>;
using FloatTypes = Types<float, double>;
using AllTypes = Types<float, double, int32_t, int64_t, uint8_t, bool, Half, BFloat16>;

}  // namespace cwise
}  // namespace flowstate::internal

#endif  // FLOWSTATE_DEVICES_CPU_CWISE_KERNELS_COMMON_H_

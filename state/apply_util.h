// Internal to state/: what the dense ApplyAdam kernel (variable_kernels.cc)
// and the SparseApply* kernels (sparse_apply_kernels.cc) share -- the
// variable behind a Ref input, the subnormal flush, and Adam's element
// update, so that a row of lazy Adam runs the very loop of dense Adam.
// Stateless functions; thread-safe.
#ifndef FLOWSTATE_STATE_APPLY_UTIL_H_
#define FLOWSTATE_STATE_APPLY_UTIL_H_

#include <cmath>
#include <cstdint>

#if defined(__SSE2__)
#include <immintrin.h>
#endif

#include "devices/op_kernel.h"
#include "state/variable.h"

namespace flowstate::internal {

// The variable behind Ref input i; null, with INVALID_ARGUMENT naming the
// node recorded on ctx, when the Ref is another resource (a queue handle).
Variable* AsVariable(OpKernelContext* ctx, int i);

// Flushes subnormal inputs and results to zero while it lives (x86's FTZ
// and DAZ bits; elsewhere nothing). In Adam, m of an element whose gradient
// stays 0 (a dead unit) decays by beta1 each step and is subnormal after
// ~800 steps at 0.9, and every operation on a subnormal costs a microcode
// assist (~100 cycles): without this, the MLP's ApplyAdam took about twice
// as long per step over 1500 steps as over the first 300. What is flushed
// (|x| below 1.2e-38 in float32) moves a variable by less than that, so the
// update is the same in any sense that matters; TensorFlow flushes on all
// its kernel threads.
class ScopedFlushSubnormals {
 public:
#if defined(__SSE2__)
  ScopedFlushSubnormals() : saved_(_mm_getcsr()) { _mm_setcsr(saved_ | 0x8040); }
  ~ScopedFlushSubnormals() { _mm_setcsr(saved_); }

 private:
  unsigned saved_;
#endif
};

// The Adam update of n elements. The pointers do not alias: var, m and v
// are three variables' exclusive buffers (Mutate copies a shared buffer
// first), and grad, which holds a reference to its own buffer, can share
// none of them. Built with -O3 -fno-math-errno (state/CMakeLists.txt) so
// that the loop vectorizes, sqrt and division included; each element's
// result is the same however the range is split. step = lr / (1 - b1^t),
// inv_c2 = 1 / (1 - b2^t).
template <typename T>
inline void AdamUpdate(T* __restrict w, T* __restrict m, T* __restrict v, const T* __restrict g,
                       int64_t n, T b1, T b2, T eps, T step, T inv_c2) {
  const T one_b1 = T(1) - b1, one_b2 = T(1) - b2;
  for (int64_t i = 0; i < n; ++i) {
    const T gi = g[i];
    const T mi = m[i] * b1 + gi * one_b1;
    const T vi = v[i] * b2 + gi * gi * one_b2;
    m[i] = mi;
    v[i] = vi;
    w[i] -= mi * step / (std::sqrt(vi * inv_c2) + eps);
  }
}

}  // namespace flowstate::internal

#endif  // FLOWSTATE_STATE_APPLY_UTIL_H_

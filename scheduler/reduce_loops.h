// The element loops of the collectives' reductions, shared by
// InProcessCollective (scheduler/collective.cc) and GlooCollective
// (distributed/), and of the _AllReduce kernels' weighting
// (scheduler/collective_kernels.cc, replica_comm.cc): out = a + b, out = x * f, and x / n for
// a mean, over plain arrays.
//
// Written in blocks of 8 that read before they write, so that GCC
// vectorizes them at -O2 (the plain loop needs a run-time alias check,
// which -O2's cost model does not emit; it ran scalar). `out` may be `a` or
// `b` (Gloo reduces in place) but must not overlap them otherwise. Integer
// sums wrap (computed unsigned: no undefined behaviour). Header-only
// templates without state: thread-safe.
#ifndef FLOWSTATE_SCHEDULER_REDUCE_LOOPS_H_
#define FLOWSTATE_SCHEDULER_REDUCE_LOOPS_H_

#include <cstddef>
#include <type_traits>

namespace flowstate::reduce_loops {

// T's arithmetic type for a sum: unsigned for integers, T otherwise.
template <typename T>
using Wrapping = typename std::conditional_t<std::is_integral_v<T>, std::make_unsigned<T>,
                                            std::type_identity<T>>::type;

// out[i] = a[i] + b[i] for i < n. The untyped signature is Gloo's reduce
// function's.
template <typename T>
void Sum(void* out, const void* a, const void* b, size_t n) {
  using U = Wrapping<T>;
  U* o = static_cast<U*>(out);
  const U* x = static_cast<const U*>(a);
  const U* y = static_cast<const U*>(b);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    U p[8], q[8];
    for (int k = 0; k < 8; ++k) p[k] = x[i + k];
    for (int k = 0; k < 8; ++k) q[k] = y[i + k];
    for (int k = 0; k < 8; ++k) o[i + k] = p[k] + q[k];
  }
  for (; i < n; ++i) o[i] = x[i] + y[i];
}

// out[i] = x[i] * f for i < n; `out` may be `x`.
template <typename T>
void Scale(T* out, const T* x, size_t n, T f) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    T p[8];
    for (int k = 0; k < 8; ++k) p[k] = x[i + k];
    for (int k = 0; k < 8; ++k) out[i + k] = p[k] * f;
  }
  for (; i < n; ++i) out[i] = x[i] * f;
}

// x[i] /= by for i < n (integers truncate, as C++ division does).
template <typename T>
void Divide(T* x, size_t n, T by) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    for (int k = 0; k < 8; ++k) x[i + k] /= by;
  }
  for (; i < n; ++i) x[i] /= by;
}

}  // namespace flowstate::reduce_loops

#endif  // FLOWSTATE_SCHEDULER_REDUCE_LOOPS_H_

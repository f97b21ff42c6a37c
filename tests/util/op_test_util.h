// The op-test harness: runs one op's CPU kernel on given inputs and helps
// compare the result with a reference computed in the test.
//
// RunOp builds a graph of Const inputs feeding the op, validates it (so the
// op's attrs are resolved and its shape function runs on constant inputs),
// builds the kernel through the registry, runs it, and checks that every
// output's dtype and shape agree with what graph validation inferred. It
// also records which (op, type constraints) registrations ran, so that the
// "coverage" test can insist every registered CPU kernel was exercised.
#ifndef FLOWSTATE_TESTS_UTIL_OP_TEST_UTIL_H_
#define FLOWSTATE_TESTS_UTIL_OP_TEST_UTIL_H_

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "devices/device.h"
#include "devices/kernel_registry.h"
#include "graph/attr_value.h"
#include "graph/tensor.h"
#include "graph/tensor_ref.h"

namespace flowstate::test {

// A shared CPU device with `threads` intra-op threads (1 or 2 are cached).
Device* CpuTestDevice(int threads = 1);

// Runs `op` with `inputs` (each becomes a Const) and `attrs`. Returns the
// outputs, or the error from validation, kernel construction or Compute.
StatusOr<std::vector<Tensor>> RunOp(const std::string& op, const std::vector<Tensor>& inputs,
                                    const AttrMap& attrs = {}, Device* device = nullptr);
// The same with Ref inputs: where refs[i] is non-null, input i is that
// variable (the graph gets a Variable node of its dtype and shape there;
// inputs[i] only supplies them when the variable has no value yet, and is
// otherwise ignored). refs may be shorter than inputs.
StatusOr<std::vector<Tensor>> RunOp(const std::string& op, const std::vector<Tensor>& inputs,
                                    const AttrMap& attrs, Device* device,
                                    const std::vector<TensorRef*>& refs);
// The same, REQUIRING success and exactly one output (asserts via gtest).
Tensor RunOp1(const std::string& op, const std::vector<Tensor>& inputs, const AttrMap& attrs = {},
              Device* device = nullptr);

// Registrations of CPU kernels that RunOp has executed successfully, as
// "Op[T=float32]" strings; and all registered, in the same form.
std::vector<std::string> ExercisedKernels();
std::vector<std::string> RegisteredCpuKernels();

// Random tensors: floats uniform in [lo, hi), integers uniform in [lo, hi].
template <typename T>
Tensor RandomTensor(const TensorShape& shape, uint64_t seed, double lo = -1, double hi = 1) {
  Tensor t(kDataTypeOf<T>, shape);
  std::mt19937_64 rng(seed);
  T* d = t.data<T>();
  for (int64_t i = 0; i < t.num_elements(); ++i) {
    if constexpr (std::is_same_v<T, bool>) {
      d[i] = (rng() & 1) != 0;
    } else if constexpr (std::is_floating_point_v<T>) {
      d[i] = T(std::uniform_real_distribution<double>(lo, hi)(rng));
    } else {
      d[i] = T(std::uniform_int_distribution<int64_t>(int64_t(lo), int64_t(hi))(rng));
    }
  }
  return t;
}

template <typename T>
Tensor T1(std::vector<T> v) {
  return Tensor::FromVector(v);
}
template <typename T>
Tensor TS(std::vector<T> v, const TensorShape& s) {
  return Tensor::FromVector(v, s);
}

// Element-wise comparison: |a - e| <= atol + rtol * |e| for floats (NaNs
// must match), exact for integers and bools; dtypes and shapes must match.
::testing::AssertionResult TensorNear(const Tensor& actual, const Tensor& expected,
                                      double rtol = 1e-5, double atol = 1e-6);
::testing::AssertionResult TensorEq(const Tensor& actual, const Tensor& expected);

}  // namespace flowstate::test

#endif  // FLOWSTATE_TESTS_UTIL_OP_TEST_UTIL_H_

// Helpers shared by the element-wise kernel tests (cwise_*_test.cc): naive
// NumPy broadcasting for reference results, value generators, and a runner
// that builds a kernel directly (without RunOp's Const copies, so input
// buffers can be forwarded and kernel-level errors reached).
#ifndef FLOWSTATE_TESTS_DEVICES_CWISE_TEST_UTIL_H_
#define FLOWSTATE_TESTS_DEVICES_CWISE_TEST_UTIL_H_

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "devices/kernel_registry.h"
#include "graph/op_def.h"
#include "tests/util/op_test_util.h"

namespace flowstate::test {

// The NumPy broadcast of `shapes`, computed dimension by dimension.
// REQUIRES: they broadcast.
inline TensorShape RefBroadcastShape(const std::vector<TensorShape>& shapes) {
  int rank = 0;
  for (const TensorShape& s : shapes) rank = std::max(rank, s.rank());
  std::vector<int64_t> out(rank, 1);
  for (const TensorShape& s : shapes) {
    for (int d = 0; d < s.rank(); ++d) {
      int od = d + rank - s.rank();
      if (s.dim(d) != 1) out[od] = s.dim(d);
    }
  }
  return TensorShape(std::span<const int64_t>(out));
}

// The element of a tensor of shape `in` that output element `i` (of shape
// `out`) reads under broadcasting.
inline int64_t RefIndex(const TensorShape& out, const TensorShape& in, int64_t i) {
  int64_t index = 0, stride = 1, rem = i;
  for (int d = out.rank() - 1; d >= 0; --d) {
    int64_t coord = rem % out.dim(d);
    rem /= out.dim(d);
    int di = d - (out.rank() - in.rank());
    if (di < 0) continue;
    int64_t size = in.dim(di);
    if (size != 1) index += coord * stride;
    stride *= size;
  }
  return index;
}

template <typename T, typename Out, typename F>
Tensor RefBinary(const Tensor& x, const Tensor& y, F f) {
  TensorShape s = RefBroadcastShape({x.shape(), y.shape()});
  Tensor r(kDataTypeOf<Out>, s);
  for (int64_t i = 0; i < s.num_elements(); ++i) {
    r.data<Out>()[i] = Out(f(x.data<T>()[RefIndex(s, x.shape(), i)],
                             y.data<T>()[RefIndex(s, y.shape(), i)]));
  }
  return r;
}

// Small values that make ties and exact results likely: floats are
// multiples of 0.5 in [-4, 4], signed integers in [-6, 6], uint8 in [0, 12].
template <typename T>
Tensor SmallValues(const TensorShape& shape, uint64_t seed) {
  if constexpr (std::is_same_v<T, bool>) {
    return RandomTensor<bool>(shape, seed);
  } else if constexpr (std::is_floating_point_v<T>) {
    Tensor t = RandomTensor<int32_t>(shape, seed, -8, 8);
    Tensor r(kDataTypeOf<T>, shape);
    for (int64_t i = 0; i < t.num_elements(); ++i) r.data<T>()[i] = T(t.data<int32_t>()[i]) / 2;
    return r;
  } else if constexpr (std::is_signed_v<T>) {
    return RandomTensor<T>(shape, seed, -6, 6);
  } else {
    return RandomTensor<T>(shape, seed, 0, 12);
  }
}

// Replaces zeros by one (divisors).
template <typename T>
Tensor NonZero(Tensor t) {
  for (T& v : t.flat<T>()) {
    if (v == T(0)) v = T(1);
  }
  return t;
}

// Calls fn.template operator()<T>() for each listed type.
template <typename... Ts>
struct TypeList {};
template <typename... Ts, typename Fn>
void ForTypes(TypeList<Ts...>, Fn&& fn) {
  (fn.template operator()<Ts>(), ...);
}
using NumericTypes = TypeList<float, double, int32_t, int64_t, uint8_t>;
using SignedTypes = TypeList<float, double, int32_t, int64_t>;
using FloatTypes = TypeList<float, double>;
using AllTypes = TypeList<float, double, int32_t, int64_t, uint8_t, bool, Half, BFloat16>;

inline std::string Str(const TensorShape& s) { return s.ToString(); }

// A vector of tensors moved (or copied) in without an initializer_list's
// extra copy, so a moved tensor's buffer stays unshared.
template <typename... Ts>
std::vector<Tensor> Inputs(Ts&&... ts) {
  std::vector<Tensor> v;
  (v.push_back(std::forward<Ts>(ts)), ...);
  return v;
}

// Builds the CPU kernel of `op` for a node named "op" directly and runs it
// on `inputs`, which it takes over (so their buffers may be forwarded).
struct DirectRun {
  Status status;
  std::vector<Tensor> outputs;
};
inline DirectRun RunKernelDirect(const std::string& op, std::vector<Tensor> inputs,
                                 const AttrMap& attrs, std::vector<DataType> out_types,
                                 Device* device = nullptr) {
  if (device == nullptr) device = CpuTestDevice(1);
  DirectRun r;
  NodeDef node;
  node.name = "op";
  node.op = op;
  node.attrs = attrs;
  const OpDef* def = OpRegistry::Global()->Find(op);
  if (def == nullptr) {
    r.status = NotFound("no op " + op);
    return r;
  }
  std::vector<DataType> in_types;
  for (const Tensor& t : inputs) in_types.push_back(t.dtype());
  auto kernel = KernelRegistry::Global()->CreateKernel(node, *def, device, nullptr, in_types,
                                                       out_types);
  if (!kernel.ok()) {
    r.status = kernel.status();
    return r;
  }
  std::vector<TensorValue> in(inputs.size()), out(out_types.size());
  for (size_t i = 0; i < inputs.size(); ++i) in[i].tensor = std::move(inputs[i]);
  inputs.clear();
  OpKernelContext::Params p;
  p.device = device;
  p.kernel = kernel->get();
  p.inputs = in;
  p.outputs = out;
  OpKernelContext ctx(p);
  (*kernel)->Compute(&ctx);
  r.status = ctx.status();
  for (TensorValue& v : out) r.outputs.push_back(v.tensor);
  return r;
}

}  // namespace flowstate::test

#endif  // FLOWSTATE_TESTS_DEVICES_CWISE_TEST_UTIL_H_

// Helpers of the array-kernel tests (array_*_test.cc): random inputs of any
// dtype, a dtype-agnostic reference builder (output element j is input
// element src[j], bytes copied), index-vector tensors of either index
// dtype, and RunKernelOnly, which feeds the kernel through Placeholders so
// that the shape function cannot reject a bad input first and the kernel's
// own validation is what the test sees.
#ifndef FLOWSTATE_TESTS_DEVICES_ARRAY_TEST_UTIL_H_
#define FLOWSTATE_TESTS_DEVICES_ARRAY_TEST_UTIL_H_

#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "graph/graph.h"
#include "tests/util/op_test_util.h"
#include "tests/devices/fed_inputs_util.h"

namespace flowstate::test {

// Values in [-100, 100] (0/1 for bool) of dtype `t`.
inline Tensor RandomOf(DataType t, const TensorShape& shape, uint64_t seed) {
  return DispatchDataType(t, [&]<typename T>() { return RandomTensor<T>(shape, seed, -100, 100); });
}

// The tensor of `shape` whose element j is element src[j] of `in`.
inline Tensor Pick(const Tensor& in, const TensorShape& shape, const std::vector<int64_t>& src) {
  EXPECT_EQ(int64_t(src.size()), shape.num_elements());
  Tensor out(in.dtype(), shape);
  const size_t es = DataTypeSize(in.dtype());
  for (size_t j = 0; j < src.size(); ++j) {
    std::memcpy(static_cast<char*>(out.raw_data()) + j * es,
                static_cast<const char*>(in.raw_data()) + size_t(src[j]) * es, es);
  }
  return out;
}

// Row-major multi-index of `linear` in `dims`, and back.
inline std::vector<int64_t> Unravel(int64_t linear, std::span<const int64_t> dims) {
  std::vector<int64_t> idx(dims.size());
  for (int k = int(dims.size()) - 1; k >= 0; --k) {
    idx[k] = linear % dims[k];
    linear /= dims[k];
  }
  return idx;
}
inline int64_t Ravel(const std::vector<int64_t>& idx, std::span<const int64_t> dims) {
  int64_t l = 0;
  for (size_t k = 0; k < dims.size(); ++k) l = l * dims[k] + idx[k];
  return l;
}

// A vector (or, with scalar = true, a scalar) of int32 or int64 indices.
inline Tensor Ix(DataType t, const std::vector<int64_t>& v) {
  if (t == DataType::kInt32) {
    std::vector<int32_t> w(v.begin(), v.end());
    return Tensor::FromVector(w);
  }
  return Tensor::FromVector(v);
}
inline Tensor IxScalar(DataType t, int64_t v) {
  return t == DataType::kInt32 ? Tensor::Scalar<int32_t>(int32_t(v)) : Tensor::Scalar<int64_t>(v);
}

inline const std::vector<DataType>& IndexTypes() {
  static const std::vector<DataType> t = {DataType::kInt32, DataType::kInt64};
  return t;
}

// Runs `op`'s CPU kernel on `inputs` fed through Placeholders of unknown
// shape (no shape function sees the values). Returns the outputs or the
// kernel's error.
inline StatusOr<std::vector<Tensor>> RunKernelOnly(const std::string& op,
                                                   const std::vector<Tensor>& inputs,
                                                   const AttrMap& attrs = {}) {
  return RunOpOnFedInputs(op, inputs, attrs);
}

// The kernel rejected its input with INVALID_ARGUMENT naming node "op" and
// saying `what`.
inline ::testing::AssertionResult IsKernelError(const StatusOr<std::vector<Tensor>>& r,
                                                const std::string& what) {
  if (r.ok()) return ::testing::AssertionFailure() << "expected an error containing '" << what << "'";
  const Status& s = r.status();
  if (s.code() != Code::kInvalidArgument || s.node() != "op" ||
      s.message().find("node 'op'") == std::string::npos ||
      s.message().find(what) == std::string::npos) {
    return ::testing::AssertionFailure() << "expected INVALID_ARGUMENT on node 'op' containing '"
                                         << what << "', got " << s.ToString();
  }
  return ::testing::AssertionSuccess();
}

}  // namespace flowstate::test

#endif  // FLOWSTATE_TESTS_DEVICES_ARRAY_TEST_UTIL_H_

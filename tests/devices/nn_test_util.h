// Helpers shared by the activation, loss, dropout and gradient-support
// kernel tests (nn_*_test.cc, grad_support*_test.cc): a float-type loop,
// tolerances, an error matcher, and a kernel that is built once and
// computed many times with inputs it owns (so they can be forwarded, and a
// stateful kernel's sequence observed). Owned runs do not count towards
// kernel coverage; every test also goes through RunOp.
#ifndef FLOWSTATE_TESTS_DEVICES_NN_TEST_UTIL_H_
#define FLOWSTATE_TESTS_DEVICES_NN_TEST_UTIL_H_

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "devices/single_kernel.h"
#include "graph/graph.h"
#include "tests/util/op_test_util.h"

namespace flowstate::test {

template <typename Fn>
void ForFloatTypes(Fn&& fn) {
  fn.template operator()<float>();
  fn.template operator()<double>();
}

// Relative tolerance of a kernel result against a double-precision
// reference.
template <typename T>
constexpr double kRtol = std::is_same_v<T, float> ? 3e-6 : 1e-12;

inline std::string TypeName(DataType t) { return std::string(DataTypeName(t)); }

inline std::string VectorStr(const std::vector<int64_t>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + "]";
}

// The result is INVALID_ARGUMENT naming node "op", and its message holds
// `fragment`.
template <typename R>
::testing::AssertionResult IsOpError(const R& r, const std::string& fragment) {
  if (r.ok()) return ::testing::AssertionFailure() << "succeeded, expected an error";
  const Status s = r.status();
  if (s.code() != Code::kInvalidArgument) {
    return ::testing::AssertionFailure() << "wrong code: " << s.ToString();
  }
  if (s.node() != "op") return ::testing::AssertionFailure() << "wrong node: " << s.ToString();
  if (s.message().find(fragment) == std::string::npos) {
    return ::testing::AssertionFailure()
           << "message lacks \"" << fragment << "\": " << s.ToString();
  }
  return ::testing::AssertionSuccess();
}

// One kernel of `op` whose inputs are Placeholders of `input_types`, built
// once; Compute takes its inputs by value and hands them to the kernel as
// the only reference.
class OwnedKernel {
 public:
  OwnedKernel(const std::string& op, const std::vector<DataType>& input_types,
              const AttrMap& attrs = {}, Device* device = CpuTestDevice(1)) {
    StatusOr<std::unique_ptr<SingleKernel>> k = SingleKernel::Create(op, input_types, attrs, device);
    if (k.ok()) {
      kernel_ = std::move(k).value();
    } else {
      status_ = k.status();
    }
  }

  const Status& status() const { return status_; }

  StatusOr<std::vector<Tensor>> Compute(std::vector<Tensor> inputs) {
    if (!status_.ok()) return status_;
    return kernel_->Compute(std::move(inputs));
  }

 private:
  Status status_;
  std::unique_ptr<SingleKernel> kernel_;
};

// A vector of tensors in which temporaries keep their only reference (an
// initializer list would copy them): Own(x.DeepCopy(), y) moves the copy of
// x in and copies y.
template <typename... Ts>
std::vector<Tensor> Own(Ts&&... ts) {
  std::vector<Tensor> v;
  (v.push_back(std::forward<Ts>(ts)), ...);
  return v;
}

// Input i of a one-output op is forwarded when the caller gives up its
// reference (pass Own(...)): returns whether output 0 uses the buffer input `i` had.
inline bool ForwardsInput(const std::string& op, std::vector<Tensor> inputs, int i,
                          const AttrMap& attrs = {}) {
  std::vector<DataType> types;
  for (const Tensor& t : inputs) types.push_back(t.dtype());
  OwnedKernel k(op, types, attrs);
  const void* before = inputs[size_t(i)].raw_data();
  StatusOr<std::vector<Tensor>> r = k.Compute(std::move(inputs));
  return r.ok() && (*r)[0].raw_data() == before;
}

}  // namespace flowstate::test

#endif  // FLOWSTATE_TESTS_DEVICES_NN_TEST_UTIL_H_

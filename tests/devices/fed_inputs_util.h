// RunOpOnFedInputs: like RunOp (tests/util/op_test_util.h), but the inputs
// reach the node through Placeholders, so graph validation knows neither
// their values nor their shapes. That is how a kernel sees inputs computed
// at run time, and the only way to reach the checks a kernel makes itself
// (a bad axis, mismatched matrices) that the shape function would otherwise
// catch first. Does not count towards kernel coverage.
#ifndef FLOWSTATE_TESTS_DEVICES_FED_INPUTS_UTIL_H_
#define FLOWSTATE_TESTS_DEVICES_FED_INPUTS_UTIL_H_

#include <memory>
#include <string>
#include <vector>

#include "devices/single_kernel.h"
#include "tests/util/op_test_util.h"

namespace flowstate::test {

inline StatusOr<std::vector<Tensor>> RunOpOnFedInputs(const std::string& op,
                                                      const std::vector<Tensor>& inputs,
                                                      const AttrMap& attrs = {},
                                                      Device* device = nullptr) {
  std::vector<DataType> types;
  for (const Tensor& t : inputs) types.push_back(t.dtype());
  FS_ASSIGN_OR_RETURN(std::unique_ptr<SingleKernel> kernel,
                      SingleKernel::Create(op, types, attrs, device ? device : CpuTestDevice(1)));
  return kernel->Compute(inputs);
}

}  // namespace flowstate::test

#endif  // FLOWSTATE_TESTS_DEVICES_FED_INPUTS_UTIL_H_

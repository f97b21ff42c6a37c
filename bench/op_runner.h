// OpRunner: one node's CPU kernel, built once as the executor builds it, run
// as often as a benchmark likes on real input tensors.
//
// The node is validated in a one-node graph whose inputs are Placeholders
// of the inputs' dtypes and shapes (so attrs are resolved and the shape
// function runs, as in tests/util/op_test_util.cc's RunOp), then its kernel
// is built through KernelRegistry (devices/single_kernel.h). Run() calls Compute with a fresh
// OpKernelContext, so every call allocates its outputs like a real step.
// Aborts with a message on any error: a benchmark has nobody to report to.
#ifndef FLOWSTATE_BENCH_OP_RUNNER_H_
#define FLOWSTATE_BENCH_OP_RUNNER_H_

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "devices/single_kernel.h"

namespace flowstate::bench {

class OpRunner {
 public:
  OpRunner(const std::string& op, std::vector<Tensor> inputs, const AttrMap& attrs, Device* device)
      : inputs_(std::move(inputs)) {
    std::vector<DataType> types;
    std::vector<TensorShape> shapes;
    for (const Tensor& t : inputs_) {
      types.push_back(t.dtype());
      shapes.push_back(t.shape());
    }
    StatusOr<std::unique_ptr<SingleKernel>> k =
        SingleKernel::Create(op, types, attrs, device, shapes);
    Check(k.status());
    kernel_ = std::move(k).value();
  }

  // Runs the kernel once; returns output 0.
  Tensor Run() {
    StatusOr<std::vector<Tensor>> out = kernel_->Compute(inputs_);
    Check(out.status());
    return out->empty() ? Tensor() : (*out)[0];
  }

 private:
  static void Check(const Status& s) {
    if (!s.ok()) {
      std::fprintf(stderr, "bench: %s\n", s.ToString().c_str());
      std::exit(1);
    }
  }

  std::vector<Tensor> inputs_;
  std::unique_ptr<SingleKernel> kernel_;
};

}  // namespace flowstate::bench

#endif  // FLOWSTATE_BENCH_OP_RUNNER_H_

// SingleKernel: the kernel of one op built for given input dtypes (and,
// optionally, shapes) on one device, and run outside any executor — what
// op tests and op benchmarks run, one Compute at a time.
//
// Create() validates a graph of Placeholders feeding one node named "op"
// (so the op's attrs resolve and its shape function sees the declared
// input shapes, or none), then builds the node's kernel through the
// registry. Compute() hands the inputs to the kernel and returns its
// outputs; no resource manager, rendezvous or call frame is set, so
// kernels that need them fail as they would outside a step.
//
// Ownership: owns the kernel and the graph it was built from; `device` is
// borrowed and must outlive it. Thread safety: Compute may be called from
// one thread at a time (kernels are not required to be reentrant here).
#ifndef FLOWSTATE_DEVICES_SINGLE_KERNEL_H_
#define FLOWSTATE_DEVICES_SINGLE_KERNEL_H_

#include <memory>
#include <string>
#include <vector>

#include "devices/device.h"
#include "devices/op_kernel.h"
#include "graph/attr_value.h"
#include "graph/status.h"
#include "graph/tensor.h"

namespace flowstate {

class Graph;

class SingleKernel {
 public:
  // `input_shapes`, when non-empty, gives one shape per input (the
  // Placeholders' "shape" attrs); otherwise the inputs' shapes are unknown
  // to validation, as for tensors computed at run time.
  static StatusOr<std::unique_ptr<SingleKernel>> Create(
      const std::string& op, const std::vector<DataType>& input_types, const AttrMap& attrs,
      Device* device, const std::vector<TensorShape>& input_shapes = {});
  ~SingleKernel();

  int num_outputs() const { return int(output_types_.size()); }
  const std::vector<DataType>& output_types() const { return output_types_; }

  // Runs the kernel once. The inputs are moved in, so an input whose only
  // reference the caller gave up may be forwarded to an output. Returns
  // the outputs, or the kernel's error.
  StatusOr<std::vector<Tensor>> Compute(std::vector<Tensor> inputs);

  // Runs `kernel` once on `device` with the given input and output slots
  // (one per input and output; outputs are filled) and returns the
  // context's status: the body of Compute, for callers that build kernels
  // of their own (Ref inputs, Const inputs).
  static Status Run(OpKernel* kernel, Device* device, std::vector<TensorValue>& inputs,
                    std::vector<TensorValue>& outputs);

 private:
  SingleKernel() = default;
  Device* device_ = nullptr;
  std::unique_ptr<Graph> graph_;
  std::unique_ptr<OpKernel> kernel_;
  std::vector<DataType> output_types_;
};

}  // namespace flowstate

#endif  // FLOWSTATE_DEVICES_SINGLE_KERNEL_H_

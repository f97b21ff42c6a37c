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

#include "graph/graph.h"
#include "tests/util/op_test_util.h"

namespace flowstate::test {

inline StatusOr<std::vector<Tensor>> RunOpOnFedInputs(const std::string& op,
                                                      const std::vector<Tensor>& inputs,
                                                      const AttrMap& attrs = {},
                                                      Device* device = nullptr) {
  if (device == nullptr) device = CpuTestDevice(1);
  GraphDef gd;
  NodeDef node;
  node.name = "op";
  node.op = op;
  node.attrs = attrs;
  for (size_t i = 0; i < inputs.size(); ++i) {
    NodeDef p;
    p.name = "in" + std::to_string(i);
    p.op = "Placeholder";
    p.attrs["dtype"] = AttrValue(inputs[i].dtype());
    gd.nodes.push_back(p);
    node.inputs.push_back(p.name);
  }
  gd.nodes.push_back(node);
  FS_ASSIGN_OR_RETURN(Graph g, Graph::Create(gd));
  const Node& n = *g.FindNode("op");
  std::vector<DataType> in_types, out_types;
  for (int i = 0; i < n.num_inputs(); ++i) in_types.push_back(n.input_type(i));
  for (int i = 0; i < n.num_outputs(); ++i) out_types.push_back(n.output_type(i));
  FS_ASSIGN_OR_RETURN(std::unique_ptr<OpKernel> kernel,
                      KernelRegistry::Global()->CreateKernel(n.def(), n.op_def(), device, nullptr,
                                                             in_types, out_types));
  std::vector<TensorValue> in(inputs.size()), out(n.num_outputs());
  for (size_t i = 0; i < inputs.size(); ++i) in[i].tensor = inputs[i];
  OpKernelContext::Params p;
  p.device = device;
  p.kernel = kernel.get();
  p.inputs = in;
  p.outputs = out;
  OpKernelContext ctx(p);
  kernel->Compute(&ctx);
  if (!ctx.status().ok()) return ctx.status();
  std::vector<Tensor> result;
  for (TensorValue& v : out) result.push_back(v.tensor);
  return result;
}

}  // namespace flowstate::test

#endif  // FLOWSTATE_TESTS_DEVICES_FED_INPUTS_UTIL_H_

#include "devices/single_kernel.h"

#include "devices/kernel_registry.h"
#include "graph/graph.h"

namespace flowstate {

SingleKernel::~SingleKernel() = default;

StatusOr<std::unique_ptr<SingleKernel>> SingleKernel::Create(
    const std::string& op, const std::vector<DataType>& input_types, const AttrMap& attrs,
    Device* device, const std::vector<TensorShape>& input_shapes) {
  if (!input_shapes.empty() && input_shapes.size() != input_types.size()) {
    return InvalidArgument("SingleKernel: " + std::to_string(input_shapes.size()) +
                           " input shapes for " + std::to_string(input_types.size()) + " inputs");
  }
  GraphDef gd;
  NodeDef node;
  node.name = "op";
  node.op = op;
  node.attrs = attrs;
  for (size_t i = 0; i < input_types.size(); ++i) {
    NodeDef p;
    p.name = "in" + std::to_string(i);
    p.op = "Placeholder";
    p.attrs["dtype"] = AttrValue(input_types[i]);
    if (!input_shapes.empty()) p.attrs["shape"] = AttrValue(input_shapes[i]);
    gd.nodes.push_back(std::move(p));
    node.inputs.push_back("in" + std::to_string(i));
  }
  gd.nodes.push_back(std::move(node));
  FS_ASSIGN_OR_RETURN(Graph g, Graph::Create(gd));
  std::unique_ptr<SingleKernel> k(new SingleKernel());
  k->device_ = device;
  k->graph_ = std::make_unique<Graph>(std::move(g));
  const Node& n = *k->graph_->FindNode("op");
  std::vector<DataType> in_types;
  for (int i = 0; i < n.num_inputs(); ++i) in_types.push_back(n.input_type(i));
  for (int i = 0; i < n.num_outputs(); ++i) k->output_types_.push_back(n.output_type(i));
  FS_ASSIGN_OR_RETURN(k->kernel_, KernelRegistry::Global()->CreateKernel(
                                      n.def(), n.op_def(), device, nullptr, in_types,
                                      k->output_types_));
  return k;
}

StatusOr<std::vector<Tensor>> SingleKernel::Compute(std::vector<Tensor> inputs) {
  std::vector<TensorValue> in(inputs.size()), out(output_types_.size());
  for (size_t i = 0; i < inputs.size(); ++i) in[i].tensor = std::move(inputs[i]);
  inputs.clear();
  FS_RETURN_IF_ERROR(Run(kernel_.get(), device_, in, out));
  std::vector<Tensor> result;
  result.reserve(out.size());
  for (TensorValue& v : out) result.push_back(std::move(v.tensor));
  return result;
}

Status SingleKernel::Run(OpKernel* kernel, Device* device, std::vector<TensorValue>& inputs,
                         std::vector<TensorValue>& outputs) {
  OpKernelContext::Params p;
  p.device = device;
  p.kernel = kernel;
  p.inputs = inputs;
  p.outputs = outputs;
  OpKernelContext ctx(p);
  kernel->Compute(&ctx);
  return ctx.status();
}

}  // namespace flowstate

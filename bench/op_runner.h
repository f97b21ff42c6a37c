// OpRunner: one node's CPU kernel, built once as the executor builds it, run
// as often as a benchmark likes on real input tensors.
//
// The node is validated in a one-node graph whose inputs are Placeholders
// of the inputs' dtypes and shapes (so attrs are resolved and the shape
// function runs, as in tests/util/op_test_util.cc's RunOp), then its kernel
// is built through KernelRegistry. Run() calls Compute with a fresh
// OpKernelContext, so every call allocates its outputs like a real step.
// Aborts with a message on any error: a benchmark has nobody to report to.
#ifndef FLOWSTATE_BENCH_OP_RUNNER_H_
#define FLOWSTATE_BENCH_OP_RUNNER_H_

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "devices/kernel_registry.h"
#include "graph/graph.h"

namespace flowstate::bench {

class OpRunner {
 public:
  OpRunner(const std::string& op, std::vector<Tensor> inputs, const AttrMap& attrs, Device* device)
      : device_(device), inputs_(std::move(inputs)) {
    GraphDef gd;
    NodeDef node;
    node.name = "op";
    node.op = op;
    node.attrs = attrs;
    for (size_t i = 0; i < inputs_.size(); ++i) {
      NodeDef p;
      p.name = "in" + std::to_string(i);
      p.op = "Placeholder";
      p.attrs["dtype"] = AttrValue(inputs_[i].dtype());
      p.attrs["shape"] = AttrValue(inputs_[i].shape());
      gd.nodes.push_back(p);
      node.inputs.push_back(p.name);
    }
    gd.nodes.push_back(node);
    StatusOr<Graph> g = Graph::Create(gd);
    Check(g.status());
    const Node& n = *g->FindNode("op");
    std::vector<DataType> in_types, out_types;
    for (int i = 0; i < n.num_inputs(); ++i) in_types.push_back(n.input_type(i));
    for (int i = 0; i < n.num_outputs(); ++i) out_types.push_back(n.output_type(i));
    num_outputs_ = n.num_outputs();
    StatusOr<std::unique_ptr<OpKernel>> k = KernelRegistry::Global()->CreateKernel(
        n.def(), n.op_def(), device, nullptr, in_types, out_types);
    Check(k.status());
    kernel_ = std::move(k).value();
  }

  // Runs the kernel once; returns output 0.
  Tensor Run() {
    std::vector<TensorValue> in(inputs_.size()), out(num_outputs_);
    for (size_t i = 0; i < inputs_.size(); ++i) in[i].tensor = inputs_[i];
    OpKernelContext::Params p;
    p.device = device_;
    p.kernel = kernel_.get();
    p.inputs = in;
    p.outputs = out;
    OpKernelContext ctx(p);
    kernel_->Compute(&ctx);
    Check(ctx.status());
    return out.empty() ? Tensor() : out[0].tensor;
  }

 private:
  static void Check(const Status& s) {
    if (!s.ok()) {
      std::fprintf(stderr, "bench: %s\n", s.ToString().c_str());
      std::exit(1);
    }
  }

  Device* device_;
  std::vector<Tensor> inputs_;
  int num_outputs_ = 0;
  std::unique_ptr<OpKernel> kernel_;
};

}  // namespace flowstate::bench

#endif  // FLOWSTATE_BENCH_OP_RUNNER_H_

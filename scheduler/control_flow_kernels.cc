#include "scheduler/control_flow_kernels.h"

#include "devices/kernel_registry.h"
#include "scheduler/call_frame.h"

namespace flowstate::scheduler {
namespace {

// Enter, Exit, NextIteration, LoopCond: output 0 is input 0.
class ForwardOp final : public OpKernel {
 public:
  using OpKernel::OpKernel;
  void Compute(OpKernelContext* ctx) override { ctx->forward_input(0, 0); }
  bool IsExpensive() const override { return false; }
};

class SwitchOp final : public OpKernel {
 public:
  using OpKernel::OpKernel;
  void Compute(OpKernelContext* ctx) override {
    const Tensor& pred = ctx->input(1);
    if (pred.num_elements() != 1) {
      ctx->SetStatus(InvalidArgument("the predicate must be a scalar, got shape " +
                                     pred.shape().ToString()));
      return;
    }
    ctx->forward_input(0, pred.data<bool>()[0] ? 1 : 0);
  }
  bool IsExpensive() const override { return false; }
};

// The executor runs a Merge on its first live input; the others are empty.
// value_index comes from scalars made once (host memory on any device).
class MergeOp final : public OpKernel {
 public:
  explicit MergeOp(OpKernelConstruction* c) : OpKernel(c) {
    for (int i = 0; i < c->num_inputs(); ++i) indices_.push_back(Tensor::Scalar<int32_t>(i));
  }
  void Compute(OpKernelContext* ctx) override {
    for (int i = 0; i < ctx->num_inputs(); ++i) {
      if (!ctx->input(i).IsInitialized()) continue;
      ctx->forward_input(i, 0);
      ctx->set_output(1, indices_[i]);
      return;
    }
    ctx->SetStatus(Internal("a Merge ran without a live input"));
  }
  bool IsExpensive() const override { return false; }

 private:
  std::vector<Tensor> indices_;
};

class IdentityNOp final : public OpKernel {
 public:
  using OpKernel::OpKernel;
  void Compute(OpKernelContext* ctx) override {
    for (int i = 0; i < ctx->num_inputs(); ++i) ctx->forward_input(i, i);
  }
  bool IsExpensive() const override { return false; }
};

// The key of a StackPush or StackPop: its first n inputs, int32 scalars.
std::vector<int32_t> KeyOf(OpKernelContext* ctx, int n) {
  std::vector<int32_t> key;
  for (int i = 0; i < n; ++i) {
    const Tensor& t = ctx->input(i);
    if (t.num_elements() > 0) key.push_back(t.data<int32_t>()[0]);
  }
  return key;
}

// StackPush and StackPop keep their values in the step's CallFrame.
class StackPushOp final : public OpKernel {
 public:
  explicit StackPushOp(OpKernelConstruction* c) : OpKernel(c) {
    (void)c->GetAttr("stack_name", &stack_);
  }
  void Compute(OpKernelContext* ctx) override {
    FS_OP_REQUIRES(ctx, ctx->call_frame() != nullptr,
                   Internal("StackPush outside a step (no call frame)"));
    const int n = ctx->num_inputs() - 1;
    ctx->call_frame()->StackPush(stack_, KeyOf(ctx, n), ctx->input(n));
  }
  bool IsExpensive() const override { return false; }

 private:
  std::string stack_;
};

class StackPopOp final : public OpKernel {
 public:
  explicit StackPopOp(OpKernelConstruction* c) : OpKernel(c) {
    (void)c->GetAttr("stack_name", &stack_);
  }
  void Compute(OpKernelContext* ctx) override {
    FS_OP_REQUIRES(ctx, ctx->call_frame() != nullptr,
                   Internal("StackPop outside a step (no call frame)"));
    StatusOr<Tensor> t = ctx->call_frame()->StackPop(stack_, KeyOf(ctx, ctx->num_inputs()));
    FS_OP_REQUIRES_OK(ctx, t.status());
    ctx->set_output(0, std::move(*t));
  }
  bool IsExpensive() const override { return false; }

 private:
  std::string stack_;
};

void Must(const KernelDef& def, KernelFactory f) {
  KernelRegistry::Global()->Register(def, std::move(f)).CheckOk();
}

}  // namespace

void RegisterControlFlowKernels(const std::string& type) {
  for (DataType t : AllDataTypes()) {
    auto def = [&](const char* op) { return KernelDef(op).Device(type).TypeConstraint("T", t); };
    Must(def("Switch").HostMemory("pred"), MakeKernel<SwitchOp>);
    Must(def("Merge").HostMemory("value_index"), MakeKernel<MergeOp>);
    Must(def("Enter"), MakeKernel<ForwardOp>);
    Must(def("Exit"), MakeKernel<ForwardOp>);
    Must(def("NextIteration"), MakeKernel<ForwardOp>);
    Must(def("StackPush").HostMemory("keys"), MakeKernel<StackPushOp>);
    Must(KernelDef("StackPop").Device(type).TypeConstraint("elem_type", t).HostMemory("keys"),
         MakeKernel<StackPopOp>);
  }
  Must(KernelDef("LoopCond").Device(type).HostMemory("input").HostMemory("output"),
       MakeKernel<ForwardOp>);
  Must(KernelDef("IdentityN").Device(type), MakeKernel<IdentityNOp>);
}

}  // namespace flowstate::scheduler

// Const, Placeholder, Identity, StopGradient, NoOp: kernels that move no
// data. All are cheap, so the executor runs them inline.
#include "devices/cpu/register_kernels.h"

namespace flowstate::internal {
namespace {

class ConstOp final : public OpKernel {
 public:
  explicit ConstOp(OpKernelConstruction* c) : OpKernel(c) { c->GetAttr("value", &value_); }
  // Every step shares the attr's buffer; consumers never write into it
  // because its reference count is never one.
  void Compute(OpKernelContext* ctx) override { ctx->set_output(0, value_); }
  bool IsExpensive() const override { return false; }

 private:
  Tensor value_;
};

class PlaceholderOp final : public OpKernel {
 public:
  using OpKernel::OpKernel;
  void Compute(OpKernelContext* ctx) override {
    ctx->SetStatus(InvalidArgument("placeholder '" + name() + "' must be fed a value", name()));
  }
  bool IsExpensive() const override { return false; }
};

class IdentityOp final : public OpKernel {
 public:
  using OpKernel::OpKernel;
  void Compute(OpKernelContext* ctx) override { ctx->forward_input(0, 0); }
  bool IsExpensive() const override { return false; }
};

class NoOpKernel final : public OpKernel {
 public:
  using OpKernel::OpKernel;
  void Compute(OpKernelContext* ctx) override {}
  bool IsExpensive() const override { return false; }
};

}  // namespace

void RegisterBasicKernels(KernelRegistry* r) {
  for (DataType t : AllDataTypes()) {
    MustRegister(r, KernelDef("Const").TypeConstraint("dtype", t), MakeKernel<ConstOp>);
    MustRegister(r, KernelDef("Placeholder").TypeConstraint("dtype", t), MakeKernel<PlaceholderOp>);
    MustRegister(r, KernelDef("Identity").TypeConstraint("T", t), MakeKernel<IdentityOp>);
    MustRegister(r, KernelDef("StopGradient").TypeConstraint("T", t), MakeKernel<IdentityOp>);
  }
  MustRegister(r, KernelDef("NoOp"), MakeKernel<NoOpKernel>);
}

}  // namespace flowstate::internal

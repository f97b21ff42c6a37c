// Kernels of Save and Restore (graph/op_defs/state_defs.cc): they write and read
// named tensors through the TensorStore installed in the session's
// ResourceMgr (state/tensor_store.h), looked up when they run, so a store
// installed after the session was created is seen.
#include <mutex>

#include "devices/kernel_registry.h"
#include "devices/op_kernel.h"
#include "state/kernels.h"
#include "state/tensor_store.h"

namespace flowstate {
namespace {

class SaveOp final : public OpKernel {
 public:
  explicit SaveOp(OpKernelConstruction* c) : OpKernel(c), rm_(c->resource_manager()) {
    if (!c->GetAttr("prefix", &prefix_).ok()) return;
    auto it = c->def().attrs.find("tensor_names");
    if (it == c->def().attrs.end() || it->second.kind() != AttrKind::kStringList) {
      c->SetStatus(InvalidArgument("Save needs attr 'tensor_names' (list(string))"));
      return;
    }
    names_ = it->second.strings();
    if (int(names_.size()) != c->num_inputs()) {
      c->SetStatus(InvalidArgument("tensor_names has " + std::to_string(names_.size()) +
                                   " names for " + std::to_string(c->num_inputs()) + " inputs"));
    }
  }
  void Compute(OpKernelContext* ctx) override {
    auto store = GetTensorStore(rm_);
    FS_OP_REQUIRES_OK(ctx, store.status());
    std::vector<std::pair<std::string, Tensor>> tensors;
    tensors.reserve(names_.size());
    for (size_t i = 0; i < names_.size(); ++i) tensors.emplace_back(names_[i], ctx->input(int(i)));
    FS_OP_REQUIRES_OK(ctx, (*store)->Write(prefix_, tensors));
  }

 private:
  ResourceMgr* rm_;
  std::string prefix_;
  std::vector<std::string> names_;
};

class RestoreOp final : public OpKernel {
 public:
  explicit RestoreOp(OpKernelConstruction* c) : OpKernel(c), rm_(c->resource_manager()) {
    if (!c->GetAttr("prefix", &prefix_).ok() || !c->GetAttr("tensor_name", &name_).ok()) return;
    if (!c->GetAttr("dt", &dt_).ok()) return;
  }
  void Compute(OpKernelContext* ctx) override {
    auto store = GetTensorStore(rm_);
    FS_OP_REQUIRES_OK(ctx, store.status());
    StatusOr<Tensor> t = (*store)->Read(prefix_, name_);
    FS_OP_REQUIRES_OK(ctx, t.status());
    if (t->dtype() != dt_) {
      FS_OP_REQUIRES_OK(ctx, InvalidArgument("tensor '" + name_ + "' under prefix '" + prefix_ +
                                             "' was saved as " + std::string(DataTypeName(t->dtype())) +
                                             ", but dt is " + std::string(DataTypeName(dt_))));
    }
    ctx->set_output(0, std::move(t).value());
  }

 private:
  ResourceMgr* rm_;
  std::string prefix_, name_;
  DataType dt_ = DataType::kInvalid;
};

}  // namespace

namespace state {

// Called by RegisterKernels() (variable_kernels.cc).
void RegisterSaveRestoreKernels() {
  KernelRegistry::Global()->Register(KernelDef("Save"), MakeKernel<SaveOp>).CheckOk();
  for (DataType t : AllDataTypes()) {
    KernelRegistry::Global()
        ->Register(KernelDef("Restore").TypeConstraint("dt", t), MakeKernel<RestoreOp>)
        .CheckOk();
  }
}

}  // namespace state
}  // namespace flowstate

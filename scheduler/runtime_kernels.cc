// Kernels of the runtime-inserted ops: _Arg and _Retval move a step's fed
// and fetched tensors through its CallFrame; _Send and _Recv carry tensors
// between the partitions of a step through its Rendezvous. _Recv is
// asynchronous: it never holds a thread while it waits.
#include <mutex>

#include "devices/kernel_registry.h"
#include "scheduler/call_frame.h"
#include "scheduler/rendezvous.h"
#include "scheduler/runtime_kernels.h"

namespace flowstate {
namespace {

class ArgOp final : public OpKernel {
 public:
  explicit ArgOp(OpKernelConstruction* c) : OpKernel(c) { c->GetAttr("index", &index_); }
  void Compute(OpKernelContext* ctx) override {
    CallFrame* f = ctx->call_frame();
    FS_OP_REQUIRES(ctx, f != nullptr && index_ < f->num_args(),
                   Internal("argument " + std::to_string(index_) + " was not provided"));
    ctx->set_output(0, f->arg(int(index_)));
  }
  bool IsExpensive() const override { return false; }

 private:
  int64_t index_ = 0;
};

class RetvalOp final : public OpKernel {
 public:
  explicit RetvalOp(OpKernelConstruction* c) : OpKernel(c) { c->GetAttr("index", &index_); }
  void Compute(OpKernelContext* ctx) override {
    CallFrame* f = ctx->call_frame();
    FS_OP_REQUIRES(ctx, f != nullptr && index_ < int64_t(f->rets().size()),
                   Internal("no slot for return value " + std::to_string(index_)));
    f->set_ret(int(index_), ctx->input(0));
  }
  bool IsExpensive() const override { return false; }

 private:
  int64_t index_ = 0;
};

class SendOp final : public OpKernel {
 public:
  explicit SendOp(OpKernelConstruction* c) : OpKernel(c) { c->GetAttr("key", &key_); }
  void Compute(OpKernelContext* ctx) override {
    FS_OP_REQUIRES(ctx, ctx->rendezvous() != nullptr, Internal("a _Send outside a multi-device step"));
    FS_OP_REQUIRES_OK(ctx, ctx->rendezvous()->Send(key_, ctx->input(0)));
  }
  bool IsExpensive() const override { return false; }

 private:
  std::string key_;
};

class RecvOp final : public AsyncOpKernel {
 public:
  explicit RecvOp(OpKernelConstruction* c) : AsyncOpKernel(c) { c->GetAttr("key", &key_); }
  void ComputeAsync(OpKernelContext* ctx, DoneCallback done) override {
    FS_OP_REQUIRES_ASYNC(ctx, ctx->rendezvous() != nullptr,
                         Internal("a _Recv outside a multi-device step"), done);
    ctx->rendezvous()->RecvAsync(key_, [ctx, done](const Status& s, const Tensor& t) {
      if (s.ok()) {
        ctx->set_output(0, t);
      } else {
        ctx->SetStatus(s);
      }
      done();
    });
  }
  bool IsExpensive() const override { return false; }

 private:
  std::string key_;
};

void Must(const KernelDef& def, KernelFactory f) {
  KernelRegistry::Global()->Register(def, std::move(f)).CheckOk();
}

}  // namespace

namespace scheduler {

void RegisterRuntimeKernels() {
  static std::once_flag once;
  std::call_once(once, [] {
    for (DataType t : AllDataTypes()) {
      Must(KernelDef("_Arg").TypeConstraint("T", t), MakeKernel<ArgOp>);
      Must(KernelDef("_Retval").TypeConstraint("T", t), MakeKernel<RetvalOp>);
      Must(KernelDef("_Send").TypeConstraint("T", t), MakeKernel<SendOp>);
      Must(KernelDef("_Recv").TypeConstraint("T", t), MakeKernel<RecvOp>);
    }
  });
}

}  // namespace scheduler
}  // namespace flowstate

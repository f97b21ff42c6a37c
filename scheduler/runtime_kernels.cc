// Kernels of the runtime-inserted ops: _Arg and _Retval move a step's fed
// and fetched tensors through its CallFrame; _Send and _Recv carry tensors
// between the partitions of a step through its Rendezvous. _Recv is
// asynchronous: it never holds a thread while it waits.
//
// The rendezvous holds host tensors only. On a device with its own memory a
// _Send copies its tensor to the host first and a _Recv copies into the
// device, through the device's DeviceContext, unless their `host_memory`
// attr says that end is in host memory; _CopyToDevice and _CopyToHost
// convert between memories on one device; _HostConst is a host-memory
// constant on any device. On host-memory devices (CPU) _Send and _Recv are
// the plain kernels: no copy, no extra work.
//
// Inside a loop, _Send and _Recv add the frame instance and iteration they
// run in (OpKernelContext::frame_iter) to their key, so that the transfers
// of different iterations never meet. A dead value crosses as the dead mark
// (an uninitialized tensor, rendezvous.h): the executor runs a dead _Send
// with no input, and a _Recv that gets the mark leaves its output unset,
// which the executor takes as dead.
#include <set>

#include "devices/device_context.h"
#include "devices/device_factory.h"
#include "devices/kernel_registry.h"
#include "graph/mutex.h"
#include "scheduler/call_frame.h"
#include "scheduler/collective_kernels.h"
#include "scheduler/control_flow_kernels.h"
#include "scheduler/rendezvous.h"
#include "scheduler/runtime_kernels.h"

namespace flowstate {
namespace {

class ArgOp final : public OpKernel {
 public:
  explicit ArgOp(OpKernelConstruction* c) : OpKernel(c) { (void)c->GetAttr("index", &index_); }
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
  explicit RetvalOp(OpKernelConstruction* c) : OpKernel(c) { (void)c->GetAttr("index", &index_); }
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

// The key of a transfer in the frame instance and iteration of `ctx`.
std::string FullKey(const std::string& key, OpKernelContext* ctx) {
  if (ctx->frame_iter().empty()) return key;
  std::string full;
  full.reserve(key.size() + ctx->frame_iter().size() + 1);
  full.append(key).append(1, ';').append(ctx->frame_iter());
  return full;
}

class SendOp final : public OpKernel {
 public:
  explicit SendOp(OpKernelConstruction* c) : OpKernel(c) { (void)c->GetAttr("key", &key_); }
  void Compute(OpKernelContext* ctx) override {
    FS_OP_REQUIRES(ctx, ctx->rendezvous() != nullptr, Internal("a _Send outside a multi-device step"));
    FS_OP_REQUIRES_OK(ctx, ctx->rendezvous()->Send(FullKey(key_, ctx), ctx->input(0)));
  }
  bool IsExpensive() const override { return false; }

 private:
  std::string key_;
};

// A _Send on a device with its own memory whose tensor is there: copies it
// to the host, then sends the copy.
class CopyingSendOp final : public AsyncOpKernel {
 public:
  explicit CopyingSendOp(OpKernelConstruction* c) : AsyncOpKernel(c) { (void)c->GetAttr("key", &key_); }
  void ComputeAsync(OpKernelContext* ctx, DoneCallback done) override {
    FS_OP_REQUIRES_ASYNC(ctx, ctx->rendezvous() != nullptr,
                         Internal("a _Send outside a multi-device step"), done);
    if (!ctx->input(0).IsInitialized()) {  // dead: nothing to copy
      Status sent = ctx->rendezvous()->Send(FullKey(key_, ctx), Tensor());
      if (!sent.ok()) ctx->SetStatus(sent);
      done();
      return;
    }
    ctx->device_context()->CopyDeviceToHost(
        ctx->input(0), [key = FullKey(key_, ctx), ctx, done](const Status& s, Tensor host) {
          Status sent = s.ok() ? ctx->rendezvous()->Send(key, host) : s;
          if (!sent.ok()) ctx->SetStatus(sent);
          done();
        });
  }
  bool IsExpensive() const override { return false; }

 private:
  std::string key_;
};

bool OnDeviceMemory(OpKernelConstruction* c) {
  bool host = false;
  if (c->device()->memory_type() == MemoryType::kHost) return false;
  (void)c->GetAttr("host_memory", &host);  // an error is in c->status()
  return !host;
}

std::unique_ptr<OpKernel> MakeSend(OpKernelConstruction* c) {
  if (OnDeviceMemory(c)) return std::make_unique<CopyingSendOp>(c);
  return std::make_unique<SendOp>(c);
}

class RecvOp final : public AsyncOpKernel {
 public:
  explicit RecvOp(OpKernelConstruction* c) : AsyncOpKernel(c), to_device_(OnDeviceMemory(c)) {
    (void)c->GetAttr("key", &key_);
  }
  void ComputeAsync(OpKernelContext* ctx, DoneCallback done) override {
    FS_OP_REQUIRES_ASYNC(ctx, ctx->rendezvous() != nullptr,
                         Internal("a _Recv outside a multi-device step"), done);
    ctx->rendezvous()->RecvAsync(FullKey(key_, ctx), [this, ctx, done](const Status& s, const Tensor& t) {
      if (!s.ok()) {
        ctx->SetStatus(s);
        done();
      } else if (!t.IsInitialized()) {
        done();  // the dead mark: no output, so the executor makes it dead
      } else if (!to_device_) {
        ctx->set_output(0, t);
        done();
      } else {
        ctx->device_context()->CopyHostToDevice(t, [ctx, done](const Status& c, Tensor d) {
          if (c.ok()) {
            ctx->set_output(0, std::move(d));
          } else {
            ctx->SetStatus(c);
          }
          done();
        });
      }
    });
  }
  bool IsExpensive() const override { return false; }

 private:
  std::string key_;
  bool to_device_;  // the tensor arrives on the host and is wanted on the device
};

// _CopyToDevice (kToHost false) and _CopyToHost (kToHost true).
template <bool kToHost>
class CopyOp final : public AsyncOpKernel {
 public:
  using AsyncOpKernel::AsyncOpKernel;
  void ComputeAsync(OpKernelContext* ctx, DoneCallback done) override {
    auto finish = [ctx, done](const Status& s, Tensor t) {
      if (s.ok()) {
        ctx->set_output(0, std::move(t));
      } else {
        ctx->SetStatus(s);
      }
      done();
    };
    if (kToHost) {
      ctx->device_context()->CopyDeviceToHost(ctx->input(0), std::move(finish));
    } else {
      ctx->device_context()->CopyHostToDevice(ctx->input(0), std::move(finish));
    }
  }
  bool IsExpensive() const override { return false; }
};

class HostConstOp final : public OpKernel {
 public:
  explicit HostConstOp(OpKernelConstruction* c) : OpKernel(c) { (void)c->GetAttr("value", &value_); }
  void Compute(OpKernelContext* ctx) override { ctx->set_output(0, value_); }
  bool IsExpensive() const override { return false; }

 private:
  Tensor value_;
};

void Must(const KernelDef& def, KernelFactory f) {
  KernelRegistry::Global()->Register(def, std::move(f)).CheckOk();
}

}  // namespace

namespace scheduler {

void RegisterRuntimeKernels() {
  // Once per device type; a type registered after an earlier call gets its
  // kernels on the next one.
  static Mutex mu;
  static std::set<std::string>* done = new std::set<std::string>();
  MutexLock l(mu);
  for (const std::string& type : RegisteredDeviceTypes()) {
    if (!done->insert(type).second) continue;
    RegisterCollectiveKernels(type);
    RegisterControlFlowKernels(type);
    for (DataType t : AllDataTypes()) {
      auto def = [&](const char* op) {
        KernelDef d(op);
        d.Device(type).TypeConstraint(op == std::string("_HostConst") ? "dtype" : "T", t);
        return d;
      };
      Must(def("_Arg").HostMemory("output"), MakeKernel<ArgOp>);
      Must(def("_Retval").HostMemory("input"), MakeKernel<RetvalOp>);
      Must(def("_Send"), MakeSend);
      Must(def("_Recv"), MakeKernel<RecvOp>);
      Must(def("_CopyToDevice").HostMemory("input"), MakeKernel<CopyOp<false>>);
      Must(def("_CopyToHost").HostMemory("output"), MakeKernel<CopyOp<true>>);
      Must(def("_HostConst").HostMemory("output"), MakeKernel<HostConstOp>);
    }
  }
}

}  // namespace scheduler
}  // namespace flowstate

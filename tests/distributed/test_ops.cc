#include "tests/distributed/test_ops.h"

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <thread>

#include "devices/kernel_registry.h"
#include "devices/op_kernel.h"
#include "graph/op_def.h"

namespace flowstate::testing {
namespace {

std::atomic<int> blocks_started{0};

class TestBlockOp final : public AsyncOpKernel {
 public:
  explicit TestBlockOp(OpKernelConstruction* c) : AsyncOpKernel(c) { c->GetAttr("seconds", &seconds_).CheckOk(); }
  void ComputeAsync(OpKernelContext* ctx, DoneCallback done) override {
    blocks_started.fetch_add(1);
    struct Once {
      std::mutex mu;
      bool fired = false;
      DoneCallback done;
    };
    auto once = std::make_shared<Once>();
    once->done = std::move(done);
    auto fire = [once, ctx](const Status& s) {
      std::lock_guard<std::mutex> l(once->mu);
      if (once->fired) return;
      once->fired = true;
      if (s.ok()) {
        ctx->set_output(0, ctx->input(0));
      } else {
        ctx->SetStatus(s);
      }
      once->done();
    };
    CancellationManager* cm = ctx->cancellation();
    CancellationManager::Token t = cm->Register([fire] { fire(Cancelled("_TestBlock cancelled")); });
    if (t == CancellationManager::kInvalidToken) {
      fire(Cancelled("_TestBlock cancelled before it waited"));
      return;
    }
    const double seconds = seconds_;
    std::thread([fire, seconds] {
      std::this_thread::sleep_for(std::chrono::microseconds(int64_t(seconds * 1e6)));
      fire(Status());
    }).detach();
  }

 private:
  float seconds_ = 30;
};

class TestFailOp final : public AsyncOpKernel {
 public:
  explicit TestFailOp(OpKernelConstruction* c) : AsyncOpKernel(c) { c->GetAttr("delay_ms", &delay_ms_).CheckOk(); }
  void ComputeAsync(OpKernelContext* ctx, DoneCallback done) override {
    std::thread([this, ctx, done = std::move(done)] {
      std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms_));
      ctx->SetStatus(InvalidArgument("node '" + name() + "' fails on purpose", name()));
      done();
    }).detach();
  }

 private:
  int64_t delay_ms_ = 0;
};

}  // namespace

void RegisterDistributedTestOps() {
  static bool done = [] {
    OpRegistry* ops = OpRegistry::Global();
    ops->Register(OpDefBuilder("_TestBlock").Input("x: float").Output("y: float")
                      .Attr("seconds: float = 30").SetIsStateful()
                      .SetShapeFn(shape_fns::UnchangedShape).Doc("test only")).CheckOk();
    ops->Register(OpDefBuilder("_TestFailOnTask").Input("x: float").Output("y: float")
                      .Attr("delay_ms: int = 0").SetIsStateful()
                      .SetShapeFn(shape_fns::UnchangedShape).Doc("test only")).CheckOk();
    KernelRegistry* k = KernelRegistry::Global();
    k->Register(KernelDef("_TestBlock"), MakeKernel<TestBlockOp>).CheckOk();
    k->Register(KernelDef("_TestFailOnTask"), MakeKernel<TestFailOp>).CheckOk();
    return true;
  }();
  (void)done;
}

int BlocksStarted() { return blocks_started.load(); }

}  // namespace flowstate::testing

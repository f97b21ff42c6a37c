// The dataflow executor through Session: graph shapes (diamond, wide),
// errors in one branch cancelling the step, and asynchronous kernels that
// give their thread back while they wait.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "devices/kernel_registry.h"
#include "devices/op_kernel.h"
#include "graph/op_def.h"
#include "graph/op_builders.h"
#include "graph/scope.h"
#include "scheduler/session.h"
#include "tests/util/session_util.h"

namespace flowstate {
namespace {

using test::NewSession;

// Test-only ops:
//   _TestRendezvous(n): asynchronous; completes only once n kernels of the
//     same step have started. With one inter-op thread this finishes only if
//     a waiting async kernel does not hold the thread.
//   _TestWaitForCancel: asynchronous; completes (CANCELLED) only when the
//     step is cancelled.
//   _TestFail: asynchronous; fails with INVALID_ARGUMENT once a
//     _TestWaitForCancel is waiting.
struct RendezvousState {
  std::mutex mu;
  std::vector<std::pair<OpKernelContext*, AsyncOpKernel::DoneCallback>> waiting;
};
RendezvousState& Shared() {
  static RendezvousState s;
  return s;
}

class TestRendezvousOp final : public AsyncOpKernel {
 public:
  explicit TestRendezvousOp(OpKernelConstruction* c) : AsyncOpKernel(c) {
    FS_OP_REQUIRES_OK(c, c->GetAttr("n", &n_));
  }
  void ComputeAsync(OpKernelContext* ctx, DoneCallback done) override {
    std::vector<std::pair<OpKernelContext*, DoneCallback>> release;
    {
      std::lock_guard<std::mutex> l(Shared().mu);
      Shared().waiting.emplace_back(ctx, std::move(done));
      if (int64_t(Shared().waiting.size()) == n_) release.swap(Shared().waiting);
    }
    for (auto& [c, d] : release) {
      c->set_output(0, Tensor::Scalar(1.0f));
      d();
    }
  }

 private:
  int64_t n_ = 0;
};

std::atomic<int> waits_started{0};

class TestWaitForCancelOp final : public AsyncOpKernel {
 public:
  using AsyncOpKernel::AsyncOpKernel;
  void ComputeAsync(OpKernelContext* ctx, DoneCallback done) override {
    waits_started.fetch_add(1);
    auto shared_done = std::make_shared<DoneCallback>(std::move(done));
    CancellationManager* cm = ctx->cancellation();
    ASSERT_NE(cm, nullptr);
    CancellationManager::Token t = cm->Register([ctx, shared_done] {
      ctx->SetStatus(Status(Code::kCancelled, "cancelled while waiting"));
      (*shared_done)();
    });
    if (t == CancellationManager::kInvalidToken) {
      ctx->SetStatus(Status(Code::kCancelled, "cancelled before waiting"));
      (*shared_done)();
    }
  }
};

// Asynchronous, so that it fails only once `_TestWaitForCancel` is waiting
// (up to 5 s), from a thread of its own: the failure then has a waiting node
// to cancel, whatever order the executor picked.
class TestFailOp final : public AsyncOpKernel {
 public:
  using AsyncOpKernel::AsyncOpKernel;
  void ComputeAsync(OpKernelContext* ctx, DoneCallback done) override {
    std::thread([this, ctx, done = std::move(done)] {
      auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
      while (waits_started.load() == 0 && std::chrono::steady_clock::now() < deadline) {
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
      ctx->SetStatus(InvalidArgument("node '" + name() + "' fails on purpose", name()));
      done();
    }).detach();
  }
};

void RegisterTestOps() {
  static bool done = [] {
    OpRegistry* ops = OpRegistry::Global();
    ops->Register(OpDefBuilder("_TestRendezvous").Attr("n: int").Output("y: float")
                      .SetShapeFn(shape_fns::ScalarShape).Doc("test only")).CheckOk();
    ops->Register(OpDefBuilder("_TestWaitForCancel").SetIsStateful()
                      .SetShapeFn(shape_fns::NoOutputs).Doc("test only")).CheckOk();
    ops->Register(OpDefBuilder("_TestFail").Input("x: float").Output("y: float")
                      .SetShapeFn(shape_fns::UnchangedShape).Doc("test only")).CheckOk();
    KernelRegistry* k = KernelRegistry::Global();
    k->Register(KernelDef("_TestRendezvous"), MakeKernel<TestRendezvousOp>).CheckOk();
    k->Register(KernelDef("_TestWaitForCancel"), MakeKernel<TestWaitForCancelOp>).CheckOk();
    k->Register(KernelDef("_TestFail"), MakeKernel<TestFailOp>).CheckOk();
    return true;
  }();
  (void)done;
}

TEST(Executor, Diamond) {
  // a -> (Square, Neg) -> Add: every path of the diamond is taken once.
  Scope root;
  Output a = ops::Placeholder(root.WithOpName("a"), DataType::kFloat32, PartialShape({-1}));
  Output sq = ops::Square(root.WithOpName("sq"), a);
  Output neg = ops::Neg(root.WithOpName("neg"), a);
  ops::Add(root.WithOpName("sum"), sq, neg);
  for (int threads : {1, 2}) {
    auto s = NewSession(root.graph_def(), threads);
    std::vector<Tensor> out;
    Tensor in = Tensor::FromVector<float>({1, 2, 3, -4});
    ASSERT_TRUE(s->Run({{"a", in}}, {"sum", "sq"}, {}, &out).ok());
    EXPECT_TRUE(TensorsEqual(out[0], Tensor::FromVector<float>({0, 2, 6, 20})));
    EXPECT_TRUE(TensorsEqual(out[1], Tensor::FromVector<float>({1, 4, 9, 16})));
  }
}

TEST(Executor, WideFanOutAndFanIn) {
  // One source read by 500 branches, summed by one AddN: each branch's value
  // must arrive exactly once.
  Scope root;
  Output x = ops::Placeholder(root.WithOpName("x"), DataType::kFloat32, PartialShape({}));
  std::vector<Output> branches;
  for (int i = 0; i < 500; ++i) {
    branches.push_back(ops::Mul(root.WithOpName("m" + std::to_string(i)), x,
                                ops::Const(root, float(i))));
  }
  ops::AddN(root.WithOpName("total"), branches);
  for (int threads : {1, 2}) {
    auto s = NewSession(root.graph_def(), threads);
    std::vector<Tensor> out;
    for (int rep = 0; rep < 20; ++rep) {
      ASSERT_TRUE(s->Run({{"x", Tensor::Scalar(2.0f)}}, {"total"}, {}, &out).ok());
      EXPECT_EQ(out[0].scalar<float>(), 2.0f * 499 * 500 / 2);
    }
  }
}

TEST(Executor, ControlEdgesOnlyStillOrder) {
  // A chain of NoOps joined only by control edges ends at a fetchable node.
  Scope root;
  std::string prev = ops::NoOp(root.WithOpName("n0"));
  for (int i = 1; i < 100; ++i) {
    prev = ops::NoOp(root.WithOpName("n" + std::to_string(i)), {prev});
  }
  ops::Const(root.WithOpName("end").WithControlDependencies({prev}), 7.0f);
  auto s = NewSession(root.graph_def(), 1);
  std::vector<Tensor> out;
  ASSERT_TRUE(s->Run({}, {"end"}, {}, &out).ok());
  EXPECT_EQ(out[0].scalar<float>(), 7.0f);
}

TEST(Executor, AsyncKernelsDoNotHoldAThread) {
  RegisterTestOps();
  // Four async nodes that can only finish together, on ONE inter-op thread.
  Scope root;
  std::vector<Output> parts;
  for (int i = 0; i < 4; ++i) {
    parts.push_back(ops::Generic(root.WithOpName("r" + std::to_string(i)), "_TestRendezvous", {},
                                 {{"n", AttrValue(int64_t(4))}})[0]);
  }
  ops::AddN(root.WithOpName("all"), parts);
  auto s = NewSession(root.graph_def(), 1);
  std::vector<Tensor> out;
  for (int rep = 0; rep < 10; ++rep) {
    Status st = s->Run({}, {"all"}, {}, &out);
    ASSERT_TRUE(st.ok()) << st.ToString();
    EXPECT_EQ(out[0].scalar<float>(), 4.0f);
  }
}

TEST(Executor, AnErrorInOneBranchCancelsTheStep) {
  RegisterTestOps();
  // Branch 1 fails; branch 2 waits until the step is cancelled. The step
  // must end (not hang) with branch 1's error, which names its node.
  Scope root;
  Output x = ops::Placeholder(root.WithOpName("x"), DataType::kFloat32, PartialShape({}));
  ops::Generic(root.WithOpName("bad"), "_TestFail", {x});
  ops::Generic(root.WithOpName("wait"), "_TestWaitForCancel", {}, {}, 0);
  for (int threads : {1, 2}) {
    auto s = NewSession(root.graph_def(), threads);
    std::vector<Tensor> out;
    for (int rep = 0; rep < 20; ++rep) {
      waits_started = 0;
      Status st = s->Run({{"x", Tensor::Scalar(1.0f)}}, {"bad"}, {"wait"}, &out);
      ASSERT_EQ(st.code(), Code::kInvalidArgument) << st.ToString();
      EXPECT_NE(st.ToString().find("bad"), std::string::npos) << st.ToString();
      EXPECT_EQ(waits_started.load(), 1);
    }
    // The session is still usable after failed steps.
    ASSERT_TRUE(s->Run({{"x", Tensor::Scalar(1.0f)}}, {"x"}, {}, &out).ok());
  }
}

TEST(Executor, KernelErrorNamesTheNode) {
  Scope root;
  Output x = ops::Placeholder(root.WithOpName("x"), DataType::kFloat32, PartialShape({-1}));
  ops::Reshape(root.WithOpName("reshape_me"), x, ops::Const(root, std::vector<int32_t>{3}));
  auto s = NewSession(root.graph_def(), 2);
  std::vector<Tensor> out;
  Status st = s->Run({{"x", Tensor::FromVector<float>({1, 2})}}, {"reshape_me"}, {}, &out);
  EXPECT_EQ(st.code(), Code::kInvalidArgument);
  EXPECT_NE(st.message().find("reshape_me"), std::string::npos) << st.ToString();
}

}  // namespace
}  // namespace flowstate

// A while loop against the same work unrolled.
//
//   while/10000_scalar_adds/parallel_N   a While loop of 10,000 iterations
//                                        whose body adds 1.0 to a float32
//                                        scalar (and 1 to its int32 counter),
//                                        parallel_iterations N; µs per
//                                        iteration
//   unrolled/10000_scalar_adds           the same 10,000 adds as a chain of
//                                        Add nodes without control flow; µs
//                                        per add
//   while_split/10000_scalar_adds/parallel_N
//                                        the While loop with its float Add on
//                                        a second CPU device: each iteration
//                                        sends the value there and back and
//                                        the LoopCond to that device's
//                                        control-loop skeleton; µs per
//                                        iteration
// Each through a Session with one inter-op thread (the caller's; cheap nodes
// run inline), the best of the repetitions. Target: <= 2 µs per iteration
// (for the loop on one device).
#include <cstdio>
#include <string>

#include "bench/bench_util.h"
#include "bench/session_util.h"
#include "devices/device_pool.h"
#include "graph/control_flow_builders.h"
#include "graph/op_builders.h"
#include "graph/scope.h"
#include "scheduler/runtime_kernels.h"
#include "scheduler/session.h"

using namespace flowstate;

namespace {

constexpr int kIterations = 10000;

using bench::NewSession;

// `split`: the float Add on CPU:1, the rest on CPU:0.
GraphDef WhileGraph(int parallel, bool split = false) {
  Scope root = split ? Scope().WithDevice("/device:CPU:0") : Scope();
  auto r = ops::WhileLoop(
      root.WithOpName("loop"),
      [](const Scope& c, const std::vector<Output>& v) -> StatusOr<Output> {
        return ops::Less(c, v[0], ops::Const(c, kIterations));
      },
      [split](const Scope& b, const std::vector<Output>& v) -> StatusOr<std::vector<Output>> {
        Scope far = split ? b.WithDevice("/device:CPU:1") : b;
        return std::vector<Output>{ops::Add(b, v[0], ops::Const(b, 1)),
                                   ops::Add(far, v[1], ops::Const(far, 1.0f))};
      },
      {ops::Const(root, 0), ops::Const(root, 0.0f)}, parallel);
  r.status().CheckOk();
  return root.graph_def();
}

GraphDef UnrolledGraph() {
  Scope root;
  Output one = ops::Const(root.WithOpName("one"), 1.0f);
  Output x = ops::Const(root.WithOpName("x0"), 0.0f);
  for (int i = 0; i < kIterations; ++i) {
    std::string name = "x";
    name += std::to_string(i + 1);
    x = ops::Add(root.WithOpName(name), x, one);
  }
  ops::Identity(root.WithOpName("result"), x);
  return root.graph_def();
}

}  // namespace

int main(int argc, char** argv) {
  bench::TimingOptions t = bench::ParseTimingOptions(argc, argv);
  scheduler::RegisterRuntimeKernels();
  DevicePoolOptions po;
  po.intra_op_threads = 1;
  auto pool = DevicePool::Create(po).value();
  std::vector<Tensor> out;

  for (int parallel : {1, 10}) {
    auto s = NewSession(pool.get(), WhileGraph(parallel));
    double sec = bench::BestSecondsPerCall([&] { s->Run({}, {"loop:1"}, {}, &out).CheckOk(); }, t);
    if (out[0].scalar<float>() != float(kIterations)) {
      std::fprintf(stderr, "wrong result %f\n", out[0].scalar<float>());
      return 1;
    }
    bench::PrintFigure("while/10000_scalar_adds/parallel_" + std::to_string(parallel),
                       sec / kIterations * 1e6, "us/iteration");
  }
  {
    DevicePoolOptions two_o;
    two_o.intra_op_threads = 1;
    two_o.num_cpu_devices = 2;
    auto two = DevicePool::Create(two_o).value();
    for (int parallel : {1, 10}) {
      auto s = NewSession(two.get(), WhileGraph(parallel, true));
      double sec = bench::BestSecondsPerCall([&] { s->Run({}, {"loop:1"}, {}, &out).CheckOk(); }, t);
      if (out[0].scalar<float>() != float(kIterations)) {
        std::fprintf(stderr, "wrong result %f\n", out[0].scalar<float>());
        return 1;
      }
      bench::PrintFigure("while_split/10000_scalar_adds/parallel_" + std::to_string(parallel),
                         sec / kIterations * 1e6, "us/iteration");
    }
  }
  {
    auto s = NewSession(pool.get(), UnrolledGraph());
    double sec = bench::BestSecondsPerCall([&] { s->Run({}, {"result"}, {}, &out).CheckOk(); }, t);
    bench::PrintFigure("unrolled/10000_scalar_adds", sec / kIterations * 1e6, "us/add");
  }
  return 0;
}

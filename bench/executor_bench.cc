// Step overhead and executor throughput.
//
//   session_step/noop_target       Run() with one NoOp target, µs per step
//   session_step/add_scalars_fetch Run() of Add on two scalar constants with a fetch
//   session_step/add_fed_scalars   the same with both scalars fed
//   executor/chain_10000_noops     10,000 NoOps in a chain, null ops per second
//   executor/wide_10000_noops      10,000 NoOps between one source and one sink
//   .../traced                     the same with a step trace recorded
//                                  (scheduler/step_trace.h; a fresh collector
//                                  per step)
// all on one inter-op thread (the caller's: cheap nodes run inline), and the
// last two also through a Session. Targets: <= 5 µs, <= 10 µs,
// >= 5,000,000 ops/s (the paper's executor: ~2,000,000). Tracing off is a
// null pointer the executor tests once per op: compare the untraced figures
// with a build of the commit before tracing (BENCHMARKS.md, "Step traces").
#include <cstdio>
#include <string>

#include "bench/bench_util.h"
#include "bench/session_util.h"
#include "devices/device_pool.h"
#include "graph/graph.h"
#include "graph/op_builders.h"
#include "graph/scope.h"
#include "scheduler/executor.h"
#include "scheduler/runtime_kernels.h"
#include "scheduler/session.h"
#include "scheduler/step_trace.h"
#include "state/kernels.h"

using namespace flowstate;

namespace {

using bench::NewSession;

// prefix + i, appended rather than "n" + std::to_string(i): GCC 12 warns
// (-Wrestrict, a false positive in its inlined std::string operator+).
std::string Name(const char* prefix, int i) {
  std::string s = prefix;
  s += std::to_string(i);
  return s;
}

GraphDef Chain(int n) {
  GraphDef g;
  for (int i = 0; i < n; ++i) {
    NodeDef d;
    d.name = Name("n", i);
    d.op = "NoOp";
    if (i > 0) d.inputs.push_back(Name("^n", i - 1));
    g.nodes.push_back(d);
  }
  return g;
}

GraphDef Wide(int n) {
  GraphDef g;
  NodeDef src;
  src.name = "src";
  src.op = "NoOp";
  g.nodes.push_back(src);
  NodeDef sink;
  sink.name = "sink";
  sink.op = "NoOp";
  for (int i = 0; i < n - 2; ++i) {
    NodeDef d;
    d.name = Name("n", i);
    d.op = "NoOp";
    d.inputs.push_back("^src");
    g.nodes.push_back(d);
    sink.inputs.push_back("^" + d.name);
  }
  g.nodes.push_back(sink);
  return g;
}

}  // namespace

int main(int argc, char** argv) {
  bench::TimingOptions t = bench::ParseTimingOptions(argc, argv);
  // --no-traced: only the figures a build without tracing has too (for an
  // instruction count of the same calls under callgrind).
  bool traced_figures = true;
  for (int i = 1; i < argc; ++i) traced_figures &= std::string(argv[i]) != "--no-traced";
  scheduler::RegisterRuntimeKernels();
  state::RegisterKernels();
  DevicePoolOptions po;
  po.intra_op_threads = 1;
  auto pool = DevicePool::Create(po).value();

  {
    Scope root;
    ops::NoOp(root.WithOpName("noop"));
    Output a = ops::Const(root.WithOpName("a"), 1.0f);
    Output b = ops::Const(root.WithOpName("b"), 2.0f);
    ops::Add(root.WithOpName("sum"), a, b);
    Output x = ops::Placeholder(root.WithOpName("x"), DataType::kFloat32, PartialShape({}));
    Output y = ops::Placeholder(root.WithOpName("y"), DataType::kFloat32, PartialShape({}));
    ops::Add(root.WithOpName("fed_sum"), x, y);
    auto s = NewSession(pool.get(), root.graph_def());
    std::vector<Tensor> out;
    double noop = bench::BestSecondsPerCall([&] { s->Run({}, {}, {"noop"}, &out).CheckOk(); }, t);
    bench::PrintFigure("session_step/noop_target", noop * 1e6, "us/step");
    double add = bench::BestSecondsPerCall([&] { s->Run({}, {"sum"}, {}, &out).CheckOk(); }, t);
    bench::PrintFigure("session_step/add_scalars_fetch", add * 1e6, "us/step");
    if (traced_figures) {
      double traced = bench::BestSecondsPerCall(
          [&] {
            StepTraceCollector trace;
            RunOptions o;
            o.trace = &trace;
            s->Run({}, {"sum"}, {}, &out, nullptr, o).CheckOk();
          },
          t);
      bench::PrintFigure("session_step/add_scalars_fetch/traced", traced * 1e6, "us/step");
    }
    Tensor xv = Tensor::Scalar(1.0f), yv = Tensor::Scalar(2.0f);
    double fed = bench::BestSecondsPerCall(
        [&] { s->Run({{"x", xv}, {"y", yv}}, {"fed_sum"}, {}, &out).CheckOk(); }, t);
    bench::PrintFigure("session_step/add_fed_scalars", fed * 1e6, "us/step");
  }

  constexpr int kNodes = 10000;
  for (const char* shape : {"chain", "wide"}) {
    GraphDef gd = std::string(shape) == "chain" ? Chain(kNodes) : Wide(kNodes);
    Graph g = Graph::Create(gd).value();
    Executor::Options eo;
    eo.device = pool->default_device();
    auto exec = Executor::Create(std::move(g), eo).value();
    Executor::Args args;  // no pool: one inter-op thread, the caller's
    double sec = bench::BestSecondsPerCall([&] { exec->Run(args).CheckOk(); }, t);
    bench::PrintFigure(std::string("executor/") + shape + "_10000_noops", kNodes / sec, "ops/s");
    if (traced_figures) {
      double tsec = bench::BestSecondsPerCall(
          [&] {
            StepTraceCollector trace;
            Executor::Args traced = args;
            traced.trace = &trace;
            exec->Run(traced).CheckOk();
          },
          t);
      bench::PrintFigure(std::string("executor/") + shape + "_10000_noops/traced", kNodes / tsec, "ops/s");
    }
    auto s = NewSession(pool.get(), gd);
    std::vector<Tensor> out;
    std::string target = std::string(shape) == "chain" ? Name("n", kNodes - 1) : "sink";
    double ssec = bench::BestSecondsPerCall([&] { s->Run({}, {}, {target}, &out).CheckOk(); }, t);
    bench::PrintFigure(std::string("session/") + shape + "_10000_noops", kNodes / ssec, "ops/s");
  }
  return 0;
}

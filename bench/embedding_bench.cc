// One training step of an embedding model as its table grows (targets in
// BENCHMARKS.md, "Sparse embeddings"): a float32 [rows, 64] table looked up
// by a batch of 512 ids (Gather), a 64-16-1 MLP with ReLU on top, the mean
// squared error; Adam (lazy SparseApplyAdam on the table, ApplyAdam on the
// MLP). Built by the job's own BuildTrainingGraph (gradients, NaN guard,
// optimizer, initializers: the table is "uniform"), run through a Session
// with one inter-op thread and --threads intra-op threads. Fresh random ids
// every step (a pool of 64 batches, seeded).
//
//   embedding_bench --rows N [--threads T] [--partitions P]
//                   [--partition-devices D] [--min-time=S] [--reps=R]
//
// --partitions P splits the table over P variables (mod); with
// --partition-devices D the pool has D CPU devices and part p lives on
// CPU:(p % D) (graph/partitioned_variables.h).
//
// Prints JSON lines (bench_util.h):
//   embedding/flowstate/rows_N/init    seconds to initialize the table, its
//                                      Adam slots and the MLP
//   embedding/flowstate/rows_N/step    ms per training step (best repetition)
// (".../rows_N/partitions_P[_devices_D]/..." with --partitions P > 1)
// bench/embedding_bench.py runs it per table size beside PyTorch.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "bench/bench_util.h"
#include "bench/session_util.h"
#include "devices/device_pool.h"
#include "graph/op_builders.h"
#include "graph/scope.h"
#include "graph/training_graph.h"
#include "scheduler/session.h"

using namespace flowstate;

namespace {

constexpr int64_t kDim = 64, kHidden = 16, kBatch = 512;

GraphDef Model(int64_t rows, int64_t partitions, int devices) {
  Scope root;
  Output table = ops::Variable(root.WithOpName("table"), TensorShape({rows, kDim}), DataType::kFloat32);
  Output w1 = ops::Variable(root.WithOpName("w1"), TensorShape({kDim, kHidden}), DataType::kFloat32);
  Output w2 = ops::Variable(root.WithOpName("w2"), TensorShape({kHidden, 1}), DataType::kFloat32);
  Output ids = ops::Placeholder(root.WithOpName("ids"), DataType::kInt32, PartialShape({kBatch}));
  Output y = ops::Placeholder(root.WithOpName("y"), DataType::kFloat32, PartialShape({kBatch, 1}));
  Output emb = ops::Generic(root, "Gather", {table, ids})[0];
  Output h = ops::Generic(root, "Relu", {ops::MatMul(root, emb, w1)})[0];
  Output pred = ops::MatMul(root, h, w2);
  ops::Mean(root.WithOpName("loss"), ops::Square(root, ops::Sub(root, pred, y)),
            std::vector<int32_t>{});
  GraphDef g = root.graph_def();
  for (NodeDef& n : g.nodes) {
    if (n.op != "Variable") continue;
    n.attrs["init"] = AttrValue(std::string(n.name == "table" ? "uniform" : "glorot_uniform"));
    if (n.name == "table" && partitions > 1) {
      n.attrs["partitions"] = AttrValue(partitions);
      std::vector<std::string> where;
      for (int d = 0; d < devices && devices > 1; ++d) where.push_back("/device:CPU:" + std::to_string(d));
      n.attrs["partition_devices"] = AttrValue(where);
    }
  }
  return g;
}

}  // namespace

int main(int argc, char** argv) {
  int64_t rows = 10000;
  int threads = 1;
  int64_t partitions = 1;
  int devices = 1;
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::strcmp(argv[i], "--rows") == 0) rows = std::atoll(argv[i + 1]);
    if (std::strcmp(argv[i], "--threads") == 0) threads = std::atoi(argv[i + 1]);
    if (std::strcmp(argv[i], "--partitions") == 0) partitions = std::atoll(argv[i + 1]);
    if (std::strcmp(argv[i], "--partition-devices") == 0) devices = std::atoi(argv[i + 1]);
  }
  bench::TimingOptions timing = bench::ParseTimingOptions(argc, argv);
  TrainingGraphSpec spec;
  spec.graph = Model(rows, partitions, devices);
  spec.loss = "loss";
  spec.optimizer.kind = OptimizerOptions::Kind::kAdam;
  spec.optimizer.learning_rate = 0.001;
  spec.seed = 1;
  TrainingGraph tg = BuildTrainingGraph(spec).value();
  DevicePoolOptions po;
  po.intra_op_threads = threads;
  po.num_cpu_devices = std::max(devices, 1);
  auto pool = DevicePool::Create(po).value();
  auto session = bench::NewSession(pool.get(), tg.graph);
  std::vector<Tensor> out;
  using Clock = std::chrono::steady_clock;
  const Clock::time_point t0 = Clock::now();
  session->Run({}, {}, {tg.init_op, tg.optimizer_init}, &out).CheckOk();
  const double init_s = std::chrono::duration<double>(Clock::now() - t0).count();

  std::mt19937_64 rng(42);
  std::uniform_int_distribution<int64_t> pick(0, rows - 1);
  std::normal_distribution<float> normal;
  std::vector<std::vector<std::pair<std::string, Tensor>>> feeds(64);
  for (auto& f : feeds) {
    Tensor ids(DataType::kInt32, TensorShape({kBatch}));
    Tensor y(DataType::kFloat32, TensorShape({kBatch, 1}));
    for (int64_t i = 0; i < kBatch; ++i) {
      ids.data<int32_t>()[i] = int32_t(pick(rng));
      y.data<float>()[i] = normal(rng);
    }
    f = {{"ids", ids}, {"y", y}};
  }
  size_t k = 0;
  const double step_s = bench::BestSecondsPerCall([&] {
    session->Run(feeds[k++ % feeds.size()], {}, {tg.train_op}, &out).CheckOk();
  }, timing);
  std::string name = "embedding/flowstate/rows_" + std::to_string(rows);
  if (partitions > 1) {
    name += "/partitions_" + std::to_string(partitions);
    if (devices > 1) name += "_devices_" + std::to_string(devices);
  }
  bench::PrintFigure(name + "/init", init_s, "s");
  bench::PrintFigure(name + "/step", step_s * 1e3, "ms");
  return 0;
}

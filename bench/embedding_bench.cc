// One training step of an embedding model as its table grows (targets in
// BENCHMARKS.md, "Sparse embeddings"): a float32 [rows, 64] table looked up
// by a batch of 512 ids (Gather), a 64-16-1 MLP with ReLU on top, the mean
// squared error; Adam (lazy SparseApplyAdam on the table, ApplyAdam on the
// MLP). Built by the job's own BuildTrainingGraph (gradients, NaN guard,
// optimizer, initializers: the table is "uniform"), run through a Session
// with one inter-op thread and --threads intra-op threads. Fresh random ids
// every step (a pool of 64 batches, seeded).
//
//   embedding_bench --rows N [--beside R] [--threads T] [--partitions P]
//                   [--partition-devices D] [--huge-pages-min-bytes B]
//                   [--min-time=S] [--reps=R]
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
// --huge-pages-min-bytes sets the host allocator's huge-page threshold
// (graph/allocator.h; 0: no huge pages), as the server's
// devices.huge_pages_min_bytes does.
// With --beside R a second model of R rows is built in the same process and
// the two are timed side by side, repetitions alternating
// (bench::BestSecondsPerCallAlternating), so that the machine's changing
// load falls on both:
//   embedding/flowstate/side_by_side/rows_R/step
//   embedding/flowstate/side_by_side/rows_N/step   (ratio: N's step / R's)
// bench/embedding_bench.py runs it per table size beside PyTorch.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "bench/bench_util.h"
#include "bench/session_util.h"
#include "devices/device_pool.h"
#include "graph/allocator.h"
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

// One model of `rows` rows, initialized, with its step's feeds.
struct EmbeddingModel {
  std::unique_ptr<DevicePool> pool;
  std::unique_ptr<Session> session;
  TrainingGraph tg;
  std::vector<std::vector<std::pair<std::string, Tensor>>> feeds;
  size_t next = 0;
  double init_seconds = 0;

  void Step() {
    std::vector<Tensor> out;
    session->Run(feeds[next++ % feeds.size()], {}, {tg.train_op}, &out).CheckOk();
  }
};

std::unique_ptr<EmbeddingModel> Build(int64_t rows, int64_t partitions, int devices, int threads) {
  auto m = std::make_unique<EmbeddingModel>();
  TrainingGraphSpec spec;
  spec.graph = Model(rows, partitions, devices);
  spec.loss = "loss";
  spec.optimizer.kind = OptimizerOptions::Kind::kAdam;
  spec.optimizer.learning_rate = 0.001;
  spec.seed = 1;
  m->tg = BuildTrainingGraph(spec).value();
  DevicePoolOptions po;
  po.intra_op_threads = threads;
  po.num_cpu_devices = std::max(devices, 1);
  m->pool = DevicePool::Create(po).value();
  m->session = bench::NewSession(m->pool.get(), m->tg.graph);
  std::vector<Tensor> out;
  using Clock = std::chrono::steady_clock;
  const Clock::time_point t0 = Clock::now();
  m->session->Run({}, {}, {m->tg.init_op, m->tg.optimizer_init}, &out).CheckOk();
  m->init_seconds = std::chrono::duration<double>(Clock::now() - t0).count();

  std::mt19937_64 rng(42);
  std::uniform_int_distribution<int64_t> pick(0, rows - 1);
  std::normal_distribution<float> normal;
  m->feeds.resize(64);
  for (auto& f : m->feeds) {
    Tensor ids(DataType::kInt32, TensorShape({kBatch}));
    Tensor y(DataType::kFloat32, TensorShape({kBatch, 1}));
    for (int64_t i = 0; i < kBatch; ++i) {
      ids.data<int32_t>()[i] = int32_t(pick(rng));
      y.data<float>()[i] = normal(rng);
    }
    f = {{"ids", ids}, {"y", y}};
  }
  return m;
}

}  // namespace

int main(int argc, char** argv) {
  int64_t rows = 10000, beside = 0;
  int threads = 1;
  int64_t partitions = 1;
  int devices = 1;
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::strcmp(argv[i], "--rows") == 0) rows = std::atoll(argv[i + 1]);
    if (std::strcmp(argv[i], "--beside") == 0) beside = std::atoll(argv[i + 1]);
    if (std::strcmp(argv[i], "--threads") == 0) threads = std::atoi(argv[i + 1]);
    if (std::strcmp(argv[i], "--partitions") == 0) partitions = std::atoll(argv[i + 1]);
    if (std::strcmp(argv[i], "--partition-devices") == 0) devices = std::atoi(argv[i + 1]);
    if (std::strcmp(argv[i], "--huge-pages-min-bytes") == 0) {
      SetHostHugePageMinBytes(size_t(std::atoll(argv[i + 1])));
    }
  }
  bench::TimingOptions timing = bench::ParseTimingOptions(argc, argv);
  std::string suffix;
  if (partitions > 1) {
    suffix = "/partitions_" + std::to_string(partitions);
    if (devices > 1) suffix += "_devices_" + std::to_string(devices);
  }
  std::unique_ptr<EmbeddingModel> m = Build(rows, partitions, devices, threads);
  const std::string name = "embedding/flowstate/rows_" + std::to_string(rows) + suffix;
  if (beside <= 0) {
    const double step_s = bench::BestSecondsPerCall([&] { m->Step(); }, timing);
    bench::PrintFigure(name + "/init", m->init_seconds, "s");
    bench::PrintFigure(name + "/step", step_s * 1e3, "ms");
    return 0;
  }
  // Side by side: the reference model's steps alternate with this one's.
  std::unique_ptr<EmbeddingModel> ref = Build(beside, partitions, devices, threads);
  const std::vector<double> s = bench::BestSecondsPerCallAlternating(
      {[&] { ref->Step(); }, [&] { m->Step(); }}, timing);
  const std::string ref_name =
      "embedding/flowstate/side_by_side/rows_" + std::to_string(beside) + suffix + "/step";
  bench::PrintFigure(ref_name, s[0] * 1e3, "ms");
  bench::PrintFigure("embedding/flowstate/side_by_side/rows_" + std::to_string(rows) + suffix +
                         "/step",
                     s[1] * 1e3, "ms", ref_name, s[1] / s[0]);
  return 0;
}

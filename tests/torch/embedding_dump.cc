// The Flowstate side of tests/torch/sparse_adam_twin.py: trains a small
// embedding model -- e [rows, dim] through Gather, a [dim, 1] layer w, the
// mean squared error against 1 -- with the optimizer's sparse (lazy) Adam on
// e and dense Adam on w, in float64, and prints one JSON object: the
// hyperparameters, the start values, the ids of each step (seeded, with
// duplicates and rows left out) and the final e and w.
//
//   embedding_dump [--steps N] [--seed S] [--eps E]
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "devices/device_pool.h"
#include "graph/gradients.h"
#include "graph/op_builders.h"
#include "graph/optimizers.h"
#include "graph/scope.h"
#include "scheduler/session.h"

using namespace flowstate;

int main(int argc, char** argv) {
  int steps = 6;
  uint32_t seed = 5;
  double eps = 1e-8;
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::strcmp(argv[i], "--steps") == 0) steps = std::atoi(argv[i + 1]);
    if (std::strcmp(argv[i], "--seed") == 0) seed = uint32_t(std::atoi(argv[i + 1]));
    if (std::strcmp(argv[i], "--eps") == 0) eps = std::atof(argv[i + 1]);
  }
  const int64_t rows = 12, dim = 4, batch = 6;
  const double lr = 0.05, beta1 = 0.9, beta2 = 0.999;
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> u(-0.5, 0.5);
  std::vector<double> e0(static_cast<size_t>(rows * dim)), w0(static_cast<size_t>(dim));
  for (double& x : e0) x = u(rng);
  for (double& x : w0) x = u(rng);
  // Ids from the first 8 rows only (rows 8..11 never move), with repeats.
  std::uniform_int_distribution<int32_t> pick(0, 7);
  std::vector<std::vector<int32_t>> ids(static_cast<size_t>(steps));
  for (auto& s : ids) {
    for (int64_t b = 0; b < batch; ++b) s.push_back(pick(rng));
  }

  Scope root;
  Output e = ops::Variable(root.WithOpName("e"), TensorShape({rows, dim}), DataType::kFloat64);
  Output w = ops::Variable(root.WithOpName("w"), TensorShape({dim, 1}), DataType::kFloat64);
  Output ie = ops::Assign(root.WithOpName("e/init"), e,
                          ops::Const(root, Tensor::FromVector<double>(e0, TensorShape({rows, dim}))));
  Output iw = ops::Assign(root.WithOpName("w/init"), w,
                          ops::Const(root, Tensor::FromVector<double>(w0, TensorShape({dim, 1}))));
  Output idp = ops::Placeholder(root.WithOpName("ids"), DataType::kInt32);
  Output pred = ops::MatMul(root, ops::Generic(root, "Gather", {e, idp})[0], w);
  Output err = ops::Sub(root, pred, ops::Const(root, 1.0));
  Output loss = ops::Mul(root.WithOpName("loss"),
                         ops::Sum(root, ops::Square(root, err), std::vector<int32_t>{}),
                         ops::Const(root, 1.0 / double(batch)));
  std::vector<Gradient> g;
  AddGradients(root, loss, {e, w}, &g).CheckOk();
  if (!g[0].is_sparse) {
    std::fprintf(stderr, "the embedding's gradient is not sparse\n");
    return 1;
  }
  OptimizerOptions o;
  o.kind = OptimizerOptions::Kind::kAdam;
  o.learning_rate = lr;
  o.beta1 = beta1;
  o.beta2 = beta2;
  o.epsilon = eps;
  TrainOp t = BuildOptimizer(root, "adam", o,
                             {{e, DataType::kFloat64, PartialShape({rows, dim}), g[0]},
                              {w, DataType::kFloat64, PartialShape({dim, 1}), g[1]}})
                  .value();
  DevicePoolOptions po;
  po.intra_op_threads = 1;
  auto pool = DevicePool::Create(po).value();
  SessionOptions so;
  so.devices = pool.get();
  auto s = Session::Create(root.graph_def(), so).value();
  std::vector<Tensor> out;
  s->Run({}, {}, {ie.node, iw.node, t.init}, &out).CheckOk();
  for (const auto& step : ids) {
    s->Run({{"ids", Tensor::FromVector<int32_t>(step)}}, {}, {t.train}, &out).CheckOk();
  }
  s->Run({}, {"e", "w"}, {}, &out).CheckOk();
  nlohmann::json j;
  j["rows"] = rows;
  j["dim"] = dim;
  j["lr"] = lr;
  j["beta1"] = beta1;
  j["beta2"] = beta2;
  j["eps"] = eps;
  j["e0"] = e0;
  j["w0"] = w0;
  j["ids"] = ids;
  j["e"] = std::vector<double>(out[0].data<double>(), out[0].data<double>() + rows * dim);
  j["w"] = std::vector<double>(out[1].data<double>(), out[1].data<double>() + dim);
  std::printf("%s\n", j.dump().c_str());
  return 0;
}

// Optimizers as graph builders (graph/optimizers.h) against the same update
// rules written out in double here, over several steps: SGD, Momentum and
// Nesterov, Adam, AdaGrad, RMSProp (with and without momentum); the
// learning-rate schedules on the global step; clipping by global norm;
// sparse (Gather) gradients through the SparseApply* updates against the
// densified path; and bit-for-bit determinism.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>

#include "devices/device_pool.h"
#include "graph/gradients.h"
#include "graph/optimizers.h"
#include "graph/op_builders.h"
#include "graph/scope.h"
#include "scheduler/session.h"

namespace flowstate {
namespace {

using K = OptimizerOptions::Kind;

DevicePool* Pool() {
  static DevicePool* p = [] {
    DevicePoolOptions o;
    o.intra_op_threads = 2;
    return DevicePool::Create(o).value().release();
  }();
  return p;
}

const std::vector<double> kStart = {1.0, -2.0, 0.5};
const std::vector<double> kC = {0.5, -1.5, 2.0};

// loss = sum(c * w) + sum(w^2) / 2 over a float64 [3] variable, so
// dloss/dw = c + w changes from step to step.
struct Model {
  Scope root;
  Output w;
  TrainOp train;
  std::unique_ptr<Session> session;
};

std::unique_ptr<Model> Build(const OptimizerOptions& o) {
  auto m = std::make_unique<Model>();
  Scope& root = m->root;
  m->w = ops::Variable(root.WithOpName("w"), TensorShape({3}), DataType::kFloat64);
  Output init_w = ops::Assign(root.WithOpName("w/init"), m->w, ops::Const(root, Tensor::FromVector(kStart)));
  Output c = ops::Const(root, Tensor::FromVector(kC));
  Output loss = ops::Add(root.WithOpName("loss"),
                         ops::Sum(root, ops::Mul(root, m->w, c), std::vector<int32_t>{}),
                         ops::Mul(root, ops::Sum(root, ops::Square(root, m->w), std::vector<int32_t>{}),
                                  ops::Const(root, 0.5)));
  std::vector<Gradient> g;
  EXPECT_TRUE(AddGradients(root, loss, {m->w}, &g).ok());
  StatusOr<TrainOp> t =
      BuildOptimizer(root, "opt", o, {{m->w, DataType::kFloat64, PartialShape({3}), g[0]}});
  EXPECT_TRUE(t.ok()) << t.status().ToString();
  if (!t.ok()) return nullptr;
  m->train = *t;
  SessionOptions so;
  so.devices = Pool();
  auto s = Session::Create(root.graph_def(), so);
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  m->session = std::move(s).value();
  std::vector<Tensor> out;
  EXPECT_TRUE(m->session->Run({}, {}, {init_w.node, m->train.init}, &out).ok());
  return m;
}

std::vector<double> Values(Model& m, const std::string& node) {
  std::vector<Tensor> out;
  EXPECT_TRUE(m.session->Run({}, {node}, {}, &out).ok());
  return std::vector<double>(out[0].data<double>(), out[0].data<double>() + out[0].num_elements());
}

// Runs `steps` steps and compares w after each with `reference`, which
// updates its own copy given the gradient and the (1-based) step.
void Compare(const OptimizerOptions& o, int steps,
             const std::function<void(std::vector<double>& w, const std::vector<double>& g,
                                      int t)>& reference,
             const char* what) {
  std::unique_ptr<Model> m = Build(o);
  ASSERT_NE(m, nullptr);
  std::vector<double> w = kStart;
  for (int t = 1; t <= steps; ++t) {
    std::vector<double> g(3);
    for (int i = 0; i < 3; ++i) g[i] = kC[i] + w[i];
    reference(w, g, t);
    std::vector<Tensor> out;
    ASSERT_TRUE(m->session->Run({}, {}, {m->train.train}, &out).ok());
    std::vector<double> got = Values(*m, "w");
    for (int i = 0; i < 3; ++i) {
      EXPECT_NEAR(got[i], w[i], 1e-12 * std::max(1.0, std::abs(w[i])))
          << what << " step " << t << " element " << i;
    }
  }
  std::vector<Tensor> out;
  ASSERT_TRUE(m->session->Run({}, {m->train.global_step}, {}, &out).ok());
  EXPECT_EQ(out[0].scalar<int64_t>(), steps) << what;
}

TEST(Optimizers, SgdMomentumAndNesterov) {
  OptimizerOptions sgd;
  sgd.learning_rate = 0.1;
  Compare(sgd, 5, [](auto& w, auto& g, int) {
    for (int i = 0; i < 3; ++i) w[i] -= 0.1 * g[i];
  }, "sgd");

  for (bool nesterov : {false, true}) {
    OptimizerOptions o;
    o.kind = K::kMomentum;
    o.learning_rate = 0.05;
    o.momentum = 0.8;
    o.nesterov = nesterov;
    std::vector<double> accum(3, 0.0);
    Compare(o, 6, [&](auto& w, auto& g, int) {
      for (int i = 0; i < 3; ++i) {
        accum[i] = 0.8 * accum[i] + g[i];
        w[i] -= 0.05 * (nesterov ? g[i] + 0.8 * accum[i] : accum[i]);
      }
    }, nesterov ? "nesterov" : "momentum");
  }
}

TEST(Optimizers, Adam) {
  OptimizerOptions o;
  o.kind = K::kAdam;
  o.learning_rate = 0.01;
  o.beta1 = 0.8;
  o.beta2 = 0.95;
  o.epsilon = 1e-6;
  std::vector<double> m(3, 0.0), v(3, 0.0);
  Compare(o, 6, [&](auto& w, auto& g, int t) {
    for (int i = 0; i < 3; ++i) {
      m[i] = 0.8 * m[i] + 0.2 * g[i];
      v[i] = 0.95 * v[i] + 0.05 * g[i] * g[i];
      double mh = m[i] / (1 - std::pow(0.8, t)), vh = v[i] / (1 - std::pow(0.95, t));
      w[i] -= 0.01 * mh / (std::sqrt(vh) + 1e-6);
    }
  }, "adam");
}

TEST(Optimizers, AdaGradAndRmsProp) {
  OptimizerOptions ada;
  ada.kind = K::kAdaGrad;
  ada.learning_rate = 0.3;
  ada.initial_accumulator = 0.1;
  ada.epsilon = 1e-7;
  std::vector<double> acc(3, 0.1);
  Compare(ada, 6, [&](auto& w, auto& g, int) {
    for (int i = 0; i < 3; ++i) {
      acc[i] += g[i] * g[i];
      w[i] -= 0.3 * g[i] / (std::sqrt(acc[i]) + 1e-7);
    }
  }, "adagrad");

  for (double momentum : {0.0, 0.5}) {
    OptimizerOptions o;
    o.kind = K::kRmsProp;
    o.learning_rate = 0.02;
    o.rho = 0.9;
    o.momentum = momentum;
    o.epsilon = 1e-8;
    std::vector<double> ms(3, 0.0), mom(3, 0.0);
    Compare(o, 6, [&](auto& w, auto& g, int) {
      for (int i = 0; i < 3; ++i) {
        ms[i] = 0.9 * ms[i] + 0.1 * g[i] * g[i];
        double step = 0.02 * g[i] / std::sqrt(ms[i] + 1e-8);
        mom[i] = momentum * mom[i] + step;
        w[i] -= momentum > 0 ? mom[i] : step;
      }
    }, momentum > 0 ? "rmsprop+momentum" : "rmsprop");
  }
}

TEST(Optimizers, LearningRateSchedulesFollowTheGlobalStep) {
  auto check = [](LearningRateSchedule sc, const std::function<double(int)>& want,
                  const char* what) {
    OptimizerOptions o;
    o.learning_rate = 0.2;
    o.schedule = sc;
    std::unique_ptr<Model> m = Build(o);
    ASSERT_NE(m, nullptr);
    for (int step = 0; step <= 12; ++step) {
      std::vector<Tensor> out;
      ASSERT_TRUE(m->session->Run({}, {m->train.learning_rate.name()}, {}, &out).ok());
      EXPECT_NEAR(out[0].scalar<double>(), want(step), 1e-12) << what << " at step " << step;
      ASSERT_TRUE(m->session->Run({}, {}, {m->train.train}, &out).ok());
    }
  };
  LearningRateSchedule exp;
  exp.kind = LearningRateSchedule::Kind::kExponentialDecay;
  exp.decay_steps = 4;
  exp.decay_rate = 0.5;
  check(exp, [](int s) { return 0.2 * std::pow(0.5, s / 4.0); }, "exponential");
  exp.staircase = true;
  check(exp, [](int s) { return 0.2 * std::pow(0.5, std::floor(s / 4.0)); }, "staircase");
  LearningRateSchedule cos;
  cos.kind = LearningRateSchedule::Kind::kCosineDecay;
  cos.decay_steps = 10;
  cos.alpha = 0.1;
  check(cos, [](int s) {
    double f = std::min(s, 10) / 10.0;
    return 0.2 * ((1 - 0.1) * 0.5 * (1 + std::cos(M_PI * f)) + 0.1);
  }, "cosine (constant after decay_steps)");
}

TEST(Optimizers, ClippingByGlobalNorm) {
  for (double clip : {0.5, 100.0}) {  // clips; leaves alone
    OptimizerOptions o;
    o.learning_rate = 0.1;
    o.clip_global_norm = clip;
    Compare(o, 3, [&](auto& w, auto& g, int) {
      double norm = std::sqrt(g[0] * g[0] + g[1] * g[1] + g[2] * g[2]);
      double f = clip / std::max(norm, clip);
      for (int i = 0; i < 3; ++i) w[i] -= 0.1 * g[i] * f;
    }, clip < 1 ? "clipped" : "not clipped");
  }
}

// Embedding rows through Gather: SGD updates only the rows used (a scatter);
// Adam densifies and matches the same model written with a dense gradient.
TEST(Optimizers, SparseGatherGradients) {
  for (K kind : {K::kSgd, K::kAdam}) {
    std::vector<std::vector<double>> finals;
    for (bool sparse : {true, false}) {
      Scope root;
      Output e = ops::Variable(root.WithOpName("e"), TensorShape({5, 2}), DataType::kFloat64);
      Tensor start(DataType::kFloat64, TensorShape({5, 2}));
      for (int i = 0; i < 10; ++i) start.data<double>()[i] = 0.1 * i - 0.3;
      Output init = ops::Assign(root.WithOpName("e/init"), e, ops::Const(root, start));
      Output ids = ops::Const(root, Tensor::FromVector<int32_t>({3, 1, 3}));
      // Dense form: one-hot rows times the table, the same function of e.
      Tensor onehot(DataType::kFloat64, TensorShape({3, 5}));
      for (int i = 0; i < 15; ++i) onehot.data<double>()[i] = 0;
      onehot.data<double>()[0 * 5 + 3] = onehot.data<double>()[1 * 5 + 1] = 1;
      onehot.data<double>()[2 * 5 + 3] = 1;
      Output rows = sparse ? ops::Generic(root, "Gather", {e, ids})[0]
                           : ops::MatMul(root, ops::Const(root, onehot), e);
      Output loss = ops::Sum(root.WithOpName("loss"), ops::Square(root, rows), std::vector<int32_t>{});
      std::vector<Gradient> g;
      ASSERT_TRUE(AddGradients(root, loss, {e}, &g).ok());
      EXPECT_EQ(g[0].is_sparse, sparse);
      OptimizerOptions o;
      o.kind = kind;
      o.learning_rate = 0.1;
      StatusOr<TrainOp> t = BuildOptimizer(root, "opt", o, {{e, DataType::kFloat64, PartialShape({5, 2}), g[0]}});
      ASSERT_TRUE(t.ok()) << t.status().ToString();
      SessionOptions so;
      so.devices = Pool();
      auto s = Session::Create(root.graph_def(), so);
      ASSERT_TRUE(s.ok()) << s.status().ToString();
      std::vector<Tensor> out;
      ASSERT_TRUE((*s)->Run({}, {}, {init.node, t->init}, &out).ok());
      for (int k = 0; k < 4; ++k) ASSERT_TRUE((*s)->Run({}, {}, {t->train}, &out).ok());
      ASSERT_TRUE((*s)->Run({}, {"e"}, {}, &out).ok());
      finals.emplace_back(out[0].data<double>(), out[0].data<double>() + 10);
    }
    for (int i = 0; i < 10; ++i) {
      EXPECT_NEAR(finals[0][i], finals[1][i], 1e-12) << "element " << i;
      // Rows 0, 2 and 4 are never gathered: they keep their start values.
      if (i / 2 != 1 && i / 2 != 3) {
        EXPECT_EQ(finals[0][i], 0.1 * i - 0.3) << i;
      }
    }
  }
}

// An embedding model: rows of a [6, 3] table through Gather, a [3, 1] dense
// layer, a squared error; ids fed per step. Trained by BuildOptimizer with
// the sparse updates (SparseApply*) or with the gradient densified.
struct EmbeddingRun {
  std::vector<double> table, w;
  bool sparse_gradient = false;
};

EmbeddingRun TrainEmbedding(K kind, bool sparse_updates,
                            const std::vector<std::vector<int32_t>>& steps, double clip = 0) {
  Scope root;
  Output e = ops::Variable(root.WithOpName("e"), TensorShape({6, 3}), DataType::kFloat64);
  Output w = ops::Variable(root.WithOpName("w"), TensorShape({3, 1}), DataType::kFloat64);
  Tensor e0(DataType::kFloat64, TensorShape({6, 3}));
  for (int i = 0; i < 18; ++i) e0.data<double>()[i] = 0.1 * ((i * 7) % 11) - 0.4;
  Output ie = ops::Assign(root.WithOpName("e/init"), e, ops::Const(root, e0));
  Output iw = ops::Assign(root.WithOpName("w/init"), w,
                          ops::Const(root, Tensor::FromVector<double>({0.5, -0.3, 0.8},
                                                                      TensorShape({3, 1}))));
  Output ids = ops::Placeholder(root.WithOpName("ids"), DataType::kInt32);
  Output rows = ops::Generic(root, "Gather", {e, ids})[0];
  Output pred = ops::MatMul(root, rows, w);
  Output loss = ops::Sum(root.WithOpName("loss"),
                         ops::Square(root, ops::Sub(root, pred, ops::Const(root, 1.0))),
                         std::vector<int32_t>{});
  std::vector<Gradient> g;
  EXPECT_TRUE(AddGradients(root, loss, {e, w}, &g).ok());
  OptimizerOptions o;
  o.kind = kind;
  o.learning_rate = 0.05;
  o.sparse_updates = sparse_updates;
  o.clip_global_norm = clip;
  if (kind == K::kRmsProp) o.momentum = 0.5;
  StatusOr<TrainOp> t = BuildOptimizer(root, "opt", o,
                                       {{e, DataType::kFloat64, PartialShape({6, 3}), g[0]},
                                        {w, DataType::kFloat64, PartialShape({3, 1}), g[1]}});
  EXPECT_TRUE(t.ok()) << t.status().ToString();
  EmbeddingRun r;
  r.sparse_gradient = g[0].is_sparse;
  if (!t.ok()) return r;
  SessionOptions so;
  so.devices = Pool();
  auto s = Session::Create(root.graph_def(), so);
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  if (!s.ok()) return r;
  std::vector<Tensor> out;
  EXPECT_TRUE((*s)->Run({}, {}, {ie.node, iw.node, t->init}, &out).ok());
  for (const auto& step : steps) {
    Status st = (*s)->Run({{"ids", Tensor::FromVector<int32_t>(step)}}, {}, {t->train}, &out);
    EXPECT_TRUE(st.ok()) << st.ToString();
  }
  EXPECT_TRUE((*s)->Run({}, {"e", "w"}, {}, &out).ok());
  r.table.assign(out[0].data<double>(), out[0].data<double>() + 18);
  r.w.assign(out[1].data<double>(), out[1].data<double>() + 3);
  return r;
}

// Rows change from step to step (with duplicates); rows 4 and 5 are never used.
const std::vector<std::vector<int32_t>> kVaryingIds = {{0, 1, 1}, {2, 3, 0}, {1, 1, 1, 3}, {2}};

// SGD and AdaGrad leave unused rows alone in the dense form too: the sparse
// updates give the dense numbers bit for bit, whatever rows each step uses.
TEST(Optimizers, SparseSgdAndAdagradEqualTheDensePathBitForBit) {
  for (K kind : {K::kSgd, K::kAdaGrad}) {
    EmbeddingRun sparse = TrainEmbedding(kind, true, kVaryingIds);
    EmbeddingRun dense = TrainEmbedding(kind, false, kVaryingIds);
    EXPECT_TRUE(sparse.sparse_gradient);
    EXPECT_EQ(sparse.table, dense.table) << int(kind);
    EXPECT_EQ(sparse.w, dense.w) << int(kind);
    for (int i = 12; i < 18; ++i) {
      EXPECT_EQ(sparse.table[size_t(i)], 0.1 * ((i * 7) % 11) - 0.4) << "unused row moved";
    }
  }
}

// Lazy Momentum, Adam and RMSProp: with the same rows in every step they are
// the dense optimizer; when a row sits a step out, it does not move in that
// step (the dense optimizer's slots would move it).
TEST(Optimizers, LazySparseMomentumAdamRmsProp) {
  const std::vector<std::vector<int32_t>> same = {{0, 2, 2}, {2, 0, 0}, {0, 2}};
  for (K kind : {K::kMomentum, K::kAdam, K::kRmsProp}) {
    EmbeddingRun sparse = TrainEmbedding(kind, true, same);
    EmbeddingRun dense = TrainEmbedding(kind, false, same);
    for (size_t i = 0; i < 18; ++i) {
      EXPECT_NEAR(sparse.table[i], dense.table[i], 1e-13) << int(kind) << " element " << i;
    }
    for (size_t i = 0; i < 3; ++i) EXPECT_NEAR(sparse.w[i], dense.w[i], 1e-13) << int(kind);
    // Row 1 is used in step 1 only; afterwards it stays where step 1 left it.
    EmbeddingRun one = TrainEmbedding(kind, true, {{1, 3}});
    EmbeddingRun three = TrainEmbedding(kind, true, {{1, 3}, {3}, {3, 0}});
    EmbeddingRun dense3 = TrainEmbedding(kind, false, {{1, 3}, {3}, {3, 0}});
    for (size_t c = 3; c < 6; ++c) {
      EXPECT_EQ(three.table[c], one.table[c]) << int(kind) << ": a lazy row moved";
      EXPECT_NE(dense3.table[c], one.table[c]) << int(kind) << ": the dense row should move";
    }
  }
}

// Clipping by global norm: duplicates are summed before the norm, so the
// sparse gradient is clipped exactly as its dense form.
TEST(Optimizers, ClippingASparseGradientUsesTheNormOfTheSummedRows) {
  // Row 1 three times: the norm of the rows (sqrt 3 |g|) is not the dense one (3 |g|).
  const std::vector<std::vector<int32_t>> ids = {{1, 1, 1, 2}, {1, 2, 2}};
  for (K kind : {K::kSgd, K::kAdaGrad}) {
    EmbeddingRun sparse = TrainEmbedding(kind, true, ids, 0.1);
    EmbeddingRun dense = TrainEmbedding(kind, false, ids, 0.1);
    EmbeddingRun unclipped = TrainEmbedding(kind, true, ids);
    for (size_t i = 0; i < 18; ++i) {
      EXPECT_NEAR(sparse.table[i], dense.table[i], 1e-14) << int(kind) << " element " << i;
    }
    for (size_t i = 0; i < 3; ++i) EXPECT_NEAR(sparse.w[i], dense.w[i], 1e-14) << int(kind);
    EXPECT_NE(sparse.table[3], unclipped.table[3]);  // the clip did bite
  }
}

TEST(Optimizers, BuiltTwiceSameNumbersBitForBit) {
  for (K kind : {K::kSgd, K::kMomentum, K::kAdam, K::kAdaGrad, K::kRmsProp}) {
    OptimizerOptions o;
    o.kind = kind;
    o.learning_rate = 0.01;
    o.clip_global_norm = 1.0;
    o.schedule.kind = LearningRateSchedule::Kind::kCosineDecay;
    std::vector<std::vector<double>> runs;
    for (int r = 0; r < 2; ++r) {
      std::unique_ptr<Model> m = Build(o);
      ASSERT_NE(m, nullptr);
      std::vector<Tensor> out;
      for (int k = 0; k < 20; ++k) ASSERT_TRUE(m->session->Run({}, {}, {m->train.train}, &out).ok());
      runs.push_back(Values(*m, "w"));
    }
    EXPECT_EQ(std::memcmp(runs[0].data(), runs[1].data(), 3 * sizeof(double)), 0)
        << int(kind);
  }
}

TEST(Optimizers, BadOptionsNameTheField) {
  OptimizerOptions o;
  o.learning_rate = 0;
  Status s = ValidateOptimizerOptions(o);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("optimizer.learning_rate"), std::string::npos) << s.ToString();
  EXPECT_FALSE(OptimizerKindFromString("adamw").ok());
  EXPECT_EQ(OptimizerKindFromString("rmsprop").value(), K::kRmsProp);
}

}  // namespace
}  // namespace flowstate

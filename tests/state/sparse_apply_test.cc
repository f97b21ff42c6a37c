// The SparseApply* kernels (state/sparse_apply_kernels.cc): each against the
// dense update of the same optimizer on the rows it touches -- the dense
// graph ops (AssignSub, Mul, ...) as graph/optimizers.cc emits them, or
// ApplyAdam -- fed with the densified gradient; the rows it does not touch
// unchanged; duplicate indices summed first; an index out of range refused
// naming the node and the first bad index, with nothing written.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "devices/device_pool.h"
#include "graph/op_builders.h"
#include "graph/scope.h"
#include "scheduler/session.h"

namespace flowstate {
namespace {

constexpr int64_t kRows = 7, kCols = 3;

DevicePool* Pool() {
  static DevicePool* p = [] {
    DevicePoolOptions o;
    o.intra_op_threads = 2;
    return DevicePool::Create(o).value().release();
  }();
  return p;
}

using Table = std::vector<double>;  // kRows x kCols

Table RandomTable(uint32_t seed, double lo, double hi) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> u(lo, hi);
  Table t(size_t(kRows * kCols));
  for (double& x : t) x = u(rng);
  return t;
}

Tensor ToTensor(const Table& t) {
  return Tensor::FromVector<double>(t, TensorShape({kRows, kCols}));
}


// Builds var and slots (start values: var from seed 1, slot k from seed
// 2 + k, all in [0.1, 1) so that accumulators are positive), then
// `update(root, refs)` and runs it once; returns var and the slots.
std::vector<Table> RunUpdate(const std::vector<std::string>& names,
                       const std::function<std::string(const Scope&, const std::vector<Output>&)>& update,
                       Status* status = nullptr) {
  Scope root;
  std::vector<Output> refs;
  std::vector<std::string> inits;
  for (size_t k = 0; k < names.size(); ++k) {
    Output v = ops::Variable(root.WithOpName(names[k]), TensorShape({kRows, kCols}),
                             DataType::kFloat64);
    Table start = k == 0 ? RandomTable(1, -1, 1) : RandomTable(uint32_t(2 + k), 0.1, 1);
    inits.push_back(ops::Assign(root.WithOpName(names[k] + "/init"), v,
                                ops::Const(root, ToTensor(start))).node);
    refs.push_back(v);
  }
  std::string op = update(root, refs);
  SessionOptions so;
  so.devices = Pool();
  auto s = Session::Create(root.graph_def(), so);
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  std::vector<Tensor> out;
  EXPECT_TRUE((*s)->Run({}, {}, inits, &out).ok());
  Status st = (*s)->Run({}, {}, {op}, &out);
  if (status != nullptr) {
    *status = st;
  } else {
    EXPECT_TRUE(st.ok()) << st.ToString();
  }
  EXPECT_TRUE((*s)->Run({}, names, {}, &out).ok());
  std::vector<Table> r;
  for (const Tensor& t : out) r.emplace_back(t.data<double>(), t.data<double>() + t.num_elements());
  return r;
}

const std::vector<int32_t> kIndices = {5, 1, 5, 0, 5};  // row 5 three times
Tensor Grad() {
  std::mt19937 rng(9);
  std::uniform_real_distribution<double> u(-1, 1);
  std::vector<double> g(kIndices.size() * size_t(kCols));
  for (double& x : g) x = u(rng);
  return Tensor::FromVector<double>(g, TensorShape({int64_t(kIndices.size()), kCols}));
}

// The dense gradient: the rows summed into zeros (as the densifying path).
Output DenseGrad(const Scope& s) {
  return ops::Generic(s, "UnsortedSegmentSum",
                      {ops::Const(s, Grad()), ops::Const(s, Tensor::FromVector<int32_t>(kIndices)),
                       ops::Const(s, int32_t(kRows))})[0];
}

bool Touched(int64_t row) {
  for (int32_t i : kIndices) {
    if (i == row) return true;
  }
  return false;
}

// Sparse against dense: equal (bit for bit unless `tol` > 0) on the touched
// rows; the sparse one's untouched rows keep their start values.
void ExpectRowsMatch(const std::vector<Table>& sparse, const std::vector<Table>& dense,
                     const std::vector<std::string>& names, double tol) {
  ASSERT_EQ(sparse.size(), dense.size());
  for (size_t k = 0; k < sparse.size(); ++k) {
    Table start = k == 0 ? RandomTable(1, -1, 1) : RandomTable(uint32_t(2 + k), 0.1, 1);
    for (int64_t r = 0; r < kRows; ++r) {
      for (int64_t c = 0; c < kCols; ++c) {
        const size_t i = size_t(r * kCols + c);
        if (Touched(r)) {
          if (tol == 0) {
            EXPECT_EQ(sparse[k][i], dense[k][i]) << names[k] << " row " << r << " col " << c;
          } else {
            EXPECT_NEAR(sparse[k][i], dense[k][i], tol * std::max(1.0, std::abs(dense[k][i])))
                << names[k] << " row " << r << " col " << c;
          }
          EXPECT_NE(sparse[k][i], start[i]) << names[k] << " row " << r << " did not move";
        } else {
          EXPECT_EQ(sparse[k][i], start[i]) << names[k] << " untouched row " << r << " changed";
        }
      }
    }
  }
}

std::string Sparse(const Scope& root, const std::string& op, const std::vector<Output>& refs,
                   const std::vector<double>& scalars, AttrMap attrs = {}) {
  std::vector<Output> in = refs;
  for (double x : scalars) in.push_back(ops::Const(root, x));
  in.push_back(ops::Const(root, Grad()));
  in.push_back(ops::Const(root, Tensor::FromVector<int32_t>(kIndices)));
  return ops::Generic(root.WithOpName("update"), op, in, std::move(attrs))[0].node;
}

TEST(SparseApply, GradientDescentMatchesTheDenseUpdateBitForBit) {
  const double lr = 0.3;
  std::vector<std::string> names = {"var"};
  auto sparse = RunUpdate(names, [&](const Scope& s, const std::vector<Output>& r) {
    return Sparse(s, "SparseApplyGradientDescent", r, {lr});
  });
  auto dense = RunUpdate(names, [&](const Scope& s, const std::vector<Output>& r) {
    return ops::AssignSub(s.WithOpName("update"), r[0], ops::Mul(s, DenseGrad(s), ops::Const(s, lr))).node;
  });
  ExpectRowsMatch(sparse, dense, names, 0);
}

TEST(SparseApply, MomentumAndNesterovMatchTheDenseUpdateBitForBit) {
  for (bool nesterov : {false, true}) {
    const double lr = 0.3, mom = 0.9;
    std::vector<std::string> names = {"var", "accum"};
    auto sparse = RunUpdate(names, [&](const Scope& s, const std::vector<Output>& r) {
      return Sparse(s, "SparseApplyMomentum", r, {lr, mom}, {{"use_nesterov", AttrValue(nesterov)}});
    });
    auto dense = RunUpdate(names, [&](const Scope& s, const std::vector<Output>& r) {
      Output g = DenseGrad(s), m = ops::Const(s, mom);
      Output a = ops::Assign(s, r[1], ops::Add(s, ops::Mul(s, r[1], m), g));
      Output dir = nesterov ? ops::Add(s, g, ops::Mul(s, a, m)) : a;
      return ops::AssignSub(s.WithOpName("update"), r[0], ops::Mul(s, dir, ops::Const(s, lr))).node;
    });
    // Dense momentum also decays the untouched rows' accumulators and moves
    // them; the lazy sparse one leaves them (checked by ExpectRowsMatch).
    ExpectRowsMatch(sparse, dense, names, 0);
  }
}

TEST(SparseApply, AdagradMatchesTheDenseUpdateBitForBit) {
  const double lr = 0.3, eps = 1e-7;
  std::vector<std::string> names = {"var", "accum"};
  auto sparse = RunUpdate(names, [&](const Scope& s, const std::vector<Output>& r) {
    return Sparse(s, "SparseApplyAdagrad", r, {lr, eps});
  });
  auto dense = RunUpdate(names, [&](const Scope& s, const std::vector<Output>& r) {
    Output g = DenseGrad(s);
    Output a = ops::AssignAdd(s, r[1], ops::Square(s, g));
    Output denom = ops::Add(s, ops::Sqrt(s, a), ops::Const(s, eps));
    return ops::AssignSub(s.WithOpName("update"), r[0],
                          ops::Div(s, ops::Mul(s, g, ops::Const(s, lr)), denom)).node;
  });
  ExpectRowsMatch(sparse, dense, names, 0);
  // Dense AdaGrad leaves the untouched rows alone too: the same tables.
  EXPECT_EQ(sparse, dense);
}

TEST(SparseApply, RmsPropWithAndWithoutMomentumMatchTheDenseUpdate) {
  const double lr = 0.01, rho = 0.9, eps = 1e-8;
  for (double momentum : {0.0, 0.5}) {
    std::vector<std::string> names = {"var", "ms"};
    if (momentum > 0) names.push_back("mom");
    auto sparse = RunUpdate(names, [&](const Scope& s, const std::vector<Output>& r) {
      return momentum > 0
                 ? Sparse(s, "SparseApplyRMSProp", r, {lr, rho, momentum, eps})
                 : Sparse(s, "SparseApplyRMSPropNoMomentum", r, {lr, rho, eps});
    });
    auto dense = RunUpdate(names, [&](const Scope& s, const std::vector<Output>& r) {
      Output g = DenseGrad(s);
      Output ms = ops::Assign(s, r[1], ops::Add(s, ops::Mul(s, r[1], ops::Const(s, rho)),
                                                ops::Mul(s, ops::Square(s, g), ops::Const(s, 1 - rho))));
      Output step = ops::Div(s, ops::Mul(s, g, ops::Const(s, lr)),
                             ops::Sqrt(s, ops::Add(s, ms, ops::Const(s, eps))));
      if (momentum > 0) {
        step = ops::Assign(s, r[2], ops::Add(s, ops::Mul(s, r[2], ops::Const(s, momentum)), step));
      }
      return ops::AssignSub(s.WithOpName("update"), r[0], step).node;
    });
    ExpectRowsMatch(sparse, dense, names, 0);
  }
}

TEST(SparseApply, LazyAdamMatchesApplyAdamOnTheTouchedRows) {
  const double lr = 0.01, b1 = 0.9, b2 = 0.999, eps = 1e-8, t = 3;
  std::vector<std::string> names = {"var", "m", "v"};
  auto sparse = RunUpdate(names, [&](const Scope& s, const std::vector<Output>& r) {
    return Sparse(s, "SparseApplyAdam", r, {lr, b1, b2, eps, t});
  });
  auto dense = RunUpdate(names, [&](const Scope& s, const std::vector<Output>& r) {
    std::vector<Output> in = r;
    for (double x : {lr, b1, b2, eps, t}) in.push_back(ops::Const(s, x));
    in.push_back(DenseGrad(s));
    return ops::Generic(s.WithOpName("update"), "ApplyAdam", in)[0].node;
  });
  // The same element loop; ApplyAdam's file may fuse multiply-adds, this
  // one does not: equal to a few ulps.
  ExpectRowsMatch(sparse, dense, names, 1e-14);
}

TEST(SparseApply, Float32WithInt64IndicesSumsDuplicatesFirst) {
  // var [4, 2]; rows 2 (twice) and 0: SGD with the summed rows.
  Scope root;
  Output v = ops::Variable(root.WithOpName("v"), TensorShape({4, 2}), DataType::kFloat32);
  Output init = ops::Assign(root.WithOpName("v/init"), v,
                            ops::Const(root, Tensor::FromVector<float>({1, 2, 3, 4, 5, 6, 7, 8},
                                                                       TensorShape({4, 2}))));
  Output g = ops::Const(root, Tensor::FromVector<float>({0.5f, 1, 0.25f, 2, 4, 8}, TensorShape({3, 2})));
  Output idx = ops::Const(root, Tensor::FromVector<int64_t>({2, 0, 2}));
  std::string up = ops::Generic(root.WithOpName("up"), "SparseApplyGradientDescent",
                                {v, ops::Const(root, 0.5f), g, idx})[0].node;
  SessionOptions so;
  so.devices = Pool();
  auto s = Session::Create(root.graph_def(), so).value();
  std::vector<Tensor> out;
  ASSERT_TRUE(s->Run({}, {}, {init.node}, &out).ok());
  ASSERT_TRUE(s->Run({}, {}, {up}, &out).ok());
  ASSERT_TRUE(s->Run({}, {"v"}, {}, &out).ok());
  const float* w = out[0].data<float>();
  EXPECT_EQ(w[0], 1 - 0.5f * 0.25f);
  EXPECT_EQ(w[1], 2 - 0.5f * 2);
  EXPECT_EQ(w[2], 3);
  EXPECT_EQ(w[3], 4);
  EXPECT_EQ(w[4], 5 - 0.5f * (0.5f + 4));
  EXPECT_EQ(w[5], 6 - 0.5f * (1 + 8));
  EXPECT_EQ(w[6], 7);
  EXPECT_EQ(w[7], 8);
}

TEST(SparseApply, AnIndexOutOfRangeNamesTheNodeAndTheIndexAndWritesNothing) {
  for (int32_t bad : {int32_t(kRows), -1}) {
    for (const char* op : {"SparseApplyGradientDescent", "SparseApplyAdagrad"}) {
      std::vector<std::string> names = {"var"};
      std::vector<double> scalars = {0.5};
      if (std::string(op) == "SparseApplyAdagrad") {
        names.push_back("accum");
        scalars.push_back(1e-7);
      }
      Status st;
      auto after = RunUpdate(names, [&](const Scope& s, const std::vector<Output>& r) {
        std::vector<Output> in = r;
        for (double x : scalars) in.push_back(ops::Const(s, x));
        in.push_back(ops::Const(s, Tensor::FromVector<double>(std::vector<double>(4 * kCols, 1.0),
                                                              TensorShape({4, kCols}))));
        // indices[0] is fine (it would be written first); indices[2] is bad.
        in.push_back(ops::Const(s, Tensor::FromVector<int32_t>({0, 1, bad, kRows + 5})));
        return ops::Generic(s.WithOpName("embedding/update"), op, in)[0].node;
      }, &st);
      EXPECT_EQ(st.code(), Code::kInvalidArgument) << st.ToString();
      EXPECT_EQ(st.node(), "embedding/update") << st.ToString();
      EXPECT_NE(st.message().find("'embedding/update'"), std::string::npos) << st.ToString();
      EXPECT_NE(st.message().find("indices[2] = " + std::to_string(bad)), std::string::npos)
          << st.ToString();
      EXPECT_EQ(after[0], RandomTable(1, -1, 1)) << op << ": var changed";
      if (after.size() > 1) {
        EXPECT_EQ(after[1], RandomTable(3, 0.1, 1)) << op << ": slot changed";
      }
    }
  }
}

TEST(SparseApply, AVariableGivenAsItsOwnSlotIsRefused) {
  Status st;
  RunUpdate({"var"}, [&](const Scope& s, const std::vector<Output>& r) {
    return ops::Generic(s.WithOpName("update"), "SparseApplyAdagrad",
                        {r[0], r[0], ops::Const(s, 0.5), ops::Const(s, 1e-7),
                         ops::Const(s, Tensor::FromVector<double>({1, 2, 3}, TensorShape({1, 3}))),
                         ops::Const(s, Tensor::FromVector<int32_t>({0}))})[0].node;
  }, &st);
  EXPECT_EQ(st.code(), Code::kInvalidArgument) << st.ToString();
  EXPECT_NE(st.message().find("given twice"), std::string::npos) << st.ToString();
}

TEST(SparseApply, AGradientOfTheWrongShapeIsRefused) {
  Scope root;
  Output v = ops::Variable(root.WithOpName("v"), TensorShape({4, 2}), DataType::kFloat64);
  Output init = ops::Assign(root.WithOpName("v/init"), v,
                            ops::Const(root, Tensor::FromVector<double>(std::vector<double>(8, 1.0),
                                                                        TensorShape({4, 2}))));
  Output g = ops::Placeholder(root.WithOpName("g"), DataType::kFloat64);
  std::string up = ops::Generic(root.WithOpName("update"), "SparseApplyGradientDescent",
                                {v, ops::Const(root, 0.5), g,
                                 ops::Const(root, Tensor::FromVector<int32_t>({0}))})[0].node;
  SessionOptions so;
  so.devices = Pool();
  auto s = Session::Create(root.graph_def(), so).value();
  std::vector<Tensor> out;
  ASSERT_TRUE(s->Run({}, {}, {init.node}, &out).ok());
  Status st = s->Run({{"g", Tensor::FromVector<double>({1, 2, 3}, TensorShape({1, 3}))}}, {}, {up},
                     &out);
  EXPECT_EQ(st.code(), Code::kInvalidArgument) << st.ToString();
  EXPECT_EQ(st.node(), "update") << st.ToString();
  EXPECT_NE(st.message().find("[len(indices)] + var.shape[1:] = [1, 2]"), std::string::npos)
      << st.ToString();
}

}  // namespace
}  // namespace flowstate

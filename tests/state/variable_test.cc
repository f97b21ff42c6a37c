#include "state/variable.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

#include "graph/op_builders.h"
#include "graph/scope.h"
#include "scheduler/session.h"
#include "state/resource_mgr.h"

namespace flowstate {
namespace {

TEST(Variable, ReadBeforeAssignIsFailedPrecondition) {
  Variable v("w", DataType::kFloat32, PartialShape({2}));
  StatusOr<Tensor> r = v.Read();
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kFailedPrecondition);
  EXPECT_NE(r.status().message().find("'w'"), std::string::npos);
  EXPECT_FALSE(v.IsInitialized());
}

TEST(Variable, AssignValidatesDtypeAndShape) {
  Variable v("w", DataType::kFloat32, PartialShape({-1, 2}));
  EXPECT_EQ(v.Assign(Tensor::FromVector<int32_t>({1, 2}, TensorShape({1, 2}))).code(),
            Code::kInvalidArgument);
  EXPECT_EQ(v.Assign(Tensor::FromVector<float>({1, 2, 3})).code(), Code::kInvalidArgument);
  EXPECT_TRUE(v.Assign(Tensor::FromVector<float>({1, 2}, TensorShape({1, 2}))).ok());
  EXPECT_TRUE(v.Assign(Tensor::FromVector<float>({1, 2, 3, 4}, TensorShape({2, 2}))).ok());
  EXPECT_EQ(v.Read()->shape(), TensorShape({2, 2}));
}

TEST(Variable, ReadersKeepTheirSnapshotWhenAWriterCopiesOnWrite) {
  Variable v("w", DataType::kFloat32, PartialShape({3}));
  ASSERT_TRUE(v.Assign(Tensor::FromVector<float>({1, 2, 3})).ok());
  Tensor held = *v.Read();
  ASSERT_TRUE(v.Mutate([](Tensor* t) {
                 t->data<float>()[0] = 100;
                 return Status();
               }).ok());
  EXPECT_EQ(held.data<float>()[0], 1.0f);
  EXPECT_EQ(v.Read()->data<float>()[0], 100.0f);
  // With no reader holding it, the update is in place.
  const void* before = v.Read()->raw_data();
  ASSERT_TRUE(v.Mutate([](Tensor* t) {
                 t->data<float>()[1] = 7;
                 return Status();
               }).ok());
  EXPECT_EQ(v.Read()->raw_data(), before);
  // Assign never aliases the caller's tensor.
  Tensor src = Tensor::FromVector<float>({4, 5, 6});
  ASSERT_TRUE(v.Assign(src).ok());
  src.data<float>()[0] = -1;
  EXPECT_EQ(v.Read()->data<float>()[0], 4.0f);
}

TEST(ResourceMgr, LookupCreateDeleteAndTypeChecks) {
  struct Other : ResourceBase {
    std::string DebugString() const override { return "Other"; }
  };
  ResourceMgr rm;
  int made = 0;
  auto make = [&]() -> StatusOr<std::shared_ptr<Variable>> {
    ++made;
    return std::make_shared<Variable>("v", DataType::kFloat32, PartialShape());
  };
  auto a = rm.LookupOrCreate<Variable>("", "v", make);
  auto b = rm.LookupOrCreate<Variable>("default", "v", make);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->get(), b->get());
  EXPECT_EQ(made, 1);
  auto wrong = rm.LookupOrCreate<Other>("", "v", [] {
    return StatusOr<std::shared_ptr<Other>>(std::make_shared<Other>());
  });
  EXPECT_EQ(wrong.status().code(), Code::kInvalidArgument);
  EXPECT_EQ(rm.Lookup<Variable>("c2", "v").status().code(), Code::kNotFound);
  EXPECT_EQ(rm.List().size(), 1u);
  EXPECT_TRUE(rm.Delete("", "v").ok());
  EXPECT_EQ(rm.Delete("", "v").code(), Code::kNotFound);
}

// ---- The variable ops, run through a session ------------------------------

class VariableOps : public ::testing::Test {
 protected:
  void Open(const Scope& root) {
    static DevicePool* pool = [] {
      DevicePoolOptions o;
      o.intra_op_threads = 1;
      return DevicePool::Create(o).value().release();
    }();
    SessionOptions o;
    o.devices = pool;
    o.inter_op_threads = 1;
    auto s = Session::Create(root.graph_def(), o);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    session_ = std::move(s).value();
  }
  Status Run(const std::string& target) {
    std::vector<Tensor> out;
    return session_->Run({}, {}, {target}, &out);
  }
  Tensor Fetch(const std::string& name) {
    std::vector<Tensor> out;
    Status s = session_->Run({}, {name}, {}, &out);
    EXPECT_TRUE(s.ok()) << s.ToString();
    return s.ok() ? out[0] : Tensor();
  }
  std::unique_ptr<Session> session_;
};

template <typename T>
void ScatterCase(DataType idx_type) {
  Scope root;
  Output w = ops::Variable(root.WithOpName("w"), TensorShape({4, 2}), kDataTypeOf<T>);
  ops::Assign(root.WithOpName("init"), w,
              ops::Const(root, Tensor::FromVector<T>({0, 1, 2, 3, 4, 5, 6, 7}, TensorShape({4, 2}))));
  Tensor idx = idx_type == DataType::kInt32 ? Tensor::FromVector<int32_t>({3, 1, 3})
                                            : Tensor::FromVector<int64_t>({3, 1, 3});
  Output i = ops::Const(root.WithOpName("idx"), idx);
  Output upd = ops::Const(root.WithOpName("upd"),
                          Tensor::FromVector<T>({1, 1, 2, 2, 3, 3}, TensorShape({3, 2})));
  ops::ScatterAdd(root.WithOpName("add"), w, i, upd);
  ops::ScatterSub(root.WithOpName("sub"), w, i, upd);
  ops::ScatterUpdate(root.WithOpName("set"), w,
                     ops::Const(root, Tensor::FromVector<int32_t>({0})),
                     ops::Const(root, Tensor::FromVector<T>({9, 9}, TensorShape({1, 2}))));
  ops::ScatterAdd(root.WithOpName("bad"), w, ops::Const(root, Tensor::FromVector<int32_t>({0, 4})),
                  ops::Const(root, Tensor::FromVector<T>({1, 1, 1, 1}, TensorShape({2, 2}))));
  ops::AssignSub(root.WithOpName("dec"), w,
                 ops::Const(root, Tensor::FromVector<T>({0, 0, 0, 0, 0, 0, 1, 1}, TensorShape({4, 2}))));

  DevicePoolOptions po;
  po.intra_op_threads = 1;
  auto pool = DevicePool::Create(po).value();
  SessionOptions o;
  o.devices = pool.get();
  o.inter_op_threads = 1;
  auto s = Session::Create(root.graph_def(), o).value();
  std::vector<Tensor> out;
  ASSERT_TRUE(s->Run({}, {}, {"init"}, &out).ok());
  ASSERT_TRUE(s->Run({}, {}, {"add"}, &out).ok());  // repeated index 3 adds twice
  ASSERT_TRUE(s->Run({}, {"w"}, {}, &out).ok());
  EXPECT_TRUE(TensorsEqual(out[0], Tensor::FromVector<T>({0, 1, 4, 5, 4, 5, 10, 11}, TensorShape({4, 2}))));
  ASSERT_TRUE(s->Run({}, {}, {"sub"}, &out).ok());
  ASSERT_TRUE(s->Run({}, {}, {"set"}, &out).ok());
  ASSERT_TRUE(s->Run({}, {}, {"dec"}, &out).ok());
  ASSERT_TRUE(s->Run({}, {"w"}, {}, &out).ok());
  EXPECT_TRUE(TensorsEqual(out[0], Tensor::FromVector<T>({9, 9, 2, 3, 4, 5, 5, 6}, TensorShape({4, 2}))));
  // An out-of-range index fails naming the node and changes nothing.
  Status bad = s->Run({}, {}, {"bad"}, &out);
  EXPECT_EQ(bad.code(), Code::kInvalidArgument);
  EXPECT_EQ(bad.node(), "bad");
  ASSERT_TRUE(s->Run({}, {"w"}, {}, &out).ok());
  EXPECT_TRUE(TensorsEqual(out[0], Tensor::FromVector<T>({9, 9, 2, 3, 4, 5, 5, 6}, TensorShape({4, 2}))));
}

TEST(VariableOpsScatter, EveryDtypeAndIndexType) {
  for (DataType idx : {DataType::kInt32, DataType::kInt64}) {
    ScatterCase<float>(idx);
    ScatterCase<double>(idx);
    ScatterCase<int32_t>(idx);
    ScatterCase<int64_t>(idx);
    ScatterCase<uint8_t>(idx);
  }
}

TEST_F(VariableOps, AssignWithoutShapeValidationMayReshape) {
  Scope root;
  Output w = ops::Variable(root.WithOpName("w"), PartialShape(), DataType::kFloat32);
  ops::Assign(root.WithOpName("a"), w, ops::Const(root, std::vector<float>{1, 2}), false);
  ops::Assign(root.WithOpName("b"), w, ops::Const(root, std::vector<float>{1, 2, 3}), false);
  Open(root);
  ASSERT_TRUE(Run("a").ok());
  EXPECT_EQ(Fetch("w").shape(), TensorShape({2}));
  ASSERT_TRUE(Run("b").ok());
  EXPECT_EQ(Fetch("w").shape(), TensorShape({3}));
}

TEST_F(VariableOps, AssignOfTheWrongShapeFails) {
  Scope root;
  Output w = ops::Variable(root.WithOpName("w"), PartialShape({2}), DataType::kFloat32);
  ops::Assign(root.WithOpName("a"), w, ops::Const(root, std::vector<float>{1, 2}));
  ops::AssignAdd(root.WithOpName("inc"), w, ops::Const(root, std::vector<float>{1, 2}));
  Open(root);
  EXPECT_EQ(Run("inc").code(), Code::kFailedPrecondition);  // not initialized yet
  ASSERT_TRUE(Run("a").ok());
  ASSERT_TRUE(Run("inc").ok());
  EXPECT_TRUE(TensorsEqual(Fetch("w"), Tensor::FromVector<float>({2, 4})));
}

TEST_F(VariableOps, SameVariableNameWithAnotherDtypeIsRejected) {
  Scope root;
  ops::Variable(root.WithOpName("v1"), PartialShape({2}), DataType::kFloat32, "", "shared");
  ops::Variable(root.WithOpName("v2"), PartialShape({2}), DataType::kInt32, "", "shared");
  Open(root);
  std::vector<Tensor> out;
  ASSERT_TRUE(session_->Run({}, {}, {"v1"}, &out).ok());
  Status s = session_->Run({}, {}, {"v2"}, &out);
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_EQ(s.node(), "v2");
}

// ---- ApplyAdam over a large float32 variable ------------------------------

struct AdamState {
  std::vector<float> w, m, v;
};

// Runs ApplyAdam `steps` times (t = 1, 2, ...) with gradient g on a device
// with `threads` intra-op threads.
AdamState RunApplyAdam(int threads, const AdamState& start, const std::vector<float>& g,
                       int steps) {
  const int64_t n = int64_t(g.size());
  Scope root;
  auto var = [&](const char* name, const std::vector<float>& init) {
    Output x = ops::Variable(root.WithOpName(name), TensorShape({n}), DataType::kFloat32);
    ops::Assign(root.WithOpName(std::string(name) + "/init"), x,
                ops::Const(root, Tensor::FromVector<float>(init)));
    return x;
  };
  Output w = var("w", start.w), m = var("m", start.m), v = var("v", start.v);
  Output t = ops::Placeholder(root.WithOpName("t"), DataType::kFloat32);
  ops::Generic(root.WithOpName("adam"), "ApplyAdam",
               {w, m, v, ops::Const(root, 0.01f), ops::Const(root, 0.9f), ops::Const(root, 0.999f),
                ops::Const(root, 1e-7f), t, ops::Const(root, Tensor::FromVector<float>(g))});
  DevicePoolOptions po;
  po.intra_op_threads = threads;
  auto pool = DevicePool::Create(po).value();
  SessionOptions o;
  o.devices = pool.get();
  auto s = Session::Create(root.graph_def(), o).value();
  std::vector<Tensor> out;
  EXPECT_TRUE(s->Run({}, {}, {"w/init", "m/init", "v/init"}, &out).ok());
  for (int step = 1; step <= steps; ++step) {
    Status st = s->Run({{"t", Tensor::Scalar<float>(float(step))}}, {}, {"adam"}, &out);
    EXPECT_TRUE(st.ok()) << st.ToString();
  }
  EXPECT_TRUE(s->Run({}, {"w", "m", "v"}, {}, &out).ok());
  AdamState r;
  for (int i = 0; i < 3; ++i) {
    std::vector<float>& dst = i == 0 ? r.w : i == 1 ? r.m : r.v;
    dst.assign(out[size_t(i)].data<float>(), out[size_t(i)].data<float>() + n);
  }
  return r;
}

TEST(ApplyAdam, LargeFloat32VariableMatchesTheRuleOnAnyThreadCount) {
  const int64_t n = 100003;  // several shards and a ragged end
  std::mt19937 rng(7);
  std::normal_distribution<float> normal;
  AdamState start;
  std::vector<float> g(static_cast<size_t>(n), 0.0f);
  for (int64_t i = 0; i < n; ++i) {
    start.w.push_back(normal(rng));
    start.m.push_back(0.1f * normal(rng));
    start.v.push_back(0.01f * std::abs(normal(rng)));
    g[size_t(i)] = normal(rng);
  }
  AdamState one = RunApplyAdam(1, start, g, 3);
  AdamState two = RunApplyAdam(2, start, g, 3);
  // Element-wise: bit for bit the same however the range is split.
  EXPECT_EQ(std::memcmp(one.w.data(), two.w.data(), size_t(n) * 4), 0);
  EXPECT_EQ(std::memcmp(one.m.data(), two.m.data(), size_t(n) * 4), 0);
  EXPECT_EQ(std::memcmp(one.v.data(), two.v.data(), size_t(n) * 4), 0);
  // Against the rule in double (with the float32 hyperparameters).
  const double lr = 0.01f, b1 = 0.9f, b2 = 0.999f, eps = 1e-7f;
  for (int64_t i = 0; i < n; ++i) {
    double w = start.w[size_t(i)], m = start.m[size_t(i)], v = start.v[size_t(i)];
    const double gi = g[size_t(i)];
    for (int t = 1; t <= 3; ++t) {
      m = b1 * m + (1 - b1) * gi;
      v = b2 * v + (1 - b2) * gi * gi;
      w -= lr / (1 - std::pow(b1, t)) * m / (std::sqrt(v / (1 - std::pow(b2, t))) + eps);
    }
    ASSERT_NEAR(two.w[size_t(i)], w, 1e-5 * std::max(1.0, std::abs(w))) << i;
    // m can be a difference of near-equal terms: its error is relative to them.
    const double m_scale = std::abs(start.m[size_t(i)]) + std::abs(gi);
    ASSERT_NEAR(two.m[size_t(i)], m, 1e-6 * std::max(1e-3, m_scale)) << i;
    ASSERT_NEAR(two.v[size_t(i)], v, 1e-5 * std::max(1e-3, std::abs(v))) << i;
  }
}

#if defined(__SSE2__)
TEST(ApplyAdam, FlushesSubnormalSlotsToZero) {
  // A unit whose gradient is 0: m decays into the subnormal range, where
  // the kernel flushes it (see ScopedFlushSubnormals in state/variable_kernels.cc).
  const float tiny = 1e-39f;  // subnormal
  ASSERT_LT(tiny, 1.1754944e-38f);
  AdamState start{{1.5f, 2.5f}, {tiny, 0.5f}, {tiny, 0.25f}};
  AdamState r = RunApplyAdam(2, start, {0.0f, 0.0f}, 1);
  EXPECT_EQ(r.m[0], 0.0f);
  EXPECT_EQ(r.v[0], 0.0f);
  EXPECT_EQ(r.w[0], 1.5f);
  EXPECT_FLOAT_EQ(r.m[1], 0.45f);  // normal values are updated as usual
  EXPECT_LT(r.w[1], 2.5f);
}
#endif

}  // namespace
}  // namespace flowstate

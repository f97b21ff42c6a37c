// Gradients through while loops against central finite differences: a
// product loop, an RNN over a fed sequence (MatMul, Tanh, Gather of each
// step's slice), nested loops, a loop inside a conditional (each branch),
// and a loop whose trip count depends on the data; plus the error for a
// hand-built loop of another form, and that the values kept per iteration
// are gone when the step ends.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "graph/control_flow_builders.h"
#include "graph/gradients.h"
#include "graph/op_builders.h"
#include "scheduler/session.h"
#include "tests/gradients/gradient_check_util.h"
#include "tests/util/session_util.h"

namespace flowstate::test {
namespace {

using Vars = std::vector<Output>;
using Feeds = std::vector<std::pair<std::string, Tensor>>;

Output Tanh(const Scope& s, const Output& x) { return ops::Generic(s, "Tanh", {x})[0]; }

double Loss(Session* s, const Feeds& feeds, const std::string& loss) {
  std::vector<Tensor> out;
  s->Run(feeds, {loss}, {}, &out).CheckOk();
  return out[0].scalar<double>();
}

// Checks dL/d(each of `checked`, placeholders of `feeds`) element by element
// against central differences.
void ExpectGradientsMatch(const Scope& root, const Output& loss, const Feeds& feeds,
                          const std::vector<std::string>& checked, double tol = 1e-6) {
  std::vector<Output> xs;
  for (const std::string& x : checked) xs.push_back(Output(x));
  Scope scope = root;
  std::vector<Gradient> grads;
  Status st = AddGradients(scope, loss, xs, &grads);
  ASSERT_TRUE(st.ok()) << st.ToString();
  std::vector<std::string> names;
  for (size_t i = 0; i < grads.size(); ++i) {
    ASSERT_FALSE(grads[i].is_none()) << "no gradient for " << checked[i];
    ASSERT_FALSE(grads[i].is_sparse);
    names.push_back(grads[i].dense.name());
  }
  auto session = NewSession(scope.graph_def(), 4);
  std::vector<Tensor> analytic;
  st = session->Run(feeds, names, {}, &analytic);
  ASSERT_TRUE(st.ok()) << st.ToString();
  for (size_t i = 0; i < checked.size(); ++i) {
    size_t which = 0;
    while (feeds[which].first != checked[i]) ++which;
    const Tensor& x = feeds[which].second;
    ASSERT_EQ(analytic[i].num_elements(), x.num_elements()) << checked[i];
    for (int64_t k = 0; k < x.num_elements(); ++k) {
      const double h = 1e-6;
      Feeds plus = feeds, minus = feeds;
      plus[which].second = x.DeepCopy();
      minus[which].second = x.DeepCopy();
      plus[which].second.data<double>()[k] += h;
      minus[which].second.data<double>()[k] -= h;
      const double numeric =
          (Loss(session.get(), plus, loss.name()) - Loss(session.get(), minus, loss.name())) /
          (2 * h);
      const double got = analytic[i].data<double>()[k];
      EXPECT_NEAR(got, numeric, tol * std::max(1.0, std::abs(numeric)))
          << "d" << loss.name() << "/d" << checked[i] << "[" << k << "]";
    }
  }
}

Output ScalarSum(const Scope& s, const Output& x) { return ops::Sum(s, x, std::vector<int32_t>{}); }

// y = x * w^n + sum_t ...: the loop runs n (fed) times y <- y * w + 0.1 * sin(y).
TEST(WhileGradients, ProductLoop) {
  Scope root;
  Output x = ops::Placeholder(root.WithOpName("x"), DataType::kFloat64, PartialShape({3}));
  Output w = ops::Placeholder(root.WithOpName("w"), DataType::kFloat64, PartialShape({3}));
  Output n = ops::Placeholder(root.WithOpName("n"), DataType::kInt32, PartialShape({}));
  auto r = ops::WhileLoop(
      root.WithOpName("loop"),
      [&](const Scope& s, const Vars& v) -> StatusOr<Output> { return ops::Less(s, v[0], n); },
      [&](const Scope& s, const Vars& v) -> StatusOr<Vars> {
        Output y = ops::Add(s, ops::Mul(s, v[1], w),
                            ops::Mul(s, ops::Const(s, 0.1), ops::Sin(s, v[1])));
        return Vars{ops::Add(s, v[0], ops::Const(s, int32_t(1))), y};
      },
      {ops::Const(root, int32_t(0)), x});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  Output loss = ScalarSum(root.WithOpName("loss"), (*r)[1]);
  const Feeds feeds = {{"x", RandomF64(TensorShape({3}), 1)},
                       {"w", RandomF64(TensorShape({3}), 2, 0.5, 1.2)},
                       {"n", Tensor::Scalar<int32_t>(5)}};
  ExpectGradientsMatch(root, loss, feeds, {"x", "w"});
  // Zero iterations: dL/dx is one, dL/dw zero.
  Scope scope = root;
  std::vector<Gradient> grads;
  ASSERT_TRUE(AddGradients(scope, loss, {x, w}, &grads).ok());
  auto session = NewSession(scope.graph_def(), 2);
  Feeds zero = feeds;
  zero[2].second = Tensor::Scalar<int32_t>(0);
  std::vector<Tensor> out;
  ASSERT_TRUE(session->Run(zero, {grads[0].dense.name(), grads[1].dense.name()}, {}, &out).ok());
  for (int k = 0; k < 3; ++k) {
    EXPECT_EQ(out[0].data<double>()[k], 1.0);
    EXPECT_EQ(out[1].data<double>()[k], 0.0);
  }
}

// Two AddGradients calls through one loop (two losses), both fetched in one
// step: each call's kept values are its own.
TEST(WhileGradients, TwoGradientsOfOneLoopInOneStep) {
  Scope root;
  Output x = ops::Placeholder(root.WithOpName("x"), DataType::kFloat64, PartialShape({2}));
  Output w = ops::Placeholder(root.WithOpName("w"), DataType::kFloat64, PartialShape({2}));
  auto r = ops::WhileLoop(
      root.WithOpName("loop"),
      [&](const Scope& s, const Vars& v) -> StatusOr<Output> {
        return ops::Less(s, v[0], ops::Const(s, int32_t(3)));
      },
      [&](const Scope& s, const Vars& v) -> StatusOr<Vars> {
        return Vars{ops::Add(s, v[0], ops::Const(s, int32_t(1))), Tanh(s, ops::Mul(s, v[1], w))};
      },
      {ops::Const(root, int32_t(0)), x});
  ASSERT_TRUE(r.ok());
  Output loss1 = ScalarSum(root.WithOpName("loss1"), (*r)[1]);
  Output loss2 = ScalarSum(root.WithOpName("loss2"), ops::Square(root, ops::Sin(root, (*r)[1])));
  std::vector<Gradient> g1, g2;
  ASSERT_TRUE(AddGradients(root, loss1, {w}, &g1).ok());
  GradientOptions second;
  second.prefix = "gradients_2";
  ASSERT_TRUE(AddGradients(root, loss2, {w}, &g2, second).ok());
  auto session = NewSession(root.graph_def(), 4);
  const Feeds feeds = {{"x", RandomF64(TensorShape({2}), 20)}, {"w", RandomF64(TensorShape({2}), 21)}};
  std::vector<Tensor> both, alone1, alone2;
  ASSERT_TRUE(session->Run(feeds, {g1[0].dense.name(), g2[0].dense.name()}, {}, &both).ok());
  ASSERT_TRUE(session->Run(feeds, {g1[0].dense.name()}, {}, &alone1).ok());
  ASSERT_TRUE(session->Run(feeds, {g2[0].dense.name()}, {}, &alone2).ok());
  for (int k = 0; k < 2; ++k) {
    EXPECT_EQ(both[0].data<double>()[k], alone1[0].data<double>()[k]);
    EXPECT_EQ(both[1].data<double>()[k], alone2[0].data<double>()[k]);
  }
  ExpectGradientsMatch(root, loss2, feeds, {"w"});
}

// An RNN over a fed sequence X [T, B, D]: h <- tanh(X[t] Wx + h Wh + b).
TEST(WhileGradients, RnnOverAFedSequence) {
  constexpr int T = 4, B = 2, D = 3, H = 2;
  Scope root;
  Output xs = ops::Placeholder(root.WithOpName("xs"), DataType::kFloat64, PartialShape({T, B, D}));
  Output wx = ops::Placeholder(root.WithOpName("wx"), DataType::kFloat64, PartialShape({D, H}));
  Output wh = ops::Placeholder(root.WithOpName("wh"), DataType::kFloat64, PartialShape({H, H}));
  Output b = ops::Placeholder(root.WithOpName("b"), DataType::kFloat64, PartialShape({H}));
  Output h0 = ops::Placeholder(root.WithOpName("h0"), DataType::kFloat64, PartialShape({B, H}));
  Output steps = ops::Shape(root, xs, DataType::kInt32);
  Output t_max = ops::StridedSlice(root, steps, std::vector<int32_t>{0}, std::vector<int32_t>{1},
                                   std::vector<int32_t>{1}, ops::StridedSliceAttrs{0, 0, 0, 0, 1});
  auto r = ops::WhileLoop(
      root.WithOpName("rnn"),
      [&](const Scope& s, const Vars& v) -> StatusOr<Output> { return ops::Less(s, v[0], t_max); },
      [&](const Scope& s, const Vars& v) -> StatusOr<Vars> {
        Output x_t = ops::Gather(s, xs, v[0]);
        Output pre = ops::Add(s, ops::Add(s, ops::MatMul(s, x_t, wx), ops::MatMul(s, v[1], wh)), b);
        return Vars{ops::Add(s, v[0], ops::Const(s, int32_t(1))), Tanh(s, pre)};
      },
      {ops::Const(root, int32_t(0)), h0});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  Output weights = ops::Const(root, Tensor::FromVector(std::vector<double>{0.3, -1.1, 0.7, 0.2},
                                                       TensorShape({B, H})));
  Output loss = ScalarSum(root.WithOpName("loss"), ops::Mul(root, (*r)[1], weights));
  const Feeds feeds = {{"xs", RandomF64(TensorShape({T, B, D}), 3)},
                       {"wx", RandomF64(TensorShape({D, H}), 4)},
                       {"wh", RandomF64(TensorShape({H, H}), 5)},
                       {"b", RandomF64(TensorShape({H}), 6)},
                       {"h0", RandomF64(TensorShape({B, H}), 7)}};
  ExpectGradientsMatch(root, loss, feeds, {"wx", "wh", "b", "h0", "xs"});
}

// An outer loop of 3 iterations, each running an inner loop of 2 that reads
// the outer variable and a weight from outside both.
TEST(WhileGradients, NestedLoops) {
  Scope root;
  Output x = ops::Placeholder(root.WithOpName("x"), DataType::kFloat64, PartialShape({2}));
  Output w = ops::Placeholder(root.WithOpName("w"), DataType::kFloat64, PartialShape({2}));
  auto r = ops::WhileLoop(
      root.WithOpName("outer"),
      [&](const Scope& s, const Vars& v) -> StatusOr<Output> {
        return ops::Less(s, v[0], ops::Const(s, int32_t(3)));
      },
      [&](const Scope& s, const Vars& v) -> StatusOr<Vars> {
        Output y = v[1];
        auto inner = ops::WhileLoop(
            s.WithOpName("inner"),
            [&](const Scope& c, const Vars& u) -> StatusOr<Output> {
              return ops::Less(c, u[0], ops::Const(c, int32_t(2)));
            },
            [&](const Scope& c, const Vars& u) -> StatusOr<Vars> {
              Output z = ops::Add(c, ops::Mul(c, ops::Sin(c, u[1]), w), ops::Mul(c, y, u[1]));
              return Vars{ops::Add(c, u[0], ops::Const(c, int32_t(1))), ops::Mul(c, z, ops::Const(c, 0.5))};
            },
            {ops::Const(s, int32_t(0)), y});
        if (!inner.ok()) return inner.status();
        return Vars{ops::Add(s, v[0], ops::Const(s, int32_t(1))), ops::Add(s, (*inner)[1], w)};
      },
      {ops::Const(root, int32_t(0)), x});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  Output loss = ScalarSum(root.WithOpName("loss"), ops::Mul(root, (*r)[1], (*r)[1]));
  const Feeds feeds = {{"x", RandomF64(TensorShape({2}), 8)}, {"w", RandomF64(TensorShape({2}), 9)}};
  ExpectGradientsMatch(root, loss, feeds, {"x", "w"});
}

// Cond(p, loop over x with weight w, x * w): the loop's gradient on the taken
// branch, nothing of it on the other.
TEST(WhileGradients, LoopInsideACond) {
  Scope root;
  Output x = ops::Placeholder(root.WithOpName("x"), DataType::kFloat64, PartialShape({3}));
  Output w = ops::Placeholder(root.WithOpName("w"), DataType::kFloat64, PartialShape({3}));
  Output p = ops::Placeholder(root.WithOpName("p"), DataType::kBool, PartialShape({}));
  auto c = ops::Cond(
      root.WithOpName("c"), p,
      [&](const Scope& s) -> StatusOr<Vars> {
        auto loop = ops::WhileLoop(
            s.WithOpName("loop"),
            [&](const Scope& cs, const Vars& v) -> StatusOr<Output> {
              return ops::Less(cs, v[0], ops::Const(cs, int32_t(3)));
            },
            [&](const Scope& bs, const Vars& v) -> StatusOr<Vars> {
              return Vars{ops::Add(bs, v[0], ops::Const(bs, int32_t(1))),
                          Tanh(bs, ops::Mul(bs, v[1], w))};
            },
            {ops::Const(s, int32_t(0)), x});
        if (!loop.ok()) return loop.status();
        return Vars{(*loop)[1]};
      },
      [&](const Scope& s) -> StatusOr<Vars> { return Vars{ops::Mul(s, x, w)}; });
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  Output loss = ScalarSum(root.WithOpName("loss"), ops::Mul(root, (*c)[0], ops::Sin(root, x)));
  for (bool taken : {true, false}) {
    const Feeds feeds = {{"x", RandomF64(TensorShape({3}), 10)},
                         {"w", RandomF64(TensorShape({3}), 11)},
                         {"p", Tensor::Scalar(taken)}};
    ExpectGradientsMatch(root, loss, feeds, {"x", "w"});
  }
}

// The loop runs until |y| sums past a threshold: how often depends on x.
TEST(WhileGradients, TripCountFromTheData) {
  Scope root;
  Output x = ops::Placeholder(root.WithOpName("x"), DataType::kFloat64, PartialShape({2}));
  Output w = ops::Placeholder(root.WithOpName("w"), DataType::kFloat64, PartialShape({2}));
  auto r = ops::WhileLoop(
      root.WithOpName("grow"),
      [&](const Scope& s, const Vars& v) -> StatusOr<Output> {
        return ops::Less(s, ScalarSum(s, ops::Abs(s, v[0])), ops::Const(s, 40.0));
      },
      [&](const Scope& s, const Vars& v) -> StatusOr<Vars> {
        return Vars{ops::Add(s, ops::Mul(s, v[0], ops::Const(s, 1.5)), w)};
      },
      {x});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  Output loss = ScalarSum(root.WithOpName("loss"), ops::Mul(root, (*r)[0], (*r)[0]));
  for (uint64_t seed : {12, 13}) {
    Tensor xv = RandomF64(TensorShape({2}), seed, 1, 2);
    Tensor wv = RandomF64(TensorShape({2}), seed + 10, 0.5, 1);
    Feeds feeds;
    feeds.emplace_back("x", xv);
    feeds.emplace_back("w", wv);
    ExpectGradientsMatch(root, loss, feeds, {"x", "w"}, 1e-5);
  }
}

// A loop written with raw ops whose body reads the Merge (not the Switch)
// is not of WhileLoop's form: UNIMPLEMENTED naming one of its nodes.
TEST(WhileGradients, ALoopOfAnotherFormIsRefusedNamingTheNode) {
  Scope root;
  Output x = ops::Placeholder(root.WithOpName("x"), DataType::kFloat64, PartialShape({}));
  AttrMap enter = {{"frame_name", AttrValue("f")}};
  root.WithOpName("enter").AddNode("enter", "Enter", {"x"}, enter);
  root.WithOpName("merge").AddNode("merge", "Merge", {"enter", "next"}, {});
  root.WithOpName("lim").AddNode("lim", "Const", {"^merge"},
                                 {{"dtype", AttrValue(DataType::kFloat64)},
                                  {"value", AttrValue(Tensor::Scalar(5.0))}});
  root.WithOpName("less").AddNode("less", "Less", {"merge", "lim"}, {});
  root.WithOpName("lc").AddNode("lc", "LoopCond", {"less"}, {});
  root.WithOpName("sw").AddNode("sw", "Switch", {"merge", "lc"}, {});
  root.WithOpName("exit").AddNode("exit", "Exit", {"sw"}, {});
  root.WithOpName("body").AddNode("body", "Add", {"sw:1", "x_in"}, {});
  root.WithOpName("x_in").AddNode("x_in", "Enter", {"x"},
                                  {{"frame_name", AttrValue("f")}, {"is_constant", AttrValue(true)}});
  root.WithOpName("next").AddNode("next", "NextIteration", {"body"}, {});
  root.WithOpName("unrelated_exit").AddNode("unrelated_exit", "Exit", {"body"}, {});
  Output loss = ops::Add(root.WithOpName("loss"), Output("exit"), Output("unrelated_exit"));
  std::vector<Gradient> grads;
  Status s = AddGradients(root, loss, {x}, &grads);
  EXPECT_EQ(s.code(), Code::kUnimplemented) << s.ToString();
  EXPECT_EQ(s.node(), "unrelated_exit") << s.ToString();
}

// What the forward loop keeps for its gradient is freed by the step's end:
// after a training-like run, the device holds no more bytes than before.
TEST(WhileGradients, KeptValuesAreFreedWhenTheStepEnds) {
  Scope root;
  Output x = ops::Placeholder(root.WithOpName("x"), DataType::kFloat64, PartialShape({64, 64}));
  auto r = ops::WhileLoop(
      root.WithOpName("loop"),
      [&](const Scope& s, const Vars& v) -> StatusOr<Output> {
        return ops::Less(s, v[0], ops::Const(s, int32_t(20)));
      },
      [&](const Scope& s, const Vars& v) -> StatusOr<Vars> {
        return Vars{ops::Add(s, v[0], ops::Const(s, int32_t(1))), Tanh(s, ops::MatMul(s, v[1], x))};
      },
      {ops::Const(root, int32_t(0)), x});
  ASSERT_TRUE(r.ok());
  Output loss = ScalarSum(root.WithOpName("loss"), (*r)[1]);
  std::vector<Gradient> grads;
  ASSERT_TRUE(AddGradients(root, loss, {x}, &grads).ok());
  auto session = NewSession(root.graph_def(), 2);
  Allocator* a = SharedTestPool()->default_device()->allocator();
  const Tensor xv = RandomF64(TensorShape({64, 64}), 14, -0.1, 0.1);
  std::vector<Tensor> out;
  ASSERT_TRUE(session->Run({{"x", xv}}, {grads[0].dense.name()}, {}, &out).ok());
  out.clear();
  const int64_t before = a->Stats().bytes_in_use;
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(session->Run({{"x", xv}}, {grads[0].dense.name()}, {}, &out).ok());
    out.clear();
  }
  EXPECT_EQ(a->Stats().bytes_in_use, before);
}

// A model pinned to the second of two CPU devices (its gradients too): the
// counter and pushes added to the loop run there as well, and the gradient
// is that of the same model unpinned.
TEST(WhileGradients, ALoopPinnedToAnotherDevice) {
  static DevicePool* two = [] {
    DevicePoolOptions o;
    o.num_cpu_devices = 2;
    o.intra_op_threads = 1;
    return DevicePool::Create(o).value().release();
  }();
  std::vector<Tensor> results;
  for (const char* device : {"", "/device:CPU:1"}) {
    Scope root = Scope().WithDevice(device);
    Output x = ops::Placeholder(root.WithOpName("x"), DataType::kFloat64, PartialShape({3}));
    Output w = ops::Placeholder(root.WithOpName("w"), DataType::kFloat64, PartialShape({3}));
    auto r = ops::WhileLoop(
        root.WithOpName("loop"),
        [&](const Scope& s, const Vars& v) -> StatusOr<Output> {
          return ops::Less(s, v[0], ops::Const(s, int32_t(4)));
        },
        [&](const Scope& s, const Vars& v) -> StatusOr<Vars> {
          return Vars{ops::Add(s, v[0], ops::Const(s, int32_t(1))), Tanh(s, ops::Mul(s, v[1], w))};
        },
        {ops::Const(root, int32_t(0)), x});
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    Output loss = ScalarSum(root.WithOpName("loss"), ops::Mul(root, (*r)[1], x));
    std::vector<Gradient> grads;
    ASSERT_TRUE(AddGradients(root, loss, {x, w}, &grads).ok());
    for (const NodeDef& n : root.graph_def().nodes) {
      if (n.op == "StackPush" || n.name.rfind("loop/grad/counter", 0) == 0) {
        EXPECT_EQ(n.device, device) << n.name;
      }
    }
    SessionOptions o;
    o.devices = two;
    o.inter_op_threads = 2;
    auto session = Session::Create(root.graph_def(), o);
    ASSERT_TRUE(session.ok()) << session.status().ToString();
    std::vector<Tensor> out;
    Status st = (*session)->Run({{"x", RandomF64(TensorShape({3}), 15)},
                                 {"w", RandomF64(TensorShape({3}), 16)}},
                                {grads[0].dense.name(), grads[1].dense.name()}, {}, &out);
    ASSERT_TRUE(st.ok()) << device << ": " << st.ToString();
    results.insert(results.end(), out.begin(), out.end());
  }
  for (int k = 0; k < 3; ++k) {
    EXPECT_DOUBLE_EQ(results[0].data<double>()[k], results[2].data<double>()[k]);
    EXPECT_DOUBLE_EQ(results[1].data<double>()[k], results[3].data<double>()[k]);
  }
}

// An RNN trained by SGD with its loop split over two CPU devices: the
// recurrent MatMul on CPU:1, the rest of the loop, its gradient loop and the
// variables on CPU:0 (so the forward values the backward loop keeps, and the
// gradients of the body, cross devices every iteration). Five steps of
// training give bit for bit the weights and losses of the same model on one
// device.
TEST(WhileGradients, TrainingALoopSplitOverTwoDevicesMatchesOneDevice) {
  static DevicePool* two = [] {
    DevicePoolOptions o;
    o.num_cpu_devices = 2;
    o.intra_op_threads = 1;
    return DevicePool::Create(o).value().release();
  }();
  constexpr int T = 5, B = 2, D = 3, H = 4;
  std::vector<std::vector<double>> weights, losses;
  for (bool split : {false, true}) {
    Scope root = Scope().WithDevice("/device:CPU:0");
    Output xs = ops::Placeholder(root.WithOpName("xs"), DataType::kFloat64, PartialShape({T, B, D}));
    Output wx = ops::Variable(root.WithOpName("wx"), PartialShape({D, H}), DataType::kFloat64);
    Output wh = ops::Variable(root.WithOpName("wh"), PartialShape({H, H}), DataType::kFloat64);
    Output init_x = ops::Assign(root.WithOpName("init_wx"), wx,
                                ops::Const(root, RandomF64(TensorShape({D, H}), 21)));
    Output init_h = ops::Assign(root.WithOpName("init_wh"), wh,
                                ops::Const(root, RandomF64(TensorShape({H, H}), 22)));
    Output rx = ops::Identity(root.WithOpName("read_wx"), wx);
    Output rh = ops::Identity(root.WithOpName("read_wh"), wh);
    auto r = ops::WhileLoop(
        root.WithOpName("rnn"),
        [&](const Scope& s, const Vars& v) -> StatusOr<Output> {
          return ops::Less(s, v[0], ops::Const(s, int32_t(T)));
        },
        [&](const Scope& s, const Vars& v) -> StatusOr<Vars> {
          Scope far = s.WithDevice(split ? "/device:CPU:1" : "/device:CPU:0");
          Output x_t = ops::Gather(s, xs, v[0]);
          Output rec = ops::MatMul(far.WithOpName("recurrent"), v[1], rh);
          Output pre = ops::Add(s, ops::MatMul(s, x_t, rx), rec);
          return Vars{ops::Add(s, v[0], ops::Const(s, int32_t(1))), Tanh(s, pre)};
        },
        {ops::Const(root, int32_t(0)), ops::Const(root, RandomF64(TensorShape({B, H}), 23))});
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    Output loss = ScalarSum(root.WithOpName("loss"), ops::Mul(root, (*r)[1], (*r)[1]));
    std::vector<Gradient> grads;
    ASSERT_TRUE(AddGradients(root, loss, {rx, rh}, &grads).ok());
    ops::AssignSub(root.WithOpName("step_wx"), wx, ops::Mul(root, grads[0].dense, ops::Const(root, 0.1)));
    ops::AssignSub(root.WithOpName("step_wh"), wh, ops::Mul(root, grads[1].dense, ops::Const(root, 0.1)));
    SessionOptions o;
    o.devices = two;
    o.inter_op_threads = 4;
    auto session = Session::Create(root.graph_def(), o);
    ASSERT_TRUE(session.ok()) << session.status().ToString();
    Session* sess = session->get();
    std::vector<Tensor> none;
    ASSERT_TRUE(sess->Run({}, {}, {"init_wx", "init_wh"}, &none).ok());
    const Feeds feeds = {{"xs", RandomF64(TensorShape({T, B, D}), 24)}};
    std::vector<double> step_losses;
    for (int step = 0; step < 5; ++step) {
      std::vector<Tensor> out;
      // The loss of this step's weights, then one update.
      Status st = sess->Run(feeds, {"loss"}, {}, &out);
      ASSERT_TRUE(st.ok()) << (split ? "split: " : "") << st.ToString();
      step_losses.push_back(out[0].scalar<double>());
      st = sess->Run(feeds, {}, {"step_wx", "step_wh"}, &none);
      ASSERT_TRUE(st.ok()) << (split ? "split: " : "") << st.ToString();
    }
    std::vector<Tensor> w;
    ASSERT_TRUE(sess->Run({}, {"read_wx", "read_wh"}, {}, &w).ok());
    std::vector<double> flat;
    for (const Tensor& t : w) flat.insert(flat.end(), t.data<double>(), t.data<double>() + t.num_elements());
    weights.push_back(flat);
    losses.push_back(step_losses);
  }
  EXPECT_LT(losses[0].back(), losses[0].front()) << "the model did not learn";
  ASSERT_EQ(weights[0].size(), weights[1].size());
  for (size_t k = 0; k < weights[0].size(); ++k) EXPECT_EQ(weights[0][k], weights[1][k]) << k;
  for (size_t k = 0; k < losses[0].size(); ++k) EXPECT_EQ(losses[0][k], losses[1][k]) << k;
}

}  // namespace
}  // namespace flowstate::test

// Builds a graph with the C++ API, runs it in a Session, and trains a tiny
// linear model with hand-written gradient updates (y = 3x + 2).
//
//   build/examples/cpp/linear_regression
//
// Exits 1 unless it converged (the ctest example_linear_regression).
#include <cmath>
#include <cstdio>

#include "devices/device_pool.h"
#include "graph/op_builders.h"
#include "graph/scope.h"
#include "scheduler/session.h"

using namespace flowstate;

int main() {
  Scope root;
  Output x = ops::Placeholder(root.WithOpName("x"), DataType::kFloat32, PartialShape({-1}));
  Output y = ops::Placeholder(root.WithOpName("y"), DataType::kFloat32, PartialShape({-1}));
  Output w = ops::Variable(root.WithOpName("w"), TensorShape({}), DataType::kFloat32);
  Output b = ops::Variable(root.WithOpName("b"), TensorShape({}), DataType::kFloat32);
  Output init_w = ops::Assign(root.WithOpName("init_w"), w, ops::Const(root, 0.0f));
  Output init_b = ops::Assign(root.WithOpName("init_b"), b, ops::Const(root, 0.0f));
  ops::NoOp(root.WithOpName("init"), {init_w.node, init_b.node});

  // prediction and error
  Output pred = ops::Add(root.WithOpName("pred"), ops::Mul(root, x, w), b);
  Output err = ops::Sub(root.WithOpName("err"), pred, y);
  Output loss = ops::Mean(root.WithOpName("loss"), ops::Square(root, err), std::vector<int32_t>{});
  // d loss/dw = mean(2 err x), d loss/db = mean(2 err); one SGD step.
  // (0.1 diverges: the curvature of the loss along w is 2 * mean(x^2) = 35.)
  Output lr = ops::Const(root, 0.04f);
  Output gw = ops::Mean(root, ops::Mul(root, ops::Mul(root, err, x), ops::Const(root, 2.0f)),
                        std::vector<int32_t>{});
  Output gb = ops::Mean(root, ops::Mul(root, err, ops::Const(root, 2.0f)), std::vector<int32_t>{});
  Output up_w = ops::AssignSub(root.WithOpName("up_w"), w, ops::Mul(root, lr, gw));
  Output up_b = ops::AssignSub(root.WithOpName("up_b"), b, ops::Mul(root, lr, gb));
  ops::NoOp(root.WithOpName("train"), {up_w.node, up_b.node});

  auto pool = DevicePool::Create(DevicePoolOptions{}).value();
  SessionOptions options;
  options.devices = pool.get();
  auto session = Session::Create(root.graph_def(), options);
  if (!session.ok()) {
    std::fprintf(stderr, "%s\n", session.status().ToString().c_str());
    return 1;
  }
  Session& s = **session;
  Tensor xs = Tensor::FromVector<float>({0, 1, 2, 3, 4, 5, 6, 7});
  Tensor ys(DataType::kFloat32, xs.shape());
  for (int i = 0; i < 8; ++i) ys.data<float>()[i] = 3 * xs.data<float>()[i] + 2;

  std::vector<Tensor> out;
  s.Run({}, {}, {"init"}, &out).CheckOk();
  for (int step = 0; step < 500; ++step) {
    // Losses are computed before the update: fetch them in their own Run.
    s.Run({{"x", xs}, {"y", ys}}, {}, {"train"}, &out).CheckOk();
  }
  s.Run({{"x", xs}, {"y", ys}}, {"w", "b", "loss"}, {}, &out).CheckOk();
  const float fw = out[0].scalar<float>(), fb = out[1].scalar<float>();
  const float fl = out[2].scalar<float>();
  std::printf("w = %.3f, b = %.3f, loss = %.6f\n", fw, fb, fl);
  // The ctest example_linear_regression runs this: it must have converged.
  if (std::fabs(fw - 3) > 1e-2 || std::fabs(fb - 2) > 1e-2 || !(fl < 1e-4)) {
    std::fprintf(stderr, "did not converge to w = 3, b = 2\n");
    return 1;
  }
  return 0;
}

// Builds a graph with the C++ API, runs it in a Session, and trains a tiny
// linear model with hand-written gradient updates (y = 3x + 2).
//
//   build/examples/cpp/linear_regression
#include <cstdio>

#include "devices/device_pool.h"
#include "graph/ops.h"
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
  Output lr = ops::Const(root, 0.1f);
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
  std::printf("w = %.3f, b = %.3f, loss = %.6f\n", out[0].scalar<float>(), out[1].scalar<float>(),
              out[2].scalar<float>());
  return 0;
}

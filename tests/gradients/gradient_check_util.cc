#include "tests/gradients/gradient_check_util.h"

#include <cmath>
#include <random>
#include <sstream>

#include "devices/device_pool.h"
#include "graph/gradients.h"
#include "graph/ops.h"
#include "graph/scope.h"
#include "scheduler/session.h"

namespace flowstate::test {
namespace {

DevicePool* Pool() {
  static DevicePool* p = [] {
    DevicePoolOptions o;
    o.intra_op_threads = 1;
    return DevicePool::Create(o).value().release();
  }();
  return p;
}

std::unique_ptr<Session> Open(const GraphDef& g) {
  SessionOptions o;
  o.devices = Pool();
  o.inter_op_threads = 1;
  StatusOr<std::unique_ptr<Session>> s = Session::Create(g, o);
  s.status().CheckOk();
  return std::move(s).value();
}

}  // namespace

Tensor RandomF64(const TensorShape& shape, uint64_t seed, double lo, double hi) {
  Tensor t(DataType::kFloat64, shape);
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(lo, hi);
  for (double& v : t.flat<double>()) v = u(rng);
  return t;
}

::testing::AssertionResult CheckGradient(const GradCheck& c) {
  const int n = int(c.inputs.size());
  std::vector<bool> check = c.check;
  if (check.empty()) {
    for (const Tensor& t : c.inputs) check.push_back(t.dtype() == DataType::kFloat64);
  }
  // Forward graph: placeholders for checked inputs, constants for the rest.
  Scope root;
  std::vector<Output> ins;
  std::vector<std::string> feeds;
  for (int i = 0; i < n; ++i) {
    std::string name = "in" + std::to_string(i);
    if (check[i]) {
      ins.push_back(ops::Placeholder(root.WithOpName(name), DataType::kFloat64,
                                     PartialShape(c.inputs[i].shape())));
      feeds.push_back(name);
    } else {
      ins.push_back(ops::Const(root.WithOpName(name), c.inputs[i]));
    }
  }
  int max_out = 0;
  for (int o : c.outputs) max_out = std::max(max_out, o + 1);
  std::vector<Output> ys = ops::Generic(root.WithOpName("op"), c.op, ins, c.attrs, max_out);

  // Output shapes, from one forward run.
  std::vector<std::pair<std::string, Tensor>> feed_values;
  for (int i = 0; i < n; ++i) {
    if (check[i]) feed_values.emplace_back("in" + std::to_string(i), c.inputs[i]);
  }
  std::vector<std::string> out_names;
  for (int o : c.outputs) out_names.push_back(ys[o].name());
  std::vector<Tensor> fwd;
  {
    auto s = Open(root.graph_def());
    Status st = s->Run(feed_values, out_names, {}, &fwd);
    if (!st.ok()) return ::testing::AssertionFailure() << "forward run: " << st.ToString();
  }
  std::vector<Output> terms;
  for (size_t k = 0; k < c.outputs.size(); ++k) {
    Output w = ops::Const(root, RandomF64(fwd[k].shape(), 1000 + k, 0.5, 1.5));
    terms.push_back(ops::Sum(root, ops::Mul(root, ys[c.outputs[k]], w), std::vector<int32_t>{}));
  }
  Output loss = terms.size() == 1 ? ops::Identity(root.WithOpName("loss"), terms[0])
                                  : ops::AddN(root.WithOpName("loss"), terms);
  std::vector<Output> xs;
  for (int i = 0; i < n; ++i) {
    if (check[i]) xs.push_back(ins[i]);
  }
  std::vector<Gradient> grads;
  Status gs = AddGradients(root, loss, xs, &grads);
  if (!gs.ok()) return ::testing::AssertionFailure() << "AddGradients: " << gs.ToString();
  std::vector<std::string> grad_names;
  for (size_t k = 0; k < grads.size(); ++k) {
    const Gradient& g = grads[k];
    if (g.is_none()) {
      grad_names.push_back("");
    } else if (g.is_sparse) {
      Output rows = ops::StridedSlice(root, g.dense_shape, std::vector<int32_t>{0},
                                      std::vector<int32_t>{1}, std::vector<int32_t>{1},
                                      ops::StridedSliceAttrs{0, 0, 0, 0, 1});
      grad_names.push_back(
          ops::Generic(root, "UnsortedSegmentSum", {g.values, g.indices, rows})[0].name());
    } else {
      grad_names.push_back(g.dense.name());
    }
  }
  auto s = Open(root.graph_def());
  std::vector<std::string> fetch;
  for (const auto& g : grad_names) {
    if (!g.empty()) fetch.push_back(g);
  }
  std::vector<Tensor> analytic;
  Status st = s->Run(feed_values, fetch, {}, &analytic);
  if (!st.ok()) return ::testing::AssertionFailure() << "gradient run: " << st.ToString();

  auto eval_loss = [&](const std::vector<std::pair<std::string, Tensor>>& f) {
    std::vector<Tensor> o;
    s->Run(f, {"loss"}, {}, &o).CheckOk();
    return o[0].scalar<double>();
  };
  std::ostringstream errors;
  int bad = 0;
  size_t fetched = 0;
  for (size_t k = 0; k < xs.size(); ++k) {
    const Tensor& x = feed_values[k].second;
    Tensor a;
    if (!grad_names[k].empty()) a = analytic[fetched++];
    if (a.IsInitialized() && a.shape() != x.shape()) {
      return ::testing::AssertionFailure() << "gradient of input " << k << " has shape "
                                           << a.shape().ToString() << ", input has "
                                           << x.shape().ToString();
    }
    for (int64_t e = 0; e < x.num_elements(); ++e) {
      auto perturbed = feed_values;
      Tensor plus = x.DeepCopy(), minus = x.DeepCopy();
      plus.data<double>()[e] += c.step;
      minus.data<double>()[e] -= c.step;
      perturbed[k].second = plus;
      double lp = eval_loss(perturbed);
      perturbed[k].second = minus;
      double lm = eval_loss(perturbed);
      double numeric = (lp - lm) / (2 * c.step);
      double got = a.IsInitialized() ? a.data<double>()[e] : 0.0;
      double err = std::abs(got - numeric) / std::max(1.0, std::abs(numeric));
      if (!(err <= c.tolerance)) {
        if (++bad <= 8) {
          errors << "\n  " << feeds[k] << "[" << e << "]: symbolic " << got << ", numeric "
                 << numeric;
        }
      }
    }
  }
  if (bad) {
    return ::testing::AssertionFailure() << c.op << ": " << bad << " gradient element(s) differ"
                                         << errors.str();
  }
  return ::testing::AssertionSuccess();
}

}  // namespace flowstate::test

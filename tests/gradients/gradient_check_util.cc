#include "tests/gradients/gradient_check_util.h"

#include <algorithm>
#include <cmath>
#include <random>
#include <sstream>

#include "devices/device_pool.h"
#include "graph/gradients.h"
#include "graph/op_builders.h"
#include "graph/scope.h"
#include "scheduler/session.h"

namespace flowstate::test {
namespace {

int intra_op_threads = 1;

DevicePool* Pool() {
  static DevicePool* p = [] {
    DevicePoolOptions o;
    o.intra_op_threads = intra_op_threads;
    return DevicePool::Create(o).value().release();
  }();
  return p;
}

std::set<std::string>& Checked() {
  static std::set<std::string> s;
  return s;
}


Tensor RandomLike(const TensorShape& shape, DataType dtype, uint64_t seed) {
  Tensor d = RandomF64(shape, seed, 0.5, 1.5);
  if (dtype == DataType::kFloat64) return d;
  Tensor f(DataType::kFloat32, shape);
  for (int64_t i = 0; i < d.num_elements(); ++i) f.data<float>()[i] = float(d.data<double>()[i]);
  return f;
}

}  // namespace

OpUnderTest::~OpUnderTest() = default;

Status OpUnderTest::Reopen() {
  SessionOptions o;
  o.devices = Pool();
  o.inter_op_threads = 1;
  StatusOr<std::unique_ptr<Session>> s = Session::Create(graph_, o);
  if (!s.ok()) return s.status();
  session_ = std::move(s).value();
  if (!init_) return Status();
  std::vector<Tensor> unused;
  return session_->Run({}, {}, {"init"}, &unused);
}

StatusOr<std::unique_ptr<OpUnderTest>> OpUnderTest::Build(const GradCheck& c, bool unknown_dims) {
  std::unique_ptr<OpUnderTest> t(new OpUnderTest());
  t->c_ = c;
  const int n = int(c.inputs.size());
  auto is_var = [&](int i) {
    return std::find(c.variables.begin(), c.variables.end(), i) != c.variables.end();
  };
  std::vector<bool> check = c.check;
  if (check.empty()) {
    for (int i = 0; i < n; ++i) check.push_back(IsFloating(c.inputs[i].dtype()) && !is_var(i));
  }
  // Forward graph: placeholders for checked inputs, variables or constants
  // for the rest.
  Scope root;
  std::vector<Output> ins, xs;
  std::vector<std::string> inits;
  for (int i = 0; i < n; ++i) {
    std::string name = "in" + std::to_string(i);
    const Tensor& v = c.inputs[i];
    if (check[i]) {
      PartialShape shape(v.shape());
      if (unknown_dims) shape = PartialShape(std::vector<int64_t>(size_t(v.rank()), -1));
      ins.push_back(ops::Placeholder(root.WithOpName(name), v.dtype(), shape));
      xs.push_back(ins.back());
      t->checked_.push_back(i);
      t->feeds_.push_back(name);
    } else if (is_var(i)) {
      ins.push_back(ops::Variable(root.WithOpName(name), PartialShape(v.shape()), v.dtype()));
      inits.push_back(
          ops::Assign(root.WithOpName(name + "/init"), ins.back(), ops::Const(root, v)).node);
    } else {
      ins.push_back(ops::Const(root.WithOpName(name), v));
    }
  }
  t->init_ = !inits.empty();
  if (t->init_) ops::NoOp(root.WithOpName("init"), inits);
  int max_out = 0;
  for (int o : c.outputs) max_out = std::max(max_out, o + 1);
  std::vector<Output> ys = ops::Generic(root.WithOpName("op"), c.op, ins, c.attrs, max_out);

  // Output values (and shapes), from one forward run.
  std::vector<std::string> out_names;
  for (int o : c.outputs) out_names.push_back(ys[o].name());
  t->graph_ = root.graph_def();
  FS_RETURN_IF_ERROR(t->Reopen());
  std::vector<std::pair<std::string, Tensor>> feeds;
  for (size_t k = 0; k < t->checked_.size(); ++k) {
    feeds.emplace_back(t->feeds_[k], c.inputs[size_t(t->checked_[k])]);
  }
  FS_RETURN_IF_ERROR(t->session_->Run(feeds, out_names, {}, &t->outputs_));

  std::vector<Output> terms;
  for (size_t k = 0; k < c.outputs.size(); ++k) {
    const Tensor& y = t->outputs_[k];
    if (!IsFloating(y.dtype())) {
      return InvalidArgument("output " + std::to_string(c.outputs[k]) + " is not floating point");
    }
    t->weights_.push_back(RandomLike(y.shape(), y.dtype(), 1000 + k));
    Output w = ops::Const(root, t->weights_.back());
    terms.push_back(ops::Sum(root, ops::Mul(root, ys[c.outputs[k]], w), std::vector<int32_t>{}));
  }
  Output loss = terms.size() == 1 ? ops::Identity(root.WithOpName("loss"), terms[0])
                                  : ops::AddN(root.WithOpName("loss"), terms);
  std::vector<Gradient> grads;
  FS_RETURN_IF_ERROR(AddGradients(root, loss, xs, &grads));
  for (const Gradient& g : grads) {
    if (g.is_none()) {
      t->grad_names_.push_back("");
    } else if (g.is_sparse) {
      Output rows = ops::StridedSlice(root, g.dense_shape, std::vector<int32_t>{0},
                                      std::vector<int32_t>{1}, std::vector<int32_t>{1},
                                      ops::StridedSliceAttrs{0, 0, 0, 0, 1});
      t->grad_names_.push_back(
          ops::Generic(root, "UnsortedSegmentSum", {g.values, g.indices, rows})[0].name());
    } else {
      t->grad_names_.push_back(g.dense.name());
    }
  }
  t->graph_ = root.graph_def();
  FS_RETURN_IF_ERROR(t->Reopen());
  return t;
}

StatusOr<std::vector<Tensor>> OpUnderTest::Gradients() {
  if (c_.stateful) FS_RETURN_IF_ERROR(Reopen());
  std::vector<std::pair<std::string, Tensor>> feeds;
  for (size_t k = 0; k < checked_.size(); ++k) {
    feeds.emplace_back(feeds_[k], c_.inputs[size_t(checked_[k])]);
  }
  std::vector<std::string> fetch;
  for (const auto& g : grad_names_) {
    if (!g.empty()) fetch.push_back(g);
  }
  std::vector<Tensor> got;
  FS_RETURN_IF_ERROR(session_->Run(feeds, fetch, {}, &got));
  std::vector<Tensor> out;
  size_t next = 0;
  for (const auto& g : grad_names_) out.push_back(g.empty() ? Tensor() : got[next++]);
  return out;
}

StatusOr<double> OpUnderTest::Loss(const std::vector<Tensor>& values) {
  if (c_.stateful) FS_RETURN_IF_ERROR(Reopen());
  std::vector<std::pair<std::string, Tensor>> feeds;
  for (size_t k = 0; k < checked_.size(); ++k) feeds.emplace_back(feeds_[k], values[k]);
  std::vector<Tensor> o;
  FS_RETURN_IF_ERROR(session_->Run(feeds, {"loss"}, {}, &o));
  return o[0].ElementAsDouble(0);
}

namespace {

::testing::AssertionResult CheckOnce(const GradCheck& c, bool unknown_dims) {
  for (const Tensor& t : c.inputs) {
    if (t.dtype() == DataType::kFloat32) {
      return ::testing::AssertionFailure() << "finite differences need float64 inputs";
    }
  }
  StatusOr<std::unique_ptr<OpUnderTest>> built = OpUnderTest::Build(c, unknown_dims);
  if (!built.ok()) return ::testing::AssertionFailure() << built.status().ToString();
  OpUnderTest& op = **built;
  StatusOr<std::vector<Tensor>> analytic = op.Gradients();
  if (!analytic.ok()) {
    return ::testing::AssertionFailure() << "gradient run: " << analytic.status().ToString();
  }
  std::vector<Tensor> values;
  for (int i : op.checked()) values.push_back(c.inputs[size_t(i)]);

  std::ostringstream errors;
  int bad = 0;
  for (size_t k = 0; k < values.size(); ++k) {
    const Tensor& x = values[k];
    const Tensor& a = (*analytic)[k];
    if (a.IsInitialized() && a.shape() != x.shape()) {
      return ::testing::AssertionFailure() << "gradient of input " << op.checked()[k]
                                           << " has shape " << a.shape().ToString()
                                           << ", input has " << x.shape().ToString();
    }
    for (int64_t e = 0; e < x.num_elements(); ++e) {
      std::vector<Tensor> perturbed = values;
      perturbed[k] = x.DeepCopy();
      perturbed[k].data<double>()[e] = x.data<double>()[e] + c.step;
      StatusOr<double> lp = op.Loss(perturbed);
      perturbed[k].data<double>()[e] = x.data<double>()[e] - c.step;
      StatusOr<double> lm = op.Loss(perturbed);
      if (!lp.ok() || !lm.ok()) {
        return ::testing::AssertionFailure()
               << "loss run: " << (lp.ok() ? lm.status() : lp.status()).ToString();
      }
      double numeric = (*lp - *lm) / (2 * c.step);
      double got = a.IsInitialized() ? a.data<double>()[e] : 0.0;
      double err = std::abs(got - numeric) / std::max(1.0, std::abs(numeric));
      if (!(err <= c.tolerance)) {
        if (++bad <= 8) {
          errors << "\n  input " << op.checked()[k] << "[" << e << "]: symbolic " << got
                 << ", numeric " << numeric;
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

}  // namespace

Tensor RandomF64(const TensorShape& shape, uint64_t seed, double lo, double hi) {
  Tensor t(DataType::kFloat64, shape);
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(lo, hi);
  for (double& v : t.flat<double>()) v = u(rng);
  return t;
}

const std::set<std::string>& CheckedOps() { return Checked(); }
void SetIntraOpThreads(int n) { intra_op_threads = n; }

::testing::AssertionResult CheckGradient(const GradCheck& c) {
  Checked().insert(c.op);
  if (c.shapes != FeedShapes::kUnknownDims) {
    ::testing::AssertionResult r = CheckOnce(c, false);
    if (!r) return r << " (static shapes)";
  }
  if (c.shapes != FeedShapes::kStatic) {
    ::testing::AssertionResult r = CheckOnce(c, true);
    if (!r) return r << " (shapes unknown until run time)";
  }
  return ::testing::AssertionSuccess();
}

}  // namespace flowstate::test

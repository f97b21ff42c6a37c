// BatchNorm and BatchNormGrad, float32 and float64, [N, C] and NHWC:
// training against statistics computed here in double, the moving-average
// update through the Ref inputs (run twice), inference with the moving
// averages, an uninitialized or misshapen variable (nothing is written),
// an empty batch, a batch of one, one thread against two, and the
// gradients against their formulas and against central differences of the
// forward op.
#include <gtest/gtest.h>

#include <cmath>
#include <mutex>
#include <string>
#include <vector>

#include "tests/devices/fed_inputs_util.h"
#include "tests/util/op_test_util.h"

namespace flowstate::test {
namespace {

// A variable for the Ref inputs: copy-on-write like the real one.
class TestVariable final : public TensorRef {
 public:
  explicit TestVariable(std::string name) : name_(std::move(name)) {}
  TestVariable(std::string name, Tensor value) : name_(std::move(name)), value_(std::move(value)) {}

  StatusOr<Tensor> Read() override {
    std::lock_guard<std::mutex> l(mu_);
    if (!value_.IsInitialized()) return FailedPrecondition("variable '" + name_ + "' is uninitialized");
    return value_;
  }
  Status Mutate(const std::function<Status(Tensor* value)>& fn) override {
    std::lock_guard<std::mutex> l(mu_);
    if (!value_.IsInitialized()) return FailedPrecondition("variable '" + name_ + "' is uninitialized");
    if (!value_.RefCountIsOne()) value_ = value_.DeepCopy();
    ++mutations_;
    return fn(&value_);
  }
  const std::string& ref_name() const override { return name_; }

  Tensor value() {
    std::lock_guard<std::mutex> l(mu_);
    return value_.DeepCopy();
  }
  int mutations() {
    std::lock_guard<std::mutex> l(mu_);
    return mutations_;
  }

 private:
  std::mutex mu_;
  std::string name_;
  Tensor value_;
  int mutations_ = 0;
};

AttrMap BnAttrs(bool training, double eps = 1e-3, double momentum = 0.9) {
  return {{"epsilon", AttrValue(eps)},
          {"momentum", AttrValue(momentum)},
          {"is_training", AttrValue(training)}};
}

struct Moments {
  std::vector<double> mean, var;  // var biased
};

template <typename T>
Moments BatchMoments(const Tensor& x) {
  const int64_t c = x.dim(x.rank() - 1), m = x.num_elements() / c;
  Moments r{std::vector<double>(size_t(c), 0.0), std::vector<double>(size_t(c), 0.0)};
  for (int64_t i = 0; i < m; ++i)
    for (int64_t q = 0; q < c; ++q) r.mean[size_t(q)] += double(x.data<T>()[i * c + q]) / double(m);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t q = 0; q < c; ++q) {
      const double d = double(x.data<T>()[i * c + q]) - r.mean[size_t(q)];
      r.var[size_t(q)] += d * d / double(m);
    }
  return r;
}

template <typename T>
Tensor Vec(const std::vector<double>& v) {
  Tensor t(kDataTypeOf<T>, TensorShape({int64_t(v.size())}));
  for (size_t i = 0; i < v.size(); ++i) t.data<T>()[i] = T(v[i]);
  return t;
}

template <typename T>
Tensor Normalize(const Tensor& x, const Tensor& scale, const Tensor& offset,
                 const std::vector<double>& mean, const std::vector<double>& var, double eps) {
  const int64_t c = x.dim(x.rank() - 1);
  Tensor y(kDataTypeOf<T>, x.shape());
  for (int64_t i = 0; i < x.num_elements(); ++i) {
    const size_t q = size_t(i % c);
    y.data<T>()[i] = T((double(x.data<T>()[i]) - mean[q]) / std::sqrt(var[q] + eps) *
                           double(scale.data<T>()[q]) +
                       double(offset.data<T>()[q]));
  }
  return y;
}

// Inputs for BatchNorm: x, scale, offset and placeholders for the two refs.
template <typename T>
std::vector<Tensor> BnInputs(const Tensor& x, const Tensor& scale, const Tensor& offset) {
  const int64_t c = x.dim(x.rank() - 1);
  return {x, scale, offset, Tensor(kDataTypeOf<T>, TensorShape({c})),
          Tensor(kDataTypeOf<T>, TensorShape({c}))};
}

template <typename T>
double Tol() {
  return std::is_same_v<T, float> ? 2e-5 : 1e-11;
}

template <typename T>
void CheckTraining(const TensorShape& shape, uint64_t seed) {
  SCOPED_TRACE(shape.ToString() + (std::is_same_v<T, float> ? " float32" : " float64"));
  const int64_t c = shape.dim(shape.rank() - 1), m = shape.num_elements() / c;
  const double eps = 1e-3, mom = 0.9;
  const Tensor scale = RandomTensor<T>(TensorShape({c}), seed, 0.5, 2);
  const Tensor offset = RandomTensor<T>(TensorShape({c}), seed + 1);
  const Tensor mean0 = RandomTensor<T>(TensorShape({c}), seed + 2);
  const Tensor var0 = RandomTensor<T>(TensorShape({c}), seed + 3, 0.5, 2);
  TestVariable moving_mean("mm", mean0.DeepCopy()), moving_var("mv", var0.DeepCopy());
  std::vector<double> expect_mean(mean0.flat<T>().begin(), mean0.flat<T>().end());
  std::vector<double> expect_var(var0.flat<T>().begin(), var0.flat<T>().end());
  for (int step = 0; step < 2; ++step) {
    const Tensor x = RandomTensor<T>(shape, seed + 10 + step, -2, 3);
    auto r = RunOp("BatchNorm", BnInputs<T>(x, scale, offset), BnAttrs(true, eps, mom), nullptr,
                   {nullptr, nullptr, nullptr, &moving_mean, &moving_var});
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    ASSERT_EQ(r->size(), 5u);
    const Moments mo = BatchMoments<T>(x);
    std::vector<double> unbiased(mo.var), inv_std(mo.var);
    for (int64_t q = 0; q < c; ++q) {
      unbiased[size_t(q)] = mo.var[size_t(q)] * double(m) / double(m - 1);
      inv_std[size_t(q)] = 1 / std::sqrt(mo.var[size_t(q)] + eps);
      expect_mean[size_t(q)] = mom * expect_mean[size_t(q)] + (1 - mom) * mo.mean[size_t(q)];
      expect_var[size_t(q)] = mom * expect_var[size_t(q)] + (1 - mom) * unbiased[size_t(q)];
    }
    EXPECT_TRUE(TensorNear((*r)[0], Normalize<T>(x, scale, offset, mo.mean, mo.var, eps), Tol<T>(),
                           Tol<T>()));
    EXPECT_TRUE(TensorNear((*r)[1], Vec<T>(mo.mean), Tol<T>(), Tol<T>()));
    EXPECT_TRUE(TensorNear((*r)[2], Vec<T>(unbiased), Tol<T>(), Tol<T>()));
    EXPECT_TRUE(TensorNear((*r)[3], Vec<T>(mo.mean), Tol<T>(), Tol<T>()));
    EXPECT_TRUE(TensorNear((*r)[4], Vec<T>(inv_std), Tol<T>(), Tol<T>()));
    // The kernel itself moved the averages.
    EXPECT_TRUE(TensorNear(moving_mean.value(), Vec<T>(expect_mean), Tol<T>(), Tol<T>()));
    EXPECT_TRUE(TensorNear(moving_var.value(), Vec<T>(expect_var), Tol<T>(), Tol<T>()));
    EXPECT_EQ(moving_mean.mutations(), step + 1);
    EXPECT_EQ(moving_var.mutations(), step + 1);
  }
}

TEST(BatchNormOps, TrainingNormalizesWithBatchStatisticsAndUpdatesMovingAverages) {
  CheckTraining<float>(TensorShape({16, 5}), 1);
  CheckTraining<double>(TensorShape({16, 5}), 2);
  CheckTraining<float>(TensorShape({3, 5, 7, 4}), 3);
  CheckTraining<double>(TensorShape({3, 5, 7, 4}), 4);
  CheckTraining<float>(TensorShape({2, 3, 3, 17}), 5);
}

template <typename T>
void CheckInference(uint64_t seed) {
  SCOPED_TRACE((std::is_same_v<T, float> ? "float32" : "float64"));
  const int64_t c = 6;
  const double eps = 1e-2;
  const Tensor x = RandomTensor<T>(TensorShape({3, 4, 5, c}), seed, -2, 2);
  const Tensor scale = RandomTensor<T>(TensorShape({c}), seed + 1);
  const Tensor offset = RandomTensor<T>(TensorShape({c}), seed + 2);
  const Tensor mean = RandomTensor<T>(TensorShape({c}), seed + 3);
  const Tensor var = RandomTensor<T>(TensorShape({c}), seed + 4, 0.1, 2);
  TestVariable moving_mean("mm", mean.DeepCopy()), moving_var("mv", var.DeepCopy());
  auto r = RunOp("BatchNorm", BnInputs<T>(x, scale, offset), BnAttrs(false, eps), nullptr,
                 {nullptr, nullptr, nullptr, &moving_mean, &moving_var});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  std::vector<double> mv(mean.flat<T>().begin(), mean.flat<T>().end());
  std::vector<double> vv(var.flat<T>().begin(), var.flat<T>().end()), inv_std(vv);
  for (double& v : inv_std) v = 1 / std::sqrt(v + eps);
  EXPECT_TRUE(TensorNear((*r)[0], Normalize<T>(x, scale, offset, mv, vv, eps), Tol<T>(), Tol<T>()));
  EXPECT_TRUE(TensorEq((*r)[1], mean));
  EXPECT_TRUE(TensorEq((*r)[2], var));
  EXPECT_TRUE(TensorEq((*r)[3], mean));
  EXPECT_TRUE(TensorNear((*r)[4], Vec<T>(inv_std), Tol<T>(), Tol<T>()));
  // Nothing is written in inference.
  EXPECT_TRUE(TensorEq(moving_mean.value(), mean));
  EXPECT_TRUE(TensorEq(moving_var.value(), var));
  EXPECT_EQ(moving_mean.mutations() + moving_var.mutations(), 0);
}

TEST(BatchNormOps, InferenceUsesTheMovingAverages) {
  CheckInference<float>(20);
  CheckInference<double>(30);
}

TEST(BatchNormOps, UninitializedMovingMeanIsFailedPrecondition) {
  for (bool training : {true, false}) {
    TestVariable moving_mean("bn/moving_mean");
    TestVariable moving_var("bn/moving_variance", T1<float>({1, 1, 1}));
    const Tensor x = RandomTensor<float>(TensorShape({4, 3}), 1);
    auto r = RunOp("BatchNorm", BnInputs<float>(x, T1<float>({1, 1, 1}), T1<float>({0, 0, 0})),
                   BnAttrs(training), nullptr,
                   {nullptr, nullptr, nullptr, &moving_mean, &moving_var});
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), Code::kFailedPrecondition) << r.status().ToString();
    EXPECT_NE(r.status().message().find("bn/moving_mean"), std::string::npos);
    EXPECT_EQ(moving_var.mutations(), 0);  // checked before anything is written
  }
}

TEST(BatchNormOps, MisshapenMovingVarianceWritesNothing) {
  TestVariable moving_mean("mm", T1<double>({0, 0, 0}));
  TestVariable moving_var("mv", T1<double>({1, 1}));
  const Tensor x = RandomTensor<double>(TensorShape({4, 3}), 1);
  // The shape function (it sees the variable's shape) or the kernel refuses it.
  auto r = RunOp("BatchNorm", BnInputs<double>(x, T1<double>({1, 1, 1}), T1<double>({0, 0, 0})),
                 BnAttrs(true), nullptr, {nullptr, nullptr, nullptr, &moving_mean, &moving_var});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kInvalidArgument) << r.status().ToString();
  EXPECT_EQ(moving_mean.mutations() + moving_var.mutations(), 0);
  EXPECT_TRUE(TensorEq(moving_mean.value(), T1<double>({0, 0, 0})));
}

TEST(BatchNormOps, EmptyBatchGivesNanStatisticsAndKeepsTheAverages) {
  TestVariable moving_mean("mm", T1<float>({1, 2})), moving_var("mv", T1<float>({3, 4}));
  auto r = RunOp("BatchNorm",
                 BnInputs<float>(Tensor(DataType::kFloat32, TensorShape({0, 2})), T1<float>({1, 1}),
                                 T1<float>({0, 0})),
                 BnAttrs(true), nullptr, {nullptr, nullptr, nullptr, &moving_mean, &moving_var});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ((*r)[0].shape(), TensorShape({0, 2}));
  for (int i = 1; i < 5; ++i) EXPECT_TRUE(std::isnan((*r)[i].data<float>()[0])) << i;
  EXPECT_TRUE(TensorEq(moving_mean.value(), T1<float>({1, 2})));
  EXPECT_TRUE(TensorEq(moving_var.value(), T1<float>({3, 4})));
}

TEST(BatchNormOps, BatchOfOneHasZeroVariance) {
  TestVariable moving_mean("mm", T1<double>({0, 0})), moving_var("mv", T1<double>({1, 1}));
  auto r = RunOp("BatchNorm", BnInputs<double>(TS<double>({3, -1}, TensorShape({1, 2})),
                                               T1<double>({1, 1}), T1<double>({0, 0})),
                 BnAttrs(true, 1e-3, 0.5), nullptr,
                 {nullptr, nullptr, nullptr, &moving_mean, &moving_var});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(TensorNear((*r)[0], TS<double>({0, 0}, TensorShape({1, 2}))));
  EXPECT_TRUE(TensorNear((*r)[2], T1<double>({0, 0})));
  EXPECT_TRUE(TensorNear(moving_mean.value(), T1<double>({1.5, -0.5})));
  EXPECT_TRUE(TensorNear(moving_var.value(), T1<double>({0.5, 0.5})));
}

TEST(BatchNormOps, TwoThreadsMatchOne) {
  const TensorShape shape({32, 8, 8, 16});  // enough rows to be split
  const Tensor x = RandomTensor<float>(shape, 9, -1, 3);
  const Tensor scale = RandomTensor<float>(TensorShape({16}), 10);
  const Tensor offset = RandomTensor<float>(TensorShape({16}), 11);
  const Tensor dy = RandomTensor<float>(shape, 12);
  std::vector<std::vector<Tensor>> out;
  for (int threads : {1, 2}) {
    TestVariable mm("mm", T1<float>(std::vector<float>(16, 0.f)));
    TestVariable mv("mv", T1<float>(std::vector<float>(16, 1.f)));
    auto r = RunOp("BatchNorm", BnInputs<float>(x, scale, offset), BnAttrs(true),
                   CpuTestDevice(threads), {nullptr, nullptr, nullptr, &mm, &mv});
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    auto g = RunOp("BatchNormGrad", {dy, x, scale, (*r)[3], (*r)[4]}, {{"is_training", AttrValue(true)}},
                   CpuTestDevice(threads));
    ASSERT_TRUE(g.ok()) << g.status().ToString();
    std::vector<Tensor> all = *r;
    all.insert(all.end(), g->begin(), g->end());
    all.push_back(mm.value());
    all.push_back(mv.value());
    out.push_back(all);
  }
  for (size_t i = 0; i < out[0].size(); ++i) {
    EXPECT_TRUE(TensorNear(out[1][i], out[0][i], 1e-5, 1e-4)) << "output " << i;
  }
}

// BatchNormGrad's outputs from the formulas, in double.
template <typename T>
std::vector<Tensor> RefGrad(const Tensor& dy, const Tensor& x, const Tensor& scale,
                            const Tensor& mean, const Tensor& inv_std, bool training) {
  const int64_t c = x.dim(x.rank() - 1), m = x.num_elements() / c;
  std::vector<double> sdy(size_t(c), 0.0), sdyx(size_t(c), 0.0);
  auto xhat = [&](int64_t i) {
    const int64_t q = i % c;
    return (double(x.data<T>()[i]) - double(mean.data<T>()[q])) * double(inv_std.data<T>()[q]);
  };
  for (int64_t i = 0; i < x.num_elements(); ++i) {
    sdy[size_t(i % c)] += double(dy.data<T>()[i]);
    sdyx[size_t(i % c)] += double(dy.data<T>()[i]) * xhat(i);
  }
  Tensor dx(kDataTypeOf<T>, x.shape());
  for (int64_t i = 0; i < x.num_elements(); ++i) {
    const int64_t q = i % c;
    const double k = double(scale.data<T>()[q]) * double(inv_std.data<T>()[q]);
    double v = double(dy.data<T>()[i]);
    if (training) v -= sdy[size_t(q)] / double(m) + xhat(i) * sdyx[size_t(q)] / double(m);
    dx.data<T>()[i] = T(k * v);
  }
  return {dx, Vec<T>(sdyx), Vec<T>(sdy)};
}

template <typename T>
void CheckGradFormulas(bool training, uint64_t seed) {
  SCOPED_TRACE(std::string(std::is_same_v<T, float> ? "float32" : "float64") +
               (training ? " training" : " inference"));
  const TensorShape shape({3, 4, 5, 7});
  const Tensor x = RandomTensor<T>(shape, seed, -1, 2);
  const Tensor dy = RandomTensor<T>(shape, seed + 1);
  const Tensor scale = RandomTensor<T>(TensorShape({7}), seed + 2);
  const Moments mo = BatchMoments<T>(x);
  std::vector<double> inv(mo.var);
  for (double& v : inv) v = 1 / std::sqrt(v + 1e-3);
  const Tensor mean = Vec<T>(mo.mean), inv_std = Vec<T>(inv);
  auto r = RunOp("BatchNormGrad", {dy, x, scale, mean, inv_std},
                 {{"is_training", AttrValue(training)}});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const std::vector<Tensor> ref = RefGrad<T>(dy, x, scale, mean, inv_std, training);
  for (int i = 0; i < 3; ++i) {
    EXPECT_TRUE(TensorNear((*r)[i], ref[i], Tol<T>() * 10, Tol<T>() * 10)) << "output " << i;
  }
  // Empty batch: zero sums, empty x_backprop.
  const Tensor empty(kDataTypeOf<T>, TensorShape({0, 7}));
  auto e = RunOp("BatchNormGrad", {empty, empty, scale, mean, inv_std},
                 {{"is_training", AttrValue(training)}});
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  EXPECT_EQ((*e)[0].shape(), TensorShape({0, 7}));
  EXPECT_TRUE(TensorEq((*e)[1], Vec<T>(std::vector<double>(7, 0.0))));
}

TEST(BatchNormOps, GradMatchesFormulas) {
  CheckGradFormulas<float>(true, 40);
  CheckGradFormulas<float>(false, 50);
  CheckGradFormulas<double>(true, 60);
  CheckGradFormulas<double>(false, 70);
}

// d<BatchNorm(x, scale, offset), dy>/d(x, scale, offset) by central
// differences, against BatchNormGrad fed BatchNorm's saved statistics.
TEST(BatchNormOps, GradMatchesCentralDifferences) {
  for (bool training : {true, false}) {
    SCOPED_TRACE(training ? "training" : "inference");
    const TensorShape shape({2, 3, 2, 3});
    Tensor x = RandomTensor<double>(shape, 80, -1, 2);
    Tensor scale = RandomTensor<double>(TensorShape({3}), 81, 0.5, 2);
    Tensor offset = RandomTensor<double>(TensorShape({3}), 82);
    const Tensor dy = RandomTensor<double>(shape, 83);
    auto forward = [&](std::vector<Tensor>* outs) {
      TestVariable mm("mm", T1<double>({0.1, -0.2, 0.3})), mv("mv", T1<double>({0.5, 1.5, 2}));
      auto r = RunOp("BatchNorm", BnInputs<double>(x, scale, offset), BnAttrs(training), nullptr,
                     {nullptr, nullptr, nullptr, &mm, &mv});
      EXPECT_TRUE(r.ok()) << r.status().ToString();
      if (outs != nullptr) *outs = *r;
      double loss = 0;
      for (int64_t i = 0; i < dy.num_elements(); ++i) {
        loss += (*r)[0].data<double>()[i] * dy.data<double>()[i];
      }
      return loss;
    };
    std::vector<Tensor> outs;
    forward(&outs);
    auto g = RunOp("BatchNormGrad", {dy, x, scale, outs[3], outs[4]},
                   {{"is_training", AttrValue(training)}});
    ASSERT_TRUE(g.ok()) << g.status().ToString();
    Tensor* params[3] = {&x, &scale, &offset};
    for (int p = 0; p < 3; ++p) {
      for (int64_t i = 0; i < params[p]->num_elements(); ++i) {
        double& v = params[p]->data<double>()[i];
        const double keep = v, h = 1e-5;
        v = keep + h;
        const double up = forward(nullptr);
        v = keep - h;
        const double down = forward(nullptr);
        v = keep;
        EXPECT_NEAR((*g)[p].data<double>()[i], (up - down) / (2 * h), 1e-6)
            << "input " << p << " element " << i;
      }
    }
  }
}

void ExpectInvalid(const StatusOr<std::vector<Tensor>>& r, const std::string& what) {
  ASSERT_FALSE(r.ok()) << what;
  EXPECT_EQ(r.status().code(), Code::kInvalidArgument) << what << ": " << r.status().ToString();
  EXPECT_EQ(r.status().node(), "op") << what;
}

TEST(BatchNormOps, RejectsBadInputs) {
  TestVariable mm("mm", T1<float>({0, 0, 0})), mv("mv", T1<float>({1, 1, 1}));
  const std::vector<TensorRef*> refs = {nullptr, nullptr, nullptr, &mm, &mv};
  const Tensor x = RandomTensor<float>(TensorShape({4, 3}), 1);
  const Tensor v3 = T1<float>({1, 1, 1}), v2 = T1<float>({1, 1});
  ExpectInvalid(RunOp("BatchNorm", BnInputs<float>(T1<float>({1, 2, 3}), v3, v3), BnAttrs(true),
                      nullptr, refs),
                "rank-1 x");
  ExpectInvalid(RunOp("BatchNorm", {x, v2, v3, v3, v3}, BnAttrs(true), nullptr, refs),
                "short scale");
  ExpectInvalid(RunOp("BatchNorm", BnInputs<float>(x, v3, v3), BnAttrs(true, -1), nullptr, refs),
                "negative epsilon");
  EXPECT_EQ(mm.mutations() + mv.mutations(), 0);
  ExpectInvalid(RunOpOnFedInputs("BatchNormGrad", {RandomTensor<float>(TensorShape({4, 2}), 1), x,
                                                   v3, v3, v3}),
                "y_backprop shape");
  ExpectInvalid(RunOpOnFedInputs("BatchNormGrad", {x, x, v3, v3, v2}), "short saved_inv_std");
  ExpectInvalid(RunOpOnFedInputs("BatchNormGrad", {T1<float>({1}), T1<float>({1}), v3, v3, v3}),
                "rank-1 x");
}

}  // namespace
}  // namespace flowstate::test

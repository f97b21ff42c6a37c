// MaxPool, MaxPoolGrad, AvgPool and AvgPoolGrad against direct references,
// float32 and float64: SAME/VALID, strides 1, 2 and 3, windows of 1 to 3,
// odd sizes, batches of 0, 1 and 3, several channels; ties (the first
// maximum of a window wins, as in TensorFlow); the gradients as adjoints of
// the forward ops; one thread against two; and the errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "tests/devices/fed_inputs_util.h"
#include "tests/util/op_test_util.h"

namespace flowstate::test {
namespace {

struct PoolCase {
  int64_t n, h, w, c, kh, kw, sh, sw;
  bool same;
  std::string Name() const {
    return "n" + std::to_string(n) + " " + std::to_string(h) + "x" + std::to_string(w) + "x" +
           std::to_string(c) + " k" + std::to_string(kh) + "x" + std::to_string(kw) + " s" +
           std::to_string(sh) + std::to_string(sw) + (same ? " SAME" : " VALID");
  }
};

void OutAndPad(int64_t in, int64_t k, int64_t s, bool same, int64_t* out, int64_t* pad) {
  if (!same) {
    *out = in >= k ? (in - k) / s + 1 : 0;
    *pad = 0;
    return;
  }
  *out = (in + s - 1) / s;
  *pad = std::max<int64_t>((*out - 1) * s + k - in, 0) / 2;
}

AttrMap PoolAttrs(const PoolCase& t) {
  return {{"ksize", AttrValue(std::vector<int64_t>{1, t.kh, t.kw, 1})},
          {"strides", AttrValue(std::vector<int64_t>{1, t.sh, t.sw, 1})},
          {"padding", AttrValue(t.same ? "SAME" : "VALID")}};
}

// For each output element: the input indices of its window's valid cells in
// row-major order; and the output shape.
std::vector<std::vector<int64_t>> Windows(const PoolCase& t, TensorShape* out_shape) {
  int64_t oh, ow, pt, pl;
  OutAndPad(t.h, t.kh, t.sh, t.same, &oh, &pt);
  OutAndPad(t.w, t.kw, t.sw, t.same, &ow, &pl);
  *out_shape = TensorShape({t.n, oh, ow, t.c});
  std::vector<std::vector<int64_t>> win;
  for (int64_t n = 0; n < t.n; ++n)
    for (int64_t i = 0; i < oh; ++i)
      for (int64_t j = 0; j < ow; ++j)
        for (int64_t c = 0; c < t.c; ++c) {
          std::vector<int64_t> cells;
          for (int64_t a = 0; a < t.kh; ++a)
            for (int64_t b = 0; b < t.kw; ++b) {
              const int64_t ih = i * t.sh - pt + a, iw = j * t.sw - pl + b;
              if (ih >= 0 && ih < t.h && iw >= 0 && iw < t.w) {
                cells.push_back(((n * t.h + ih) * t.w + iw) * t.c + c);
              }
            }
          win.push_back(cells);
        }
  return win;
}

struct PoolRefs {
  Tensor max, avg, max_grad, avg_grad;
};

template <typename T>
PoolRefs Reference(const PoolCase& t, const Tensor& x, const Tensor& g) {
  TensorShape os;
  const auto win = Windows(t, &os);
  std::vector<double> mx(win.size()), av(win.size());
  std::vector<double> dmx(size_t(x.num_elements()), 0.0), dav(size_t(x.num_elements()), 0.0);
  const T* xd = x.data<T>();
  for (size_t o = 0; o < win.size(); ++o) {
    int64_t best = win[o][0];
    double sum = 0;
    for (int64_t i : win[o]) {
      if (xd[i] > xd[best]) best = i;  // strictly greater: the first maximum stays
      sum += double(xd[i]);
    }
    mx[o] = double(xd[best]);
    av[o] = sum / double(win[o].size());
    const double go = g.ElementAsDouble(int64_t(o));
    dmx[size_t(best)] += go;
    for (int64_t i : win[o]) dav[size_t(i)] += go / double(win[o].size());
  }
  auto make = [](const std::vector<double>& v, const TensorShape& s) {
    Tensor r(kDataTypeOf<T>, s);
    for (size_t i = 0; i < v.size(); ++i) r.data<T>()[i] = T(v[i]);
    return r;
  };
  return {make(mx, os), make(av, os), make(dmx, x.shape()), make(dav, x.shape())};
}

Tensor Sizes(const TensorShape& s) {
  return T1<int32_t>({int32_t(s.dim(0)), int32_t(s.dim(1)), int32_t(s.dim(2)), int32_t(s.dim(3))});
}

struct PoolResults {
  Tensor max, avg, max_grad, avg_grad;
};

template <typename T>
PoolResults RunAll(const PoolCase& t, const Tensor& x, const Tensor& g, Device* device) {
  PoolResults r;
  r.max = RunOp1("MaxPool", {x}, PoolAttrs(t), device);
  r.avg = RunOp1("AvgPool", {x}, PoolAttrs(t), device);
  r.max_grad = RunOp1("MaxPoolGrad", {x, r.max, g}, PoolAttrs(t), device);
  r.avg_grad = RunOp1("AvgPoolGrad", {Sizes(x.shape()), g}, PoolAttrs(t), device);
  return r;
}

double Dot(const Tensor& a, const Tensor& b) {
  double s = 0;
  for (int64_t i = 0; i < a.num_elements(); ++i) s += a.ElementAsDouble(i) * b.ElementAsDouble(i);
  return s;
}

// `ties`: inputs drawn from {-1, 0, 1}, so windows often hold several maxima.
template <typename T>
void CheckCase(const PoolCase& t, uint64_t seed, bool ties) {
  SCOPED_TRACE(t.Name() + (std::is_same_v<T, float> ? " float32" : " float64") +
               (ties ? " ties" : ""));
  Tensor x = RandomTensor<T>(TensorShape({t.n, t.h, t.w, t.c}), seed);
  if (ties) {
    for (T& v : x.flat<T>()) v = std::round(v);
  }
  TensorShape os;
  Windows(t, &os);
  const Tensor g = RandomTensor<T>(os, seed + 1);
  const PoolRefs ref = Reference<T>(t, x, g);
  const PoolResults r = RunAll<T>(t, x, g, CpuTestDevice(1));
  const double tol = std::is_same_v<T, float> ? 1e-6 : 1e-14;
  EXPECT_TRUE(TensorEq(r.max, ref.max));
  EXPECT_TRUE(TensorNear(r.avg, ref.avg, 1e-5, tol * 10));
  EXPECT_TRUE(TensorNear(r.max_grad, ref.max_grad, 1e-5, tol * 10));
  EXPECT_TRUE(TensorNear(r.avg_grad, ref.avg_grad, 1e-5, tol * 10));
  // The gradients are the adjoints of the (locally linear) forward maps.
  const double scale = std::max(1.0, double(g.num_elements()));
  EXPECT_NEAR(Dot(r.max, g), Dot(x, r.max_grad), 1e-5 * scale);
  EXPECT_NEAR(Dot(r.avg, g), Dot(x, r.avg_grad), 1e-5 * scale);

  const PoolResults r2 = RunAll<T>(t, x, g, CpuTestDevice(2));
  EXPECT_TRUE(TensorEq(r2.max, r.max));
  EXPECT_TRUE(TensorEq(r2.avg, r.avg));
  EXPECT_TRUE(TensorEq(r2.max_grad, r.max_grad));
  EXPECT_TRUE(TensorEq(r2.avg_grad, r.avg_grad));
}

const PoolCase kCases[] = {
    // n  h   w   c  kh kw sh sw same
    {1, 4, 4, 1, 2, 2, 2, 2, false},
    {3, 7, 5, 3, 2, 2, 2, 2, false},   // odd sizes drop the last row/column
    {3, 7, 5, 3, 2, 2, 2, 2, true},    // ... SAME keeps them, half windows
    {2, 9, 8, 5, 3, 3, 2, 2, true},
    {2, 9, 8, 5, 3, 3, 1, 1, true},    // overlapping windows
    {2, 6, 7, 4, 3, 2, 1, 2, false},
    {1, 10, 11, 17, 3, 3, 3, 3, true}, // odd channel count, stride 3
    {3, 5, 5, 2, 1, 1, 1, 1, false},   // 1x1 window: the identity
    {2, 5, 6, 3, 1, 1, 2, 2, true},
    {0, 4, 4, 3, 2, 2, 2, 2, true},    // empty batch
    {3, 28, 28, 32, 2, 2, 2, 2, true}, // the CNN's first pool, smaller batch
};

TEST(PoolOps, Float32MatchesReference) {
  uint64_t seed = 1;
  for (const PoolCase& t : kCases) {
    CheckCase<float>(t, seed += 10, false);
    CheckCase<float>(t, seed += 10, true);
  }
}

TEST(PoolOps, Float64MatchesReference) {
  uint64_t seed = 1000;
  for (const PoolCase& t : kCases) {
    CheckCase<double>(t, seed += 10, false);
    CheckCase<double>(t, seed += 10, true);
  }
}

TEST(PoolOps, MaxPoolGradRoutesTiesToTheFirstMaximum) {
  const PoolCase t{1, 2, 3, 1, 2, 2, 1, 1, false};  // two overlapping windows
  const Tensor x = TS<float>({1, 5, 5, 2, 5, 0}, TensorShape({1, 2, 3, 1}));
  const Tensor y = RunOp1("MaxPool", {x}, PoolAttrs(t));
  EXPECT_TRUE(TensorEq(y, TS<float>({5, 5}, TensorShape({1, 1, 2, 1}))));
  const Tensor dx = RunOp1("MaxPoolGrad", {x, y, TS<float>({1, 10}, TensorShape({1, 1, 2, 1}))},
                           PoolAttrs(t));
  // Window 0 holds 5 at (0,1) and (1,1): (0,1) wins; window 1 holds 5 at
  // (0,1), (0,2) and (1,1): (0,1) wins again.
  EXPECT_TRUE(TensorEq(dx, TS<float>({0, 11, 0, 0, 0, 0}, TensorShape({1, 2, 3, 1}))));
}

TEST(PoolOps, AvgPoolSameAveragesValidCellsOnly) {
  const PoolCase t{1, 3, 3, 1, 2, 2, 2, 2, true};
  const Tensor x = TS<double>({1, 2, 3, 4, 5, 6, 7, 8, 9}, TensorShape({1, 3, 3, 1}));
  EXPECT_TRUE(TensorNear(RunOp1("AvgPool", {x}, PoolAttrs(t)),
                         TS<double>({3, 4.5, 7.5, 9}, TensorShape({1, 2, 2, 1}))));
  const Tensor dx = RunOp1("AvgPoolGrad", {T1<int32_t>({1, 3, 3, 1}),
                                           TS<double>({4, 2, 2, 1}, TensorShape({1, 2, 2, 1}))},
                           PoolAttrs(t));
  EXPECT_TRUE(TensorNear(dx, TS<double>({1, 1, 1, 1, 1, 1, 1, 1, 1}, TensorShape({1, 3, 3, 1}))));
}

void ExpectInvalid(const StatusOr<std::vector<Tensor>>& r, const std::string& what) {
  ASSERT_FALSE(r.ok()) << what;
  EXPECT_EQ(r.status().code(), Code::kInvalidArgument) << what << ": " << r.status().ToString();
  EXPECT_EQ(r.status().node(), "op") << what;
}

TEST(PoolOps, RejectsBadInputs) {
  const PoolCase t{2, 4, 4, 3, 2, 2, 2, 2, false};
  const AttrMap a = PoolAttrs(t);
  const Tensor x = RandomTensor<float>(TensorShape({2, 4, 4, 3}), 1);
  const Tensor y = RandomTensor<float>(TensorShape({2, 2, 2, 3}), 2);
  const Tensor bad = RandomTensor<float>(TensorShape({2, 2, 3, 3}), 3);
  ExpectInvalid(RunOpOnFedInputs("MaxPool", {RandomTensor<float>(TensorShape({4, 4, 3}), 1)}, a),
                "rank-3 MaxPool input");
  ExpectInvalid(RunOpOnFedInputs("AvgPool", {RandomTensor<float>(TensorShape({4, 3}), 1)}, a),
                "rank-2 AvgPool input");
  ExpectInvalid(RunOpOnFedInputs("MaxPoolGrad", {x, bad, y}, a), "orig_output shape");
  ExpectInvalid(RunOpOnFedInputs("MaxPoolGrad", {x, y, bad}, a), "grad shape");
  ExpectInvalid(RunOpOnFedInputs("MaxPoolGrad", {RandomTensor<float>(TensorShape({4, 4, 3}), 1), y, y}, a),
                "rank-3 orig_input");
  ExpectInvalid(RunOpOnFedInputs("AvgPoolGrad", {T1<int32_t>({2, 4, 4}), y}, a),
                "orig_input_shape of 3 entries");
  ExpectInvalid(RunOpOnFedInputs("AvgPoolGrad", {T1<int32_t>({2, -4, 4, 3}), y}, a),
                "negative orig_input_shape");
  ExpectInvalid(RunOpOnFedInputs("AvgPoolGrad", {T1<int32_t>({2, 4, 4, 3}), bad}, a),
                "AvgPoolGrad grad shape");
  auto with = [&](const char* name, std::vector<int64_t> v) {
    AttrMap b = a;
    b[name] = AttrValue(std::move(v));
    return b;
  };
  ExpectInvalid(RunOp("MaxPool", {x}, with("ksize", {1, 0, 2, 1})), "zero ksize");
  ExpectInvalid(RunOp("MaxPool", {x}, with("ksize", {2, 2, 2, 1})), "batch ksize");
  ExpectInvalid(RunOp("AvgPool", {x}, with("strides", {1, 2, 2})), "3 strides");
  AttrMap p = a;
  p["padding"] = AttrValue("REFLECT");
  ExpectInvalid(RunOp("AvgPool", {x}, p), "padding");
}

}  // namespace
}  // namespace flowstate::test

// Conv2D, Conv2DBackpropInput and Conv2DBackpropFilter against direct
// nested-loop references in double, for float32 (oneDNN when built with it)
// and float64 (im2col + Eigen): SAME/VALID, strides 1 and 2, dilation 2, odd
// sizes, batches of 0, 1 and 3 (and sizes that split unevenly over two
// threads), 1x1 filters, windows larger than the input, grouped and
// depthwise convolutions (float64: group by group through the GEMM path). The backprops are
// also checked as the exact adjoints of the forward convolution:
// <conv(x, f), dy> = <x, backprop_input(f, dy)> = <f, backprop_filter(x, dy)>.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "tests/devices/fed_inputs_util.h"
#include "tests/util/op_test_util.h"

namespace flowstate::test {
namespace {

struct ConvCase {
  int64_t n, h, w, c, kh, kw, o;
  int64_t sh, sw, dh, dw;
  bool same;
  int64_t groups = 1;  // the filter has c / groups input channels
  int64_t cg() const { return c / groups; }

  std::string Name() const {
    return "n" + std::to_string(n) + " " + std::to_string(h) + "x" + std::to_string(w) + "x" +
           std::to_string(c) + " k" + std::to_string(kh) + "x" + std::to_string(kw) + "->" +
           std::to_string(o) + " s" + std::to_string(sh) + std::to_string(sw) + " d" +
           std::to_string(dh) + std::to_string(dw) + (same ? " SAME" : " VALID") +
           (groups > 1 ? " groups " + std::to_string(groups) : "");
  }
};

// TensorFlow's arithmetic for one dimension: output size and padding before.
void OutAndPad(int64_t in, int64_t k, int64_t s, int64_t d, bool same, int64_t* out,
               int64_t* pad) {
  const int64_t eff = (k - 1) * d + 1;
  if (!same) {
    *out = in >= eff ? (in - eff) / s + 1 : 0;
    *pad = 0;
    return;
  }
  *out = (in + s - 1) / s;
  *pad = std::max<int64_t>((*out - 1) * s + eff - in, 0) / 2;
}

struct Geom {
  int64_t oh, ow, pt, pl;
};
Geom GeomOf(const ConvCase& t) {
  Geom g;
  OutAndPad(t.h, t.kh, t.sh, t.dh, t.same, &g.oh, &g.pt);
  OutAndPad(t.w, t.kw, t.sw, t.dw, t.same, &g.ow, &g.pl);
  return g;
}

AttrMap ConvAttrs(const ConvCase& t) {
  return {{"strides", AttrValue(std::vector<int64_t>{1, t.sh, t.sw, 1})},
          {"dilations", AttrValue(std::vector<int64_t>{1, t.dh, t.dw, 1})},
          {"padding", AttrValue(t.same ? "SAME" : "VALID")}};
}

// Calls fn(x_index, f_index, y_index) for every multiply-add of the
// convolution.
template <typename F>
void ForEachTap(const ConvCase& t, const F& fn) {
  const Geom g = GeomOf(t);
  for (int64_t n = 0; n < t.n; ++n)
    for (int64_t i = 0; i < g.oh; ++i)
      for (int64_t j = 0; j < g.ow; ++j)
        for (int64_t a = 0; a < t.kh; ++a)
          for (int64_t b = 0; b < t.kw; ++b) {
            const int64_t ih = i * t.sh - g.pt + a * t.dh, iw = j * t.sw - g.pl + b * t.dw;
            if (ih < 0 || ih >= t.h || iw < 0 || iw >= t.w) continue;
            for (int64_t o = 0; o < t.o; ++o)
              for (int64_t ci = 0; ci < t.cg(); ++ci) {
                const int64_t c = o / (t.o / t.groups) * t.cg() + ci;  // of o's group
                fn(((n * t.h + ih) * t.w + iw) * t.c + c, ((a * t.kw + b) * t.cg() + ci) * t.o + o,
                   ((n * g.oh + i) * g.ow + j) * t.o + o);
              }
          }
}

template <typename T>
Tensor FromDoubles(const std::vector<double>& v, const TensorShape& s) {
  Tensor out(kDataTypeOf<T>, s);
  for (size_t i = 0; i < v.size(); ++i) out.data<T>()[i] = T(v[i]);
  return out;
}

template <typename T>
Tensor RefConv(const ConvCase& t, const Tensor& x, const Tensor& f) {
  const Geom g = GeomOf(t);
  std::vector<double> y(size_t(t.n * g.oh * g.ow * t.o), 0.0);
  ForEachTap(t, [&](int64_t xi, int64_t fi, int64_t yi) {
    y[size_t(yi)] += double(x.data<T>()[xi]) * double(f.data<T>()[fi]);
  });
  return FromDoubles<T>(y, TensorShape({t.n, g.oh, g.ow, t.o}));
}

template <typename T>
Tensor RefBackpropInput(const ConvCase& t, const Tensor& f, const Tensor& dy) {
  std::vector<double> dx(size_t(t.n * t.h * t.w * t.c), 0.0);
  ForEachTap(t, [&](int64_t xi, int64_t fi, int64_t yi) {
    dx[size_t(xi)] += double(f.data<T>()[fi]) * double(dy.data<T>()[yi]);
  });
  return FromDoubles<T>(dx, TensorShape({t.n, t.h, t.w, t.c}));
}

template <typename T>
Tensor RefBackpropFilter(const ConvCase& t, const Tensor& x, const Tensor& dy) {
  std::vector<double> df(size_t(t.kh * t.kw * t.cg() * t.o), 0.0);
  ForEachTap(t, [&](int64_t xi, int64_t fi, int64_t yi) {
    df[size_t(fi)] += double(x.data<T>()[xi]) * double(dy.data<T>()[yi]);
  });
  return FromDoubles<T>(df, TensorShape({t.kh, t.kw, t.cg(), t.o}));
}

Tensor Sizes(std::vector<int64_t> d) {
  return T1<int32_t>({int32_t(d[0]), int32_t(d[1]), int32_t(d[2]), int32_t(d[3])});
}

// Σ a·b and Σ |a·b| (for a tolerance).
std::pair<double, double> Dot(const Tensor& a, const Tensor& b) {
  double s = 0, m = 0;
  for (int64_t i = 0; i < a.num_elements(); ++i) {
    const double p = a.ElementAsDouble(i) * b.ElementAsDouble(i);
    s += p;
    m += std::abs(p);
  }
  return {s, m};
}

template <typename T>
double Atol(int64_t terms) {
  return (std::is_same_v<T, float> ? 3e-6 : 1e-13) * double(std::max<int64_t>(terms, 1));
}

struct ConvResults {
  Tensor y, dx, df;
};

template <typename T>
ConvResults RunAll(const ConvCase& t, const Tensor& x, const Tensor& f, const Tensor& dy,
                   Device* device) {
  ConvResults r;
  r.y = RunOp1("Conv2D", {x, f}, ConvAttrs(t), device);
  r.dx = RunOp1("Conv2DBackpropInput", {Sizes({t.n, t.h, t.w, t.c}), f, dy}, ConvAttrs(t), device);
  r.df = RunOp1("Conv2DBackpropFilter", {x, Sizes({t.kh, t.kw, t.cg(), t.o}), dy}, ConvAttrs(t),
                device);
  return r;
}

template <typename T>
void CheckCase(const ConvCase& t, uint64_t seed) {
  SCOPED_TRACE(t.Name() + (std::is_same_v<T, float> ? " float32" : " float64"));
  const Geom g = GeomOf(t);
  const Tensor x = RandomTensor<T>(TensorShape({t.n, t.h, t.w, t.c}), seed);
  const Tensor f = RandomTensor<T>(TensorShape({t.kh, t.kw, t.cg(), t.o}), seed + 1);
  const Tensor dy = RandomTensor<T>(TensorShape({t.n, g.oh, g.ow, t.o}), seed + 2);
  const ConvResults r = RunAll<T>(t, x, f, dy, CpuTestDevice(1));
  const int64_t k = t.kh * t.kw * t.cg();
  EXPECT_TRUE(TensorNear(r.y, RefConv<T>(t, x, f), 1e-5, Atol<T>(k)));
  EXPECT_TRUE(TensorNear(r.dx, RefBackpropInput<T>(t, f, dy), 1e-5, Atol<T>(t.kh * t.kw * t.o)));
  EXPECT_TRUE(TensorNear(r.df, RefBackpropFilter<T>(t, x, dy), 1e-5,
                         Atol<T>(t.n * g.oh * g.ow)));

  // The backprops are the adjoints of the forward map.
  const auto [ydy, ydy_abs] = Dot(r.y, dy);
  const auto [xdx, xdx_abs] = Dot(x, r.dx);
  const auto [fdf, fdf_abs] = Dot(f, r.df);
  const double tol = (std::is_same_v<T, float> ? 1e-5 : 1e-12) * (ydy_abs + xdx_abs + fdf_abs + 1);
  EXPECT_NEAR(xdx, ydy, tol);
  EXPECT_NEAR(fdf, ydy, tol);

  // Two threads give the same results within rounding.
  const ConvResults r2 = RunAll<T>(t, x, f, dy, CpuTestDevice(2));
  EXPECT_TRUE(TensorNear(r2.y, r.y, 1e-5, Atol<T>(k)));
  EXPECT_TRUE(TensorNear(r2.dx, r.dx, 1e-5, Atol<T>(t.kh * t.kw * t.o)));
  EXPECT_TRUE(TensorNear(r2.df, r.df, 1e-5, Atol<T>(t.n * g.oh * g.ow)));
}

const ConvCase kCases[] = {
    // n  h   w   c  kh kw o  sh sw dh dw same
    {1, 5, 5, 1, 3, 3, 1, 1, 1, 1, 1, true},
    {3, 7, 6, 3, 3, 2, 4, 1, 1, 1, 1, false},
    {3, 7, 9, 2, 3, 3, 5, 2, 2, 1, 1, true},    // odd sizes, stride 2
    {2, 8, 7, 3, 3, 3, 2, 2, 1, 1, 1, false},   // mixed strides
    {2, 6, 6, 2, 2, 2, 3, 1, 1, 1, 1, true},    // even filter: padding after only
    {2, 7, 7, 2, 4, 4, 3, 2, 2, 1, 1, true},    // pads 1 before, 2 after
    {2, 9, 9, 2, 3, 3, 3, 1, 1, 2, 2, true},    // dilation 2
    {1, 10, 8, 3, 2, 3, 2, 1, 2, 2, 1, false},  // mixed dilations and strides
    {3, 6, 6, 4, 1, 1, 5, 1, 1, 1, 1, false},   // 1x1: a plain product
    {3, 6, 6, 4, 1, 1, 5, 1, 1, 1, 1, true},
    {2, 7, 7, 3, 1, 1, 2, 2, 2, 1, 1, true},    // 1x1 strided
    {0, 5, 5, 2, 3, 3, 3, 1, 1, 1, 1, true},    // empty batch
    {2, 2, 2, 1, 3, 3, 2, 1, 1, 1, 1, false},   // window larger than the input
    {3, 28, 28, 1, 5, 5, 8, 1, 1, 1, 1, true},  // the CNN's first layer, narrower
    {7, 14, 14, 16, 5, 5, 16, 1, 1, 1, 1, true},  // splits 3 + 4 over two threads
    {5, 11, 13, 17, 3, 3, 20, 2, 2, 1, 1, true},  // channels that fit no vector width
    // Grouped (TensorFlow's rule: groups = c / the filter's input channels).
    {2, 7, 7, 4, 3, 3, 6, 1, 1, 1, 1, true, 2},     // 2 groups of 2 -> 3
    {3, 9, 8, 6, 3, 3, 6, 2, 2, 1, 1, true, 3},     // 3 groups, stride 2
    {2, 8, 8, 8, 3, 3, 8, 1, 1, 1, 1, true, 8},     // depthwise 3x3
    {3, 11, 9, 12, 3, 3, 12, 2, 2, 1, 1, true, 12}, // depthwise, stride 2, odd sizes
    {2, 9, 9, 5, 3, 3, 10, 1, 1, 2, 2, false, 5},   // depthwise, multiplier 2, dilation 2
    {7, 6, 6, 32, 3, 3, 32, 1, 1, 1, 1, true, 32},  // MobileNet's width; splits over two threads
};

TEST(ConvOps, Float32MatchesDirectReference) {
  uint64_t seed = 100;
  for (const ConvCase& t : kCases) CheckCase<float>(t, seed += 10);
}

TEST(ConvOps, Float64MatchesDirectReference) {
  uint64_t seed = 500;
  for (const ConvCase& t : kCases) CheckCase<double>(t, seed += 10);
}

// The same kernel instance sees several shapes in turn (its primitive cache).
TEST(ConvOps, ShapesChangeBetweenCalls) {
  const ConvCase t1{2, 9, 9, 3, 3, 3, 4, 1, 1, 1, 1, true};
  const ConvCase t2{3, 12, 10, 3, 3, 3, 4, 2, 2, 1, 1, true};
  for (const ConvCase& t : {t1, t2, t1}) {
    const Tensor x = RandomTensor<float>(TensorShape({t.n, t.h, t.w, t.c}), 7);
    const Tensor f = RandomTensor<float>(TensorShape({t.kh, t.kw, t.c, t.o}), 8);
    auto r = RunOpOnFedInputs("Conv2D", {x, f}, ConvAttrs(t));
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_TRUE(TensorNear((*r)[0], RefConv<float>(t, x, f), 1e-5, Atol<float>(27)));
  }
}

void ExpectInvalid(const StatusOr<std::vector<Tensor>>& r, const std::string& what) {
  ASSERT_FALSE(r.ok()) << what;
  EXPECT_EQ(r.status().code(), Code::kInvalidArgument) << what << ": " << r.status().ToString();
  EXPECT_EQ(r.status().node(), "op") << what;
}

TEST(ConvOps, RejectsBadInputs) {
  const ConvCase t{2, 5, 5, 3, 3, 3, 4, 1, 1, 1, 1, true};
  const AttrMap a = ConvAttrs(t);
  const Tensor x = RandomTensor<float>(TensorShape({2, 5, 5, 3}), 1);
  const Tensor f = RandomTensor<float>(TensorShape({3, 3, 3, 4}), 2);
  const Tensor dy = RandomTensor<float>(TensorShape({2, 5, 5, 4}), 3);
  // Checked by the kernels themselves (inputs fed at run time).
  ExpectInvalid(RunOpOnFedInputs("Conv2D", {RandomTensor<float>(TensorShape({5, 5, 3}), 1), f}, a),
                "rank-3 input");
  ExpectInvalid(RunOpOnFedInputs("Conv2D", {x, RandomTensor<float>(TensorShape({3, 3, 4}), 1)}, a),
                "rank-3 filter");
  ExpectInvalid(RunOpOnFedInputs("Conv2D", {x, RandomTensor<float>(TensorShape({3, 3, 2, 4}), 1)}, a),
                "channel mismatch");
  // 3 input channels over a 1-channel filter are 3 groups, which 4 outputs do not fit.
  ExpectInvalid(RunOpOnFedInputs("Conv2D", {x, RandomTensor<float>(TensorShape({3, 3, 1, 4}), 1)}, a),
                "outputs not a multiple of the groups");
  ExpectInvalid(RunOpOnFedInputs("Conv2D", {x, RandomTensor<float>(TensorShape({0, 3, 3, 4}), 1)}, a),
                "empty filter window");
  ExpectInvalid(RunOpOnFedInputs("Conv2DBackpropInput", {T1<int32_t>({2, 5, 5}), f, dy}, a),
                "input_sizes of 3 entries");
  ExpectInvalid(RunOpOnFedInputs("Conv2DBackpropInput", {T1<int32_t>({2, -5, 5, 3}), f, dy}, a),
                "negative input_sizes");
  ExpectInvalid(RunOpOnFedInputs("Conv2DBackpropInput", {Sizes({2, 5, 5, 2}), f, dy}, a),
                "input_sizes channels");
  ExpectInvalid(RunOpOnFedInputs("Conv2DBackpropInput", {Sizes({2, 6, 5, 3}), f, dy}, a),
                "out_backprop shape");
  ExpectInvalid(RunOpOnFedInputs("Conv2DBackpropFilter", {x, Sizes({3, 3, 2, 4}), dy}, a),
                "filter_sizes channels");
  ExpectInvalid(RunOpOnFedInputs("Conv2DBackpropFilter", {x, Sizes({3, 3, 3, 5}), dy}, a),
                "out_backprop channels");
  ExpectInvalid(RunOpOnFedInputs("Conv2DBackpropFilter", {x, T1<int32_t>({3, 3, 3, 4, 1}), dy}, a),
                "filter_sizes of 5 entries");
  // Malformed attrs.
  auto with = [&](const char* name, AttrValue v) {
    AttrMap b = a;
    b[name] = std::move(v);
    return b;
  };
  ExpectInvalid(RunOp("Conv2D", {x, f}, with("strides", AttrValue(std::vector<int64_t>{1, 1, 1}))),
                "3 strides");
  ExpectInvalid(RunOp("Conv2D", {x, f}, with("strides", AttrValue(std::vector<int64_t>{1, 0, 1, 1}))),
                "zero stride");
  ExpectInvalid(RunOp("Conv2D", {x, f}, with("strides", AttrValue(std::vector<int64_t>{2, 1, 1, 1}))),
                "batch stride");
  ExpectInvalid(RunOp("Conv2D", {x, f}, with("dilations", AttrValue(std::vector<int64_t>{1, 1, 1, 2}))),
                "channel dilation");
  ExpectInvalid(RunOp("Conv2D", {x, f}, with("padding", AttrValue("FULL"))), "padding");
  ExpectInvalid(RunOp("Conv2D", {x, f}, with("data_format", AttrValue("NCHW"))), "data_format");
}

}  // namespace
}  // namespace flowstate::test

// Sum, Mean, Prod, Max, Min, ArgMax and ArgMin: every registered kernel
// (each T, Tidx and output_type) against plain-loop references, plus the
// edge cases the kernels document (empty sets, NaN, integer semantics,
// errors) and multi-threaded runs.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "tests/devices/fed_inputs_util.h"
#include "tests/util/op_test_util.h"

namespace flowstate::test {
namespace {

const char* const kReductions[] = {"Sum", "Mean", "Prod", "Max", "Min"};
const DataType kIndexTypes[] = {DataType::kInt32, DataType::kInt64};

// Calls fn.template operator()<T>() for each dtype the reductions support.
template <typename Fn>
void ForEachNumericType(Fn&& fn) {
  fn.template operator()<float>();
  fn.template operator()<double>();
  fn.template operator()<int32_t>();
  fn.template operator()<int64_t>();
  fn.template operator()<uint8_t>();
}

Tensor Indices(const std::vector<int64_t>& v, DataType t) {
  if (t == DataType::kInt64) return Tensor::FromVector(v);
  std::vector<int32_t> w(v.begin(), v.end());
  return Tensor::FromVector(w);
}

AttrMap ReduceAttrs(bool keep, DataType tidx) {
  return {{"keep_dims", AttrValue(keep)}, {"Tidx", AttrValue(tidx)}};
}

// Test values: small integers (many ties, products that stay exact for
// a while), floats in [-1, 1) rounded to 1/8 so that ties occur too.
template <typename T>
Tensor TestValues(const TensorShape& shape, uint64_t seed) {
  if constexpr (std::is_floating_point_v<T>) {
    Tensor t = RandomTensor<T>(shape, seed, -1, 1);
    for (T& v : t.flat<T>()) v = std::round(v * 8) / 8;
    return t;
  } else if constexpr (std::is_same_v<T, uint8_t>) {
    return RandomTensor<T>(shape, seed, 0, 5);
  } else {
    return RandomTensor<T>(shape, seed, -3, 3);
  }
}

// The reference's accumulator: exact enough for floats, wrapping for ints.
template <typename T>
struct RefAcc {
  using type = std::make_unsigned_t<T>;
};
template <>
struct RefAcc<float> {
  using type = long double;
};
template <>
struct RefAcc<double> {
  using type = long double;
};

// The plain-loop reference: groups the input's elements by output index,
// then reduces each group by the documented semantics.
template <typename T>
Tensor ReferenceReduce(const std::string& op, const Tensor& x, const std::vector<int64_t>& axes,
                       bool keep) {
  const int rank = x.rank();
  std::vector<bool> red(rank, axes.empty());
  for (int64_t a : axes) red[a < 0 ? a + rank : a] = true;
  TensorShape out_shape;
  for (int i = 0; i < rank; ++i) {
    if (!red[i]) out_shape.AddDim(x.dim(i));
    else if (keep) out_shape.AddDim(1);
  }
  std::vector<std::vector<T>> groups(size_t(out_shape.num_elements()));
  std::vector<int64_t> idx(rank, 0);
  for (int64_t e = 0; e < x.num_elements(); ++e) {
    int64_t o = 0;
    for (int i = 0; i < rank; ++i) {
      if (!red[i]) o = o * x.dim(i) + idx[i];
    }
    groups[o].push_back(x.data<T>()[e]);
    for (int i = rank - 1; i >= 0; --i) {
      if (++idx[i] < x.dim(i)) break;
      idx[i] = 0;
    }
  }
  using U = typename RefAcc<T>::type;
  Tensor out(kDataTypeOf<T>, out_shape);
  for (size_t o = 0; o < groups.size(); ++o) {
    const std::vector<T>& g = groups[o];
    T r{};
    if (op == "Sum" || op == "Mean") {
      U s = 0;
      int64_t exact = 0;
      for (T v : g) {
        s = U(s + U(v));
        if constexpr (!std::is_floating_point_v<T>) exact += int64_t(v);
      }
      if (op == "Sum") {
        r = T(s);
      } else if constexpr (std::is_floating_point_v<T>) {
        r = g.empty() ? std::numeric_limits<T>::quiet_NaN() : T(s / (long double)g.size());
      } else {
        r = g.empty() ? T(0) : T(exact / int64_t(g.size()));
      }
    } else if (op == "Prod") {
      U p = 1;
      for (T v : g) p = U(p * U(v));
      r = T(p);
    } else {
      const bool is_max = op == "Max";
      r = is_max ? std::numeric_limits<T>::lowest() : std::numeric_limits<T>::max();
      if (!g.empty()) {
        r = g[0];
        for (T v : g) {
          if (v != v || r != r) {
            r = std::numeric_limits<T>::quiet_NaN();
            break;
          }
          r = is_max ? std::max(r, v) : std::min(r, v);
        }
      }
    }
    out.data<T>()[o] = r;
  }
  return out;
}

struct ReduceCase {
  TensorShape shape;
  std::vector<int64_t> axes;
};

const std::vector<ReduceCase>& ReduceCases() {
  static const auto* cases = new std::vector<ReduceCase>{
      {TensorShape({2, 3, 4}), {}},          // every axis
      {TensorShape({2, 3, 4}), {0}},
      {TensorShape({2, 3, 4}), {1}},
      {TensorShape({2, 3, 4}), {2}},
      {TensorShape({2, 3, 4}), {-1}},
      {TensorShape({2, 3, 4}), {0, 2}},
      {TensorShape({2, 3, 4}), {2, 0, 2}},   // duplicates
      {TensorShape({2, 3, 4}), {1, -2}},     // the same axis twice
      {TensorShape({2, 3, 4}), {0, 1, 2}},
      {TensorShape(), {}},                   // rank 0
      {TensorShape({0, 3}), {0}},            // reduces an empty set into [3]
      {TensorShape({0, 3}), {1}},            // empty output
      {TensorShape({0, 3}), {}},
      {TensorShape({1, 5, 1}), {0, 2}},      // only size-1 axes: values pass through
      {TensorShape({1, 5, 1}), {1}},
      {TensorShape({7}), {0}},
      {TensorShape({7, 33, 5, 3}), {0, 2}},  // [R K R K]
      {TensorShape({7, 33, 5, 3}), {1, 3}},  // [K R K R]
      {TensorShape({7, 33, 5, 3}), {0, 1, 3}},
      {TensorShape({3, 2, 40, 2, 3}), {1, 3}},
      {TensorShape({40, 600}), {0}},         // wide columns, cut into blocks
      {TensorShape({40, 600}), {1}},
      {TensorShape({200, 3}), {0}},          // narrow columns
  };
  return *cases;
}

TEST(ReductionOps, EveryKernelMatchesTheReference) {
  ForEachNumericType([&]<typename T>() {
    for (const char* op : kReductions) {
      for (DataType tidx : kIndexTypes) {
        uint64_t seed = 1;
        for (const ReduceCase& c : ReduceCases()) {
          for (bool keep : {false, true}) {
            Tensor x = TestValues<T>(c.shape, seed++);
            Tensor got = RunOp1(op, {x, Indices(c.axes, tidx)}, ReduceAttrs(keep, tidx));
            Tensor want = ReferenceReduce<T>(op, x, c.axes, keep);
            EXPECT_TRUE(TensorNear(got, want, 1e-5, 1e-6))
                << op << " " << DataTypeName(kDataTypeOf<T>) << " Tidx=" << DataTypeName(tidx)
                << " shape " << c.shape.ToString()
                << " axes " << Indices(c.axes, tidx).DebugString()
                << " keep_dims=" << keep;
          }
        }
      }
    }
  });
}

TEST(ReductionOps, AxisIsAScalarOrAVector) {
  Tensor x = TS<float>({1, 2, 3, 4, 5, 6}, TensorShape({2, 3}));
  EXPECT_TRUE(TensorEq(RunOp1("Sum", {x, Tensor::Scalar<int32_t>(1)}), T1<float>({6, 15})));
  EXPECT_TRUE(TensorEq(RunOp1("Sum", {x, Tensor::Scalar<int64_t>(-2)},
                              {{"Tidx", AttrValue(DataType::kInt64)}}),
                       T1<float>({5, 7, 9})));
}

TEST(ReductionOps, EmptyReductionsGiveTheIdentity) {
  Tensor none(DataType::kFloat32, TensorShape({0, 2}));
  Tensor axis = T1<int32_t>({0});
  const float lowest = std::numeric_limits<float>::lowest();
  const float highest = std::numeric_limits<float>::max();
  EXPECT_TRUE(TensorEq(RunOp1("Sum", {none, axis}), T1<float>({0, 0})));
  EXPECT_TRUE(TensorEq(RunOp1("Prod", {none, axis}), T1<float>({1, 1})));
  EXPECT_TRUE(TensorEq(RunOp1("Max", {none, axis}), T1<float>({lowest, lowest})));
  EXPECT_TRUE(TensorEq(RunOp1("Min", {none, axis}), T1<float>({highest, highest})));
  Tensor mean = RunOp1("Mean", {none, axis});
  EXPECT_TRUE(std::isnan(mean.data<float>()[0]) && std::isnan(mean.data<float>()[1]));
  Tensor ints(DataType::kInt32, TensorShape({0}));
  EXPECT_TRUE(TensorEq(RunOp1("Mean", {ints, T1<int32_t>({})}), Tensor::Scalar<int32_t>(0)));
  EXPECT_TRUE(TensorEq(RunOp1("Max", {ints, T1<int32_t>({})}),
                       Tensor::Scalar<int32_t>(std::numeric_limits<int32_t>::lowest())));
  EXPECT_TRUE(TensorEq(RunOp1("Min", {ints, T1<int32_t>({})}),
                       Tensor::Scalar<int32_t>(std::numeric_limits<int32_t>::max())));
}

TEST(ReductionOps, IntegerSemantics) {
  // Mean truncates toward zero and does not overflow narrow types.
  EXPECT_TRUE(TensorEq(RunOp1("Mean", {T1<int32_t>({-3, -4}), T1<int32_t>({})}),
                       Tensor::Scalar<int32_t>(-3)));
  EXPECT_TRUE(TensorEq(RunOp1("Mean", {T1<uint8_t>({255, 255, 254}), T1<int32_t>({})}),
                       Tensor::Scalar<uint8_t>(254)));
  const int32_t big = std::numeric_limits<int32_t>::max();
  EXPECT_TRUE(TensorEq(RunOp1("Mean", {T1<int32_t>({big, big}), T1<int32_t>({})}),
                       Tensor::Scalar<int32_t>(big)));
  // Sum and Prod wrap around in T, as in TensorFlow.
  EXPECT_TRUE(TensorEq(RunOp1("Sum", {T1<int32_t>({big, 1}), T1<int32_t>({})}),
                       Tensor::Scalar<int32_t>(std::numeric_limits<int32_t>::min())));
  EXPECT_TRUE(TensorEq(RunOp1("Sum", {T1<uint8_t>({200, 100}), T1<int32_t>({})}),
                       Tensor::Scalar<uint8_t>(44)));
  EXPECT_TRUE(TensorEq(RunOp1("Prod", {T1<uint8_t>({16, 17}), T1<int32_t>({})}),
                       Tensor::Scalar<uint8_t>(16)));
}

TEST(ReductionOps, MaxAndMinPropagateNaNAndKeepInfinities) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  Tensor x = TS<float>({1, nan, 3, -inf, -inf, -inf}, TensorShape({2, 3}));
  Tensor axis = T1<int32_t>({1});
  EXPECT_TRUE(TensorEq(RunOp1("Max", {x, axis}), T1<float>({nan, -inf})));
  EXPECT_TRUE(TensorEq(RunOp1("Min", {x, axis}), T1<float>({nan, -inf})));
  // NaN at the very end of a long vectorized row, and in one column only.
  Tensor long_row = TestValues<double>(TensorShape({1001}), 3);
  long_row.data<double>()[1000] = std::numeric_limits<double>::quiet_NaN();
  EXPECT_TRUE(std::isnan(RunOp1("Max", {long_row, T1<int32_t>({})}).scalar<double>()));
  Tensor cols = TestValues<float>(TensorShape({50, 40}), 4);
  cols.data<float>()[49 * 40 + 7] = nan;
  Tensor mins = RunOp1("Min", {cols, T1<int32_t>({0})});
  for (int j = 0; j < 40; ++j) EXPECT_EQ(std::isnan(mins.data<float>()[j]), j == 7) << j;
}

TEST(ReductionOps, Float32SumOfAMillionElementsIsAccurate) {
  Tensor x = RandomTensor<float>(TensorShape({1000000}), 11, 0, 1);
  double want = 0;
  for (float v : x.flat<float>()) want += v;
  for (int threads : {1, 2}) {
    Device* d = CpuTestDevice(threads);
    Tensor sum = RunOp1("Sum", {x, T1<int32_t>({})}, {}, d);
    EXPECT_NEAR(sum.scalar<float>(), want, std::abs(want) * 2e-7) << threads << " thread(s)";
    Tensor mean = RunOp1("Mean", {x, T1<int32_t>({})}, {}, d);
    EXPECT_NEAR(mean.scalar<float>(), want / 1e6, want / 1e6 * 2e-7);
  }
  // The same along columns of a [1000, 1000] matrix.
  Tensor m = RandomTensor<float>(TensorShape({1000, 1000}), 12, 0, 1);
  Tensor cols = RunOp1("Sum", {m, T1<int32_t>({0})}, {}, CpuTestDevice(2));
  for (int j = 0; j < 1000; j += 97) {
    double w = 0;
    for (int i = 0; i < 1000; ++i) w += m.data<float>()[i * 1000 + j];
    EXPECT_NEAR(cols.data<float>()[j], w, w * 2e-7) << j;
  }
}

TEST(ReductionOps, LargeReductionsGiveTheSameBitsOnOneAndTwoThreads) {
  const std::vector<ReduceCase> cases = {
      {TensorShape({1 << 20}), {}},      {TensorShape({3, 400000}), {1}},
      {TensorShape({400000, 3}), {0}},   {TensorShape({64, 8192}), {1}},
      {TensorShape({8192, 64}), {0}},    {TensorShape({300, 50, 70}), {0, 2}},
      {TensorShape({2, 300000}), {0}},
  };
  uint64_t seed = 100;
  for (const ReduceCase& c : cases) {
    Tensor x = RandomTensor<float>(c.shape, seed++);
    for (const char* op : kReductions) {
      Tensor one = RunOp1(op, {x, T1<int64_t>(c.axes)}, {{"Tidx", AttrValue(DataType::kInt64)}},
                          CpuTestDevice(1));
      Tensor two = RunOp1(op, {x, T1<int64_t>(c.axes)}, {{"Tidx", AttrValue(DataType::kInt64)}},
                          CpuTestDevice(2));
      EXPECT_TRUE(TensorsEqual(one, two)) << op << " " << c.shape.ToString();
      if (std::string(op) != "Prod") {
        EXPECT_TRUE(TensorNear(two, ReferenceReduce<float>(op, x, c.axes, false), 1e-5, 1e-5))
            << op << " " << c.shape.ToString();
      }
    }
  }
}

TEST(ReductionOps, BadAxesAreInvalidArgumentsNamingTheNode) {
  Tensor x = TS<float>({1, 2, 3, 4, 5, 6}, TensorShape({2, 3}));
  for (const char* op : kReductions) {
    // Caught by graph validation when the axis is a constant...
    for (int64_t bad : {2, -3}) {
      auto r = RunOp(op, {x, T1<int64_t>({0, bad})}, {{"Tidx", AttrValue(DataType::kInt64)}});
      ASSERT_FALSE(r.ok()) << op;
      EXPECT_EQ(r.status().code(), Code::kInvalidArgument);
      EXPECT_EQ(r.status().node(), "op");
      // ...and by the kernel when it is computed at run time.
      auto k = RunOpOnFedInputs(op, {x, T1<int64_t>({0, bad})},
                                {{"Tidx", AttrValue(DataType::kInt64)}});
      ASSERT_FALSE(k.ok()) << op;
      EXPECT_EQ(k.status().code(), Code::kInvalidArgument) << k.status().ToString();
      EXPECT_EQ(k.status().node(), "op");
      EXPECT_NE(k.status().message().find("out of range"), std::string::npos);
    }
    // A rank-0 input has no axis to reduce.
    auto s = RunOpOnFedInputs(op, {Tensor::Scalar<float>(1), T1<int32_t>({0})});
    ASSERT_FALSE(s.ok());
    EXPECT_EQ(s.status().code(), Code::kInvalidArgument);
    // The axis must be 0-D or 1-D.
    auto m = RunOp(op, {x, TS<int32_t>({0}, TensorShape({1, 1}))});
    ASSERT_FALSE(m.ok());
    EXPECT_EQ(m.status().code(), Code::kInvalidArgument);
    EXPECT_EQ(m.status().node(), "op");
  }
  // Fed axes that are fine run normally.
  auto ok = RunOpOnFedInputs("Sum", {x, T1<int32_t>({-1})});
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_TRUE(TensorEq((*ok)[0], T1<float>({6, 15})));
}

// ---------------------------------------------------------------------------
// ArgMax / ArgMin.

template <typename T, typename Index>
Tensor ReferenceArg(bool is_max, const Tensor& x, int64_t dim) {
  const int axis = int(dim < 0 ? dim + x.rank() : dim);
  int64_t outer = 1, inner = 1;
  for (int i = 0; i < axis; ++i) outer *= x.dim(i);
  for (int i = axis + 1; i < x.rank(); ++i) inner *= x.dim(i);
  const int64_t n = x.dim(axis);
  TensorShape s = x.shape();
  s.RemoveDim(axis);
  Tensor out(kDataTypeOf<Index>, s);
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t j = 0; j < inner; ++j) {
      int64_t best = 0;
      for (int64_t r = 0; r < n; ++r) {
        T v = x.data<T>()[(o * n + r) * inner + j];
        T b = x.data<T>()[(o * n + best) * inner + j];
        if (v != v) {  // the first NaN
          best = r;
          break;
        }
        if (is_max ? v > b : v < b) best = r;
      }
      out.data<Index>()[o * inner + j] = Index(best);
    }
  }
  return out;
}

TEST(ArgMinMaxOps, EveryKernelMatchesTheReference) {
  const std::vector<std::pair<TensorShape, int64_t>> cases = {
      {TensorShape({5}), 0},       {TensorShape({5}), -1},      {TensorShape({3, 4}), 0},
      {TensorShape({3, 4}), 1},    {TensorShape({2, 3, 4}), 1}, {TensorShape({2, 3, 4}), -1},
      {TensorShape({2, 3, 4}), 0}, {TensorShape({1}), 0},       {TensorShape({4, 700}), 0},
  };
  ForEachNumericType([&]<typename T>() {
    for (const char* op : {"ArgMax", "ArgMin"}) {
      for (DataType tidx : kIndexTypes) {
        for (DataType out_type : kIndexTypes) {
          uint64_t seed = 7;
          for (const auto& [shape, dim] : cases) {
            Tensor x = TestValues<T>(shape, seed++);
            AttrMap attrs = {{"Tidx", AttrValue(tidx)}, {"output_type", AttrValue(out_type)}};
            Tensor dim_t = tidx == DataType::kInt32 ? Tensor::Scalar<int32_t>(int32_t(dim))
                                                    : Tensor::Scalar<int64_t>(dim);
            Tensor got = RunOp1(op, {x, dim_t}, attrs);
            const bool is_max = std::string(op) == "ArgMax";
            Tensor want = out_type == DataType::kInt32 ? ReferenceArg<T, int32_t>(is_max, x, dim)
                                                       : ReferenceArg<T, int64_t>(is_max, x, dim);
            EXPECT_TRUE(TensorEq(got, want))
                << op << " " << DataTypeName(kDataTypeOf<T>) << " " << shape.ToString()
                << " dim " << dim << " Tidx=" << DataTypeName(tidx)
                << " output_type=" << DataTypeName(out_type);
          }
        }
      }
    }
  });
}

TEST(ArgMinMaxOps, TiesGiveTheFirstIndexAndNaNWins) {
  Tensor ties = T1<int32_t>({2, 7, 7, 1, 1});
  EXPECT_TRUE(TensorEq(RunOp1("ArgMax", {ties, Tensor::Scalar<int32_t>(0)}),
                       Tensor::Scalar<int64_t>(1)));
  EXPECT_TRUE(TensorEq(RunOp1("ArgMin", {ties, Tensor::Scalar<int32_t>(0)}),
                       Tensor::Scalar<int64_t>(3)));
  const float nan = std::numeric_limits<float>::quiet_NaN();
  Tensor x = TS<float>({1, 9, nan, 3, nan, 0}, TensorShape({6}));
  EXPECT_TRUE(TensorEq(RunOp1("ArgMax", {x, Tensor::Scalar<int32_t>(0)}),
                       Tensor::Scalar<int64_t>(2)));
  EXPECT_TRUE(TensorEq(RunOp1("ArgMin", {x, Tensor::Scalar<int32_t>(0)}),
                       Tensor::Scalar<int64_t>(2)));
  // Along a column as well ([6, 2], column 0 holds the NaNs).
  Tensor y = TS<float>({1, 5, 9, 4, nan, 3, 3, 2, nan, 1, 0, 0}, TensorShape({6, 2}));
  EXPECT_TRUE(TensorEq(RunOp1("ArgMax", {y, Tensor::Scalar<int32_t>(0)}), T1<int64_t>({2, 0})));
  EXPECT_TRUE(TensorEq(RunOp1("ArgMin", {y, Tensor::Scalar<int32_t>(0)}), T1<int64_t>({2, 5})));
}

TEST(ArgMinMaxOps, LargeInputsOnTwoThreads) {
  Tensor x = RandomTensor<float>(TensorShape({300, 5000}), 21);
  for (int64_t dim : {0, 1}) {
    for (const char* op : {"ArgMax", "ArgMin"}) {
      Tensor got = RunOp1(op, {x, Tensor::Scalar<int32_t>(int32_t(dim))},
                          {{"output_type", AttrValue(DataType::kInt32)}}, CpuTestDevice(2));
      EXPECT_TRUE(TensorEq(got, ReferenceArg<float, int32_t>(std::string(op) == "ArgMax", x, dim)))
          << op << " dim " << dim;
    }
  }
}

TEST(ArgMinMaxOps, EmptyInputs) {
  // An empty dimension cannot be reduced into a non-empty output...
  Tensor x(DataType::kFloat32, TensorShape({0, 3}));
  auto r = RunOp("ArgMax", {x, Tensor::Scalar<int32_t>(0)});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kInvalidArgument);
  EXPECT_EQ(r.status().node(), "op");
  // ...but an empty output is fine.
  Tensor e = RunOp1("ArgMin", {x, Tensor::Scalar<int32_t>(1)});
  EXPECT_EQ(e.shape(), TensorShape({0}));
}

TEST(ArgMinMaxOps, BadDimensionsAreInvalidArgumentsNamingTheNode) {
  Tensor x = TS<float>({1, 2, 3, 4, 5, 6}, TensorShape({2, 3}));
  for (const char* op : {"ArgMax", "ArgMin"}) {
    auto v = RunOp(op, {x, Tensor::Scalar<int32_t>(2)});  // validation
    ASSERT_FALSE(v.ok());
    EXPECT_EQ(v.status().code(), Code::kInvalidArgument);
    EXPECT_EQ(v.status().node(), "op");
    auto k = RunOpOnFedInputs(op, {x, Tensor::Scalar<int32_t>(-3)});  // kernel
    ASSERT_FALSE(k.ok());
    EXPECT_EQ(k.status().code(), Code::kInvalidArgument);
    EXPECT_EQ(k.status().node(), "op");
    auto two = RunOp(op, {x, T1<int32_t>({0, 1})});  // one dimension only
    ASSERT_FALSE(two.ok());
    EXPECT_EQ(two.status().code(), Code::kInvalidArgument);
    EXPECT_EQ(two.status().node(), "op");
    auto scalar = RunOpOnFedInputs(op, {Tensor::Scalar<float>(1), Tensor::Scalar<int32_t>(0)});
    ASSERT_FALSE(scalar.ok());
    EXPECT_EQ(scalar.status().code(), Code::kInvalidArgument);
  }
}

}  // namespace
}  // namespace flowstate::test

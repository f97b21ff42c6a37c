// UnsortedSegmentSum, TileGrad and ProdGrad for every registered dtype
// combination against plain-loop references (brute-force products of the
// other elements for ProdGrad, zeros included), plus the error cases.
#include <gtest/gtest.h>

#include "tests/devices/fed_inputs_util.h"
#include "tests/devices/nn_test_util.h"

namespace flowstate::test {
namespace {

template <typename I>
Tensor IndexTensor(const std::vector<int64_t>& v, const TensorShape& s) {
  std::vector<I> w(v.begin(), v.end());
  return TS<I>(w, s);
}

// ---------------------------------------------------------------------------
// UnsortedSegmentSum.

struct SegmentCase {
  TensorShape data, ids;
  int64_t num;
};

template <typename T, typename I, typename N>
void CheckSegmentSum(const SegmentCase& c, uint64_t seed, int threads) {
  Tensor data = RandomTensor<T>(c.data, seed, -9, 9);
  Tensor ids_i64 = RandomTensor<int64_t>(c.ids, seed + 1, -1, double(c.num - 1));
  std::vector<int64_t> ids(ids_i64.data<int64_t>(),
                           ids_i64.data<int64_t>() + ids_i64.num_elements());
  // Reference: output rows of `inner` elements, negative ids dropped.
  const int64_t n = c.ids.num_elements();
  int64_t inner = 1;
  std::vector<int64_t> out_dims{c.num};
  for (int d = c.ids.rank(); d < c.data.rank(); ++d) {
    out_dims.push_back(c.data.dim(d));
    inner *= c.data.dim(d);
  }
  Tensor want(kDataTypeOf<T>, TensorShape(std::span<const int64_t>(out_dims)));
  std::fill_n(want.data<T>(), want.num_elements(), T(0));
  for (int64_t j = 0; j < n; ++j) {
    if (ids[size_t(j)] < 0) continue;
    for (int64_t k = 0; k < inner; ++k) {
      want.data<T>()[ids[size_t(j)] * inner + k] += data.data<T>()[j * inner + k];
    }
  }
  Tensor got =
      RunOp1("UnsortedSegmentSum", {data, IndexTensor<I>(ids, c.ids), Tensor::Scalar<N>(N(c.num))},
             {}, CpuTestDevice(threads));
  EXPECT_TRUE(TensorNear(got, want, kRtol<T>, 1e-9))
      << TypeName(kDataTypeOf<T>) << "/" << TypeName(kDataTypeOf<I>) << "/"
      << TypeName(kDataTypeOf<N>) << " " << c.data.ToString() << " ids " << c.ids.ToString();
}

template <typename T>
void CheckSegmentSumAllIndexTypes(uint64_t* seed) {
  const std::vector<SegmentCase> cases = {
      {{6, 3}, {6}, 4}, {{2, 3, 4}, {2, 3}, 5}, {{5}, {5}, 3},
      {{0, 3}, {0}, 3}, {{0, 3}, {0}, 0},       {{4, 0}, {4}, 2},
      {{7, 2}, {7}, 1}, {{50, 600}, {50}, 9},   {{3000, 2}, {3000}, 10}};
  for (const SegmentCase& c : cases) {
    for (int threads : {1, 2}) {
      CheckSegmentSum<T, int32_t, int32_t>(c, (*seed)++, threads);
      CheckSegmentSum<T, int32_t, int64_t>(c, (*seed)++, threads);
      CheckSegmentSum<T, int64_t, int32_t>(c, (*seed)++, threads);
      CheckSegmentSum<T, int64_t, int64_t>(c, (*seed)++, threads);
    }
  }
}

TEST(GradSupportUnsortedSegmentSum, MatchesReferenceForEveryTypeCombination) {
  uint64_t seed = 1;
  CheckSegmentSumAllIndexTypes<float>(&seed);
  CheckSegmentSumAllIndexTypes<double>(&seed);
  CheckSegmentSumAllIndexTypes<int32_t>(&seed);
  CheckSegmentSumAllIndexTypes<int64_t>(&seed);
}

TEST(GradSupportUnsortedSegmentSum, HandWorkedAndNegativeIdsDropped) {
  Tensor data = TS<float>({1, 2, 3, 4, 5, 6, 7, 8}, {4, 2});
  Tensor got =
      RunOp1("UnsortedSegmentSum", {data, T1<int32_t>({2, 0, -1, 2}), Tensor::Scalar<int32_t>(3)});
  EXPECT_TRUE(TensorEq(got, TS<float>({3, 4, 0, 0, 8, 10}, {3, 2})));
  // Integer sums wrap.
  Tensor big = T1<int32_t>({2147483647, 1});
  EXPECT_TRUE(
      TensorEq(RunOp1("UnsortedSegmentSum", {big, T1<int64_t>({0, 0}), Tensor::Scalar<int64_t>(1)}),
               T1<int32_t>({-2147483647 - 1})));
}

TEST(GradSupportUnsortedSegmentSum, Errors) {
  Tensor data = TS<float>({1, 2, 3, 4}, {2, 2});
  EXPECT_TRUE(IsOpError(
      RunOp("UnsortedSegmentSum", {data, T1<int32_t>({0, 3}), Tensor::Scalar<int32_t>(3)}),
      "segment_ids[1] = 3 is out of range [0, 3)"));
  EXPECT_TRUE(IsOpError(RunOpOnFedInputs("UnsortedSegmentSum", {data, T1<int64_t>({0, 1, 1}),
                                                                Tensor::Scalar<int32_t>(3)}),
                        "prefix"));
  EXPECT_TRUE(IsOpError(RunOpOnFedInputs("UnsortedSegmentSum",
                                         {data, T1<int64_t>({0, 1}), Tensor::Scalar<int64_t>(-1)}),
                        "num_segments must be >= 0"));
}

// ---------------------------------------------------------------------------
// TileGrad.

// out[i] = sum of grad elements g with g_k % d_k == i_k.
template <typename T>
Tensor RefTileGrad(const Tensor& g, const std::vector<int64_t>& m) {
  std::vector<int64_t> d(m.size());
  for (size_t k = 0; k < m.size(); ++k) d[k] = g.dim(int(k)) / m[k];
  const TensorShape os{std::span<const int64_t>(d)};
  std::vector<double> acc(size_t(os.num_elements()), 0.0);
  for (int64_t i = 0; i < g.num_elements(); ++i) {
    int64_t rem = i, o = 0, stride = 1;
    for (int k = g.rank() - 1; k >= 0; --k) {
      const int64_t coord = rem % g.dim(k);
      rem /= g.dim(k);
      o += (coord % d[size_t(k)]) * stride;
      stride *= d[size_t(k)];
    }
    acc[size_t(o)] += double(g.data<T>()[i]);
  }
  Tensor r(kDataTypeOf<T>, os);
  for (int64_t i = 0; i < os.num_elements(); ++i) r.data<T>()[i] = T(acc[size_t(i)]);
  return r;
}

TEST(GradSupportTileGrad, SumsTheTilesForEveryTypeCombination) {
  ForFloatTypes([]<typename T>() {
    const std::vector<std::pair<TensorShape, std::vector<int64_t>>> cases = {
        {{4, 6}, {2, 3}},     {{6}, {3}},       {{2, 6, 4}, {1, 2, 2}},       {{0, 4}, {2, 2}},
        {{3, 5}, {3, 1}},     {{3, 5}, {1, 5}}, {{2, 2, 2, 2}, {2, 2, 2, 2}}, {{400, 300}, {4, 3}},
        {{1200, 2}, {300, 1}}};
    uint64_t seed = 1;
    for (const auto& [s, m] : cases) {
      Tensor g = RandomTensor<T>(s, seed++);
      for (DataType idx : {DataType::kInt32, DataType::kInt64}) {
        Tensor mt = idx == DataType::kInt32
                        ? IndexTensor<int32_t>(m, TensorShape({int64_t(m.size())}))
                        : IndexTensor<int64_t>(m, TensorShape({int64_t(m.size())}));
        for (int threads : {1, 2}) {
          Tensor got = RunOp1("TileGrad", {mt, g}, {}, CpuTestDevice(threads));
          EXPECT_TRUE(TensorNear(got, RefTileGrad<T>(g, m), kRtol<T>, 1e-9))
              << s.ToString() << " " << VectorStr(m);
        }
      }
    }
    // All multiples 1 (and a scalar) pass grad through.
    Tensor g = RandomTensor<T>(TensorShape({3, 2}), 9);
    EXPECT_TRUE(RunOp1("TileGrad", {T1<int32_t>({1, 1}), g}).SharesBufferWith(g));
    Tensor sc = Tensor::Scalar<T>(T(2.5));
    EXPECT_TRUE(TensorEq(RunOp1("TileGrad", {T1<int64_t>({}), sc}), sc));
    // Hand-worked: [1 2 1 2] tiled from [1 2] twice.
    EXPECT_TRUE(
        TensorEq(RunOp1("TileGrad", {T1<int32_t>({2}), T1<T>({1, 2, 3, 4})}), T1<T>({4, 6})));
  });
}

TEST(GradSupportTileGrad, Errors) {
  Tensor g = TS<float>({1, 2, 3, 4, 5, 6}, {2, 3});
  EXPECT_TRUE(
      IsOpError(RunOpOnFedInputs("TileGrad", {T1<int32_t>({2}), g}), "one entry per dimension"));
  EXPECT_TRUE(IsOpError(RunOpOnFedInputs("TileGrad", {T1<int32_t>({1, 2}), g}),
                        "not a positive multiple of multiples[1] = 2"));
  EXPECT_TRUE(
      IsOpError(RunOpOnFedInputs("TileGrad", {T1<int64_t>({0, 1}), g}), "multiples[0] = 0"));
}

// ---------------------------------------------------------------------------
// ProdGrad.

// For each element, grad of its group times the product of the group's
// other elements, multiplied out one by one.
template <typename T>
Tensor RefProdGrad(const Tensor& x, const std::vector<bool>& reduce, const Tensor& grad) {
  const int rank = x.rank();
  const int64_t n = x.num_elements();
  // The group of element i: its index in grad (reduced coordinates 0).
  std::vector<int64_t> group(static_cast<size_t>(n));
  std::vector<std::vector<int64_t>> members(size_t(grad.num_elements()));
  for (int64_t i = 0; i < n; ++i) {
    int64_t rem = i, g = 0, stride = 1;
    for (int d = rank - 1; d >= 0; --d) {
      const int64_t coord = rem % x.dim(d);
      rem /= x.dim(d);
      if (!reduce[size_t(d)]) {
        g += coord * stride;
        stride *= x.dim(d);
      }
    }
    group[size_t(i)] = g;
    members[size_t(g)].push_back(i);
  }
  Tensor r(kDataTypeOf<T>, x.shape());
  for (int64_t i = 0; i < n; ++i) {
    double p = double(grad.data<T>()[group[size_t(i)]]);
    for (int64_t j : members[size_t(group[size_t(i)])]) {
      if (j != i) p *= double(x.data<T>()[j]);
    }
    r.data<T>()[i] = T(p);
  }
  return r;
}

TEST(GradSupportProdGrad, ProductOfTheOthersForEveryTypeCombination) {
  ForFloatTypes([]<typename T>() {
    struct Case {
      TensorShape shape;
      std::vector<int64_t> axes;
    };
    const std::vector<Case> cases = {
        {{3, 4}, {1}},       {{3, 4}, {0}},    {{3, 4}, {}},         {{3, 4}, {-1}},
        {{2, 3, 4}, {0, 2}}, {{2, 3, 4}, {1}}, {{2, 3, 4}, {1, -2}}, {{5}, {0}},
        {{2, 1, 3}, {1}},    {{0, 3}, {1}},    {{4, 3}, {0, 1}},     {{2, 3, 2, 3}, {0, 2}},
        {{400, 50}, {1}},    {{50, 400}, {0}}};
    uint64_t seed = 1;
    for (const Case& c : cases) {
      const int rank = c.shape.rank();
      std::vector<bool> reduce(size_t(rank), c.axes.empty());
      for (int64_t a : c.axes) reduce[size_t(a < 0 ? a + rank : a)] = true;
      TensorShape kept = c.shape;
      for (int d = 0; d < rank; ++d) {
        if (reduce[size_t(d)]) kept.set_dim(d, 1);
      }
      Tensor x = RandomTensor<T>(c.shape, seed++, 0.5, 1.5);
      // Zeros: one in the first group, two in the last.
      if (x.num_elements() >= 6) {
        x.data<T>()[0] = 0;
        x.data<T>()[x.num_elements() - 1] = 0;
        x.data<T>()[x.num_elements() - 2] = 0;
      }
      Tensor grad = RandomTensor<T>(kept, seed++, -2, 2);
      Tensor want = RefProdGrad<T>(x, reduce, grad);
      for (DataType idx : {DataType::kInt32, DataType::kInt64}) {
        Tensor axes = idx == DataType::kInt32
                          ? IndexTensor<int32_t>(c.axes, TensorShape({int64_t(c.axes.size())}))
                          : IndexTensor<int64_t>(c.axes, TensorShape({int64_t(c.axes.size())}));
        for (int threads : {1, 2}) {
          Tensor got = RunOp1("ProdGrad", {x, axes, grad}, {}, CpuTestDevice(threads));
          EXPECT_TRUE(TensorNear(got, want, 10 * kRtol<T>, 1e-12))
              << c.shape.ToString() << " axes " << VectorStr(c.axes);
        }
      }
    }
    // Hand-worked, with zeros: rows [2 0 3] and [0 0 5].
    Tensor got = RunOp1(
        "ProdGrad", {TS<T>({2, 0, 3, 0, 0, 5}, {2, 3}), T1<int32_t>({1}), TS<T>({1, 10}, {2, 1})});
    EXPECT_TRUE(TensorEq(got, TS<T>({0, 6, 0, 0, 0, 0}, {2, 3})));
    // A scalar axis.
    got = RunOp1("ProdGrad",
                 {TS<T>({1, 2, 3, 4}, {2, 2}), Tensor::Scalar<int64_t>(0), TS<T>({1, 1}, {1, 2})});
    EXPECT_TRUE(TensorEq(got, TS<T>({3, 4, 1, 2}, {2, 2})));
  });
}

TEST(GradSupportProdGrad, Errors) {
  Tensor x = TS<float>({1, 2, 3, 4}, {2, 2});
  EXPECT_TRUE(IsOpError(RunOp("ProdGrad", {x, T1<int32_t>({1}), TS<float>({1, 1}, {1, 2})}),
                        "grad has shape [1, 2]"));
  EXPECT_TRUE(IsOpError(RunOp("ProdGrad", {x, T1<int32_t>({2}), TS<float>({1, 1}, {2, 1})}),
                        "out of range"));
}

}  // namespace
}  // namespace flowstate::test

// BroadcastGradientArgs, BroadcastTo, ConcatOffset, StridedSliceGrad,
// InvertPermutation and ReducedShape for every registered dtype
// combination, against plain-loop references and hand-worked cases, plus
// the error cases.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <numeric>
#include <random>

#include "tests/devices/fed_inputs_util.h"
#include "tests/devices/nn_test_util.h"

namespace flowstate::test {
namespace {

const DataType kIndexTypes[] = {DataType::kInt32, DataType::kInt64};

// An int32 or int64 vector.
Tensor Ints(const std::vector<int64_t>& v, DataType t) {
  if (t == DataType::kInt32) {
    std::vector<int32_t> w(v.begin(), v.end());
    return T1<int32_t>(w);
  }
  return T1<int64_t>(v);
}

std::vector<int64_t> AsInts(const Tensor& t) {
  std::vector<int64_t> v;
  for (int64_t i = 0; i < t.num_elements(); ++i) v.push_back(int64_t(t.ElementAsDouble(i)));
  return v;
}

// ---------------------------------------------------------------------------
// BroadcastGradientArgs.

// Straight from the definition: for each axis of the broadcast result
// (shapes right-aligned, missing dims 1), operand i reduces it when its dim
// is 1 and the result's is not, or when every operand has 1 there.
void RefGradientArgs(std::vector<int64_t> a, std::vector<int64_t> b, std::vector<int64_t>* ra,
                     std::vector<int64_t>* rb) {
  const size_t rank = std::max(a.size(), b.size());
  a.insert(a.begin(), rank - a.size(), 1);
  b.insert(b.begin(), rank - b.size(), 1);
  ra->clear();
  rb->clear();
  for (size_t i = 0; i < rank; ++i) {
    const int64_t out = a[i] == 1 ? b[i] : a[i];
    if (a[i] == 1 && (out != 1 || b[i] == 1)) ra->push_back(int64_t(i));
    if (b[i] == 1 && (out != 1 || a[i] == 1)) rb->push_back(int64_t(i));
  }
}

TEST(GradSupportBroadcastGradientArgs, MatchesDefinitionForBothIndexTypes) {
  const std::vector<std::pair<std::vector<int64_t>, std::vector<int64_t>>> cases = {
      {{2, 3, 5}, {5}},    {{2, 1, 5}, {3, 1}},      {{}, {4}}, {{1, 1}, {1}},
      {{0, 3}, {1, 3}},    {{4, 5}, {4, 5}},         {{}, {}},  {{1, 4, 1, 6}, {7, 1, 5, 1}},
      {{3, 1}, {1, 1, 1}}, {{8, 1, 6, 1}, {7, 1, 5}}};
  for (DataType t : kIndexTypes) {
    for (const auto& [a, b] : cases) {
      auto got = RunOp("BroadcastGradientArgs", {Ints(a, t), Ints(b, t)});
      ASSERT_TRUE(got.ok()) << got.status().ToString();
      std::vector<int64_t> ra, rb;
      RefGradientArgs(a, b, &ra, &rb);
      EXPECT_EQ(AsInts((*got)[0]), ra) << VectorStr(a) << " " << VectorStr(b);
      EXPECT_EQ(AsInts((*got)[1]), rb) << VectorStr(a) << " " << VectorStr(b);
      EXPECT_EQ((*got)[0].dtype(), t);
    }
  }
  // Hand-worked: [2, 1, 5] with [3, 1] broadcast to [2, 3, 5].
  auto got = RunOp("BroadcastGradientArgs",
                   {Ints({2, 1, 5}, DataType::kInt32), Ints({3, 1}, DataType::kInt32)});
  ASSERT_TRUE(got.ok());
  EXPECT_TRUE(TensorEq((*got)[0], T1<int32_t>({1})));
  EXPECT_TRUE(TensorEq((*got)[1], T1<int32_t>({0, 2})));
}

TEST(GradSupportBroadcastGradientArgs, Errors) {
  EXPECT_TRUE(IsOpError(RunOp("BroadcastGradientArgs", {T1<int32_t>({2, 3}), T1<int32_t>({4})}),
                        "cannot be broadcast"));
  EXPECT_TRUE(
      IsOpError(RunOp("BroadcastGradientArgs", {T1<int64_t>({-1}), T1<int64_t>({4})}), "negative"));
  EXPECT_TRUE(IsOpError(
      RunOpOnFedInputs("BroadcastGradientArgs", {Tensor::Scalar<int32_t>(1), T1<int32_t>({4})}),
      "must be a vector"));
}

// ---------------------------------------------------------------------------
// BroadcastTo.

// Element i of `out` (row-major) reads element RefSource(...) of `in`.
int64_t RefSource(const TensorShape& out, const TensorShape& in, int64_t i) {
  int64_t src = 0, stride = 1;
  for (int d = out.rank() - 1; d >= 0; --d) {
    const int64_t coord = i % out.dim(d);
    i /= out.dim(d);
    const int di = d - (out.rank() - in.rank());
    if (di < 0) continue;
    if (in.dim(di) != 1) src += coord * stride;
    stride *= in.dim(di);
  }
  return src;
}

Tensor RefBroadcastTo(const Tensor& in, const TensorShape& out) {
  Tensor r(in.dtype(), out);
  const size_t es = DataTypeSize(in.dtype());
  for (int64_t i = 0; i < out.num_elements(); ++i) {
    std::memcpy(static_cast<char*>(r.raw_data()) + i * es,
                static_cast<const char*>(in.raw_data()) + RefSource(out, in.shape(), i) * es, es);
  }
  return r;
}

// Distinct bit patterns per element, for any dtype.
Tensor Patterned(DataType t, const TensorShape& s, uint64_t seed) {
  Tensor r(t, s);
  std::mt19937_64 rng(seed);
  auto* b = static_cast<uint8_t*>(r.raw_data());
  for (size_t i = 0; i < r.TotalBytes(); ++i) b[i] = uint8_t(rng());
  if (t == DataType::kBool) {
    for (size_t i = 0; i < r.TotalBytes(); ++i) b[i] &= 1;
  }
  return r;
}

bool SameBytes(const Tensor& a, const Tensor& b) {
  // An empty tensor may have no buffer: memcmp of a null pointer is
  // undefined even for 0 bytes (UBSan's nonnull-attribute check).
  return a.dtype() == b.dtype() && a.shape() == b.shape() &&
         (a.TotalBytes() == 0 || std::memcmp(a.raw_data(), b.raw_data(), a.TotalBytes()) == 0);
}

TEST(GradSupportBroadcastTo, EveryDtypeAndIndexType) {
  const std::vector<std::pair<TensorShape, TensorShape>> cases = {
      {{3}, {2, 3}},    {{2, 1}, {2, 3}},    {{}, {2, 2}},          {{1, 3, 1}, {2, 3, 4}},
      {{1}, {0}},       {{0}, {2, 0}},       {{4, 5}, {4, 5}},      {{5, 1, 3}, {2, 5, 7, 3}},
      {{1, 1}, {1, 1}}, {{257}, {300, 257}}, {{300, 1}, {300, 257}}};
  uint64_t seed = 1;
  for (DataType idx : kIndexTypes) {
    for (DataType t : AllDataTypes()) {
      for (const auto& [in_shape, out_shape] : cases) {
        Tensor in = Patterned(t, in_shape, seed++);
        for (int threads : {1, 2}) {
          Tensor got = RunOp1("BroadcastTo", {in, Ints(out_shape.dim_vector(), idx)}, {},
                              CpuTestDevice(threads));
          EXPECT_TRUE(SameBytes(got, RefBroadcastTo(in, out_shape)))
              << TypeName(t) << " " << in_shape.ToString() << " -> " << out_shape.ToString();
        }
      }
    }
  }
  // The same shape shares the buffer.
  Tensor x = Patterned(DataType::kFloat32, TensorShape({3, 4}), 9);
  EXPECT_TRUE(RunOp1("BroadcastTo", {x, T1<int32_t>({3, 4})}).SharesBufferWith(x));
}

TEST(GradSupportBroadcastTo, Errors) {
  EXPECT_TRUE(IsOpError(RunOpOnFedInputs("BroadcastTo", {T1<float>({1, 2, 3}), T1<int32_t>({4})}),
                        "cannot broadcast"));
  EXPECT_TRUE(IsOpError(RunOpOnFedInputs("BroadcastTo", {T1<float>({1, 2, 3}), T1<int32_t>({1})}),
                        "cannot broadcast"));
  EXPECT_TRUE(
      IsOpError(RunOpOnFedInputs("BroadcastTo", {TS<float>({1, 2}, {1, 2}), T1<int32_t>({2})}),
                "cannot broadcast"));
  EXPECT_TRUE(
      IsOpError(RunOpOnFedInputs("BroadcastTo", {T1<float>({1}), T1<int64_t>({-2})}), "shape"));
}

// ---------------------------------------------------------------------------
// ConcatOffset.

TEST(GradSupportConcatOffset, OffsetsAlongTheConcatDimension) {
  const std::vector<Tensor> shapes = {T1<int32_t>({2, 3, 4}), T1<int32_t>({2, 5, 4}),
                                      T1<int32_t>({2, 1, 4})};
  for (int32_t dim : {1, -2}) {
    std::vector<Tensor> in = {Tensor::Scalar<int32_t>(dim)};
    in.insert(in.end(), shapes.begin(), shapes.end());
    auto got = RunOp("ConcatOffset", in);
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    ASSERT_EQ(got->size(), 3u);
    EXPECT_TRUE(TensorEq((*got)[0], T1<int32_t>({0, 0, 0})));
    EXPECT_TRUE(TensorEq((*got)[1], T1<int32_t>({0, 3, 0})));
    EXPECT_TRUE(TensorEq((*got)[2], T1<int32_t>({0, 8, 0})));
  }
  auto one = RunOp("ConcatOffset", {Tensor::Scalar<int32_t>(0), T1<int32_t>({7})});
  ASSERT_TRUE(one.ok());
  EXPECT_TRUE(TensorEq((*one)[0], T1<int32_t>({0})));
  auto first = RunOp("ConcatOffset", {Tensor::Scalar<int32_t>(0), T1<int32_t>({0, 2}),
                                      T1<int32_t>({3, 2}), T1<int32_t>({1, 2})});
  ASSERT_TRUE(first.ok());
  EXPECT_TRUE(TensorEq((*first)[2], T1<int32_t>({3, 0})));
}

TEST(GradSupportConcatOffset, Errors) {
  EXPECT_TRUE(IsOpError(
      RunOp("ConcatOffset", {Tensor::Scalar<int32_t>(1), T1<int32_t>({2, 3}), T1<int32_t>({3, 3})}),
      "does not match shape 0"));
  EXPECT_TRUE(IsOpError(RunOp("ConcatOffset", {Tensor::Scalar<int32_t>(0), T1<int32_t>({2, 3}),
                                               T1<int32_t>({2, 3, 1})}),
                        "does not match shape 0"));
  EXPECT_TRUE(IsOpError(
      RunOp("ConcatOffset", {Tensor::Scalar<int32_t>(2), T1<int32_t>({2, 3}), T1<int32_t>({2, 3})}),
      "out of range"));
  EXPECT_TRUE(IsOpError(RunOp("ConcatOffset", {Tensor::Scalar<int32_t>(-3), T1<int32_t>({2, 3})}),
                        "out of range"));
}

// ---------------------------------------------------------------------------
// StridedSliceGrad.

struct SliceCase {
  std::vector<int64_t> shape, begin, end, strides;
  int64_t begin_mask = 0, end_mask = 0, ellipsis_mask = 0, new_axis_mask = 0, shrink_mask = 0;
};

AttrMap SliceAttrs(const SliceCase& c) {
  return {{"begin_mask", AttrValue(c.begin_mask)},
          {"end_mask", AttrValue(c.end_mask)},
          {"ellipsis_mask", AttrValue(c.ellipsis_mask)},
          {"new_axis_mask", AttrValue(c.new_axis_mask)},
          {"shrink_axis_mask", AttrValue(c.shrink_mask)}};
}

std::vector<SliceCase> SliceCases() {
  return {
      {{5}, {1}, {4}, {1}},
      {{5}, {4}, {0}, {-2}},                                     // negative stride
      {{5}, {0}, {0}, {1}, 1, 1},                                // begin/end masks: all
      {{3, 4}, {1, 0}, {2, 4}, {1, 1}, 0, 0, 0, 0, 1},           // shrink axis 0
      {{3, 4}, {0, -1}, {3, 0}, {1, -1}, 0, 2},                  // reversed columns
      {{2, 3, 4}, {0, 1}, {0, 3}, {1, 2}, 0, 0, 1},              // ellipsis then dim 2
      {{2, 3, 4}, {0, 0, 1}, {0, 0, 3}, {1, 1, 1}, 1, 1, 0, 2},  // new axis
      {{4, 6}, {1, 1}, {4, 6}, {2, 3}},
      {{4, 6}, {2, 2}, {2, 5}, {1, 1}},          // empty slice
      {{3, 0}, {0, 0}, {3, 0}, {1, 1}},          // empty input
      {{256, 300}, {1, 3}, {255, 299}, {2, 1}},  // big rows (threads)
      {{2, 3}, {0, 0}, {2, 3}, {1, 1}},          // identity
      {{}, {}, {}, {}},                          // a scalar
  };
}

// The expected gradient through the forward op: slicing an iota of `shape`
// says which input element each dy element came from.
Tensor ExpectedSliceGrad(const SliceCase& c, const Tensor& dy_f) {
  TensorShape s(std::span<const int64_t>(c.shape));
  Tensor iota(DataType::kFloat64, s);
  for (int64_t i = 0; i < s.num_elements(); ++i) iota.data<double>()[i] = double(i);
  Tensor from = RunOp1("StridedSlice",
                       {iota, T1<int64_t>(c.begin), T1<int64_t>(c.end), T1<int64_t>(c.strides)},
                       SliceAttrs(c));
  Tensor want(DataType::kFloat64, s);
  std::fill_n(want.data<double>(), want.num_elements(), 0.0);
  EXPECT_EQ(from.shape(), dy_f.shape());
  for (int64_t k = 0; k < from.num_elements(); ++k) {
    want.data<double>()[int64_t(from.data<double>()[k])] = dy_f.data<double>()[k];
  }
  return want;
}

TEST(GradSupportStridedSliceGrad, ScattersDyWhereTheSliceReadForEveryMask) {
  uint64_t seed = 1;
  for (const SliceCase& c : SliceCases()) {
    TensorShape s(std::span<const int64_t>(c.shape));
    Tensor probe = RunOp1("StridedSlice",
                          {Tensor(DataType::kFloat64, s), T1<int64_t>(c.begin), T1<int64_t>(c.end),
                           T1<int64_t>(c.strides)},
                          SliceAttrs(c));
    Tensor dy = RandomTensor<double>(probe.shape(), seed++, 1, 2);
    Tensor want = ExpectedSliceGrad(c, dy);
    for (DataType idx : kIndexTypes) {
      for (int threads : {1, 2}) {
        Tensor got = RunOp1(
            "StridedSliceGrad",
            {Ints(c.shape, idx), Ints(c.begin, idx), Ints(c.end, idx), Ints(c.strides, idx), dy},
            SliceAttrs(c), CpuTestDevice(threads));
        EXPECT_TRUE(TensorEq(got, want)) << VectorStr(c.shape) << " " << VectorStr(c.begin) << " "
                                         << VectorStr(c.end) << " " << VectorStr(c.strides);
      }
    }
  }
  // Hand-worked: x[4:0:-2] of 5 elements reads x[4] and x[2].
  Tensor got = RunOp1("StridedSliceGrad", {T1<int32_t>({5}), T1<int32_t>({4}), T1<int32_t>({0}),
                                           T1<int32_t>({-2}), T1<float>({7, 8})});
  EXPECT_TRUE(TensorEq(got, T1<float>({0, 0, 8, 0, 7})));
}

TEST(GradSupportStridedSliceGrad, EveryDtypeAndIndexType) {
  const SliceCase c = {{3, 4}, {0, 3}, {3, 0}, {2, -2}};  // rows 0, 2; columns 3, 1
  uint64_t seed = 7;
  for (DataType t : AllDataTypes()) {
    for (DataType idx : kIndexTypes) {
      Tensor dy = Patterned(t, TensorShape({2, 2}), seed++);
      Tensor got = RunOp1("StridedSliceGrad", {Ints(c.shape, idx), Ints(c.begin, idx),
                                               Ints(c.end, idx), Ints(c.strides, idx), dy});
      Tensor want(t, TensorShape({3, 4}));
      std::memset(want.raw_data(), 0, want.TotalBytes());
      const size_t es = DataTypeSize(t);
      const int64_t dst[4] = {0 * 4 + 3, 0 * 4 + 1, 2 * 4 + 3, 2 * 4 + 1};
      for (int k = 0; k < 4; ++k) {
        std::memcpy(static_cast<char*>(want.raw_data()) + dst[k] * es,
                    static_cast<const char*>(dy.raw_data()) + k * es, es);
      }
      EXPECT_TRUE(SameBytes(got, want)) << TypeName(t) << " " << TypeName(idx);
    }
  }
}

TEST(GradSupportStridedSliceGrad, Errors) {
  auto r = RunOp("StridedSliceGrad", {T1<int32_t>({5}), T1<int32_t>({1}), T1<int32_t>({4}),
                                      T1<int32_t>({1}), T1<float>({1, 2})});
  EXPECT_TRUE(IsOpError(r, "dy has shape [2]"));
  r = RunOp("StridedSliceGrad", {T1<int32_t>({5}), T1<int32_t>({1}), T1<int32_t>({4}),
                                 T1<int32_t>({0}), T1<float>({1, 2})});
  EXPECT_TRUE(IsOpError(r, "stride"));
  r = RunOp("StridedSliceGrad", {T1<int32_t>({5, -1}), T1<int32_t>({1, 0}), T1<int32_t>({4, 1}),
                                 T1<int32_t>({1, 1}), T1<float>({1, 2})});
  EXPECT_FALSE(r.ok());
}

// ---------------------------------------------------------------------------
// InvertPermutation.

TEST(GradSupportInvertPermutation, InvertsForBothTypes) {
  EXPECT_TRUE(TensorEq(RunOp1("InvertPermutation", {T1<int32_t>({2, 0, 3, 1})}),
                       T1<int32_t>({1, 3, 0, 2})));
  EXPECT_TRUE(TensorEq(RunOp1("InvertPermutation", {T1<int64_t>({2, 0, 3, 1})}),
                       T1<int64_t>({1, 3, 0, 2})));
  EXPECT_TRUE(TensorEq(RunOp1("InvertPermutation", {T1<int32_t>({})}), T1<int32_t>({})));
  std::vector<int64_t> p(1000);
  std::iota(p.begin(), p.end(), 0);
  std::shuffle(p.begin(), p.end(), std::mt19937_64(3));
  std::vector<int64_t> inv(p.size());
  for (size_t i = 0; i < p.size(); ++i) inv[size_t(p[i])] = int64_t(i);
  EXPECT_TRUE(TensorEq(RunOp1("InvertPermutation", {T1<int64_t>(p)}), T1<int64_t>(inv)));
}

TEST(GradSupportInvertPermutation, RejectsNonPermutations) {
  EXPECT_TRUE(IsOpError(RunOp("InvertPermutation", {T1<int32_t>({0, 2, 0})}), "repeats x[0]"));
  EXPECT_TRUE(IsOpError(RunOp("InvertPermutation", {T1<int64_t>({0, 3, 1})}), "x[1] = 3"));
  EXPECT_TRUE(IsOpError(RunOp("InvertPermutation", {T1<int32_t>({-1, 0})}), "x[0] = -1"));
  EXPECT_TRUE(IsOpError(RunOp("InvertPermutation", {TS<int32_t>({0, 1}, {1, 2})}), "vector"));
}

// ---------------------------------------------------------------------------
// ReducedShape.

TEST(GradSupportReducedShape, SetsReducedAxesToOne) {
  for (DataType idx : kIndexTypes) {
    auto run = [&](const std::vector<int64_t>& axes) {
      return RunOp1("ReducedShape", {T1<int32_t>({2, 3, 4}), Ints(axes, idx)});
    };
    EXPECT_TRUE(TensorEq(run({1}), T1<int32_t>({2, 1, 4})));
    EXPECT_TRUE(TensorEq(run({-1, 0}), T1<int32_t>({1, 3, 1})));
    EXPECT_TRUE(TensorEq(run({}), T1<int32_t>({1, 1, 1})));
    EXPECT_TRUE(TensorEq(run({2, -1}), T1<int32_t>({2, 3, 1})));
    Tensor scalar_axis =
        idx == DataType::kInt32 ? Tensor::Scalar<int32_t>(0) : Tensor::Scalar<int64_t>(0);
    EXPECT_TRUE(
        TensorEq(RunOp1("ReducedShape", {T1<int32_t>({2, 3}), scalar_axis}), T1<int32_t>({1, 3})));
    EXPECT_TRUE(
        TensorEq(RunOp1("ReducedShape", {T1<int32_t>({}), Ints({}, idx)}), T1<int32_t>({})));
    EXPECT_TRUE(
        IsOpError(RunOp("ReducedShape", {T1<int32_t>({2, 3}), Ints({2}, idx)}), "out of range"));
  }
}

}  // namespace
}  // namespace flowstate::test

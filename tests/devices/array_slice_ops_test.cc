// Slice, StridedSlice, Concat and Split against plain-loop references, for
// every dtype the kernels are registered for.
#include <gtest/gtest.h>

#include "graph/strided_slice.h"
#include "tests/devices/array_test_util.h"

namespace flowstate::test {
namespace {

// out[o] = x[begin + o] over the box `size`.
Tensor SliceRef(const Tensor& x, const std::vector<int64_t>& begin, std::vector<int64_t> size) {
  std::vector<int64_t> dims = x.shape().dim_vector();
  for (size_t d = 0; d < size.size(); ++d) {
    if (size[d] == -1) size[d] = dims[d] - begin[d];
  }
  TensorShape out_shape(size);
  std::vector<int64_t> src(out_shape.num_elements());
  for (int64_t j = 0; j < out_shape.num_elements(); ++j) {
    std::vector<int64_t> o = Unravel(j, size);
    for (size_t d = 0; d < o.size(); ++d) o[d] += begin[d];
    src[j] = Ravel(o, dims);
  }
  return Pick(x, out_shape, src);
}

TEST(ArraySlice, EveryDtypeAndIndexType) {
  struct Case {
    TensorShape in;
    std::vector<int64_t> begin, size;
  };
  const std::vector<Case> cases = {
      {{5, 7}, {1, 2}, {3, 4}},     {{5, 7}, {0, 3}, {-1, -1}},     {{5, 7}, {2, 0}, {2, -1}},
      {{4, 3, 6}, {1, 0, 2}, {2, 3, 3}}, {{4, 3, 6}, {3, 1, 0}, {1, 2, -1}}, {{}, {}, {}},
      {{0}, {0}, {0}},              {{3, 0}, {1, 0}, {2, 0}},       {{5, 7}, {5, 7}, {0, 0}},
      {{6}, {2}, {3}},
  };
  for (DataType t : AllDataTypes()) {
    for (DataType it : IndexTypes()) {
      for (const Case& c : cases) {
        Tensor x = RandomOf(t, c.in, 10);
        Tensor y = RunOp1("Slice", {x, Ix(it, c.begin), Ix(it, c.size)});
        EXPECT_TRUE(TensorsEqual(y, SliceRef(x, c.begin, c.size)))
            << DataTypeName(t) << " " << c.in.ToString();
      }
    }
  }
  for (int threads : {1, 2}) {
    Tensor x = RandomOf(DataType::kFloat32, {300, 400}, 11);
    Tensor y = RunOp1("Slice", {x, Ix(DataType::kInt32, {10, 7}), Ix(DataType::kInt32, {280, 390})},
                      {}, CpuTestDevice(threads));
    EXPECT_TRUE(TensorsEqual(y, SliceRef(x, {10, 7}, {280, 390})));
  }
}

TEST(ArraySlice, ContiguousSlicesShareTheBuffer) {
  Tensor x = RandomOf(DataType::kInt64, {4, 3, 5}, 12);
  Tensor rows = RunOp1("Slice", {x, Ix(DataType::kInt32, {1, 0, 0}), Ix(DataType::kInt32, {2, -1, -1})});
  EXPECT_TRUE(rows.SharesBufferWith(x));
  EXPECT_TRUE(TensorsEqual(rows, SliceRef(x, {1, 0, 0}, {2, -1, -1})));
  // One index of dimension 0, a run of dimension 1, all of dimension 2.
  Tensor inner = RunOp1("Slice", {x, Ix(DataType::kInt64, {2, 1, 0}), Ix(DataType::kInt64, {1, 2, 5})});
  EXPECT_TRUE(inner.SharesBufferWith(x));
  EXPECT_TRUE(TensorsEqual(inner, SliceRef(x, {2, 1, 0}, {1, 2, 5})));
  // Not contiguous: copied.
  Tensor cols = RunOp1("Slice", {x, Ix(DataType::kInt32, {0, 0, 1}), Ix(DataType::kInt32, {-1, -1, 2})});
  EXPECT_FALSE(cols.SharesBufferWith(x));
  EXPECT_TRUE(TensorsEqual(cols, SliceRef(x, {0, 0, 1}, {-1, -1, 2})));
}

TEST(ArraySlice, RejectsBadBeginAndSize) {
  Tensor x = RandomOf(DataType::kFloat32, {4, 3}, 1);
  auto run = [&](std::vector<int64_t> b, std::vector<int64_t> s) {
    return RunKernelOnly("Slice", {x, Ix(DataType::kInt32, b), Ix(DataType::kInt32, s)});
  };
  EXPECT_TRUE(IsKernelError(run({5, 0}, {1, 1}), "begin[0] = 5 is out of range [0, 4]"));
  EXPECT_TRUE(IsKernelError(run({-1, 0}, {1, 1}), "begin[0] = -1 is out of range"));
  EXPECT_TRUE(IsKernelError(run({1, 1}, {1, 3}), "size[1] = 3 is out of range"));
  EXPECT_TRUE(IsKernelError(run({1, 1}, {-2, 1}), "size[0] = -2 is out of range"));
  EXPECT_TRUE(IsKernelError(run({1}, {1}), "one entry per dimension"));
  EXPECT_TRUE(IsKernelError(
      RunKernelOnly("Slice", {x, IxScalar(DataType::kInt64, 0), IxScalar(DataType::kInt64, 1)}),
      "begin must be a vector"));
}

struct SS {
  std::vector<int64_t> begin, end, strides;
  int64_t begin_mask = 0, end_mask = 0, ellipsis = 0, new_axis = 0, shrink = 0;
  AttrMap attrs() const {
    return {{"begin_mask", AttrValue(begin_mask)},  {"end_mask", AttrValue(end_mask)},
            {"ellipsis_mask", AttrValue(ellipsis)}, {"new_axis_mask", AttrValue(new_axis)},
            {"shrink_axis_mask", AttrValue(shrink)}};
  }
};

Tensor RunSS(const Tensor& x, const SS& s, DataType it = DataType::kInt32, Device* device = nullptr) {
  return RunOp1("StridedSlice", {x, Ix(it, s.begin), Ix(it, s.end), Ix(it, s.strides)}, s.attrs(),
                device);
}

TEST(ArrayStridedSlice, NumPyExamples) {
  // x = [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10, 11]]
  std::vector<float> iota(12);
  for (int i = 0; i < 12; ++i) iota[i] = float(i);
  Tensor x = TS<float>(iota, {3, 4});
  // x[1:3, ::2]
  EXPECT_TRUE(TensorEq(RunSS(x, {{1, 0}, {3, 0}, {1, 2}, 0, 2}), TS<float>({4, 6, 8, 10}, {2, 2})));
  // x[::-1, ::-1]
  EXPECT_TRUE(TensorEq(RunSS(x, {{0, 0}, {0, 0}, {-1, -1}, 3, 3}),
                       TS<float>({11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0}, {3, 4})));
  // x[-1] shares the buffer.
  Tensor last = RunSS(x, {{-1}, {0}, {1}, 0, 0, 0, 0, 1});
  EXPECT_TRUE(TensorEq(last, T1<float>({8, 9, 10, 11})));
  EXPECT_TRUE(last.SharesBufferWith(x));
  // x[..., 1]
  EXPECT_TRUE(TensorEq(RunSS(x, {{0, 1}, {0, 2}, {1, 1}, 0, 0, 1, 0, 2}), T1<float>({1, 5, 9})));
  // x[None, 1:, 3:0:-2]
  EXPECT_TRUE(TensorEq(RunSS(x, {{0, 1, 3}, {0, 0, 0}, {1, 1, -2}, 0, 2, 0, 1}),
                       TS<float>({7, 5, 11, 9}, {1, 2, 2})));
  // x[1:1] and x[:, 10:] are empty.
  EXPECT_EQ(RunSS(x, {{1}, {1}, {1}}).shape(), TensorShape({0, 4}));
  EXPECT_EQ(RunSS(x, {{0, 10}, {0, 20}, {1, 1}, 1, 1}).shape(), TensorShape({3, 0}));
  // x[2, -3] is a scalar.
  EXPECT_TRUE(TensorEq(RunSS(x, {{2, -3}, {0, 0}, {1, 1}, 0, 0, 0, 0, 3}), Tensor::Scalar<float>(9)));
  // x[:, -1:-5:-1], negative indices with a negative stride.
  EXPECT_TRUE(TensorEq(RunSS(x, {{0, -1}, {0, -5}, {1, -1}, 1, 1}),
                       TS<float>({3, 2, 1, 0, 7, 6, 5, 4, 11, 10, 9, 8}, {3, 4})));
  Tensor v = T1<int64_t>({0, 1, 2, 3, 4, 5, 6, 7, 8, 9});
  EXPECT_TRUE(TensorEq(RunSS(v, {{8}, {2}, {-3}}, DataType::kInt64), T1<int64_t>({8, 5})));
  Tensor all = RunSS(v, {{-100}, {100}, {1}});
  EXPECT_TRUE(TensorEq(all, v));
  EXPECT_TRUE(all.SharesBufferWith(v));
  EXPECT_TRUE(TensorEq(RunSS(v, {{0}, {0}, {3}, 1, 1}), T1<int64_t>({0, 3, 6, 9})));
}

// Reference from the shared plan: out[o] = x[begin + o * stride] per dim.
Tensor StridedRef(const Tensor& x, const SS& s) {
  StridedSliceMasks m{s.begin_mask, s.end_mask, s.ellipsis, s.new_axis, s.shrink};
  StridedSlicePlan plan =
      PlanStridedSlice(x.shape().dim_vector(), s.begin, s.end, s.strides, m).value();
  std::vector<int64_t> dims = x.shape().dim_vector(), lens;
  for (const auto& d : plan.dims) lens.push_back(d.length);
  int64_t n = 1;
  for (int64_t l : lens) n *= l;
  std::vector<int64_t> src(n);
  for (int64_t j = 0; j < n; ++j) {
    std::vector<int64_t> o = Unravel(j, lens);
    for (size_t d = 0; d < o.size(); ++d) o[d] = plan.dims[d].begin + o[d] * plan.dims[d].stride;
    src[j] = Ravel(o, dims);
  }
  return Pick(x, TensorShape(plan.output_shape), src);
}

TEST(ArrayStridedSlice, EveryDtypeAgainstThePlan) {
  const std::vector<std::pair<TensorShape, SS>> cases = {
      {{6, 5}, {{1, -1}, {5, 0}, {2, -2}}},
      {{6, 5}, {{0, 0}, {0, 0}, {-1, 1}, 3, 3}},
      {{4, 3, 5}, {{1, 0, 4}, {3, 0, 0}, {1, 1, -1}, 0, 2, 0, 0, 0}},
      {{4, 3, 5}, {{0, 2}, {0, 0}, {1, 1}, 0, 0, 1, 0, 2}},
      {{4, 3, 5}, {{0, 0, 1, 0}, {2, 0, 2, 0}, {1, 1, 1, 2}, 0, 10, 2, 0, 0}},
      {{4, 3, 5}, {{1, 0, 0}, {2, 0, 3}, {1, 1, 1}, 0, 0, 0, 2, 1}},
      {{0, 3}, {{0, 1}, {0, 3}, {1, 1}, 1, 1}},
      {{7}, {{6}, {0}, {-4}}},
      {{}, {{}, {}, {}}},
  };
  for (DataType t : AllDataTypes()) {
    for (DataType it : IndexTypes()) {
      for (const auto& [shape, s] : cases) {
        Tensor x = RandomOf(t, shape, 13);
        EXPECT_TRUE(TensorsEqual(RunSS(x, s, it), StridedRef(x, s)))
            << DataTypeName(t) << " " << shape.ToString();
      }
    }
  }
  for (int threads : {1, 2}) {
    Tensor x = RandomOf(DataType::kInt32, {200, 300, 3}, 14);
    SS s{{199, 1, 0}, {0, 299, 3}, {-1, 2, 1}, 0, 0};
    EXPECT_TRUE(TensorsEqual(RunSS(x, s, DataType::kInt32, CpuTestDevice(threads)), StridedRef(x, s)));
  }
}

TEST(ArrayStridedSlice, RejectsBadSpecs) {
  Tensor x = RandomOf(DataType::kFloat32, {3, 4}, 1);
  auto run = [&](const SS& s) {
    return RunKernelOnly("StridedSlice", {x, Ix(DataType::kInt32, s.begin), Ix(DataType::kInt32, s.end),
                                          Ix(DataType::kInt32, s.strides)},
                         s.attrs());
  };
  EXPECT_TRUE(IsKernelError(run({{0}, {1}, {0}}), "stride 0 is zero"));
  EXPECT_TRUE(IsKernelError(run({{5}, {0}, {1}, 0, 0, 0, 0, 1}), "out of range"));
  EXPECT_TRUE(IsKernelError(run({{0, 0}, {1}, {1, 1}}), "same length"));
  EXPECT_TRUE(IsKernelError(run({{0, 0, 0}, {1, 1, 1}, {1, 1, 1}}), "dimensions of a rank-2 input"));
  EXPECT_TRUE(IsKernelError(RunKernelOnly("StridedSlice", {x, IxScalar(DataType::kInt32, 0),
                                                           IxScalar(DataType::kInt32, 1),
                                                           IxScalar(DataType::kInt32, 1)}),
                            "begin must be a vector"));
}

// Concatenation of `xs` along `axis` (already non-negative).
Tensor ConcatRef(const std::vector<Tensor>& xs, int axis) {
  std::vector<int64_t> dims = xs[0].shape().dim_vector();
  dims[axis] = 0;
  for (const Tensor& x : xs) dims[axis] += x.dim(axis);
  TensorShape out_shape(dims);
  // Element by element: find the input that covers the output's axis index.
  std::vector<int64_t> src;
  std::vector<int> which;
  for (int64_t j = 0; j < out_shape.num_elements(); ++j) {
    std::vector<int64_t> o = Unravel(j, dims);
    int i = 0;
    while (o[axis] >= xs[i].dim(axis)) o[axis] -= xs[i++].dim(axis);
    src.push_back(Ravel(o, xs[i].shape().dims()));
    which.push_back(i);
  }
  Tensor out(xs[0].dtype(), out_shape);
  const size_t es = DataTypeSize(out.dtype());
  for (size_t j = 0; j < src.size(); ++j) {
    std::memcpy(static_cast<char*>(out.raw_data()) + j * es,
                static_cast<const char*>(xs[which[j]].raw_data()) + src[j] * es, es);
  }
  return out;
}

TEST(ArrayConcat, EveryDtypeAxisAndIndexType) {
  struct Case {
    std::vector<TensorShape> shapes;
    int64_t axis;
  };
  const std::vector<Case> cases = {
      {{{2, 3}, {4, 3}}, 0},         {{{2, 3}, {2, 5}}, 1},         {{{2, 3}, {2, 5}, {2, 1}}, -1},
      {{{2, 0}, {2, 4}, {2, 0}}, 1}, {{{3, 2, 4}, {3, 1, 4}}, -2},  {{{0, 3}, {0, 3}}, 1},
      {{{5}}, 0},                    {{{1, 2, 3}, {1, 2, 20}}, 2},  {{{0}, {3}, {2}}, 0},
  };
  for (DataType t : AllDataTypes()) {
    for (DataType it : IndexTypes()) {
      for (const Case& c : cases) {
        std::vector<Tensor> xs, inputs;
        for (size_t i = 0; i < c.shapes.size(); ++i) xs.push_back(RandomOf(t, c.shapes[i], 20 + i));
        inputs = xs;
        inputs.push_back(IxScalar(it, c.axis));
        const int rank = c.shapes[0].rank();
        Tensor y = RunOp1("Concat", inputs);
        EXPECT_TRUE(TensorsEqual(y, ConcatRef(xs, int(c.axis < 0 ? c.axis + rank : c.axis))))
            << DataTypeName(t) << " axis " << c.axis;
      }
    }
  }
  for (int threads : {1, 2}) {
    for (int axis : {0, 1}) {
      std::vector<Tensor> xs = {RandomOf(DataType::kFloat64, {400, 300}, 1),
                                RandomOf(DataType::kFloat64, {400, 300}, 2)};
      Tensor y = RunOp1("Concat", {xs[0], xs[1], IxScalar(DataType::kInt32, axis)}, {},
                        CpuTestDevice(threads));
      EXPECT_TRUE(TensorsEqual(y, ConcatRef(xs, axis)));
    }
  }
}

TEST(ArrayConcat, RejectsMismatchedInputs) {
  Tensor a = RandomOf(DataType::kFloat32, {2, 3}, 1), b = RandomOf(DataType::kFloat32, {3, 3}, 2);
  Tensor c = RandomOf(DataType::kFloat32, {2, 3, 1}, 3);
  auto axis = [](int64_t v) { return IxScalar(DataType::kInt32, v); };
  EXPECT_TRUE(IsKernelError(RunKernelOnly("Concat", {a, b, axis(1)}),
                            "input 1 has shape [3, 3], which does not match"));
  EXPECT_TRUE(IsKernelError(RunKernelOnly("Concat", {a, c, axis(0)}), "does not match"));
  EXPECT_TRUE(IsKernelError(RunKernelOnly("Concat", {a, a, axis(2)}), "axis 2 is out of range"));
  EXPECT_TRUE(IsKernelError(RunKernelOnly("Concat", {a, a, axis(-3)}), "out of range"));
  EXPECT_TRUE(IsKernelError(RunKernelOnly("Concat", {a, a, Ix(DataType::kInt32, {0, 1})}),
                            "axis must be a scalar"));
  Tensor s = Tensor::Scalar<float>(1);
  EXPECT_TRUE(IsKernelError(RunKernelOnly("Concat", {s, s, axis(0)}), "cannot concatenate scalars"));
}

void CheckSplit(DataType t, const TensorShape& shape, int64_t axis, int num,
                Device* device = nullptr) {
  Tensor x = RandomOf(t, shape, 30);
  auto r = RunOp("Split", {Tensor::Scalar<int32_t>(int32_t(axis)), x},
                 {{"num_split", AttrValue(int64_t(num))}}, device);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(int(r->size()), num);
  const int a = int(axis < 0 ? axis + shape.rank() : axis);
  const int64_t piece = shape.dim(a) / num;
  for (int i = 0; i < num; ++i) {
    std::vector<int64_t> begin(shape.rank(), 0), size(shape.rank(), -1);
    begin[a] = i * piece;
    size[a] = piece;
    EXPECT_TRUE(TensorsEqual((*r)[i], SliceRef(x, begin, size)))
        << DataTypeName(t) << " " << shape.ToString() << " axis " << axis << " part " << i;
  }
}

TEST(ArraySplit, EveryDtypeAndAxis) {
  for (DataType t : AllDataTypes()) {
    CheckSplit(t, {6, 4}, 0, 3);
    CheckSplit(t, {6, 4}, 1, 2);
    CheckSplit(t, {2, 3, 6}, -1, 3);
    CheckSplit(t, {2, 4, 3}, 1, 4);
    CheckSplit(t, {1, 6, 2}, 1, 2);
    CheckSplit(t, {5}, 0, 1);
    CheckSplit(t, {0, 4}, 1, 2);
    CheckSplit(t, {4, 0}, 0, 2);
    CheckSplit(t, {3, 0}, 1, 3);
  }
  for (int threads : {1, 2}) {
    CheckSplit(DataType::kFloat32, {300, 600}, 1, 3, CpuTestDevice(threads));
    CheckSplit(DataType::kUInt8, {2000, 600}, 0, 4, CpuTestDevice(threads));
  }
}

TEST(ArraySplit, ContiguousPartsShareTheBuffer) {
  Tensor x = RandomOf(DataType::kInt32, {6, 4}, 31);
  auto r = RunOp("Split", {Tensor::Scalar<int32_t>(0), x}, {{"num_split", AttrValue(int64_t(2))}});
  ASSERT_TRUE(r.ok());
  for (const Tensor& p : *r) EXPECT_TRUE(p.SharesBufferWith(x));
  Tensor y = RandomOf(DataType::kInt32, {1, 6, 4}, 32);
  r = RunOp("Split", {Tensor::Scalar<int32_t>(1), y}, {{"num_split", AttrValue(int64_t(3))}});
  ASSERT_TRUE(r.ok());
  for (const Tensor& p : *r) EXPECT_TRUE(p.SharesBufferWith(y));
  r = RunOp("Split", {Tensor::Scalar<int32_t>(-1), y}, {{"num_split", AttrValue(int64_t(2))}});
  ASSERT_TRUE(r.ok());
  for (const Tensor& p : *r) EXPECT_FALSE(p.SharesBufferWith(y));
}

TEST(ArraySplit, RejectsBadSplits) {
  Tensor x = RandomOf(DataType::kFloat32, {6, 4}, 1);
  auto num = [](int64_t n) { return AttrMap{{"num_split", AttrValue(n)}}; };
  EXPECT_TRUE(IsKernelError(RunKernelOnly("Split", {Tensor::Scalar<int32_t>(1), x}, num(3)),
                            "does not split evenly into 3 parts"));
  EXPECT_TRUE(IsKernelError(RunKernelOnly("Split", {Tensor::Scalar<int32_t>(2), x}, num(2)),
                            "axis 2 is out of range"));
  EXPECT_TRUE(IsKernelError(RunKernelOnly("Split", {Tensor::Scalar<int32_t>(-3), x}, num(2)),
                            "out of range"));
  EXPECT_TRUE(IsKernelError(
      RunKernelOnly("Split", {Tensor::Scalar<int32_t>(0), Tensor::Scalar<float>(1)}, num(1)),
      "cannot split a scalar"));
  EXPECT_TRUE(IsKernelError(RunKernelOnly("Split", {T1<int32_t>({0, 1}), x}, num(2)),
                            "axis must be a scalar"));
}

}  // namespace
}  // namespace flowstate::test

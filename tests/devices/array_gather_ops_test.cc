// Gather, Tile, Unique, PartitionIds and DynamicStitch against plain-loop
// references, for every dtype the kernels are registered for.
#include <gtest/gtest.h>

#include "tests/devices/array_test_util.h"

namespace flowstate::test {
namespace {

// out[p..., i..., q...] = params[p..., indices[i...], q...].
Tensor GatherRef(const Tensor& params, const std::vector<int64_t>& idx,
                 const TensorShape& idx_shape, int axis) {
  std::vector<int64_t> pd = params.shape().dim_vector(), od;
  od.insert(od.end(), pd.begin(), pd.begin() + axis);
  od.insert(od.end(), idx_shape.dims().begin(), idx_shape.dims().end());
  od.insert(od.end(), pd.begin() + axis + 1, pd.end());
  TensorShape out_shape(od);
  std::vector<int64_t> src(out_shape.num_elements());
  const int ir = idx_shape.rank();
  for (int64_t j = 0; j < out_shape.num_elements(); ++j) {
    std::vector<int64_t> o = Unravel(j, od), p;
    p.insert(p.end(), o.begin(), o.begin() + axis);
    std::vector<int64_t> i(o.begin() + axis, o.begin() + axis + ir);
    p.push_back(idx[Ravel(i, idx_shape.dims())]);
    p.insert(p.end(), o.begin() + axis + ir, o.end());
    src[j] = Ravel(p, pd);
  }
  return Pick(params, out_shape, src);
}

Tensor IndexTensor(DataType it, const std::vector<int64_t>& v, const TensorShape& shape) {
  Tensor flat = Ix(it, v);
  return flat.Reshaped(shape).value();
}

void CheckGather(DataType t, DataType it, const TensorShape& pshape,
                 const std::vector<int64_t>& idx, const TensorShape& ishape, int64_t axis,
                 Device* device = nullptr) {
  Tensor params = RandomOf(t, pshape, 40);
  Tensor y = RunOp1("Gather", {params, IndexTensor(it, idx, ishape)}, {{"axis", AttrValue(axis)}},
                    device);
  const int a = int(axis < 0 ? axis + pshape.rank() : axis);
  EXPECT_TRUE(TensorsEqual(y, GatherRef(params, idx, ishape, a)))
      << DataTypeName(t) << " params " << pshape.ToString() << " axis " << axis;
}

TEST(ArrayGather, EveryDtypeIndexTypeAndAxis) {
  for (DataType t : AllDataTypes()) {
    for (DataType it : IndexTypes()) {
      CheckGather(t, it, {5, 3}, {4, 0, 0, 2}, {4}, 0);
      CheckGather(t, it, {5, 3}, {2, 1, 0, 2, 2, 1}, {2, 3}, 1);
      CheckGather(t, it, {5, 3}, {1}, {}, -1);            // scalar index drops the axis
      CheckGather(t, it, {2, 4, 3}, {3, 1}, {2}, -2);
      CheckGather(t, it, {6, 12}, {5, 0, 3}, {3}, 0);     // rows longer than 8 elements
      CheckGather(t, it, {6}, {5, 5, 1}, {3}, 0);
      CheckGather(t, it, {5, 3}, {}, {0}, 0);             // no indices
      CheckGather(t, it, {3, 0}, {2, 1}, {2}, 0);         // empty rows
      CheckGather(t, it, {0, 4}, {}, {2, 0}, 0);
    }
  }
  std::vector<int64_t> idx(3000);
  for (size_t i = 0; i < idx.size(); ++i) idx[i] = int64_t((i * 7919) % 500);
  for (int threads : {1, 2}) {
    CheckGather(DataType::kFloat32, DataType::kInt64, {500, 64}, idx, {3000}, 0,
                CpuTestDevice(threads));
    CheckGather(DataType::kInt32, DataType::kInt32, {4, 500}, idx, {30, 100}, 1,
                CpuTestDevice(threads));
  }
}

TEST(ArrayGather, RejectsOutOfRangeIndicesAndAxes) {
  Tensor params = RandomOf(DataType::kFloat32, {5, 3}, 1);
  for (DataType it : IndexTypes()) {
    EXPECT_TRUE(IsKernelError(RunOp("Gather", {params, Ix(it, {0, 5})}),
                              "indices[1] = 5 is not in [0, 5)"));
    EXPECT_TRUE(IsKernelError(RunOp("Gather", {params, Ix(it, {-1})}),
                              "indices[0] = -1 is not in [0, 5)"));
    EXPECT_TRUE(IsKernelError(RunOp("Gather", {params, Ix(it, {3})}, {{"axis", AttrValue(1)}}),
                              "indices[0] = 3 is not in [0, 3)"));
  }
  Tensor empty = RandomOf(DataType::kFloat32, {0, 3}, 1);
  EXPECT_TRUE(IsKernelError(RunOp("Gather", {empty, Ix(DataType::kInt32, {0})}), "not in [0, 0)"));
  EXPECT_TRUE(IsKernelError(
      RunKernelOnly("Gather", {params, Ix(DataType::kInt32, {0})}, {{"axis", AttrValue(2)}}),
      "axis 2 is out of range"));
  EXPECT_TRUE(IsKernelError(
      RunKernelOnly("Gather", {params, Ix(DataType::kInt32, {0})}, {{"axis", AttrValue(-3)}}),
      "out of range"));
  EXPECT_TRUE(IsKernelError(
      RunKernelOnly("Gather", {Tensor::Scalar<float>(1), Ix(DataType::kInt32, {0})}),
      "params must have rank >= 1"));
}

// out[o] = x[o mod dims].
Tensor TileRef(const Tensor& x, const std::vector<int64_t>& mult) {
  std::vector<int64_t> dims = x.shape().dim_vector(), od(dims.size());
  for (size_t k = 0; k < dims.size(); ++k) od[k] = dims[k] * mult[k];
  TensorShape out_shape(od);
  std::vector<int64_t> src(out_shape.num_elements());
  for (int64_t j = 0; j < out_shape.num_elements(); ++j) {
    std::vector<int64_t> o = Unravel(j, od);
    for (size_t k = 0; k < o.size(); ++k) o[k] %= dims[k];
    src[j] = Ravel(o, dims);
  }
  return Pick(x, out_shape, src);
}

void CheckTile(DataType t, DataType it, const TensorShape& s, const std::vector<int64_t>& mult,
               Device* device = nullptr) {
  Tensor x = RandomOf(t, s, 50);
  Tensor y = RunOp1("Tile", {x, Ix(it, mult)}, {}, device);
  EXPECT_TRUE(TensorsEqual(y, TileRef(x, mult)))
      << DataTypeName(t) << " " << s.ToString() << " multiples " << Ix(it, mult).DebugString();
}

// Unique: distinct values in order of first occurrence; x[i] == y[idx[i]].
TEST(ArrayUnique, FirstOccurrenceOrderAndPositions) {
  for (DataType t : IndexTypes()) {
    for (DataType out_idx : IndexTypes()) {
      AttrMap attrs{{"out_idx", AttrValue(out_idx)}};
      StatusOr<std::vector<Tensor>> r = RunOp("Unique", {Ix(t, {7, 3, 7, 0, 3, 7, -2})}, attrs);
      ASSERT_TRUE(r.ok()) << r.status().ToString();
      EXPECT_TRUE(TensorsEqual((*r)[0], Ix(t, {7, 3, 0, -2})));
      EXPECT_TRUE(TensorsEqual((*r)[1], Ix(out_idx, {0, 1, 0, 2, 1, 0, 3})));
      r = RunOp("Unique", {Ix(t, {})}, attrs);
      ASSERT_TRUE(r.ok()) << r.status().ToString();
      EXPECT_EQ((*r)[0].num_elements(), 0);
      EXPECT_EQ((*r)[1].num_elements(), 0);
    }
  }
  EXPECT_TRUE(IsKernelError(
      RunKernelOnly("Unique", {Ix(DataType::kInt32, {1, 2, 3, 4}).Reshaped({2, 2}).value()}),
      "x must be a vector"));
}

TEST(ArrayTile, EveryDtypeAndIndexType) {
  for (DataType t : AllDataTypes()) {
    for (DataType it : IndexTypes()) {
      CheckTile(t, it, {2, 3}, {2, 3});
      CheckTile(t, it, {3}, {4});
      CheckTile(t, it, {1, 1}, {5, 7});
      CheckTile(t, it, {2, 1, 3}, {1, 4, 1});
      CheckTile(t, it, {2, 3, 2, 2}, {2, 1, 3, 2});
      CheckTile(t, it, {2, 20}, {3, 2});
      CheckTile(t, it, {2, 3}, {0, 2});
      CheckTile(t, it, {2, 0}, {2, 2});
      CheckTile(t, it, {}, {});
    }
  }
  for (int threads : {1, 2}) {
    CheckTile(DataType::kFloat32, DataType::kInt32, {30, 7}, {40, 100}, CpuTestDevice(threads));
    CheckTile(DataType::kUInt8, DataType::kInt64, {3, 500}, {300, 2}, CpuTestDevice(threads));
  }
}

TEST(ArrayTile, AllOnesSharesTheBuffer) {
  Tensor x = RandomOf(DataType::kFloat64, {2, 3}, 51);
  Tensor y = RunOp1("Tile", {x, Ix(DataType::kInt32, {1, 1})});
  EXPECT_TRUE(TensorsEqual(y, x));
  EXPECT_TRUE(y.SharesBufferWith(x));
}

TEST(ArrayTile, RejectsBadMultiples) {
  Tensor x = RandomOf(DataType::kFloat32, {2, 3}, 1);
  EXPECT_TRUE(IsKernelError(RunKernelOnly("Tile", {x, Ix(DataType::kInt32, {2})}),
                            "multiples has 1 entries for an input of shape [2, 3]"));
  EXPECT_TRUE(IsKernelError(RunKernelOnly("Tile", {x, Ix(DataType::kInt64, {2, -1})}),
                            "multiples[1] = -1 is negative"));
  EXPECT_TRUE(IsKernelError(
      RunKernelOnly("Tile", {x, Ix(DataType::kInt64, {int64_t(1) << 40, int64_t(1) << 40})}),
      "too many elements"));
  EXPECT_TRUE(IsKernelError(RunKernelOnly("Tile", {x, IxScalar(DataType::kInt32, 2)}),
                            "multiples must be a vector"));
}

}  // namespace
// PartitionIds: each id's part and local row, by mod and by div (the first
// rows % n parts one row longer), with the ids' positions.
TEST(ArrayPartitionIds, ModAndDivWithPositions) {
  for (DataType t : IndexTypes()) {
    auto run = [&](const std::string& strategy, const std::vector<int64_t>& ids) {
      return RunOp("PartitionIds", {Ix(t, ids)},
                   {{"num_partitions", AttrValue(int64_t{3})}, {"rows", AttrValue(int64_t{7})},
                    {"strategy", AttrValue(strategy)}, {"table", AttrValue("emb")}});
    };
    StatusOr<std::vector<Tensor>> m = run("mod", {6, 0, 3, 3, 1});
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    ASSERT_EQ(m->size(), 6u);
    EXPECT_TRUE(TensorsEqual((*m)[0], Ix(t, {2, 0, 1, 1})));
    EXPECT_TRUE(TensorsEqual((*m)[1], Ix(t, {0})));
    EXPECT_EQ((*m)[2].num_elements(), 0);
    EXPECT_TRUE(TensorsEqual((*m)[3], Ix(DataType::kInt32, {0, 1, 2, 3})));
    EXPECT_TRUE(TensorsEqual((*m)[4], Ix(DataType::kInt32, {4})));
    StatusOr<std::vector<Tensor>> d = run("div", {6, 0, 3, 3, 1});
    ASSERT_TRUE(d.ok()) << d.status().ToString();
    EXPECT_TRUE(TensorsEqual((*d)[0], Ix(t, {0, 1})));
    EXPECT_TRUE(TensorsEqual((*d)[1], Ix(t, {0, 0})));
    EXPECT_TRUE(TensorsEqual((*d)[2], Ix(t, {1})));
    EXPECT_TRUE(TensorsEqual((*d)[3], Ix(DataType::kInt32, {1, 4})));
    EXPECT_TRUE(TensorsEqual((*d)[4], Ix(DataType::kInt32, {2, 3})));
    EXPECT_TRUE(TensorsEqual((*d)[5], Ix(DataType::kInt32, {0})));
    StatusOr<std::vector<Tensor>> empty = run("mod", {});
    ASSERT_TRUE(empty.ok()) << empty.status().ToString();
    for (const Tensor& x : *empty) EXPECT_EQ(x.num_elements(), 0);
    EXPECT_TRUE(IsKernelError(
        RunKernelOnly("PartitionIds", {Ix(t, {1, 7, -1})},
                      {{"num_partitions", AttrValue(int64_t{3})}, {"rows", AttrValue(int64_t{7})},
                       {"table", AttrValue("emb")}}),
        "indices[1] = 7 is not in [0, 7) (the rows of the partitioned table 'emb')"));
  }
}

// DynamicStitch puts rows gathered at disjoint indices back: the source.
TEST(ArrayDynamicStitch, InterleavesRowsForEveryDtype) {
  for (DataType t : AllDataTypes()) {
    Tensor src = RandomOf(t, {5, 3}, 17);
    Tensor i0 = Ix(DataType::kInt32, {4, 0, 2}), i1 = Ix(DataType::kInt32, {1, 3});
    Tensor d0 = RunOp1("Gather", {src, i0}), d1 = RunOp1("Gather", {src, i1});
    Tensor merged = RunOp1("DynamicStitch", {i0, i1, d0, d1}, {{"N", AttrValue(int64_t{2})}});
    EXPECT_TRUE(TensorsEqual(merged, src)) << DataTypeName(t);
  }
  // Rows no index names are zeros; empty inputs give no rows.
  Tensor x = RunOp1("DynamicStitch", {Ix(DataType::kInt32, {2}),
                                      Tensor::FromVector<float>({7, 8}, TensorShape({1, 2}))},
                         {{"N", AttrValue(int64_t{1})}});
  EXPECT_TRUE(TensorsEqual(x, Tensor::FromVector<float>({0, 0, 0, 0, 7, 8}, TensorShape({3, 2}))));
  Tensor none = RunOp1("DynamicStitch", {Ix(DataType::kInt32, {}),
                                         Tensor(DataType::kFloat32, TensorShape({0, 4}))},
                            {{"N", AttrValue(int64_t{1})}});
  EXPECT_TRUE(none.shape() == TensorShape({0, 4})) << none.shape().ToString();
  EXPECT_TRUE(IsKernelError(
      RunKernelOnly("DynamicStitch", {Ix(DataType::kInt32, {0, 1}),
                                      Tensor(DataType::kFloat32, TensorShape({3, 2}))},
                    {{"N", AttrValue(int64_t{1})}}),
      "data[0] has shape [3, 2]"));
}

}  // namespace flowstate::test

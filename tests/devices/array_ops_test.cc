// Reshape, ExpandDims, Squeeze, Shape, Size, Rank, Fill, Range and
// Transpose against references written with plain loops, for every dtype
// the kernels are registered for.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>

#include "tests/devices/array_test_util.h"

namespace flowstate::test {
namespace {

// Zero-copy ops: the output has `shape`, the input's bytes, and its buffer.
void ExpectView(const Tensor& out, const Tensor& in, const TensorShape& shape) {
  ASSERT_TRUE(out.IsInitialized());
  EXPECT_EQ(out.shape(), shape);
  EXPECT_EQ(out.dtype(), in.dtype());
  ASSERT_EQ(out.TotalBytes(), in.TotalBytes());
  if (in.TotalBytes()) {
    EXPECT_EQ(std::memcmp(out.raw_data(), in.raw_data(), in.TotalBytes()), 0);
    EXPECT_TRUE(out.SharesBufferWith(in));
  }
}

TEST(ArrayReshape, EveryDtypeIndexTypeAndInference) {
  struct Case {
    TensorShape in;
    std::vector<int64_t> shape;
    TensorShape want;
  };
  const std::vector<Case> cases = {
      {{2, 3, 4}, {4, -1}, {4, 6}}, {{2, 3}, {-1}, {6}},         {{1}, {}, {}},
      {{}, {1, 1}, {1, 1}},         {{0}, {3, 0}, {3, 0}},       {{3, 0}, {-1, 5}, {0, 5}},
      {{6}, {2, 1, 3}, {2, 1, 3}},  {{2, 2, 2}, {-1, 2}, {4, 2}},
  };
  for (DataType t : AllDataTypes()) {
    for (DataType it : IndexTypes()) {
      for (const Case& c : cases) {
        Tensor in = RandomOf(t, c.in, 1);
        Tensor out = RunOp1("Reshape", {in, Ix(it, c.shape)});
        SCOPED_TRACE(std::string(DataTypeName(t)) + " " + c.in.ToString());
        ExpectView(out, in, c.want);
      }
    }
  }
}

TEST(ArrayReshape, RejectsBadShapes) {
  Tensor in = RandomOf(DataType::kFloat32, {2, 3}, 1);
  EXPECT_TRUE(IsKernelError(RunKernelOnly("Reshape", {in, Ix(DataType::kInt32, {-1, -1})}),
                            "more than one -1"));
  EXPECT_TRUE(IsKernelError(RunKernelOnly("Reshape", {in, Ix(DataType::kInt64, {-2, 3})}),
                            "negative dimension -2"));
  EXPECT_TRUE(IsKernelError(RunKernelOnly("Reshape", {in, Ix(DataType::kInt32, {4, 2})}),
                            "cannot reshape [2, 3] (6 elements) to [4, 2]"));
  EXPECT_TRUE(IsKernelError(RunKernelOnly("Reshape", {in, Ix(DataType::kInt32, {4, -1})}),
                            "cannot reshape"));
  Tensor empty = RandomOf(DataType::kFloat32, {0, 3}, 1);
  EXPECT_TRUE(IsKernelError(RunKernelOnly("Reshape", {empty, Ix(DataType::kInt32, {0, -1})}),
                            "cannot reshape"));
  EXPECT_TRUE(IsKernelError(
      RunKernelOnly("Reshape", {in, TS<int32_t>({2, 3}, {1, 2})}), "shape must be a vector"));
  EXPECT_TRUE(IsKernelError(
      RunKernelOnly("Reshape", {in, Ix(DataType::kInt64, {int64_t(1) << 40, int64_t(1) << 40})}),
      "too many elements"));
  EXPECT_TRUE(IsKernelError(
      RunKernelOnly("Reshape", {in, Ix(DataType::kInt32, {1, 1, 1, 1, 1, 1, 1, 1, 6})}),
      "more than 8 dimensions"));
  // Through the graph the shape function reports it first, naming the node.
  auto r = RunOp("Reshape", {in, Ix(DataType::kInt32, {4, 2})});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kInvalidArgument);
  EXPECT_EQ(r.status().node(), "op");
}

TEST(ArrayExpandDims, EveryDtypeAndAxis) {
  for (DataType t : AllDataTypes()) {
    for (DataType it : IndexTypes()) {
      Tensor in = RandomOf(t, {2, 3}, 2);
      ExpectView(RunOp1("ExpandDims", {in, IxScalar(it, 0)}), in, {1, 2, 3});
      ExpectView(RunOp1("ExpandDims", {in, IxScalar(it, 2)}), in, {2, 3, 1});
      ExpectView(RunOp1("ExpandDims", {in, IxScalar(it, -1)}), in, {2, 3, 1});
      ExpectView(RunOp1("ExpandDims", {in, IxScalar(it, -3)}), in, {1, 2, 3});
      ExpectView(RunOp1("ExpandDims", {in, Ix(it, {1})}), in, {2, 1, 3});
      Tensor scalar = RandomOf(t, {}, 3);
      ExpectView(RunOp1("ExpandDims", {scalar, IxScalar(it, 0)}), scalar, {1});
      Tensor empty = RandomOf(t, {3, 0}, 3);
      ExpectView(RunOp1("ExpandDims", {empty, IxScalar(it, 1)}), empty, {3, 1, 0});
    }
  }
}

TEST(ArrayExpandDims, RejectsBadAxes) {
  Tensor in = RandomOf(DataType::kInt32, {2, 3}, 1);
  EXPECT_TRUE(IsKernelError(RunKernelOnly("ExpandDims", {in, IxScalar(DataType::kInt32, 3)}),
                            "axis 3 is out of range [-3, 2]"));
  EXPECT_TRUE(IsKernelError(RunKernelOnly("ExpandDims", {in, IxScalar(DataType::kInt64, -4)}),
                            "out of range"));
  EXPECT_TRUE(IsKernelError(RunKernelOnly("ExpandDims", {in, Ix(DataType::kInt32, {0, 1})}),
                            "axis must be a scalar"));
  Tensor rank8 = RandomOf(DataType::kInt32, {1, 1, 1, 1, 1, 1, 1, 2}, 1);
  EXPECT_TRUE(IsKernelError(RunKernelOnly("ExpandDims", {rank8, IxScalar(DataType::kInt32, 0)}),
                            "maximum rank"));
}

TEST(ArraySqueeze, EveryDtypeAllOrListedAxes) {
  for (DataType t : AllDataTypes()) {
    Tensor in = RandomOf(t, {1, 2, 1, 3, 1}, 4);
    ExpectView(RunOp1("Squeeze", {in}), in, {2, 3});
    ExpectView(RunOp1("Squeeze", {in}, {{"axis", AttrValue(std::vector<int64_t>{0})}}), in,
               {2, 1, 3, 1});
    ExpectView(RunOp1("Squeeze", {in}, {{"axis", AttrValue(std::vector<int64_t>{-1, 2})}}), in,
               {1, 2, 3});
    Tensor one = RandomOf(t, {1, 1}, 5);
    ExpectView(RunOp1("Squeeze", {one}), one, {});
    Tensor scalar = RandomOf(t, {}, 5);
    ExpectView(RunOp1("Squeeze", {scalar}), scalar, {});
    Tensor empty = RandomOf(t, {1, 0, 3}, 5);
    ExpectView(RunOp1("Squeeze", {empty}), empty, {0, 3});
  }
}

TEST(ArraySqueeze, RejectsBadAxes) {
  Tensor in = RandomOf(DataType::kFloat32, {1, 3}, 1);
  auto axis = [](std::vector<int64_t> a) { return AttrMap{{"axis", AttrValue(a)}}; };
  EXPECT_TRUE(IsKernelError(RunKernelOnly("Squeeze", {in}, axis({1})), "cannot squeeze dimension 1"));
  EXPECT_TRUE(IsKernelError(RunKernelOnly("Squeeze", {in}, axis({2})), "axis 2 is out of range"));
  EXPECT_TRUE(IsKernelError(RunKernelOnly("Squeeze", {in}, axis({-3})), "out of range"));
  // A dimension of size 0 is not 1: both the kernel and the shape function say so.
  Tensor empty = RandomOf(DataType::kFloat32, {0, 3}, 1);
  EXPECT_TRUE(IsKernelError(RunKernelOnly("Squeeze", {empty}, axis({0})), "cannot squeeze"));
  EXPECT_FALSE(RunOp("Squeeze", {empty}, axis({0})).ok());
}

TEST(ArrayShapeSizeRank, EveryDtypeAndOutType) {
  const std::vector<TensorShape> shapes = {{}, {0}, {3, 0}, {2, 3, 4}, {1, 1, 1, 1, 1, 1, 1, 5}};
  for (DataType t : AllDataTypes()) {
    for (const TensorShape& s : shapes) {
      Tensor in = RandomOf(t, s, 6);
      std::vector<int64_t> dims = s.dim_vector();
      std::vector<int32_t> dims32(dims.begin(), dims.end());
      EXPECT_TRUE(TensorEq(RunOp1("Shape", {in}), T1<int32_t>(dims32)));
      EXPECT_TRUE(TensorEq(RunOp1("Shape", {in}, {{"out_type", AttrValue(DataType::kInt64)}}),
                           T1<int64_t>(dims)));
      EXPECT_TRUE(TensorEq(RunOp1("Size", {in}), Tensor::Scalar<int32_t>(int32_t(s.num_elements()))));
      EXPECT_TRUE(TensorEq(RunOp1("Size", {in}, {{"out_type", AttrValue(DataType::kInt64)}}),
                           Tensor::Scalar<int64_t>(s.num_elements())));
      EXPECT_TRUE(TensorEq(RunOp1("Rank", {in}), Tensor::Scalar<int32_t>(s.rank())));
    }
  }
}

TEST(ArrayShapeSizeRank, Int32OverflowIsAnError) {
  // Shape and Size never read elements, so a buffer that only claims to be
  // big enough stands in for 3e9 bytes.
  Tensor huge(DataType::kUInt8, TensorShape({3000000000}), new TensorBuffer(nullptr, SIZE_MAX));
  EXPECT_TRUE(IsKernelError(RunKernelOnly("Shape", {huge}), "does not fit in out_type int32"));
  EXPECT_TRUE(IsKernelError(RunKernelOnly("Size", {huge}), "does not fit in out_type int32"));
  auto r = RunKernelOnly("Size", {huge}, {{"out_type", AttrValue(DataType::kInt64)}});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(TensorEq((*r)[0], Tensor::Scalar<int64_t>(3000000000)));
}

TEST(ArrayFill, EveryDtypeAndShape) {
  const std::vector<std::vector<int64_t>> shapes = {{}, {0}, {3, 0}, {2, 3}, {4, 1, 5}};
  for (DataType t : AllDataTypes()) {
    Tensor value = RandomOf(t, {}, 7);
    for (DataType it : IndexTypes()) {
      for (const auto& dims : shapes) {
        TensorShape s(dims);
        Tensor out = RunOp1("Fill", {Ix(it, dims), value});
        EXPECT_TRUE(TensorsEqual(out, Pick(value, s, std::vector<int64_t>(s.num_elements(), 0))))
            << DataTypeName(t) << " " << s.ToString();
      }
    }
  }
  // Big enough to run in parallel on two threads.
  Tensor v = Tensor::Scalar<float>(2.5f);
  Tensor big = RunOp1("Fill", {Ix(DataType::kInt32, {1000, 517}), v}, {}, CpuTestDevice(2));
  EXPECT_TRUE(TensorsEqual(big, Pick(v, {1000, 517}, std::vector<int64_t>(517000, 0))));
}

TEST(ArrayFill, RejectsBadInputs) {
  Tensor v = Tensor::Scalar<int32_t>(1);
  EXPECT_TRUE(IsKernelError(RunKernelOnly("Fill", {Ix(DataType::kInt32, {2, -1}), v}),
                            "dimension -1 is negative"));
  EXPECT_TRUE(IsKernelError(RunKernelOnly("Fill", {Ix(DataType::kInt64, {2}), T1<int32_t>({1, 2})}),
                            "value must be a scalar"));
  EXPECT_TRUE(IsKernelError(RunKernelOnly("Fill", {IxScalar(DataType::kInt32, 2), v}),
                            "dims must be a vector"));
}

template <typename T>
void ExpectRange(T start, T limit, T delta, std::vector<T> want) {
  Tensor out = RunOp1("Range", {Tensor::Scalar<T>(start), Tensor::Scalar<T>(limit),
                                Tensor::Scalar<T>(delta)});
  EXPECT_TRUE(TensorNear(out, T1<T>(want), 1e-6, 1e-6))
      << double(start) << " " << double(limit) << " " << double(delta);
}

template <typename T>
void RangeCases() {
  ExpectRange<T>(0, 10, 3, {0, 3, 6, 9});
  ExpectRange<T>(10, 0, -3, {10, 7, 4, 1});
  ExpectRange<T>(-2, 2, 1, {-2, -1, 0, 1});
  ExpectRange<T>(5, 5, 1, {});
  ExpectRange<T>(5, 1, 1, {});
  ExpectRange<T>(1, 5, -1, {});
  ExpectRange<T>(3, 4, 5, {3});
}

TEST(ArrayRange, EveryIndexType) {
  RangeCases<int32_t>();
  RangeCases<int64_t>();
  RangeCases<float>();
  RangeCases<double>();
  ExpectRange<float>(0, 1, 0.25f, {0, 0.25f, 0.5f, 0.75f});
  ExpectRange<double>(0.5, -0.5, -0.3, {0.5, 0.2, -0.1, -0.4});
  ExpectRange<double>(0, 1, 0.1, {0, .1, .2, .3, .4, .5, .6, .7, .8, .9});
  const int64_t big = int64_t(1) << 40;
  ExpectRange<int64_t>(big, big + 3, 1, {big, big + 1, big + 2});
  // A long one: element i is start + i * delta.
  Tensor out = RunOp1("Range", {Tensor::Scalar<int32_t>(-7), Tensor::Scalar<int32_t>(100000),
                                Tensor::Scalar<int32_t>(3)});
  ASSERT_EQ(out.num_elements(), (100000 + 7 + 2) / 3);
  for (int64_t i = 0; i < out.num_elements(); ++i) ASSERT_EQ(out.data<int32_t>()[i], -7 + 3 * i);
}

TEST(ArrayRange, RejectsBadInputs) {
  auto s = [](float v) { return Tensor::Scalar<float>(v); };
  EXPECT_TRUE(IsKernelError(RunKernelOnly("Range", {s(0), s(1), s(0)}), "delta must not be zero"));
  EXPECT_TRUE(IsKernelError(RunKernelOnly("Range", {T1<float>({0}), s(1), s(1)}),
                            "start must be a scalar"));
  EXPECT_TRUE(IsKernelError(RunKernelOnly("Range", {s(0), s(1e30f), s(1e-30f)}),
                            "too many elements"));
  EXPECT_TRUE(IsKernelError(RunKernelOnly("Range", {Tensor::Scalar<int64_t>(INT64_MIN),
                                                    Tensor::Scalar<int64_t>(INT64_MAX),
                                                    Tensor::Scalar<int64_t>(1)}),
                            "too many elements"));
  EXPECT_FALSE(RunOp("Range", {s(0), s(1), s(0)}).ok());
  // 2^61 int64 elements: fewer than the kernel's 2^62, but 2^64 bytes, which
  // wrapped to an empty buffer the kernel then wrote past (found by
  // the checkpoint import fuzzer's check of decoded tensors).
  auto big = RunKernelOnly("Range", {Tensor::Scalar<int64_t>(0),
                                     Tensor::Scalar<int64_t>(int64_t{1} << 61),
                                     Tensor::Scalar<int64_t>(1)});
  ASSERT_FALSE(big.ok());
  EXPECT_NE(big.status().message().find("takes more than 2^64 bytes"), std::string::npos)
      << big.status().ToString();
}

// y[o] = x[i] with i[perm[k]] = o[k].
Tensor TransposeRef(const Tensor& x, const std::vector<int64_t>& perm) {
  std::vector<int64_t> in_dims = x.shape().dim_vector(), out_dims(perm.size());
  for (size_t k = 0; k < perm.size(); ++k) out_dims[k] = in_dims[perm[k]];
  TensorShape out_shape(out_dims);
  std::vector<int64_t> src(out_shape.num_elements());
  for (int64_t j = 0; j < out_shape.num_elements(); ++j) {
    std::vector<int64_t> o = Unravel(j, out_dims), i(perm.size());
    for (size_t k = 0; k < perm.size(); ++k) i[perm[k]] = o[k];
    src[j] = Ravel(i, in_dims);
  }
  return Pick(x, out_shape, src);
}

void CheckTranspose(DataType t, const TensorShape& s, const std::vector<int64_t>& perm,
                    DataType it = DataType::kInt32, Device* device = nullptr) {
  Tensor x = RandomOf(t, s, 8);
  Tensor y = RunOp1("Transpose", {x, Ix(it, perm)}, {}, device);
  EXPECT_TRUE(TensorsEqual(y, TransposeRef(x, perm)))
      << DataTypeName(t) << " " << s.ToString() << " perm " << Ix(it, perm).DebugString();
}

TEST(ArrayTranspose, EveryDtypeMatrixAndBatched) {
  for (DataType t : AllDataTypes()) {
    for (DataType it : IndexTypes()) {
      CheckTranspose(t, {37, 53}, {1, 0}, it);  // not a multiple of the tile
      CheckTranspose(t, {1, 5}, {1, 0}, it);
      CheckTranspose(t, {3, 33, 17}, {0, 2, 1}, it);
      CheckTranspose(t, {0, 3}, {1, 0}, it);
      CheckTranspose(t, {}, {}, it);
    }
  }
}

TEST(ArrayTranspose, AllPermutationsOfRank3And4) {
  for (DataType t : {DataType::kFloat32, DataType::kUInt8, DataType::kFloat16, DataType::kInt64}) {
    std::vector<int64_t> p3 = {0, 1, 2};
    do CheckTranspose(t, {2, 3, 4}, p3);
    while (std::next_permutation(p3.begin(), p3.end()));
    std::vector<int64_t> p4 = {0, 1, 2, 3};
    do CheckTranspose(t, {3, 1, 4, 5}, p4, DataType::kInt64);
    while (std::next_permutation(p4.begin(), p4.end()));
  }
}

TEST(ArrayTranspose, Rank8AndLarge) {
  CheckTranspose(DataType::kFloat64, {2, 1, 2, 3, 1, 2, 2, 3}, {7, 6, 5, 4, 3, 2, 1, 0});
  CheckTranspose(DataType::kInt32, {2, 1, 2, 3, 1, 2, 2, 3}, {3, 0, 7, 1, 5, 2, 6, 4});
  for (int threads : {1, 2}) {
    CheckTranspose(DataType::kFloat32, {515, 300}, {1, 0}, DataType::kInt32, CpuTestDevice(threads));
    CheckTranspose(DataType::kBool, {6, 130, 70}, {2, 0, 1}, DataType::kInt32,
                   CpuTestDevice(threads));
    CheckTranspose(DataType::kFloat64, {40, 50, 60}, {1, 0, 2}, DataType::kInt32,
                   CpuTestDevice(threads));
  }
}

TEST(ArrayTranspose, OrderPreservingPermutationsShareTheBuffer) {
  for (DataType t : AllDataTypes()) {
    Tensor x = RandomOf(t, {2, 3, 4}, 9);
    ExpectView(RunOp1("Transpose", {x, Ix(DataType::kInt32, {0, 1, 2})}), x, {2, 3, 4});
    Tensor y = RandomOf(t, {2, 1, 4}, 9);
    ExpectView(RunOp1("Transpose", {y, Ix(DataType::kInt64, {1, 0, 2})}), y, {1, 2, 4});
  }
}

TEST(ArrayTranspose, RejectsBadPerms) {
  Tensor x = RandomOf(DataType::kFloat32, {2, 3}, 1);
  EXPECT_TRUE(IsKernelError(RunKernelOnly("Transpose", {x, Ix(DataType::kInt32, {0})}),
                            "has 1 entries for an input of shape [2, 3]"));
  EXPECT_TRUE(IsKernelError(RunKernelOnly("Transpose", {x, Ix(DataType::kInt32, {0, 0})}),
                            "not a permutation"));
  EXPECT_TRUE(IsKernelError(RunKernelOnly("Transpose", {x, Ix(DataType::kInt64, {0, 2})}),
                            "not a permutation"));
  EXPECT_TRUE(IsKernelError(RunKernelOnly("Transpose", {x, Ix(DataType::kInt64, {-1, 0})}),
                            "not a permutation"));
  EXPECT_TRUE(IsKernelError(RunKernelOnly("Transpose", {x, IxScalar(DataType::kInt32, 0)}),
                            "perm must be a vector"));
}

}  // namespace
}  // namespace flowstate::test

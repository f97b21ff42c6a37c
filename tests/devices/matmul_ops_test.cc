// MatMul and BatchMatMul against a plain triple loop in double: every
// registered dtype, all transpose combinations, both GEMM paths (the tiny
// Eigen path and dnnl for float32; Eigen split over threads for float64),
// empty dimensions, broadcasting batches, 2-thread devices and the errors.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tests/devices/fed_inputs_util.h"
#include "tests/util/op_test_util.h"

namespace flowstate::test {
namespace {

// C[i, j] = sum_p op(A)[i, p] * op(B)[p, j] for stored row-major A and B.
template <typename T>
std::vector<double> ReferenceGemm(const T* a, const T* b, int64_t m, int64_t n, int64_t k, bool ta,
                                  bool tb) {
  std::vector<double> c(size_t(m * n), 0.0);
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double s = 0;
      for (int64_t p = 0; p < k; ++p) {
        double x = ta ? a[p * m + i] : a[i * k + p];
        double y = tb ? b[j * k + p] : b[p * n + j];
        s += x * y;
      }
      c[i * n + j] = s;
    }
  }
  return c;
}

template <typename T>
Tensor ReferenceMatMul(const Tensor& a, const Tensor& b, bool ta, bool tb) {
  const int64_t m = a.dim(ta ? 1 : 0), k = a.dim(ta ? 0 : 1), n = b.dim(tb ? 0 : 1);
  std::vector<double> c = ReferenceGemm(a.data<T>(), b.data<T>(), m, n, k, ta, tb);
  Tensor out(kDataTypeOf<T>, TensorShape({m, n}));
  for (size_t i = 0; i < c.size(); ++i) out.data<T>()[i] = T(c[i]);
  return out;
}

AttrMap MatMulAttrs(bool ta, bool tb) {
  return {{"transpose_a", AttrValue(ta)}, {"transpose_b", AttrValue(tb)}};
}

// Tolerance for a k-term dot product of values in [-1, 1].
template <typename T>
double Tol(int64_t k) {
  return (std::is_same_v<T, float> ? 2e-6 : 1e-13) * double(k);
}

template <typename T>
void CheckMatMul(int64_t m, int64_t k, int64_t n, bool ta, bool tb, Device* device,
                 uint64_t seed) {
  Tensor a = RandomTensor<T>(ta ? TensorShape({k, m}) : TensorShape({m, k}), seed);
  Tensor b = RandomTensor<T>(tb ? TensorShape({n, k}) : TensorShape({k, n}), seed + 1);
  Tensor got = RunOp1("MatMul", {a, b}, MatMulAttrs(ta, tb), device);
  EXPECT_TRUE(TensorNear(got, ReferenceMatMul<T>(a, b, ta, tb), 1e-5, Tol<T>(k)))
      << DataTypeName(kDataTypeOf<T>) << " " << m << "x" << k << "x" << n << " ta=" << ta
      << " tb=" << tb << " threads=" << device->num_threads();
}

struct Dims {
  int64_t m, k, n;
};

TEST(MatMulOps, AllTransposesMatchTheReference) {
  // Tiny (Eigen inline), just past the tiny threshold, vectors, and odd
  // sizes that leave ragged register tiles.
  const std::vector<Dims> sizes = {{1, 1, 1},  {3, 4, 5},   {17, 33, 9},  {64, 70, 80},
                                   {5, 200, 1}, {1, 300, 7}, {49, 49, 49}, {130, 3, 77}};
  uint64_t seed = 1;
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      for (const Dims& d : sizes) {
        CheckMatMul<float>(d.m, d.k, d.n, ta, tb, CpuTestDevice(1), seed++);
        CheckMatMul<double>(d.m, d.k, d.n, ta, tb, CpuTestDevice(1), seed++);
      }
    }
  }
}

TEST(MatMulOps, LargeProductsOnTwoThreads) {
  uint64_t seed = 50;
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      // Split by rows (m >= n) or by columns (m < n) over the pool; each
      // block is a dnnl_sgemm (float32) or an Eigen product (float64).
      // (All above the split threshold of 256³.)
      CheckMatMul<float>(300, 257, 311, ta, tb, CpuTestDevice(2), seed++);
      CheckMatMul<float>(70, 600, 450, ta, tb, CpuTestDevice(2), seed++);
      CheckMatMul<double>(301, 257, 250, ta, tb, CpuTestDevice(2), seed++);
      CheckMatMul<double>(60, 700, 501, ta, tb, CpuTestDevice(2), seed++);
    }
  }
  // One and two threads agree (to rounding: the blocking may differ).
  Tensor a = RandomTensor<float>(TensorShape({512, 512}), 90);
  Tensor b = RandomTensor<float>(TensorShape({512, 512}), 91);
  Tensor one = RunOp1("MatMul", {a, b}, {}, CpuTestDevice(1));
  Tensor two = RunOp1("MatMul", {a, b}, {}, CpuTestDevice(2));
  EXPECT_TRUE(TensorNear(two, one, 1e-5, 1e-4));
}

TEST(MatMulOps, EmptyDimensions) {
  for (DataType t : {DataType::kFloat32, DataType::kFloat64}) {
    // K == 0: a product of empty sums is all zeros.
    Tensor a(t, TensorShape({3, 0})), b(t, TensorShape({0, 4}));
    Tensor z = RunOp1("MatMul", {a, b});
    ASSERT_EQ(z.shape(), TensorShape({3, 4}));
    for (int64_t i = 0; i < z.num_elements(); ++i) EXPECT_EQ(z.ElementAsDouble(i), 0.0);
    // M == 0 or N == 0: empty results.
    EXPECT_EQ(RunOp1("MatMul", {Tensor(t, TensorShape({0, 5})), Tensor(t, TensorShape({5, 2}))})
                  .shape(),
              TensorShape({0, 2}));
    EXPECT_EQ(RunOp1("MatMul", {Tensor(t, TensorShape({2, 5})), Tensor(t, TensorShape({0, 5}))},
                     MatMulAttrs(false, true))
                  .shape(),
              TensorShape({2, 0}));
  }
}

TEST(MatMulOps, MismatchedMatricesAreRejected) {
  Tensor a = RandomTensor<float>(TensorShape({2, 3}), 1);
  Tensor b = RandomTensor<float>(TensorShape({4, 5}), 2);
  // At graph validation, naming the node...
  auto r = RunOp("MatMul", {a, b});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kInvalidArgument);
  EXPECT_EQ(r.status().node(), "op");
  EXPECT_NE(r.status().message().find("inner dimensions"), std::string::npos);
  // ...and by the kernel when the shapes are only known at run time.
  auto k = RunOpOnFedInputs("MatMul", {a, b});
  ASSERT_FALSE(k.ok());
  EXPECT_EQ(k.status().code(), Code::kInvalidArgument);
  EXPECT_EQ(k.status().node(), "op");
  auto v = RunOpOnFedInputs("MatMul", {T1<float>({1, 2, 3}), a});
  ASSERT_FALSE(v.ok());
  EXPECT_EQ(v.status().code(), Code::kInvalidArgument);
  EXPECT_EQ(v.status().node(), "op");
  // Transposing b makes the same pair compatible.
  Tensor bt = RandomTensor<float>(TensorShape({5, 3}), 3);
  EXPECT_TRUE(RunOp("MatMul", {a, bt}, MatMulAttrs(false, true)).ok());
}

// ---------------------------------------------------------------------------
// BatchMatMul.

template <typename T>
Tensor ReferenceBatchMatMul(const Tensor& x, const Tensor& y, bool adj_x, bool adj_y) {
  const int rx = x.rank(), ry = y.rank(), rb = std::max(rx, ry) - 2;
  const int64_t m = x.dim(adj_x ? rx - 1 : rx - 2), k = x.dim(adj_x ? rx - 2 : rx - 1);
  const int64_t n = y.dim(adj_y ? ry - 2 : ry - 1);
  TensorShape out_shape;
  std::vector<int64_t> bx(rb, 1), by(rb, 1);
  for (int i = 0; i < rb; ++i) {
    if (i - (rb - (rx - 2)) >= 0) bx[i] = x.dim(i - (rb - (rx - 2)));
    if (i - (rb - (ry - 2)) >= 0) by[i] = y.dim(i - (rb - (ry - 2)));
    out_shape.AddDim(std::max(bx[i], by[i]));
  }
  const int64_t batch = out_shape.num_elements();
  out_shape.AddDim(m);
  out_shape.AddDim(n);
  Tensor out(kDataTypeOf<T>, out_shape);
  std::vector<int64_t> idx(rb, 0);
  for (int64_t b = 0; b < batch; ++b) {
    int64_t ox = 0, oy = 0;
    for (int i = 0; i < rb; ++i) {
      ox = ox * bx[i] + (bx[i] == 1 ? 0 : idx[i]);
      oy = oy * by[i] + (by[i] == 1 ? 0 : idx[i]);
    }
    std::vector<double> c =
        ReferenceGemm(x.data<T>() + ox * m * k, y.data<T>() + oy * k * n, m, n, k, adj_x, adj_y);
    for (size_t i = 0; i < c.size(); ++i) out.data<T>()[b * m * n + i] = T(c[i]);
    for (int i = rb - 1; i >= 0; --i) {
      if (++idx[i] < out_shape.dim(i)) break;
      idx[i] = 0;
    }
  }
  return out;
}

template <typename T>
void CheckBatchMatMul(const std::vector<int64_t>& xb, const std::vector<int64_t>& yb, int64_t m,
                      int64_t k, int64_t n, bool adj_x, bool adj_y, Device* device,
                      uint64_t seed) {
  std::vector<int64_t> xs = xb, ys = yb;
  xs.push_back(adj_x ? k : m);
  xs.push_back(adj_x ? m : k);
  ys.push_back(adj_y ? n : k);
  ys.push_back(adj_y ? k : n);
  Tensor x = RandomTensor<T>(TensorShape(std::span<const int64_t>(xs)), seed);
  Tensor y = RandomTensor<T>(TensorShape(std::span<const int64_t>(ys)), seed + 1);
  Tensor got = RunOp1("BatchMatMul", {x, y},
                      {{"adj_x", AttrValue(adj_x)}, {"adj_y", AttrValue(adj_y)}}, device);
  EXPECT_TRUE(TensorNear(got, ReferenceBatchMatMul<T>(x, y, adj_x, adj_y), 1e-5, Tol<T>(k)))
      << DataTypeName(kDataTypeOf<T>) << " " << x.shape().ToString() << " × "
      << y.shape().ToString() << " adj_x=" << adj_x << " adj_y=" << adj_y;
}

TEST(BatchMatMulOps, BroadcastingBatchesAndAdjointsMatchTheReference) {
  uint64_t seed = 1;
  for (bool adj_x : {false, true}) {
    for (bool adj_y : {false, true}) {
      CheckBatchMatMul<float>({2, 1}, {5}, 3, 4, 2, adj_x, adj_y, CpuTestDevice(1), seed++);
      CheckBatchMatMul<double>({2, 1}, {5}, 3, 4, 2, adj_x, adj_y, CpuTestDevice(1), seed++);
      CheckBatchMatMul<float>({3}, {3}, 60, 50, 70, adj_x, adj_y, CpuTestDevice(1), seed++);
      CheckBatchMatMul<double>({}, {2, 3}, 4, 6, 5, adj_x, adj_y, CpuTestDevice(1), seed++);
      CheckBatchMatMul<float>({}, {}, 7, 8, 9, adj_x, adj_y, CpuTestDevice(1), seed++);
      CheckBatchMatMul<double>({1, 4}, {3, 1}, 5, 5, 5, adj_x, adj_y, CpuTestDevice(1), seed++);
    }
  }
}

TEST(BatchMatMulOps, ManySmallAndFewLargeProductsOnTwoThreads) {
  // Many small: whole matrices spread over the threads.
  CheckBatchMatMul<float>({64}, {64}, 8, 8, 8, false, true, CpuTestDevice(2), 10);
  CheckBatchMatMul<double>({4, 16}, {16}, 20, 30, 10, true, false, CpuTestDevice(2), 11);
  CheckBatchMatMul<float>({40}, {}, 64, 64, 64, false, false, CpuTestDevice(2), 12);
  // Few large (above the split threshold of 256³): each product is split.
  CheckBatchMatMul<float>({2}, {2}, 260, 260, 260, false, false, CpuTestDevice(2), 13);
  CheckBatchMatMul<double>({2}, {1}, 270, 250, 260, true, true, CpuTestDevice(2), 14);
}

TEST(BatchMatMulOps, EmptyDimensions) {
  Tensor x(DataType::kFloat32, TensorShape({0, 3, 4})), y(DataType::kFloat32, TensorShape({4, 2}));
  EXPECT_EQ(RunOp1("BatchMatMul", {x, y}).shape(), TensorShape({0, 3, 2}));
  Tensor xk(DataType::kFloat64, TensorShape({2, 3, 0}));
  Tensor yk(DataType::kFloat64, TensorShape({2, 0, 4}));
  Tensor z = RunOp1("BatchMatMul", {xk, yk});
  ASSERT_EQ(z.shape(), TensorShape({2, 3, 4}));
  for (int64_t i = 0; i < z.num_elements(); ++i) EXPECT_EQ(z.ElementAsDouble(i), 0.0);
}

TEST(BatchMatMulOps, IncompatibleShapesAreRejected) {
  Tensor x = RandomTensor<float>(TensorShape({2, 3, 4}), 1);
  Tensor bad_inner = RandomTensor<float>(TensorShape({2, 5, 2}), 2);
  Tensor bad_batch = RandomTensor<float>(TensorShape({3, 4, 2}), 3);
  for (const Tensor& y : {bad_inner, bad_batch}) {
    auto r = RunOp("BatchMatMul", {x, y});
    ASSERT_FALSE(r.ok()) << y.shape().ToString();
    EXPECT_EQ(r.status().code(), Code::kInvalidArgument);
    EXPECT_EQ(r.status().node(), "op");
    auto k = RunOpOnFedInputs("BatchMatMul", {x, y});
    ASSERT_FALSE(k.ok()) << y.shape().ToString();
    EXPECT_EQ(k.status().code(), Code::kInvalidArgument);
    EXPECT_EQ(k.status().node(), "op");
  }
  auto v = RunOpOnFedInputs("BatchMatMul", {T1<float>({1, 2}), x});
  ASSERT_FALSE(v.ok());
  EXPECT_EQ(v.status().code(), Code::kInvalidArgument);
}

}  // namespace
}  // namespace flowstate::test

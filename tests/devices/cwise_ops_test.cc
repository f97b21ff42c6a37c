// BCast (devices/cpu/broadcast.h), Select, AddN, ZerosLike, OnesLike, and
// what the element-wise family does across ops: in-place reuse of input
// buffers and large inputs split over two threads.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "devices/cpu/broadcast.h"
#include "tests/devices/cwise_test_util.h"

namespace flowstate::test {
namespace {

// ---------------------------------------------------------------------------
// BCast

TEST(CwiseBCast, CollapsesToTheSmallestIterationSpace) {
  BCast same({TensorShape({2, 3, 4}), TensorShape({2, 3, 4})});
  ASSERT_TRUE(same.ok());
  EXPECT_EQ(same.rank(), 1);
  EXPECT_EQ(same.dim(0), 24);
  EXPECT_TRUE(same.all_full());

  BCast scalar({TensorShape({2, 3}), TensorShape({})});
  EXPECT_EQ(scalar.rank(), 1);
  EXPECT_EQ(scalar.inner_contiguous_mask(), 1u);
  EXPECT_TRUE(scalar.is_scalar(1));

  BCast row({TensorShape({8, 16, 32}), TensorShape({32})});
  EXPECT_EQ(row.output_shape(), TensorShape({8, 16, 32}));
  ASSERT_EQ(row.rank(), 2);
  EXPECT_EQ(row.dim(0), 128);
  EXPECT_EQ(row.dim(1), 32);
  EXPECT_EQ(row.stride(1, 0), 0);
  EXPECT_EQ(row.stride(1, 1), 1);
  EXPECT_EQ(row.stride(0, 0), 32);

  BCast general({TensorShape({2, 1, 3}), TensorShape({4, 1})});
  EXPECT_EQ(general.output_shape(), TensorShape({2, 4, 3}));
  ASSERT_EQ(general.rank(), 3);
  EXPECT_EQ(general.stride(0, 0), 3);
  EXPECT_EQ(general.stride(0, 1), 0);
  EXPECT_EQ(general.stride(0, 2), 1);
  EXPECT_EQ(general.stride(1, 0), 0);
  EXPECT_EQ(general.stride(1, 1), 1);
  EXPECT_EQ(general.stride(1, 2), 0);
  EXPECT_EQ(general.ReductionAxes(0), (std::vector<int64_t>{1}));
  EXPECT_EQ(general.ReductionAxes(1), (std::vector<int64_t>{0, 2}));

  BCast ones({TensorShape({1, 1}), TensorShape({1})});
  EXPECT_EQ(ones.output_shape(), TensorShape({1, 1}));
  EXPECT_EQ(ones.rank(), 1);
  EXPECT_EQ(ones.ReductionAxes(1), (std::vector<int64_t>{0}));

  BCast empty({TensorShape({2, 0}), TensorShape({1})});
  EXPECT_EQ(empty.output_shape(), TensorShape({2, 0}));
  EXPECT_EQ(empty.output_size(), 0);
}

TEST(CwiseBCast, ReportsIncompatibleShapes) {
  BCast b({TensorShape({2, 3}), TensorShape({4})});
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.error(), "shapes [2, 3] and [4] cannot be broadcast together");
  Status s = b.ErrorStatus("Add", "node1");
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_EQ(s.node(), "node1");
  BCast three({TensorShape({2}), TensorShape({3}), TensorShape({})});
  EXPECT_EQ(three.error(), "shapes [2], [3] and [] cannot be broadcast together");
  EXPECT_FALSE(BCast({TensorShape({0}), TensorShape({2})}).ok());
}

TEST(CwiseBCast, RunsCoverEveryRangeLikeTheNaiveIndex) {
  const std::vector<std::vector<TensorShape>> cases = {
      {{2, 1, 3}, {4, 1}},
      {{3, 1}, {1, 4}, {}},
      {{2, 3, 4}, {2, 1, 4}, {3, 1}},
      {{2, 1, 3, 1, 2}, {1, 5, 1, 4, 1}},
      {{6}, {6}},
      {{5, 7}, {7}},
  };
  for (const auto& shapes : cases) {
    BCast b(std::span<const TensorShape>(shapes.data(), shapes.size()));
    ASSERT_TRUE(b.ok());
    TensorShape out = RefBroadcastShape(shapes);
    ASSERT_EQ(b.output_shape(), out);
    const int64_t n = out.num_elements();
    for (int64_t begin = 0; begin <= n; begin += 5) {
      for (int64_t end = begin; end <= n; end += 7) {
        int64_t next = begin;
        b.ForEachRun(begin, end, [&](int64_t o, const int64_t* in, int64_t len) {
          ASSERT_EQ(o, next);
          ASSERT_GT(len, 0);
          ASSERT_LE(len, b.inner_size());
          for (int64_t k = 0; k < len; ++k) {
            for (size_t i = 0; i < shapes.size(); ++i) {
              ASSERT_EQ(in[i] + k * b.inner_stride(int(i)), RefIndex(out, shapes[i], o + k))
                  << "input " << i << " at " << o + k;
            }
          }
          next += len;
        });
        ASSERT_EQ(next, end);
      }
    }
  }
}

// ---------------------------------------------------------------------------
// Select

TEST(CwiseSelect, EveryDtypeWithBroadcasting) {
  const std::vector<std::vector<TensorShape>> cases = {
      {{}, {}, {}},         {{2, 3}, {2, 3}, {2, 3}}, {{}, {2, 3}, {2, 3}},
      {{2, 3}, {}, {}},     {{2, 3}, {2, 3}, {}},     {{4, 1}, {1, 3}, {3}},
      {{2, 1, 3}, {4, 1}, {}}, {{3}, {5, 3}, {5, 1}}, {{0}, {0}, {0}},
      {{2, 0}, {1}, {2, 0}}, {{1029}, {1029}, {1029}}, {{40, 1}, {40, 33}, {33}},
  };
  ForTypes(TypeList<float, double, int32_t, int64_t, uint8_t, bool>{}, [&]<typename T>() {
    uint64_t seed = 5;
    for (const auto& s : cases) {
      Tensor c = RandomTensor<bool>(s[0], seed++);
      Tensor t = SmallValues<T>(s[1], seed++);
      Tensor e = SmallValues<T>(s[2], seed++);
      TensorShape out = RefBroadcastShape(s);
      Tensor want(kDataTypeOf<T>, out);
      for (int64_t i = 0; i < out.num_elements(); ++i) {
        want.data<T>()[i] = c.data<bool>()[RefIndex(out, s[0], i)] ? t.data<T>()[RefIndex(out, s[1], i)]
                                                                   : e.data<T>()[RefIndex(out, s[2], i)];
      }
      EXPECT_TRUE(TensorEq(RunOp1("Select", {c, t, e}), want))
          << DataTypeName(kDataTypeOf<T>) << " " << Str(s[0]) << Str(s[1]) << Str(s[2]);
    }
  });
}

TEST(CwiseSelect, IncompatibleShapesNameTheNode) {
  auto r = RunOp("Select", {T1<bool>({true, false}), T1<float>({1, 2, 3}), T1<float>({1, 2, 3})});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kInvalidArgument);
  EXPECT_EQ(r.status().node(), "op");
  DirectRun d = RunKernelDirect("Select", {T1<bool>({true, false}), T1<float>({1, 2, 3}), T1<float>({1})},
                                {{"T", AttrValue(DataType::kFloat32)}}, {DataType::kFloat32});
  EXPECT_EQ(d.status.code(), Code::kInvalidArgument);
  EXPECT_EQ(d.status.node(), "op");
  EXPECT_NE(d.status.message().find("cannot be broadcast"), std::string::npos) << d.status.ToString();
}

// ---------------------------------------------------------------------------
// AddN, ZerosLike, OnesLike

TEST(CwiseAddN, EveryDtypeAndArity) {
  ForTypes(NumericTypes{}, []<typename T>() {
    for (int n : {1, 2, 3, 5}) {
      for (const TensorShape& s : {TensorShape({}), TensorShape({0}), TensorShape({2, 3}),
                                   TensorShape({2, 0}), TensorShape({4100})}) {
        std::vector<Tensor> in;
        for (int i = 0; i < n; ++i) in.push_back(SmallValues<T>(s, 100 + i));
        Tensor want(kDataTypeOf<T>, s);
        for (int64_t k = 0; k < s.num_elements(); ++k) {
          double sum = 0;
          for (int i = 0; i < n; ++i) sum += double(in[i].data<T>()[k]);
          want.data<T>()[k] = std::is_floating_point_v<T> ? T(sum) : T(int64_t(sum));
        }
        EXPECT_TRUE(TensorNear(RunOp1("AddN", in), want))
            << DataTypeName(kDataTypeOf<T>) << " N=" << n << " " << Str(s);
      }
    }
  });
}

TEST(CwiseAddN, DifferentShapesAreAnError) {
  auto r = RunOp("AddN", {T1<float>({1, 2}), T1<float>({1, 2, 3})});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().node(), "op");
  DirectRun d = RunKernelDirect("AddN", {T1<float>({1, 2}), T1<float>({1, 2, 3})},
                                {{"T", AttrValue(DataType::kFloat32)}, {"N", AttrValue(int64_t{2})}},
                                {DataType::kFloat32});
  EXPECT_EQ(d.status.code(), Code::kInvalidArgument);
  EXPECT_EQ(d.status.node(), "op");
  EXPECT_NE(d.status.message().find("same shape"), std::string::npos) << d.status.ToString();
}

TEST(CwiseFillLike, ZerosAndOnesEveryDtype) {
  ForTypes(AllTypes{}, []<typename T>() {
    for (const TensorShape& s : {TensorShape({}), TensorShape({0}), TensorShape({2, 0}),
                                 TensorShape({2, 3}), TensorShape({1000})}) {
      Tensor x(kDataTypeOf<T>, s);
      if (x.TotalBytes() > 0) std::memset(x.raw_data(), 0x5a, x.TotalBytes());
      for (const char* op : {"ZerosLike", "OnesLike"}) {
        double v = std::string(op) == "OnesLike" ? 1 : 0;
        Tensor got = RunOp1(op, {x});
        ASSERT_EQ(got.dtype(), kDataTypeOf<T>);
        ASSERT_EQ(got.shape(), s);
        for (int64_t i = 0; i < got.num_elements(); ++i) {
          ASSERT_EQ(got.ElementAsDouble(i), v) << op << " " << DataTypeName(kDataTypeOf<T>);
        }
      }
      // The input (shared with the caller) is never overwritten.
      for (int64_t i = 0; i < x.TotalBytes(); ++i) {
        ASSERT_EQ(static_cast<const uint8_t*>(x.raw_data())[i], 0x5a);
      }
    }
  });
}

// ---------------------------------------------------------------------------
// Forwarding: an input nobody else holds becomes the output.

TEST(CwiseForwarding, ElementWiseOpsReuseAnUnsharedInput) {
  const AttrMap f32 = {{"T", AttrValue(DataType::kFloat32)}};
  {
    Tensor x = RandomTensor<float>(TensorShape({64, 10}), 1), y = RandomTensor<float>(TensorShape({10}), 2);
    Tensor want = RefBinary<float, float>(x, y, [](float a, float b) { return a + b; });
    const void* xp = x.raw_data();
    DirectRun r = RunKernelDirect("Add", Inputs(std::move(x), y), f32, {DataType::kFloat32});
    ASSERT_TRUE(r.status.ok()) << r.status.ToString();
    EXPECT_EQ(r.outputs[0].raw_data(), xp) << "Add should write into its unshared input";
    EXPECT_TRUE(TensorNear(r.outputs[0], want));
  }
  {  // the second input when the first is broadcast
    Tensor x = Tensor::Scalar<float>(2), y = RandomTensor<float>(TensorShape({100}), 3);
    Tensor want = RefBinary<float, float>(x, y, [](float a, float b) { return a * b; });
    const void* yp = y.raw_data();
    DirectRun r = RunKernelDirect("Mul", Inputs(x, std::move(y)), f32, {DataType::kFloat32});
    ASSERT_TRUE(r.status.ok());
    EXPECT_EQ(r.outputs[0].raw_data(), yp);
    EXPECT_TRUE(TensorNear(r.outputs[0], want));
  }
  {  // a shared input is left alone
    Tensor x = RandomTensor<float>(TensorShape({100}), 4), y = RandomTensor<float>(TensorShape({100}), 5);
    Tensor x_copy = x.DeepCopy();
    DirectRun r = RunKernelDirect("Sub", Inputs(x, y), f32, {DataType::kFloat32});
    ASSERT_TRUE(r.status.ok());
    EXPECT_FALSE(r.outputs[0].SharesBufferWith(x));
    EXPECT_FALSE(r.outputs[0].SharesBufferWith(y));
    EXPECT_TRUE(TensorsEqual(x, x_copy));
  }
  {  // unary, in place through Eigen's vectorized exp
    Tensor x = RandomTensor<float>(TensorShape({3000}), 6);
    Tensor want(DataType::kFloat32, x.shape());
    for (int64_t i = 0; i < x.num_elements(); ++i) want.data<float>()[i] = std::exp(x.data<float>()[i]);
    const void* xp = x.raw_data();
    DirectRun r = RunKernelDirect("Exp", Inputs(std::move(x)), f32, {DataType::kFloat32});
    ASSERT_TRUE(r.status.ok());
    EXPECT_EQ(r.outputs[0].raw_data(), xp);
    EXPECT_TRUE(TensorNear(r.outputs[0], want));
  }
  {  // AddN sums into the one input nobody else holds, whatever its position
    Tensor a = RandomTensor<float>(TensorShape({5000}), 7), b = RandomTensor<float>(TensorShape({5000}), 8),
           c = RandomTensor<float>(TensorShape({5000}), 9);
    Tensor want(DataType::kFloat32, a.shape());
    for (int64_t i = 0; i < a.num_elements(); ++i) {
      want.data<float>()[i] = a.data<float>()[i] + b.data<float>()[i] + c.data<float>()[i];
    }
    const void* cp = c.raw_data();
    DirectRun r = RunKernelDirect("AddN", Inputs(a, b, std::move(c)),
                                  {{"T", AttrValue(DataType::kFloat32)}, {"N", AttrValue(int64_t{3})}},
                                  {DataType::kFloat32});
    ASSERT_TRUE(r.status.ok());
    EXPECT_EQ(r.outputs[0].raw_data(), cp);
    EXPECT_TRUE(TensorNear(r.outputs[0], want));
  }
  {  // Select into t
    Tensor c = RandomTensor<bool>(TensorShape({50}), 10), t = RandomTensor<int32_t>(TensorShape({50}), 11, -9, 9);
    Tensor e = Tensor::Scalar<int32_t>(-100);
    Tensor want(DataType::kInt32, t.shape());
    for (int i = 0; i < 50; ++i) want.data<int32_t>()[i] = c.data<bool>()[i] ? t.data<int32_t>()[i] : -100;
    const void* tp = t.raw_data();
    DirectRun r = RunKernelDirect("Select", Inputs(c, std::move(t), e), {{"T", AttrValue(DataType::kInt32)}},
                                  {DataType::kInt32});
    ASSERT_TRUE(r.status.ok());
    EXPECT_EQ(r.outputs[0].raw_data(), tp);
    EXPECT_TRUE(TensorEq(r.outputs[0], want));
  }
}

// ---------------------------------------------------------------------------
// Large inputs on a two-thread device: every shard computed, none twice.

TEST(CwiseLarge, TwoThreadsComputeEveryElement) {
  Device* d2 = CpuTestDevice(2);
  const int64_t n = int64_t{1} << 20;
  Tensor x = RandomTensor<float>(TensorShape({n}), 21, -3, 3);
  Tensor y = RandomTensor<float>(TensorShape({n}), 22, 0.5, 3);
  auto add = [](float a, float b) { return a + b; };
  EXPECT_TRUE(TensorNear(RunOp1("Add", {x, y}, {}, d2), RefBinary<float, float>(x, y, add)));
  // Row, general and scalar broadcasts, sharded mid-row.
  Tensor xr = RandomTensor<float>(TensorShape({1024, 1024}), 23);
  Tensor row = RandomTensor<float>(TensorShape({1024}), 24);
  EXPECT_TRUE(TensorNear(RunOp1("Mul", {xr, row}, {}, d2),
                         RefBinary<float, float>(xr, row, [](float a, float b) { return a * b; })));
  Tensor g1 = RandomTensor<float>(TensorShape({64, 1, 255}), 25);
  Tensor g2 = RandomTensor<float>(TensorShape({67, 1}), 26);
  EXPECT_TRUE(TensorNear(RunOp1("SquaredDifference", {g1, g2}, {}, d2),
                         RefBinary<float, float>(g1, g2, [](float a, float b) { return (a - b) * (a - b); })));
  Tensor s = Tensor::Scalar<float>(1.5f);
  EXPECT_TRUE(TensorEq(RunOp1("Greater", {x, s}, {}, d2),
                       RefBinary<float, bool>(x, s, [](float a, float b) { return a > b; })));
  // Integer division, slow enough per element to shard early.
  Tensor xi = RandomTensor<int32_t>(TensorShape({n}), 27, -1000, 1000);
  Tensor yi = NonZero<int32_t>(RandomTensor<int32_t>(TensorShape({n}), 28, -50, 50));
  EXPECT_TRUE(TensorEq(RunOp1("Div", {xi, yi}, {}, d2),
                       RefBinary<int32_t, int32_t>(xi, yi, [](int32_t a, int32_t b) { return a / b; })));
  // Unary through Eigen, with the <cmath> fallback blocks in the mix.
  Tensor ex = x.DeepCopy();
  for (int64_t i = 0; i < n; i += 4099) ex.data<float>()[i] = -std::numeric_limits<float>::infinity();
  Tensor want_exp(DataType::kFloat32, ex.shape());
  for (int64_t i = 0; i < n; ++i) want_exp.data<float>()[i] = std::exp(ex.data<float>()[i]);
  EXPECT_TRUE(TensorNear(RunOp1("Exp", {ex}, {}, d2), want_exp, 2e-6));
  // Cast, Select and AddN.
  Tensor want_cast(DataType::kInt32, x.shape());
  for (int64_t i = 0; i < n; ++i) want_cast.data<int32_t>()[i] = int32_t(x.data<float>()[i] * 1.0f);
  EXPECT_TRUE(TensorEq(RunOp1("Cast", {x}, {{"DstT", AttrValue(DataType::kInt32)}}, d2), want_cast));
  Tensor c = RandomTensor<bool>(TensorShape({n}), 29);
  Tensor want_sel(DataType::kFloat32, x.shape());
  for (int64_t i = 0; i < n; ++i) {
    want_sel.data<float>()[i] = c.data<bool>()[i] ? x.data<float>()[i] : y.data<float>()[i];
  }
  EXPECT_TRUE(TensorEq(RunOp1("Select", {c, x, y}, {}, d2), want_sel));
  Tensor want_sum(DataType::kFloat32, x.shape());
  for (int64_t i = 0; i < n; ++i) {
    want_sum.data<float>()[i] = x.data<float>()[i] + y.data<float>()[i] + x.data<float>()[i];
  }
  EXPECT_TRUE(TensorNear(RunOp1("AddN", {x, y, x}, {}, d2), want_sum));
}

}  // namespace
}  // namespace flowstate::test

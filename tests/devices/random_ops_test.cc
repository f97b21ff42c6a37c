// RandomUniform, RandomNormal and TruncatedNormal: Philox known answers,
// seeding and sequence semantics, thread-count independence, and moments
// on 100k samples.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <thread>

#include "devices/cpu/philox.h"
#include "devices/single_kernel.h"
#include "graph/graph.h"
#include "tests/util/op_test_util.h"

namespace flowstate::test {
namespace {

using internal::Philox4x32;

TEST(RandomPhilox, MatchesRandom123KnownAnswers) {
  EXPECT_EQ(Philox4x32::Generate({0, 0, 0, 0}, {0, 0}),
            (Philox4x32::Block{0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u}));
  EXPECT_EQ(Philox4x32::Generate({~0u, ~0u, ~0u, ~0u}, {~0u, ~0u}),
            (Philox4x32::Block{0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu}));
  EXPECT_EQ(Philox4x32::Generate({0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u},
                                 {0xa4093822u, 0x299f31d0u}),
            (Philox4x32::Block{0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u}));
}

TEST(RandomPhilox, BatchMatchesSingleBlocks) {
  const Philox4x32::Key key = {0x12345678u, 0x9abcdef0u};
  const uint64_t high = 0x0123456789abcdefull;
  for (uint64_t step : {uint64_t(1), uint64_t(16)}) {
    const uint64_t first = 0xfffffffffull;  // crosses a 32-bit boundary
    uint32_t w[4][Philox4x32::kBatch];
    Philox4x32::GenerateBatch(first, step, high, key, Philox4x32::kBatch, w);
    for (int i = 0; i < Philox4x32::kBatch; ++i) {
      const uint64_t c = first + uint64_t(i) * step;
      Philox4x32::Block b = Philox4x32::Generate(
          {uint32_t(c), uint32_t(c >> 32), uint32_t(high), uint32_t(high >> 32)}, key);
      for (int k = 0; k < 4; ++k) EXPECT_EQ(w[k][i], b[k]) << i << " " << k;
    }
  }
}

constexpr const char* kOps[] = {"RandomUniform", "RandomNormal", "TruncatedNormal"};
const std::vector<DataType> kFloatTypes = {DataType::kFloat32, DataType::kFloat64};

AttrMap Attrs(DataType dtype, int64_t seed, int64_t seed2, AttrMap extra = {}) {
  extra["dtype"] = AttrValue(dtype);
  extra["seed"] = AttrValue(seed);
  extra["seed2"] = AttrValue(seed2);
  return extra;
}

Tensor Shape1(int64_t n) { return T1<int32_t>({int32_t(n)}); }

// One kernel, built once, computed many times (RunOp builds a fresh kernel
// per call).
class KernelRunner {
 public:
  // The shape comes through a Placeholder, so that bad shapes reach the
  // kernel rather than the shape function.
  KernelRunner(const std::string& op, const Tensor& shape, const AttrMap& attrs,
               Device* device = CpuTestDevice(1))
      : shape_(shape), kernel_(SingleKernel::Create(op, {shape.dtype()}, attrs, device).value()) {}

  StatusOr<Tensor> Compute() {
    FS_ASSIGN_OR_RETURN(std::vector<Tensor> out, kernel_->Compute({shape_}));
    return out[0];
  }

 private:
  Tensor shape_;
  std::unique_ptr<SingleKernel> kernel_;
};

TEST(RandomOps, EveryOpAndDtypeHasTheRequestedShape) {
  for (const char* op : kOps) {
    for (DataType t : kFloatTypes) {
      Tensor a = RunOp1(op, {T1<int32_t>({2, 3, 5})}, Attrs(t, 1, 2));
      EXPECT_EQ(a.shape(), TensorShape({2, 3, 5})) << op;
      EXPECT_EQ(a.dtype(), t);
      Tensor b = RunOp1(op, {T1<int64_t>({7})}, Attrs(t, 1, 2));
      EXPECT_EQ(b.shape(), TensorShape({7}));
      EXPECT_EQ(RunOp1(op, {T1<int64_t>({})}, Attrs(t, 1, 2)).shape(), TensorShape());
      EXPECT_EQ(RunOp1(op, {T1<int32_t>({3, 0})}, Attrs(t, 1, 2)).shape(), TensorShape({3, 0}));
      EXPECT_EQ(RunOp1(op, {T1<int32_t>({0})}, Attrs(t, 1, 2)).shape(), TensorShape({0}));
    }
  }
}

TEST(RandomOps, SameSeedsSameNumbersOtherSeedsOthers) {
  for (const char* op : kOps) {
    for (DataType t : kFloatTypes) {
      Tensor a = RunOp1(op, {Shape1(1001)}, Attrs(t, 42, 7));
      Tensor b = RunOp1(op, {Shape1(1001)}, Attrs(t, 42, 7));
      EXPECT_TRUE(TensorsEqual(a, b)) << op;
      EXPECT_FALSE(TensorsEqual(a, RunOp1(op, {Shape1(1001)}, Attrs(t, 43, 7)))) << op;
      EXPECT_FALSE(TensorsEqual(a, RunOp1(op, {Shape1(1001)}, Attrs(t, 42, 8)))) << op;
      // seed alone (seed2 = 0) is deterministic too.
      EXPECT_TRUE(TensorsEqual(RunOp1(op, {Shape1(50)}, Attrs(t, 5, 0)),
                               RunOp1(op, {Shape1(50)}, Attrs(t, 5, 0))));
      // A prefix of a longer draw is the shorter draw.
      Tensor c = RunOp1(op, {Shape1(400)}, Attrs(t, 42, 7));
      EXPECT_EQ(std::memcmp(a.raw_data(), c.raw_data(), c.TotalBytes()), 0) << op;
      // seed = seed2 = 0: a fresh seed per kernel.
      EXPECT_FALSE(TensorsEqual(RunOp1(op, {Shape1(64)}, Attrs(t, 0, 0)),
                                RunOp1(op, {Shape1(64)}, Attrs(t, 0, 0))))
          << op;
    }
  }
}

TEST(RandomOps, ResultsDoNotDependOnTheThreadCount) {
  for (const char* op : kOps) {
    for (DataType t : kFloatTypes) {
      Tensor one = RunOp1(op, {T1<int64_t>({300, 1001})}, Attrs(t, 9, 99), CpuTestDevice(1));
      Tensor two = RunOp1(op, {T1<int64_t>({300, 1001})}, Attrs(t, 9, 99), CpuTestDevice(2));
      EXPECT_TRUE(TensorsEqual(one, two)) << op << " " << DataTypeName(t);
    }
  }
}

TEST(RandomOps, EachComputeAdvancesTheSequenceDeterministically) {
  for (const char* op : kOps) {
    for (DataType t : kFloatTypes) {
      KernelRunner k1(op, Shape1(333), Attrs(t, 11, 12));
      KernelRunner k2(op, Shape1(333), Attrs(t, 11, 12), CpuTestDevice(2));
      Tensor a1 = k1.Compute().value(), a2 = k1.Compute().value();
      EXPECT_FALSE(TensorsEqual(a1, a2)) << op;
      EXPECT_TRUE(TensorsEqual(a1, k2.Compute().value())) << op;
      EXPECT_TRUE(TensorsEqual(a2, k2.Compute().value())) << op;
      // The first call equals what a fresh kernel gives.
      EXPECT_TRUE(TensorsEqual(a1, RunOp1(op, {Shape1(333)}, Attrs(t, 11, 12))));
    }
  }
}

TEST(RandomOps, ConcurrentComputesGetDisjointDraws) {
  for (DataType t : kFloatTypes) {
    KernelRunner seq("RandomNormal", Shape1(1000), Attrs(t, 3, 4));
    std::vector<Tensor> want;
    for (int i = 0; i < 8; ++i) want.push_back(seq.Compute().value());
    KernelRunner par("RandomNormal", Shape1(1000), Attrs(t, 3, 4));
    std::vector<Tensor> got(8);
    std::vector<std::thread> threads;
    for (int i = 0; i < 8; ++i) threads.emplace_back([&, i] { got[i] = par.Compute().value(); });
    for (auto& th : threads) th.join();
    // Same calls, in some order.
    for (const Tensor& g : got) {
      int matches = 0;
      for (const Tensor& w : want) matches += TensorsEqual(g, w);
      EXPECT_EQ(matches, 1);
    }
  }
}

struct Moments {
  double mean = 0, stddev = 0, min = INFINITY, max = -INFINITY;
};
Moments Measure(const Tensor& t) {
  Moments m;
  const int64_t n = t.num_elements();
  double sum = 0, sq = 0;
  for (int64_t i = 0; i < n; ++i) {
    double x = t.ElementAsDouble(i);
    sum += x;
    sq += x * x;
    m.min = std::min(m.min, x);
    m.max = std::max(m.max, x);
  }
  m.mean = sum / n;
  m.stddev = std::sqrt(sq / n - m.mean * m.mean);
  return m;
}

constexpr int64_t kSamples = 100000;

TEST(RandomUniform, RangeAndMoments) {
  for (DataType t : kFloatTypes) {
    for (auto [lo, hi] : {std::pair{0.0, 1.0}, {-3.0, 5.0}, {10.0, 10.5}}) {
      Tensor x = RunOp1("RandomUniform", {Shape1(kSamples)},
                        Attrs(t, 17, 18, {{"minval", AttrValue(lo)}, {"maxval", AttrValue(hi)}}),
                        CpuTestDevice(2));
      Moments m = Measure(x);
      const double w = hi - lo;
      EXPECT_GE(m.min, lo);
      EXPECT_LT(m.max, hi);
      EXPECT_NEAR(m.mean, (lo + hi) / 2, 0.01 * w) << DataTypeName(t);
      EXPECT_NEAR(m.stddev, w / std::sqrt(12.0), 0.01 * w);
      // Spread over the whole range: every tenth of it is hit about 10%.
      std::vector<int> bins(10, 0);
      for (int64_t i = 0; i < kSamples; ++i) {
        ++bins[std::min(9, int((x.ElementAsDouble(i) - lo) / w * 10))];
      }
      for (int b : bins) EXPECT_NEAR(b, kSamples / 10, kSamples / 100);
    }
  }
}

TEST(RandomUniform, NarrowRangeStaysHalfOpen) {
  // Only a few floats lie in [1, 1 + 4 ulp): rounding often lands on maxval,
  // which must never be returned.
  const double lo = 1.0, hi = 1.0 + 4 * 0x1p-23;
  Tensor x = RunOp1("RandomUniform", {Shape1(10000)},
                    Attrs(DataType::kFloat32, 5, 6, {{"minval", AttrValue(lo)}, {"maxval", AttrValue(hi)}}));
  Moments m = Measure(x);
  EXPECT_GE(m.min, lo);
  EXPECT_LT(m.max, float(hi));
}

TEST(RandomNormal, Moments) {
  for (DataType t : kFloatTypes) {
    for (auto [mean, stddev] : {std::pair{0.0, 1.0}, {3.0, 0.5}, {-2.0, 4.0}}) {
      Tensor x = RunOp1("RandomNormal", {Shape1(kSamples)},
                        Attrs(t, 21, 22, {{"mean", AttrValue(mean)}, {"stddev", AttrValue(stddev)}}));
      Moments m = Measure(x);
      EXPECT_NEAR(m.mean, mean, 0.02 * stddev) << DataTypeName(t);
      EXPECT_NEAR(m.stddev, stddev, 0.02 * stddev);
      // About 4.55% of a normal lies beyond two standard deviations.
      int64_t beyond = 0;
      for (int64_t i = 0; i < kSamples; ++i) {
        beyond += std::abs(x.ElementAsDouble(i) - mean) > 2 * stddev;
      }
      EXPECT_NEAR(double(beyond) / kSamples, 0.0455, 0.005);
      EXPECT_TRUE(std::isfinite(m.min) && std::isfinite(m.max));
    }
  }
}

TEST(RandomTruncatedNormal, WithinTwoStddevsAndMoments) {
  // The standard normal truncated to (-2, 2) has standard deviation
  // sqrt(1 - 4 phi(2) / (2 Phi(2) - 1)) = 0.8796.
  for (DataType t : kFloatTypes) {
    for (auto [mean, stddev] : {std::pair{0.0, 1.0}, {5.0, 2.0}}) {
      Tensor x = RunOp1("TruncatedNormal", {T1<int64_t>({100, kSamples / 100})},
                        Attrs(t, 31, 32, {{"mean", AttrValue(mean)}, {"stddev", AttrValue(stddev)}}),
                        CpuTestDevice(2));
      Moments m = Measure(x);
      EXPECT_GT(m.min, mean - 2 * stddev);
      EXPECT_LT(m.max, mean + 2 * stddev);
      EXPECT_NEAR(m.mean, mean, 0.02 * stddev) << DataTypeName(t);
      EXPECT_NEAR(m.stddev, 0.8796 * stddev, 0.02 * stddev);
    }
  }
}

TEST(RandomOps, RejectsBadShapes) {
  for (const char* op : kOps) {
    KernelRunner neg(op, T1<int32_t>({2, -1}), Attrs(DataType::kFloat32, 1, 1));
    StatusOr<Tensor> r = neg.Compute();
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), Code::kInvalidArgument);
    EXPECT_EQ(r.status().node(), "op");
    EXPECT_NE(r.status().message().find("negative"), std::string::npos) << r.status().ToString();
    KernelRunner mat(op, TS<int64_t>({2, 2}, {1, 2}), Attrs(DataType::kFloat64, 1, 1));
    r = mat.Compute();
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().node(), "op");
    EXPECT_NE(r.status().message().find("shape must be a vector"), std::string::npos);
  }
}

}  // namespace
}  // namespace flowstate::test

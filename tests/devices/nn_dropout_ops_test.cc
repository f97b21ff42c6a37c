// Dropout: the mask is RandomUniform's draw (same seeds) compared with the
// rate, output = x * mask, rate 0 keeps everything; seeding and sequence
// semantics, thread-count independence, the kept fraction, and bad rates.
#include <gtest/gtest.h>

#include <thread>

#include "tests/devices/nn_test_util.h"

namespace flowstate::test {
namespace {

AttrMap DropoutAttrs(double rate, int64_t seed, int64_t seed2) {
  return {{"rate", AttrValue(rate)}, {"seed", AttrValue(seed)}, {"seed2", AttrValue(seed2)}};
}

TEST(NnDropout, MaskIsTheUniformDrawAgainstTheRate) {
  ForFloatTypes([]<typename T>() {
    const DataType dt = kDataTypeOf<T>;
    uint64_t seed = 1;
    for (double rate : {0.1, 0.5, 0.9}) {
      for (const TensorShape& s :
           {TensorShape({0}), TensorShape({}), TensorShape({7}), TensorShape({3, 5}),
            TensorShape({2, 3, 4}), TensorShape({1001})}) {
        Tensor x = RandomTensor<T>(s, seed++, -5, 5);
        auto got = RunOp("Dropout", {x}, DropoutAttrs(rate, 42, 7));
        ASSERT_TRUE(got.ok()) << got.status().ToString();
        Tensor u = RunOp1("RandomUniform", {T1<int64_t>(s.dim_vector())},
                          {{"dtype", AttrValue(dt)},
                           {"seed", AttrValue(int64_t(42))},
                           {"seed2", AttrValue(int64_t(7))}});
        Tensor mask(dt, s), out(dt, s);
        const T scale = T(1.0 / (1.0 - rate));
        for (int64_t i = 0; i < s.num_elements(); ++i) {
          mask.data<T>()[i] = u.data<T>()[i] >= T(rate) ? scale : T(0);
          out.data<T>()[i] = x.data<T>()[i] * mask.data<T>()[i];
        }
        EXPECT_TRUE(TensorEq((*got)[0], out)) << rate << " " << s.ToString();
        EXPECT_TRUE(TensorEq((*got)[1], mask)) << rate << " " << s.ToString();
      }
    }
  });
}

TEST(NnDropout, RateZeroKeepsEverything) {
  ForFloatTypes([]<typename T>() {
    Tensor x = RandomTensor<T>(TensorShape({4, 9}), 3);
    auto got = RunOp("Dropout", {x}, DropoutAttrs(0, 1, 2));
    ASSERT_TRUE(got.ok());
    EXPECT_TRUE(TensorEq((*got)[0], x));
    Tensor ones(kDataTypeOf<T>, x.shape());
    std::fill_n(ones.data<T>(), ones.num_elements(), T(1));
    EXPECT_TRUE(TensorEq((*got)[1], ones));
  });
}

TEST(NnDropout, KeepsAboutOneMinusRate) {
  ForFloatTypes([]<typename T>() {
    Tensor x(kDataTypeOf<T>, TensorShape({200000}));
    std::fill_n(x.data<T>(), x.num_elements(), T(1));
    for (double rate : {0.25, 0.5}) {
      auto got = RunOp("Dropout", {x}, DropoutAttrs(rate, 5, 6));
      ASSERT_TRUE(got.ok());
      double kept = 0, sum = 0;
      for (int64_t i = 0; i < x.num_elements(); ++i) {
        kept += (*got)[1].data<T>()[i] != T(0);
        sum += double((*got)[0].data<T>()[i]);
      }
      EXPECT_NEAR(kept / 200000, 1 - rate, 0.005);
      EXPECT_NEAR(sum / 200000, 1.0, 0.01);  // the scaling keeps the mean
    }
  });
}

TEST(NnDropout, SeedsSequencesAndThreads) {
  ForFloatTypes([]<typename T>() {
    const DataType dt = kDataTypeOf<T>;
    Tensor x = RandomTensor<T>(TensorShape({300, 1001}), 8);
    auto mask = [&](const AttrMap& a, Device* d) { return RunOp("Dropout", {x}, a, d).value()[1]; };
    Tensor a = mask(DropoutAttrs(0.5, 11, 12), CpuTestDevice(1));
    EXPECT_TRUE(TensorsEqual(a, mask(DropoutAttrs(0.5, 11, 12), CpuTestDevice(2))));
    EXPECT_FALSE(TensorsEqual(a, mask(DropoutAttrs(0.5, 12, 12), CpuTestDevice(1))));
    EXPECT_FALSE(TensorsEqual(a, mask(DropoutAttrs(0.5, 11, 13), CpuTestDevice(1))));
    // seed = seed2 = 0: a fresh seed per kernel.
    EXPECT_FALSE(TensorsEqual(mask(DropoutAttrs(0.5, 0, 0), CpuTestDevice(1)),
                              mask(DropoutAttrs(0.5, 0, 0), CpuTestDevice(1))));
    // Each Compute advances the sequence; two kernels with the same seeds
    // (on different thread counts) see the same sequence.
    OwnedKernel k1("Dropout", {dt}, DropoutAttrs(0.3, 21, 22), CpuTestDevice(1));
    OwnedKernel k2("Dropout", {dt}, DropoutAttrs(0.3, 21, 22), CpuTestDevice(2));
    ASSERT_TRUE(k1.status().ok()) << k1.status().ToString();
    Tensor m1 = k1.Compute({x}).value()[1], m2 = k1.Compute({x}).value()[1];
    EXPECT_FALSE(TensorsEqual(m1, m2));
    EXPECT_TRUE(TensorsEqual(m1, k2.Compute({x}).value()[1]));
    EXPECT_TRUE(TensorsEqual(m2, k2.Compute({x}).value()[1]));
    EXPECT_TRUE(TensorsEqual(m1, mask(DropoutAttrs(0.3, 21, 22), CpuTestDevice(1))));
  });
}

TEST(NnDropout, ConcurrentComputesGetDisjointMasks) {
  Tensor x = RandomTensor<float>(TensorShape({1000}), 1);
  OwnedKernel seq("Dropout", {DataType::kFloat32}, DropoutAttrs(0.5, 3, 4));
  std::vector<Tensor> want;
  for (int i = 0; i < 8; ++i) want.push_back(seq.Compute({x}).value()[1]);
  OwnedKernel par("Dropout", {DataType::kFloat32}, DropoutAttrs(0.5, 3, 4));
  std::vector<Tensor> got(8);
  std::vector<std::thread> threads;
  for (int i = 0; i < 8; ++i)
    threads.emplace_back([&, i] { got[i] = par.Compute({x}).value()[1]; });
  for (auto& t : threads) t.join();
  for (const Tensor& g : got) {
    int matches = 0;
    for (const Tensor& w : want) matches += TensorsEqual(g, w);
    EXPECT_EQ(matches, 1);
  }
}

TEST(NnDropout, OutputReusesTheInputBufferAndBadRatesAreRefused) {
  Tensor x = RandomTensor<double>(TensorShape({64}), 2);
  EXPECT_TRUE(ForwardsInput("Dropout", Own(x.DeepCopy()), 0, DropoutAttrs(0.5, 1, 1)));
  for (double rate : {1.0, -0.1, 1.5}) {
    EXPECT_TRUE(IsOpError(RunOp("Dropout", {x}, DropoutAttrs(rate, 1, 1)), "rate")) << rate;
    OwnedKernel k("Dropout", {DataType::kFloat64}, DropoutAttrs(rate, 1, 1));
    EXPECT_FALSE(k.status().ok());
  }
}

}  // namespace
}  // namespace flowstate::test

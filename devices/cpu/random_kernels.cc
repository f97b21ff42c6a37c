// RandomUniform, RandomNormal and TruncatedNormal for float32 and float64,
// on the Philox4x32-10 counter-based generator (philox.h).
//
// Streams. The Philox key is attr `seed` (64 bits) and the upper half of
// the 128-bit counter is attr `seed2`; the lower half is a block index.
// With seed = seed2 = 0 the kernel draws both from std::random_device when
// it is built. Each Compute reserves the block indices it needs with one
// atomic fetch_add on the kernel's counter, so concurrent steps get disjoint
// numbers and sequential steps a deterministic sequence; two kernels with
// the same nonzero seeds produce the same sequence of tensors.
//
// Layout. Output elements come in groups of one Philox block: 4 float32
// values or 2 float64 values (a double takes 64 bits). Group g of a call
// with base index B uses block B + g (B + g * kTruncatedBlocks + attempt
// for TruncatedNormal, whose redraws stay inside the group's reservation),
// so the result depends only on the seeds and the call's position in the
// sequence, never on how ParallelFor splits the groups across threads.
//
// Distributions. Uniform: 23 (float32) or 52 (float64) random mantissa
// bits give u in [0, 1), scaled to [minval, maxval) (a value that rounds up
// to maxval is replaced by the largest value below it). Normal: Box-Muller,
// two uniforms (the first in (0, 1] so its log is finite) per pair of
// normals. TruncatedNormal: standard normals with |z| >= 2 are discarded
// and redrawn, then scaled by stddev and shifted by mean.
#include <algorithm>
#include <atomic>
#include <bit>
#include <cmath>
#include <limits>
#include <numbers>
#include <random>

#include "devices/cpu/array_kernel_util.h"
#include "devices/cpu/philox.h"
#include "devices/cpu/philox_kernel.h"

namespace flowstate::internal {
namespace {

enum class Dist { kUniform, kNormal, kTruncatedNormal };

// Blocks reserved per group for TruncatedNormal. A group needs more than
// this only if 16 blocks (64 or 32 normals) yield fewer than 4 or 2 values
// within two standard deviations: probability below 1e-60.
constexpr uint64_t kTruncatedBlocks = 16;

inline float Uniform01f(uint32_t x) {  // [0, 1)
  return std::bit_cast<float>(0x3f800000u | (x >> 9)) - 1.0f;
}
inline float UniformOpenLowf(uint32_t x) {  // (0, 1]
  return float((x >> 8) + 1) * 0x1p-24f;
}
inline uint64_t Join(uint32_t hi, uint32_t lo) { return (uint64_t(hi) << 32) | lo; }
inline double Uniform01d(uint64_t x) {  // [0, 1)
  return std::bit_cast<double>(0x3ff0000000000000ull | (x >> 12)) - 1.0;
}
inline double UniformOpenLowd(uint64_t x) {  // (0, 1]
  return double((x >> 11) + 1) * 0x1p-53;
}

// Standard normals from one block: 4 for float, 2 for double.
inline void Normals(const Philox4x32::Block& b, float* z) {
  for (int k = 0; k < 4; k += 2) {
    const float r = std::sqrt(-2.0f * std::log(UniformOpenLowf(b[k])));
    const float theta = 2.0f * std::numbers::pi_v<float> * Uniform01f(b[k + 1]);
    z[k] = r * std::cos(theta);
    z[k + 1] = r * std::sin(theta);
  }
}
inline void Normals(const Philox4x32::Block& b, double* z) {
  const double r = std::sqrt(-2.0 * std::log(UniformOpenLowd(Join(b[0], b[1]))));
  const double theta = 2.0 * std::numbers::pi * Uniform01d(Join(b[2], b[3]));
  z[0] = r * std::cos(theta);
  z[1] = r * std::sin(theta);
}
inline void Uniforms(const Philox4x32::Block& b, float* u) {
  for (int k = 0; k < 4; ++k) u[k] = Uniform01f(b[k]);
}
inline void Uniforms(const Philox4x32::Block& b, double* u) {
  u[0] = Uniform01d(Join(b[0], b[1]));
  u[1] = Uniform01d(Join(b[2], b[3]));
}

template <typename T, Dist D>
class RandomOp final : public PhiloxKernel {
 public:
  static constexpr int64_t kPerBlock = sizeof(T) == 4 ? 4 : 2;
  static constexpr uint64_t kBlocksPerGroup = D == Dist::kTruncatedNormal ? kTruncatedBlocks : 1;

  explicit RandomOp(OpKernelConstruction* c) : PhiloxKernel(c) {
    int64_t seed = 0, seed2 = 0;
    double a = 0, b = 1;
    if (!c->GetAttr("seed", &seed).ok() || !c->GetAttr("seed2", &seed2).ok()) return;
    const bool uniform = D == Dist::kUniform;
    if (!c->GetAttr(uniform ? "minval" : "mean", &a).ok() ||
        !c->GetAttr(uniform ? "maxval" : "stddev", &b).ok()) {
      return;
    }
    if (seed == 0 && seed2 == 0) {
      std::random_device rd;
      seed = int64_t(Join(rd(), rd()));
      seed2 = int64_t(Join(rd(), rd()));
    }
    SetSeeds(seed, seed2);
    a_ = T(a);
    b_ = T(b);
  }

  void Compute(OpKernelContext* ctx) override {
    std::vector<int64_t> dims;
    FS_OP_REQUIRES_OK(ctx, ReadIndexVector(*this, ctx->input(0), "shape", &dims));
    StatusOr<TensorShape> shape = TensorShape::Make(dims);
    FS_OP_REQUIRES(ctx, shape.ok(), KernelError(*this, "shape: " + shape.status().message()));
    Tensor* out = nullptr;
    if (!ctx->allocate_output(0, *shape, &out).ok()) return;
    const int64_t n = out->num_elements();
    const int64_t groups = (n + kPerBlock - 1) / kPerBlock;
    const uint64_t base =
        ClaimBlocks(uint64_t(groups) * kBlocksPerGroup);
    T* o = out->data<T>();
    const int64_t cost = D == Dist::kUniform ? 60 : 200;
    ctx->device()->ParallelFor(groups, cost, [&](int64_t begin, int64_t end) {
      if constexpr (D == Dist::kTruncatedNormal) {
        for (int64_t g = begin; g < end; ++g) {
          const int64_t first = g * kPerBlock;
          FillTruncated(base + uint64_t(g) * kBlocksPerGroup, o + first,
                        std::min<int64_t>(kPerBlock, n - first));
        }
      } else {
        for (int64_t g = begin; g < end; g += Philox4x32::kBatch) {
          const int m = int(std::min<int64_t>(Philox4x32::kBatch, end - g));
          const int64_t first = g * kPerBlock;
          FillBatch(base + uint64_t(g), m, o + first, std::min<int64_t>(m * kPerBlock, n - first));
        }
      }
    });
  }

 private:
  Philox4x32::Block Bits(uint64_t block) const {
    return Philox4x32::Generate(
        {uint32_t(block), uint32_t(block >> 32), uint32_t(stream_), uint32_t(stream_ >> 32)},
        key_);
  }

  // Writes `count` (<= m * kPerBlock) values from the m blocks starting at
  // `block` (uniform and normal: one block per group).
  void FillBatch(uint64_t block, int m, T* out, int64_t count) const {
    uint32_t w[4][Philox4x32::kBatch];
    Philox4x32::GenerateBatch(block, 1, stream_, key_, m, w);
    T v[Philox4x32::kBatch * kPerBlock];
    for (int i = 0; i < m; ++i) {
      const Philox4x32::Block b = {w[0][i], w[1][i], w[2][i], w[3][i]};
      if constexpr (D == Dist::kUniform) {
        Uniforms(b, v + i * kPerBlock);
      } else {
        Normals(b, v + i * kPerBlock);
      }
    }
    if constexpr (D == Dist::kUniform) {
      // Rounding may reach maxval; keep the interval half-open. (With
      // maxval <= minval there is no interval; the values are still
      // minval + u * (maxval - minval), as in TensorFlow.)
      const T range = b_ - a_;
      const T top = b_ > a_ ? std::nextafter(b_, a_) : std::numeric_limits<T>::infinity();
      for (int64_t k = 0; k < count; ++k) out[k] = std::min(a_ + v[k] * range, top);
    } else {
      for (int64_t k = 0; k < count; ++k) out[k] = a_ + b_ * v[k];
    }
  }

  // Writes `count` (<= kPerBlock) values of one group whose blocks start at
  // `block`, redrawing standard normals with |z| >= 2.
  void FillTruncated(uint64_t block, T* out, int64_t count) const {
    T v[kPerBlock];
    int64_t filled = 0;
    for (uint64_t attempt = 0; attempt < kTruncatedBlocks && filled < count; ++attempt) {
      Normals(Bits(block + attempt), v);
      for (int64_t k = 0; k < kPerBlock && filled < count; ++k) {
        if (std::abs(v[k]) < T(2)) out[filled++] = a_ + b_ * v[k];
      }
    }
    for (; filled < count; ++filled) out[filled] = a_;  // never in practice
  }

  T a_ = T(0), b_ = T(1);  // minval/maxval or mean/stddev
};

template <Dist D>
void RegisterDist(KernelRegistry* r, const char* op) {
  MustRegister(r, KernelDef(op).TypeConstraint("dtype", DataType::kFloat32),
               MakeKernel<RandomOp<float, D>>);
  MustRegister(r, KernelDef(op).TypeConstraint("dtype", DataType::kFloat64),
               MakeKernel<RandomOp<double, D>>);
}

}  // namespace

void RegisterRandomKernels(KernelRegistry* r) {
  RegisterDist<Dist::kUniform>(r, "RandomUniform");
  RegisterDist<Dist::kNormal>(r, "RandomNormal");
  RegisterDist<Dist::kTruncatedNormal>(r, "TruncatedNormal");
}

}  // namespace flowstate::internal

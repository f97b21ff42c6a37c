// Dropout for float32 and float64: mask = 1/(1 - rate) where a uniform
// draw u in [0, 1) is >= rate and 0 elsewhere; output = x * mask.
//
// The draws are those of RandomUniform (random_kernels.cc) with the same seeds:
// Philox4x32-10 (philox.h) keyed by attr `seed`, attr `seed2` the upper
// half of the counter, 4 float32 or 2 float64 uniforms per block (23 or 52
// random mantissa bits). So mask == (RandomUniform(shape(x), seed, seed2)
// >= rate) / (1 - rate) element for element, and the same nonzero seeds give
// the same sequence of masks. Each Compute reserves its blocks with one
// atomic fetch_add on the kernel's counter (concurrent steps get disjoint
// draws), and elements are generated in groups tied to their block index,
// so the result does not depend on the thread count. seed = seed2 = 0 draws
// both from std::random_device when the kernel is built.
//
// rate = 0 keeps everything: mask is all ones and output shares x's buffer
// (the blocks are still reserved, so the sequence does not depend on it).
// A rate outside [0, 1) is INVALID_ARGUMENT when the kernel is built.
#include <algorithm>
#include <atomic>
#include <bit>
#include <random>

#include "devices/cpu/nn_grad_support_common.h"
#include "devices/cpu/philox.h"
#include "devices/cpu/philox_kernel.h"

namespace flowstate::internal {
namespace {

// The uniforms of RandomUniform: [0, 1) from the high mantissa bits.
inline float Uniform01(uint32_t x) { return std::bit_cast<float>(0x3f800000u | (x >> 9)) - 1.0f; }
inline double Uniform01(uint32_t hi, uint32_t lo) {
  const uint64_t x = (uint64_t(hi) << 32) | lo;
  return std::bit_cast<double>(0x3ff0000000000000ull | (x >> 12)) - 1.0;
}

template <typename T>
class DropoutOp final : public PhiloxKernel {
 public:
  static constexpr int64_t kPerBlock = sizeof(T) == 4 ? 4 : 2;

  explicit DropoutOp(OpKernelConstruction* c) : PhiloxKernel(c) {
    double rate = 0;
    int64_t seed = 0, seed2 = 0;
    if (!c->GetAttr("rate", &rate).ok() || !c->GetAttr("seed", &seed).ok() ||
        !c->GetAttr("seed2", &seed2).ok()) {
      return;
    }
    if (!(rate >= 0 && rate < 1)) {
      c->SetStatus(InvalidArgument("rate must be in [0, 1), got " + std::to_string(rate), name()));
      return;
    }
    if (seed == 0 && seed2 == 0) {
      std::random_device rd;
      seed = int64_t((uint64_t(rd()) << 32) | rd());
      seed2 = int64_t((uint64_t(rd()) << 32) | rd());
    }
    SetSeeds(seed, seed2);
    rate_ = T(rate);
    scale_ = T(1.0 / (1.0 - rate));
  }

  void Compute(OpKernelContext* ctx) override {
    const Tensor& in = ctx->input(0);
    const TensorShape shape = in.shape();
    const int64_t n = shape.num_elements();
    const int64_t groups = (n + kPerBlock - 1) / kPerBlock;
    const uint64_t base = ClaimBlocks(uint64_t(groups));
    Tensor* mask = nullptr;
    if (rate_ == T(0)) {
      FS_OP_REQUIRES_OK(ctx, ctx->allocate_output(1, shape, &mask));
      std::fill_n(mask->template data<T>(), n, T(1));
      ctx->forward_input(0, 0);
      return;
    }
    const T* x = in.template data<T>();  // before forwarding
    Tensor* out = nullptr;
    FS_OP_REQUIRES_OK(ctx, ctx->forward_input_or_allocate_output({0}, 0, shape, &out));
    FS_OP_REQUIRES_OK(ctx, ctx->allocate_output(1, shape, &mask));
    T* y = out->template data<T>();
    T* mk = mask->template data<T>();
    constexpr int kBatch = Philox4x32::kBatch;
    // Captured by value: stores to y and mask cannot alias them.
    const T rate = rate_, scale = scale_;
    const Philox4x32::Key key = key_;
    const uint64_t stream = stream_;
    ctx->device()->ParallelFor(groups, 8 * kPerBlock, [=](int64_t g0, int64_t g1) {
      uint32_t w[4][kBatch];
      T u[kBatch * kPerBlock];
      for (int64_t g = g0; g < g1; g += kBatch) {
        const int m = int(std::min<int64_t>(kBatch, g1 - g));
        Philox4x32::GenerateBatch(base + uint64_t(g), 1, stream, key, m, w);
        for (int i = 0; i < m; ++i) {
          if constexpr (sizeof(T) == 4) {
            for (int k = 0; k < 4; ++k) u[i * 4 + k] = Uniform01(w[k][i]);
          } else {
            u[i * 2] = Uniform01(w[0][i], w[1][i]);
            u[i * 2 + 1] = Uniform01(w[2][i], w[3][i]);
          }
        }
        const int64_t first = g * kPerBlock;
        const int64_t count = std::min<int64_t>(m * kPerBlock, n - first);
        for (int64_t k = 0; k < count; ++k) {
          const T f = T(u[k] >= rate) * scale;  // branch-free
          mk[first + k] = f;
          y[first + k] = x[first + k] * f;
        }
      }
    });
  }

 private:
  T rate_ = T(0);
  T scale_ = T(1);
};

}  // namespace

void RegisterNnDropoutKernels(KernelRegistry* r) {
  MustRegister(r, KernelDef("Dropout").TypeConstraint("T", DataType::kFloat32),
               MakeKernel<DropoutOp<float>>);
  MustRegister(r, KernelDef("Dropout").TypeConstraint("T", DataType::kFloat64),
               MakeKernel<DropoutOp<double>>);
}

}  // namespace flowstate::internal

// Internal to the activation, loss, dropout and gradient-support CPU
// kernels (nn_activation_kernels.cc, nn_loss_kernels.cc, nn_dropout_kernels.cc,
// grad_support_kernels.cc, grad_support_reduce_kernels.cc): the registration
// functions of each file, which RegisterNnKernels (nn_activation_kernels.cc)
// calls, and the small helpers they share.
//
// Header-only declarations and templates; no Eigen (the kernels include it
// in their .cc files). Everything here is stateless and thread-safe.
#ifndef FLOWSTATE_DEVICES_CPU_NN_GRAD_SUPPORT_COMMON_H_
#define FLOWSTATE_DEVICES_CPU_NN_GRAD_SUPPORT_COMMON_H_

#include <algorithm>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "devices/cpu/array_kernel_util.h"
#include "devices/cpu/cwise_kernels_common.h"
#include "devices/cpu/register_kernels.h"

namespace flowstate::internal {

void RegisterNnActivationKernels(KernelRegistry* r);  // nn_activation_kernels.cc
void RegisterNnLossKernels(KernelRegistry* r);        // nn_loss_kernels.cc
void RegisterNnDropoutKernels(KernelRegistry* r);     // nn_dropout_kernels.cc
void RegisterGradSupportKernels(KernelRegistry* r);   // grad_support_kernels.cc
void RegisterGradReduceKernels(KernelRegistry* r);    // grad_support_reduce_kernels.cc

namespace nn {

// Element-wise kernels work in blocks of kBlock elements: threads get whole
// blocks, and Eigen's vectorized loops (whose scalar head and tail may
// round differently from the vector body) always start at a block, so a
// result never depends on how many threads computed it.
inline constexpr int64_t kBlock = 1024;

// Runs fn(begin, end) over [0, n) in block-aligned ranges (begin is a
// multiple of kBlock), inline for small work, else on the intra-op pool.
template <typename Fn>
void ShardBlocks(OpKernelContext* ctx, int64_t n, int64_t cost_per_element, Fn&& fn) {
  const int64_t blocks = (n + kBlock - 1) / kBlock;
  cwise::Shard(ctx, blocks, cost_per_element * kBlock,
               [&fn, n](int64_t b, int64_t e) { fn(b * kBlock, std::min(n, e * kBlock)); });
}

// Eigen's exp is inexact where the result is below the smallest normal
// number (its float64 exp returns about 5.6e-309 for every argument below
// -709.8, even -inf): such results are set to 0, an absolute error below
// 1.2e-38 (float32) or 2.3e-308 (float64).
template <typename T>
void FlushTinyExp(T* e, int64_t n) {
  for (int64_t i = 0; i < n; ++i) e[i] = e[i] < std::numeric_limits<T>::min() ? T(0) : e[i];
}

// "[1, 2, 3]".
inline std::string VectorString(const std::vector<int64_t>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + "]";
}

// Reads reduction axes (a 0-D or 1-D int32/int64 tensor) for an input of
// `rank` into `reduce` (one flag per dimension). Empty = every axis;
// negative axes count from the end; duplicates are allowed; an axis outside
// [-rank, rank) is INVALID_ARGUMENT naming the kernel's node.
inline Status ReadReductionAxes(const OpKernel& k, const Tensor& axes, int rank,
                                std::vector<bool>* reduce) {
  if (axes.rank() > 1) {
    return KernelError(k,
                       "axis must be a scalar or a vector, got shape " + axes.shape().ToString());
  }
  if (axes.dtype() != DataType::kInt32 && axes.dtype() != DataType::kInt64) {
    return KernelError(
        k, "axis must be int32 or int64, got " + std::string(DataTypeName(axes.dtype())));
  }
  const int64_t n = axes.num_elements();
  reduce->assign(size_t(rank), n == 0);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t a = axes.dtype() == DataType::kInt32 ? int64_t(axes.data<int32_t>()[i])
                                                       : axes.data<int64_t>()[i];
    if (a < -rank || a >= rank) {
      return KernelError(k, "axis " + std::to_string(a) + " is out of range [" +
                                std::to_string(-rank) + ", " + std::to_string(rank) +
                                ") for an input of rank " + std::to_string(rank));
    }
    (*reduce)[size_t(a < 0 ? a + rank : a)] = true;
  }
  return Status();
}

}  // namespace nn
}  // namespace flowstate::internal

#endif  // FLOWSTATE_DEVICES_CPU_NN_GRAD_SUPPORT_COMMON_H_

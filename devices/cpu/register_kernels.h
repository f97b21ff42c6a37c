// Internal: the registration functions of the CPU kernels, one per file of
// devices/cpu/, called once by KernelRegistry::Global().
#ifndef FLOWSTATE_DEVICES_CPU_REGISTER_KERNELS_H_
#define FLOWSTATE_DEVICES_CPU_REGISTER_KERNELS_H_

#include "devices/kernel_registry.h"

namespace flowstate::internal {

void RegisterBasicKernels(KernelRegistry* r);      // basic_ops.cc
void RegisterCwiseKernels(KernelRegistry* r);      // cwise_ops.cc
void RegisterReductionKernels(KernelRegistry* r);  // reduction_ops.cc
void RegisterMatMulKernels(KernelRegistry* r);     // matmul_ops.cc
void RegisterArrayKernels(KernelRegistry* r);      // array_ops.cc
void RegisterRandomKernels(KernelRegistry* r);     // random_ops.cc
void RegisterConvKernels(KernelRegistry* r);       // conv_ops.cc, pool_ops.cc, batch_norm_ops.cc
void RegisterNnKernels(KernelRegistry* r);         // nn_activation_ops.cc (nn_*, grad_support*)

void RegisterCpuKernels(KernelRegistry* r);

// Aborts naming the kernel if registration failed (a bug).
void MustRegister(KernelRegistry* r, const KernelDef& def, KernelFactory factory);

}  // namespace flowstate::internal

#endif  // FLOWSTATE_DEVICES_CPU_REGISTER_KERNELS_H_

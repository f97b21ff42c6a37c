// Internal: the registration functions of the CPU kernels, one per file of
// devices/cpu/, called once by KernelRegistry::Global().
#ifndef FLOWSTATE_DEVICES_CPU_REGISTER_KERNELS_H_
#define FLOWSTATE_DEVICES_CPU_REGISTER_KERNELS_H_

#include "devices/kernel_registry.h"

namespace flowstate::internal {

void RegisterBasicKernels(KernelRegistry* r);      // basic_kernels.cc
void RegisterCwiseKernels(KernelRegistry* r);      // cwise_kernels.cc
void RegisterReductionKernels(KernelRegistry* r);  // reduction_kernels.cc
void RegisterMatMulKernels(KernelRegistry* r);     // matmul_kernels.cc
void RegisterArrayKernels(KernelRegistry* r);      // array_kernels.cc
void RegisterRandomKernels(KernelRegistry* r);     // random_kernels.cc
void RegisterConvKernels(KernelRegistry* r);       // conv_kernels.cc, pool_kernels.cc, batch_norm_kernels.cc
void RegisterNnKernels(KernelRegistry* r);         // nn_activation_kernels.cc (nn_*, grad_support*)

void RegisterCpuKernels(KernelRegistry* r);

// Aborts naming the kernel if registration failed (a bug).
void MustRegister(KernelRegistry* r, const KernelDef& def, KernelFactory factory);

}  // namespace flowstate::internal

#endif  // FLOWSTATE_DEVICES_CPU_REGISTER_KERNELS_H_

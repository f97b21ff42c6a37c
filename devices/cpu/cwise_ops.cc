// Placeholder until the kernels of this family land.
#include "devices/cpu/register_kernels.h"

namespace flowstate::internal {

void RegisterCwiseKernels(KernelRegistry* r) {}

}  // namespace flowstate::internal

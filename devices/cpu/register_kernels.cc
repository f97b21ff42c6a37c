#include "devices/cpu/register_kernels.h"

#include <cstdio>
#include <cstdlib>

namespace flowstate::internal {

void MustRegister(KernelRegistry* r, const KernelDef& def, KernelFactory factory) {
  Status s = r->Register(def, std::move(factory));
  if (!s.ok()) {
    std::fprintf(stderr, "flowstate: %s\n", s.ToString().c_str());
    std::abort();
  }
}

void RegisterCpuKernels(KernelRegistry* r) {
  RegisterBasicKernels(r);
  RegisterCwiseKernels(r);
  RegisterReductionKernels(r);
  RegisterMatMulKernels(r);
  RegisterArrayKernels(r);
  RegisterRandomKernels(r);
  RegisterConvKernels(r);
  RegisterNnKernels(r);
}

}  // namespace flowstate::internal

#include "graph/op_defs/register_defs.h"

#include <cstdio>
#include <cstdlib>

namespace flowstate::internal {

void MustRegister(OpRegistry* r, const OpDefBuilder& b) {
  Status s = r->Register(b);
  if (!s.ok()) {
    std::fprintf(stderr, "flowstate: bad op definition: %s\n", s.ToString().c_str());
    std::abort();
  }
}

void RegisterAllOps(OpRegistry* r) {
  RegisterArrayOps(r);
  RegisterMathOps(r);
  RegisterStateOps(r);
  RegisterRandomOps(r);
  RegisterRuntimeOps(r);
  RegisterNnOps(r);
  RegisterGradOps(r);
  RegisterControlFlowOps(r);
  RegisterQueueOps(r);
}

}  // namespace flowstate::internal

// Internal: the registration functions of graph/op_defs/, called once by
// OpRegistry::Global(). Each file registers one family of ops.
#ifndef FLOWSTATE_GRAPH_OP_DEFS_REGISTER_DEFS_H_
#define FLOWSTATE_GRAPH_OP_DEFS_REGISTER_DEFS_H_

#include "graph/op_def.h"

namespace flowstate::internal {

void RegisterArrayOps(OpRegistry* r);
void RegisterMathOps(OpRegistry* r);
void RegisterStateOps(OpRegistry* r);
void RegisterRandomOps(OpRegistry* r);
void RegisterRuntimeOps(OpRegistry* r);
void RegisterNnOps(OpRegistry* r);
void RegisterGradOps(OpRegistry* r);
void RegisterControlFlowOps(OpRegistry* r);
void RegisterQueueOps(OpRegistry* r);

// Registers every op above; aborts on a malformed definition (a bug).
void RegisterAllOps(OpRegistry* r);

// Aborts with the op's name if registration failed.
void MustRegister(OpRegistry* r, const OpDefBuilder& b);

}  // namespace flowstate::internal

#endif  // FLOWSTATE_GRAPH_OP_DEFS_REGISTER_DEFS_H_

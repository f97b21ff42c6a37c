// Gradients through conditionals (Switch, Merge, and the IdentityN naming a
// Cond's results), as graph rewrites that
// use the same ops: the backward pass of a Cond is itself a conditional,
// whose untaken branch is dead. Loops are differentiated as a whole
// (while_grad.cc), never op by op: Enter, Exit and NextIteration have no
// gradient function of their own.
#include "graph/gradients/grad_util.h"

namespace flowstate::internal {
namespace {

using G = std::vector<Gradient>;

// The gradient of `data` is that of the output the Switch forwarded to: a
// Merge of the two outputs' gradients takes the live one (an output without
// a gradient contributes zeros of its own shape, dead when untaken).
Status SwitchGrad(GradContext* c, G* in) {
  (*in)[0] = Gradient::Dense(ops::Generic(c->scope(), "Merge", {c->grad(0), c->grad(1)}, {}, 2)[0]);
  return Status();
}

// The gradient flows to the input the Merge forwarded (its value_index);
// toward the others it is dead, so their branch's backward nodes never run.
Status MergeGrad(GradContext* c, G* in) {
  const Scope& s = c->scope();
  Output g = c->grad(0);
  for (int k = 0; k < c->node().num_inputs(); ++k) {
    Output taken = ops::Equal(s, c->output(1), ops::Const(s, int32_t(k)));
    (*in)[k] = Gradient::Dense(ops::Generic(s, "Switch", {g, taken}, {}, 2)[1]);
  }
  return Status();
}

// IdentityN (the node naming a Cond's or a loop's results): each input gets
// its output's gradient.
Status IdentityNGrad(GradContext* c, G* in) {
  for (int k = 0; k < c->node().num_inputs(); ++k) {
    if (c->has_grad(k)) (*in)[k] = c->raw_grad(k);
  }
  return Status();
}

}  // namespace

void RegisterControlFlowGradients(GradientRegistry* r) {
  r->Register("Switch", SwitchGrad).CheckOk();
  r->Register("Merge", MergeGrad).CheckOk();
  r->Register("IdentityN", IdentityNGrad).CheckOk();
  r->RegisterNonDifferentiable("LoopCond");
  r->RegisterNonDifferentiable("StackPush");
  r->RegisterNonDifferentiable("StackPop");
}

}  // namespace flowstate::internal

// The control-flow ops of the paper (section 3.4): Switch and Merge for
// conditionals, Enter, Exit, NextIteration and LoopCond for loops, whose
// meaning lives in the executor (scheduler/executor.h: dead tensors, frames
// and iterations); and IdentityN, which gives a lowered While or If node one
// name for all its outputs. graph/control_flow.h builds them (Cond,
// WhileLoop) and checks how they fit together. StackPush and StackPop keep
// the forward values a loop's gradient needs, one per iteration, for the
// length of one step (graph/gradients/while_grad.cc adds them).
#include "graph/op_defs/register_defs.h"

namespace flowstate::internal {
namespace {

Status ScalarPredicate(InferenceContext* c, int input) {
  if (c->input(input).rank_known() && c->input(input).rank() != 0) {
    return c->Error("the predicate must be a scalar, got shape " + c->input(input).ToString());
  }
  return Status();
}

// The most specific shape every input is compatible with: a dim known and
// equal in all inputs stays, others become -1; different ranks: unknown.
Status MergeShape(InferenceContext* c) {
  PartialShape out = c->input(0);
  for (int i = 1; i < c->num_inputs() && out.rank_known(); ++i) {
    const PartialShape& in = c->input(i);
    if (!in.rank_known() || in.rank() != out.rank()) {
      out = PartialShape::Unknown();
      break;
    }
    std::vector<int64_t> dims = out.dims();
    for (int d = 0; d < out.rank(); ++d) {
      if (dims[d] != in.dim(d)) dims[d] = -1;
    }
    out = PartialShape(std::move(dims));
  }
  c->set_output(0, out);
  c->set_output(1, PartialShape(std::vector<int64_t>{}));
  return Status();
}

}  // namespace

void RegisterControlFlowOps(OpRegistry* r) {
  MustRegister(r, OpDefBuilder("Switch")
                      .Input("data: T")
                      .Input("pred: bool")
                      .Output("output_false: T")
                      .Output("output_true: T")
                      .Attr("T: type")
                      .SetShapeFn([](InferenceContext* c) {
                        FS_RETURN_IF_ERROR(ScalarPredicate(c, 1));
                        c->set_output(0, c->input(0));
                        c->set_output(1, c->input(0));
                        return Status();
                      })
                      .Doc("Forwards `data` to output_true when `pred` is true, else to "
                           "output_false; the other output is dead, and so is every node "
                           "downstream of it until a Merge."));
  MustRegister(r, OpDefBuilder("Merge")
                      .Input("inputs: N * T")
                      .Output("output: T")
                      .Output("value_index: int32")
                      .Attr("T: type")
                      .Attr("N: int >= 1")
                      .SetShapeFn(MergeShape)
                      .Doc("Forwards the first of its inputs to arrive alive, and its index; "
                           "dead only when every input is dead. Joins the branches of a "
                           "conditional, and a loop's entry with its NextIteration."));
  MustRegister(r, OpDefBuilder("Enter")
                      .Input("data: T")
                      .Output("output: T")
                      .Attr("T: type")
                      .Attr("frame_name: string")
                      .Attr("is_constant: bool = false")
                      .Attr("parallel_iterations: int >= 1 = 10")
                      .SetShapeFn(shape_fns::UnchangedShape)
                      .Doc("Makes `data` available in the child frame `frame_name` (a loop): "
                           "to its first iteration, or to every iteration when is_constant "
                           "(a loop invariant). At most parallel_iterations iterations of "
                           "the frame run at once."));
  MustRegister(r, OpDefBuilder("Exit")
                      .Input("data: T")
                      .Output("output: T")
                      .Attr("T: type")
                      .SetShapeFn(shape_fns::UnchangedShape)
                      .Doc("Makes `data` available in the parent frame: a loop's result."));
  MustRegister(r, OpDefBuilder("NextIteration")
                      .Input("data: T")
                      .Output("output: T")
                      .Attr("T: type")
                      .SetShapeFn(shape_fns::UnchangedShape)
                      .Doc("Makes `data` available to the next iteration of its loop (it "
                           "feeds the loop's Merge)."));
  MustRegister(r, OpDefBuilder("LoopCond")
                      .Input("input: bool")
                      .Output("output: bool")
                      .SetShapeFn([](InferenceContext* c) {
                        FS_RETURN_IF_ERROR(ScalarPredicate(c, 0));
                        c->set_output(0, c->input(0));
                        return Status();
                      })
                      .Doc("Forwards a loop's condition: whether it runs another iteration."));
  MustRegister(r, OpDefBuilder("IdentityN")
                      .Input("input: T")
                      .Output("output: T")
                      .Attr("T: list(type)")
                      .SetShapeFn([](InferenceContext* c) {
                        for (int i = 0; i < c->num_outputs(); ++i) c->set_output(i, c->input(i));
                        return Status();
                      })
                      .Doc("Forwards each input to the output of the same index."));
  MustRegister(r, OpDefBuilder("StackPush")
                      .Input("keys: N * int32")
                      .Input("value: T")
                      .Attr("N: int >= 1")
                      .Attr("T: type")
                      .Attr("stack_name: string")
                      .SetIsStateful()
                      .SetShapeFn([](InferenceContext*) { return Status(); })
                      .Doc("Keeps `value` for the rest of the step in the per-step stack "
                           "`stack_name`, under `keys` (int32 scalars: the iteration numbers "
                           "of the enclosing loops, outermost first). Pushing a key twice "
                           "replaces the value. A while loop's gradient pushes the forward "
                           "values its backward loop needs."));
  MustRegister(r, OpDefBuilder("StackPop")
                      .Input("keys: N * int32")
                      .Output("value: elem_type")
                      .Attr("N: int >= 1")
                      .Attr("elem_type: type")
                      .Attr("stack_name: string")
                      .Attr("shape: shape = ?")
                      .SetIsStateful()
                      .SetShapeFn([](InferenceContext* c) {
                        c->set_output(0, c->GetAttr("shape").shape());
                        return Status();
                      })
                      .Doc("Removes and returns the value StackPush kept under `keys` in stack "
                           "`stack_name` during this step (its memory is freed when the last "
                           "reader is done); NOT_FOUND when none was pushed. `shape` is the "
                           "static shape of the pushed values, when known."));
}

}  // namespace flowstate::internal

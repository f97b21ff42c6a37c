// Ops the runtime inserts into executable graphs: arguments and return
// values of a step, and the Send/Recv pairs that carry a tensor between
// devices. Their names start with '_' and they are not listed to clients.
#include "graph/ops/register_ops.h"

namespace flowstate::internal {

void RegisterRuntimeOps(OpRegistry* r) {
  MustRegister(r, OpDefBuilder("_Arg")
                      .Output("output: T")
                      .Attr("T: type")
                      .Attr("index: int >= 0")
                      .Attr("shape: shape = ?")
                      .SetShapeFn([](InferenceContext* c) {
                        c->set_output(0, c->GetAttr("shape").shape());
                        return Status();
                      })
                      .Doc("The index-th fed tensor of a step."));
  MustRegister(r, OpDefBuilder("_Retval")
                      .Input("input: T")
                      .Attr("T: type")
                      .Attr("index: int >= 0")
                      .SetShapeFn(shape_fns::NoOutputs)
                      .Doc("Makes its input the index-th fetched tensor of a step."));
  MustRegister(r, OpDefBuilder("_Send")
                      .Input("tensor: T")
                      .Attr("T: type")
                      .Attr("key: string")
                      .Attr("send_device: string")
                      .Attr("recv_device: string")
                      .SetShapeFn(shape_fns::NoOutputs)
                      .Doc("Hands a tensor to the step's rendezvous under `key`."));
  MustRegister(r, OpDefBuilder("_Recv")
                      .Output("tensor: T")
                      .Attr("T: type")
                      .Attr("key: string")
                      .Attr("send_device: string")
                      .Attr("recv_device: string")
                      .Attr("shape: shape = ?")
                      .SetShapeFn([](InferenceContext* c) {
                        c->set_output(0, c->GetAttr("shape").shape());
                        return Status();
                      })
                      .Doc("Waits for the tensor sent under `key` in this step."));
}

}  // namespace flowstate::internal

// Ops the runtime inserts into executable graphs: arguments and return
// values of a step, the Send/Recv pairs that carry a tensor between
// devices, and the copies between an accelerator's memory and the host.
// Their names start with '_' and they are not listed to clients.
#include "graph/op_defs/register_defs.h"

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
                      .Attr("host_memory: bool = false")
                      .SetShapeFn(shape_fns::NoOutputs)
                      .Doc("Hands a tensor to the step's rendezvous under `key`, in host "
                           "memory: on a device with its own memory the tensor is copied "
                           "to the host first unless `host_memory` says it is there."));
  MustRegister(r, OpDefBuilder("_Recv")
                      .Output("tensor: T")
                      .Attr("T: type")
                      .Attr("key: string")
                      .Attr("send_device: string")
                      .Attr("recv_device: string")
                      .Attr("host_memory: bool = false")
                      .Attr("shape: shape = ?")
                      .SetShapeFn([](InferenceContext* c) {
                        c->set_output(0, c->GetAttr("shape").shape());
                        return Status();
                      })
                      .Doc("Waits for the tensor sent under `key` in this step; on a device "
                           "with its own memory copies it there unless `host_memory` asks "
                           "for it in host memory."));
  MustRegister(r, OpDefBuilder("_CopyToDevice")
                      .Input("input: T")
                      .Output("output: T")
                      .Attr("T: type")
                      .SetShapeFn(shape_fns::UnchangedShape)
                      .Doc("Copies a host-memory tensor into its device's memory."));
  MustRegister(r, OpDefBuilder("_CopyToHost")
                      .Input("input: T")
                      .Output("output: T")
                      .Attr("T: type")
                      .SetShapeFn(shape_fns::UnchangedShape)
                      .Doc("Copies a tensor from its device's memory into host memory."));
  MustRegister(r, OpDefBuilder("_HostConst")
                      .Output("output: dtype")
                      .Attr("value: tensor")
                      .Attr("dtype: type")
                      .SetShapeFn([](InferenceContext* c) {
                        c->set_output(0, PartialShape(c->GetAttr("value").tensor().shape()));
                        return Status();
                      })
                      .Doc("A constant in host memory on any device (the partitioner's "
                           "trigger for a control edge out of a device with its own memory)."));
  MustRegister(r, OpDefBuilder("_AllReduce")
                      .Input("input: T")
                      .Input("count: double")
                      .Output("output: T")
                      .Attr("T: list(type)")
                      .Attr("group: string")
                      .Attr("bucket: int >= 0")
                      .Attr("num_buckets: int >= 1")
                      .SetIsStateful()
                      .SetShapeFn([](InferenceContext* c) {
                        for (int i = 0; i < c->num_outputs(); ++i) c->set_output(i, c->input(i));
                        return Status();
                      })
                      .Doc("One bucket of a data-parallel step's all-reduce (the training-graph "
                           "builder inserts it between the gradients and the optimizer): "
                           "output[j] = sum over replicas of count * input[j], divided by the "
                           "sum of the counts (the examples each replica trained on), through "
                           "the Collective of the replica's ResourceMgr named `group`. Buckets "
                           "0..num_buckets-1 of a step are reduced in that order."));
  MustRegister(r, OpDefBuilder("_AllGather")
                      .Input("indices: Tindices")
                      .Input("values: T")
                      .Input("count: double")
                      .Output("all_indices: int64")
                      .Output("all_values: T")
                      .Attr("T: {float32, float64}")
                      .Attr("Tindices: {int32, int64}")
                      .Attr("group: string")
                      .Attr("bucket: int >= 0")
                      .Attr("num_buckets: int >= 1")
                      .SetIsStateful()
                      .SetShapeFn([](InferenceContext* c) {
                        c->set_output(0, PartialShape({-1}));
                        const PartialShape& v = c->input(1);
                        if (!v.rank_known()) {
                          c->set_output(1, PartialShape::Unknown());
                          return Status();
                        }
                        if (v.rank() < 1) return c->Error("values must have rank 1 or more, got " + v.ToString());
                        std::vector<int64_t> dims = v.dims();
                        dims[0] = -1;
                        c->set_output(1, PartialShape(std::move(dims)));
                        return Status();
                      })
                      .Doc("One sparse gradient of a data-parallel step (the training-graph "
                           "builder inserts it for a gradient that travels as rows): every "
                           "replica's rows concatenated in replica order, all_indices the "
                           "indices (as int64) and all_values the values, each replica's "
                           "weighted by its count and divided by the sum of the counts; "
                           "summing the rows of equal indices gives what the _AllReduce of "
                           "the dense gradient would. Bucket `bucket` of the step's "
                           "num_buckets, in the order of the _AllReduce ones."));
  MustRegister(r, OpDefBuilder("_SharedGather")
                      .Input("indices: N * Tindices")
                      .Input("params: M * T")
                      .Output("output: N * T")
                      .Attr("T: type")
                      .Attr("Tindices: {int32, int64}")
                      .Attr("N: int >= 1")
                      .Attr("M: int >= 0")
                      .Attr("held: list(int)")
                      .Attr("row_shape: shape")
                      .Attr("group: string")
                      .Attr("bucket: int >= 0")
                      .Attr("num_buckets: int >= 1")
                      .SetIsStateful()
                      .SetShapeFn([](InferenceContext* c) {
                        const PartialShape& row = c->GetAttr("row_shape").shape();
                        const int n = int(c->GetAttr("N").i());
                        for (int p = 0; p < n; ++p) {
                          const PartialShape& ids = c->input(p);
                          std::vector<int64_t> dims{ids.rank_known() && ids.rank() == 1 ? ids.dim(0) : -1};
                          for (int64_t d : row.dims()) dims.push_back(d);
                          c->set_output(p, PartialShape(std::move(dims)));
                        }
                        return Status();
                      })
                      .Doc("One lookup of a table shared by data-parallel replicas (jobs' "
                           "\"partitioned_tables\": \"shared\"; it replaces the per-part "
                           "Gathers of the lookup's routing): indices[p] are this replica's "
                           "local rows of part p; every replica's are gathered, the replica "
                           "holding part p (params[k] is part held[k] of this one) answers "
                           "their rows, and output[p] holds the rows of this replica's "
                           "indices[p]. Bucket `bucket` of the step's num_buckets, before the "
                           "gradients' buckets."));
  MustRegister(r, OpDefBuilder("_CreateReplicaComm")
                      .Attr("group: string")
                      .Attr("kind: string")
                      .Attr("store_address: string")
                      .Attr("prefix: string")
                      .Attr("rank: int >= 0")
                      .Attr("size: int >= 1")
                      .Attr("num_buckets: int >= 1")
                      .Attr("timeout_ms: int >= 1")
                      .Attr("allreduce_timeout_ms: int >= 1")
                      .Attr("host: string")
                      .Attr("backup_contributors: int = 0")
                      .SetIsStateful()
                      .Doc("Makes this replica's participant of a collective across processes "
                           "(the registered factory `kind`, meeting the others under `prefix` "
                           "in the store at `store_address`) and puts it, as the ReplicaComm "
                           "named `group`, into the session's ResourceMgr, replacing one of "
                           "that name (a new membership). Blocks until every rank joined or "
                           "timeout_ms passed. backup_contributors > 0: the job has backup "
                           "replicas, and only the first that many replicas to finish a "
                           "step's backward pass contribute to it (the group's StepRace)."));
  MustRegister(r, OpDefBuilder("_ReplicaInput")
                      .Input("position: int64")
                      .Output("components: dtypes")
                      .Output("examples: double")
                      .Attr("dtypes: list(type)")
                      .Attr("names: list(string)")
                      .Attr("shapes: list(shape)")
                      .Attr("source: string")
                      .Attr("num_examples: int >= 0")
                      .Attr("batch_size: int >= 1")
                      .Attr("shuffle: bool")
                      .Attr("seed: int")
                      .Attr("epochs: int >= 0")
                      .Attr("drop_remainder: bool")
                      .Attr("replica: int >= 0")
                      .Attr("num_replicas: int >= 1")
                      .Attr("batches_per_step: int >= 1")
                      .SetIsStateful()
                      .SetShapeFn([](InferenceContext* c) {
                        const std::vector<PartialShape>& shapes = c->GetAttr("shapes").shapes();
                        if (int(shapes.size()) != c->num_outputs() - 1) {
                          return c->Error("shapes must list one shape per component");
                        }
                        for (size_t i = 0; i < shapes.size(); ++i) {
                          std::vector<int64_t> dims = {-1};
                          if (!shapes[i].rank_known()) {
                            c->set_output(int(i), PartialShape::Unknown());
                            continue;
                          }
                          dims.insert(dims.end(), shapes[i].dims().begin(), shapes[i].dims().end());
                          c->set_output(int(i), PartialShape(std::move(dims)));
                        }
                        c->set_output(c->num_outputs() - 1, PartialShape(std::vector<int64_t>{}));
                        return Status();
                      })
                      .Doc("A data-parallel replica's input, read on the task it runs on "
                           "(state/replica_input.h): the examples of replica `replica` of "
                           "`num_replicas` for the step whose first batch is at `position` "
                           "([epoch, offset]) of the job's seeded global order (`source` "
                           "under the task's data root, cut into batches of batch_size), as "
                           "one tensor per component (`names`) and the number of examples "
                           "(0 when the step has no batch for it: it then computes on the "
                           "step's first batch and contributes nothing)."));
  MustRegister(r, OpDefBuilder("_ReplicaCommStats")
                      .Output("stats: double")
                      .Attr("group: string")
                      .SetIsStateful()
                      .SetShapeFn([](InferenceContext* c) {
                        c->set_output(0, PartialShape({3}));
                        return Status();
                      })
                      .Doc("The totals of the session's ReplicaComm `group`: [seconds spent "
                           "in collective calls, bytes reduced, calls]."));
}

}  // namespace flowstate::internal

// Variables and the ops that read and mutate them. The kernels live in
// state/; these are only the definitions.
#include "graph/op_defs/register_defs.h"
#include "graph/partitioned_variables.h"

namespace flowstate::internal {
namespace {

constexpr const char* kNumeric = "T: {float32, float64, int32, int64, uint8}";

Status VariableShape(InferenceContext* c) {
  Status partitions = CheckPartitionAttrs(c->node().attrs);
  if (!partitions.ok()) return c->Error(partitions.message());
  c->set_output(0, c->GetAttr("shape").shape());
  return Status();
}

// The value must fit the variable (unless validate_shape is off).
Status AssignShape(InferenceContext* c) {
  const PartialShape& ref = c->input(0);
  const PartialShape& value = c->input(1);
  bool validate = c->op().FindAttr("validate_shape") ? c->BoolAttr("validate_shape") : true;
  if (validate && !ref.IsCompatibleWith(value)) {
    return c->Error("value of shape " + value.ToString() + " does not fit variable of shape " +
                    ref.ToString());
  }
  c->set_output(0, validate ? ref : value);
  return Status();
}

Status ScatterShape(InferenceContext* c) {
  const PartialShape& ref = c->input(0);
  const PartialShape& indices = c->input(1);
  const PartialShape& updates = c->input(2);
  if (ref.rank_known() && indices.rank_known() && updates.rank_known()) {
    std::vector<int64_t> want = indices.dims();
    want.insert(want.end(), ref.dims().begin() + (ref.rank() > 0 ? 1 : 0), ref.dims().end());
    if (!PartialShape(want).IsCompatibleWith(updates)) {
      return c->Error("updates must have shape indices.shape + ref.shape[1:] = " +
                      PartialShape(want).ToString() + ", got " + updates.ToString());
    }
  }
  c->set_output(0, ref);
  return Status();
}

void Scatter(OpRegistry* r, const char* name, const char* doc) {
  MustRegister(r, OpDefBuilder(name)
                      .Input("ref: Ref(T)")
                      .Input("indices: Tindices")
                      .Input("updates: T")
                      .Output("output_ref: Ref(T)")
                      .Attr(kNumeric)
                      .Attr("Tindices: {int32, int64}")
                      .Attr("use_locking: bool = true")
                      .SetShapeFn(ScatterShape)
                      .Doc(doc));
}

// SparseApply*: var (and its slots, all of var's shape) updated at the rows
// `indices` with the rows `grad` ([len(indices)] + var.shape[1:]).
Status SparseApplyShape(InferenceContext* c, int num_refs) {
  const int grad = c->num_inputs() - 2, indices = c->num_inputs() - 1;
  const PartialShape& var = c->input(0);
  for (int i = 1; i < num_refs; ++i) {
    if (!var.IsCompatibleWith(c->input(i))) {
      return c->Error("var " + var.ToString() + " and its slot " + c->input(i).ToString() +
                      " must have the same shape");
    }
  }
  for (int i = num_refs; i < grad; ++i) {
    if (c->input(i).rank_known() && c->input(i).num_elements() != 1) {
      return c->Error("the hyperparameters must be scalars, input " + std::to_string(i) +
                      " has shape " + c->input(i).ToString());
    }
  }
  const PartialShape& ind = c->input(indices);
  if (ind.rank_known() && ind.rank() != 1) {
    return c->Error("indices must be a vector, got " + ind.ToString());
  }
  if (var.rank_known() && ind.rank_known()) {
    if (var.rank() < 1) return c->Error("var must have rank >= 1, got a scalar");
    std::vector<int64_t> want = ind.dims();
    want.insert(want.end(), var.dims().begin() + 1, var.dims().end());
    if (!PartialShape(want).IsCompatibleWith(c->input(grad))) {
      return c->Error("grad must have shape [len(indices)] + var.shape[1:] = " +
                      PartialShape(want).ToString() + ", got " + c->input(grad).ToString());
    }
  }
  c->set_output(0, var);
  return Status();
}

// Registers a SparseApply op: `refs` (var first) and `scalars`, then grad
// and indices.
void SparseApply(OpRegistry* r, const char* name, std::vector<const char*> refs,
                 std::vector<const char*> scalars, const char* doc, bool nesterov = false) {
  OpDefBuilder b(name);
  for (const char* x : refs) b.Input(std::string(x) + ": Ref(T)");
  for (const char* x : scalars) b.Input(std::string(x) + ": T");
  b.Input("grad: T").Input("indices: Tindices").Output("output_ref: Ref(T)");
  b.Attr("T: {float32, float64}").Attr("Tindices: {int32, int64}");
  if (nesterov) b.Attr("use_nesterov: bool = false");
  const int n = int(refs.size());
  b.SetShapeFn([n](InferenceContext* c) { return SparseApplyShape(c, n); });
  b.Doc(std::string(doc) +
        " Only the rows in `indices` are read or written; duplicate indices are summed "
        "first (in their order), then each row is updated once. An index outside "
        "[0, rows) is INVALID_ARGUMENT naming the node and the first bad position, "
        "before anything is written.");
  MustRegister(r, b);
}

// One non-empty, distinct name per saved tensor.
Status SaveShape(InferenceContext* c) {
  const std::vector<std::string>& names = c->GetAttr("tensor_names").strings();
  if (int(names.size()) != c->num_inputs()) {
    return c->Error("tensor_names has " + std::to_string(names.size()) + " name(s) for " +
                    std::to_string(c->num_inputs()) + " data input(s)");
  }
  for (size_t i = 0; i < names.size(); ++i) {
    if (names[i].empty()) return c->Error("tensor_names[" + std::to_string(i) + "] is empty");
    for (size_t j = 0; j < i; ++j) {
      if (names[j] == names[i]) return c->Error("tensor name '" + names[i] + "' appears twice");
    }
  }
  if (c->GetAttr("prefix").s().empty()) return c->Error("attr 'prefix' must not be empty");
  return Status();
}

Status RestoreShape(InferenceContext* c) {
  if (c->GetAttr("prefix").s().empty()) return c->Error("attr 'prefix' must not be empty");
  if (c->GetAttr("tensor_name").s().empty()) return c->Error("attr 'tensor_name' must not be empty");
  c->set_output(0, PartialShape::Unknown());
  return Status();
}

}  // namespace

void RegisterStateOps(OpRegistry* r) {
  // The paper's user-level checkpointing. Flowstate has no string tensors, so
  // the file prefix and the names (inputs in TensorFlow) are attrs here.
  MustRegister(
      r, OpDefBuilder("Save")
             .Input("data: T")
             .Attr("T: list(type)")
             .Attr("prefix: string")
             .Attr("tensor_names: list(string)")
             .SetIsStateful()
             .SetShapeFn(SaveShape)
             .Doc("Writes the data inputs, named by tensor_names (one per input, in order), "
                  "under `prefix` in the session's tensor store, atomically and durably; it "
                  "replaces whatever was saved under that prefix. Run it as a target. The "
                  "server gives every API session its RocksDB store: a prefix is one "
                  "server-wide name (any session of the server may restore or overwrite it, "
                  "also after a restart). FAILED_PRECONDITION when the session has no tensor "
                  "store (a Session created without one)."));
  MustRegister(
      r, OpDefBuilder("Restore")
             .Output("tensor: dt")
             .Attr("dt: type")
             .Attr("prefix: string")
             .Attr("tensor_name: string")
             .SetIsStateful()
             .SetShapeFn(RestoreShape)
             .Doc("Reads the tensor saved by a Save op (of any session of the server) as "
                  "`tensor_name` under `prefix`. "
                  "NOT_FOUND when it was never saved, INVALID_ARGUMENT when it was saved "
                  "with another dtype than dt, DATA_LOSS when its record fails its "
                  "checksum. Feed it to an Assign to restore a variable."));
  MustRegister(
      r, OpDefBuilder("Variable")
             .Output("ref: Ref(dtype)")
             .Attr("shape: shape")
             .Attr("dtype: type")
             .Attr("container: string = \"\"")
             .Attr("shared_name: string = \"\"")
             .Attr("init: string = \"\"")
             .Attr("init_value: float = 0")
             .Attr("init_minval: float = -0.05")
             .Attr("init_maxval: float = 0.05")
             .Attr("init_mean: float = 0")
             .Attr("init_stddev: float = 0.05")
             .Attr("seed: int = 0")
             .Attr("partitions: int = 1")
             .Attr("partition_strategy: string = \"mod\"")
             .Attr("partition_devices: list(string) = []")
             .SetIsStateful()
             .SetShapeFn(VariableShape)
             .Doc("A tensor that persists across steps. Ops that take it as a Ref input "
                  "mutate it; other ops read its value when they run. Reading it before an "
                  "Assign is FAILED_PRECONDITION. Its resource is named by shared_name (the "
                  "node name when empty) within container. `init` names how training initializes it: zeros, ones, constant "
                  "(init_value), uniform (init_minval, init_maxval), normal and truncated_normal "
                  "(init_mean, init_stddev), glorot_uniform, glorot_normal, he_normal, "
                  "he_uniform; `seed` fixes its random numbers. `partitions` > 1 splits its rows over "
                  "that many variables <name>/part_<p> (graph/partitioned_variables.h) by "
                  "`partition_strategy` (mod: row r in part r % partitions; div: contiguous "
                  "ranges), part p on partition_devices[p % size] when it names devices."));
  MustRegister(r, OpDefBuilder("Assign")
                      .Input("ref: Ref(T)")
                      .Input("value: T")
                      .Output("output_ref: Ref(T)")
                      .Attr("T: type")
                      .Attr("validate_shape: bool = true")
                      .Attr("use_locking: bool = true")
                      .SetShapeFn(AssignShape)
                      .Doc("ref = value; initializes the variable if needed."));
  MustRegister(r, OpDefBuilder("AssignAdd")
                      .Input("ref: Ref(T)")
                      .Input("value: T")
                      .Output("output_ref: Ref(T)")
                      .Attr(kNumeric)
                      .Attr("use_locking: bool = true")
                      .SetShapeFn(AssignShape)
                      .Doc("ref += value."));
  MustRegister(r, OpDefBuilder("AssignSub")
                      .Input("ref: Ref(T)")
                      .Input("value: T")
                      .Output("output_ref: Ref(T)")
                      .Attr(kNumeric)
                      .Attr("use_locking: bool = true")
                      .SetShapeFn(AssignShape)
                      .Doc("ref -= value."));
  MustRegister(r, OpDefBuilder("ApplyAdam")
                      .Input("var: Ref(T)").Input("m: Ref(T)").Input("v: Ref(T)")
                      .Input("lr: T").Input("beta1: T").Input("beta2: T").Input("epsilon: T")
                      .Input("t: T").Input("grad: T")
                      .Output("output_ref: Ref(T)")
                      .Attr("T: {float32, float64}")
                      .SetShapeFn([](InferenceContext* c) {
                        for (int i : {1, 2, 8}) {
                          if (!c->input(0).IsCompatibleWith(c->input(i))) {
                            return c->Error("var, m, v and grad must have the same shape, got " +
                                            c->input(0).ToString() + " and " +
                                            c->input(i).ToString());
                          }
                        }
                        c->set_output(0, c->input(0));
                        return Status();
                      })
                      .Doc("One Adam step in place, in one pass (PyTorch's formulation): "
                           "m = beta1 m + (1 - beta1) grad; v = beta2 v + (1 - beta2) grad²; "
                           "var -= lr / (1 - beta1^t) · m / (sqrt(v / (1 - beta2^t)) + epsilon), "
                           "t counting steps from 1. The scalars are inputs."));
  SparseApply(r, "SparseApplyGradientDescent", {"var"}, {"alpha"},
              "var[i] -= alpha * grad_i for each row i of indices.");
  SparseApply(r, "SparseApplyMomentum", {"var", "accum"}, {"lr", "momentum"},
              "accum[i] = momentum * accum[i] + g; var[i] -= lr * (use_nesterov ? g + "
              "momentum * accum[i] : accum[i]). Lazy: rows not in indices keep their accum "
              "and do not move.",
              /*nesterov=*/true);
  SparseApply(r, "SparseApplyAdam", {"var", "m", "v"},
              {"lr", "beta1", "beta2", "epsilon", "t"},
              "ApplyAdam's step on the rows in indices only (lazy Adam, as TensorFlow's "
              "LazyAdam and PyTorch's SparseAdam): the other rows' moments do not decay; t "
              "is the optimizer's step count (the same for every row).");
  SparseApply(r, "SparseApplyAdagrad", {"var", "accum"}, {"lr", "epsilon"},
              "accum[i] += g²; var[i] -= lr * g / (sqrt(accum[i]) + epsilon): exactly the "
              "dense AdaGrad, whose other rows do not change either.");
  SparseApply(r, "SparseApplyRMSProp", {"var", "ms", "mom"},
              {"lr", "rho", "momentum", "epsilon"},
              "ms[i] = rho ms[i] + (1 - rho) g²; mom[i] = momentum mom[i] + lr g / "
              "sqrt(ms[i] + epsilon); var[i] -= mom[i]. Lazy: the other rows' slots do not "
              "decay.");
  SparseApply(r, "SparseApplyRMSPropNoMomentum", {"var", "ms"}, {"lr", "rho", "epsilon"},
              "SparseApplyRMSProp with momentum 0 and no momentum slot: ms[i] = rho ms[i] + "
              "(1 - rho) g²; var[i] -= lr g / sqrt(ms[i] + epsilon).");
  Scatter(r, "ScatterUpdate", "ref[indices[i], ...] = updates[i, ...] (rows of ref).");
  Scatter(r, "ScatterAdd", "ref[indices[i], ...] += updates[i, ...]; repeated indices add up.");
  Scatter(r, "ScatterSub", "ref[indices[i], ...] -= updates[i, ...]; repeated indices add up.");
  MustRegister(r, OpDefBuilder("IsVariableInitialized")
                      .Input("ref: Ref(dtype)")
                      .Output("is_initialized: bool")
                      .Attr("dtype: type")
                      .SetShapeFn(shape_fns::ScalarShape)
                      .Doc("Whether the variable has been assigned."));
}

}  // namespace flowstate::internal

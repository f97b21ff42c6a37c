#include "graph/training_graph.h"

#include <algorithm>

#include "graph/gradients.h"
#include "graph/graph.h"
#include "graph/initializers.h"
#include "graph/modes.h"
#include "graph/ops.h"

namespace flowstate {

StatusOr<TrainingGraph> BuildTrainingGraph(const TrainingGraphSpec& spec) {
  FS_ASSIGN_OR_RETURN(Graph forward, Graph::Create(spec.graph));
  const Node* loss = forward.FindNode(ParseTensorId(spec.loss).ok() ? ParseTensorId(spec.loss)->node : spec.loss);
  StatusOr<TensorId> loss_id = ParseTensorId(spec.loss);
  if (!loss_id.ok() || loss_id->is_control() || loss == nullptr) {
    return InvalidArgument("loss: '" + spec.loss + "' names no node of the graph");
  }
  if (loss_id->index >= loss->num_outputs()) {
    return InvalidArgument("loss: node '" + loss->name() + "' has no output " +
                           std::to_string(loss_id->index));
  }
  DataType lt = loss->output_type(loss_id->index);
  if (lt != DataType::kFloat32 && lt != DataType::kFloat64) {
    return InvalidArgument("loss: '" + spec.loss + "' is " + std::string(DataTypeName(lt)) +
                               "; it must be float32 or float64",
                           loss->name());
  }
  const PartialShape& ls = loss->output_shape(loss_id->index);
  if (ls.rank_known() && ls.num_elements() != 1) {
    return InvalidArgument("loss: '" + spec.loss + "' has shape " + ls.ToString() +
                               "; it must be a scalar (take a Mean)",
                           loss->name());
  }
  for (size_t i = 0; i < spec.metrics.size(); ++i) {
    const std::string& m = spec.metrics[i];
    StatusOr<TensorId> id = ParseTensorId(m);
    const Node* n = id.ok() ? forward.FindNode(id->node) : nullptr;
    std::string path = "eval.metrics[" + std::to_string(i) + "]";
    if (n == nullptr || id->is_control() || id->index >= n->num_outputs()) {
      return InvalidArgument(path + ": '" + m + "' names no tensor of the graph");
    }
    const PartialShape& s = n->output_shape(id->index);
    if (s.rank_known() && s.num_elements() != 1) {
      return InvalidArgument(path + ": '" + m + "' has shape " + s.ToString() +
                                 "; a metric must be a scalar",
                             n->name());
    }
    if (!IsFloating(n->output_type(id->index)) && !IsInteger(n->output_type(id->index))) {
      return InvalidArgument(path + ": '" + m + "' must be numeric", n->name());
    }
  }
  TrainingGraph tg;
  tg.loss = loss_id->ToString();
  Scope root(spec.graph);
  std::vector<Output> vars;
  std::vector<const Node*> var_nodes;
  for (int id : forward.topo_order()) {
    const Node& n = forward.node(id);
    if (n.op() == "Variable") {
      vars.emplace_back(n.name(), 0);
      var_nodes.push_back(&n);
    }
  }
  if (vars.empty()) return InvalidArgument("graph: the graph has no Variable to train");
  std::vector<Gradient> grads;
  FS_RETURN_IF_ERROR(AddGradients(root, Output(loss_id->node, loss_id->index), vars, &grads));
  // The NaN/Inf guard (on_nan): every gradient reaches the optimizer through
  // a CheckNumerics that also waits for the loss's, so a step whose loss or
  // gradients are not finite fails before the optimizer's barrier and no
  // update of it is applied.
  {
    Scope ns = root.NewSubScope("on_nan");
    auto check = [](const Scope& s, const Output& x, const std::string& what) {
      return Output(s.AddNode("CheckNumerics", "CheckNumerics", {x.name()},
                              {{"message", AttrValue(what)}}),
                    0);
    };
    Output checked_loss = check(ns.WithOpName("loss"), Output(loss_id->node, loss_id->index), "the loss");
    tg.numerics_checks.push_back(checked_loss.node);
    Scope gs = ns.WithControlDependencies({checked_loss.node});
    for (size_t i = 0; i < grads.size(); ++i) {
      if (grads[i].is_none()) continue;
      Output& g = grads[i].is_sparse ? grads[i].values : grads[i].dense;
      g = check(gs.WithOpName(vars[i].node), g, "the gradient of '" + vars[i].node + "'");
      tg.numerics_checks.push_back(g.node);
    }
  }
  std::vector<VariableGradient> vg;
  for (size_t i = 0; i < vars.size(); ++i) {
    VariableGradient v;
    v.variable = vars[i];
    v.dtype = var_nodes[i]->output_type(0);
    v.shape = var_nodes[i]->output_shape(0);
    v.gradient = grads[i];
    if (!grads[i].is_none()) tg.trainable.push_back(vars[i].node);
    vg.push_back(v);
  }
  if (tg.trainable.empty()) {
    return InvalidArgument("loss: no variable affects '" + spec.loss + "', so there is nothing to train");
  }
  FS_ASSIGN_OR_RETURN(TrainOp train, BuildOptimizer(root, "optimizer", spec.optimizer, vg));
  FS_ASSIGN_OR_RETURN(InitializerResult init, AddVariableInitializers(root, spec.seed));
  // Variables with gradients and without an initializer cannot start.
  for (const std::string& v : init.without_init) {
    bool is_slot = std::find(train.slot_variables.begin(), train.slot_variables.end(), v) !=
                       train.slot_variables.end() || v == train.global_step;
    if (!is_slot) {
      return InvalidArgument("graph: variable '" + v +
                                 "' declares no initializer (set attr \"init\", e.g. "
                                 "\"glorot_uniform\" or \"zeros\")",
                             v);
    }
  }
  tg.train_op = train.train;
  tg.init_op = init.init_op;
  tg.optimizer_init = train.init;
  tg.global_step = train.global_step;
  tg.variables = init.initialized;
  tg.model_variables = init.initialized;
  tg.variables.insert(tg.variables.end(), train.slot_variables.begin(), train.slot_variables.end());
  tg.variables.push_back(train.global_step);
  tg.graph = root.graph_def();
  // The whole graph must validate (it does unless a gradient is broken).
  FS_RETURN_IF_ERROR(Graph::Create(tg.graph).status());
  tg.eval_graph = InferenceGraph(spec.graph);
  return tg;
}

}  // namespace flowstate

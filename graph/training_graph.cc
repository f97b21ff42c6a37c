#include "graph/training_graph.h"

#include <algorithm>
#include <map>

#include "graph/gradients.h"
#include "graph/graph.h"
#include "graph/initializers.h"
#include "graph/modes.h"
#include "graph/op_builders.h"
#include "graph/partitioned_variables.h"

namespace flowstate {
namespace {

// Replaces the loss and every gradient by the outputs of _AllReduce nodes
// (training_graph.h); returns the reduced loss.
StatusOr<Output> AddAllReduce(const Scope& root, const TrainingGraphSpec& spec, const Output& loss,
                              DataType loss_type, const PartialShape& loss_shape,
                              const std::vector<const Node*>& var_nodes,
                              std::vector<Gradient>* grads, TrainingGraph* tg) {
  Scope rs = root.NewSubScope("replicas");
  Output count = ops::Placeholder(rs.WithOpName("examples"), DataType::kFloat64, PartialShape(TensorShape()));
  tg->replica_examples = count.name();
  struct Item {
    Output tensor;
    DataType dtype;
    TensorShape shape;
    int var = -1;  // -1: the loss
  };
  std::vector<Item> items;
  // Sparse gradients that travel as rows (one _AllGather each, after the
  // dense buckets): the variable's index.
  std::vector<int> gathered;
  // A replica without data joins with zeros of these shapes: the loss's
  // static shape (a scalar unless the graph says e.g. [1]).
  items.push_back({loss, loss_type,
                   loss_shape.IsFullyDefined() ? loss_shape.ToTensorShape() : TensorShape(), -1});
  // The backward pass reaches the variables in reverse topological order.
  for (int i = int(var_nodes.size()) - 1; i >= 0; --i) {
    Gradient& g = (*grads)[i];
    if (g.is_none()) continue;
    const PartialShape& ps = var_nodes[i]->output_shape(0);
    if (!ps.IsFullyDefined()) {
      return InvalidArgument("graph: variable '" + var_nodes[i]->name() + "' has shape " +
                                 ps.ToString() +
                                 "; data-parallel replicas need fully known variable shapes",
                             var_nodes[i]->name());
    }
    if (g.is_sparse && spec.sparse_allgather) {
      gathered.push_back(i);
      continue;
    }
    if (g.is_sparse) {
      Scope ds = rs.NewSubScope("densify").WithOpName(var_nodes[i]->name());
      Output rows = ops::StridedSlice(ds.NewSubScope("rows"), g.dense_shape, std::vector<int32_t>{0},
                                      std::vector<int32_t>{1}, std::vector<int32_t>{1},
                                      ops::StridedSliceAttrs{0, 0, 0, 0, 1});
      g = Gradient::Dense(ops::Generic(ds, "UnsortedSegmentSum", {g.values, g.indices, rows})[0]);
    }
    items.push_back({g.dense, var_nodes[i]->output_type(0), ps.ToTensorShape(), i});
  }
  // Buckets: the first at most 1 MiB, the others about bucket_bytes.
  std::vector<std::vector<int>> buckets(1);
  int64_t bytes = 0;
  for (size_t k = 0; k < items.size(); ++k) {
    int64_t b = items[k].shape.num_elements() * int64_t(DataTypeSize(items[k].dtype));
    int64_t cap = buckets.size() == 1 ? std::min<int64_t>(spec.bucket_bytes, 1 << 20) : spec.bucket_bytes;
    if (!buckets.back().empty() && bytes + b > cap) {
      buckets.emplace_back();
      bytes = 0;
    }
    buckets.back().push_back(int(k));
    bytes += b;
  }
  const int64_t num_buckets = int64_t(buckets.size() + gathered.size());
  Output reduced_loss;
  for (size_t bi = 0; bi < buckets.size(); ++bi) {
    AllReduceBucket ab;
    std::vector<std::string> inputs;
    for (int k : buckets[bi]) {
      inputs.push_back(items[k].tensor.name());
      ab.tensors.push_back(items[k].tensor.name());
      ab.dtypes.push_back(items[k].dtype);
      ab.shapes.push_back(items[k].shape);
      ab.bytes += items[k].shape.num_elements() * int64_t(DataTypeSize(items[k].dtype));
    }
    inputs.push_back(count.name());
    ab.node = rs.WithOpName("allreduce_" + std::to_string(bi))
                  .AddNode("_AllReduce", "_AllReduce", inputs,
                           {{"T", AttrValue(ab.dtypes)},
                            {"group", AttrValue(spec.allreduce_group)},
                            {"bucket", AttrValue(int64_t(bi))},
                            {"num_buckets", AttrValue(num_buckets)}});
    for (size_t j = 0; j < buckets[bi].size(); ++j) {
      const Item& it = items[buckets[bi][j]];
      Output out(ab.node, int(j));
      if (it.var < 0) {
        reduced_loss = out;
      } else {
        (*grads)[it.var] = Gradient::Dense(out);
      }
    }
    tg->allreduce.push_back(std::move(ab));
  }
  for (size_t k = 0; k < gathered.size(); ++k) {
    const int i = gathered[k];
    Gradient& g = (*grads)[i];
    const DataType dtype = var_nodes[i]->output_type(0);
    // The rows' shape: the variable's without its first dimension.
    TensorShape none = var_nodes[i]->output_shape(0).ToTensorShape();
    none.set_dim(0, 0);
    AllReduceBucket ab;
    ab.gather = true;
    ab.tensors = {g.indices.name(), g.values.name()};
    ab.dtypes = {DataType::kInt64, dtype};
    ab.shapes = {TensorShape({0}), none};
    const std::string bucket = std::to_string(buckets.size() + k);
    ab.node = rs.WithOpName("allgather_" + bucket)
                  .AddNode("_AllGather", "_AllGather", {g.indices.name(), g.values.name(), count.name()},
                           {{"group", AttrValue(spec.allreduce_group)},
                            {"bucket", AttrValue(int64_t(buckets.size() + k))},
                            {"num_buckets", AttrValue(num_buckets)}});
    g.indices = Output(ab.node, 0);
    g.values = Output(ab.node, 1);
    tg->allreduce.push_back(std::move(ab));
  }
  return reduced_loss;
}

// Marks the slots of the parts of a partitioned variable as the parts of
// a logical slot, named as the unpartitioned variable's slot would be
// ("optimizer/<table>/adam_m"), so that checkpoints hold slots as tables too.
void PartitionSlots(const std::vector<PartitionedVariable>& tables,
                    const std::vector<TrainOp::Slot>& slots, GraphDef* graph) {
  std::map<std::string, std::pair<const PartitionedVariable*, int64_t>> part_of;
  for (const PartitionedVariable& t : tables) {
    for (size_t p = 0; p < t.parts.size(); ++p) part_of[t.parts[p]] = {&t, int64_t(p)};
  }
  std::map<std::string, AttrMap> marks;
  for (const TrainOp::Slot& slot : slots) {
    auto it = part_of.find(slot.variable);
    if (it == part_of.end()) continue;
    const PartitionedVariable& t = *it->second.first;
    const std::string tail = slot.variable + "/" + slot.slot;
    size_t pos = slot.node.rfind(tail);
    if (pos == std::string::npos) continue;
    std::string logical = slot.node.substr(0, pos) + t.name + "/" + slot.slot;
    std::vector<int64_t> shape = t.shape.dim_vector();
    marks[slot.node] = {{kPartitionOfAttr, AttrValue(logical)},
                        {kPartitionIndexAttr, AttrValue(it->second.second)},
                        {kPartitionsAttr, AttrValue(t.layout.partitions)},
                        {kPartitionStrategyAttr,
                         AttrValue(std::string(PartitionStrategyName(t.layout.strategy)))},
                        {kLogicalShapeAttr, AttrValue(shape)}};
  }
  for (NodeDef& n : graph->nodes) {
    auto it = marks.find(n.name);
    if (it == marks.end()) continue;
    for (auto& [k, v] : it->second) n.attrs[k] = v;
  }
}

}  // namespace

StatusOr<TrainingGraph> BuildTrainingGraph(const TrainingGraphSpec& spec_in) {
  // Partitioned variables become their parts and routing first, so that
  // every part gets its own sparse gradient, update and slots.
  TrainingGraphSpec spec = spec_in;
  FS_ASSIGN_OR_RETURN(spec.graph, ExpandPartitionedVariables(spec_in.graph));
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
  Output loss_out(loss_id->node, loss_id->index);
  if (spec.replicas > 1) {
    FS_ASSIGN_OR_RETURN(loss_out, AddAllReduce(root, spec, loss_out, lt, ls, var_nodes, &grads, &tg));
  }
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
    // With replicas every bucket's all-reduce finishes before any check can
    // fail, so that no replica abandons a step with buckets not handed in
    // (the next step's rounds would not line up), and every replica sees the
    // same reduced values and takes the same decision.
    // (Through an Identity of each bucket's first output, so that a replica
    // that feeds the reduced tensors -- one without data -- needs no bucket.)
    std::vector<std::string> reduced;
    for (const AllReduceBucket& b : tg.allreduce) {
      reduced.push_back(ops::Identity(ns.WithOpName(b.node + "_done"), Output(b.node, 0)).node);
    }
    Output checked_loss =
        check(ns.WithOpName("loss").WithControlDependencies(reduced), loss_out, "the loss");
    tg.numerics_checks.push_back(checked_loss.node);
    Scope gs = ns.WithControlDependencies({checked_loss.node});
    for (size_t i = 0; i < grads.size(); ++i) {
      if (grads[i].is_none()) continue;
      Output& g = grads[i].is_sparse ? grads[i].values : grads[i].dense;
      g = check(gs.WithOpName(vars[i].node), g, "the gradient of '" + vars[i].node + "'");
      tg.numerics_checks.push_back(g.node);
      if (grads[i].is_sparse && spec.replicas > 1) {
        // Gathered indices reach the optimizer through a node of their own
        // too: what depends on them (its control edges included) then
        // waits for an output, which a replica without data feeds, not for
        // the _AllGather itself.
        grads[i].indices = ops::Identity(gs.WithOpName(vars[i].node + "/indices"), grads[i].indices);
      }
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
  if (spec.replicas > 1) tg.loss = loss_out.name();
  tg.train_op = train.train;
  tg.init_op = init.init_op;
  tg.optimizer_init = train.init;
  tg.global_step = train.global_step;
  tg.variables = init.initialized;
  tg.model_variables = init.initialized;
  tg.variables.insert(tg.variables.end(), train.slot_variables.begin(), train.slot_variables.end());
  tg.variables.push_back(train.global_step);
  tg.graph = root.graph_def();
  PartitionSlots(FindPartitionedVariables(tg.graph), train.slots, &tg.graph);
  tg.partitioned = FindPartitionedVariables(tg.graph);
  // The whole graph must validate (it does unless a gradient is broken).
  FS_RETURN_IF_ERROR(Graph::Create(tg.graph).status());
  tg.eval_graph = InferenceGraph(spec.graph);
  return tg;
}

}  // namespace flowstate

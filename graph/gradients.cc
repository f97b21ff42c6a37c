#include "graph/gradients.h"

#include <deque>

#include "graph/mutex.h"
#include "graph/op_builders.h"

namespace flowstate {

GradContext::GradContext(const Scope& scope, const Graph& graph, const Node& node,
                         std::vector<Gradient> output_grads)
    : scope_(scope), graph_(graph), node_(node), output_grads_(std::move(output_grads)) {}

Output GradContext::input(int i) const {
  const Endpoint& e = node_.input(i);
  return Output(graph_.node(e.node).name(), e.output);
}

Output GradContext::output(int i) const { return Output(node_.name(), i); }

Output GradContext::grad(int i) {
  Gradient& g = output_grads_[i];
  if (g.is_sparse) {
    // Densify: rows summed into a zero tensor of the dense shape.
    Output rows = ops::StridedSlice(scope_, g.dense_shape, std::vector<int32_t>{0},
                                    std::vector<int32_t>{1}, std::vector<int32_t>{1},
                                    ops::StridedSliceAttrs{0, 0, 0, 0, 1});
    g = Gradient::Dense(ops::Generic(scope_, "UnsortedSegmentSum", {g.values, g.indices, rows})[0]);
  } else if (g.is_none()) {
    g = Gradient::Dense(ops::ZerosLike(scope_, output(i)));
  }
  return g.dense;
}

GradientRegistry* GradientRegistry::Global() {
  static GradientRegistry* r = [] {
    auto* reg = new GradientRegistry();
    internal::RegisterMathGradients(reg);
    internal::RegisterArrayGradients(reg);
    internal::RegisterNnGradients(reg);
    internal::RegisterControlFlowGradients(reg);
    return reg;
  }();
  return r;
}

Status GradientRegistry::Register(const std::string& op, GradFunc fn) {
  MutexLock l(mu_);
  if (funcs_.count(op) || non_differentiable_.count(op)) {
    return AlreadyExists("op " + op + " already has a gradient");
  }
  funcs_[op] = std::move(fn);
  return Status();
}

void GradientRegistry::RegisterNonDifferentiable(const std::string& op) {
  MutexLock l(mu_);
  non_differentiable_[op] = true;
}

void GradientRegistry::Override(const std::string& op, GradFunc fn) {
  MutexLock l(mu_);
  non_differentiable_.erase(op);
  funcs_[op] = std::move(fn);
}

const GradFunc* GradientRegistry::Find(const std::string& op) const {
  MutexLock l(mu_);
  auto it = funcs_.find(op);
  return it == funcs_.end() ? nullptr : &it->second;
}

bool GradientRegistry::IsNonDifferentiable(const std::string& op) const {
  MutexLock l(mu_);
  return non_differentiable_.count(op) > 0;
}

std::vector<std::string> GradientRegistry::Ops() const {
  MutexLock l(mu_);
  std::vector<std::string> out;
  for (const auto& [op, f] : funcs_) out.push_back(op);
  return out;
}

namespace {

// Sums the gradients reaching one tensor. Sparse ones stay sparse when all
// are; a mix is densified.
Gradient Aggregate(const Scope& s, std::vector<Gradient>& parts) {
  std::vector<Gradient*> live;
  for (Gradient& g : parts) {
    if (!g.is_none()) live.push_back(&g);
  }
  if (live.empty()) return Gradient::None();
  if (live.size() == 1) return *live[0];
  bool all_sparse = true;
  for (Gradient* g : live) all_sparse &= g->is_sparse;
  if (all_sparse) {
    std::vector<Output> idx, vals;
    for (Gradient* g : live) {
      idx.push_back(g->indices);
      vals.push_back(g->values);
    }
    Gradient out;
    out.is_sparse = true;
    out.indices = ops::Concat(s, idx, 0);
    out.values = ops::Concat(s, vals, 0);
    out.dense_shape = live[0]->dense_shape;
    return out;
  }
  std::vector<Output> dense;
  for (Gradient* g : live) {
    if (g->is_sparse) {
      Output rows = ops::StridedSlice(s, g->dense_shape, std::vector<int32_t>{0},
                                      std::vector<int32_t>{1}, std::vector<int32_t>{1},
                                      ops::StridedSliceAttrs{0, 0, 0, 0, 1});
      dense.push_back(ops::Generic(s, "UnsortedSegmentSum", {g->values, g->indices, rows})[0]);
    } else {
      dense.push_back(g->dense);
    }
  }
  return Gradient::Dense(ops::AddN(s, dense));
}

bool Differentiable(DataType t) { return t == DataType::kFloat32 || t == DataType::kFloat64 ||
                                         t == DataType::kFloat16 || t == DataType::kBFloat16; }

}  // namespace

Status AddGradients(const Scope& scope, const Output& loss, const std::vector<Output>& xs,
                    std::vector<Gradient>* grads, const GradientOptions& options) {
  FS_ASSIGN_OR_RETURN(Graph g, Graph::Create(scope.graph_def()));
  const Node* loss_node = g.FindNode(loss.node);
  if (loss_node == nullptr) return NotFound("loss '" + loss.name() + "' is not in the graph", loss.node);
  if (loss.index >= loss_node->num_outputs()) {
    return InvalidArgument("loss '" + loss.name() + "' names a missing output", loss.node);
  }
  if (!Differentiable(loss_node->output_type(loss.index))) {
    return InvalidArgument("loss '" + loss.name() + "' has dtype " +
                               std::string(DataTypeName(loss_node->output_type(loss.index))) +
                               "; it must be floating point",
                           loss.node);
  }
  const int n = g.num_nodes();
  std::vector<int> x_nodes;
  for (const Output& x : xs) {
    const Node* xn = g.FindNode(x.node);
    if (xn == nullptr) return NotFound("'" + x.name() + "' is not in the graph", x.node);
    if (x.index >= xn->num_outputs()) {
      return InvalidArgument("'" + x.name() + "' names a missing output", x.node);
    }
    x_nodes.push_back(xn->id());
  }

  // Nodes downstream of some x (through differentiable, non-reference edges).
  std::vector<bool> from_x(n, false);
  std::deque<int> q;
  for (int id : x_nodes) {
    if (!from_x[id]) {
      from_x[id] = true;
      q.push_back(id);
    }
  }
  while (!q.empty()) {
    int u = q.front();
    q.pop_front();
    for (const OutEdge& e : g.node(u).out_edges()) {
      if (e.is_control() || from_x[e.dst]) continue;
      const Node& dst = g.node(e.dst);
      if (dst.input_is_ref(e.dst_input) || !Differentiable(g.node(u).output_type(e.src_output))) {
        continue;
      }
      from_x[e.dst] = true;
      q.push_back(e.dst);
    }
  }
  // Nodes upstream of the loss.
  std::vector<bool> to_loss(n, false);
  to_loss[loss_node->id()] = true;
  q.push_back(loss_node->id());
  while (!q.empty()) {
    int u = q.front();
    q.pop_front();
    const Node& node = g.node(u);
    for (int k = 0; k < node.num_inputs(); ++k) {
      int src = node.input(k).node;
      if (node.input_is_ref(k) || to_loss[src]) continue;
      to_loss[src] = true;
      q.push_back(src);
    }
  }

  Scope gs = scope.NewSubScope(options.prefix);
  std::vector<std::vector<std::vector<Gradient>>> incoming(n);
  for (int i = 0; i < n; ++i) incoming[i].resize(g.node(i).num_outputs());
  incoming[loss_node->id()][loss.index].push_back(
      Gradient::Dense(ops::OnesLike(gs.WithOpName("initial"), loss)));
  std::map<std::pair<int, int>, Gradient> final_grads;
  GradientRegistry* registry = GradientRegistry::Global();

  auto topo = g.topo_order();
  for (auto it = topo.rbegin(); it != topo.rend(); ++it) {
    const int id = *it;
    if (!from_x[id] || !to_loss[id]) continue;
    const Node& node = g.node(id);
    Scope ns = gs.NewSubScope(node.name());
    std::vector<Gradient> out_grads(node.num_outputs());
    bool any = false;
    for (int o = 0; o < node.num_outputs(); ++o) {
      out_grads[o] = Aggregate(ns, incoming[id][o]);
      final_grads[{id, o}] = out_grads[o];
      any |= !out_grads[o].is_none();
    }
    if (!any || node.op() == "StopGradient" || node.num_inputs() == 0) continue;
    bool needs_input_grads = false;
    for (int k = 0; k < node.num_inputs(); ++k) {
      const Endpoint& e = node.input(k);
      needs_input_grads |= from_x[e.node] && !node.input_is_ref(k) &&
                           Differentiable(g.node(e.node).output_type(e.output));
    }
    if (!needs_input_grads) continue;
    const GradFunc* fn = nullptr;
    auto ov = options.overrides.find(node.op());
    if (ov != options.overrides.end()) {
      fn = &ov->second;
    } else if (registry->IsNonDifferentiable(node.op())) {
      continue;
    } else {
      fn = registry->Find(node.op());
    }
    if (fn == nullptr) {
      return Unimplemented("node '" + node.name() + "' (" + node.op() +
                               "): no gradient is registered for op " + node.op() +
                               ", which lies between the loss '" + loss.name() +
                               "' and the variables",
                           node.name());
    }
    GradContext ctx(ns, g, node, std::move(out_grads));
    std::vector<Gradient> in_grads(node.num_inputs());
    Status s = (*fn)(&ctx, &in_grads);
    if (!s.ok()) {
      return Status(s.code(), "gradient of node '" + node.name() + "' (" + node.op() + "): " +
                                  s.message(),
                    node.name());
    }
    if (int(in_grads.size()) != node.num_inputs()) {
      return Internal("the gradient of " + node.op() + " returned " +
                      std::to_string(in_grads.size()) + " gradients for " +
                      std::to_string(node.num_inputs()) + " inputs");
    }
    for (int k = 0; k < node.num_inputs(); ++k) {
      const Endpoint& e = node.input(k);
      if (in_grads[k].is_none() || node.input_is_ref(k) || !from_x[e.node] ||
          !Differentiable(g.node(e.node).output_type(e.output))) {
        continue;
      }
      incoming[e.node][e.output].push_back(std::move(in_grads[k]));
    }
  }

  grads->clear();
  for (size_t i = 0; i < xs.size(); ++i) {
    auto f = final_grads.find({x_nodes[i], xs[i].index});
    grads->push_back(f == final_grads.end() ? Gradient::None() : f->second);
  }
  return Status();
}

}  // namespace flowstate

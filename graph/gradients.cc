#include "graph/gradients.h"

#include <deque>
#include <set>

#include "graph/gradients/backprop.h"
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

namespace internal {

Output Densify(const Scope& s, const Gradient& g) {
  if (!g.is_sparse) return g.dense;
  Output rows = ops::StridedSlice(s, g.dense_shape, std::vector<int32_t>{0},
                                  std::vector<int32_t>{1}, std::vector<int32_t>{1},
                                  ops::StridedSliceAttrs{0, 0, 0, 0, 1});
  return ops::Generic(s, "UnsortedSegmentSum", {g.values, g.indices, rows})[0];
}

int GradState::OutputFrame(const std::string& node) const {
  auto a = added.find(node);
  if (a != added.end()) return a->second.frame;
  const Node* n = g.FindNode(node);
  if (n == nullptr || cf == nullptr) return 0;
  auto e = enter_child.find(n->id());
  if (e != enter_child.end()) return e->second;
  const int f = cf->frame_of[n->id()];
  if (n->op() == "Exit" && f > 0) return cf->frames[f].parent;
  return f;
}

NodeDef* GradState::FindPending(const std::string& name) {
  for (NodeDef& n : pending) {
    if (n.name == name) return &n;
  }
  return nullptr;
}

namespace {

// Sums the gradients reaching one tensor. Sparse ones stay sparse when all
// are (their indices as int64, so that lookups with int32 and int64 ids
// concatenate); a mix is densified.
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
      idx.push_back(ops::Cast(s, g->indices, DataType::kInt64));
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
  for (Gradient* g : live) dense.push_back(Densify(s, *g));
  return Gradient::Dense(ops::AddN(s, dense));
}

bool Differentiable(DataType t) { return t == DataType::kFloat32 || t == DataType::kFloat64 ||
                                         t == DataType::kFloat16 || t == DataType::kBFloat16; }

// The units of one level: a node of the level's frame, or a loop nested in
// it (id num_nodes + frame index).
class Units {
 public:
  Units(const GradState& st, const Level& level) : st_(st), n_(st.g.num_nodes()) {
    unit_.assign(n_, -1);
    const ControlFlowInfo* cf = st.cf;
    for (int u = 0; u < n_; ++u) {
      if (level.plumbing.count(u)) continue;
      if (cf == nullptr) {
        unit_[u] = u;
        continue;
      }
      int f = cf->frame_of[u];
      auto e = st.enter_child.find(u);
      if (e != st.enter_child.end() && f == level.frame) {
        unit_[u] = n_ + e->second;  // the Enter of a nested loop
        continue;
      }
      if (f == level.frame) {
        unit_[u] = u;
        continue;
      }
      // A node of a nested loop: its unit is the loop directly inside the level.
      while (f > 0 && cf->frames[f].parent != level.frame) f = cf->frames[f].parent;
      if (f > 0) unit_[u] = n_ + f;
    }
    for (int u = 0; u < n_; ++u) {
      if (unit_[u] >= 0) members_[unit_[u]].push_back(u);
    }
  }
  int of(int node) const { return unit_[node]; }
  bool is_loop(int unit) const { return unit >= n_; }
  int frame(int unit) const { return unit - n_; }
  const std::map<int, std::vector<int>>& members() const { return members_; }

  // Units in topological order (data edges between units).
  std::vector<int> TopoOrder() const {
    std::map<int, int> indegree;
    std::map<int, std::vector<int>> succ;
    for (const auto& [unit, nodes] : members_) {
      indegree.emplace(unit, 0);
      std::set<int> seen;
      for (int u : nodes) {
        for (const OutEdge& e : st_.g.node(u).out_edges()) {
          if (e.is_control()) continue;
          const int d = unit_[e.dst];
          if (d < 0 || d == unit || !seen.insert(d).second) continue;
          succ[unit].push_back(d);
        }
      }
    }
    for (const auto& [unit, next] : succ) {
      for (int d : next) ++indegree[d];
    }
    std::vector<int> order, ready;
    for (const auto& [unit, deg] : indegree) {
      if (deg == 0) ready.push_back(unit);
    }
    while (!ready.empty()) {
      const int u = ready.back();
      ready.pop_back();
      order.push_back(u);
      auto it = succ.find(u);
      if (it == succ.end()) continue;
      for (int d : it->second) {
        if (--indegree[d] == 0) ready.push_back(d);
      }
    }
    return order;
  }

 private:
  const GradState& st_;
  const int n_;
  std::vector<int> unit_;
  std::map<int, std::vector<int>> members_;
};

}  // namespace

Status Backprop(GradState* st, const Scope& gs, const Level& level,
                std::vector<std::pair<Endpoint, Gradient>> seeds, const std::vector<Endpoint>& xs,
                std::vector<Gradient>* grads) {
  const Graph& g = st->g;
  Units units(*st, level);
  const auto& members = units.members();
  auto edge_ok = [&](int src, int src_output, int dst, int dst_input) {
    return !g.node(dst).input_is_ref(dst_input) &&
           Differentiable(g.node(src).output_type(src_output));
  };

  // Units downstream of some x (through differentiable, non-reference edges).
  std::set<int> from_x;
  std::set<std::pair<int, int>> x_set;
  std::deque<int> q;
  auto reach = [&](int unit) {
    if (from_x.insert(unit).second) q.push_back(unit);
  };
  for (const Endpoint& x : xs) {
    x_set.insert({x.node, x.output});
    if (units.of(x.node) >= 0) {
      reach(units.of(x.node));
      continue;
    }
    for (const OutEdge& e : g.node(x.node).out_edges()) {
      if (e.is_control() || e.src_output != x.output || units.of(e.dst) < 0) continue;
      if (edge_ok(x.node, e.src_output, e.dst, e.dst_input)) reach(units.of(e.dst));
    }
  }
  while (!q.empty()) {
    const int unit = q.front();
    q.pop_front();
    for (int u : members.at(unit)) {
      for (const OutEdge& e : g.node(u).out_edges()) {
        if (e.is_control()) continue;
        const int d = units.of(e.dst);
        if (d < 0 || d == unit || from_x.count(d)) continue;
        if (edge_ok(u, e.src_output, e.dst, e.dst_input)) reach(d);
      }
    }
  }
  // Units upstream of a seed.
  std::set<int> to_loss;
  for (const auto& [y, grad] : seeds) {
    const int unit = units.of(y.node);
    if (unit >= 0 && to_loss.insert(unit).second) q.push_back(unit);
  }
  while (!q.empty()) {
    const int unit = q.front();
    q.pop_front();
    for (int u : members.at(unit)) {
      const Node& node = g.node(u);
      for (int k = 0; k < node.num_inputs(); ++k) {
        const int src = units.of(node.input(k).node);
        if (node.input_is_ref(k) || src < 0 || src == unit || to_loss.count(src)) continue;
        to_loss.insert(src);
        q.push_back(src);
      }
    }
  }
  // Whether the tensor e is downstream of an x.
  auto from_x_tensor = [&](const Endpoint& e) {
    if (x_set.count({e.node, e.output})) return true;
    const int unit = units.of(e.node);
    return unit >= 0 && from_x.count(unit) > 0;
  };

  std::map<std::pair<int, int>, std::vector<Gradient>> incoming;
  for (auto& [y, grad] : seeds) incoming[{y.node, y.output}].push_back(std::move(grad));
  std::map<std::pair<int, int>, Gradient> final_grads;
  GradientRegistry* registry = GradientRegistry::Global();
  auto add_incoming = [&](const Endpoint& e, Gradient grad) {
    if (grad.is_none() || !Differentiable(g.node(e.node).output_type(e.output)) ||
        !from_x_tensor(e)) {
      return;
    }
    incoming[{e.node, e.output}].push_back(std::move(grad));
  };

  std::vector<int> topo = units.TopoOrder();
  for (auto it = topo.rbegin(); it != topo.rend(); ++it) {
    const int unit = *it;
    if (!from_x.count(unit) || !to_loss.count(unit)) continue;
    if (units.is_loop(unit)) {
      const int frame = units.frame(unit);
      const ControlFlowInfo::Frame& f = st->cf->frames[frame];
      std::map<int, Gradient> exit_grads;
      bool any = false;
      for (int x : f.exits) {
        auto in = incoming.find({x, 0});
        if (in == incoming.end()) continue;
        Gradient agg = Aggregate(gs.NewSubScope(g.node(x).name()), in->second);
        any |= !agg.is_none();
        exit_grads[x] = std::move(agg);
      }
      if (!any) continue;
      std::set<int> wanted;
      for (int e : f.enters) {
        const Endpoint& src = g.node(e).input(0);
        if (from_x_tensor(src) && Differentiable(g.node(src.node).output_type(src.output))) {
          wanted.insert(e);
        }
      }
      if (wanted.empty()) continue;
      std::map<int, Gradient> enter_grads;
      FS_RETURN_IF_ERROR(WhileLoopGrad(st, gs, level, frame, exit_grads, wanted, &enter_grads));
      for (auto& [e, grad] : enter_grads) add_incoming(g.node(e).input(0), std::move(grad));
      continue;
    }
    const int id = unit;
    const Node& node = g.node(id);
    Scope ns = gs.NewSubScope(node.name());
    std::vector<Gradient> out_grads(node.num_outputs());
    bool any = false;
    for (int o = 0; o < node.num_outputs(); ++o) {
      auto in = incoming.find({id, o});
      if (in != incoming.end()) out_grads[o] = Aggregate(ns, in->second);
      final_grads[{id, o}] = out_grads[o];
      any |= !out_grads[o].is_none();
    }
    if (!any || node.op() == "StopGradient" || node.num_inputs() == 0) continue;
    bool needs_input_grads = false;
    for (int k = 0; k < node.num_inputs(); ++k) {
      const Endpoint& e = node.input(k);
      needs_input_grads |= from_x_tensor(e) && !node.input_is_ref(k) &&
                           Differentiable(g.node(e.node).output_type(e.output));
    }
    if (!needs_input_grads) continue;
    const GradFunc* fn = nullptr;
    auto ov = st->options.overrides.find(node.op());
    if (ov != st->options.overrides.end()) {
      fn = &ov->second;
    } else if (registry->IsNonDifferentiable(node.op())) {
      continue;
    } else {
      fn = registry->Find(node.op());
    }
    if (fn == nullptr) {
      return Unimplemented("node '" + node.name() + "' (" + node.op() +
                               "): no gradient is registered for op " + node.op() +
                               ", which lies between the loss '" + st->loss_name +
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
      if (node.input_is_ref(k)) continue;
      add_incoming(node.input(k), std::move(in_grads[k]));
    }
  }

  grads->clear();
  for (const Endpoint& x : xs) {
    auto f = final_grads.find({x.node, x.output});
    if (f != final_grads.end()) {
      grads->push_back(f->second);
      continue;
    }
    auto in = incoming.find({x.node, x.output});
    grads->push_back(in == incoming.end()
                         ? Gradient::None()
                         : Aggregate(gs.NewSubScope(g.node(x.node).name()), in->second));
  }
  return Status();
}

}  // namespace internal

Status AddGradients(const Scope& scope, const Output& loss, const std::vector<Output>& xs,
                    std::vector<Gradient>* grads, const GradientOptions& options) {
  FS_ASSIGN_OR_RETURN(Graph g, Graph::Create(scope.graph_def()));
  const Node* loss_node = g.FindNode(loss.node);
  if (loss_node == nullptr) return NotFound("loss '" + loss.name() + "' is not in the graph", loss.node);
  if (loss.index >= loss_node->num_outputs()) {
    return InvalidArgument("loss '" + loss.name() + "' names a missing output", loss.node);
  }
  if (!internal::Differentiable(loss_node->output_type(loss.index))) {
    return InvalidArgument("loss '" + loss.name() + "' has dtype " +
                               std::string(DataTypeName(loss_node->output_type(loss.index))) +
                               "; it must be floating point",
                           loss.node);
  }
  std::vector<Endpoint> x_endpoints;
  for (const Output& x : xs) {
    const Node* xn = g.FindNode(x.node);
    if (xn == nullptr) return NotFound("'" + x.name() + "' is not in the graph", x.node);
    if (x.index >= xn->num_outputs()) {
      return InvalidArgument("'" + x.name() + "' names a missing output", x.node);
    }
    x_endpoints.push_back(Endpoint{xn->id(), x.index});
  }
  internal::GradState st(g, options, loss.name());
  if (st.cf != nullptr) {
    for (size_t f = 1; f < st.cf->frames.size(); ++f) {
      for (int e : st.cf->frames[f].enters) st.enter_child[e] = int(f);
    }
  }
  Scope gs = scope.NewSubScope(options.prefix);
  Gradient initial = Gradient::Dense(ops::OnesLike(gs.WithOpName("initial"), loss));
  internal::Level root;
  FS_RETURN_IF_ERROR(internal::Backprop(&st, gs, root,
                                        {{Endpoint{loss_node->id(), loss.index}, initial}},
                                        x_endpoints, grads));
  for (NodeDef& n : st.pending) scope.mutable_graph_def()->nodes.push_back(std::move(n));
  return Status();
}

}  // namespace flowstate

namespace flowstate {

StatusOr<GraphGradients> GradientsOfGraph(const GraphDef& graph, const std::string& y,
                                          const std::vector<std::string>& xs,
                                          const std::string& prefix) {
  FS_RETURN_IF_ERROR(ValidateNodeName(prefix).WithPrefix("prefix"));
  FS_ASSIGN_OR_RETURN(Graph g, Graph::Create(graph));
  auto tensor = [&](const std::string& s, const std::string& field) -> StatusOr<Output> {
    StatusOr<TensorId> id = ParseTensorId(s);
    if (!id.ok() || id->is_control()) {
      return InvalidArgument(field + ": '" + s.substr(0, 128) + "' is not a tensor name");
    }
    const Node* n = g.FindNode(id->node);
    if (n == nullptr) return NotFound(field + ": the graph has no node '" + id->node + "'", id->node);
    if (id->index >= n->num_outputs()) {
      return InvalidArgument(field + ": node '" + id->node + "' has " +
                                 std::to_string(n->num_outputs()) + " outputs",
                             id->node);
    }
    return Output(id->node, id->index);
  };
  FS_ASSIGN_OR_RETURN(Output loss, tensor(y, "y"));
  std::vector<Output> x_outputs;
  for (size_t i = 0; i < xs.size(); ++i) {
    FS_ASSIGN_OR_RETURN(Output x, tensor(xs[i], "xs[" + std::to_string(i) + "]"));
    x_outputs.push_back(std::move(x));
  }
  if (x_outputs.empty()) return InvalidArgument("xs: name at least one tensor");

  // A prefix no node of the graph lives under.
  GraphGradients out;
  out.prefix = prefix;
  for (int k = 1;; ++k) {
    bool taken = false;
    for (const NodeDef& n : graph.nodes) {
      if (n.name == out.prefix || n.name.rfind(out.prefix + "/", 0) == 0) {
        taken = true;
        break;
      }
    }
    if (!taken) break;
    out.prefix = prefix + "_" + std::to_string(k);
  }
  const GraphDef forward = g.ToGraphDef();
  Scope root(forward);
  GradientOptions options;
  options.prefix = out.prefix;
  FS_RETURN_IF_ERROR(AddGradients(root, loss, x_outputs, &out.grads, options));
  const GraphDef& all = root.graph_def();
  // Differentiating a loop adds to the loop's own nodes: not expressible as
  // nodes appended to the client's graph.
  for (size_t i = 0; i < forward.nodes.size(); ++i) {
    const NodeDef& before = forward.nodes[i];
    const NodeDef& after = all.nodes[i];
    if (after.name != before.name || after.inputs != before.inputs || !(after.attrs == before.attrs)) {
      return Unimplemented("the gradient of '" + y + "' runs through the loop of node '" + before.name +
                               "', whose differentiation changes the loop itself; submit the graph "
                               "as a job (its loss and optimizer) to train through loops",
                           before.name);
    }
  }
  for (size_t i = forward.nodes.size(); i < all.nodes.size(); ++i) {
    if (all.nodes[i].name.rfind(out.prefix + "/", 0) != 0) {
      return Unimplemented("the gradient of '" + y + "' adds node '" + all.nodes[i].name +
                               "' outside its prefix (a loop on the path); submit the graph as "
                               "a job to train through loops",
                           all.nodes[i].name);
    }
    out.added.nodes.push_back(all.nodes[i]);
  }
  return out;
}

}  // namespace flowstate

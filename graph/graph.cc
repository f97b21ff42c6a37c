#include "graph/graph.h"

#include <algorithm>
#include <cctype>
#include <deque>

#include "graph/control_flow.h"

namespace flowstate {
namespace {

std::string NodeLabel(const NodeDef& def) { return "node '" + def.name + "' (" + def.op + ")"; }

Status NodeError(const NodeDef& def, const std::string& msg) {
  return InvalidArgument(NodeLabel(def) + ": " + msg, def.name);
}

}  // namespace

Status ValidateNodeName(std::string_view name) {
  if (name.empty()) return InvalidArgument("node name is empty");
  for (char c : name) {
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.' ||
          c == '/')) {
      return InvalidArgument("node name '" + std::string(name) +
                                 "' has a character other than letters, digits and _-./",
                             std::string(name));
    }
  }
  return Status();
}

const Node* Graph::FindNode(std::string_view name) const {
  auto it = by_name_.find(std::string(name));
  return it == by_name_.end() ? nullptr : &nodes_[it->second];
}

GraphDef Graph::ToGraphDef() const {
  GraphDef g;
  g.nodes.reserve(nodes_.size());
  for (const Node& n : nodes_) g.nodes.push_back(n.def_);
  return g;
}

StatusOr<Graph> Graph::Create(const GraphDef& def, const OpRegistry* registry) {
  Graph g;
  g.registry_ = registry ? registry : OpRegistry::Global();
  const int n = int(def.nodes.size());
  g.nodes_.resize(n);
  g.by_name_.reserve(n);

  // Names and ops.
  for (int i = 0; i < n; ++i) {
    const NodeDef& nd = def.nodes[i];
    FS_RETURN_IF_ERROR(ValidateNodeName(nd.name).WithNode(nd.name));
    if (!g.by_name_.emplace(nd.name, i).second) {
      return InvalidArgument("duplicate node name '" + nd.name + "'", nd.name);
    }
    Node& node = g.nodes_[i];
    node.id_ = i;
    node.def_ = nd;
    FS_ASSIGN_OR_RETURN(node.op_def_, g.registry_->Lookup(nd.op, nd.name));
  }

  // Inputs.
  for (int i = 0; i < n; ++i) {
    Node& node = g.nodes_[i];
    for (const std::string& in : node.def_.inputs) {
      StatusOr<TensorId> id = ParseTensorId(in);
      if (!id.ok()) return NodeError(node.def_, id.status().message());
      auto it = g.by_name_.find(id->node);
      if (it == g.by_name_.end()) {
        // A tensor a loop or branch captured: name the node that reads it.
        auto reader = node.def_.attrs.find("_reader");
        if (reader != node.def_.attrs.end() && reader->second.kind() == AttrKind::kString) {
          const std::string& r = reader->second.s();
          return InvalidArgument("node '" + r + "': input '" + in +
                                     "' names no node of the graph (read through '" +
                                     node.name() + "')",
                                 r);
        }
        return NodeError(node.def_, "input '" + in + "' names no node of the graph");
      }
      if (id->is_control()) {
        node.control_inputs_.push_back(it->second);
      } else {
        if (!node.control_inputs_.empty()) {
          return NodeError(node.def_, "data input '" + in + "' follows a control input");
        }
        node.inputs_.push_back(Endpoint{it->second, id->index});
      }
    }
  }

  // A loop's back edges (NextIteration -> Merge) close its cycle; only a
  // Merge's data input may be one.
  FS_RETURN_IF_ERROR(g.CheckBackEdges());

  // Topological order (Kahn's algorithm over data and control edges, back
  // edges left out).
  std::vector<int> pending(n, 0);
  std::vector<std::vector<int>> succ(n);
  for (int i = 0; i < n; ++i) {
    for (const Endpoint& e : g.nodes_[i].inputs_) {
      if (g.IsBackEdgeSource(e.node)) continue;
      succ[e.node].push_back(i);
      ++pending[i];
    }
    for (int c : g.nodes_[i].control_inputs_) succ[c].push_back(i);
    pending[i] += int(g.nodes_[i].control_inputs_.size());
  }
  std::deque<int> ready;
  for (int i = 0; i < n; ++i) {
    if (pending[i] == 0) ready.push_back(i);
  }
  g.topo_order_.reserve(n);
  while (!ready.empty()) {
    int u = ready.front();
    ready.pop_front();
    g.topo_order_.push_back(u);
    for (int v : succ[u]) {
      if (--pending[v] == 0) ready.push_back(v);
    }
  }
  if (int(g.topo_order_.size()) != n) {
    // Walk inputs among the unfinished nodes until one repeats: it lies on a
    // cycle (the others may merely depend on one).
    int u = 0;
    while (pending[u] == 0) ++u;
    std::vector<bool> seen(n, false);
    while (!seen[u]) {
      seen[u] = true;
      const Node& node = g.nodes_[u];
      int next = -1;
      for (const Endpoint& e : node.inputs_) {
        if (pending[e.node] > 0 && !g.IsBackEdgeSource(e.node)) next = e.node;
      }
      for (int c : node.control_inputs_) {
        if (pending[c] > 0) next = c;
      }
      u = next;
    }
    const NodeDef& nd = g.nodes_[u].def_;
    return InvalidArgument("the graph has a cycle through " + NodeLabel(nd), nd.name);
  }

  for (int id : g.topo_order_) {
    FS_RETURN_IF_ERROR(g.Resolve(&g.nodes_[id]));
    FS_RETURN_IF_ERROR(g.InferShapes(&g.nodes_[id]));
  }
  FS_RETURN_IF_ERROR(g.CheckLoopVariables());

  for (int i = 0; i < n; ++i) {
    const Node& node = g.nodes_[i];
    for (int k = 0; k < node.num_inputs(); ++k) {
      const Endpoint& e = node.inputs_[k];
      g.nodes_[e.node].out_edges_.push_back(OutEdge{e.output, i, k});
    }
    for (int c : node.control_inputs_) {
      g.nodes_[c].out_edges_.push_back(OutEdge{0, i, -1});
    }
  }
  for (const Node& node : g.nodes_) {
    if (!IsControlFlowOp(node.op())) continue;
    FS_ASSIGN_OR_RETURN(ControlFlowInfo info, BuildControlFlowInfo(g));
    g.control_flow_ = std::make_shared<const ControlFlowInfo>(std::move(info));
    break;
  }
  return g;
}

bool Graph::IsBackEdgeSource(int id) const { return nodes_[id].def_.op == "NextIteration"; }

Status Graph::CheckBackEdges() const {
  for (const Node& node : nodes_) {
    for (int c : node.control_inputs_) {
      if (IsBackEdgeSource(c)) {
        return NodeError(nodes_[c].def_, "a NextIteration may only feed a Merge's data input, "
                                         "but '" + node.name() + "' takes it as a control input");
      }
    }
    if (node.def_.op == "Merge") continue;
    for (const Endpoint& e : node.inputs_) {
      if (IsBackEdgeSource(e.node)) {
        return NodeError(nodes_[e.node].def_, "a NextIteration may only feed a Merge, but '" +
                                                  node.name() + "' (" + node.op() + ") reads it");
      }
    }
  }
  return Status();
}

// A back edge was taken as given while its Merge resolved (its source comes
// later in topological order); now both ends are known.
Status Graph::CheckLoopVariables() const {
  for (const Node& merge : nodes_) {
    if (merge.def_.op != "Merge") continue;
    for (int k = 0; k < merge.num_inputs(); ++k) {
      const Endpoint& e = merge.inputs_[k];
      if (!IsBackEdgeSource(e.node)) continue;
      const Node& next = nodes_[e.node];
      if (e.output != 0) {
        return NodeError(merge.def_, "input '" + merge.def_.inputs[k] + "' refers to output " +
                                         std::to_string(e.output) + " of NextIteration '" +
                                         next.name() + "', which has 1 output");
      }
      if (next.output_types_[0] != merge.input_types_[k]) {
        return NodeError(next.def_, "the loop variable has dtype " +
                                        std::string(DataTypeName(next.output_types_[0])) +
                                        " in the next iteration but " +
                                        std::string(DataTypeName(merge.input_types_[k])) +
                                        " on entry to the loop (Merge '" + merge.name() + "')");
      }
      if (!next.output_shapes_[0].IsCompatibleWith(merge.output_shapes_[0])) {
        return NodeError(next.def_, "the loop variable changes shape across iterations: " +
                                        next.output_shapes_[0].ToString() +
                                        " in the next iteration, " +
                                        merge.output_shapes_[0].ToString() +
                                        " on entry to the loop (Merge '" + merge.name() + "')");
      }
    }
  }
  return Status();
}

// Fills in attrs, checks arity and dtypes, computes output dtypes. Runs in
// topological order, so every input's dtype is known.
Status Graph::Resolve(Node* node) {
  NodeDef& def = node->def_;
  const OpDef& op = *node->op_def_;

  for (auto& [name, value] : def.attrs) {
    if (name.starts_with("_")) continue;  // runtime/private annotations
    const AttrDef* ad = op.FindAttr(name);
    if (ad == nullptr) return NodeError(def, "unknown attr '" + name + "'");
    StatusOr<AttrValue> c = value.CoercedTo(ad->kind);
    if (!c.ok()) return NodeError(def, "attr '" + name + "': " + c.status().message());
    value = std::move(c).value();
  }

  // Bind data inputs to the op's input args.
  const int num_given = node->num_inputs();
  int fixed_after = 0;  // inputs of non-list args, to size a list arg
  for (const ArgDef& a : op.inputs) {
    if (a.number_attr.empty() && a.type_list_attr.empty()) ++fixed_after;
  }
  int pos = 0;
  for (const ArgDef& a : op.inputs) {
    int count = 1;
    // A list(type) arg: its types come from the attr, or from the inputs.
    const std::vector<DataType>* listed = nullptr;
    std::vector<DataType> inferred;
    if (!a.type_list_attr.empty()) {
      auto it = def.attrs.find(a.type_list_attr);
      if (it != def.attrs.end()) {
        listed = &it->second.types();
        count = int(listed->size());
      } else {
        count = std::max(0, num_given - pos - fixed_after);
      }
    } else if (!a.number_attr.empty()) {
      auto it = def.attrs.find(a.number_attr);
      if (it != def.attrs.end()) {
        count = int(it->second.i());
      } else {
        count = num_given - pos - fixed_after;
        if (count < 0) count = 0;
        def.attrs[a.number_attr] = AttrValue(int64_t(count));
      }
    } else {
      --fixed_after;
    }
    for (int k = 0; k < count; ++k, ++pos) {
      if (pos >= num_given) continue;  // arity error reported below
      const Endpoint& e = node->inputs_[pos];
      const Node& src = nodes_[e.node];
      if (IsBackEdgeSource(e.node) && src.output_types_.empty()) {
        // A loop's back edge into its Merge, resolved later: it must have
        // the type of the Merge's other inputs (CheckLoopVariables).
        FS_ASSIGN_OR_RETURN(DataType t, BackEdgeType(*node, a));
        node->input_types_.push_back(t);
        node->input_is_ref_.push_back(false);
        continue;
      }
      if (e.output >= src.num_outputs()) {
        return NodeError(def, "input '" + def.inputs[pos] + "' refers to output " +
                                  std::to_string(e.output) + " of '" + src.name() +
                                  "', which has " + std::to_string(src.num_outputs()) +
                                  " output(s)");
      }
      DataType have = src.output_types_[e.output];
      DataType want = a.type;
      if (!a.type_list_attr.empty()) {
        want = listed != nullptr ? (*listed)[k] : have;
        if (listed == nullptr) inferred.push_back(have);
      } else if (!a.type_attr.empty()) {
        auto it = def.attrs.find(a.type_attr);
        if (it == def.attrs.end()) {
          def.attrs[a.type_attr] = AttrValue(have);
          want = have;
        } else {
          want = it->second.type();
        }
      }
      if (have != want) {
        std::string bound = a.type_attr.empty() ? "" : " (" + a.type_attr + ")";
        return NodeError(def, "input " + std::to_string(pos) + " ('" + def.inputs[pos] +
                                  "') has dtype " + std::string(DataTypeName(have)) +
                                  " but argument '" + a.name + "' expects " +
                                  std::string(DataTypeName(want)) + bound);
      }
      if (a.is_ref && !src.output_is_ref_[e.output]) {
        return NodeError(def, "input " + std::to_string(pos) + " ('" + def.inputs[pos] +
                                  "') of argument '" + a.name +
                                  "' must be a variable, but '" + src.name() + "' is a " +
                                  src.op());
      }
      node->input_types_.push_back(have);
      node->input_is_ref_.push_back(a.is_ref);
    }
    if (!a.type_list_attr.empty() && listed == nullptr) {
      def.attrs[a.type_list_attr] = AttrValue(std::move(inferred));
    }
  }
  if (pos != num_given) {
    return NodeError(def, "expects " + std::to_string(pos) + " data input(s), got " +
                              std::to_string(num_given));
  }

  // Defaults, required attrs, constraints.
  for (const AttrDef& ad : op.attrs) {
    auto it = def.attrs.find(ad.name);
    if (it == def.attrs.end()) {
      if (!ad.default_value) return NodeError(def, "missing required attr '" + ad.name + "'");
      it = def.attrs.emplace(ad.name, *ad.default_value).first;
    }
    const AttrValue& v = it->second;
    if (ad.kind == AttrKind::kType && !ad.allowed_types.empty()) {
      bool ok = false;
      std::string allowed;
      for (DataType t : ad.allowed_types) {
        ok |= (t == v.type());
        allowed += (allowed.empty() ? "" : ", ") + std::string(DataTypeName(t));
      }
      if (!ok) {
        return NodeError(def, "attr '" + ad.name + "' is " + std::string(DataTypeName(v.type())) +
                                  ", which this op does not support (allowed: " + allowed + ")");
      }
    }
    if (ad.minimum) {
      int64_t have = ad.kind == AttrKind::kInt ? v.i()
                     : ad.kind == AttrKind::kIntList ? int64_t(v.ints().size())
                                                     : *ad.minimum;
      if (have < *ad.minimum) {
        return NodeError(def, "attr '" + ad.name + "' must be >= " + std::to_string(*ad.minimum) +
                                  ", got " + std::to_string(have));
      }
    }
  }

  // Output dtypes.
  for (const ArgDef& a : op.outputs) {
    if (!a.type_list_attr.empty()) {
      for (DataType t : def.attrs.at(a.type_list_attr).types()) {
        node->output_types_.push_back(t);
        node->output_is_ref_.push_back(false);
      }
      continue;
    }
    int count = a.number_attr.empty() ? 1 : int(def.attrs.at(a.number_attr).i());
    DataType t = a.type_attr.empty() ? a.type : def.attrs.at(a.type_attr).type();
    for (int k = 0; k < count; ++k) {
      node->output_types_.push_back(t);
      node->output_is_ref_.push_back(a.is_ref);
    }
  }
  return Status();
}

StatusOr<DataType> Graph::BackEdgeType(Node& node, const ArgDef& a) {
  if (!a.type_attr.empty()) {
    auto it = node.def_.attrs.find(a.type_attr);
    if (it != node.def_.attrs.end()) return it->second.type();
  }
  for (const Endpoint& e : node.inputs_) {
    const Node& src = nodes_[e.node];
    if (src.output_types_.empty() || e.output >= src.num_outputs()) continue;
    DataType t = src.output_types_[e.output];
    if (!a.type_attr.empty()) node.def_.attrs[a.type_attr] = AttrValue(t);
    return t;
  }
  return NodeError(node.def_, "every input is a NextIteration: nothing enters the loop");
}

Status Graph::InferShapes(Node* node) {
  std::vector<PartialShape> shapes;
  std::vector<const Tensor*> constants;
  shapes.reserve(node->inputs_.size());
  constants.reserve(node->inputs_.size());
  for (const Endpoint& e : node->inputs_) {
    const Node& src = nodes_[e.node];
    if (src.output_shapes_.empty()) {
      // A back edge not inferred yet: taken to keep the shape the loop
      // variable has on entry (CheckLoopVariables checks it later).
      shapes.push_back(nodes_[node->inputs_[0].node].output_shapes_.empty()
                           ? PartialShape::Unknown()
                           : nodes_[node->inputs_[0].node].output_shapes_[node->inputs_[0].output]);
      constants.push_back(nullptr);
      continue;
    }
    shapes.push_back(src.output_shapes_[e.output]);
    const Tensor* c = nullptr;
    const Node* value = &src;
    // A loop invariant that a Const entered is that constant too.
    if (src.op() == "Enter" && src.num_inputs() == 1 && src.def_.attrs.count("is_constant") &&
        src.def_.attrs.at("is_constant").kind() == AttrKind::kBool &&
        src.def_.attrs.at("is_constant").b()) {
      value = &nodes_[src.inputs_[0].node];
    }
    if (value->op() == "Const") {
      const Node& src = *value;
      auto it = src.def_.attrs.find("value");
      if (it != src.def_.attrs.end() && it->second.kind() == AttrKind::kTensor) {
        c = &it->second.tensor();
      }
    }
    constants.push_back(c);
  }
  InferenceContext ctx(&node->def_, node->op_def_, node->input_types_, std::move(shapes),
                       std::move(constants), node->num_outputs());
  Status s = node->op_def_->shape_fn(&ctx);
  if (!s.ok()) {
    if (s.node().empty()) {
      return InvalidArgument(NodeLabel(node->def_) + ": " + s.message(), node->name());
    }
    return s;
  }
  node->output_shapes_ = ctx.TakeOutputs();
  return Status();
}

namespace {

std::optional<DataType> DtypeOfPlaceholder(const std::string& op, const AttrMap& attrs) {
  if (op != "Placeholder") return std::nullopt;
  auto it = attrs.find("dtype");
  if (it == attrs.end() || it->second.kind() != AttrKind::kType) return std::nullopt;
  return it->second.type();
}

}  // namespace

std::optional<DataType> PlaceholderDtype(const Graph& graph, std::string_view name) {
  StatusOr<TensorId> id = ParseTensorId(name);
  if (!id.ok() || id->index != 0) return std::nullopt;
  const Node* n = graph.FindNode(id->node);
  return n == nullptr ? std::nullopt : DtypeOfPlaceholder(n->op(), n->attrs());
}

std::optional<DataType> PlaceholderDtype(const GraphDef& graph, std::string_view name) {
  StatusOr<TensorId> id = ParseTensorId(name);
  if (!id.ok() || id->index != 0) return std::nullopt;
  for (const NodeDef& n : graph.nodes) {
    if (n.name == id->node) return DtypeOfPlaceholder(n.op, n.attrs);
  }
  return std::nullopt;
}

}  // namespace flowstate

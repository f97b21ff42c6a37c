#include "graph/subgraph.h"

#include <map>
#include <set>
#include <unordered_set>

namespace flowstate {
namespace {

struct Resolved {
  int node;
  int index;
};

StatusOr<Resolved> ResolveTensor(const Graph& g, const std::string& name, const char* what) {
  StatusOr<TensorId> id = ParseTensorId(name);
  if (!id.ok() || id->is_control()) {
    return InvalidArgument(std::string(what) + " '" + name + "' is not a tensor name", name);
  }
  const Node* n = g.FindNode(id->node);
  if (n == nullptr) {
    return NotFound(std::string(what) + " '" + name + "': the graph has no node '" + id->node + "'",
                    id->node);
  }
  if (id->index >= n->num_outputs()) {
    return InvalidArgument(std::string(what) + " '" + name + "': node '" + id->node + "' has " +
                               std::to_string(n->num_outputs()) + " output(s)",
                           id->node);
  }
  return Resolved{n->id(), id->index};
}

std::string UniqueName(const Graph& g, std::unordered_set<std::string>* taken, std::string base) {
  std::string name = base;
  while (g.FindNode(name) != nullptr || taken->count(name)) name += "_";
  taken->insert(name);
  return name;
}

}  // namespace

StatusOr<PrunedGraph> PruneForSignature(const Graph& g, const RunSignature& sig) {
  PrunedGraph out;
  std::map<std::pair<int, int>, int> fed;  // (node, output) -> feed index
  for (int i = 0; i < int(sig.feeds.size()); ++i) {
    FS_ASSIGN_OR_RETURN(Resolved r, ResolveTensor(g, sig.feeds[i], "feed"));
    if (!fed.emplace(std::make_pair(r.node, r.index), i).second) {
      return InvalidArgument("tensor '" + sig.feeds[i] + "' is fed more than once",
                             g.node(r.node).name());
    }
    out.feed_types.push_back(g.node(r.node).output_type(r.index));
    out.feed_shapes.push_back(g.node(r.node).output_shape(r.index));
  }
  std::vector<Resolved> fetches;
  for (const std::string& f : sig.fetches) {
    FS_ASSIGN_OR_RETURN(Resolved r, ResolveTensor(g, f, "fetch"));
    fetches.push_back(r);
    out.fetch_types.push_back(g.node(r.node).output_type(r.index));
  }

  // Walk back from fetches and targets, stopping at fed tensors.
  std::vector<bool> needed(g.num_nodes(), false);
  std::vector<int> stack;
  auto visit = [&](int n) {
    if (!needed[n]) {
      needed[n] = true;
      stack.push_back(n);
    }
  };
  for (const Resolved& r : fetches) {
    if (!fed.count({r.node, r.index})) visit(r.node);
  }
  for (const std::string& t : sig.targets) {
    const Node* n = g.FindNode(t);
    if (n == nullptr) return NotFound("target '" + t + "': the graph has no such node", t);
    visit(n->id());
  }
  // A control dependency on a fed Placeholder waits for the feed instead
  // (as in TensorFlow): the placeholder itself never runs.
  std::map<int, int> fed_node;  // Placeholder -> its feed index
  for (const auto& [key, idx] : fed) {
    if (g.node(key.first).op() == "Placeholder") fed_node.emplace(key.first, idx);
  }
  std::set<int> used_feeds;
  while (!stack.empty()) {
    int u = stack.back();
    stack.pop_back();
    const Node& n = g.node(u);
    for (const Endpoint& e : n.inputs()) {
      auto it = fed.find({e.node, e.output});
      if (it != fed.end() && !n.input_is_ref(int(&e - n.inputs().data()))) {
        used_feeds.insert(it->second);
      } else {
        visit(e.node);
      }
    }
    for (int c : n.control_inputs()) {
      auto it = fed_node.find(c);
      if (it != fed_node.end()) {
        used_feeds.insert(it->second);
      } else {
        visit(c);
      }
    }
  }
  for (const Resolved& r : fetches) {
    auto it = fed.find({r.node, r.index});
    if (it != fed.end()) used_feeds.insert(it->second);
  }
  for (int i = 0; i < g.num_nodes(); ++i) {
    if (needed[i] && g.node(i).op() == "Placeholder") {
      return InvalidArgument("placeholder '" + g.node(i).name() + "' must be fed a value",
                             g.node(i).name());
    }
  }

  // Emit.
  std::unordered_set<std::string> taken;
  std::map<int, std::string> arg_name;  // feed index -> _Arg node
  for (auto& [key, idx] : fed) {
    if (!used_feeds.count(idx)) continue;
    NodeDef a;
    a.name = UniqueName(g, &taken, "_arg" + std::to_string(idx));
    a.op = "_Arg";
    a.attrs["T"] = AttrValue(out.feed_types[idx]);
    a.attrs["index"] = AttrValue(int64_t(idx));
    a.attrs["shape"] = AttrValue(out.feed_shapes[idx]);
    // A fed tensor is computed on the device of the node it replaces.
    a.device = g.node(key.first).requested_device();
    arg_name[idx] = a.name;
    out.graph.nodes.push_back(std::move(a));
  }
  auto tensor_name = [&](int node, int index) -> std::string {
    auto it = fed.find({node, index});
    if (it != fed.end()) return arg_name.at(it->second);
    return TensorId{g.node(node).name(), index}.ToString();
  };
  for (int i = 0; i < g.num_nodes(); ++i) {
    if (!needed[i]) continue;
    const Node& n = g.node(i);
    NodeDef d = n.def();
    d.inputs.clear();
    for (int k = 0; k < n.num_inputs(); ++k) {
      const Endpoint& e = n.input(k);
      d.inputs.push_back(n.input_is_ref(k) ? TensorId{g.node(e.node).name(), e.output}.ToString()
                                           : tensor_name(e.node, e.output));
    }
    for (int c : n.control_inputs()) {
      auto it = fed_node.find(c);
      d.inputs.push_back("^" + (it != fed_node.end() ? arg_name.at(it->second) : g.node(c).name()));
    }
    out.graph.nodes.push_back(std::move(d));
  }
  for (int i = 0; i < int(fetches.size()); ++i) {
    const Resolved& r = fetches[i];
    NodeDef rv;
    rv.name = UniqueName(g, &taken, "_retval" + std::to_string(i));
    rv.op = "_Retval";
    rv.inputs.push_back(tensor_name(r.node, r.index));
    rv.attrs["T"] = AttrValue(out.fetch_types[i]);
    rv.attrs["index"] = AttrValue(int64_t(i));
    // A fetch is returned from wherever its producer is placed.
    rv.attrs["_colocate_with"] = AttrValue(ParseTensorId(rv.inputs[0])->node);
    out.graph.nodes.push_back(std::move(rv));
  }
  return out;
}

}  // namespace flowstate

#include "graph/shared_tables.h"

#include <algorithm>
#include <set>

#include "graph/graph.h"

namespace flowstate {
namespace {

// The node an input names ("x", "x:1", "^x").
std::string InputNode(const std::string& input) {
  StatusOr<TensorId> id = ParseTensorId(input);
  return id.ok() ? id->node : input;
}

bool IsUpdate(const std::string& op) {
  return op.starts_with("Apply") || op.starts_with("SparseApply");
}

// What may go with a part a replica does not hold: its initializers and
// updates (and the part itself).
bool GoesWithPart(const std::string& op) {
  return op == "Variable" || op == "Assign" || IsUpdate(op);
}

}  // namespace

std::map<std::string, int> SharedVariableHolders(const TrainingGraph& tg, int replicas) {
  std::map<std::string, int> holders;
  for (const NodeDef& n : tg.graph.nodes) {
    if (n.op != "Variable") continue;
    auto it = n.attrs.find(kPartitionIndexAttr);
    if (it == n.attrs.end() || !n.attrs.count(kPartitionOfAttr)) continue;
    holders[n.name] = SharedPartHolder(it->second.i(), replicas);
  }
  return holders;
}

StatusOr<ReplicaTrainingGraph> ShareTables(const TrainingGraph& tg, int rank, int replicas) {
  if (replicas < 2 || tg.allreduce.empty()) {
    return InvalidArgument("partitioned_tables: \"shared\" needs two or more replicas");
  }
  const std::map<std::string, int> holders = SharedVariableHolders(tg, replicas);
  FS_ASSIGN_OR_RETURN(Graph g, Graph::Create(tg.graph));
  std::map<std::string, const NodeDef*> by_name;
  for (const NodeDef& n : tg.graph.nodes) by_name[n.name] = &n;
  // The lookups: the per-part Gathers of one routing (of one PartitionIds
  // node), in topological order of their first Gather; their buckets come
  // first.
  struct Lookup {
    std::string node;  // the _SharedGather that replaces them
    const NodeDef* route = nullptr;
    std::map<int64_t, const NodeDef*> gathers;  // by part index
  };
  std::vector<Lookup> lookups;
  std::map<std::string, size_t> lookup_of_route;
  std::map<std::string, std::pair<size_t, int64_t>> replaced;  // Gather -> lookup, part
  for (int id : g.topo_order()) {
    const Node& n = g.node(id);
    if (n.op() != "Gather" || n.def().inputs.size() < 2) continue;
    const std::string part = InputNode(n.def().inputs[0]);
    if (holders.count(part) == 0) continue;
    const std::string route = InputNode(n.def().inputs[1]);
    auto r = by_name.find(route);
    if (r == by_name.end() || r->second->op != "PartitionIds") {
      return InvalidArgument("partitioned_tables: the lookup '" + n.name() + "' of part '" + part +
                                 "' is not routed by a PartitionIds node",
                             n.name());
    }
    auto [it, added] = lookup_of_route.emplace(route, lookups.size());
    if (added) {
      Lookup l;
      l.route = r->second;
      l.node = route.ends_with("/route") ? route.substr(0, route.size() - 6) + "/shared" : route + "/shared";
      lookups.push_back(std::move(l));
    }
    const int64_t index = by_name.at(part)->attrs.at(kPartitionIndexAttr).i();
    lookups[it->second].gathers[index] = &n.def();
    replaced[n.name()] = {it->second, index};
  }
  const int64_t num_buckets = int64_t(lookups.size() + tg.allreduce.size());
  std::string group = "replicas";
  for (const NodeDef& n : tg.graph.nodes) {
    if (n.op == "_AllReduce" && n.attrs.count("group")) group = n.attrs.at("group").s();
  }

  // The parts (and what goes with them) this replica does not hold.
  std::set<std::string> removed;
  for (const auto& [v, holder] : holders) {
    if (holder != rank) removed.insert(v);
  }
  // An update removed with its part: what the nodes that waited for it
  // wait for instead (its inputs this replica keeps: the gathered gradient
  // and its checks), so that the replica still takes part in the gather.
  std::map<std::string, std::vector<std::string>> instead;
  // What a step, the initialization or a checkpoint needs: a node among
  // them may not go with a part unless it is the part's own.
  std::set<std::string> needed;
  {
    std::vector<std::string> todo = {InputNode(tg.loss), tg.train_op, tg.init_op,
                                     tg.optimizer_init, tg.global_step};
    while (!todo.empty()) {
      const std::string name = std::move(todo.back());
      todo.pop_back();
      auto it = by_name.find(name);
      if (it == by_name.end() || !needed.insert(name).second) continue;
      for (const std::string& in : it->second->inputs) todo.push_back(InputNode(in));
    }
  }
  for (bool changed = true; changed;) {
    changed = false;
    for (const NodeDef& n : tg.graph.nodes) {
      if (removed.count(n.name) || replaced.count(n.name)) continue;
      for (const std::string& in : n.inputs) {
        if (in.starts_with("^") || removed.count(InputNode(in)) == 0) continue;
        if (!GoesWithPart(n.op) && needed.count(n.name)) {
          const std::string part = InputNode(in);
          const std::string table = part.substr(0, part.rfind("/part_"));
          // The logical read of a table (a DynamicStitch of its parts):
          // name what reads it.
          const NodeDef* reader = &n;
          if (n.attrs.count(kPartitionStrategyAttr)) {
            for (const NodeDef& m : tg.graph.nodes) {
              for (const std::string& x : m.inputs) {
                if (reader == &n && needed.count(m.name) && !x.starts_with("^") &&
                    InputNode(x) == n.name) {
                  reader = &m;
                }
              }
            }
          }
          return InvalidArgument("partitioned_tables: node '" + reader->name + "' (" + reader->op +
                                     ") reads table '" + table +
                                     "' other than by a lookup; a table that replicas share may "
                                     "only be looked up (Gather)",
                                 reader->name);
        }
        removed.insert(n.name);
        changed = true;
        break;
      }
    }
  }
  for (const NodeDef& n : tg.graph.nodes) {
    if (!removed.count(n.name) || !IsUpdate(n.op)) continue;
    std::vector<std::string>& deps = instead[n.name];
    for (const std::string& in : n.inputs) {
      const std::string from = InputNode(in);
      if (!removed.count(from)) deps.push_back("^" + from);
    }
  }

  // An input naming a replaced Gather names its output of the lookup.
  auto rename = [&](const std::string& in) -> std::string {
    auto it = replaced.find(InputNode(in));
    if (it == replaced.end()) return in;
    const std::string& node = lookups[it->second.first].node;
    return in.starts_with("^") ? "^" + node : node + ":" + std::to_string(it->second.second);
  };
  ReplicaTrainingGraph out;
  out.num_buckets = int(num_buckets);
  for (const NodeDef& n : tg.graph.nodes) {
    if (removed.count(n.name)) continue;
    if (auto it = replaced.find(n.name); it != replaced.end()) {
      Lookup& l = lookups[it->second.first];
      if (it->second.second != l.gathers.begin()->first) continue;  // added once, at its first part
      // The lookup: every part's ids, then the parts this replica holds.
      const int64_t parts = l.route->attrs.at("num_partitions").i();
      if (int64_t(l.gathers.size()) != parts) {
        return InvalidArgument("partitioned_tables: the lookup '" + l.node + "' reads " +
                                   std::to_string(l.gathers.size()) + " of its table's " +
                                   std::to_string(parts) + " parts",
                               l.node);
      }
      NodeDef m;
      m.name = l.node;
      m.op = "_SharedGather";
      m.device = l.route->device;
      std::vector<std::string> controls;
      std::vector<std::string> held_parts;
      std::vector<int64_t> held;
      std::vector<int64_t> row;
      for (const auto& [p, gather] : l.gathers) {
        m.inputs.push_back(gather->inputs[1]);
        const std::string part = InputNode(gather->inputs[0]);
        if (holders.at(part) == rank) {
          held.push_back(p);
          held_parts.push_back(gather->inputs[0]);
        }
        for (const std::string& in : gather->inputs) {
          if (in.starts_with("^")) controls.push_back(in);
        }
        if (row.empty()) {
          const PartialShape& shape = by_name.at(part)->attrs.at("shape").shape();
          for (int d = 1; d < shape.rank(); ++d) row.push_back(shape.dim(d));
        }
      }
      for (std::string& in : held_parts) m.inputs.push_back(std::move(in));
      for (std::string& in : controls) m.inputs.push_back(std::move(in));
      const NodeDef& first = *l.gathers.begin()->second;
      m.attrs["T"] = first.attrs.at("Tparams");
      m.attrs["Tindices"] = first.attrs.at("Tindices");
      m.attrs["N"] = AttrValue(parts);
      m.attrs["M"] = AttrValue(int64_t(held.size()));
      m.attrs["held"] = AttrValue(held);
      m.attrs["row_shape"] = AttrValue(PartialShape(row));
      m.attrs["group"] = AttrValue(group);
      m.attrs["bucket"] = AttrValue(int64_t(it->second.first));
      m.attrs["num_buckets"] = AttrValue(num_buckets);
      out.graph.nodes.push_back(std::move(m));
      continue;
    }
    NodeDef m = n;
    if (m.op == "_AllReduce" || m.op == "_AllGather") {
      m.attrs["bucket"] = AttrValue(m.attrs.at("bucket").i() + int64_t(lookups.size()));
      m.attrs["num_buckets"] = AttrValue(num_buckets);
    }
    std::vector<std::string> inputs;
    for (const std::string& in : m.inputs) {
      const std::string from = InputNode(in);
      if (!in.starts_with("^") || !removed.count(from)) {
        const std::string named = rename(in);
        if (std::find(inputs.begin(), inputs.end(), named) == inputs.end() || !named.starts_with("^")) {
          inputs.push_back(named);
        }
        continue;
      }
      if (auto it = instead.find(from); it != instead.end()) {
        for (const std::string& d : it->second) {
          if (std::find(inputs.begin(), inputs.end(), d) == inputs.end()) inputs.push_back(d);
        }
      }
    }
    m.inputs = std::move(inputs);
    out.graph.nodes.push_back(std::move(m));
  }
  for (const std::string& v : tg.variables) {
    if (!removed.count(v)) out.variables.push_back(v);
  }
  FS_RETURN_IF_ERROR(Graph::Create(out.graph).status().WithPrefix(
      "partitioned_tables: replica " + std::to_string(rank) + "'s graph"));
  return out;
}

}  // namespace flowstate

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
  // The lookups of parts, in topological order: their buckets come first.
  std::map<std::string, int64_t> lookup_bucket;
  for (int id : g.topo_order()) {
    const Node& n = g.node(id);
    if (n.op() != "Gather" || n.def().inputs.empty()) continue;
    if (holders.count(InputNode(n.def().inputs[0])) == 0) continue;
    lookup_bucket.emplace(n.name(), int64_t(lookup_bucket.size()));
  }
  const int64_t lookups = int64_t(lookup_bucket.size());
  const int64_t num_buckets = lookups + int64_t(tg.allreduce.size());
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
  std::map<std::string, const NodeDef*> by_name;
  for (const NodeDef& n : tg.graph.nodes) by_name[n.name] = &n;
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
      if (removed.count(n.name) || lookup_bucket.count(n.name)) continue;
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

  ReplicaTrainingGraph out;
  out.num_buckets = int(num_buckets);
  for (const NodeDef& n : tg.graph.nodes) {
    if (removed.count(n.name)) continue;
    NodeDef m = n;
    if (m.op == "_AllReduce" || m.op == "_AllGather") {
      m.attrs["bucket"] = AttrValue(m.attrs.at("bucket").i() + lookups);
      m.attrs["num_buckets"] = AttrValue(num_buckets);
    }
    if (auto it = lookup_bucket.find(n.name); it != lookup_bucket.end()) {
      const std::string part = InputNode(n.inputs[0]);
      const bool holds = holders.at(part) == rank;
      const NodeDef* var = nullptr;
      for (const NodeDef& v : tg.graph.nodes) {
        if (v.name == part) var = &v;
      }
      m.attrs.clear();
      m.attrs["T"] = n.attrs.at("Tparams");
      m.attrs["Tindices"] = n.attrs.at("Tindices");
      m.attrs["group"] = AttrValue(group);
      m.attrs["bucket"] = AttrValue(it->second);
      m.attrs["num_buckets"] = AttrValue(num_buckets);
      if (holds) {
        m.op = "_SharedGather";
        m.attrs["_colocate_with"] = AttrValue(part);
      } else {
        m.op = "_SharedGatherRemote";
        m.inputs.erase(m.inputs.begin());
        std::vector<int64_t> row;
        if (var != nullptr && var->attrs.count("shape")) {
          const PartialShape& s = var->attrs.at("shape").shape();
          for (int d = 1; d < s.rank(); ++d) row.push_back(s.dim(d));
        }
        m.attrs["row_shape"] = AttrValue(PartialShape(row));
      }
    }
    std::vector<std::string> inputs;
    for (const std::string& in : m.inputs) {
      const std::string from = InputNode(in);
      if (!in.starts_with("^") || !removed.count(from)) {
        inputs.push_back(in);
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

#include "graph/partitioned_variables.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <set>

#include "graph/op_builders.h"
#include "graph/scope.h"

namespace flowstate {

StatusOr<PartitionStrategy> PartitionStrategyFromString(const std::string& s) {
  if (s == "mod") return PartitionStrategy::kMod;
  if (s == "div") return PartitionStrategy::kDiv;
  return InvalidArgument("unknown partition strategy '" + s + "' (expected mod or div)");
}

const char* PartitionStrategyName(PartitionStrategy s) {
  return s == PartitionStrategy::kMod ? "mod" : "div";
}

int64_t PartitionLayout::PartRows(int64_t p) const {
  return rows / partitions + (p < rows % partitions ? 1 : 0);
}

std::pair<int64_t, int64_t> PartitionLayout::Locate(int64_t r) const {
  if (strategy == PartitionStrategy::kMod) return {r % partitions, r / partitions};
  const int64_t per = rows / partitions, extras = rows % partitions;
  const int64_t threshold = extras * (per + 1);
  if (r < threshold) return {r / (per + 1), r % (per + 1)};
  return {extras + (r - threshold) / per, (r - threshold) % per};
}

int64_t PartitionLayout::LogicalRow(int64_t p, int64_t local) const {
  if (strategy == PartitionStrategy::kMod) return local * partitions + p;
  const int64_t per = rows / partitions, extras = rows % partitions;
  if (p < extras) return p * (per + 1) + local;
  return extras * (per + 1) + (p - extras) * per + local;
}

Status CheckPartitionAttrs(const AttrMap& attrs) {
  auto find = [&](const char* name) -> const AttrValue* {
    auto it = attrs.find(name);
    return it == attrs.end() ? nullptr : &it->second;
  };
  const AttrValue* p = find("partitions");
  const AttrValue* strategy = find("partition_strategy");
  if (strategy != nullptr && strategy->kind() == AttrKind::kString) {
    StatusOr<PartitionStrategy> s = PartitionStrategyFromString(strategy->s());
    if (!s.ok()) return InvalidArgument("partition_strategy: " + s.status().message());
  }
  if (p == nullptr || p->kind() != AttrKind::kInt) return Status();
  const int64_t n = p->i();
  if (n < 1) {
    return InvalidArgument("partitions: must be >= 1, got " + std::to_string(n));
  }
  if (n == 1) return Status();
  const AttrValue* shape = find("shape");
  if (shape == nullptr || shape->kind() != AttrKind::kShape) return Status();
  const PartialShape& s = shape->shape();
  if (!s.rank_known() || s.rank() < 1 || s.dim(0) < 0) {
    return InvalidArgument("partitions: " + std::to_string(n) +
                           " partitions need a variable whose first dimension (its rows) is "
                           "known, got shape " + s.ToString());
  }
  if (n > s.dim(0)) {
    return InvalidArgument("partitions: " + std::to_string(n) + " partitions for a table of " +
                           std::to_string(s.dim(0)) + " rows (shape " + s.ToString() +
                           "); at most one partition per row");
  }
  return Status();
}

namespace {

std::string PartName(const std::string& table, int64_t p) {
  return table + "/part_" + std::to_string(p);
}

// What the rewrite needs of a table, from the Variable or from an earlier
// expansion's logical read.
struct Table {
  std::string name;
  DataType dtype = DataType::kFloat32;
  PartialShape shape;
  PartitionLayout layout;
  std::vector<std::string> parts;
  std::string device;
};

AttrValue ShapeAttr(const PartialShape& s) {
  std::vector<int64_t> dims = s.rank_known() ? s.dims() : std::vector<int64_t>{};
  return AttrValue(dims);
}

// The logical rows of part p, in its local order (an int32 Range).
Output PartRows(const Scope& s, const Table& t, int64_t p) {
  int32_t start = 0, limit = 0, delta = 1;
  if (t.layout.strategy == PartitionStrategy::kMod) {
    start = int32_t(p);
    limit = int32_t(t.layout.rows);
    delta = int32_t(t.layout.partitions);
  } else {
    start = int32_t(t.layout.LogicalRow(p, 0));
    limit = start + int32_t(t.layout.PartRows(p));
  }
  return ops::Range(s, ops::Const(s, start), ops::Const(s, limit), ops::Const(s, delta));
}

// The logical read of a table: DynamicStitch of the parts at their rows.
void AddLogicalRead(const Scope& root, const Table& t) {
  Scope rs = root.NewSubScope(t.name + "/read").WithDevice(t.device);
  std::vector<std::string> inputs;
  for (int64_t p = 0; p < t.layout.partitions; ++p) {
    inputs.push_back(PartRows(rs.NewSubScope("rows_" + std::to_string(p)), t, p).name());
  }
  for (const std::string& part : t.parts) inputs.push_back(part);
  root.WithOpName(t.name).WithDevice(t.device).AddNode(
      t.name, "DynamicStitch", inputs,
      {{"N", AttrValue(t.layout.partitions)},
       {"T", AttrValue(t.dtype)},
       {kPartitionsAttr, AttrValue(t.layout.partitions)},
       {kPartitionStrategyAttr, AttrValue(std::string(PartitionStrategyName(t.layout.strategy)))},
       {kLogicalShapeAttr, ShapeAttr(t.shape)}});
}

// PartitionIds `name` of `ids` over table `t`: each id's part and local
// row (outputs 0..P-1), and its position (outputs P..2P-1).
std::string AddPartitionIds(const Scope& s, const std::string& name, const std::string& ids,
                            DataType tindices, const Table& t) {
  return s.WithOpName(name).AddNode(
      name, "PartitionIds", {ids},
      {{"num_partitions", AttrValue(t.layout.partitions)},
       {"rows", AttrValue(t.layout.rows)},
       {"strategy", AttrValue(std::string(PartitionStrategyName(t.layout.strategy)))},
       {"table", AttrValue(t.name)},
       {"Tindices", AttrValue(tindices)}});
}

// The routing of Gather `g` (its NodeDef as written) over table `t`, part
// p read from params[p] (the part, or its Enter into the Gather's loop).
void AddRouting(const Scope& root, const NodeDef& g, DataType tindices,
                const PartialShape& ids_shape, const Table& t,
                const std::vector<std::string>& params) {
  const int ids_rank = ids_shape.rank_known() ? ids_shape.rank() : -1;
  std::vector<std::string> control;
  for (const std::string& in : g.inputs) {
    if (!in.empty() && in[0] == '^') control.push_back(in.substr(1));
  }
  Scope gs = Scope(root).WithDevice(g.device).WithControlDependencies(control);
  const int64_t P = t.layout.partitions;
  std::string route = AddPartitionIds(gs, g.name + "/route", g.inputs[1], tindices, t);
  std::vector<std::string> stitch_inputs;
  for (int64_t p = 0; p < P; ++p) stitch_inputs.push_back(Output(route, int(P + p)).name());
  for (int64_t p = 0; p < P; ++p) {
    stitch_inputs.push_back(Scope(root).WithOpName(g.name + "/part_" + std::to_string(p))
                                .AddNode("Gather", "Gather",
                                         {params[size_t(p)], Output(route, int(p)).name()},
                                         {{"axis", AttrValue(int64_t{0})},
                                          {"Tparams", AttrValue(t.dtype)},
                                          {"Tindices", AttrValue(tindices)},
                                          {"_colocate_with", AttrValue(t.parts[p])}}));
  }
  AttrMap stitch_attrs{{"N", AttrValue(P)}, {"T", AttrValue(t.dtype)}};
  if (ids_shape.IsFullyDefined() && t.shape.IsFullyDefined()) {
    // The ids' shape is known: so is the lookup's (ids.shape + row shape),
    // which the stitch alone would lose (its rows are as many as the ids).
    Output rows(gs.WithOpName(g.name + "/stitch")
                    .AddNode(g.name + "/stitch", "DynamicStitch", stitch_inputs, stitch_attrs));
    std::vector<int32_t> shape;
    for (int64_t d : ids_shape.dims()) shape.push_back(int32_t(d));
    for (int d = 1; d < t.shape.rank(); ++d) shape.push_back(int32_t(t.shape.dim(d)));
    ops::Reshape(gs.WithOpName(g.name), rows, ops::Const(gs.NewSubScope(g.name + "/shape"), shape));
    return;
  }
  if (ids_rank == 1) {
    gs.WithOpName(g.name).AddNode(g.name, "DynamicStitch", stitch_inputs, stitch_attrs);
    return;
  }
  // Rows in the flattened ids' order, reshaped to ids.shape + row shape.
  Output rows(gs.WithOpName(g.name + "/stitch")
                  .AddNode(g.name + "/stitch", "DynamicStitch", stitch_inputs, stitch_attrs));
  Scope ss = gs.NewSubScope(g.name + "/shape");
  Output inner = ops::StridedSlice(ss, ops::Shape(ss, rows), std::vector<int32_t>{1},
                                   std::vector<int32_t>{0}, std::vector<int32_t>{1},
                                   ops::StridedSliceAttrs{0, 1, 0, 0, 0});
  Output shape = ops::Concat(ss, {ops::Shape(ss, Output(g.inputs[1])), inner}, 0);
  ops::Reshape(gs.WithOpName(g.name), rows, shape);
}

// A write of the whole table by reference, `w` as written: Assign(T,
// value) assigns each part its rows of value; ScatterUpdate/Add/Sub(T,
// indices, updates) routes the indices (PartitionIds) and scatters each
// part's updates into it. Under the write's name, the table's new value
// (a DynamicStitch of the parts as written), as the write's output reads.
void AddWrite(const Scope& root, const NodeDef& w, DataType tindices, const Table& t) {
  std::vector<std::string> control;
  for (const std::string& in : w.inputs) {
    if (!in.empty() && in[0] == '^') control.push_back(in.substr(1));
  }
  Scope ws = Scope(root).WithDevice(w.device).WithControlDependencies(control);
  const int64_t P = t.layout.partitions;
  std::vector<std::string> stitch;
  for (int64_t p = 0; p < P; ++p) {
    stitch.push_back(PartRows(ws.NewSubScope(w.name + "/rows_" + std::to_string(p)), t, p).name());
  }
  AttrMap copied;
  for (const char* a : {"use_locking", "validate_shape"}) {
    if (auto it = w.attrs.find(a); it != w.attrs.end()) copied[a] = it->second;
  }
  if (w.op == "Assign") {
    for (int64_t p = 0; p < P; ++p) {
      const std::string part = w.name + "/part_" + std::to_string(p);
      Output value = ops::Gather(ws.NewSubScope(part), Output(w.inputs[1]),
                                 Output(stitch[size_t(p)]));
      AttrMap a = copied;
      a["T"] = AttrValue(t.dtype);
      stitch.push_back(ws.WithOpName(part).AddNode(part, "Assign", {t.parts[size_t(p)], value.name()}, a));
    }
  } else {
    // Flat indices and updates (indices of any shape, updates of
    // indices.shape + the row's shape).
    Scope fs = ws.NewSubScope(w.name + "/flat");
    Output indices = ops::Reshape(fs, Output(w.inputs[1]), std::vector<int32_t>{-1});
    std::vector<int32_t> row_shape{-1};
    for (int d = 1; d < t.shape.rank(); ++d) row_shape.push_back(int32_t(t.shape.dim(d)));
    Output updates = ops::Reshape(fs, Output(w.inputs[2]), row_shape);
    std::string route = AddPartitionIds(ws, w.name + "/route", indices.name(), tindices, t);
    for (int64_t p = 0; p < P; ++p) {
      const std::string part = w.name + "/part_" + std::to_string(p);
      Output mine = ops::Gather(ws.NewSubScope(part), updates, Output(route, int(P + p)));
      AttrMap a = copied;
      a["T"] = AttrValue(t.dtype);
      a["Tindices"] = AttrValue(tindices);
      stitch.push_back(ws.WithOpName(part).AddNode(
          part, w.op, {t.parts[size_t(p)], Output(route, int(p)).name(), mine.name()}, a));
    }
  }
  ws.WithOpName(w.name).AddNode(w.name, "DynamicStitch", stitch,
                                {{"N", AttrValue(P)}, {"T", AttrValue(t.dtype)}});
}

bool IsTableWrite(const std::string& op) {
  return op == "Assign" || op == "ScatterUpdate" || op == "ScatterAdd" || op == "ScatterSub";
}

}  // namespace

StatusOr<GraphDef> ExpandPartitionedVariables(const GraphDef& graph) {
  FS_ASSIGN_OR_RETURN(Graph g, Graph::Create(graph));
  std::map<int, Table> tables;  // by node id: partitioned Variables and logical reads
  for (int i = 0; i < g.num_nodes(); ++i) {
    const Node& n = g.node(i);
    const AttrMap& a = n.attrs();
    if (n.op() == "Variable" && a.at("partitions").i() > 1) {
      Table t;
      t.name = n.name();
      t.dtype = a.at("dtype").type();
      t.shape = a.at("shape").shape();
      t.layout.rows = t.shape.dim(0);
      t.layout.partitions = a.at("partitions").i();
      t.layout.strategy = *PartitionStrategyFromString(a.at("partition_strategy").s());
      for (int64_t p = 0; p < t.layout.partitions; ++p) t.parts.push_back(PartName(t.name, p));
      t.device = n.requested_device();
      tables.emplace(i, std::move(t));
    } else if (n.op() == "DynamicStitch" && a.count(kPartitionStrategyAttr) &&
               a.count(kLogicalShapeAttr) && a.count(kPartitionsAttr)) {
      Table t;
      t.name = n.name();
      t.dtype = n.output_type(0);
      t.shape = PartialShape(a.at(kLogicalShapeAttr).ints());
      t.layout.partitions = a.at(kPartitionsAttr).i();
      StatusOr<PartitionStrategy> s = PartitionStrategyFromString(a.at(kPartitionStrategyAttr).s());
      if (!s.ok() || t.shape.rank() < 1 || n.num_inputs() != 2 * t.layout.partitions) continue;
      t.layout.strategy = *s;
      t.layout.rows = t.shape.dim(0);
      for (int64_t p = 0; p < t.layout.partitions; ++p) {
        t.parts.push_back(g.node(n.input(int(t.layout.partitions + p)).node).name());
      }
      t.device = n.requested_device();
      tables.emplace(i, std::move(t));
    }
  }
  if (tables.empty()) return graph;

  // What to rewrite: the Variables, and the Gathers (axis 0) of a table,
  // directly or through the constant Enters of loops (a lookup inside a
  // loop reads the table as a loop invariant): such a Gather reads each
  // part through Enters of its own into the same frames.
  std::set<std::string> replaced;
  struct Routed {
    int gather = 0;
    int table = 0;
    std::vector<int> enters;  // outermost first
  };
  std::vector<Routed> gathers;
  std::vector<std::pair<int, int>> writes;  // (Assign or Scatter* by reference, table)
  // The table a node is, or reads through constant Enters only, and those
  // Enters (outermost first).
  auto through_enters = [&](int node, std::vector<int>* enters) -> int {
    std::vector<int> chain;
    for (;;) {
      if (tables.count(node)) break;
      const Node& e = g.node(node);
      auto c = e.attrs().find("is_constant");
      if (e.op() != "Enter" || e.num_inputs() < 1 || c == e.attrs().end() || !c->second.b()) {
        return -1;
      }
      chain.push_back(node);
      node = e.input(0).node;
    }
    enters->assign(chain.rbegin(), chain.rend());
    return node;
  };
  for (int i = 0; i < g.num_nodes(); ++i) {
    const Node& n = g.node(i);
    if (n.op() == "Gather" && n.num_inputs() >= 2 && !tables.count(n.input(0).node) &&
        n.attrs().at("axis").i() == 0) {
      std::vector<int> enters;
      const int t = through_enters(n.input(0).node, &enters);
      if (t >= 0 && !enters.empty()) {
        gathers.push_back({i, t, std::move(enters)});
        replaced.insert(n.name());
        continue;
      }
    }
    for (int k = 0; k < n.num_inputs(); ++k) {
      auto it = tables.find(n.input(k).node);
      if (it == tables.end()) continue;
      if (n.input_is_ref(k) && k == 0 && IsTableWrite(n.op()) &&
          g.node(it->first).op() == "Variable") {
        auto vs = n.attrs().find("validate_shape");
        if (vs != n.attrs().end() && !vs->second.b()) {
          return InvalidArgument("node '" + n.name() + "' assigns the partitioned variable '" +
                                     it->second.name +
                                     "' with validate_shape false; a partitioned table keeps its "
                                     "shape",
                                 n.name());
        }
        if (!it->second.shape.IsFullyDefined()) {
          return InvalidArgument("node '" + n.name() + "' writes the partitioned variable '" +
                                     it->second.name + "', whose shape " +
                                     it->second.shape.ToString() + " is not fully known",
                                 n.name());
        }
        writes.emplace_back(i, it->first);
        replaced.insert(n.name());
        continue;
      }
      if (n.input_is_ref(k)) {
        return InvalidArgument("node '" + n.name() + "' (" + n.op() + ") takes variable '" +
                                   it->second.name + "' by reference, but it is partitioned (" +
                                   std::to_string(it->second.layout.partitions) +
                                   " partitions): write its parts '" + it->second.parts[0] +
                                   "', ... instead",
                               n.name());
      }
      if (n.op() == "Gather" && k == 0) {
        if (n.attrs().at("axis").i() != 0) {
          return InvalidArgument("node '" + n.name() + "' gathers the partitioned variable '" +
                                     it->second.name + "' along axis " +
                                     std::to_string(n.attrs().at("axis").i()) +
                                     "; a partitioned table is gathered along axis 0 only",
                                 n.name());
        }
        gathers.push_back({i, it->first, {}});
        replaced.insert(n.name());
      }
    }
  }
  for (const auto& [id, t] : tables) {
    if (g.node(id).op() == "Variable") replaced.insert(t.name);
  }
  std::set<std::string> names;
  for (const NodeDef& nd : graph.nodes) names.insert(nd.name);

  GraphDef out;
  for (const NodeDef& nd : graph.nodes) {
    if (!replaced.count(nd.name)) out.nodes.push_back(nd);
  }
  // The new nodes of each replaced node go where it was (so that variables
  // keep their order).
  std::map<std::string, std::pair<size_t, size_t>> spans;  // replaced -> [begin, end)
  Scope root(std::move(out));
  auto size = [&] { return root.graph_def().nodes.size(); };
  for (const auto& [id, t] : tables) {
    const Node& n = g.node(id);
    if (n.op() != "Variable") continue;
    const size_t begin = size();
    const std::vector<std::string>& devices = n.attrs().at("partition_devices").strings();
    const AttrValue& shared = n.attrs().at("shared_name");
    for (int64_t p = 0; p < t.layout.partitions; ++p) {
      if (names.count(t.parts[p])) {
        return InvalidArgument("variable '" + t.name + "' is partitioned into '" + t.parts[p] +
                                   "', ..., but the graph already has a node '" + t.parts[p] + "'",
                               t.name);
      }
      NodeDef part;
      part.name = t.parts[p];
      part.op = "Variable";
      part.attrs = n.def().attrs;
      std::vector<int64_t> dims = t.shape.dims();
      dims[0] = t.layout.PartRows(p);
      part.attrs["shape"] = AttrValue(PartialShape(dims));
      part.attrs["partitions"] = AttrValue(int64_t{1});
      part.attrs["partition_devices"] = AttrValue(std::vector<std::string>{});
      if (!shared.s().empty()) {
        part.attrs["shared_name"] = AttrValue(shared.s() + "/part_" + std::to_string(p));
      }
      part.attrs[kPartitionOfAttr] = AttrValue(t.name);
      part.attrs[kPartitionIndexAttr] = AttrValue(p);
      part.attrs[kPartitionsAttr] = AttrValue(t.layout.partitions);
      part.attrs[kPartitionStrategyAttr] =
          AttrValue(std::string(PartitionStrategyName(t.layout.strategy)));
      part.attrs[kLogicalShapeAttr] = ShapeAttr(t.shape);
      part.device = devices.empty() ? n.requested_device() : devices[p % devices.size()];
      for (const std::string& in : n.def().inputs) part.inputs.push_back(in);  // control deps
      root.mutable_graph_def()->nodes.push_back(std::move(part));
    }
    AddLogicalRead(root, t);
    spans[t.name] = {begin, size()};
  }
  // Each part's Enters into a loop, made once per Enter of the table.
  std::set<std::string> part_enters;
  for (const Routed& r : gathers) {
    const Node& gn = g.node(r.gather);
    const Table& t = tables.at(r.table);
    const Endpoint& ids = gn.input(1);
    const PartialShape& ids_shape = g.node(ids.node).output_shape(ids.output);
    const size_t begin = size();
    std::vector<std::string> params = t.parts;
    for (int e : r.enters) {
      const Node& enter = g.node(e);
      for (int64_t p = 0; p < t.layout.partitions; ++p) {
        NodeDef pe;
        pe.name = enter.name() + "/part_" + std::to_string(p);
        if (names.count(pe.name)) {
          return InvalidArgument("the loop's Enter '" + enter.name() + "' of partitioned table '" +
                                     t.name + "' would get a part '" + pe.name +
                                     "', but the graph already has a node of that name",
                                 enter.name());
        }
        if (part_enters.insert(pe.name).second) {
          pe.op = "Enter";
          pe.device = enter.requested_device();
          pe.attrs = enter.def().attrs;
          pe.inputs = {params[size_t(p)]};
          root.mutable_graph_def()->nodes.push_back(std::move(pe));
        }
        params[size_t(p)] = enter.name() + "/part_" + std::to_string(p);
      }
    }
    AddRouting(root, gn.def(), gn.input_type(1), ids_shape, t, params);
    spans[gn.name()] = {begin, size()};
  }
  for (const auto& [wid, tid] : writes) {
    const Node& wn = g.node(wid);
    // What reads the write's output by reference would write the logical
    // table again: refused.
    for (int c = 0; c < g.num_nodes(); ++c) {
      const Node& user = g.node(c);
      for (int k = 0; k < user.num_inputs(); ++k) {
        if (user.input(k).node == wid && user.input_is_ref(k)) {
          return InvalidArgument("node '" + user.name() + "' takes the output of '" + wn.name() +
                                     "' (a write of partitioned variable '" + tables.at(tid).name +
                                     "') by reference; write its parts instead",
                                 user.name());
        }
      }
    }
    const size_t begin = size();
    AddWrite(root, wn.def(), wn.op() == "Assign" ? DataType::kInt32 : wn.input_type(1), tables.at(tid));
    spans[wn.name()] = {begin, size()};
  }
  const GraphDef& built = root.graph_def();
  GraphDef result;
  result.nodes.reserve(built.nodes.size());
  size_t next = 0;
  for (const NodeDef& nd : graph.nodes) {
    auto it = spans.find(nd.name);
    if (it == spans.end()) {
      result.nodes.push_back(built.nodes[next++]);
      continue;
    }
    for (size_t k = it->second.first; k < it->second.second; ++k) {
      result.nodes.push_back(built.nodes[k]);
    }
  }
  FS_RETURN_IF_ERROR(Graph::Create(result).status());
  return result;
}

std::vector<PartitionedVariable> FindPartitionedVariables(const GraphDef& graph) {
  std::vector<PartitionedVariable> out;
  std::map<std::string, size_t> index;
  for (const NodeDef& n : graph.nodes) {
    if (n.op != "Variable") continue;
    auto of = n.attrs.find(kPartitionOfAttr);
    auto idx = n.attrs.find(kPartitionIndexAttr);
    auto count = n.attrs.find(kPartitionsAttr);
    auto strategy = n.attrs.find(kPartitionStrategyAttr);
    auto shape = n.attrs.find(kLogicalShapeAttr);
    auto dtype = n.attrs.find("dtype");
    if (of == n.attrs.end() || idx == n.attrs.end() || count == n.attrs.end() ||
        strategy == n.attrs.end() || shape == n.attrs.end() || dtype == n.attrs.end()) {
      continue;
    }
    StatusOr<PartitionStrategy> s = PartitionStrategyFromString(strategy->second.s());
    StatusOr<TensorShape> ts = TensorShape::Make(shape->second.ints());
    const int64_t P = count->second.i(), p = idx->second.i();
    if (!s.ok() || !ts.ok() || ts->rank() < 1 || P < 1 || p < 0 || p >= P) continue;
    auto [it, fresh] = index.emplace(of->second.s(), out.size());
    if (fresh) {
      PartitionedVariable v;
      v.name = of->second.s();
      v.dtype = dtype->second.type();
      v.shape = *ts;
      v.layout = {ts->dim(0), P, *s};
      v.parts.assign(size_t(P), "");
      out.push_back(std::move(v));
    }
    out[it->second].parts[size_t(p)] = n.name;
  }
  return out;
}

std::vector<std::string> LogicalNames(const std::vector<std::string>& variables,
                                      const std::vector<PartitionedVariable>& tables) {
  std::map<std::string, std::string> table_of;
  for (const PartitionedVariable& t : tables) {
    for (const std::string& p : t.parts) table_of[p] = t.name;
  }
  std::vector<std::string> out;
  std::set<std::string> seen;
  for (const std::string& v : variables) {
    auto it = table_of.find(v);
    const std::string& name = it == table_of.end() ? v : it->second;
    if (seen.insert(name).second) out.push_back(name);
  }
  return out;
}

std::string LogicalName(const std::string& variable, const std::vector<PartitionedVariable>& tables) {
  for (const PartitionedVariable& t : tables) {
    for (const std::string& p : t.parts) {
      if (p == variable) return t.name;
    }
  }
  return variable;
}

namespace {

// Row r of `from` (rows of row_bytes) to row `to_row` of `to`.
void CopyRow(const Tensor& from, int64_t r, Tensor* to, int64_t to_row, size_t row_bytes) {
  if (row_bytes == 0) return;  // empty rows: the tensors may have no buffer
  std::memcpy(static_cast<char*>(to->raw_data()) + to_row * row_bytes,
              static_cast<const char*>(from.raw_data()) + r * row_bytes, row_bytes);
}

size_t RowBytes(const PartitionedVariable& t) {
  int64_t inner = 1;
  for (int d = 1; d < t.shape.rank(); ++d) inner *= t.shape.dim(d);
  return size_t(inner) * DataTypeSize(t.dtype);
}

TensorShape PartShape(const PartitionedVariable& t, int64_t p) {
  TensorShape s = t.shape;
  s.set_dim(0, t.layout.PartRows(p));
  return s;
}

}  // namespace

StatusOr<std::vector<std::pair<std::string, Tensor>>> AssembleLogical(
    std::vector<std::pair<std::string, Tensor>> values,
    const std::vector<PartitionedVariable>& tables) {
  std::map<std::string, std::pair<size_t, int64_t>> part_of;  // part -> (table, index)
  for (size_t i = 0; i < tables.size(); ++i) {
    for (size_t p = 0; p < tables[i].parts.size(); ++p) part_of[tables[i].parts[p]] = {i, int64_t(p)};
  }
  std::vector<std::vector<const Tensor*>> parts(tables.size());
  for (size_t i = 0; i < tables.size(); ++i) parts[i].assign(tables[i].parts.size(), nullptr);
  for (const auto& [name, t] : values) {
    auto it = part_of.find(name);
    if (it == part_of.end()) continue;
    const PartitionedVariable& table = tables[it->second.first];
    const int64_t p = it->second.second;
    if (t.dtype() != table.dtype || t.shape() != PartShape(table, p)) {
      return InvalidArgument("variable '" + name + "' (part " + std::to_string(p) + " of '" +
                                 table.name + "') should be " + std::string(DataTypeName(table.dtype)) +
                                 PartShape(table, p).ToString() + ", got " +
                                 std::string(DataTypeName(t.dtype())) + t.shape().ToString(),
                             table.name);
    }
    parts[it->second.first][size_t(p)] = &t;
  }
  std::vector<Tensor> logical(tables.size());
  std::vector<bool> have(tables.size(), false);
  for (size_t i = 0; i < tables.size(); ++i) {
    const PartitionedVariable& table = tables[i];
    int present = 0;
    for (const Tensor* t : parts[i]) present += t != nullptr;
    if (present == 0) continue;
    if (present != int(parts[i].size())) {
      return InvalidArgument("the values of partitioned variable '" + table.name + "' have " +
                                 std::to_string(present) + " of its " +
                                 std::to_string(parts[i].size()) + " parts",
                             table.name);
    }
    Tensor out(table.dtype, table.shape);
    const size_t row_bytes = RowBytes(table);
    for (int64_t p = 0; p < int64_t(parts[i].size()); ++p) {
      const Tensor& part = *parts[i][size_t(p)];
      for (int64_t r = 0; r < part.dim(0); ++r) {
        CopyRow(part, r, &out, table.layout.LogicalRow(p, r), row_bytes);
      }
    }
    logical[i] = std::move(out);
    have[i] = true;
  }
  std::vector<std::pair<std::string, Tensor>> result;
  result.reserve(values.size());
  for (auto& [name, t] : values) {
    auto it = part_of.find(name);
    if (it == part_of.end()) {
      result.emplace_back(std::move(name), std::move(t));
    } else if (it->second.second == 0 && have[it->second.first]) {
      result.emplace_back(tables[it->second.first].name, std::move(logical[it->second.first]));
    }
  }
  return result;
}

StatusOr<std::vector<std::pair<std::string, Tensor>>> SplitLogical(
    std::vector<std::pair<std::string, Tensor>> values,
    const std::vector<PartitionedVariable>& tables) {
  std::map<std::string, const PartitionedVariable*> by_name;
  for (const PartitionedVariable& t : tables) by_name[t.name] = &t;
  std::vector<std::pair<std::string, Tensor>> result;
  result.reserve(values.size());
  for (auto& [name, t] : values) {
    auto it = by_name.find(name);
    if (it == by_name.end()) {
      result.emplace_back(std::move(name), std::move(t));
      continue;
    }
    const PartitionedVariable& table = *it->second;
    if (t.dtype() != table.dtype || t.shape() != table.shape) {
      return InvalidArgument("variable '" + name + "' is " + std::string(DataTypeName(table.dtype)) +
                                 table.shape.ToString() + " but the value is " +
                                 std::string(DataTypeName(t.dtype())) + t.shape().ToString(),
                             name);
    }
    const size_t row_bytes = RowBytes(table);
    for (int64_t p = 0; p < table.layout.partitions; ++p) {
      Tensor part(table.dtype, PartShape(table, p));
      for (int64_t r = 0; r < part.dim(0); ++r) {
        CopyRow(t, table.layout.LogicalRow(p, r), &part, r, row_bytes);
      }
      result.emplace_back(table.parts[size_t(p)], std::move(part));
    }
  }
  return result;
}

}  // namespace flowstate

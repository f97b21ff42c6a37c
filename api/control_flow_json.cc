// The compact control-flow nodes of the JSON graph form, lowered to the raw
// ops by the builders of graph/control_flow_builders.h (json_codec.h has the
// format):
//
//   {"name": "w", "op": "While", "loop_vars": ["i0", "s0"],
//    "cond": {"args": ["i", "s"], "nodes": [...], "output": "lt"},
//    "body": {"args": ["i", "s"], "nodes": [...], "outputs": ["i1", "s1"]},
//    "parallel_iterations": 10, "device": "..."}
//   {"name": "c", "op": "If", "pred": "p", "inputs": ["x"],
//    "then": {"args": ["x"], "nodes": [...], "outputs": ["y"]},
//    "else": {"args": ["x"], "nodes": [...], "outputs": ["z"]}}
//
// A function's node "n" becomes "<name>/cond/n", "<name>/body/n",
// "<name>/then/n" or "<name>/else/n"; its inputs name, first, the
// function's args, then its own nodes, then the enclosing function's, up to
// the graph's. Output k of the compact node is "<name>:k".
#include <map>
#include <set>

#include "api/json_internal.h"
#include "graph/control_flow.h"
#include "graph/control_flow_builders.h"
#include "graph/graph.h"

namespace flowstate::api::internal {
namespace {

// What a name means inside a function: its args, its own nodes (by their
// full names), then the enclosing function's names; the graph's own names
// mean themselves.
struct Env {
  const Env* outer = nullptr;
  std::map<std::string, Output> args;
  std::map<std::string, std::string> locals;

  // "x", "x:1" or "^x" as the graph spells it; `node` names the reader in
  // errors.
  StatusOr<std::string> Resolve(const std::string& input, const JsonPath& path,
                                const std::string& node) const {
    StatusOr<TensorId> id = ParseTensorId(input);
    if (!id.ok()) return PathError(path, id.status().message(), node);
    for (const Env* e = this; e != nullptr; e = e->outer) {
      if (auto a = e->args.find(id->node); a != e->args.end()) {
        if (id->is_control()) return "^" + a->second.node;
        if (id->index != 0) {
          return PathError(path, "'" + id->node + "' is an argument (one tensor); '" + input +
                                     "' asks for its output " + std::to_string(id->index),
                           node);
        }
        return a->second.name();
      }
      if (auto l = e->locals.find(id->node); l != e->locals.end()) {
        return TensorId{l->second, id->index}.ToString();
      }
    }
    return input;
  }
};

struct Lowering {
  const OpRegistry& registry;
  size_t max_bytes;

  static bool IsCompact(const Json& v) {
    if (!v.is_object()) return false;
    auto op = v.find("op");
    return op != v.end() && op->is_string() && (*op == "While" || *op == "If");
  }

  StatusOr<std::vector<std::string>> Strings(const Json& v, const JsonPath& path,
                                             const std::string& node, std::string_view what) {
    if (!v.is_array()) {
      return PathError(path, "expected a list of " + std::string(what) + ", got " + DescribeValue(v),
                       node);
    }
    std::vector<std::string> out;
    for (size_t i = 0; i < v.size(); ++i) {
      StatusOr<std::string> s = ReadString(v[i], path.Index(int64_t(i)));
      if (!s.ok()) return s.status().WithNode(node);
      out.push_back(std::move(s).value());
    }
    return out;
  }

  StatusOr<std::vector<Output>> Tensors(const Json& v, const JsonPath& path, const Env& env,
                                        const std::string& node, std::string_view what) {
    FS_ASSIGN_OR_RETURN(std::vector<std::string> names, Strings(v, path, node, what));
    std::vector<Output> out;
    for (size_t i = 0; i < names.size(); ++i) {
      FS_ASSIGN_OR_RETURN(std::string r, env.Resolve(names[i], path.Index(int64_t(i)), node));
      StatusOr<TensorId> id = ParseTensorId(r);
      if (!id.ok() || id->is_control()) {
        return PathError(path.Index(int64_t(i)), "expected a tensor name (\"x\" or \"x:1\"), got '" +
                                                     names[i] + "'",
                         node);
      }
      out.emplace_back(id->node, id->index);
    }
    return out;
  }

  const Json* Field(const Json& v, std::string_view key) {
    auto it = v.find(std::string(key));
    return it == v.end() || it->is_null() ? nullptr : &*it;
  }

  // A function's nodes, built into `scope` (whose nodes are named
  // "<prefix>/..."), with `args` bound to its parameters; returns the
  // tensors named by `results` ("output" or "outputs").
  StatusOr<std::vector<Output>> Function(const Json& fn, const JsonPath& path, const Env& outer,
                                         const Scope& scope, const std::string& prefix,
                                         const std::vector<Output>& args, bool single_output,
                                         const std::string& owner) {
    const char* results_key = single_output ? "output" : "outputs";
    FS_RETURN_IF_ERROR(CheckObject(fn, path, "a function", {"args", "nodes", results_key}, owner));
    Env env;
    env.outer = &outer;
    std::vector<std::string> params;
    if (const Json* a = Field(fn, "args")) {
      FS_ASSIGN_OR_RETURN(params, Strings(*a, path.Key("args"), owner, "argument names"));
    }
    if (params.size() != args.size()) {
      return PathError(path.Key("args"), "names " + std::to_string(params.size()) +
                                             " argument(s) for " + std::to_string(args.size()) +
                                             " value(s)",
                       owner);
    }
    for (size_t k = 0; k < params.size(); ++k) {
      if (!env.args.emplace(params[k], args[k]).second) {
        return PathError(path.Key("args").Index(int64_t(k)), "duplicate argument '" + params[k] + "'",
                         owner);
      }
    }
    const Json* nodes = Field(fn, "nodes");
    const JsonPath nodes_path = path.Key("nodes");
    if (nodes != nullptr && !nodes->is_array()) {
      return PathError(nodes_path, "expected a list of nodes, got " + DescribeValue(*nodes), owner);
    }
    const size_t count = nodes == nullptr ? 0 : nodes->size();
    // Every name first: a node may read one listed after it.
    for (size_t i = 0; i < count; ++i) {
      const Json& n = (*nodes)[i];
      const JsonPath p = nodes_path.Index(int64_t(i));
      if (!n.is_object()) return PathError(p, "expected a node (an object), got " + DescribeValue(n), owner);
      const Json* name = Field(n, "name");
      if (name == nullptr) return PathError(p, "missing \"name\"", owner);
      FS_ASSIGN_OR_RETURN(std::string local, ReadString(*name, p.Key("name")));
      FS_RETURN_IF_ERROR(ValidateNodeName(local).WithNode(prefix + "/" + local));
      if (!env.locals.emplace(local, prefix + "/" + local).second || env.args.count(local)) {
        return PathError(p.Key("name"), "duplicate name '" + local + "' in this function",
                         prefix + "/" + local);
      }
    }
    for (size_t i = 0; i < count; ++i) {
      FS_RETURN_IF_ERROR(Node((*nodes)[i], nodes_path.Index(int64_t(i)), env, scope, prefix));
    }
    const Json* results = Field(fn, results_key);
    const JsonPath results_path = path.Key(results_key);
    if (results == nullptr) return PathError(results_path, "is required", owner);
    if (single_output) {
      if (!results->is_string()) {
        return PathError(results_path, "expected a tensor name, got " + DescribeValue(*results), owner);
      }
      Json list = Json::array({*results});
      return Tensors(list, results_path, env, owner, "tensor names");
    }
    return Tensors(*results, results_path, env, owner, "tensor names");
  }

  // One node of a function (or of the graph, with prefix ""): a plain node
  // with its inputs resolved, or a compact one lowered.
  Status Node(const Json& v, const JsonPath& path, const Env& env, const Scope& scope,
              const std::string& prefix) {
    if (IsCompact(v)) return Compact(v, path, env, scope, prefix);
    NodeDef def;
    Status s = ReadNode(v, path, registry, max_bytes, &def);
    const std::string full = prefix.empty() ? def.name : prefix + "/" + def.name;
    if (!s.ok()) return Status(s.code(), s.message(), full);
    for (size_t k = 0; k < def.inputs.size(); ++k) {
      FS_ASSIGN_OR_RETURN(def.inputs[k],
                          env.Resolve(def.inputs[k], path.Key("inputs").Index(int64_t(k)), full));
    }
    const std::string added =
        scope.WithOpName(def.name).AddNode(def.op, def.op, std::move(def.inputs), std::move(def.attrs));
    if (added != full) return PathError(path.Key("name"), "duplicate node name '" + full + "'", full);
    if (!def.device.empty()) scope.mutable_graph_def()->nodes.back().device = def.device;
    return Status();
  }

  Status Compact(const Json& v, const JsonPath& path, const Env& env, const Scope& outer_scope,
                 const std::string& prefix) {
    const std::string op = v.at("op").get<std::string>();
    const Json* name_json = Field(v, "name");
    if (name_json == nullptr) return PathError(path, "missing \"name\"");
    FS_ASSIGN_OR_RETURN(std::string local, ReadString(*name_json, path.Key("name")));
    const std::string name = prefix.empty() ? local : prefix + "/" + local;
    FS_RETURN_IF_ERROR(ValidateNodeName(local).WithNode(name));
    Scope scope = outer_scope.WithOpName(local);
    if (const Json* d = Field(v, "device")) {
      StatusOr<std::string> device = ReadString(*d, path.Key("device"));
      if (!device.ok()) return device.status().WithNode(name);
      scope = scope.WithDevice(*device);
    }
    StatusOr<std::vector<Output>> results = std::vector<Output>{};
    if (op == "While") {
      FS_RETURN_IF_ERROR(CheckObject(v, path, "a While node",
                                     {"name", "op", "loop_vars", "cond", "body",
                                      "parallel_iterations", "device"},
                                     name));
      const Json* vars_json = Field(v, "loop_vars");
      const Json* cond = Field(v, "cond");
      const Json* body = Field(v, "body");
      if (vars_json == nullptr) return PathError(path.Key("loop_vars"), "is required", name);
      if (cond == nullptr) return PathError(path.Key("cond"), "is required", name);
      if (body == nullptr) return PathError(path.Key("body"), "is required", name);
      FS_ASSIGN_OR_RETURN(std::vector<Output> vars,
                          Tensors(*vars_json, path.Key("loop_vars"), env, name, "tensor names"));
      if (vars.empty()) return PathError(path.Key("loop_vars"), "needs at least one loop variable", name);
      int64_t parallel = 10;
      FS_RETURN_IF_ERROR(
          ReadIntField(v, path, "parallel_iterations", &parallel, 1).WithNode(name));
      results = ops::WhileLoop(
          scope,
          [&](const Scope& s, const std::vector<Output>& args) -> StatusOr<Output> {
            FS_ASSIGN_OR_RETURN(std::vector<Output> out,
                                Function(*cond, path.Key("cond"), env, s, name + "/cond", args,
                                         true, name));
            return out[0];
          },
          [&](const Scope& s, const std::vector<Output>& args) {
            return Function(*body, path.Key("body"), env, s, name + "/body", args, false, name);
          },
          vars, int(std::min<int64_t>(parallel, kMaxParallelIterations + 1)));
    } else {
      FS_RETURN_IF_ERROR(CheckObject(v, path, "an If node",
                                     {"name", "op", "pred", "inputs", "then", "else", "device"}, name));
      const Json* pred_json = Field(v, "pred");
      const Json* then_json = Field(v, "then");
      const Json* else_json = Field(v, "else");
      if (pred_json == nullptr) return PathError(path.Key("pred"), "is required", name);
      if (then_json == nullptr) return PathError(path.Key("then"), "is required", name);
      if (else_json == nullptr) return PathError(path.Key("else"), "is required", name);
      Json pred_list = Json::array({*pred_json});
      FS_ASSIGN_OR_RETURN(std::vector<Output> pred,
                          Tensors(pred_list, path.Key("pred"), env, name, "tensor names"));
      std::vector<Output> inputs;
      if (const Json* in = Field(v, "inputs")) {
        FS_ASSIGN_OR_RETURN(inputs, Tensors(*in, path.Key("inputs"), env, name, "tensor names"));
      }
      results = ops::Cond(
          scope, pred[0],
          [&](const Scope& s) {
            return Function(*then_json, path.Key("then"), env, s, name + "/then", inputs, false, name);
          },
          [&](const Scope& s) {
            return Function(*else_json, path.Key("else"), env, s, name + "/else", inputs, false, name);
          });
    }
    if (!results.ok()) {
      const Status& s = results.status();
      return s.node().empty() ? s.WithNode(name) : s;
    }
    if (results->empty() || results->front().node != name) {
      return PathError(path.Key("name"), "duplicate node name '" + name + "'", name);
    }
    return Status();
  }
};

}  // namespace

bool IsCompactControlFlowNode(const Json& v) { return Lowering::IsCompact(v); }

Status LowerControlFlowNodes(const Json& nodes, const JsonPath& nodes_path,
                             const std::vector<size_t>& compact, const OpRegistry& registry,
                             size_t max_bytes, GraphDef* graph) {
  Scope root(std::move(*graph));
  Lowering lowering{registry, max_bytes};
  const Env top;
  for (size_t i : compact) {
    FS_RETURN_IF_ERROR(lowering.Compact(nodes[i], nodes_path.Index(int64_t(i)), top, root, ""));
  }
  *graph = root.graph_def();
  return Status();
}

}  // namespace flowstate::api::internal

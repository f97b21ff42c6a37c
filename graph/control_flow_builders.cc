#include "graph/control_flow_builders.h"

#include <map>
#include <string>
#include <unordered_set>

#include "graph/control_flow.h"
#include "graph/op_builders.h"

namespace flowstate::ops {
namespace {

size_t NumNodes(const Scope& s) { return s.graph_def().nodes.size(); }

std::unordered_set<std::string> NamesIn(const Scope& s, size_t begin, size_t end) {
  std::unordered_set<std::string> names;
  for (size_t i = begin; i < end; ++i) names.insert(s.graph_def().nodes[i].name);
  return names;
}

// A node that will name the results (an IdentityN whose inputs are set by
// SetResults); returns its name.
std::string AddResultNode(const Scope& s, const std::string& default_name) {
  return s.AddNode(default_name, "IdentityN", {}, {});
}

std::vector<Output> SetResults(const Scope& s, const std::string& name,
                               const std::vector<Output>& values) {
  std::vector<Output> out;
  for (NodeDef& node : s.mutable_graph_def()->nodes) {
    if (node.name != name) continue;
    std::vector<std::string> inputs;
    for (size_t k = 0; k < values.size(); ++k) {
      inputs.push_back(values[k].name());
      out.emplace_back(name, int(k));
    }
    inputs.insert(inputs.end(), node.inputs.begin(), node.inputs.end());  // control inputs
    node.inputs = std::move(inputs);
    break;
  }
  return out;
}

// Outputs that a function returned from outside the nodes it built get an
// Identity in its scope, so that they too go through the frame or branch.
std::vector<Output> Internalize(const Scope& s, size_t begin, std::vector<Output> outs) {
  const std::unordered_set<std::string> inside = NamesIn(s, begin, NumNodes(s));
  for (Output& o : outs) {
    if (!inside.count(o.node)) o = Identity(s.WithOpName("result"), o);
  }
  return outs;
}

// Rewrites the inputs of nodes [begin, end) that come from outside that
// range: `capture(tensor, reader)` gives what a data input reads instead
// (the node it makes names `reader` in attr "_reader", so that validation
// errors about the tensor name the node that reads it); control
// inputs from outside go to `outer_controls` (kept when it is null). A node
// with neither a data input nor a control input from inside the range (a
// Const) is passed to anchor(its index, its inputs), which ties it to the
// frame or the branch.
void RewriteCaptures(const Scope& s, size_t begin, size_t end, size_t skip_begin, size_t skip_end,
                     const std::function<std::string(const std::string&, const std::string&)>& capture,
                     const std::function<void(size_t, std::vector<std::string>*)>& anchor,
                     std::vector<std::string>* outer_controls) {
  const std::unordered_set<std::string> inside = NamesIn(s, begin, end);
  for (size_t i = begin; i < end; ++i) {
    if (i >= skip_begin && i < skip_end) continue;
    std::vector<std::string> inputs = s.graph_def().nodes[i].inputs;
    std::vector<std::string> rewritten;
    bool anchored = false;  // by a data input, or a control input from inside
    for (const std::string& in : inputs) {
      StatusOr<TensorId> id = ParseTensorId(in);
      if (!id.ok() || inside.count(id->node)) {
        rewritten.push_back(in);  // a malformed name is left for validation to report
        anchored = true;
        continue;
      }
      if (id->is_control()) {
        if (outer_controls == nullptr) {
          rewritten.push_back(in);
        } else {
          outer_controls->push_back(id->node);
        }
        continue;
      }
      // May append nodes: `inputs` is a copy.
      rewritten.push_back(capture(in, s.graph_def().nodes[i].name));
      anchored = true;
    }
    if (!anchored) anchor(i, &rewritten);
    s.mutable_graph_def()->nodes[i].inputs = std::move(rewritten);
  }
}

}  // namespace

StatusOr<std::vector<Output>> WhileLoop(const Scope& s, const CondFn& cond, const BodyFn& body,
                                        const std::vector<Output>& loop_vars,
                                        int parallel_iterations) {
  if (loop_vars.empty()) return InvalidArgument("a while loop needs at least one loop variable");
  if (parallel_iterations < 1 || parallel_iterations > kMaxParallelIterations) {
    return InvalidArgument("parallel_iterations must be in [1, " +
                           std::to_string(kMaxParallelIterations) + "], got " +
                           std::to_string(parallel_iterations));
  }
  const size_t n = loop_vars.size();
  const std::string name = AddResultNode(s, "while");
  const Scope w = s.UnderNode(name);
  const size_t start = NumNodes(s);
  auto enter_attrs = [&](bool constant) {
    return AttrMap{{"frame_name", AttrValue(name)},
                   {"is_constant", AttrValue(constant)},
                   {"parallel_iterations", AttrValue(int64_t(parallel_iterations))}};
  };
  std::vector<std::string> enters;
  for (size_t k = 0; k < n; ++k) {
    enters.push_back(w.WithOpName("enter_" + std::to_string(k))
                         .AddNode("Enter", "Enter", {loop_vars[k].name()}, enter_attrs(false)));
  }
  const size_t after_enters = NumNodes(s);
  std::vector<Output> merged;
  for (size_t k = 0; k < n; ++k) {
    merged.push_back(Output(w.WithOpName("merge_" + std::to_string(k))
                                .AddNode("Merge", "Merge",
                                         {enters[k], name + "/next_" + std::to_string(k)}, {})));
  }
  const size_t cond_begin = NumNodes(s);
  const Scope cond_scope = w.NewSubScope("cond");
  FS_ASSIGN_OR_RETURN(Output pred, cond(cond_scope, merged));
  pred = Internalize(cond_scope, cond_begin, {pred})[0];
  Output loop_cond = Output(w.WithOpName("loop_cond").AddNode("LoopCond", "LoopCond", {pred.name()}, {}));
  std::vector<Output> exits, vars;
  for (size_t k = 0; k < n; ++k) {
    const std::string i = std::to_string(k);
    std::string sw = w.WithOpName("switch_" + i).AddNode("Switch", "Switch",
                                                          {merged[k].name(), loop_cond.name()}, {});
    exits.push_back(Output(w.WithOpName("exit_" + i).AddNode("Exit", "Exit", {sw + ":0"}, {})));
    vars.push_back(Identity(w.WithOpName("identity_" + i), Output(sw, 1)));
  }
  const size_t body_begin = NumNodes(s);
  const Scope body_scope = w.NewSubScope("body");
  FS_ASSIGN_OR_RETURN(std::vector<Output> next, body(body_scope, vars));
  if (next.size() != n) {
    return InvalidArgument("the body of while loop '" + name + "' returned " +
                           std::to_string(next.size()) + " value(s) for " + std::to_string(n) +
                           " loop variable(s)",
                           name);
  }
  next = Internalize(body_scope, body_begin, std::move(next));
  for (size_t k = 0; k < n; ++k) {
    w.WithOpName("next_" + std::to_string(k)).AddNode("NextIteration", "NextIteration",
                                                      {next[k].name()}, {});
  }
  const size_t end = NumNodes(s);

  // Tensors from outside enter as loop invariants, once each.
  std::map<std::string, std::string> captured;
  std::vector<std::string> outer_controls;
  auto capture = [&](const std::string& tensor, const std::string& reader) {
    auto it = captured.find(tensor);
    if (it != captured.end()) return it->second;
    AttrMap attrs = enter_attrs(true);
    attrs.emplace("_reader", AttrValue(reader));
    std::string enter = w.WithOpName("capture_" + std::to_string(captured.size()))
                            .AddNode("Enter", "Enter", {tensor}, std::move(attrs));
    captured.emplace(tensor, enter);
    return enter;
  };
  // A Const of the loop is computed once, before it, and enters as a loop
  // invariant under its own name (no kernel runs for it per iteration);
  // other nodes without inputs run once per iteration, after the pivot.
  size_t hoisted = 0;
  auto anchor = [&](size_t index, std::vector<std::string>* inputs) {
    const NodeDef node = s.graph_def().nodes[index];
    if (node.op != "Const") {
      inputs->push_back("^" + (index < body_begin ? merged[0].node : vars[0].node));
      return;
    }
    std::string value = w.WithOpName("invariant_" + std::to_string(hoisted++))
                            .AddNode("Const", "Const", {}, node.attrs);
    s.mutable_graph_def()->nodes.back().device = node.device;
    NodeDef& enter = s.mutable_graph_def()->nodes[index];
    enter.op = "Enter";
    enter.attrs = enter_attrs(true);
    inputs->push_back(value);
  };
  RewriteCaptures(s, start, end, start, after_enters, capture, anchor, &outer_controls);
  if (!outer_controls.empty()) {
    for (NodeDef& node : s.mutable_graph_def()->nodes) {
      if (node.op != "Enter" || node.attrs.count("frame_name") == 0 ||
          node.attrs.at("frame_name").s() != name) {
        continue;
      }
      for (const std::string& c : outer_controls) node.inputs.push_back("^" + c);
    }
  }
  return SetResults(s, name, exits);
}

StatusOr<std::vector<Output>> Cond(const Scope& s, const Output& pred, const BranchFn& then_fn,
                                   const BranchFn& else_fn) {
  const std::string name = AddResultNode(s, "cond");
  const Scope c = s.UnderNode(name);
  const std::string pred_switch =
      c.WithOpName("pred_switch").AddNode("Switch", "Switch", {pred.name(), pred.name()}, {});
  const Output pivots[2] = {Identity(c.WithOpName("pivot_f"), Output(pred_switch, 0)),
                            Identity(c.WithOpName("pivot_t"), Output(pred_switch, 1))};
  std::vector<Output> results[2];
  size_t bounds[2][2];
  const BranchFn* fns[2] = {&else_fn, &then_fn};
  const char* scopes[2] = {"else", "then"};
  for (int branch : {1, 0}) {
    bounds[branch][0] = NumNodes(s);
    const Scope bs = c.NewSubScope(scopes[branch]);
    FS_ASSIGN_OR_RETURN(results[branch], (*fns[branch])(bs));
    results[branch] = Internalize(bs, bounds[branch][0], std::move(results[branch]));
    bounds[branch][1] = NumNodes(s);
  }
  if (results[1].empty() || results[1].size() != results[0].size()) {
    return InvalidArgument("the branches of conditional '" + name + "' return " +
                           std::to_string(results[1].size()) + " (then) and " +
                           std::to_string(results[0].size()) +
                           " (else) values; they must return as many, at least one",
                           name);
  }
  // Tensors from outside reach a branch through a Switch on the predicate,
  // once each; nodes without data inputs run only on their branch.
  for (int branch : {1, 0}) {
    std::map<std::string, std::string> switched;
    auto capture = [&](const std::string& tensor, const std::string& reader) {
      auto it = switched.find(tensor);
      if (it != switched.end()) return it->second;
      std::string sw = c.WithOpName(std::string("switch_") + (branch ? "t_" : "f_") +
                                    std::to_string(switched.size()))
                           .AddNode("Switch", "Switch", {tensor, pred.name()},
                                    {{"_reader", AttrValue(reader)}});
      std::string out = Output(sw, branch).name();
      switched.emplace(tensor, out);
      return out;
    };
    auto anchor = [&](size_t, std::vector<std::string>* inputs) {
      inputs->push_back("^" + pivots[branch].node);
    };
    RewriteCaptures(s, bounds[branch][0], bounds[branch][1], 0, 0, capture, anchor, nullptr);
  }
  std::vector<Output> merged;
  for (size_t k = 0; k < results[1].size(); ++k) {
    merged.push_back(Output(c.WithOpName("merge_" + std::to_string(k))
                                .AddNode("Merge", "Merge",
                                         {results[1][k].name(), results[0][k].name()}, {})));
  }
  return SetResults(s, name, merged);
}

}  // namespace flowstate::ops

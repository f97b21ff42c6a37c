// The gradient of a while loop, as TensorFlow builds it: a graph rewrite
// into a second, backward loop that runs the forward loop's trip count.
//
// Forward loop v_{t+1} = body(v_t, c), t = 0..N-1, results v_N; loop
// invariants c (constant Enters: weights, a fed sequence). Backward:
//   g_N = dL/dv_N;  for t = N-1 down to 0:  (g_t, dc_t) = body's VJP at v_t
//   applied to g_{t+1};  dL/dv_0 = g_0,  dL/dc = sum_t dc_t.
// The VJP is the ordinary backward walk (Backprop) over the body's nodes,
// built inside the backward loop. Where it reads a forward value of the body
// (an activation, the other factor of a MatMul), that value is kept per
// iteration: the forward loop gets an iteration counter and a StackPush of
// the value keyed by (enclosing iterations..., t), the backward loop a
// StackPop of the same key. Where it only reads a value's Shape (Size,
// Rank: broadcasting gradients of dimensions unknown until run time), the
// Shape moves into the forward loop and the small shape is kept instead. A
// read of a loop invariant reads the invariant itself (entered into the
// backward loop once), so weights are never pushed. The counter's increment waits for the iteration's pushes, so
// the counter's Exit (the trip count N, which starts the backward loop)
// comes after every push; each pop frees its value, and the step's end
// frees whatever is left (scheduler/call_frame.h).
//
// Nested loops work the same way one level down: the inner loop's gradient
// is built inside the outer backward loop's body, its trip count and the
// values it pushes keyed by the outer iteration too. A loop inside a
// conditional is dead on the untaken branch, and so is its backward loop.
#include <algorithm>
#include <map>
#include <set>
#include <string>

#include "graph/control_flow_builders.h"
#include "graph/gradients/backprop.h"
#include "graph/op_builders.h"

namespace flowstate::internal {
namespace {

bool IsFloat(DataType t) {
  return t == DataType::kFloat32 || t == DataType::kFloat64 || t == DataType::kFloat16 ||
         t == DataType::kBFloat16;
}

// One loop variable of the canonical structure (ops::WhileLoop's):
// Enter -> Merge(Enter, NextIteration) -> Switch(Merge, LoopCond) ->
// Exit(Switch:0); the body reads Switch:1 and feeds NextIteration.
struct LoopVar {
  int enter = -1, merge = -1, sw = -1, exit = -1, next = -1;
  Endpoint y;  // what NextIteration carries: the body's result
};

struct LoopShape {
  std::string name;  // the frame name
  int loop_cond = -1;
  std::vector<LoopVar> vars;
  std::vector<int> invariants;  // constant Enters
};

Status NotCanonical(const Node& n, const std::string& frame, const std::string& what) {
  return Unimplemented("while loop '" + frame + "': node '" + n.name() + "' (" + n.op() + ") " +
                           what + "; gradients need the loop form that WhileLoop (or a JSON While) "
                           "builds",
                       n.name());
}

StatusOr<LoopShape> ParseLoop(const GradState& st, int frame) {
  const Graph& g = st.g;
  const ControlFlowInfo::Frame& f = st.cf->frames[frame];
  LoopShape shape;
  shape.name = f.name;
  for (int e : f.enters) {
    const Node& enter = g.node(e);
    const AttrValue* c = nullptr;
    auto it = enter.attrs().find("is_constant");
    if (it != enter.attrs().end()) c = &it->second;
    if (c != nullptr && c->b()) {
      shape.invariants.push_back(e);
      continue;
    }
    LoopVar v;
    v.enter = e;
    for (const OutEdge& oe : enter.out_edges()) {
      if (!oe.is_control() && g.node(oe.dst).op() == "Merge") v.merge = oe.dst;
    }
    if (v.merge < 0 || g.node(v.merge).num_inputs() != 2) {
      return NotCanonical(enter, f.name, "does not feed a two-input Merge");
    }
    const Node& merge = g.node(v.merge);
    for (int k = 0; k < 2; ++k) {
      const int src = merge.input(k).node;
      if (src != e && g.node(src).op() == "NextIteration") v.next = src;
    }
    for (const OutEdge& oe : merge.out_edges()) {
      if (!oe.is_control() && oe.src_output == 0 && oe.dst_input == 0 &&
          g.node(oe.dst).op() == "Switch") {
        v.sw = oe.dst;
      }
    }
    if (v.next < 0 || v.sw < 0) {
      return NotCanonical(merge, f.name, "is not fed by a NextIteration or feeds no Switch");
    }
    const Node& sw = g.node(v.sw);
    const int lc = sw.input(1).node;
    if (g.node(lc).op() != "LoopCond" || (shape.loop_cond >= 0 && shape.loop_cond != lc)) {
      return NotCanonical(sw, f.name, "is not switched by the loop's LoopCond");
    }
    shape.loop_cond = lc;
    for (const OutEdge& oe : sw.out_edges()) {
      if (!oe.is_control() && oe.src_output == 0 && g.node(oe.dst).op() == "Exit") v.exit = oe.dst;
    }
    if (v.exit < 0) return NotCanonical(sw, f.name, "has no Exit");
    v.y = g.node(v.next).input(0);
    shape.vars.push_back(v);
  }
  if (shape.vars.empty()) {
    return Unimplemented("while loop '" + f.name + "' has no loop variable", f.name);
  }
  std::set<int> exits;
  for (const LoopVar& v : shape.vars) exits.insert(v.exit);
  for (int x : f.exits) {
    if (!exits.count(x)) return NotCanonical(g.node(x), f.name, "is not the Exit of a loop variable");
  }
  return shape;
}

// Builds forward nodes (run by `build` in scope `s`) and moves them from the
// graph into st->pending, recording the frame their outputs lie in. They run
// on the device the loop asks for (a loop runs on one device).
template <typename F>
std::string AddForward(GradState* st, const Scope& s, int frame, DataType dtype,
                       const std::string& device, F build) {
  GraphDef* def = s.mutable_graph_def();
  const size_t before = def->nodes.size();
  std::string name = build(s);
  for (size_t i = before; i < def->nodes.size(); ++i) {
    if (def->nodes[i].device.empty()) def->nodes[i].device = device;
    st->added[def->nodes[i].name] = GradState::Added{frame, dtype};
    st->pending.push_back(std::move(def->nodes[i]));
  }
  def->nodes.resize(before);
  return name;
}

// The forward loop's iteration counter: its value in the body (t), the
// increment node (whose control inputs the pushes join) and its Exit (N).
struct Counter {
  std::string value, increment, exit;
};

Counter AddCounter(GradState* st, const Scope& fwd, int frame, const LoopShape& shape,
                   const std::string& device) {
  const ControlFlowInfo::Frame& f = st->cf->frames[frame];
  const Graph& g = st->g;
  const int parent = f.parent;
  const std::string anchor = g.node(g.node(shape.vars[0].enter).input(0).node).name();
  const std::string lc = g.node(shape.loop_cond).name();
  Counter c;
  auto add = [&](int in_frame, const std::string& name, const std::string& op,
                 std::vector<std::string> inputs, AttrMap attrs) {
    return AddForward(st, fwd, in_frame, DataType::kInt32, device, [&](const Scope& s) {
      return s.WithOpName(name).AddNode(name, op, std::move(inputs), std::move(attrs));
    });
  };
  const std::string init =
      add(parent, "counter_init", "Const", {"^" + anchor},
          {{"dtype", AttrValue(DataType::kInt32)}, {"value", AttrValue(Tensor::Scalar<int32_t>(0))}});
  const std::string enter =
      add(frame, "counter_enter", "Enter", {init},
          {{"frame_name", AttrValue(f.name)},
           {"is_constant", AttrValue(false)},
           {"parallel_iterations", AttrValue(int64_t(f.parallel_iterations))}});
  const std::string next = add(frame, "counter_next", "NextIteration", {}, {});
  const std::string merge = add(frame, "counter_merge", "Merge", {enter, next}, {});
  const std::string sw = add(frame, "counter_switch", "Switch", {merge, lc}, {});
  c.exit = add(parent, "counter_exit", "Exit", {sw + ":0"}, {});
  c.value = add(frame, "counter", "Identity", {sw + ":1"}, {});
  const std::string one =
      add(frame, "counter_one", "Const", {"^" + c.value},
          {{"dtype", AttrValue(DataType::kInt32)}, {"value", AttrValue(Tensor::Scalar<int32_t>(1))}});
  c.increment = add(frame, "counter_add", "Add", {c.value, one}, {});
  st->FindPending(next)->inputs = {c.increment};
  return c;
}

}  // namespace

Status WhileLoopGrad(GradState* st, const Scope& gs, const Level& outer, int frame,
                     const std::map<int, Gradient>& exit_grads, const std::set<int>& wanted,
                     std::map<int, Gradient>* enter_grads) {
  const Graph& g = st->g;
  FS_ASSIGN_OR_RETURN(LoopShape shape, ParseLoop(*st, frame));
  const ControlFlowInfo::Frame& f = st->cf->frames[frame];
  // Loop variables that carry gradients, and invariants that want one.
  std::vector<int> vars, invariants;
  for (size_t k = 0; k < shape.vars.size(); ++k) {
    if (IsFloat(g.node(shape.vars[k].enter).output_type(0))) vars.push_back(int(k));
  }
  for (int e : shape.invariants) {
    if (wanted.count(e) && IsFloat(g.node(e).output_type(0))) invariants.push_back(e);
  }
  if (vars.empty()) return Status();

  const Scope fwd = gs.UnderNode(shape.name).NewSubScope("grad");
  const std::string device = g.node(shape.vars[0].enter).requested_device();
  const Counter counter = AddCounter(st, fwd, frame, shape, device);

  // The forward keys of this frame: the enclosing ones entered, then t.
  std::vector<Output> fwd_keys;
  for (const Output& k : outer.fwd_keys) {
    fwd_keys.push_back(Output(AddForward(st, fwd, frame, DataType::kInt32, device, [&](const Scope& s) {
      return s.AddNode("key_enter", "Enter", {k.name()},
                       {{"frame_name", AttrValue(f.name)},
                        {"is_constant", AttrValue(true)},
                        {"parallel_iterations", AttrValue(int64_t(f.parallel_iterations))}});
    })));
  }
  fwd_keys.push_back(Output(counter.value));

  Level body_level;
  body_level.frame = frame;
  body_level.fwd_keys = fwd_keys;
  body_level.plumbing.insert(shape.loop_cond);
  for (const LoopVar& v : shape.vars) {
    body_level.plumbing.insert({v.merge, v.sw, v.exit, v.next});
  }

  // Initial values: t = N - 1, each variable's exit gradient, zero sums.
  std::vector<Output> init;
  init.push_back(ops::Sub(gs, Output(counter.exit), ops::Const(gs, int32_t(1))));
  for (int k : vars) {
    auto it = exit_grads.find(shape.vars[k].exit);
    if (it != exit_grads.end() && !it->second.is_none()) {
      init.push_back(Densify(gs, it->second));
    } else {
      init.push_back(ops::ZerosLike(gs, Output(g.node(shape.vars[k].exit).name())));
    }
  }
  for (int e : invariants) {
    const Endpoint& src = g.node(e).input(0);
    init.push_back(ops::ZerosLike(gs, Output(g.node(src.node).name(), src.output)));
  }

  // What the VJP reads of the forward frame becomes a StackPop (or, for an
  // invariant, the invariant's own input).
  auto rewrite = [&](const Scope& s, size_t begin, const std::vector<Output>& bwd_keys) -> Status {
    GraphDef* def = s.mutable_graph_def();
    std::map<std::string, std::string> popped;  // forward tensor (or "Shape(x)") -> pop
    std::vector<std::string> key_names;
    for (const Output& k : bwd_keys) key_names.push_back(k.name());
    // Keeps forward tensor `tensor` per iteration; returns the pop's name.
    auto keep = [&](const std::string& tensor, DataType dtype, const PartialShape& static_shape) {
      std::vector<std::string> push_inputs;
      for (const Output& k : fwd_keys) push_inputs.push_back(k.name());
      push_inputs.push_back(tensor);
      const std::string push = AddForward(st, fwd, frame, dtype, device, [&](const Scope& fs) {
        return fs.AddNode("push", "StackPush", push_inputs, {});
      });
      // The stack is named after its push: unique in the graph, whatever
      // AddGradients calls came before.
      const std::string stack = push;
      st->FindPending(push)->attrs["stack_name"] = AttrValue(stack);
      st->FindPending(counter.increment)->inputs.push_back("^" + push);
      return s.AddNode("pop", "StackPop", key_names,
                       {{"stack_name", AttrValue(stack)},
                        {"elem_type", AttrValue(dtype)},
                        {"shape", AttrValue(static_shape)}});
    };
    auto is_invariant = [&](const Node* n) {
      return n != nullptr && std::find(shape.invariants.begin(), shape.invariants.end(),
                                       n->id()) != shape.invariants.end();
    };
    for (size_t i = begin; i < def->nodes.size(); ++i) {
      const std::vector<std::string> old = def->nodes[i].inputs;  // keep() appends nodes
      const std::string op = def->nodes[i].op;
      // The shape (size, rank) of a forward value: computed in the forward
      // loop and kept instead of the value, which may be large.
      if ((op == "Shape" || op == "Size" || op == "Rank") && !old.empty()) {
        StatusOr<TensorId> id = ParseTensorId(old[0]);
        if (id.ok() && !id->is_control() && st->OutputFrame(id->node) == frame &&
            !is_invariant(g.FindNode(id->node))) {
          const std::string key = op + "(" + old[0] + ")";
          auto p = popped.find(key);
          if (p == popped.end()) {
            const AttrMap attrs = def->nodes[i].attrs;
            auto t = attrs.find("out_type");
            const DataType dtype = t != attrs.end() ? t->second.type() : DataType::kInt32;
            const std::string moved = AddForward(st, fwd, frame, dtype, device, [&](const Scope& fs) {
              return fs.AddNode(op, op, {old[0]}, attrs);
            });
            p = popped.emplace(key, keep(moved, dtype, PartialShape::Unknown())).first;
          }
          NodeDef& n = def->nodes[i];
          n.op = "Identity";
          n.attrs.clear();
          n.inputs = {p->second};
          for (size_t k = 1; k < old.size(); ++k) {
            StatusOr<TensorId> c = ParseTensorId(old[k]);
            if (c.ok() && st->OutputFrame(c->node) != frame) n.inputs.push_back(old[k]);
          }
          continue;
        }
      }
      std::vector<std::string> inputs;
      for (const std::string& in : old) {
        StatusOr<TensorId> id = ParseTensorId(in);
        if (!id.ok() || st->OutputFrame(id->node) != frame) {
          inputs.push_back(in);
          continue;
        }
        if (id->is_control()) continue;  // the forward node runs anyway
        const Node* n = g.FindNode(id->node);
        if (is_invariant(n)) {
          const Endpoint& src = n->input(0);
          inputs.push_back(Output(g.node(src.node).name(), src.output).name());
          continue;
        }
        auto p = popped.find(in);
        if (p == popped.end()) {
          const bool original = n != nullptr;
          p = popped
                  .emplace(in, keep(in,
                                    original ? n->output_type(id->index)
                                             : st->added.at(id->node).dtype,
                                    original ? n->output_shape(id->index)
                                             : PartialShape::Unknown()))
                  .first;
        }
        inputs.push_back(p->second);
      }
      def->nodes[i].inputs = std::move(inputs);
    }
    return Status();
  };

  const int nv = int(vars.size());
  auto cond = [&](const Scope& s, const std::vector<Output>& v) -> StatusOr<Output> {
    return ops::GreaterEqual(s, v[0], ops::Const(s, int32_t(0)));
  };
  auto body = [&](const Scope& s, const std::vector<Output>& v) -> StatusOr<std::vector<Output>> {
    const size_t begin = s.graph_def().nodes.size();
    Level level = body_level;
    level.bwd_keys = outer.bwd_keys;
    level.bwd_keys.push_back(v[0]);
    std::vector<std::pair<Endpoint, Gradient>> seeds;
    std::vector<Endpoint> xs;
    for (int i = 0; i < nv; ++i) {
      seeds.push_back({shape.vars[vars[i]].y, Gradient::Dense(v[1 + i])});
      xs.push_back(Endpoint{shape.vars[vars[i]].sw, 1});
    }
    for (int e : invariants) xs.push_back(Endpoint{e, 0});
    std::vector<Gradient> grads;
    FS_RETURN_IF_ERROR(Backprop(st, s, level, std::move(seeds), xs, &grads));
    std::vector<Output> next;
    next.push_back(ops::Sub(s, v[0], ops::Const(s, int32_t(1))));
    for (int i = 0; i < nv; ++i) {
      next.push_back(grads[i].is_none() ? ops::ZerosLike(s, v[1 + i]) : Densify(s, grads[i]));
    }
    for (size_t j = 0; j < invariants.size(); ++j) {
      const Output acc = v[1 + nv + j];
      const Gradient& gj = grads[nv + j];
      next.push_back(gj.is_none() ? acc : ops::Add(s, acc, Densify(s, gj)));
    }
    FS_RETURN_IF_ERROR(rewrite(s, begin, level.bwd_keys));
    return next;
  };
  FS_ASSIGN_OR_RETURN(std::vector<Output> results,
                      ops::WhileLoop(gs.WithOpName(shape.name), cond, body, init,
                                     f.parallel_iterations));
  // The initial values read the forward loop's results from outside it.
  for (int i = 0; i < nv; ++i) {
    const int e = shape.vars[vars[i]].enter;
    if (wanted.count(e)) (*enter_grads)[e] = Gradient::Dense(results[1 + i]);
  }
  for (size_t j = 0; j < invariants.size(); ++j) {
    (*enter_grads)[invariants[j]] = Gradient::Dense(results[1 + nv + j]);
  }
  return Status();
}

}  // namespace flowstate::internal

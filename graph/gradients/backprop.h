// Internal to graph/: the backward walk behind AddGradients, shared with the
// while-loop gradient (while_grad.cc), which runs it again over a loop's
// body inside the backward loop it builds.
//
// A walk covers one "level": the nodes of one frame (the root frame, or a
// loop's body), each loop nested in that frame standing as one unit (its
// Enters, its nodes, its Exits). Units are visited in reverse topological
// order; a node gets its registered gradient function, a loop gets
// WhileLoopGrad. Forward nodes a loop's gradient adds (an iteration counter,
// the StackPush of each value its backward loop needs) are kept aside in
// GradState::pending and appended to the graph at the end of AddGradients,
// so that they never fall inside the node range of a backward loop while
// the WhileLoop builder rewrites that range. Not thread-safe: one
// AddGradients call owns its GradState.
#ifndef FLOWSTATE_GRAPH_GRADIENTS_BACKPROP_H_
#define FLOWSTATE_GRAPH_GRADIENTS_BACKPROP_H_

#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "graph/control_flow.h"
#include "graph/gradients.h"

namespace flowstate::internal {

struct GradState {
  GradState(const Graph& graph, const GradientOptions& opts, std::string loss)
      : g(graph), cf(graph.control_flow()), options(opts), loss_name(std::move(loss)) {}

  const Graph& g;                 // the forward graph as AddGradients found it
  const ControlFlowInfo* cf;      // null when the graph has no control flow
  const GradientOptions& options;
  std::string loss_name;
  std::map<int, int> enter_child;  // Enter node id -> index of the frame it enters

  // Forward nodes added by loop gradients, appended at the end.
  std::vector<NodeDef> pending;
  struct Added {
    int frame = 0;  // the frame their output lies in
    DataType dtype = DataType::kInt32;
  };
  std::map<std::string, Added> added;

  // The frame that output `node` (a forward node, original or added) lies in.
  int OutputFrame(const std::string& node) const;
  NodeDef* FindPending(const std::string& name);
};

// One level of the walk: the nodes of `frame` less `plumbing` (a loop's
// Merge, Switch, Exit, NextIteration and LoopCond nodes), loops nested in it
// as units. For a loop body, fwd_keys are the forward frame's iteration
// numbers (enclosing loops first, int32 scalars in that frame) and bwd_keys
// the same numbers in the backward frame being built.
struct Level {
  int frame = 0;
  std::set<int> plumbing;
  std::vector<Output> fwd_keys, bwd_keys;
};

// The gradients of the tensors `xs` given the gradients `seeds` flowing into
// tensors of the level. Nodes go under scope `gs`.
Status Backprop(GradState* st, const Scope& gs, const Level& level,
                std::vector<std::pair<Endpoint, Gradient>> seeds, const std::vector<Endpoint>& xs,
                std::vector<Gradient>* grads);

// The gradient of the loop of frame `frame` (nested in `outer`'s frame):
// given the gradients of its Exits (by node id), fills (*enter_grads)[id]
// for each Enter id in `wanted` whose input gets a gradient. UNIMPLEMENTED,
// naming the node, for a loop not of the form ops::WhileLoop builds.
Status WhileLoopGrad(GradState* st, const Scope& gs, const Level& outer, int frame,
                     const std::map<int, Gradient>& exit_grads, const std::set<int>& wanted,
                     std::map<int, Gradient>* enter_grads);

// The dense form of a gradient (sparse rows summed into zeros).
Output Densify(const Scope& s, const Gradient& g);

}  // namespace flowstate::internal

#endif  // FLOWSTATE_GRAPH_GRADIENTS_BACKPROP_H_

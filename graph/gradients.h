// Symbolic differentiation: gradients are added to the graph as ordinary
// ops, so the executor knows nothing about them.
//
// Each differentiable op registers a gradient function that, given the
// gradients flowing into its outputs, emits the ops computing the gradients
// of its inputs (graph/gradients/*.cc, one small function per op, as in
// TensorFlow's cc/gradients). AddGradients walks back from a loss to the
// requested tensors, summing gradients where a tensor fans out, skipping
// nodes that do not lie between the two, stopping at StopGradient and at
// integer and boolean tensors, and failing — naming the node and op — when
// an op on the path has no gradient. Gradients of Gather stay sparse: rows
// (indices, values) of a tensor of known dense shape, so that embedding
// updates touch only the rows used. A while loop is differentiated as a
// whole, into a backward loop (graph/gradients/while_grad.cc); doing so also
// adds forward nodes to the loop (an iteration counter, a StackPush of each
// value the backward loop needs), so AddGradients changes the forward graph
// of a loop on the path, never its results.
//
// The registry is filled once on first use and read-only afterwards (except
// Override, which callers must not race with AddGradients).
#ifndef FLOWSTATE_GRAPH_GRADIENTS_H_
#define FLOWSTATE_GRAPH_GRADIENTS_H_

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "graph/graph.h"
#include "graph/mutex.h"
#include "graph/scope.h"
#include "graph/status.h"

namespace flowstate {

// A gradient: dense, sparse rows, or none (the tensor does not affect the
// loss).
struct Gradient {
  Output dense;  // set for a dense gradient
  // Sparse rows: gradient[indices[i], ...] += values[i, ...] of a tensor
  // whose shape is the vector dense_shape.
  Output indices, values, dense_shape;
  bool is_sparse = false;

  bool is_none() const { return !is_sparse && dense.node.empty(); }
  static Gradient Dense(Output o) {
    Gradient g;
    g.dense = std::move(o);
    return g;
  }
  static Gradient None() { return Gradient(); }
};

// What a gradient function sees of one forward node.
class GradContext {
 public:
  GradContext(const Scope& scope, const Graph& graph, const Node& node,
              std::vector<Gradient> output_grads);

  // Where to add nodes (named under "gradients/<node>/").
  const Scope& scope() const { return scope_; }
  const Node& node() const { return node_; }
  const Graph& graph() const { return graph_; }
  // The forward node's inputs and outputs as tensors.
  Output input(int i) const;
  Output output(int i) const;
  // The dense gradient flowing into output i; a zeros tensor of the
  // output's shape when none flows (materialized on demand).
  Output grad(int i);
  bool has_grad(int i) const { return !output_grads_[i].is_none(); }
  const Gradient& raw_grad(int i) const { return output_grads_[i]; }

 private:
  Scope scope_;
  const Graph& graph_;
  const Node& node_;
  std::vector<Gradient> output_grads_;
};

// Fills *input_grads (sized to the node's inputs; leave an entry None when
// that input gets no gradient).
using GradFunc = std::function<Status(GradContext* ctx, std::vector<Gradient>* input_grads)>;

class GradientRegistry {
 public:
  static GradientRegistry* Global();

  // ALREADY_EXISTS when `op` has one.
  Status Register(const std::string& op, GradFunc fn);
  // Ops whose outputs do not depend differentiably on their inputs (Shape,
  // comparisons, ArgMax, ...): gradients stop there without an error.
  void RegisterNonDifferentiable(const std::string& op);
  // Replaces (or sets) the gradient of `op` process-wide.
  void Override(const std::string& op, GradFunc fn);

  const GradFunc* Find(const std::string& op) const;
  bool IsNonDifferentiable(const std::string& op) const;
  std::vector<std::string> Ops() const;

 private:
  mutable Mutex mu_;
  std::map<std::string, GradFunc> funcs_;
  std::map<std::string, bool> non_differentiable_;
};

struct GradientOptions {
  // Per-call gradient functions by op name, taking precedence over the
  // registry ("users can override an op's gradient by name").
  std::map<std::string, GradFunc> overrides;
  // Name prefix of the added nodes.
  std::string prefix = "gradients";
};

// Adds the gradients of `loss` with respect to each of `xs` to the graph of
// `scope` (which must contain the loss's graph). A non-scalar loss is summed.
// (*grads)[i] is None when xs[i] does not affect the loss. Errors name the
// node: an op on the path without a gradient (UNIMPLEMENTED), a loss that is
// not floating point (INVALID_ARGUMENT), or an invalid graph.
Status AddGradients(const Scope& scope, const Output& loss, const std::vector<Output>& xs,
                    std::vector<Gradient>* grads, const GradientOptions& options = {});

// The gradients of tensor `y` with respect to tensors `xs` ("w", "lstm:1")
// of a whole graph, as the nodes to add to it: what a client that builds
// its graph itself asks the server for (POST /v1/gradients; the Python
// package's Graph.gradients). `added` holds only new nodes, named under
// `prefix` (made unique: "gradients", "gradients_1", ... when the graph
// already has nodes under it), so the client appends them to its graph
// and to any session running it (an extend). Errors name the node or the
// field: `graph` invalid as Graph::Create says, `y`/`xs` that name no
// tensor (NOT_FOUND, "xs[1]: ..."), AddGradients' own; UNIMPLEMENTED when
// the gradient runs through a loop, whose differentiation changes the
// loop's own nodes (a job's training graph does that on the server).
struct GraphGradients {
  GraphDef added;
  std::vector<Gradient> grads;  // one per x, None when x does not affect y
  std::string prefix;           // the prefix used
};
StatusOr<GraphGradients> GradientsOfGraph(const GraphDef& graph, const std::string& y,
                                          const std::vector<std::string>& xs,
                                          const std::string& prefix = "gradients");

namespace internal {
// Registration functions of graph/gradients/*.cc.
void RegisterMathGradients(GradientRegistry* r);
void RegisterArrayGradients(GradientRegistry* r);
void RegisterNnGradients(GradientRegistry* r);
void RegisterControlFlowGradients(GradientRegistry* r);
}  // namespace internal

}  // namespace flowstate

#endif  // FLOWSTATE_GRAPH_GRADIENTS_H_

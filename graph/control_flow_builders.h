// Builders of conditionals and loops over the raw control-flow ops
// (graph/op_defs/control_flow_defs.cc), in TensorFlow's style:
//
//   Scope root;
//   Output n = ops::Placeholder(root.WithOpName("n"), DataType::kInt32);
//   StatusOr<std::vector<Output>> r = ops::WhileLoop(
//       root.WithOpName("sum"),
//       [&](const Scope& s, const std::vector<Output>& v) -> StatusOr<Output> {
//         return ops::LessEqual(s, v[0], n);            // n is captured
//       },
//       [&](const Scope& s, const std::vector<Output>& v) -> StatusOr<std::vector<Output>> {
//         return std::vector<Output>{ops::Add(s, v[0], ops::Const(s, 1)),
//                                    ops::Add(s, v[1], v[0])};
//       },
//       {ops::Const(root, 1), ops::Const(root, 0)});
//   // (*r)[1] is 1 + 2 + ... + n
//
// The functions build nodes into the scopes they are given. A tensor built
// outside may be used inside: a loop reads it through a constant Enter (a
// loop invariant), a branch through a Switch on the predicate. A Const made
// in a loop's functions becomes a constant Enter of that name reading a
// Const made before the loop ("<name>/invariant_0", ...), so no kernel runs
// for it per iteration; another node without inputs in a loop, or any in a
// branch, gets a control input that runs it once per iteration, or only on
// its branch. Control inputs from
// outside a loop on nodes inside it become control inputs of the loop's
// Enters. The scope's op name (default "while", "cond", made unique) names
// an IdentityN node whose outputs are the results; the other nodes lie
// under it: "<name>/cond/...", "<name>/body/...", "<name>/then/...",
// "<name>/else/..." for the functions' nodes, "<name>/enter_0",
// "<name>/merge_0", ... for the plumbing. An error returned by a function
// is returned as is; the graph then holds a partial loop and should be
// dropped. Not thread-safe (as Scope).
#ifndef FLOWSTATE_GRAPH_CONTROL_FLOW_BUILDERS_H_
#define FLOWSTATE_GRAPH_CONTROL_FLOW_BUILDERS_H_

#include <functional>
#include <vector>

#include "graph/scope.h"
#include "graph/status.h"

namespace flowstate::ops {

using CondFn = std::function<StatusOr<Output>(const Scope&, const std::vector<Output>& vars)>;
using BodyFn =
    std::function<StatusOr<std::vector<Output>>(const Scope&, const std::vector<Output>& vars)>;
using BranchFn = std::function<StatusOr<std::vector<Output>>(const Scope&)>;

// Runs body while cond holds, starting from loop_vars; returns the final
// values. Up to parallel_iterations iterations run at once. The body must
// return one tensor per loop variable, of its dtype (checked when the graph
// is validated). INVALID_ARGUMENT for no loop variables, a count mismatch
// or parallel_iterations outside [1, kMaxParallelIterations] (65536).
StatusOr<std::vector<Output>> WhileLoop(const Scope& s, const CondFn& cond, const BodyFn& body,
                                        const std::vector<Output>& loop_vars,
                                        int parallel_iterations = 10);

// then_fn's results when `pred` (a scalar bool) is true, else else_fn's;
// only the taken branch runs. The branches must return as many tensors,
// pairwise of one dtype. INVALID_ARGUMENT when they return none or differ
// in number.
StatusOr<std::vector<Output>> Cond(const Scope& s, const Output& pred, const BranchFn& then_fn,
                                   const BranchFn& else_fn);

}  // namespace flowstate::ops

#endif  // FLOWSTATE_GRAPH_CONTROL_FLOW_BUILDERS_H_

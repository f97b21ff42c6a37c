// Internal helpers shared by the gradient functions of graph/gradients/.
#ifndef FLOWSTATE_GRAPH_GRADIENTS_GRAD_UTIL_H_
#define FLOWSTATE_GRAPH_GRADIENTS_GRAD_UTIL_H_

#include <vector>

#include "graph/gradients.h"
#include "graph/op_builders.h"

namespace flowstate::internal {

// A scalar constant of the dtype of forward tensor `like`.
Output ScalarLike(GradContext* ctx, DataType dtype, double v);
// Shape of a forward tensor: a Const when it is fully known, else Shape(x).
Output ShapeOf(GradContext* ctx, const Output& x, const PartialShape& known);
// Shape of the forward node's input i.
Output InputShape(GradContext* ctx, int i);
// Sums `g` (shaped like the node's output 0) down to the shape of input i,
// undoing NumPy broadcasting. Static when the shapes settle it, else via
// BroadcastGradientArgs at run time.
Output Unbroadcast(GradContext* ctx, const Output& g, int i);

// Sums g over `axes` (an int32 vector computed at run time, possibly empty,
// which then means "no axis") and reshapes the result to `shape`.
Output SumToShape(const Scope& s, const Output& g, const Output& axes, const Output& shape);
// The input's shape with the reduced axes set to 1, for a reduction node
// whose input 1 holds the axes.
Output KeptShape(GradContext* ctx);

}  // namespace flowstate::internal

#endif  // FLOWSTATE_GRAPH_GRADIENTS_GRAD_UTIL_H_

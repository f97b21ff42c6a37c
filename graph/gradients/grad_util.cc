#include "graph/gradients/grad_util.h"

namespace flowstate::internal {

Output ScalarLike(GradContext* ctx, DataType dtype, double v) {
  if (dtype == DataType::kFloat64) return ops::Const(ctx->scope(), v);
  if (dtype == DataType::kFloat32) return ops::Const(ctx->scope(), float(v));
  return ops::Cast(ctx->scope(), ops::Const(ctx->scope(), float(v)), dtype);
}

Output ShapeOf(GradContext* ctx, const Output& x, const PartialShape& known) {
  if (known.IsFullyDefined()) {
    std::vector<int32_t> dims(known.dims().begin(), known.dims().end());
    return ops::Const(ctx->scope(), dims);
  }
  return ops::Shape(ctx->scope(), x);
}

Output InputShape(GradContext* ctx, int i) {
  const Endpoint& e = ctx->node().input(i);
  return ShapeOf(ctx, ctx->input(i), ctx->graph().node(e.node).output_shape(e.output));
}

namespace {

// The axes to sum for input i, when they are certain before running.
std::optional<std::vector<int32_t>> StaticReduceAxes(GradContext* ctx, int i, bool* reshape) {
  const Node& n = ctx->node();
  auto shape_of = [&](int k) {
    const Endpoint& e = n.input(k);
    return ctx->graph().node(e.node).output_shape(e.output);
  };
  PartialShape xi = shape_of(i);
  const PartialShape& out = n.output_shape(0);
  if (!xi.rank_known() || !out.rank_known() || xi.rank() > out.rank()) return std::nullopt;
  std::vector<PartialShape> others;
  for (int k = 0; k < n.num_inputs(); ++k) {
    if (k == i) continue;
    if (!shape_of(k).rank_known()) return std::nullopt;
    others.push_back(shape_of(k));
  }
  const int rank = out.rank(), lead = rank - xi.rank();
  std::vector<int32_t> axes;
  *reshape = false;
  for (int p = 0; p < rank; ++p) {
    if (p < lead) {
      axes.push_back(p);
      continue;
    }
    int64_t d = xi.dim(p - lead), o = out.dim(p);
    if (d >= 0 && d != 1) continue;  // a real dimension: never broadcast
    if (d == 1) {
      if (o == 1) continue;
      if (o > 1) {
        axes.push_back(p);
        *reshape = true;
        continue;
      }
      return std::nullopt;  // output dim unknown
    }
    // d unknown: certain only when every other operand has 1 (or nothing) here.
    for (const PartialShape& s : others) {
      int q = p - (rank - s.rank());
      if (q >= 0 && s.dim(q) != 1) return std::nullopt;
    }
  }
  return axes;
}

}  // namespace

Output SumToShape(const Scope& s, const Output& g, const Output& axes, const Output& shape) {
  // axes may be empty at run time (nothing was broadcast), and an empty axis
  // list reduces every axis. Prepending a unit axis and always reducing it
  // keeps the list non-empty without changing the sum.
  Output g1 = ops::ExpandDims(s, g, 0);
  Output shifted = ops::Concat(s, {ops::Const(s, std::vector<int32_t>{0}),
                                   ops::Add(s, axes, ops::Const(s, int32_t(1)))}, 0);
  return ops::Reshape(s, ops::Sum(s, g1, shifted, false), shape);
}

Output Unbroadcast(GradContext* ctx, const Output& g, int i) {
  const Scope& s = ctx->scope();
  bool reshape = false;
  std::optional<std::vector<int32_t>> axes = StaticReduceAxes(ctx, i, &reshape);
  if (axes) {
    if (axes->empty()) return g;
    Output sum = ops::Sum(s, g, *axes, false);
    return reshape ? ops::Reshape(s, sum, InputShape(ctx, i)) : sum;
  }
  Output sx = ops::Shape(s, ctx->input(i));
  Output sz = ops::Shape(s, ctx->output(0));
  Output r = ops::Generic(s, "BroadcastGradientArgs", {sx, sz}, {}, 2)[0];
  return SumToShape(s, g, r, sx);
}

Output KeptShape(GradContext* ctx) {
  const Node& n = ctx->node();
  const Endpoint& in = n.input(0);
  const PartialShape& xs = ctx->graph().node(in.node).output_shape(in.output);
  const Node& axes_node = ctx->graph().node(n.input(1).node);
  if (xs.IsFullyDefined() && axes_node.op() == "Const") {
    const Tensor& t = axes_node.attrs().at("value").tensor();
    std::vector<int32_t> kept(xs.dims().begin(), xs.dims().end());
    int rank = int(kept.size());
    if (t.num_elements() == 0) {
      for (auto& d : kept) d = 1;
    }
    for (int64_t k = 0; k < t.num_elements(); ++k) {
      int64_t a = int64_t(t.ElementAsDouble(k));
      if (a < 0) a += rank;
      if (a >= 0 && a < rank) kept[a] = 1;
    }
    return ops::Const(ctx->scope(), kept);
  }
  return ops::Generic(ctx->scope(), "ReducedShape", {ops::Shape(ctx->scope(), ctx->input(0)), ctx->input(1)})[0];
}

}  // namespace flowstate::internal

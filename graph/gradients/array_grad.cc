// Gradients of ops that move elements: reshapes, transposes, slices,
// concatenation, gathers (sparse), tiles and broadcasts.
#include "graph/gradients/grad_util.h"

namespace flowstate::internal {
namespace {

using G = std::vector<Gradient>;

// A sparse gradient passes through as it is (a variable read through an
// Identity and then gathered keeps sparse updates).
Status IdentityGrad(GradContext* c, G* in) {
  (*in)[0] = c->raw_grad(0).is_sparse ? c->raw_grad(0) : Gradient::Dense(c->grad(0));
  return Status();
}

// Reshape, ExpandDims, Squeeze: the gradient takes the input's shape back.
Status ReshapeGrad(GradContext* c, G* in) {
  (*in)[0] = Gradient::Dense(ops::Reshape(c->scope(), c->grad(0), InputShape(c, 0)));
  return Status();
}

Status TransposeGrad(GradContext* c, G* in) {
  const Scope& s = c->scope();
  const Node& perm_node = c->graph().node(c->node().input(1).node);
  if (perm_node.op() == "Const") {
    const Tensor& p = perm_node.attrs().at("value").tensor();
    std::vector<int32_t> inv(p.num_elements());
    for (int64_t i = 0; i < p.num_elements(); ++i) inv[int64_t(p.ElementAsDouble(i))] = int32_t(i);
    (*in)[0] = Gradient::Dense(ops::Transpose(s, c->grad(0), inv));
  } else {
    Output inv = ops::Generic(s, "InvertPermutation", {c->input(1)})[0];
    (*in)[0] = Gradient::Dense(ops::Transpose(s, c->grad(0), inv));
  }
  return Status();
}

Status ConcatGrad(GradContext* c, G* in) {
  const Scope& s = c->scope();
  const int n = c->node().num_inputs() - 1;
  Output axis = c->input(n);
  if (c->node().input_type(n) != DataType::kInt32) axis = ops::Cast(s, axis, DataType::kInt32);
  std::vector<Output> shapes;
  for (int i = 0; i < n; ++i) shapes.push_back(ops::Shape(s, c->input(i)));
  std::vector<Output> args{axis};
  args.insert(args.end(), shapes.begin(), shapes.end());
  std::vector<Output> offsets = ops::Generic(s, "ConcatOffset", args, {}, n);
  Output g = c->grad(0);
  for (int i = 0; i < n; ++i) (*in)[i] = Gradient::Dense(ops::Slice(s, g, offsets[i], shapes[i]));
  return Status();
}

Status SplitGrad(GradContext* c, G* in) {
  std::vector<Output> parts;
  for (int i = 0; i < c->node().num_outputs(); ++i) parts.push_back(c->grad(i));
  (*in)[1] = Gradient::Dense(ops::Concat(c->scope(), parts, c->input(0)));
  return Status();
}

Status SliceGrad(GradContext* c, G* in) {
  const Scope& s = c->scope();
  DataType index = c->node().input_type(1);
  Output shape = ops::Shape(s, c->input(0), index);
  Output begin = c->input(1);
  Output end = ops::Add(s, begin, ops::Shape(s, c->output(0), index));
  Output strides = ops::OnesLike(s, begin);
  (*in)[0] = Gradient::Dense(
      ops::Generic(s, "StridedSliceGrad", {shape, begin, end, strides, c->grad(0)})[0]);
  return Status();
}

Status StridedSliceGrad(GradContext* c, G* in) {
  const Scope& s = c->scope();
  DataType index = c->node().input_type(1);
  AttrMap masks;
  for (const char* m : {"begin_mask", "end_mask", "ellipsis_mask", "new_axis_mask",
                        "shrink_axis_mask"}) {
    masks[m] = c->node().attrs().at(m);
  }
  Output shape = ops::Shape(s, c->input(0), index);
  (*in)[0] = Gradient::Dense(ops::Generic(
      s, "StridedSliceGrad", {shape, c->input(1), c->input(2), c->input(3), c->grad(0)}, masks)[0]);
  return Status();
}

// Along an axis a > 0 (dense): the gradient's index dimensions go first,
// flattened, are summed into the rows they came from (UnsortedSegmentSum
// over params' dimension a), and the dimensions go back to params' order.
// Needs the ranks of params and indices.
Status GatherGradAlongAxis(GradContext* c, int64_t axis, G* in) {
  const Scope& s = c->scope();
  const Endpoint& pe = c->node().input(0);
  const Endpoint& ie = c->node().input(1);
  const PartialShape& ps = c->graph().node(pe.node).output_shape(pe.output);
  const PartialShape& is = c->graph().node(ie.node).output_shape(ie.output);
  if (!ps.rank_known() || !is.rank_known()) {
    return Unimplemented("the gradient of Gather along axis " + std::to_string(axis) +
                         " needs the ranks of params and indices");
  }
  const int r = ps.rank(), q = is.rank();
  const int a = int(axis < 0 ? axis + r : axis);
  // grad: params[:a] + indices + params[a+1:]  ->  indices + params[:a] + params[a+1:]
  std::vector<int32_t> perm;
  for (int i = 0; i < q; ++i) perm.push_back(a + i);
  for (int i = 0; i < a; ++i) perm.push_back(i);
  for (int i = a + q; i < r - 1 + q; ++i) perm.push_back(i);
  Output g = ops::Transpose(s, c->grad(0), perm);
  Output rest = ops::StridedSlice(s, ops::Shape(s, g), std::vector<int32_t>{q}, std::vector<int32_t>{0},
                                  std::vector<int32_t>{1}, ops::StridedSliceAttrs{0, 1, 0, 0, 0});
  g = ops::Reshape(s, g, ops::Concat(s, {ops::Const(s, std::vector<int32_t>{-1}), rest}, 0));
  Output rows = ops::StridedSlice(s, ops::Shape(s, c->input(0)), std::vector<int32_t>{a},
                                  std::vector<int32_t>{a + 1}, std::vector<int32_t>{1},
                                  ops::StridedSliceAttrs{0, 0, 0, 0, 1});
  Output indices = ops::Reshape(s, c->input(1), std::vector<int32_t>{-1});
  Output sum = ops::Generic(s, "UnsortedSegmentSum", {g, indices, rows})[0];
  // sum: params[a] + params[:a] + params[a+1:]  ->  params' order
  std::vector<int32_t> back;
  for (int j = 0; j < r; ++j) back.push_back(j < a ? j + 1 : j == a ? 0 : j);
  (*in)[0] = Gradient::Dense(ops::Transpose(s, sum, back));
  return Status();
}

// Sparse rows: only the gathered rows of params receive gradient.
Status GatherGrad(GradContext* c, G* in) {
  const Scope& s = c->scope();
  const int64_t axis = c->node().attrs().at("axis").i();
  Output params = c->input(0);
  const Endpoint& pe = c->node().input(0);
  const PartialShape& ps = c->graph().node(pe.node).output_shape(pe.output);
  if (axis != 0 && !(ps.rank_known() && axis == -ps.rank())) return GatherGradAlongAxis(c, axis, in);
  Output values_shape;
  if (ps.IsFullyDefined()) {
    std::vector<int32_t> dims{-1};
    for (int d = 1; d < ps.rank(); ++d) dims.push_back(int32_t(ps.dim(d)));
    values_shape = ops::Const(s, dims);
  } else {
    Output inner = ops::StridedSlice(s, ops::Shape(s, params), std::vector<int32_t>{1},
                                     std::vector<int32_t>{0}, std::vector<int32_t>{1},
                                     ops::StridedSliceAttrs{0, 1, 0, 0, 0});
    values_shape = ops::Concat(s, {ops::Const(s, std::vector<int32_t>{-1}), inner}, 0);
  }
  Gradient g;
  g.is_sparse = true;
  g.indices = ops::Reshape(s, c->input(1), std::vector<int32_t>{-1});
  g.values = ops::Reshape(s, c->grad(0), values_shape);
  g.dense_shape = ShapeOf(c, params, ps);
  (*in)[0] = g;
  return Status();
}

// Each data input gets the rows of the gradient at its indices (the
// indices are taken as distinct, as the routing of a partitioned lookup
// makes them).
Status DynamicStitchGrad(GradContext* c, G* in) {
  const int n = c->node().num_inputs() / 2;
  for (int i = 0; i < n; ++i) {
    (*in)[n + i] = Gradient::Dense(ops::Gather(c->scope(), c->grad(0), c->input(i)));
  }
  return Status();
}

Status TileGrad(GradContext* c, G* in) {
  (*in)[0] = Gradient::Dense(ops::Generic(c->scope(), "TileGrad", {c->input(1), c->grad(0)})[0]);
  return Status();
}

Status BroadcastToGrad(GradContext* c, G* in) {
  (*in)[0] = Gradient::Dense(Unbroadcast(c, c->grad(0), 0));
  return Status();
}

Status FillGrad(GradContext* c, G* in) {
  (*in)[1] = Gradient::Dense(ops::Sum(c->scope(), c->grad(0), std::vector<int32_t>{}));
  return Status();
}

void Must(GradientRegistry* r, const char* op, GradFunc f) { r->Register(op, std::move(f)).CheckOk(); }

}  // namespace

void RegisterArrayGradients(GradientRegistry* r) {
  Must(r, "Identity", IdentityGrad);
  Must(r, "Reshape", ReshapeGrad);
  Must(r, "ExpandDims", ReshapeGrad);
  Must(r, "Squeeze", ReshapeGrad);
  Must(r, "Transpose", TransposeGrad);
  Must(r, "Concat", ConcatGrad);
  Must(r, "Split", SplitGrad);
  Must(r, "Slice", SliceGrad);
  Must(r, "StridedSlice", StridedSliceGrad);
  Must(r, "Gather", GatherGrad);
  Must(r, "Tile", TileGrad);
  Must(r, "DynamicStitch", DynamicStitchGrad);
  Must(r, "BroadcastTo", BroadcastToGrad);
  Must(r, "Fill", FillGrad);
  for (const char* op : {"Const", "Placeholder", "ZerosLike", "OnesLike", "Shape", "Size", "Rank",
                         "Range", "RandomUniform", "RandomNormal", "TruncatedNormal",
                         "BroadcastGradientArgs", "ReducedShape", "ConcatOffset",
                         "InvertPermutation", "IsVariableInitialized", "PartitionIds"}) {
    r->RegisterNonDifferentiable(op);
  }
}

}  // namespace flowstate::internal

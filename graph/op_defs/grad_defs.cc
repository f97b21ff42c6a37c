// Ops that gradient functions emit: reductions undoing broadcasts, the
// inverse of slicing and concatenation, sparse-to-dense rows.
#include "graph/op_defs/register_defs.h"
#include "graph/strided_slice.h"

namespace flowstate::internal {
namespace {

using shape_fns::ConstantIntVector;

Status BroadcastToShape(InferenceContext* c) {
  auto dims = ConstantIntVector(c, 1);
  if (!dims) {
    const PartialShape& s = c->input(1);
    c->set_output(0, s.rank_known() && s.dim(0) >= 0 ? PartialShape::UnknownOfRank(int(s.dim(0)))
                                                     : PartialShape::Unknown());
    return Status();
  }
  PartialShape target(*dims);
  StatusOr<PartialShape> b = shape_fns::Broadcast(c->input(0), target);
  if (!b.ok() || !(b->IsCompatibleWith(target) && b->rank() == target.rank())) {
    return c->Error("cannot broadcast " + c->input(0).ToString() + " to " + target.ToString());
  }
  c->set_output(0, target);
  return Status();
}

Status SegmentSumShape(InferenceContext* c) {
  const PartialShape& data = c->input(0);
  const PartialShape& ids = c->input(1);
  const Tensor* n = c->input_tensor(2);
  if (!data.rank_known() || !ids.rank_known()) return shape_fns::Unknown(c);
  if (ids.rank() > data.rank()) return c->Error("segment_ids has a higher rank than data");
  std::vector<int64_t> out{n ? int64_t(n->ElementAsDouble(0)) : -1};
  out.insert(out.end(), data.dims().begin() + ids.rank(), data.dims().end());
  c->set_output(0, PartialShape(std::move(out)));
  return Status();
}

Status StridedSliceGradShape(InferenceContext* c) {
  auto dims = ConstantIntVector(c, 0);
  c->set_output(0, dims ? PartialShape(*dims) : PartialShape::Unknown());
  return Status();
}

}  // namespace

void RegisterGradOps(OpRegistry* r) {
  MustRegister(r, OpDefBuilder("BroadcastGradientArgs")
                      .Input("s0: T").Input("s1: T").Output("r0: T").Output("r1: T")
                      .Attr("T: {int32, int64} = int32")
                      .SetShapeFn([](InferenceContext* c) {
                        c->set_output(0, PartialShape({-1}));
                        c->set_output(1, PartialShape({-1}));
                        return Status();
                      })
                      .Doc("For shapes s0 and s1 broadcast together, the axes along which each "
                           "operand's gradient must be summed."));
  MustRegister(r, OpDefBuilder("BroadcastTo")
                      .Input("input: T").Input("shape: Tidx").Output("output: T")
                      .Attr("T: type").Attr("Tidx: {int32, int64} = int32")
                      .SetShapeFn(BroadcastToShape)
                      .Doc("input broadcast (NumPy rules) to `shape`."));
  MustRegister(r, OpDefBuilder("UnsortedSegmentSum")
                      .Input("data: T").Input("segment_ids: Tindices").Input("num_segments: Tnum")
                      .Output("output: T")
                      .Attr("T: {float32, float64, int32, int64}")
                      .Attr("Tindices: {int32, int64}").Attr("Tnum: {int32, int64} = int32")
                      .SetShapeFn(SegmentSumShape)
                      .Doc("output[i] = sum of data[j] over j with segment_ids[j] == i; used to "
                           "turn sparse rows into a dense tensor."));
  MustRegister(r, OpDefBuilder("ConcatOffset")
                      .Input("concat_dim: int32").Input("shape: N * int32")
                      .Output("offset: N * int32").Attr("N: int >= 1")
                      .SetShapeFn([](InferenceContext* c) {
                        for (int i = 0; i < c->num_outputs(); ++i) c->set_output(i, c->input(1));
                        return Status();
                      })
                      .Doc("Where each input of a Concat starts in its output."));
  MustRegister(r, OpDefBuilder("StridedSliceGrad")
                      .Input("shape: Index").Input("begin: Index").Input("end: Index")
                      .Input("strides: Index").Input("dy: T").Output("output: T")
                      .Attr("T: type").Attr("Index: {int32, int64} = int32")
                      .Attr("begin_mask: int = 0").Attr("end_mask: int = 0")
                      .Attr("ellipsis_mask: int = 0").Attr("new_axis_mask: int = 0")
                      .Attr("shrink_axis_mask: int = 0")
                      .SetShapeFn(StridedSliceGradShape)
                      .Doc("A zero tensor of `shape` with dy written where StridedSlice read."));
  MustRegister(r, OpDefBuilder("ReducedShape")
                      .Input("input_shape: int32").Input("axes: Tidx").Output("output: int32")
                      .Attr("Tidx: {int32, int64} = int32")
                      .SetShapeFn(shape_fns::UnchangedShape)
                      .Doc("input_shape with the reduced axes set to 1 (all axes when axes is "
                           "empty), the shape a reduction with keep_dims produces."));
  MustRegister(r, OpDefBuilder("InvertPermutation")
                      .Input("x: T").Output("y: T").Attr("T: {int32, int64} = int32")
                      .SetShapeFn(shape_fns::UnchangedShape)
                      .Doc("y[x[i]] = i."));
  MustRegister(r, OpDefBuilder("TileGrad")
                      .Input("multiples: Tmultiples").Input("grad: T").Output("output: T")
                      .Attr("T: {float32, float64}").Attr("Tmultiples: {int32, int64} = int32")
                      .SetShapeFn([](InferenceContext* c) {
                        const PartialShape& g = c->input(1);
                        auto m = ConstantIntVector(c, 0);
                        if (!g.rank_known() || !m || int(m->size()) != g.rank()) {
                          c->set_output(0, g.rank_known() ? PartialShape::UnknownOfRank(g.rank()) : g);
                          return Status();
                        }
                        std::vector<int64_t> out(g.rank());
                        for (int i = 0; i < g.rank(); ++i) {
                          out[i] = g.dim(i) < 0 || (*m)[i] == 0 ? -1 : g.dim(i) / (*m)[i];
                        }
                        c->set_output(0, PartialShape(std::move(out)));
                        return Status();
                      })
                      .Doc("Gradient of Tile: sums the tiles of grad."));
  MustRegister(r, OpDefBuilder("ProdGrad")
                      .Input("input: T").Input("axis: Tidx").Input("grad: T").Output("output: T")
                      .Attr("T: {float32, float64}").Attr("Tidx: {int32, int64} = int32")
                      .SetShapeFn(shape_fns::UnchangedShape)
                      .Doc("Gradient of Prod over `axis` (grad has the reduced shape with kept "
                           "dimensions): the product of the other elements, exact with zeros."));
}

}  // namespace flowstate::internal

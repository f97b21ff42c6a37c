// Constants, placeholders, and ops that move, select or reshape elements.
#include <algorithm>
#include <cmath>

#include "graph/op_defs/register_defs.h"
#include "graph/partitioned_variables.h"
#include "graph/strided_slice.h"

namespace flowstate::internal {
namespace {

using shape_fns::ConstantIntVector;

constexpr const char* kAnyT = "T: {float32, float64, int32, int64, uint8, bool, float16, bfloat16}";
constexpr const char* kIndex32 = "Tidx: {int32, int64} = int32";

Status ConstShape(InferenceContext* c) {
  const AttrValue& v = c->GetAttr("value");
  if (v.tensor().dtype() != c->TypeAttr("dtype")) {
    return c->Error("attr 'value' has dtype " + std::string(DataTypeName(v.tensor().dtype())) +
                    " but attr 'dtype' is " + std::string(DataTypeName(c->TypeAttr("dtype"))));
  }
  c->set_output(0, PartialShape(v.tensor().shape()));
  return Status();
}

Status PlaceholderShape(InferenceContext* c) {
  c->set_output(0, c->GetAttr("shape").shape());
  return Status();
}

Status ReshapeShape(InferenceContext* c) {
  auto dims = ConstantIntVector(c, 1);
  const PartialShape& in = c->input(0);
  if (!dims) {
    const PartialShape& s = c->input(1);
    c->set_output(0, s.rank_known() && s.rank() == 1 && s.dim(0) >= 0
                         ? PartialShape::UnknownOfRank(int(s.dim(0)))
                         : PartialShape::Unknown());
    return Status();
  }
  std::vector<int64_t> out = *dims;
  int unknown = -1;
  int64_t known = 1;
  for (int i = 0; i < int(out.size()); ++i) {
    if (out[i] == -1) {
      if (unknown >= 0) return c->Error("shape has more than one -1");
      unknown = i;
    } else if (out[i] < 0) {
      return c->Error("shape has a negative dimension " + std::to_string(out[i]));
    } else {
      known *= out[i];
    }
  }
  int64_t n = in.num_elements();
  if (n >= 0) {
    if (unknown >= 0) {
      if (known == 0 || n % known != 0) {
        return c->Error("cannot reshape " + in.ToString() + " to " +
                        PartialShape(*dims).ToString());
      }
      out[unknown] = n / known;
    } else if (known != n) {
      return c->Error("cannot reshape " + in.ToString() + " (" + std::to_string(n) +
                      " elements) to " + PartialShape(out).ToString() + " (" +
                      std::to_string(known) + " elements)");
    }
  }
  c->set_output(0, PartialShape(std::move(out)));
  return Status();
}

Status TransposeShape(InferenceContext* c) {
  const PartialShape& in = c->input(0);
  auto perm = ConstantIntVector(c, 1);
  if (!perm) {
    c->set_output(0, in.rank_known() ? PartialShape::UnknownOfRank(in.rank()) : in);
    return Status();
  }
  int rank = int(perm->size());
  if (in.rank_known() && in.rank() != rank) {
    return c->Error("perm has " + std::to_string(rank) + " entries for an input of shape " +
                    in.ToString());
  }
  std::vector<bool> seen(rank, false);
  std::vector<int64_t> out(rank, -1);
  for (int i = 0; i < rank; ++i) {
    int64_t p = (*perm)[i];
    if (p < 0 || p >= rank || seen[p]) return c->Error("perm is not a permutation");
    seen[p] = true;
    if (in.rank_known()) out[i] = in.dim(int(p));
  }
  c->set_output(0, PartialShape(std::move(out)));
  return Status();
}

Status ExpandDimsShape(InferenceContext* c) {
  const PartialShape& in = c->input(0);
  auto axis = ConstantIntVector(c, 1);
  if (!in.rank_known() || !axis || axis->size() != 1) {
    c->set_output(0, in.rank_known() ? PartialShape::UnknownOfRank(in.rank() + 1)
                                     : PartialShape::Unknown());
    return Status();
  }
  int rank = in.rank();
  int64_t a = (*axis)[0];
  if (a < -rank - 1 || a > rank) return c->Error("axis " + std::to_string(a) + " out of range");
  if (a < 0) a += rank + 1;
  std::vector<int64_t> out = in.dims();
  out.insert(out.begin() + a, 1);
  c->set_output(0, PartialShape(std::move(out)));
  return Status();
}

Status SqueezeShape(InferenceContext* c) {
  const PartialShape& in = c->input(0);
  if (!in.rank_known()) return shape_fns::Unknown(c);
  const auto& axes = c->GetAttr("axis").ints();
  int rank = in.rank();
  std::vector<bool> drop(rank, false);
  for (int64_t a : axes) {
    if (a < -rank || a >= rank) return c->Error("axis " + std::to_string(a) + " out of range");
    int64_t k = a < 0 ? a + rank : a;
    if (in.dim(int(k)) >= 0 && in.dim(int(k)) != 1) {
      return c->Error("cannot squeeze dimension " + std::to_string(a) + " of size " +
                      std::to_string(in.dim(int(k))));
    }
    drop[k] = true;
  }
  std::vector<int64_t> out;
  for (int i = 0; i < rank; ++i) {
    if (axes.empty() ? in.dim(i) == 1 : drop[i]) continue;
    if (axes.empty() && in.dim(i) < 0) return shape_fns::Unknown(c);
    out.push_back(in.dim(i));
  }
  c->set_output(0, PartialShape(std::move(out)));
  return Status();
}

Status ConcatShape(InferenceContext* c) {
  const int n = c->num_inputs() - 1;
  auto axis = ConstantIntVector(c, n);
  int rank = -1;
  for (int i = 0; i < n; ++i) {
    if (!c->input(i).rank_known()) continue;
    if (rank >= 0 && c->input(i).rank() != rank) {
      return c->Error("inputs have different ranks: " + c->input(0).ToString() + " and " +
                      c->input(i).ToString());
    }
    rank = c->input(i).rank();
  }
  if (rank < 0) return shape_fns::Unknown(c);
  if (!axis || axis->size() != 1) {
    c->set_output(0, PartialShape::UnknownOfRank(rank));
    return Status();
  }
  int64_t a = (*axis)[0];
  if (a < -rank || a >= rank) return c->Error("axis " + std::to_string(a) + " out of range");
  if (a < 0) a += rank;
  std::vector<int64_t> out(rank, -1);
  int64_t total = 0;
  for (int i = 0; i < n; ++i) {
    const PartialShape& s = c->input(i);
    if (!s.rank_known()) {
      total = -1;
      continue;
    }
    for (int d = 0; d < rank; ++d) {
      if (d == a) continue;
      if (out[d] < 0) {
        out[d] = s.dim(d);
      } else if (s.dim(d) >= 0 && s.dim(d) != out[d]) {
        return c->Error("dimension " + std::to_string(d) + " differs between inputs: " +
                        c->input(0).ToString() + " and " + s.ToString());
      }
    }
    if (total >= 0) total = s.dim(int(a)) < 0 ? -1 : total + s.dim(int(a));
  }
  out[a] = total;
  c->set_output(0, PartialShape(std::move(out)));
  return Status();
}

Status SplitShape(InferenceContext* c) {
  const PartialShape& in = c->input(1);
  int64_t num = c->IntAttr("num_split");
  auto axis = ConstantIntVector(c, 0);
  PartialShape out = in.rank_known() ? PartialShape::UnknownOfRank(in.rank()) : in;
  if (in.rank_known() && axis && axis->size() == 1) {
    int rank = in.rank();
    int64_t a = (*axis)[0];
    if (a < -rank || a >= rank) return c->Error("axis " + std::to_string(a) + " out of range");
    if (a < 0) a += rank;
    std::vector<int64_t> dims = in.dims();
    if (dims[a] >= 0) {
      if (dims[a] % num != 0) {
        return c->Error("dimension " + std::to_string(a) + " of size " +
                        std::to_string(dims[a]) + " does not split evenly into " +
                        std::to_string(num));
      }
      dims[a] /= num;
    }
    out = PartialShape(std::move(dims));
  }
  for (int i = 0; i < c->num_outputs(); ++i) c->set_output(i, out);
  return Status();
}

Status SliceShape(InferenceContext* c) {
  const PartialShape& in = c->input(0);
  auto begin = ConstantIntVector(c, 1);
  auto size = ConstantIntVector(c, 2);
  if (!begin || !size || !in.rank_known()) {
    c->set_output(0, in.rank_known() ? PartialShape::UnknownOfRank(in.rank()) : in);
    return Status();
  }
  int rank = in.rank();
  if (int(begin->size()) != rank || int(size->size()) != rank) {
    return c->Error("begin and size must have one entry per dimension of " + in.ToString());
  }
  std::vector<int64_t> out(rank);
  for (int d = 0; d < rank; ++d) {
    int64_t b = (*begin)[d], s = (*size)[d], dim = in.dim(d);
    if (b < 0 || (dim >= 0 && b > dim)) {
      return c->Error("begin " + std::to_string(b) + " out of range for dimension " +
                      std::to_string(d) + " of " + in.ToString());
    }
    if (s == -1) {
      out[d] = dim < 0 ? -1 : dim - b;
    } else if (s < 0 || (dim >= 0 && b + s > dim)) {
      return c->Error("size " + std::to_string(s) + " out of range for dimension " +
                      std::to_string(d) + " of " + in.ToString());
    } else {
      out[d] = s;
    }
  }
  c->set_output(0, PartialShape(std::move(out)));
  return Status();
}

Status StridedSliceShape(InferenceContext* c) {
  const PartialShape& in = c->input(0);
  auto b = ConstantIntVector(c, 1), e = ConstantIntVector(c, 2), s = ConstantIntVector(c, 3);
  if (!in.IsFullyDefined() || !b || !e || !s) return shape_fns::Unknown(c);
  StridedSliceMasks m{c->IntAttr("begin_mask"), c->IntAttr("end_mask"),
                      c->IntAttr("ellipsis_mask"), c->IntAttr("new_axis_mask"),
                      c->IntAttr("shrink_axis_mask")};
  StatusOr<StridedSlicePlan> plan = PlanStridedSlice(in.dims(), *b, *e, *s, m);
  if (!plan.ok()) return c->Error(plan.status().message());
  c->set_output(0, PartialShape(plan->output_shape));
  return Status();
}

Status PartitionIdsShape(InferenceContext* c) {
  StatusOr<PartitionStrategy> s = PartitionStrategyFromString(c->GetAttr("strategy").s());
  if (!s.ok()) return c->Error(s.status().message());
  if (c->IntAttr("num_partitions") > std::max<int64_t>(c->IntAttr("rows"), 1)) {
    return c->Error("num_partitions " + std::to_string(c->IntAttr("num_partitions")) +
                    " is more than the " + std::to_string(c->IntAttr("rows")) + " rows");
  }
  for (int i = 0; i < c->num_outputs(); ++i) c->set_output(i, PartialShape({-1}));
  return Status();
}

// [-1] + the row shape, from the first data input whose rank is known.
Status DynamicStitchShape(InferenceContext* c) {
  const int n = int(c->IntAttr("N"));
  for (int i = 0; i < n; ++i) {
    const PartialShape& idx = c->input(i);
    const PartialShape& data = c->input(n + i);
    if (!idx.rank_known() || !data.rank_known()) continue;
    if (data.rank() < idx.rank()) {
      return c->Error("data[" + std::to_string(i) + "] of shape " + data.ToString() +
                      " does not start with the shape of indices[" + std::to_string(i) + "] " +
                      idx.ToString());
    }
    std::vector<int64_t> out{-1};
    out.insert(out.end(), data.dims().begin() + idx.rank(), data.dims().end());
    c->set_output(0, PartialShape(std::move(out)));
    return Status();
  }
  return shape_fns::Unknown(c);
}

Status GatherShape(InferenceContext* c) {
  const PartialShape& params = c->input(0);
  const PartialShape& indices = c->input(1);
  if (!params.rank_known() || !indices.rank_known()) return shape_fns::Unknown(c);
  int rank = params.rank();
  int64_t a = c->IntAttr("axis");
  if (a < -rank || a >= rank) {
    return c->Error("axis " + std::to_string(a) + " out of range for params " +
                    params.ToString());
  }
  if (a < 0) a += rank;
  // Constant indices are checked here, so that a graph that would fail at
  // run time is refused when it is built (a 400 over the API).
  const Tensor* ct = c->input_tensor(1);
  const int64_t limit = params.dim(int(a));
  if (ct != nullptr && limit >= 0) {
    for (int64_t i = 0; i < ct->num_elements(); ++i) {
      const int64_t v = ct->dtype() == DataType::kInt32 ? int64_t(ct->data<int32_t>()[i])
                                                        : ct->data<int64_t>()[i];
      if (v < 0 || v >= limit) {
        return c->Error("indices[" + std::to_string(i) + "] = " + std::to_string(v) +
                        " is not in [0, " + std::to_string(limit) + ") (dimension " +
                        std::to_string(a) + " of params " + params.ToString() + ")");
      }
    }
  }
  std::vector<int64_t> out(params.dims().begin(), params.dims().begin() + a);
  out.insert(out.end(), indices.dims().begin(), indices.dims().end());
  out.insert(out.end(), params.dims().begin() + a + 1, params.dims().end());
  c->set_output(0, PartialShape(std::move(out)));
  return Status();
}

Status TileShape(InferenceContext* c) {
  const PartialShape& in = c->input(0);
  auto mult = ConstantIntVector(c, 1);
  if (!in.rank_known()) return shape_fns::Unknown(c);
  if (!mult) {
    c->set_output(0, PartialShape::UnknownOfRank(in.rank()));
    return Status();
  }
  if (int(mult->size()) != in.rank()) {
    return c->Error("multiples has " + std::to_string(mult->size()) +
                    " entries for an input of shape " + in.ToString());
  }
  std::vector<int64_t> out(in.rank());
  for (int d = 0; d < in.rank(); ++d) {
    if ((*mult)[d] < 0) return c->Error("multiples must be >= 0");
    out[d] = in.dim(d) < 0 ? -1 : in.dim(d) * (*mult)[d];
  }
  c->set_output(0, PartialShape(std::move(out)));
  return Status();
}

// Output shape given by a shape-vector input (Fill, RandomUniform, ...).
Status ShapeFromInput(InferenceContext* c, int i) {
  auto dims = ConstantIntVector(c, i);
  if (!dims) {
    const PartialShape& s = c->input(i);
    c->set_output(0, s.rank_known() && s.rank() == 1 && s.dim(0) >= 0
                         ? PartialShape::UnknownOfRank(int(s.dim(0)))
                         : PartialShape::Unknown());
    return Status();
  }
  for (int64_t d : *dims) {
    if (d < 0) return c->Error("shape has a negative dimension " + std::to_string(d));
  }
  c->set_output(0, PartialShape(*dims));
  return Status();
}

Status RangeShape(InferenceContext* c) {
  const Tensor* s = c->input_tensor(0);
  const Tensor* l = c->input_tensor(1);
  const Tensor* d = c->input_tensor(2);
  if (!s || !l || !d) {
    c->set_output(0, PartialShape({-1}));
    return Status();
  }
  double start = s->ElementAsDouble(0), limit = l->ElementAsDouble(0), delta = d->ElementAsDouble(0);
  if (delta == 0) return c->Error("delta must not be zero");
  int64_t n = 0;
  if ((delta > 0 && limit > start) || (delta < 0 && limit < start)) {
    if (IsInteger(c->input_type(0))) {
      int64_t si = int64_t(start), li = int64_t(limit), di = int64_t(delta);
      n = di > 0 ? (li - si + di - 1) / di : (si - li + (-di) - 1) / (-di);
    } else {
      n = int64_t(std::ceil((limit - start) / delta));
    }
  }
  c->set_output(0, PartialShape({n}));
  return Status();
}

}  // namespace

void RegisterArrayOps(OpRegistry* r) {
  MustRegister(r, OpDefBuilder("Const")
                      .Output("output: dtype")
                      .Attr("value: tensor")
                      .Attr("dtype: type")
                      .SetShapeFn(ConstShape)
                      .Doc("A constant tensor, given by attr `value`."));
  MustRegister(r, OpDefBuilder("Placeholder")
                      .Output("output: dtype")
                      .Attr("dtype: type")
                      .Attr("shape: shape = ?")
                      .SetShapeFn(PlaceholderShape)
                      .Doc("A value the caller feeds at run time; its shape is checked against "
                           "attr `shape` (-1 for any size)."));
  MustRegister(r, OpDefBuilder("Identity")
                      .Input("input: T").Output("output: T").Attr("T: type")
                      .SetShapeFn(shape_fns::UnchangedShape)
                      .Doc("Returns its input (shares the buffer)."));
  MustRegister(r, OpDefBuilder("StopGradient")
                      .Input("input: T").Output("output: T").Attr("T: type")
                      .SetShapeFn(shape_fns::UnchangedShape)
                      .Doc("Returns its input; gradients do not flow through it."));
  MustRegister(r, OpDefBuilder("NoOp")
                      .SetShapeFn(shape_fns::NoOutputs)
                      .Doc("Does nothing; used to group control dependencies."));
  MustRegister(r, OpDefBuilder("Reshape")
                      .Input("tensor: T").Input("shape: Tshape").Output("output: T")
                      .Attr("T: type").Attr("Tshape: {int32, int64} = int32")
                      .SetShapeFn(ReshapeShape)
                      .Doc("The same elements in a new shape; one dimension may be -1."));
  MustRegister(r, OpDefBuilder("Transpose")
                      .Input("x: T").Input("perm: Tperm").Output("y: T")
                      .Attr("T: type").Attr("Tperm: {int32, int64} = int32")
                      .SetShapeFn(TransposeShape)
                      .Doc("Permutes dimensions: y.shape[i] = x.shape[perm[i]]."));
  MustRegister(r, OpDefBuilder("ExpandDims")
                      .Input("input: T").Input("axis: Tdim").Output("output: T")
                      .Attr("T: type").Attr("Tdim: {int32, int64} = int32")
                      .SetShapeFn(ExpandDimsShape)
                      .Doc("Inserts a dimension of size 1 at `axis`."));
  MustRegister(r, OpDefBuilder("Squeeze")
                      .Input("input: T").Output("output: T")
                      .Attr("T: type").Attr("axis: list(int) = []")
                      .SetShapeFn(SqueezeShape)
                      .Doc("Removes dimensions of size 1 (those in `axis`, or all)."));
  MustRegister(r, OpDefBuilder("Concat")
                      .Input("values: N * T").Input("axis: Tidx").Output("output: T")
                      .Attr("N: int >= 1").Attr("T: type").Attr(kIndex32)
                      .SetShapeFn(ConcatShape)
                      .Doc("Joins tensors along `axis`."));
  MustRegister(r, OpDefBuilder("Split")
                      .Input("axis: int32").Input("value: T").Output("output: num_split * T")
                      .Attr("num_split: int >= 1").Attr("T: type")
                      .SetShapeFn(SplitShape)
                      .Doc("Splits `value` into num_split equal parts along `axis`."));
  MustRegister(r, OpDefBuilder("Slice")
                      .Input("input: T").Input("begin: Index").Input("size: Index")
                      .Output("output: T")
                      .Attr("T: type").Attr("Index: {int32, int64} = int32")
                      .SetShapeFn(SliceShape)
                      .Doc("The block starting at `begin` of `size` (-1: to the end)."));
  MustRegister(r, OpDefBuilder("StridedSlice")
                      .Input("input: T").Input("begin: Index").Input("end: Index")
                      .Input("strides: Index").Output("output: T")
                      .Attr("T: type").Attr("Index: {int32, int64} = int32")
                      .Attr("begin_mask: int = 0").Attr("end_mask: int = 0")
                      .Attr("ellipsis_mask: int = 0").Attr("new_axis_mask: int = 0")
                      .Attr("shrink_axis_mask: int = 0")
                      .SetShapeFn(StridedSliceShape)
                      .Doc("NumPy basic slicing x[b:e:s, ...] with TensorFlow's masks."));
  MustRegister(r, OpDefBuilder("Gather")
                      .Input("params: Tparams").Input("indices: Tindices")
                      .Output("output: Tparams")
                      .Attr("Tparams: type").Attr("Tindices: {int32, int64}")
                      .Attr("axis: int = 0")
                      .SetShapeFn(GatherShape)
                      .Doc("Slices of `params` along `axis` at `indices`; an index out of "
                           "range is an error."));
  MustRegister(r, OpDefBuilder("PartitionIds")
                      .Input("ids: Tindices")
                      .Output("local: num_partitions * Tindices")
                      .Output("positions: num_partitions * int32")
                      .Attr("Tindices: {int32, int64}").Attr("num_partitions: int >= 1")
                      .Attr("rows: int >= 0").Attr("strategy: string = \"mod\"")
                      .Attr("table: string = \"\"")
                      .SetShapeFn(PartitionIdsShape)
                      .Doc("Routes the ids of a lookup in a table of `rows` rows split over "
                           "num_partitions parts (strategy mod: row r in part r % n at r / n; "
                           "div: contiguous ranges, the first rows % n parts one row longer): "
                           "local[p] are the local rows of the ids that fall in part p, in "
                           "order, and positions[p] where they were in the flattened ids. An id "
                           "outside [0, rows) is an error naming `table`."));
  MustRegister(r, OpDefBuilder("DynamicStitch")
                      .Input("indices: N * int32").Input("data: N * T").Output("merged: T")
                      .Attr("N: int >= 1").Attr("T: type")
                      .SetShapeFn(DynamicStitchShape)
                      .Doc("merged[indices[i][j], ...] = data[i][j, ...]: interleaves the rows "
                           "of the data tensors (data[i].shape = indices[i].shape + a common row "
                           "shape) into max(indices) + 1 rows; rows no index names are zeros, "
                           "and of two equal indices the later one wins."));
  MustRegister(r, OpDefBuilder("Unique")
                      .Input("x: T").Output("y: T").Output("idx: out_idx")
                      .Attr("T: {int32, int64}").Attr("out_idx: {int32, int64} = int32")
                      .SetShapeFn([](InferenceContext* c) {
                        if (c->input(0).rank_known() && c->input(0).rank() != 1) {
                          return c->Error("x must be a vector, got " + c->input(0).ToString());
                        }
                        c->set_output(0, PartialShape({-1}));
                        c->set_output(1, c->input(0).rank_known() ? c->input(0)
                                                                  : PartialShape({-1}));
                        return Status();
                      })
                      .Doc("The distinct values of the vector x in the order of their first "
                           "occurrence (y), and for each element of x the position of its "
                           "value in y (idx): x[i] == y[idx[i]]. With UnsortedSegmentSum(values, "
                           "idx, size(y)) it sums the rows of a sparse gradient that share an "
                           "index."));
  MustRegister(r, OpDefBuilder("Tile")
                      .Input("input: T").Input("multiples: Tmultiples").Output("output: T")
                      .Attr("T: type").Attr("Tmultiples: {int32, int64} = int32")
                      .SetShapeFn(TileShape)
                      .Doc("Repeats `input` multiples[i] times along dimension i."));
  MustRegister(r, OpDefBuilder("Fill")
                      .Input("dims: index_type").Input("value: T").Output("output: T")
                      .Attr("T: type").Attr("index_type: {int32, int64} = int32")
                      .SetShapeFn([](InferenceContext* c) { return ShapeFromInput(c, 0); })
                      .Doc("A tensor of shape `dims` filled with the scalar `value`."));
  MustRegister(r, OpDefBuilder("ZerosLike")
                      .Input("x: T").Output("y: T").Attr(kAnyT)
                      .SetShapeFn(shape_fns::UnchangedShape)
                      .Doc("Zeros of the shape and dtype of x."));
  MustRegister(r, OpDefBuilder("OnesLike")
                      .Input("x: T").Output("y: T").Attr(kAnyT)
                      .SetShapeFn(shape_fns::UnchangedShape)
                      .Doc("Ones of the shape and dtype of x."));
  MustRegister(r, OpDefBuilder("Shape")
                      .Input("input: T").Output("output: out_type")
                      .Attr("T: type").Attr("out_type: {int32, int64} = int32")
                      .SetShapeFn([](InferenceContext* c) {
                        c->set_output(0, PartialShape({c->input(0).rank()}));
                        return Status();
                      })
                      .Doc("The shape of `input` as a vector."));
  MustRegister(r, OpDefBuilder("Size")
                      .Input("input: T").Output("output: out_type")
                      .Attr("T: type").Attr("out_type: {int32, int64} = int32")
                      .SetShapeFn(shape_fns::ScalarShape)
                      .Doc("The number of elements of `input`."));
  MustRegister(r, OpDefBuilder("Rank")
                      .Input("input: T").Output("output: int32").Attr("T: type")
                      .SetShapeFn(shape_fns::ScalarShape)
                      .Doc("The number of dimensions of `input`."));
  MustRegister(r, OpDefBuilder("Range")
                      .Input("start: Tidx").Input("limit: Tidx").Input("delta: Tidx")
                      .Output("output: Tidx")
                      .Attr("Tidx: {float32, float64, int32, int64} = int32")
                      .SetShapeFn(RangeShape)
                      .Doc("start, start + delta, ... up to but excluding limit."));
}

// Used by random_defs.cc.
Status ShapeFromInput0(InferenceContext* c) { return ShapeFromInput(c, 0); }

}  // namespace flowstate::internal

// Converters of ONNX's loss functions and of the index ops they build on
// (the table is in onnx_ops.cc): NegativeLogLikelihoodLoss,
// SoftmaxCrossEntropyLoss, GatherElements, ScatterElements, TopK, Trilu,
// Hardmax. Class picks are
// one-hot masks (Equal against a Range) summed over the class axis, so
// every op on the way has a gradient.
#include <limits>

#include "api/onnx/convert_util.h"
#include "api/onnx/converters.h"

namespace flowstate::onnx_import {
namespace {

// [1, ..., n, ..., 1] (rank `rank`, n at `axis`): Range(0, n) shaped to
// broadcast along `axis`.
Output RangeAlong(NodeContext& c, const Output& n, int rank, int axis) {
  Output r = c.Op("Range", {c.Scalar(0, DataType::kInt64), n, c.Scalar(1, DataType::kInt64)});
  std::vector<int64_t> dims(rank, 1);
  dims[axis] = -1;
  return c.Op("Reshape", {r, c.Ints64(dims)});
}

Output ToInt64(NodeContext& c, const Value& v) {
  if (v.dtype == DataType::kInt64) return v.out;
  return c.Op("Cast", {v.out}, {{"DstT", AttrValue(DataType::kInt64)}});
}

// The loss of log-probabilities `logp` [N, C, d...] against `target`
// [N, d...]: ONNX's NegativeLogLikelihoodLoss. Sets output 0.
Status NllLoss(NodeContext& c, const Value& logp, const Output& logp_out, const Value& target,
               int weight_input) {
  FS_ASSIGN_OR_RETURN(std::string reduction, c.String("reduction", "mean"));
  if (reduction != "none" && reduction != "sum" && reduction != "mean") {
    return c.Error("attribute 'reduction' = \"" + reduction + "\" is not a valid value");
  }
  std::optional<int64_t> ignore;
  if (c.HasAttr("ignore_index")) {
    FS_ASSIGN_OR_RETURN(int64_t i, c.Int("ignore_index"));
    ignore = i;
  } else {
    c.Ignore("ignore_index");
  }
  FS_RETURN_IF_ERROR(NeedFloat(c, logp, "input"));
  // The input's rank is the target's plus one (the class axis).
  const int r = logp.rank() >= 0 ? logp.rank() : target.rank() >= 0 ? target.rank() + 1 : -1;
  if (r < 0) FS_RETURN_IF_ERROR(NeedRank(c, logp, "input"));
  if (r < 2) return c.Error("input must have rank >= 2 ([N, C, ...])");
  DataType dt = logp.dtype;
  Output t = ToInt64(c, target);
  Output onehot = c.Op("Equal", {c.Op("ExpandDims", {t, c.Int32(1)}),
                                 RangeAlong(c, DimScalar(c, logp, 1), r, 1)});
  Output mask = c.Op("Cast", {onehot}, {{"DstT", AttrValue(dt)}});
  Output axis1 = c.Ints64({1});
  Output picked = c.Op("Sum", {c.Op("Mul", {logp_out, mask}), axis1});
  std::optional<Output> w;  // per-element weight, when not all ones
  if (c.has_input(weight_input)) {
    FS_ASSIGN_OR_RETURN(Value weight, c.input(weight_input));
    std::vector<int64_t> dims(r, 1);
    dims[1] = -1;
    w = c.Op("Sum", {c.Op("Mul", {mask, c.Op("Reshape", {weight.out, c.Ints64(dims)})}), axis1});
  }
  if (ignore) {
    Output keep = c.Op("Cast", {c.Op("NotEqual", {t, c.Scalar(double(*ignore), DataType::kInt64)})},
                       {{"DstT", AttrValue(dt)}});
    w = w ? c.Op("Mul", {*w, keep}) : keep;
  }
  Output loss = c.Op("Neg", {picked});
  if (w) loss = c.Op("Mul", {loss, *w});
  Output all = c.Ints64({});
  if (reduction == "sum") {
    loss = c.Op("Sum", {loss, all});
  } else if (reduction == "mean") {
    loss = w ? c.Op("Div", {c.Op("Sum", {loss, all}), c.Op("Sum", {*w, all})})
             : c.Op("Mean", {loss, all});
  }
  return c.SetOutput(0, loss, dt);
}

}  // namespace

Status ConvertNllLoss(NodeContext& c) {
  FS_ASSIGN_OR_RETURN(Value input, c.input(0));
  FS_ASSIGN_OR_RETURN(Value target, c.input(1));
  return NllLoss(c, input, input.out, target, 2);
}

Status ConvertSoftmaxCrossEntropyLoss(NodeContext& c) {
  FS_ASSIGN_OR_RETURN(Value scores, c.input(0));
  FS_ASSIGN_OR_RETURN(Value labels, c.input(1));
  FS_RETURN_IF_ERROR(NeedFloat(c, scores, "scores"));
  FS_RETURN_IF_ERROR(NeedRank(c, scores, "scores"));
  const int r = scores.rank();
  if (r < 2) return c.Error("scores must have rank >= 2 ([N, C, ...])");
  Output logp;
  if (r == 2) {
    logp = c.Op("LogSoftmax", {scores.out});
  } else {  // over axis 1: swap it to the end and back
    std::vector<int64_t> perm(r);
    for (int i = 0; i < r; ++i) perm[i] = i;
    std::swap(perm[1], perm[r - 1]);
    logp = Transpose(c, c.Op("LogSoftmax", {Transpose(c, scores.out, perm)}), perm);
  }
  FS_RETURN_IF_ERROR(NllLoss(c, scores, logp, labels, 2));
  return c.SetOutput(1, logp, scores.dtype, scores.shape);
}

Status ConvertGatherElements(NodeContext& c) {
  FS_ASSIGN_OR_RETURN(Value data, c.input(0));
  FS_ASSIGN_OR_RETURN(Value idx, c.input(1));
  FS_ASSIGN_OR_RETURN(int64_t axis_attr, c.Int("axis", 0));
  FS_RETURN_IF_ERROR(NeedRank(c, data, "data"));
  const int r = data.rank();
  if (idx.rank() != r) return c.Error("indices must have the rank of data");
  FS_ASSIGN_OR_RETURN(int axis, NormAxis(c, axis_attr, r, "axis"));
  if (data.dtype == DataType::kBool) return c.Unsupported("bool data");
  // data cut to the indices' extent on the other axes.
  Output d = data.out;
  bool same = true;
  for (int i = 0; i < r; ++i) {
    if (i != axis && (idx.shape.dim(i) < 0 || idx.shape.dim(i) != data.shape.dim(i))) same = false;
  }
  if (!same) {
    std::vector<int64_t> keep(r, 1), minus(r, 0);
    keep[axis] = 0;
    minus[axis] = -1;
    Output size = c.Op("Add", {c.Op("Mul", {ShapeVector(c, idx.out), c.Ints64(keep)}),
                               c.Ints64(minus)});
    d = c.Op("Slice", {d, c.Ints64(std::vector<int64_t>(r, 0)), size});
  }
  Output dim = DimScalar(c, data, axis);
  Output i64 = ToInt64(c, idx);
  Output neg = c.Op("Less", {i64, c.Scalar(0, DataType::kInt64)});
  i64 = c.Op("Select", {neg, c.Op("Add", {i64, dim}), i64});
  // [.., I, 1, ..] == [1, .., D, ..] at axis + 1, then pick and sum.
  Output onehot = c.Op("Equal", {c.Op("ExpandDims", {i64, c.Int32(axis + 1)}),
                                 RangeAlong(c, dim, r + 1, axis + 1)});
  Output de = c.Op("ExpandDims", {d, c.Int32(axis)});
  Output picked = c.Op("Select", {onehot, de, c.Op("ZerosLike", {de})});
  return c.SetOutput(0, c.Op("Sum", {picked, c.Ints64({axis + 1})}), data.dtype, idx.shape);
}

Status ConvertTrilu(NodeContext& c) {
  FS_ASSIGN_OR_RETURN(Value x, c.input(0));
  FS_ASSIGN_OR_RETURN(int64_t upper, c.Int("upper", 1));
  FS_RETURN_IF_ERROR(NeedRank(c, x, "input"));
  const int r = x.rank();
  if (r < 2) return c.Error("input must have rank >= 2");
  Output k = c.Scalar(0, DataType::kInt64);
  if (c.has_input(1)) {
    FS_ASSIGN_OR_RETURN(Value kv, c.input(1));
    k = c.Op("Reshape", {ToInt64(c, kv), c.Ints64({})});
  }
  Output rows = RangeAlong(c, DimScalar(c, x, r - 2), 2, 0);
  Output cols = RangeAlong(c, DimScalar(c, x, r - 1), 2, 1);
  Output diff = c.Op("Sub", {cols, rows});
  Output keep = c.Op(upper ? "GreaterEqual" : "LessEqual", {diff, k});
  return c.SetOutput(0, c.Op("Select", {keep, x.out, c.Op("ZerosLike", {x.out})}), x.dtype,
                     x.shape);
}

Status ConvertHardmax(NodeContext& c) {
  FS_ASSIGN_OR_RETURN(Value x, c.input(0));
  FS_ASSIGN_OR_RETURN(int64_t axis_attr, c.Int("axis", -1));
  FS_RETURN_IF_ERROR(NeedFloat(c, x, "input"));
  FS_RETURN_IF_ERROR(NeedRank(c, x, "input"));
  FS_ASSIGN_OR_RETURN(int axis, NormAxis(c, axis_attr, x.rank(), "axis"));
  Output arg = c.Op("ArgMax", {x.out, c.Int32(axis)}, {{"output_type", AttrValue(DataType::kInt64)}});
  Output onehot = c.Op("Equal", {c.Op("ExpandDims", {arg, c.Int32(axis)}),
                                 RangeAlong(c, DimScalar(c, x, axis), x.rank(), axis)});
  return c.SetOutput(0, c.Op("Cast", {onehot}, {{"DstT", AttrValue(x.dtype)}}), x.dtype, x.shape);
}

}  // namespace flowstate::onnx_import

namespace flowstate::onnx_import {

// ScatterElements: the updates summed into their targets through a one-hot
// mask along `axis` (indices, updates and data must agree on the other
// axes); a target that an index hits takes the update (reduction none), the
// sum or the product.
Status ConvertScatterElements(NodeContext& c) {
  FS_ASSIGN_OR_RETURN(Value data, c.input(0));
  FS_ASSIGN_OR_RETURN(Value idx, c.input(1));
  FS_ASSIGN_OR_RETURN(Value upd, c.input(2));
  FS_ASSIGN_OR_RETURN(int64_t axis_attr, c.Int("axis", 0));
  std::string reduction = "none";
  if (c.opset() >= 16) {
    FS_ASSIGN_OR_RETURN(reduction, c.String("reduction", "none"));
  }
  if (reduction != "none" && reduction != "add" && reduction != "mul") {
    return c.Unsupported("attribute 'reduction' = \"" + reduction + "\"");
  }
  FS_RETURN_IF_ERROR(NeedRank(c, data, "data"));
  const int r = data.rank();
  if (idx.rank() != r || upd.rank() != r) return c.Error("indices and updates must have data's rank");
  FS_ASSIGN_OR_RETURN(int axis, NormAxis(c, axis_attr, r, "axis"));
  for (int i = 0; i < r; ++i) {
    if (i == axis) continue;
    if (idx.shape.dim(i) < 0 || idx.shape.dim(i) != data.shape.dim(i)) {
      return c.Unsupported("indices that do not span data's other axes");
    }
  }
  if (data.dtype == DataType::kBool) return c.Unsupported("bool data");
  Output dim = DimScalar(c, data, axis);
  Output i64 = ToInt64(c, idx);
  i64 = c.Op("Select", {c.Op("Less", {i64, c.Scalar(0, DataType::kInt64)}), c.Op("Add", {i64, dim}),
                        i64});
  Output hot = c.Op("Equal", {c.Op("ExpandDims", {i64, c.Int32(axis + 1)}),
                              RangeAlong(c, dim, r + 1, axis + 1)});
  Output ue = c.Op("ExpandDims", {upd.out, c.Int32(axis + 1)});
  Output along = c.Ints64({axis});
  Output hit = c.Op("Greater", {c.Op("Sum", {c.Op("Cast", {hot}, {{"DstT", AttrValue(DataType::kInt64)}}),
                                             along}),
                                c.Scalar(0, DataType::kInt64)});
  Output y;
  if (reduction == "mul") {
    Output ones = c.Op("OnesLike", {ue});
    Output prod = c.Op("Prod", {c.Op("Select", {hot, ue, ones}), along});
    y = c.Op("Mul", {data.out, prod});
  } else {
    Output sum = c.Op("Sum", {c.Op("Select", {hot, ue, c.Op("ZerosLike", {ue})}), along});
    y = reduction == "add" ? c.Op("Add", {data.out, sum}) : c.Op("Select", {hit, sum, data.out});
  }
  return c.SetOutput(0, y, data.dtype, data.shape);
}

// TopK: k rounds of ArgMax, each masking its pick (ties: the lower index
// first, as ONNX asks); K must be known at import.
Status ConvertTopK(NodeContext& c) {
  FS_ASSIGN_OR_RETURN(Value x, c.input(0));
  FS_ASSIGN_OR_RETURN(int64_t axis_attr, c.Int("axis", -1));
  FS_ASSIGN_OR_RETURN(Value kval, c.input(1));
  std::vector<int64_t> kv;
  PartialShape inferred = c.OutputShape(0);
  if (!kval.constant && inferred.rank_known() && inferred.rank() == x.rank() && x.rank() > 0) {
    int a = int(axis_attr < 0 ? axis_attr + x.rank() : axis_attr);
    if (a >= 0 && a < x.rank() && inferred.dim(a) >= 0) kv = {inferred.dim(a)};  // K from the shape
  }
  if (kv.empty()) {
    FS_ASSIGN_OR_RETURN(kv, c.ConstInts(1, "K"));
  }
  FS_ASSIGN_OR_RETURN(int64_t largest, c.Int("largest", 1));
  FS_ASSIGN_OR_RETURN(int64_t sorted, c.Int("sorted", 1));
  (void)sorted;  // the result is always sorted
  FS_RETURN_IF_ERROR(NeedFloat(c, x, "X"));
  FS_RETURN_IF_ERROR(NeedRank(c, x, "X"));
  const int r = x.rank();
  FS_ASSIGN_OR_RETURN(int axis, NormAxis(c, axis_attr, r, "axis"));
  if (kv.size() != 1 || kv[0] < 0) return c.Error("K must hold one non-negative value");
  const int64_t k = kv[0];
  if (k > 256) return c.Unsupported("K over 256");
  if (x.shape.dim(axis) >= 0 && k > x.shape.dim(axis)) return c.Error("K is larger than the axis");
  if (k == 0) return c.Unsupported("K = 0");
  Output v = largest ? x.out : c.Op("Neg", {x.out});
  Output range = RangeAlong(c, DimScalar(c, x, axis), r, axis);
  Output lowest = c.Scalar(-std::numeric_limits<double>::infinity(), x.dtype);
  std::vector<Output> values, indices;
  for (int64_t i = 0; i < k; ++i) {
    Output arg = c.Op("ArgMax", {v, c.Int32(axis)}, {{"output_type", AttrValue(DataType::kInt64)}});
    Output arg_e = c.Op("ExpandDims", {arg, c.Int32(axis)});
    Output hot = c.Op("Equal", {arg_e, range});
    values.push_back(c.Op("Sum", {c.Op("Select", {hot, x.out, c.Op("ZerosLike", {x.out})}),
                                  c.Ints64({axis})},
                          {{"keep_dims", AttrValue(true)}}));
    indices.push_back(arg_e);
    if (i + 1 < k) v = c.Op("Select", {hot, c.Op("Add", {c.Op("ZerosLike", {v}), lowest}), v});
  }
  values.push_back(c.Int32(axis));
  indices.push_back(c.Int32(axis));
  FS_RETURN_IF_ERROR(c.SetOutput(0, c.Op("Concat", values), x.dtype));
  return c.SetOutput(1, c.Op("Concat", indices), DataType::kInt64);
}

}  // namespace flowstate::onnx_import

// Converters of ONNX's loss functions and of the index ops they build on
// (the table is in onnx_ops.cc): NegativeLogLikelihoodLoss,
// SoftmaxCrossEntropyLoss, GatherElements, Trilu, Hardmax. Class picks are
// one-hot masks (Equal against a Range) summed over the class axis, so
// every op on the way has a gradient.
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

// Converters of ONNX's slicing ops, Slice and Split (the table is in
// onnx_ops.cc): constant starts, ends and sizes become one Flowstate Slice per
// output; computed ones are assembled into full-rank begin/size vectors at
// run time.
#include <algorithm>
#include <limits>

#include "api/onnx/convert_util.h"
#include "api/onnx/converters.h"

namespace flowstate::onnx_import {

namespace {
// Slice with starts / ends computed at run time (axes and steps constant):
// full-rank begin / end vectors assembled from their entries.
Status DynamicSlice(NodeContext& c, const Value& x, const Value& starts, const Value& ends) {
  const int r = x.rank();
  if (starts.rank() != 1 || starts.shape.dim(0) < 0) {
    return c.Unsupported("computed 'starts' of unknown length");
  }
  const int64_t n = starts.shape.dim(0);
  std::vector<int64_t> axes, steps(n, 1);
  if (c.has_input(3)) {
    FS_ASSIGN_OR_RETURN(axes, c.ConstInts(3, "axes"));
  } else {
    for (int64_t i = 0; i < n; ++i) axes.push_back(i);
  }
  if (c.has_input(4)) {
    FS_ASSIGN_OR_RETURN(steps, c.ConstInts(4, "steps"));
  }
  if (int64_t(axes.size()) != n || int64_t(steps.size()) != n) {
    return c.Error("starts, ends, axes and steps must have the same length");
  }
  std::vector<int> pos(r, -1);
  std::vector<int64_t> s(r, 1);
  for (int64_t i = 0; i < n; ++i) {
    FS_ASSIGN_OR_RETURN(int a, NormAxis(c, axes[i], r, "axes"));
    if (steps[i] == 0) return c.Error("a step is 0");
    pos[a] = int(i);
    s[a] = steps[i];
  }
  int64_t mask = 0;
  auto vec = [&](const Value& v) {
    Output v64 = v.dtype == DataType::kInt64
                     ? v.out
                     : c.Op("Cast", {v.out}, {{"DstT", AttrValue(DataType::kInt64)}});
    std::vector<Output> parts;
    for (int a = 0; a < r; ++a) {
      parts.push_back(pos[a] < 0 ? c.Ints64({0})
                                 : c.Op("Slice", {v64, c.Ints64({pos[a]}), c.Ints64({1})}));
    }
    parts.push_back(c.Int32(0));
    return c.Op("Concat", parts);
  };
  for (int a = 0; a < r; ++a) {
    if (pos[a] < 0) mask |= int64_t(1) << a;
  }
  Output y = c.Op("StridedSlice", {x.out, vec(starts), vec(ends), c.Ints64(s)},
                  {{"begin_mask", AttrValue(mask)}, {"end_mask", AttrValue(mask)}});
  return c.SetOutput(0, y, x.dtype);
}
}  // namespace

namespace {
// Slice with computed axes: begin, end and strides over every axis built at
// run time by one-hot scatters of the given entries (axes not listed: the
// whole axis). Steps must be constant.
Status ScatteredSlice(NodeContext& c, const Value& x, const Value& starts, const Value& ends) {
  const int r = x.rank();
  FS_ASSIGN_OR_RETURN(Value axes, c.input(3));
  auto to64 = [&](const Value& v) {
    return v.dtype == DataType::kInt64
               ? v.out
               : c.Op("Cast", {v.out}, {{"DstT", AttrValue(DataType::kInt64)}});
  };
  Output rank = c.Scalar(r, DataType::kInt64);
  Output a = to64(axes);
  a = c.Op("Select", {c.Op("Less", {a, c.Scalar(0, DataType::kInt64)}), c.Op("Add", {a, rank}), a});
  Output positions = c.Op("Reshape", {c.Op("Range", {c.Scalar(0, DataType::kInt64), rank,
                                                     c.Scalar(1, DataType::kInt64)}),
                                      c.Ints64({1, r})});
  Output hot = c.Op("Equal", {c.Op("ExpandDims", {a, c.Int32(1)}), positions});  // [n, r]
  Output hot64 = c.Op("Cast", {hot}, {{"DstT", AttrValue(DataType::kInt64)}});
  Output listed = c.Op("Greater", {c.Op("Sum", {hot64, c.Ints64({0})}),
                                   c.Scalar(0, DataType::kInt64)});  // [r]
  auto scatter = [&](const Output& v) {  // [n] -> [r]
    return c.Op("Sum", {c.Op("Mul", {hot64, c.Op("ExpandDims", {v, c.Int32(1)})}),
                        c.Ints64({0})});
  };
  Output steps;
  if (c.has_input(4)) {
    FS_ASSIGN_OR_RETURN(Value st, c.input(4));
    steps = to64(st);
  } else {
    steps = c.Op("OnesLike", {to64(starts)});
  }
  Output dims = ShapeVector(c, x.out);
  Output ones = c.Ints64(std::vector<int64_t>(r, 1)), zeros = c.Ints64(std::vector<int64_t>(r, 0));
  Output begin = c.Op("Select", {listed, scatter(to64(starts)), zeros});
  Output end = c.Op("Select", {listed, scatter(to64(ends)), dims});
  Output stride = c.Op("Select", {listed, scatter(steps), ones});
  return c.SetOutput(0, c.Op("StridedSlice", {x.out, begin, end, stride}), x.dtype);
}
}  // namespace

Status ConvertSlice(NodeContext& c) {
  FS_ASSIGN_OR_RETURN(Value x, c.input(0));
  FS_RETURN_IF_ERROR(NeedRank(c, x, "data"));
  const int r = x.rank();
  FS_ASSIGN_OR_RETURN(Value starts_v, c.input(1));
  FS_ASSIGN_OR_RETURN(Value ends_v, c.input(2));
  bool axes_computed = false;
  if (c.has_input(3)) {
    FS_ASSIGN_OR_RETURN(Value axes_v, c.input(3));
    axes_computed = !axes_v.constant;
  }
  if (axes_computed) return ScatteredSlice(c, x, starts_v, ends_v);
  if (!starts_v.constant || !ends_v.constant) return DynamicSlice(c, x, starts_v, ends_v);
  FS_ASSIGN_OR_RETURN(std::vector<int64_t> starts, c.ConstInts(1, "starts"));
  FS_ASSIGN_OR_RETURN(std::vector<int64_t> ends, c.ConstInts(2, "ends"));
  std::vector<int64_t> axes, steps(starts.size(), 1);
  if (c.has_input(3)) {
    FS_ASSIGN_OR_RETURN(axes, c.ConstInts(3, "axes"));
  } else {
    for (size_t i = 0; i < starts.size(); ++i) axes.push_back(int64_t(i));
  }
  if (c.has_input(4)) {
    FS_ASSIGN_OR_RETURN(steps, c.ConstInts(4, "steps"));
  }
  if (ends.size() != starts.size() || axes.size() != starts.size() ||
      steps.size() != starts.size()) {
    return c.Error("starts, ends, axes and steps must have the same length");
  }
  std::vector<int64_t> b(r, 0), e(r, 0), s(r, 1);
  int64_t begin_mask = (int64_t(1) << r) - 1, end_mask = begin_mask;
  for (size_t i = 0; i < axes.size(); ++i) {
    FS_ASSIGN_OR_RETURN(int a, NormAxis(c, axes[i], r, "axes"));
    if (steps[i] == 0) return c.Error("a step is 0");
    // Python slicing, which ONNX's clamping rules match; the extreme
    // values exporters write for "to the end" become masks.
    b[a] = starts[i];
    e[a] = ends[i];
    s[a] = steps[i];
    begin_mask &= ~(int64_t(1) << a);
    end_mask &= ~(int64_t(1) << a);
    const int64_t big = int64_t(1) << 62;
    if (steps[i] > 0 && ends[i] >= big) end_mask |= int64_t(1) << a;
    if (steps[i] < 0 && ends[i] <= -big) end_mask |= int64_t(1) << a;
    if (steps[i] < 0 && starts[i] >= big) begin_mask |= int64_t(1) << a;
    if (steps[i] > 0 && starts[i] <= -big) begin_mask |= int64_t(1) << a;
  }
  Output y = c.Op("StridedSlice", {x.out, c.Ints64(b), c.Ints64(e), c.Ints64(s)},
                  {{"begin_mask", AttrValue(begin_mask)}, {"end_mask", AttrValue(end_mask)}});
  return c.SetOutput(0, y, x.dtype);
}

namespace {
// Split with sizes computed at run time: output i is the Slice at the sum
// of the sizes before it.
Status DynamicSplit(NodeContext& c, const Value& x, const Value& sizes, int64_t axis_attr) {
  FS_RETURN_IF_ERROR(NeedRank(c, x, "input"));
  FS_ASSIGN_OR_RETURN(int axis, NormAxis(c, axis_attr, x.rank(), "axis"));
  Output sz = sizes.dtype == DataType::kInt64
                  ? sizes.out
                  : c.Op("Cast", {sizes.out}, {{"DstT", AttrValue(DataType::kInt64)}});
  const int r = x.rank();
  for (int i = 0; i < c.num_outputs(); ++i) {
    Output offset = c.Op("Sum", {c.Op("Slice", {sz, c.Ints64({0}), c.Ints64({i})}),
                                 c.Ints64({0})},
                         {{"keep_dims", AttrValue(true)}});
    Output len = c.Op("Slice", {sz, c.Ints64({i}), c.Ints64({1})});
    std::vector<Output> begin, size;
    for (int a = 0; a < r; ++a) {
      begin.push_back(a == axis ? offset : c.Ints64({0}));
      size.push_back(a == axis ? len : c.Ints64({-1}));
    }
    begin.push_back(c.Int32(0));
    size.push_back(c.Int32(0));
    Output y = c.Op("Slice", {x.out, c.Op("Concat", begin), c.Op("Concat", size)});
    FS_RETURN_IF_ERROR(c.SetOutput(i, y, x.dtype));
  }
  return Status();
}
}  // namespace

Status ConvertSplit(NodeContext& c) {
  FS_ASSIGN_OR_RETURN(Value x, c.input(0));
  FS_ASSIGN_OR_RETURN(int64_t axis_attr, c.Int("axis", 0));
  std::vector<int64_t> split;
  if (c.opset() >= 13) {
    if (c.has_input(1)) {
      FS_ASSIGN_OR_RETURN(Value sv, c.input(1));
      if (!sv.constant) return DynamicSplit(c, x, sv, axis_attr);
      FS_ASSIGN_OR_RETURN(split, c.ConstInts(1, "split"));
    }
  } else {
    FS_ASSIGN_OR_RETURN(split, c.Ints("split", std::vector<int64_t>{}));
  }
  FS_RETURN_IF_ERROR(NeedRank(c, x, "input"));
  FS_ASSIGN_OR_RETURN(int axis, NormAxis(c, axis_attr, x.rank(), "axis"));
  const int n = c.num_outputs();
  if (n < 1) return c.Error("has no outputs");
  if (!split.empty() && int(split.size()) != n) {
    return c.Error("'split' has " + std::to_string(split.size()) + " entries for " +
                   std::to_string(n) + " outputs");
  }
  bool equal = split.empty() ||
               std::all_of(split.begin(), split.end(), [&](int64_t v) { return v == split[0]; });
  if (equal) {
    std::vector<Output> outs = c.OpN("Split", {c.Int32(axis), x.out},
                                     {{"num_split", AttrValue(int64_t(n))}}, n);
    for (int i = 0; i < n; ++i) FS_RETURN_IF_ERROR(c.SetOutput(i, outs[i], x.dtype));
    return Status();
  }
  int64_t offset = 0;
  for (int i = 0; i < n; ++i) {
    std::vector<int64_t> begin(x.rank(), 0), size(x.rank(), -1);
    begin[axis] = offset;
    size[axis] = split[i];
    offset += split[i];
    FS_RETURN_IF_ERROR(
        c.SetOutput(i, c.Op("Slice", {x.out, c.Ints64(begin), c.Ints64(size)}), x.dtype));
  }
  return Status();
}

}  // namespace flowstate::onnx_import

#include "api/onnx/convert_util.h"

#include <algorithm>

namespace flowstate::onnx_import {

StatusOr<int> NormAxis(const NodeContext& c, int64_t axis, int rank, const char* what,
                       bool inclusive) {
  int64_t hi = inclusive ? rank : rank - 1;
  if (axis < -rank || axis > hi) {
    return c.Error("attribute '" + std::string(what) + "' = " + std::to_string(axis) +
                   " is out of range for rank " + std::to_string(rank));
  }
  return int(axis < 0 ? axis + rank : axis);
}

Status NeedRank(const NodeContext& c, const Value& v, const char* what) {
  if (v.rank() < 0) {
    return c.Unsupported("the rank of input '" + std::string(what) +
                         "' is unknown (ONNX shape inference could not infer it)");
  }
  return Status();
}

Status NeedFloat(const NodeContext& c, const Value& v, const char* what) {
  if (v.dtype != DataType::kFloat32 && v.dtype != DataType::kFloat64 &&
      v.dtype != DataType::kFloat16) {
    return c.Unsupported("input '" + std::string(what) + "' has dtype " +
                         std::string(DataTypeName(v.dtype)) + "; only floating types are supported");
  }
  return Status();
}

Output Transpose(NodeContext& c, const Output& x, const std::vector<int64_t>& perm) {
  // x = Transpose(w, p): transposed by perm, x is w permuted by p then perm
  // (dimension i from w's p[perm[i]]); when that is every i, w itself.
  if (const auto* t = c.TransposeOf(x); t != nullptr && t->second.size() == perm.size()) {
    bool inverse = true;
    for (size_t i = 0; i < perm.size() && inverse; ++i) {
      inverse = perm[i] >= 0 && size_t(perm[i]) < perm.size() && t->second[size_t(perm[i])] == int64_t(i);
    }
    if (inverse) return t->first;
  }
  Output y = c.Op("Transpose", {x, c.Ints32(perm)});
  c.NoteTranspose(y, x, perm);
  return y;
}

Output ShapeVector(NodeContext& c, const Output& x) {
  return c.Op("Shape", {x}, {{"out_type", AttrValue(DataType::kInt64)}});
}

Output DimScalar(NodeContext& c, const Value& x, int axis) {
  if (x.shape.rank_known() && x.shape.dim(axis) >= 0) {
    return c.Scalar(double(x.shape.dim(axis)), DataType::kInt64);
  }
  return c.Op("Gather", {ShapeVector(c, x.out), c.Int32(axis)});
}

namespace {
// x[..., b:e:s, ...] along one axis, the other axes whole.
Output SliceAxis(NodeContext& c, const Output& x, int rank, int axis, int64_t b, int64_t e,
                 int64_t s, bool to_end) {
  std::vector<int64_t> begin(rank, 0), end(rank, 0), strides(rank, 1);
  begin[axis] = b;
  end[axis] = e;
  strides[axis] = s;
  int64_t all = (int64_t(1) << rank) - 1;
  int64_t others = all & ~(int64_t(1) << axis);
  return c.Op("StridedSlice", {x, c.Ints64(begin), c.Ints64(end), c.Ints64(strides)},
              {{"begin_mask", AttrValue(others)},
               {"end_mask", AttrValue(to_end ? all : others)}});
}
}  // namespace

Output Reverse(NodeContext& c, const Output& x, int rank, int axis) {
  std::vector<int64_t> zeros(rank, 0), strides(rank, 1);
  strides[axis] = -1;
  int64_t all = (int64_t(1) << rank) - 1;
  return c.Op("StridedSlice", {x, c.Ints64(zeros), c.Ints64(zeros), c.Ints64(strides)},
              {{"begin_mask", AttrValue(all)}, {"end_mask", AttrValue(all)}});
}

Output PadAxis(NodeContext& c, const Output& x, int rank, int axis, int64_t before, int64_t after,
               const Output& fill, PadMode mode) {
  if (before == 0 && after == 0) return x;
  auto block = [&](int64_t n, bool at_start) {
    if (mode == PadMode::kReflect) {
      // before: x[n], x[n-1], ..., x[1]; after: x[-2], ..., x[-n-1].
      return at_start ? SliceAxis(c, x, rank, axis, n, 0, -1, false)
                      : SliceAxis(c, x, rank, axis, -2, -n - 2, -1, false);
    }
    if (mode == PadMode::kEdge) {
      Output edge = at_start ? SliceAxis(c, x, rank, axis, 0, 1, 1, false)
                             : SliceAxis(c, x, rank, axis, -1, 0, 1, true);
      std::vector<int64_t> mult(rank, 1);
      mult[axis] = n;
      return c.Op("Tile", {edge, c.Ints64(mult)});
    }
    std::vector<int64_t> keep(rank, 1), put(rank, 0);
    keep[axis] = 0;
    put[axis] = n;
    Output dims = c.Op("Add", {c.Op("Mul", {ShapeVector(c, x), c.Ints64(keep)}), c.Ints64(put)});
    return c.Op("Fill", {dims, fill});
  };
  std::vector<Output> parts;
  if (before > 0) parts.push_back(block(before, true));
  parts.push_back(x);
  if (after > 0) parts.push_back(block(after, false));
  parts.push_back(c.Int32(axis));
  return c.Op("Concat", parts);
}

Output PadAll(NodeContext& c, const Output& x, int rank, const std::vector<int64_t>& pads,
              const Output& fill, PadMode mode) {
  Output y = x;
  for (int a = 0; a < rank; ++a) y = PadAxis(c, y, rank, a, pads[a], pads[rank + a], fill, mode);
  return y;
}

PartialShape BroadcastShape(const PartialShape& a, const PartialShape& b) {
  if (!a.rank_known() || !b.rank_known()) return PartialShape::Unknown();
  const int r = std::max(a.rank(), b.rank());
  std::vector<int64_t> out(r);
  for (int i = 0; i < r; ++i) {
    int ia = i - (r - a.rank()), ib = i - (r - b.rank());
    int64_t da = ia >= 0 ? a.dim(ia) : 1, db = ib >= 0 ? b.dim(ib) : 1;
    out[i] = da == 1 ? db : db == 1 ? da : da == db ? da : -1;
  }
  return PartialShape(out);
}

std::optional<std::vector<int64_t>> IntValues(const std::optional<Tensor>& t) {
  if (!t) return std::nullopt;
  std::vector<int64_t> out;
  if (t->dtype() == DataType::kInt64) {
    for (int64_t v : t->flat<int64_t>()) out.push_back(v);
  } else if (t->dtype() == DataType::kInt32) {
    for (int32_t v : t->flat<int32_t>()) out.push_back(v);
  } else {
    return std::nullopt;
  }
  return out;
}

Tensor IntTensor(const std::vector<int64_t>& v, const std::vector<int64_t>& dims, DataType dtype) {
  Tensor t(dtype, TensorShape(std::span<const int64_t>(dims)));
  for (size_t i = 0; i < v.size(); ++i) {
    if (dtype == DataType::kInt64) t.data<int64_t>()[i] = v[i];
    else t.data<int32_t>()[i] = int32_t(v[i]);
  }
  return t;
}

}  // namespace flowstate::onnx_import

// Converters of ONNX's shape, gather, padding and constant ops (slicing:
// onnx_slice_ops.cc) (the table is in
// onnx_ops.cc). Integer shape computations on values known at import are
// folded into constants, so that a Reshape fed by Shape -> Gather -> Concat
// gets a constant shape where the model's shapes are static.
#include <algorithm>
#include <limits>

#include "api/onnx/convert_util.h"
#include "api/onnx/converters.h"

namespace flowstate::onnx_import {
namespace {

int64_t NumElements(const std::vector<int64_t>& dims) {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  return n;
}

// The same constant in a new shape (folding Reshape/Unsqueeze/Squeeze/Flatten).
std::optional<Tensor> Reshaped(const std::optional<Tensor>& t, const std::vector<int64_t>& dims) {
  if (!t || NumElements(dims) != t->num_elements()) return std::nullopt;
  for (int64_t d : dims) {
    if (d < 0) return std::nullopt;
  }
  StatusOr<Tensor> r = t->Reshaped(TensorShape(std::span<const int64_t>(dims)));
  if (!r.ok()) return std::nullopt;
  return r->DeepCopy();
}

}  // namespace

Status ConvertIdentity(NodeContext& c) {
  FS_ASSIGN_OR_RETURN(Value x, c.input(0));
  return c.SetOutput(0, c.Op("Identity", {x.out}), x.dtype, x.shape, x.constant);
}

Status ConvertConstant(NodeContext& c) {
  static const char* kForms[] = {"value", "value_float", "value_floats", "value_int",
                                 "value_ints", "sparse_value", "value_string", "value_strings"};
  std::string form;
  for (const char* f : kForms) {
    if (c.HasAttr(f)) {
      if (!form.empty()) return c.Error("has both attributes '" + form + "' and '" + f + "'");
      form = f;
    }
  }
  Tensor t;
  if (form == "value") {
    FS_ASSIGN_OR_RETURN(t, c.TensorAttr("value"));
  } else if (form == "value_float") {
    FS_ASSIGN_OR_RETURN(double v, c.Float("value_float"));
    t = Tensor::Scalar<float>(float(v));
  } else if (form == "value_floats") {
    FS_ASSIGN_OR_RETURN(std::vector<double> v, c.Floats("value_floats"));
    t = Tensor::FromVector<float>(std::vector<float>(v.begin(), v.end()));
  } else if (form == "value_int") {
    FS_ASSIGN_OR_RETURN(int64_t v, c.Int("value_int"));
    t = Tensor::Scalar<int64_t>(v);
  } else if (form == "value_ints") {
    FS_ASSIGN_OR_RETURN(std::vector<int64_t> v, c.Ints("value_ints"));
    t = Tensor::FromVector<int64_t>(v);
  } else if (form.empty()) {
    return c.Error("has no value attribute");
  } else {
    return c.Unsupported("attribute '" + form + "' (sparse and string constants)");
  }
  return c.SetOutput(0, c.Const(t), t.dtype(), PartialShape(t.shape()), t);
}

Status ConvertConstantOfShape(NodeContext& c) {
  FS_ASSIGN_OR_RETURN(Value shape, c.input(0));
  Tensor value = Tensor::Scalar<float>(0.0f);
  if (c.HasAttr("value")) {
    FS_ASSIGN_OR_RETURN(value, c.TensorAttr("value"));
    if (value.num_elements() != 1) return c.Error("attribute 'value' must hold one element");
    StatusOr<Tensor> s = value.Reshaped(TensorShape());
    if (!s.ok()) return c.Error("attribute 'value' must hold one element");
    value = s->DeepCopy();
  } else {
    c.Ignore("value");
  }
  return c.SetOutput(0, c.Op("Fill", {shape.out, c.Const(value)}), value.dtype());
}

Status ConvertShape(NodeContext& c) {
  FS_ASSIGN_OR_RETURN(Value x, c.input(0));
  int64_t start = 0, end = std::numeric_limits<int64_t>::max();
  if (c.opset() >= 15) {
    FS_ASSIGN_OR_RETURN(start, c.Int("start", 0));
    FS_ASSIGN_OR_RETURN(end, c.Int("end", std::numeric_limits<int64_t>::max()));
  }
  bool whole = start == 0 && end == std::numeric_limits<int64_t>::max();
  if (!whole) FS_RETURN_IF_ERROR(NeedRank(c, x, "data"));
  int64_t r = x.rank();
  if (!whole) {
    if (start < 0) start += r;
    if (end < 0) end += r;
    start = std::clamp<int64_t>(start, 0, r);
    end = std::clamp<int64_t>(end, start, r);
  } else if (r >= 0) {
    end = r;
  }
  if (x.shape.rank_known()) {
    std::vector<int64_t> dims(x.shape.dims().begin() + start, x.shape.dims().begin() + end);
    if (std::all_of(dims.begin(), dims.end(), [](int64_t d) { return d >= 0; })) {
      Tensor t = Tensor::FromVector<int64_t>(dims);
      return c.SetOutput(0, c.Const(t), DataType::kInt64, PartialShape(), t);
    }
  }
  Output s = ShapeVector(c, x.out);
  if (!whole) s = c.Op("Slice", {s, c.Ints64({start}), c.Ints64({end - start})});
  return c.SetOutput(0, s, DataType::kInt64);
}

Status ConvertSize(NodeContext& c) {
  FS_ASSIGN_OR_RETURN(Value x, c.input(0));
  if (x.shape.IsFullyDefined()) {
    Tensor t = Tensor::Scalar<int64_t>(x.shape.num_elements());
    return c.SetOutput(0, c.Const(t), DataType::kInt64, PartialShape(), t);
  }
  return c.SetOutput(0, c.Op("Size", {x.out}, {{"out_type", AttrValue(DataType::kInt64)}}),
                     DataType::kInt64, PartialShape({}));
}

Status ConvertReshape(NodeContext& c) {
  FS_ASSIGN_OR_RETURN(Value x, c.input(0));
  FS_ASSIGN_OR_RETURN(Value shape, c.input(1));
  int64_t allowzero = 0;
  if (c.opset() >= 14) {
    FS_ASSIGN_OR_RETURN(allowzero, c.Int("allowzero", 0));
  }
  auto dims = IntValues(shape.constant);
  if (!dims) {
    if (shape.dtype != DataType::kInt64) return c.Error("input 'shape' must be int64");
    Output target = shape.out;
    // A 0 entry copies the input's dimension: select from Shape(x), cut or
    // padded to the shape vector's length. (Where that length or the
    // input's rank is unknown, the shape goes as it is: 0 stays 0.)
    if (allowzero == 0 && shape.shape.rank_known() && shape.rank() == 1 &&
        shape.shape.dim(0) >= 0 && x.rank() >= 0) {
      int64_t n = shape.shape.dim(0);
      Output dims_x = ShapeVector(c, x.out);
      if (n <= x.rank()) {
        dims_x = c.Op("Slice", {dims_x, c.Ints64({0}), c.Ints64({n})});
      } else {
        dims_x = c.Op("Concat", {dims_x, c.Ints64(std::vector<int64_t>(n - x.rank(), 0)),
                                 c.Int32(0)});
      }
      Output zero = c.Op("Equal", {shape.out, c.Scalar(0, DataType::kInt64)});
      target = c.Op("Select", {zero, dims_x, shape.out});
    }
    // The rank is the shape vector's length, where that is known.
    PartialShape rank_only = shape.rank() == 1 && shape.shape.dim(0) >= 0
                                 ? PartialShape::UnknownOfRank(int(shape.shape.dim(0)))
                                 : PartialShape::Unknown();
    return c.SetOutput(0, c.Op("Reshape", {x.out, target}), x.dtype, rank_only);
  }
  // 0 copies the input's dimension (unless allowzero); -1 is inferred.
  std::vector<Output> parts;
  bool dynamic = false;
  std::vector<int64_t> out = *dims;
  for (size_t i = 0; i < out.size(); ++i) {
    if (out[i] == 0 && allowzero == 0) {
      if (!x.shape.rank_known() || int(i) >= x.rank()) {
        return c.Error("shape entry " + std::to_string(i) + " is 0 (copy) but the input has no "
                       "such dimension");
      }
      out[i] = x.shape.dim(int(i));
      if (out[i] < 0) dynamic = true;
    }
  }
  Output target;
  if (!dynamic) {
    target = c.Ints64(out);
  } else {
    Output s = ShapeVector(c, x.out);
    std::vector<Output> pieces;
    for (size_t i = 0; i < out.size(); ++i) {
      if (out[i] >= 0 || (*dims)[i] == -1) {
        pieces.push_back(c.Ints64({(*dims)[i] == -1 ? -1 : out[i]}));
      } else {
        pieces.push_back(c.Op("Slice", {s, c.Ints64({int64_t(i)}), c.Ints64({1})}));
      }
    }
    pieces.push_back(c.Int32(0));
    target = c.Op("Concat", pieces);
  }
  std::optional<Tensor> folded;
  if (x.constant && !dynamic) {
    std::vector<int64_t> d = out;
    int64_t known = 1, unknown = -1;
    for (size_t i = 0; i < d.size(); ++i) {
      if (d[i] == -1) unknown = int64_t(i);
      else known *= d[i];
    }
    if (unknown >= 0 && known > 0) d[unknown] = x.constant->num_elements() / known;
    folded = Reshaped(x.constant, d);
  }
  PartialShape known = PartialShape::Unknown();
  if (!dynamic) {
    std::vector<int64_t> d = out;
    int64_t product = 1, unknown = -1;
    for (size_t i = 0; i < d.size(); ++i) {
      if (d[i] == -1) unknown = int64_t(i);
      else product *= d[i];
    }
    if (unknown >= 0) {
      d[unknown] = x.shape.IsFullyDefined() && product > 0 ? x.shape.num_elements() / product : -1;
    }
    known = PartialShape(d);
  }
  return c.SetOutput(0, c.Op("Reshape", {x.out, target}), x.dtype, known, folded);
}

Status ConvertFlatten(NodeContext& c) {
  FS_ASSIGN_OR_RETURN(Value x, c.input(0));
  FS_ASSIGN_OR_RETURN(int64_t axis_attr, c.Int("axis", 1));
  FS_RETURN_IF_ERROR(NeedRank(c, x, "input"));
  FS_ASSIGN_OR_RETURN(int axis, NormAxis(c, axis_attr, x.rank(), "axis", /*inclusive=*/true));
  int64_t outer = 1, inner = 1;
  for (int i = 0; i < x.rank(); ++i) {
    int64_t d = x.shape.dim(i);
    int64_t& p = i < axis ? outer : inner;
    p = (p < 0 || d < 0) ? -1 : p * d;
  }
  Output target;
  if (inner >= 0) {
    target = c.Ints64({outer >= 0 ? outer : -1, inner});
  } else if (outer >= 0) {
    target = c.Ints64({outer, -1});
  } else {
    Output s = ShapeVector(c, x.out);
    Output head = c.Op("Slice", {s, c.Ints64({0}), c.Ints64({axis})});
    Output prod = c.Op("Prod", {head, c.Ints64({0})}, {{"keep_dims", AttrValue(true)}});
    target = c.Op("Concat", {prod, c.Ints64({-1}), c.Int32(0)});
  }
  return c.SetOutput(0, c.Op("Reshape", {x.out, target}), x.dtype);
}

Status ConvertTranspose(NodeContext& c) {
  FS_ASSIGN_OR_RETURN(Value x, c.input(0));
  std::vector<int64_t> perm;
  if (c.HasAttr("perm")) {
    FS_ASSIGN_OR_RETURN(perm, c.Ints("perm"));
  } else {
    c.Ignore("perm");
    FS_RETURN_IF_ERROR(NeedRank(c, x, "data"));
    for (int i = x.rank() - 1; i >= 0; --i) perm.push_back(i);
  }
  if (x.rank() >= 0 && int(perm.size()) != x.rank()) {
    return c.Error("attribute 'perm' has " + std::to_string(perm.size()) +
                   " entries for an input of rank " + std::to_string(x.rank()));
  }
  std::vector<int64_t> dims(perm.size(), -1);
  if (x.rank() == int(perm.size())) {
    for (size_t i = 0; i < perm.size(); ++i) {
      if (perm[i] >= 0 && perm[i] < x.rank()) dims[i] = x.shape.dim(int(perm[i]));
    }
  }
  return c.SetOutput(0, Transpose(c, x.out, perm), x.dtype, PartialShape(dims));
}

Status ConvertConcat(NodeContext& c) {
  FS_ASSIGN_OR_RETURN(int64_t axis_attr, c.Int("axis"));
  if (c.num_inputs() < 1) return c.Error("needs at least one input");
  std::vector<Value> in;
  int rank = -1;
  for (int i = 0; i < c.num_inputs(); ++i) {
    FS_ASSIGN_OR_RETURN(Value v, c.input(i));
    if (!in.empty() && v.dtype != in[0].dtype) return c.Error("inputs have different dtypes");
    if (v.rank() >= 0) rank = v.rank();
    in.push_back(std::move(v));
  }
  if (rank < 0 && axis_attr < 0) {
    return c.Unsupported("a negative axis over inputs of unknown rank");
  }
  int axis = int(axis_attr);
  if (rank >= 0) {
    FS_ASSIGN_OR_RETURN(axis, NormAxis(c, axis_attr, rank, "axis"));
  }
  // Fold 1-D integer constants (shape vectors).
  bool all_const = rank == 1;
  std::vector<int64_t> folded;
  for (const Value& v : in) {
    auto iv = IntValues(v.constant);
    if (!iv) {
      all_const = false;
      break;
    }
    folded.insert(folded.end(), iv->begin(), iv->end());
  }
  if (all_const) {
    Tensor t = IntTensor(folded, {int64_t(folded.size())}, in[0].dtype);
    return c.SetOutput(0, c.Const(t), in[0].dtype, PartialShape(), t);
  }
  std::vector<Output> ops;
  for (const Value& v : in) ops.push_back(v.out);
  ops.push_back(c.Int32(axis));
  return c.SetOutput(0, c.Op("Concat", ops), in[0].dtype);
}

Status ConvertGather(NodeContext& c) {
  FS_ASSIGN_OR_RETURN(Value x, c.input(0));
  FS_ASSIGN_OR_RETURN(Value idx, c.input(1));
  FS_ASSIGN_OR_RETURN(int64_t axis_attr, c.Int("axis", 0));
  FS_RETURN_IF_ERROR(NeedRank(c, x, "data"));
  FS_ASSIGN_OR_RETURN(int axis, NormAxis(c, axis_attr, x.rank(), "axis"));
  int64_t dim = x.shape.dim(axis);
  Output indices = idx.out;
  if (auto iv = IntValues(idx.constant)) {
    std::vector<int64_t> fixed = *iv;
    bool negative = false;
    for (int64_t& i : fixed) {
      if (i < 0) {
        negative = true;
        if (dim < 0) break;
        i += dim;
      }
      if (dim >= 0 && (i < 0 || i >= dim)) {
        return c.Error("index " + std::to_string(i) + " is out of range for axis " +
                       std::to_string(axis) + " of size " + std::to_string(dim));
      }
    }
    if (negative && dim < 0) {
      return c.Unsupported("negative indices along an axis of unknown size");
    }
    // Fold a gather from an integer constant vector (shape arithmetic).
    if (auto xv = IntValues(x.constant); xv && x.rank() == 1) {
      std::vector<int64_t> out;
      for (int64_t i : fixed) out.push_back((*xv)[i]);
      Tensor t = IntTensor(out, idx.constant->shape().dim_vector(), x.dtype);
      return c.SetOutput(0, c.Const(t), x.dtype, PartialShape(), t);
    }
    if (negative) {
      indices = c.Const(IntTensor(fixed, idx.constant->shape().dim_vector(), idx.dtype));
    }
  } else {
    // Negative indices count from the end: i + dim where i < 0.
    Output d = c.Op("Gather", {c.Op("Shape", {x.out}, {{"out_type", AttrValue(idx.dtype)}}),
                               c.Int32(axis)});
    Output neg = c.Op("Less", {idx.out, c.Scalar(0, idx.dtype)});
    indices = c.Op("Select", {neg, c.Op("Add", {idx.out, d}), idx.out});
  }
  return c.SetOutput(0, c.Op("Gather", {x.out, indices}, {{"axis", AttrValue(int64_t(axis))}}),
                     x.dtype);
}

namespace {
// A shape-only op whose `what` input is computed: a Reshape to the output
// shape ONNX's shape inference found, when it found every dimension.
Status ReshapeToInferred(NodeContext& c, const Value& x, const char* what) {
  PartialShape out = c.OutputShape(0);
  if (!out.rank_known() || !out.IsFullyDefined()) {
    return c.Unsupported("input '" + std::string(what) +
                         "' must be a constant (an initializer or a Constant), or the output's "
                         "shape known");
  }
  return c.SetOutput(0, c.Op("Reshape", {x.out, c.Ints64(out.dims())}), x.dtype, out);
}
}  // namespace

Status ConvertUnsqueeze(NodeContext& c) {
  FS_ASSIGN_OR_RETURN(Value x, c.input(0));
  std::vector<int64_t> axes;
  if (c.opset() >= 13) {
    FS_ASSIGN_OR_RETURN(Value a, c.input(1));
    if (!a.constant) return ReshapeToInferred(c, x, "axes");
    FS_ASSIGN_OR_RETURN(axes, c.ConstInts(1, "axes"));
  } else {
    FS_ASSIGN_OR_RETURN(axes, c.Ints("axes"));
  }
  FS_RETURN_IF_ERROR(NeedRank(c, x, "data"));
  const int out_rank = x.rank() + int(axes.size());
  for (int64_t& a : axes) {
    FS_ASSIGN_OR_RETURN(int n, NormAxis(c, a, out_rank, "axes"));
    a = n;
  }
  std::sort(axes.begin(), axes.end());
  if (std::adjacent_find(axes.begin(), axes.end()) != axes.end()) {
    return c.Error("'axes' has a repeated entry");
  }
  Output y = x.out;
  std::vector<int64_t> dims = x.shape.dims();
  for (int64_t a : axes) {
    y = c.Op("ExpandDims", {y, c.Int32(a)});
    dims.insert(dims.begin() + a, 1);
  }
  if (axes.empty()) y = c.Op("Identity", {y});
  return c.SetOutput(0, y, x.dtype, PartialShape(dims), Reshaped(x.constant, dims));
}

Status ConvertSqueeze(NodeContext& c) {
  FS_ASSIGN_OR_RETURN(Value x, c.input(0));
  std::vector<int64_t> axes;
  if (c.opset() >= 13) {
    if (c.has_input(1)) {
      FS_ASSIGN_OR_RETURN(Value a, c.input(1));
      if (!a.constant) return ReshapeToInferred(c, x, "axes");
      FS_ASSIGN_OR_RETURN(axes, c.ConstInts(1, "axes"));
    }
  } else {
    FS_ASSIGN_OR_RETURN(axes, c.Ints("axes", std::vector<int64_t>{}));
  }
  if (!axes.empty()) FS_RETURN_IF_ERROR(NeedRank(c, x, "data"));
  for (int64_t& a : axes) {
    FS_ASSIGN_OR_RETURN(int n, NormAxis(c, a, x.rank(), "axes"));
    a = n;
    if (x.shape.dim(n) > 1) {
      return c.Error("axis " + std::to_string(n) + " has size " +
                     std::to_string(x.shape.dim(n)) + ", not 1");
    }
  }
  Output y = c.Op("Squeeze", {x.out}, {{"axis", AttrValue(axes)}});
  std::optional<Tensor> folded;
  if (x.constant) {
    std::vector<int64_t> dims;
    for (int i = 0; i < x.constant->rank(); ++i) {
      bool drop = axes.empty() ? x.constant->dim(i) == 1
                               : std::find(axes.begin(), axes.end(), i) != axes.end();
      if (!drop) dims.push_back(x.constant->dim(i));
    }
    folded = Reshaped(x.constant, dims);
  }
  return c.SetOutput(0, y, x.dtype, PartialShape(), folded);
}

Status ConvertExpand(NodeContext& c) {  // bidirectional broadcast against zeros of `shape`
  FS_ASSIGN_OR_RETURN(Value x, c.input(0));
  FS_ASSIGN_OR_RETURN(Value shape, c.input(1));
  Output y;
  if (x.dtype == DataType::kBool) {
    y = c.Op("LogicalOr", {x.out, c.Op("Fill", {shape.out, c.Scalar(0, x.dtype)})});
  } else {
    y = c.Op("Add", {x.out, c.Op("Fill", {shape.out, c.Scalar(0, x.dtype)})});
  }
  return c.SetOutput(0, y, x.dtype);
}

Status ConvertTile(NodeContext& c) {
  FS_ASSIGN_OR_RETURN(Value x, c.input(0));
  FS_ASSIGN_OR_RETURN(Value repeats, c.input(1));
  return c.SetOutput(0, c.Op("Tile", {x.out, repeats.out}), x.dtype);
}

Status ConvertPad(NodeContext& c) {
  FS_ASSIGN_OR_RETURN(Value x, c.input(0));
  FS_ASSIGN_OR_RETURN(std::string mode, c.String("mode", "constant"));
  if (mode != "constant" && mode != "edge" && mode != "reflect") {
    return c.Error("attribute 'mode' = \"" + mode + "\" is not a valid value");
  }
  FS_RETURN_IF_ERROR(NeedRank(c, x, "data"));
  const int r = x.rank();
  FS_ASSIGN_OR_RETURN(std::vector<int64_t> pads, c.ConstInts(1, "pads"));
  if (int(pads.size()) != 2 * r) {
    return c.Error("'pads' has " + std::to_string(pads.size()) + " entries for rank " +
                   std::to_string(r));
  }
  Output fill = c.Scalar(0, x.dtype);
  if (c.has_input(2)) {
    FS_ASSIGN_OR_RETURN(Value v, c.input(2));
    if (v.dtype != x.dtype) return c.Error("constant_value has another dtype than data");
    fill = c.Op("Reshape", {v.out, c.Ints64({})});
  }
  // Negative pads crop.
  std::vector<int64_t> grow(pads), b(r, 0), e(r, 0), s(r, 1);
  int64_t begin_mask = 0, end_mask = 0;
  bool crop = false;
  for (int a = 0; a < r; ++a) {
    if (pads[a] < 0) {
      crop = true;
      b[a] = -pads[a];
      grow[a] = 0;
    } else {
      begin_mask |= int64_t(1) << a;
    }
    if (pads[r + a] < 0) {
      crop = true;
      e[a] = pads[r + a];
      grow[r + a] = 0;
    } else {
      end_mask |= int64_t(1) << a;
    }
  }
  Output y = x.out;
  if (crop) {
    y = c.Op("StridedSlice", {y, c.Ints64(b), c.Ints64(e), c.Ints64(s)},
             {{"begin_mask", AttrValue(begin_mask)}, {"end_mask", AttrValue(end_mask)}});
  }
  y = PadAll(c, y, r, grow, fill,
             mode == "edge" ? PadMode::kEdge
                            : mode == "reflect" ? PadMode::kReflect : PadMode::kConstant);
  if (y.node == x.out.node) y = c.Op("Identity", {y});
  return c.SetOutput(0, y, x.dtype);
}

Status ConvertRange(NodeContext& c) {
  FS_ASSIGN_OR_RETURN(Value start, c.input(0));
  FS_ASSIGN_OR_RETURN(Value limit, c.input(1));
  FS_ASSIGN_OR_RETURN(Value delta, c.input(2));
  return c.SetOutput(0, c.Op("Range", {start.out, limit.out, delta.out}), start.dtype);
}

// Inference: the identity. Imported for training (OnnxImportOptions::
// training), Flowstate's Dropout, which evaluation graphs make the identity
// again; its ratio must then be known at import.
Status ConvertDropout(NodeContext& c) {
  FS_ASSIGN_OR_RETURN(Value x, c.input(0));
  double rate = 0.5;
  int64_t seed = 0;
  if (c.opset() >= 12) {
    FS_ASSIGN_OR_RETURN(seed, c.Int("seed", 0));
    // A ratio of 0 drops nothing, in training too.
    bool zero_ratio = false;
    if (c.has_input(1)) {
      FS_ASSIGN_OR_RETURN(Value ratio, c.input(1));
      if (ratio.constant) {
        FS_ASSIGN_OR_RETURN(std::vector<double> rv, c.ConstDoubles(1, "ratio"));
        zero_ratio = !rv.empty() && rv[0] == 0;
        if (rv.size() == 1) rate = rv[0];
      } else if (c.training()) {
        return c.Unsupported("a ratio computed by the graph (training needs it known at import)");
      }
    }
    if (zero_ratio) rate = 0;
    if (c.has_input(2) && !zero_ratio) {
      FS_ASSIGN_OR_RETURN(std::vector<double> training, c.ConstDoubles(2, "training_mode"));
      // A model exported for training (PyTorch's TrainingMode.TRAINING):
      // in a job, Dropout as any other; elsewhere it would drop at random.
      if (!training.empty() && training[0] != 0 && !c.training()) {
        return c.Unsupported("training_mode = true (dropout in training mode) outside a training job");
      }
    }
  } else {
    FS_ASSIGN_OR_RETURN(rate, c.Float("ratio", 0.5));
  }
  if (c.training() && rate > 0 && IsFloating(x.dtype)) {
    if (!(rate < 1)) return c.Error("ratio must be in [0, 1)");
    std::vector<Output> d = c.OpN("Dropout", {x.out},
                                  {{"rate", AttrValue(rate)}, {"seed", AttrValue(seed)}}, 2);
    FS_RETURN_IF_ERROR(c.SetOutput(0, d[0], x.dtype, x.shape));
    if (c.has_output(1)) {
      Output mask = c.Op("NotEqual", {d[1], c.Scalar(0, x.dtype)});
      FS_RETURN_IF_ERROR(c.SetOutput(1, mask, DataType::kBool, x.shape));
    }
    return Status();
  }
  FS_RETURN_IF_ERROR(c.SetOutput(0, c.Op("Identity", {x.out}), x.dtype, x.shape));
  if (c.has_output(1)) {
    Output mask = c.Op("Cast", {c.Op("OnesLike", {x.out})}, {{"DstT", AttrValue(DataType::kBool)}});
    FS_RETURN_IF_ERROR(c.SetOutput(1, mask, DataType::kBool, x.shape));
  }
  return Status();
}

}  // namespace flowstate::onnx_import

namespace flowstate::onnx_import {
namespace {

// [N, C, H, W] with C, H, W known (N may be dynamic).
StatusOr<std::vector<int64_t>> StaticChw(NodeContext& c, const Value& x) {
  FS_RETURN_IF_ERROR(NeedRank(c, x, "input"));
  if (x.rank() != 4) return c.Error("input must have rank 4 (NCHW)");
  std::vector<int64_t> d = x.shape.dims();
  if (d[1] < 0 || d[2] < 0 || d[3] < 0) {
    return c.Unsupported("an input whose C, H and W are not all known");
  }
  return d;
}

}  // namespace

Status ConvertDepthToSpace(NodeContext& c) {
  FS_ASSIGN_OR_RETURN(Value x, c.input(0));
  FS_ASSIGN_OR_RETURN(int64_t b, c.Int("blocksize"));
  FS_ASSIGN_OR_RETURN(std::string mode, c.String("mode", "DCR"));
  if (mode != "DCR" && mode != "CRD") {
    return c.Error("attribute 'mode' = \"" + mode + "\" is not a valid value");
  }
  FS_ASSIGN_OR_RETURN(std::vector<int64_t> d, StaticChw(c, x));
  if (b < 1 || d[1] % (b * b) != 0) {
    return c.Error("attribute 'blocksize' = " + std::to_string(b) + " does not divide C = " +
                   std::to_string(d[1]) + " into blocks");
  }
  int64_t cc = d[1] / (b * b);
  std::vector<int64_t> split = mode == "DCR" ? std::vector<int64_t>{-1, b, b, cc, d[2], d[3]}
                                             : std::vector<int64_t>{-1, cc, b, b, d[2], d[3]};
  std::vector<int64_t> perm = mode == "DCR" ? std::vector<int64_t>{0, 3, 4, 1, 5, 2}
                                            : std::vector<int64_t>{0, 1, 4, 2, 5, 3};
  Output y = c.Op("Reshape", {x.out, c.Ints64(split)});
  y = Transpose(c, y, perm);
  y = c.Op("Reshape", {y, c.Ints64({-1, cc, d[2] * b, d[3] * b})});
  return c.SetOutput(0, y, x.dtype);
}

Status ConvertSpaceToDepth(NodeContext& c) {
  FS_ASSIGN_OR_RETURN(Value x, c.input(0));
  FS_ASSIGN_OR_RETURN(int64_t b, c.Int("blocksize"));
  FS_ASSIGN_OR_RETURN(std::vector<int64_t> d, StaticChw(c, x));
  if (b < 1 || d[2] % b != 0 || d[3] % b != 0) {
    return c.Error("attribute 'blocksize' = " + std::to_string(b) + " does not divide H and W");
  }
  Output y = c.Op("Reshape", {x.out, c.Ints64({-1, d[1], d[2] / b, b, d[3] / b, b})});
  y = Transpose(c, y, {0, 3, 5, 1, 2, 4});
  y = c.Op("Reshape", {y, c.Ints64({-1, d[1] * b * b, d[2] / b, d[3] / b})});
  return c.SetOutput(0, y, x.dtype);
}

}  // namespace flowstate::onnx_import

namespace flowstate::onnx_import {

Status ConvertEyeLike(NodeContext& c) {
  FS_ASSIGN_OR_RETURN(Value x, c.input(0));
  FS_ASSIGN_OR_RETURN(int64_t k, c.Int("k", 0));
  DataType dt = x.dtype;
  if (c.HasAttr("dtype")) {
    FS_ASSIGN_OR_RETURN(int64_t t, c.Int("dtype"));
    dt = FromOnnxType(int32_t(t));
    if (dt == DataType::kInvalid) return c.Unsupported("attribute 'dtype' = " + OnnxTypeName(int32_t(t)));
  } else {
    c.Ignore("dtype");
  }
  FS_RETURN_IF_ERROR(NeedRank(c, x, "input"));
  if (x.rank() != 2) return c.Error("input must have rank 2");
  auto range = [&](int axis, std::vector<int64_t> dims) {
    Output r = c.Op("Range", {c.Scalar(0, DataType::kInt64), DimScalar(c, x, axis),
                              c.Scalar(1, DataType::kInt64)});
    return c.Op("Reshape", {r, c.Ints64(dims)});
  };
  Output rows = range(0, {-1, 1}), cols = range(1, {1, -1});
  Output on = c.Op("Equal", {c.Op("Sub", {cols, rows}), c.Scalar(double(k), DataType::kInt64)});
  return c.SetOutput(0, c.Op("Cast", {on}, {{"DstT", AttrValue(dt)}}), dt, x.shape);
}

}  // namespace flowstate::onnx_import

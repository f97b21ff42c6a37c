// Converters of ONNX's element-wise ops, reductions, matrix products and
// softmax (the table is in onnx_ops.cc).
#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>

#include "api/onnx/convert_util.h"
#include "api/onnx/converters.h"

namespace flowstate::onnx_import {
namespace {

// Folds an integer binary op over constants (shape arithmetic); nullopt
// when the inputs are not small integer constants of one dtype.
std::optional<Tensor> FoldIntBinary(const char* op, const Value& a, const Value& b) {
  auto x = IntValues(a.constant), y = IntValues(b.constant);
  if (!x || !y || a.dtype != b.dtype || a.constant->rank() > 1 || b.constant->rank() > 1) {
    return std::nullopt;
  }
  if (x->size() != y->size() && x->size() != 1 && y->size() != 1) return std::nullopt;
  size_t n = std::max(x->size(), y->size());
  std::vector<int64_t> out(n);
  std::string o = op;
  for (size_t i = 0; i < n; ++i) {
    int64_t p = (*x)[x->size() == 1 ? 0 : i], q = (*y)[y->size() == 1 ? 0 : i];
    if (o == "Add") out[i] = p + q;
    else if (o == "Sub") out[i] = p - q;
    else if (o == "Mul") out[i] = p * q;
    else if (o == "Div" && q != 0) out[i] = p / q;
    else return std::nullopt;
  }
  // The result has the broadcast shape: the larger operand's, or at equal
  // sizes the one of higher rank (a scalar and a [1] make a [1]).
  bool from_a = x->size() != y->size() ? x->size() > y->size()
                                       : a.constant->rank() >= b.constant->rank();
  const Tensor& shape_from = from_a ? *a.constant : *b.constant;
  return IntTensor(out, shape_from.shape().dim_vector(), a.dtype);
}

// An element-wise op of x, where x = Transpose(w, perm) is computed as
// Transpose(op(w), perm): the Transpose then cancels against the next
// converter's inverse one (an NCHW model's Relu between two convolutions
// stays NHWC), and is pruned when nothing else reads it.
Output ThroughTranspose(NodeContext& c, const Output& x,
                        const std::function<Output(const Output&)>& op) {
  const auto* t = c.TransposeOf(x);
  if (t == nullptr) return op(x);
  const std::vector<int64_t> perm = t->second;
  return Transpose(c, op(t->first), perm);
}

}  // namespace

Status UnaryOp(NodeContext& c, const char* op, bool float_only) {
  FS_ASSIGN_OR_RETURN(Value x, c.input(0));
  if (float_only) FS_RETURN_IF_ERROR(NeedFloat(c, x, "X"));
  Output y = ThroughTranspose(c, x.out, [&](const Output& w) { return c.Op(op, {w}); });
  return c.SetOutput(0, y, x.dtype, x.shape);
}

Status BinaryOp(NodeContext& c, const char* op) {
  FS_ASSIGN_OR_RETURN(Value a, c.input(0));
  FS_ASSIGN_OR_RETURN(Value b, c.input(1));
  if (a.dtype != b.dtype) {
    return c.Error("inputs A and B have different dtypes (" + std::string(DataTypeName(a.dtype)) +
                   ", " + std::string(DataTypeName(b.dtype)) + ")");
  }
  if (auto folded = FoldIntBinary(op, a, b)) {
    return c.SetOutput(0, c.Const(*folded), a.dtype, PartialShape(), folded);
  }
  // Both transposed alike (the same rank, so broadcasting commutes with the
  // perm), or one transposed and the other a scalar: through the Transpose.
  const auto* ta = c.TransposeOf(a.out);
  const auto* tb = c.TransposeOf(b.out);
  if (ta != nullptr && tb != nullptr && ta->second == tb->second && a.rank() >= 0 &&
      a.rank() == b.rank()) {
    const Output wa = ta->first, wb = tb->first;
    const std::vector<int64_t> perm = ta->second;
    return c.SetOutput(0, Transpose(c, c.Op(op, {wa, wb}), perm), a.dtype,
                       BroadcastShape(a.shape, b.shape));
  }
  if ((ta != nullptr && b.rank() == 0) || (tb != nullptr && a.rank() == 0)) {
    const bool left = ta != nullptr;
    Output y = ThroughTranspose(c, left ? a.out : b.out, [&](const Output& w) {
      return c.Op(op, {left ? w : a.out, left ? b.out : w});
    });
    return c.SetOutput(0, y, a.dtype, BroadcastShape(a.shape, b.shape));
  }
  return c.SetOutput(0, c.Op(op, {a.out, b.out}), a.dtype, BroadcastShape(a.shape, b.shape));
}

Status CompareOp(NodeContext& c, const char* op) {
  FS_ASSIGN_OR_RETURN(Value a, c.input(0));
  FS_ASSIGN_OR_RETURN(Value b, c.input(1));
  if (a.dtype != b.dtype) return c.Error("inputs A and B have different dtypes");
  return c.SetOutput(0, c.Op(op, {a.out, b.out}), DataType::kBool,
                     BroadcastShape(a.shape, b.shape));
}

Status VariadicOp(NodeContext& c, const char* op, bool mean) {
  if (c.num_inputs() < 1) return c.Error("needs at least one input");
  FS_ASSIGN_OR_RETURN(Value acc, c.input(0));
  // float16 maxima and minima are exact in float32, where Flowstate has them.
  const bool widen = acc.dtype == DataType::kFloat16 && !mean && std::string(op) != "Add";
  auto in = [&](const Value& v) {
    return widen ? c.Op("Cast", {v.out}, {{"DstT", AttrValue(DataType::kFloat32)}}) : v.out;
  };
  Output y = in(acc);
  PartialShape shape = acc.shape;
  for (int i = 1; i < c.num_inputs(); ++i) {
    FS_ASSIGN_OR_RETURN(Value v, c.input(i));
    if (v.dtype != acc.dtype) return c.Error("inputs have different dtypes");
    y = c.Op(op, {y, in(v)});
    shape = BroadcastShape(shape, v.shape);
  }
  if (widen) y = c.Op("Cast", {y}, {{"DstT", AttrValue(DataType::kFloat16)}});
  if (c.num_inputs() == 1) y = c.Op("Identity", {y});
  if (mean) {
    FS_RETURN_IF_ERROR(NeedFloat(c, acc, "data_0"));
    y = c.Op("Div", {y, c.Scalar(c.num_inputs(), acc.dtype)});
  }
  return c.SetOutput(0, y, acc.dtype, shape);
}

Status ConvertPow(NodeContext& c) {
  FS_ASSIGN_OR_RETURN(Value x, c.input(0));
  FS_ASSIGN_OR_RETURN(Value y, c.input(1));
  Output e = y.out;
  if (y.dtype != x.dtype) e = c.Op("Cast", {e}, {{"DstT", AttrValue(x.dtype)}});
  return c.SetOutput(0, c.Op("Pow", {x.out, e}), x.dtype, BroadcastShape(x.shape, y.shape));
}

Status ConvertNot(NodeContext& c) {
  FS_ASSIGN_OR_RETURN(Value x, c.input(0));
  return c.SetOutput(0, c.Op("LogicalNot", {x.out}), DataType::kBool, x.shape);
}

Status ConvertIsNaN(NodeContext& c) {
  FS_ASSIGN_OR_RETURN(Value x, c.input(0));
  FS_RETURN_IF_ERROR(NeedFloat(c, x, "X"));
  return c.SetOutput(0, c.Op("NotEqual", {x.out, x.out}), DataType::kBool, x.shape);
}

Status ConvertCeil(NodeContext& c) {  // ceil(x) = -floor(-x)
  FS_ASSIGN_OR_RETURN(Value x, c.input(0));
  FS_RETURN_IF_ERROR(NeedFloat(c, x, "X"));
  return c.SetOutput(0, c.Op("Neg", {c.Op("Floor", {c.Op("Neg", {x.out})})}), x.dtype, x.shape);
}

Status ConvertLeakyRelu(NodeContext& c) {
  FS_ASSIGN_OR_RETURN(Value x, c.input(0));
  FS_ASSIGN_OR_RETURN(double alpha, c.Float("alpha", 0.01));
  FS_RETURN_IF_ERROR(NeedFloat(c, x, "X"));
  return c.SetOutput(0, c.Op("LeakyRelu", {x.out}, {{"alpha", AttrValue(alpha)}}), x.dtype,
                     x.shape);
}

namespace {
// alpha * (exp(x) - 1) where x < 0, else x: Select over Flowstate's Elu.
Output ScaledElu(NodeContext& c, const Value& x, double alpha) {
  Output elu = c.Op("Elu", {x.out});
  if (alpha == 1.0) return elu;
  Output pos = c.Op("Greater", {x.out, c.Scalar(0, x.dtype)});
  return c.Op("Select", {pos, x.out, c.Op("Mul", {elu, c.Scalar(alpha, x.dtype)})});
}
}  // namespace

Status ConvertElu(NodeContext& c) {
  FS_ASSIGN_OR_RETURN(Value x, c.input(0));
  FS_ASSIGN_OR_RETURN(double alpha, c.Float("alpha", 1.0));
  FS_RETURN_IF_ERROR(NeedFloat(c, x, "X"));
  return c.SetOutput(0, ScaledElu(c, x, alpha), x.dtype, x.shape);
}

Status ConvertSelu(NodeContext& c) {
  FS_ASSIGN_OR_RETURN(Value x, c.input(0));
  FS_ASSIGN_OR_RETURN(double alpha, c.Float("alpha", 1.67326319217681884765625));
  FS_ASSIGN_OR_RETURN(double gamma, c.Float("gamma", 1.05070102214813232421875));
  FS_RETURN_IF_ERROR(NeedFloat(c, x, "X"));
  Output y = c.Op("Mul", {ScaledElu(c, x, alpha), c.Scalar(gamma, x.dtype)});
  return c.SetOutput(0, y, x.dtype, x.shape);
}

Status ConvertPRelu(NodeContext& c) {  // max(x, 0) + slope * min(x, 0)
  FS_ASSIGN_OR_RETURN(Value x, c.input(0));
  FS_ASSIGN_OR_RETURN(Value slope, c.input(1));
  FS_RETURN_IF_ERROR(NeedFloat(c, x, "X"));
  Output zero = c.Scalar(0, x.dtype);
  Output s = slope.out;
  // A [C] slope for an [N, C, ...] input that does not broadcast from the
  // right is per channel (what older exporters meant).
  if (slope.rank() == 1 && x.rank() >= 3 && slope.shape.dim(0) > 1 &&
      slope.shape.dim(0) == x.shape.dim(1) && slope.shape.dim(0) != x.shape.dim(x.rank() - 1)) {
    std::vector<int64_t> dims(x.rank() - 1, 1);
    dims[0] = -1;
    s = c.Op("Reshape", {s, c.Ints64(dims)});
  }
  Output y = c.Op("Add", {c.Op("Maximum", {x.out, zero}),
                          c.Op("Mul", {s, c.Op("Minimum", {x.out, zero})})});
  return c.SetOutput(0, y, x.dtype, x.shape);
}

namespace {
Output HardSigmoid(NodeContext& c, const Value& x, double alpha, double beta) {
  Output lin = c.Op("Add", {c.Op("Mul", {x.out, c.Scalar(alpha, x.dtype)}), c.Scalar(beta, x.dtype)});
  return c.Op("Maximum", {c.Op("Minimum", {lin, c.Scalar(1, x.dtype)}), c.Scalar(0, x.dtype)});
}
}  // namespace

Status ConvertHardSigmoid(NodeContext& c) {
  FS_ASSIGN_OR_RETURN(Value x, c.input(0));
  FS_ASSIGN_OR_RETURN(double alpha, c.Float("alpha", 0.2));
  FS_ASSIGN_OR_RETURN(double beta, c.Float("beta", 0.5));
  FS_RETURN_IF_ERROR(NeedFloat(c, x, "X"));
  return c.SetOutput(0, HardSigmoid(c, x, alpha, beta), x.dtype, x.shape);
}

Status ConvertHardSwish(NodeContext& c) {
  FS_ASSIGN_OR_RETURN(Value x, c.input(0));
  FS_RETURN_IF_ERROR(NeedFloat(c, x, "X"));
  return c.SetOutput(0, c.Op("Mul", {x.out, HardSigmoid(c, x, 1.0 / 6, 0.5)}), x.dtype, x.shape);
}

Status ConvertSoftsign(NodeContext& c) {
  FS_ASSIGN_OR_RETURN(Value x, c.input(0));
  FS_RETURN_IF_ERROR(NeedFloat(c, x, "input"));
  Output d = c.Op("Add", {c.Op("Abs", {x.out}), c.Scalar(1, x.dtype)});
  return c.SetOutput(0, c.Op("Div", {x.out, d}), x.dtype, x.shape);
}

Status ConvertThresholdedRelu(NodeContext& c) {
  FS_ASSIGN_OR_RETURN(Value x, c.input(0));
  FS_ASSIGN_OR_RETURN(double alpha, c.Float("alpha", 1.0));
  FS_RETURN_IF_ERROR(NeedFloat(c, x, "X"));
  Output keep = c.Op("Greater", {x.out, c.Scalar(alpha, x.dtype)});
  return c.SetOutput(0, c.Op("Select", {keep, x.out, c.Op("ZerosLike", {x.out})}), x.dtype,
                     x.shape);
}

// erf by Abramowitz and Stegun 7.1.26 (absolute error below 1.5e-7), from
// ops that all have gradients.
Status ConvertErf(NodeContext& c) {
  FS_ASSIGN_OR_RETURN(Value x, c.input(0));
  FS_RETURN_IF_ERROR(NeedFloat(c, x, "input"));
  DataType dt = x.dtype;
  auto k = [&](double v) { return c.Scalar(v, dt); };
  Output ax = c.Op("Abs", {x.out});
  Output t = c.Op("Reciprocal", {c.Op("Add", {c.Op("Mul", {ax, k(0.3275911)}), k(1)})});
  const double a[] = {1.061405429, -1.453152027, 1.421413741, -0.284496736, 0.254829592};
  Output poly = k(a[0]);
  for (int i = 1; i < 5; ++i) poly = c.Op("Add", {c.Op("Mul", {poly, t}), k(a[i])});
  poly = c.Op("Mul", {poly, t});
  Output e = c.Op("Exp", {c.Op("Neg", {c.Op("Square", {x.out})})});
  Output y = c.Op("Sub", {k(1), c.Op("Mul", {poly, e})});
  return c.SetOutput(0, c.Op("Mul", {c.Op("Sign", {x.out}), y}), dt, x.shape);
}

Status ConvertTan(NodeContext& c) {
  FS_ASSIGN_OR_RETURN(Value x, c.input(0));
  FS_RETURN_IF_ERROR(NeedFloat(c, x, "input"));
  return c.SetOutput(0, c.Op("Div", {c.Op("Sin", {x.out}), c.Op("Cos", {x.out})}), x.dtype,
                     x.shape);
}

Status ConvertClip(NodeContext& c) {
  FS_ASSIGN_OR_RETURN(Value x, c.input(0));
  std::vector<std::pair<const char*, Output>> bounds;
  bool scalars = true;
  for (int i = 1; i <= 2; ++i) {
    if (!c.has_input(i)) continue;
    FS_ASSIGN_OR_RETURN(Value b, c.input(i));
    if (b.dtype != x.dtype) return c.Error(std::string(i == 1 ? "min" : "max") +
                                           " has another dtype than input");
    bounds.emplace_back(i == 1 ? "Maximum" : "Minimum", b.out);
    scalars = scalars && b.rank() == 0;
  }
  auto clip = [&](const Output& w) {
    Output y = w;
    for (const auto& [op, bound] : bounds) y = c.Op(op, {y, bound});
    return y.node == w.node ? c.Op("Identity", {y}) : y;
  };
  // Scalar bounds (ReLU6) are element-wise: through a Transpose.
  Output y = scalars ? ThroughTranspose(c, x.out, clip) : clip(x.out);
  return c.SetOutput(0, y, x.dtype, x.shape);
}

Status ConvertWhere(NodeContext& c) {
  FS_ASSIGN_OR_RETURN(Value cond, c.input(0));
  FS_ASSIGN_OR_RETURN(Value x, c.input(1));
  FS_ASSIGN_OR_RETURN(Value y, c.input(2));
  if (x.dtype != y.dtype) return c.Error("X and Y have different dtypes");
  return c.SetOutput(0, c.Op("Select", {cond.out, x.out, y.out}), x.dtype,
                     BroadcastShape(cond.shape, BroadcastShape(x.shape, y.shape)));
}

namespace {
Status CastTo(NodeContext& c, const Value& x, DataType to) {
  if (auto v = IntValues(x.constant); v && (to == DataType::kInt32 || to == DataType::kInt64)) {
    Tensor t = IntTensor(*v, x.constant->shape().dim_vector(), to);
    return c.SetOutput(0, c.Const(t), to, PartialShape(), t);
  }
  if (x.dtype == to) return c.SetOutput(0, c.Op("Identity", {x.out}), to, x.shape);
  return c.SetOutput(0, c.Op("Cast", {x.out}, {{"DstT", AttrValue(to)}}), to, x.shape);
}
}  // namespace

Status ConvertCast(NodeContext& c) {
  FS_ASSIGN_OR_RETURN(Value x, c.input(0));
  FS_ASSIGN_OR_RETURN(int64_t to, c.Int("to"));
  DataType dt = FromOnnxType(int32_t(to));
  if (dt == DataType::kInvalid) {
    return c.Unsupported("attribute 'to' = " + OnnxTypeName(int32_t(to)) +
                         " is a type Flowstate does not have");
  }
  return CastTo(c, x, dt);
}

Status ConvertCastLike(NodeContext& c) {
  FS_ASSIGN_OR_RETURN(Value x, c.input(0));
  FS_ASSIGN_OR_RETURN(Value like, c.input(1));
  return CastTo(c, x, like.dtype);
}

Status ConvertSoftmax(NodeContext& c, const char* op) {
  FS_ASSIGN_OR_RETURN(Value x, c.input(0));
  FS_RETURN_IF_ERROR(NeedFloat(c, x, "input"));
  const bool v13 = c.opset() >= 13;
  FS_ASSIGN_OR_RETURN(int64_t axis_attr, c.Int("axis", v13 ? -1 : 1));
  FS_RETURN_IF_ERROR(NeedRank(c, x, "input"));
  const int r = x.rank();
  if (r == 0) return c.Error("input must have rank >= 1");
  FS_ASSIGN_OR_RETURN(int axis, NormAxis(c, axis_attr, r, "axis"));
  if (axis == r - 1) return c.SetOutput(0, c.Op(op, {x.out}), x.dtype, x.shape);
  if (v13) {  // along one axis: swap it to the end and back
    std::vector<int64_t> perm(r);
    for (int i = 0; i < r; ++i) perm[i] = i;
    std::swap(perm[axis], perm[r - 1]);
    Output y = Transpose(c, c.Op(op, {Transpose(c, x.out, perm)}), perm);
    return c.SetOutput(0, y, x.dtype, x.shape);
  }
  // Opsets 11-12: over the input coerced to 2-D at `axis`.
  int64_t inner = 1;
  for (int i = axis; i < r; ++i) {
    if (x.shape.dim(i) < 0) {
      inner = -1;
      break;
    }
    inner *= x.shape.dim(i);
  }
  if (inner < 0) {
    return c.Unsupported("axis " + std::to_string(axis) + " of a tensor whose dimensions from "
                         "that axis on are not all known");
  }
  Output flat = c.Op("Reshape", {x.out, c.Ints64({-1, inner})});
  Output y = c.Op("Reshape", {c.Op(op, {flat}), ShapeVector(c, x.out)});
  return c.SetOutput(0, y, x.dtype, x.shape);
}

Status ConvertMatMul(NodeContext& c) {
  FS_ASSIGN_OR_RETURN(Value a, c.input(0));
  FS_ASSIGN_OR_RETURN(Value b, c.input(1));
  FS_RETURN_IF_ERROR(NeedRank(c, a, "A"));
  FS_RETURN_IF_ERROR(NeedRank(c, b, "B"));
  if (a.dtype != DataType::kFloat32 && a.dtype != DataType::kFloat64) {
    return c.Unsupported("dtype " + std::string(DataTypeName(a.dtype)) +
                         " (Flowstate's MatMul is float32 and float64)");
  }
  if (a.rank() == 0 || b.rank() == 0) return c.Error("inputs must not be scalars");
  Output x = a.out, y = b.out;
  if (a.rank() == 1) x = c.Op("ExpandDims", {x, c.Int32(0)});
  if (b.rank() == 1) y = c.Op("ExpandDims", {y, c.Int32(1)});
  int ra = std::max(a.rank(), 2), rb = std::max(b.rank(), 2);
  Output z = (ra == 2 && rb == 2) ? c.Op("MatMul", {x, y}) : c.Op("BatchMatMul", {x, y});
  int rz = std::max(ra, rb);
  std::vector<int64_t> squeeze;
  if (a.rank() == 1) squeeze.push_back(rz - 2);
  if (b.rank() == 1) squeeze.push_back(rz - 1);
  if (!squeeze.empty()) z = c.Op("Squeeze", {z}, {{"axis", AttrValue(squeeze)}});
  return c.SetOutput(0, z, a.dtype,
                     PartialShape::UnknownOfRank(rz - int(squeeze.size())));
}

Status ConvertGemm(NodeContext& c) {
  FS_ASSIGN_OR_RETURN(Value a, c.input(0));
  FS_ASSIGN_OR_RETURN(Value b, c.input(1));
  FS_ASSIGN_OR_RETURN(double alpha, c.Float("alpha", 1.0));
  FS_ASSIGN_OR_RETURN(double beta, c.Float("beta", 1.0));
  FS_ASSIGN_OR_RETURN(int64_t ta, c.Int("transA", 0));
  FS_ASSIGN_OR_RETURN(int64_t tb, c.Int("transB", 0));
  if (a.dtype != DataType::kFloat32 && a.dtype != DataType::kFloat64) {
    return c.Unsupported("dtype " + std::string(DataTypeName(a.dtype)) +
                         " (Flowstate's MatMul is float32 and float64)");
  }
  Output y = c.Op("MatMul", {a.out, b.out},
                  {{"transpose_a", AttrValue(ta != 0)}, {"transpose_b", AttrValue(tb != 0)}});
  if (alpha != 1.0) y = c.Op("Mul", {y, c.Scalar(alpha, a.dtype)});
  if (c.has_input(2)) {
    FS_ASSIGN_OR_RETURN(Value bias, c.input(2));
    Output cc = bias.out;
    if (beta != 1.0) cc = c.Op("Mul", {cc, c.Scalar(beta, a.dtype)});
    y = c.Op("Add", {y, cc});
  }
  return c.SetOutput(0, y, a.dtype);
}

Status ConvertReduce(NodeContext& c, const char* op, const char* pre, const char* post,
                     bool axes_input) {
  FS_ASSIGN_OR_RETURN(Value x, c.input(0));
  FS_ASSIGN_OR_RETURN(int64_t keep, c.Int("keepdims", 1));
  std::vector<int64_t> axes;
  bool noop = false;
  if (axes_input) {
    FS_ASSIGN_OR_RETURN(int64_t noop_attr, c.Int("noop_with_empty_axes", 0));
    if (c.has_input(1)) {
      FS_ASSIGN_OR_RETURN(Value a, c.input(1));
      if (!a.constant) {  // computed axes go to the reduction as they are
        if (noop_attr != 0) return c.Unsupported("noop_with_empty_axes with computed axes");
        Output y = c.Op(op, {x.out, a.out}, {{"keep_dims", AttrValue(keep != 0)}});
        return c.SetOutput(0, y, x.dtype);
      }
      FS_ASSIGN_OR_RETURN(axes, c.ConstInts(1, "axes"));
    }
    noop = axes.empty() && noop_attr != 0;
  } else {
    FS_ASSIGN_OR_RETURN(axes, c.Ints("axes", std::vector<int64_t>{}));
  }
  if (x.rank() >= 0) {
    for (int64_t& a : axes) {
      FS_ASSIGN_OR_RETURN(int n, NormAxis(c, a, x.rank(), "axes"));
      a = n;
    }
  }
  if (pre != nullptr || post != nullptr) FS_RETURN_IF_ERROR(NeedFloat(c, x, "data"));
  Output y = x.out;
  if (pre != nullptr) y = c.Op(pre, {y});
  if (noop) {
    y = c.Op("Identity", {y});
  } else {
    y = c.Op(op, {y, c.Ints64(axes)}, {{"keep_dims", AttrValue(keep != 0)}});
  }
  if (post != nullptr) y = c.Op(post, {y});
  return c.SetOutput(0, y, x.dtype);
}

Status ConvertArgMax(NodeContext& c, const char* op) {
  FS_ASSIGN_OR_RETURN(Value x, c.input(0));
  FS_ASSIGN_OR_RETURN(int64_t axis_attr, c.Int("axis", 0));
  FS_ASSIGN_OR_RETURN(int64_t keep, c.Int("keepdims", 1));
  FS_ASSIGN_OR_RETURN(int64_t last, c.Int("select_last_index", 0));
  FS_RETURN_IF_ERROR(NeedRank(c, x, "data"));
  FS_ASSIGN_OR_RETURN(int axis, NormAxis(c, axis_attr, x.rank(), "axis"));
  Output y;
  if (last == 0) {
    y = c.Op(op, {x.out, c.Int32(axis)}, {{"output_type", AttrValue(DataType::kInt64)}});
  } else {  // the first of the reversed input, counted from the end
    Output rev = c.Op(op, {Reverse(c, x.out, x.rank(), axis), c.Int32(axis)},
                      {{"output_type", AttrValue(DataType::kInt64)}});
    Output last_index = c.Op("Sub", {DimScalar(c, x, axis), c.Scalar(1, DataType::kInt64)});
    y = c.Op("Sub", {last_index, rev});
  }
  if (keep != 0) y = c.Op("ExpandDims", {y, c.Int32(axis)});
  return c.SetOutput(0, y, DataType::kInt64);
}

}  // namespace flowstate::onnx_import

namespace flowstate::onnx_import {

// Hyperbolic functions and their inverses from Exp, Log and Sqrt.
Status ConvertHyperbolic(NodeContext& c, const char* op) {
  FS_ASSIGN_OR_RETURN(Value x, c.input(0));
  FS_RETURN_IF_ERROR(NeedFloat(c, x, "input"));
  DataType dt = x.dtype;
  auto k = [&](double v) { return c.Scalar(v, dt); };
  std::string o = op;
  Output y;
  if (o == "Sinh" || o == "Cosh") {
    Output e = c.Op("Exp", {x.out}), en = c.Op("Exp", {c.Op("Neg", {x.out})});
    y = c.Op("Mul", {c.Op(o == "Sinh" ? "Sub" : "Add", {e, en}), k(0.5)});
  } else if (o == "Asinh" || o == "Acosh") {
    Output r = c.Op("Sqrt", {c.Op(o == "Asinh" ? "Add" : "Sub", {c.Op("Square", {x.out}), k(1)})});
    y = c.Op("Log", {c.Op("Add", {x.out, r})});
  } else {  // Atanh
    y = c.Op("Mul", {c.Op("Log", {c.Op("Div", {c.Op("Add", {k(1), x.out}),
                                                c.Op("Sub", {k(1), x.out})})}),
                     k(0.5)});
  }
  return c.SetOutput(0, y, dt, x.shape);
}

Status ConvertIsInf(NodeContext& c) {
  FS_ASSIGN_OR_RETURN(Value x, c.input(0));
  FS_ASSIGN_OR_RETURN(int64_t neg, c.Int("detect_negative", 1));
  FS_ASSIGN_OR_RETURN(int64_t pos, c.Int("detect_positive", 1));
  FS_RETURN_IF_ERROR(NeedFloat(c, x, "X"));
  const double inf = std::numeric_limits<double>::infinity();
  Output p = c.Op("Equal", {x.out, c.Scalar(inf, x.dtype)});
  Output n = c.Op("Equal", {x.out, c.Scalar(-inf, x.dtype)});
  Output y = pos && neg ? c.Op("LogicalOr", {p, n})
             : pos      ? p
             : neg      ? n
                        : c.Op("NotEqual", {x.out, x.out}) /* all false but NaN: */;
  if (!pos && !neg) y = c.Op("LogicalAnd", {y, c.Op("Equal", {x.out, x.out})});
  return c.SetOutput(0, y, DataType::kBool, x.shape);
}

Status ConvertShrink(NodeContext& c) {
  FS_ASSIGN_OR_RETURN(Value x, c.input(0));
  FS_ASSIGN_OR_RETURN(double bias, c.Float("bias", 0.0));
  FS_ASSIGN_OR_RETURN(double lambd, c.Float("lambd", 0.5));
  FS_RETURN_IF_ERROR(NeedFloat(c, x, "input"));
  DataType dt = x.dtype;
  Output zeros = c.Op("ZerosLike", {x.out});
  Output hi = c.Op("Select", {c.Op("Greater", {x.out, c.Scalar(lambd, dt)}),
                              c.Op("Sub", {x.out, c.Scalar(bias, dt)}), zeros});
  Output y = c.Op("Select", {c.Op("Less", {x.out, c.Scalar(-lambd, dt)}),
                             c.Op("Add", {x.out, c.Scalar(bias, dt)}), hi});
  return c.SetOutput(0, y, dt, x.shape);
}

Status ConvertCelu(NodeContext& c) {  // max(0, x) + min(0, alpha * (exp(x / alpha) - 1))
  FS_ASSIGN_OR_RETURN(Value x, c.input(0));
  FS_ASSIGN_OR_RETURN(double alpha, c.Float("alpha", 1.0));
  FS_RETURN_IF_ERROR(NeedFloat(c, x, "X"));
  if (alpha == 0) return c.Error("attribute 'alpha' must not be 0");
  DataType dt = x.dtype;
  Output zero = c.Scalar(0, dt);
  Output e = c.Op("Mul", {c.Op("Sub", {c.Op("Exp", {c.Op("Div", {x.out, c.Scalar(alpha, dt)})}),
                                       c.Scalar(1, dt)}),
                          c.Scalar(alpha, dt)});
  Output y = c.Op("Add", {c.Op("Maximum", {x.out, zero}), c.Op("Minimum", {e, zero})});
  return c.SetOutput(0, y, dt, x.shape);
}

// Round half to even: floor(x + 0.5), less one at an odd result of a tie.
Status ConvertRound(NodeContext& c) {
  FS_ASSIGN_OR_RETURN(Value x, c.input(0));
  FS_RETURN_IF_ERROR(NeedFloat(c, x, "X"));
  DataType dt = x.dtype;
  Output r = c.Op("Floor", {c.Op("Add", {x.out, c.Scalar(0.5, dt)})});
  Output tie = c.Op("Equal", {c.Op("Sub", {r, x.out}), c.Scalar(0.5, dt)});
  Output half = c.Op("Mul", {r, c.Scalar(0.5, dt)});
  Output odd = c.Op("NotEqual", {c.Op("Floor", {half}), half});
  Output y = c.Op("Select", {c.Op("LogicalAnd", {tie, odd}), c.Op("Sub", {r, c.Scalar(1, dt)}), r});
  return c.SetOutput(0, y, dt, x.shape);
}

}  // namespace flowstate::onnx_import

namespace flowstate::onnx_import {

// fmod = 1: a - b * trunc(a / b) (C's fmod); fmod = 0: integers, a - b *
// floor(a / b) (the sign of b, as Python's %).
Status ConvertMod(NodeContext& c) {
  FS_ASSIGN_OR_RETURN(Value a, c.input(0));
  FS_ASSIGN_OR_RETURN(Value b, c.input(1));
  FS_ASSIGN_OR_RETURN(int64_t fmod, c.Int("fmod", 0));
  if (a.dtype != b.dtype) return c.Error("A and B have different dtypes");
  DataType dt = a.dtype;
  const bool floating = dt == DataType::kFloat32 || dt == DataType::kFloat64;
  if (fmod == 0 && floating) return c.Error("fmod = 0 with floating inputs");
  if (!floating && dt != DataType::kInt32 && dt != DataType::kInt64) {
    return c.Unsupported("dtype " + std::string(DataTypeName(dt)));
  }
  Output q = c.Op("Div", {a.out, b.out});  // truncates for integers
  if (floating) {  // trunc
    q = c.Op("Mul", {c.Op("Sign", {q}), c.Op("Floor", {c.Op("Abs", {q})})});
  }
  Output r = c.Op("Sub", {a.out, c.Op("Mul", {q, b.out})});
  if (fmod == 0) {  // move a remainder of the other sign than b by b
    Output zero = c.Scalar(0, dt);
    Output fix = c.Op("LogicalAnd",
                      {c.Op("NotEqual", {r, zero}),
                       c.Op("NotEqual", {c.Op("Less", {r, zero}), c.Op("Less", {b.out, zero})})});
    r = c.Op("Select", {fix, c.Op("Add", {r, b.out}), r});
  }
  return c.SetOutput(0, r, dt);
}

// Along one axis: a product with a triangular matrix of ones (floating
// types), the axis moved last and back.
Status ConvertCumSum(NodeContext& c) {
  FS_ASSIGN_OR_RETURN(Value x, c.input(0));
  FS_ASSIGN_OR_RETURN(std::vector<int64_t> axis_v, c.ConstInts(1, "axis"));
  FS_ASSIGN_OR_RETURN(int64_t exclusive, c.Int("exclusive", 0));
  FS_ASSIGN_OR_RETURN(int64_t reverse, c.Int("reverse", 0));
  if (x.dtype != DataType::kFloat32 && x.dtype != DataType::kFloat64) {
    return c.Unsupported("dtype " + std::string(DataTypeName(x.dtype)) + " (floats are)");
  }
  FS_RETURN_IF_ERROR(NeedRank(c, x, "x"));
  if (axis_v.size() != 1) return c.Error("'axis' must hold one value");
  const int r = x.rank();
  FS_ASSIGN_OR_RETURN(int axis, NormAxis(c, axis_v[0], r, "axis"));
  const int64_t n = x.shape.dim(axis);
  if (n < 0) return c.Unsupported("an axis of unknown size");
  if (n > 4096) return c.Unsupported("an axis over 4096 long (an n x n product)");
  // m[i][j] = 1 when input i adds to output j.
  Tensor m(x.dtype, TensorShape({n, n}));
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      bool on = reverse ? (exclusive ? i > j : i >= j) : (exclusive ? i < j : i <= j);
      if (x.dtype == DataType::kFloat64) m.data<double>()[i * n + j] = on;
      else m.data<float>()[i * n + j] = on;
    }
  }
  std::vector<int64_t> perm(r);
  for (int i = 0; i < r; ++i) perm[i] = i;
  std::swap(perm[axis], perm[r - 1]);
  Output t = axis == r - 1 ? x.out : Transpose(c, x.out, perm);
  Output flat = c.Op("Reshape", {t, c.Ints64({-1, n})});
  Output y = c.Op("MatMul", {flat, c.Const(m)});
  y = c.Op("Reshape", {y, ShapeVector(c, t)});
  if (axis != r - 1) y = Transpose(c, y, perm);
  return c.SetOutput(0, y, x.dtype, x.shape);
}

Status ConvertOneHot(NodeContext& c) {
  FS_ASSIGN_OR_RETURN(Value indices, c.input(0));
  FS_ASSIGN_OR_RETURN(Value depth, c.input(1));
  FS_ASSIGN_OR_RETURN(Value values, c.input(2));
  FS_ASSIGN_OR_RETURN(int64_t axis_attr, c.Int("axis", -1));
  FS_RETURN_IF_ERROR(NeedRank(c, indices, "indices"));
  const int r = indices.rank() + 1;
  FS_ASSIGN_OR_RETURN(int axis, NormAxis(c, axis_attr, r, "axis"));
  auto to64 = [&](const Value& v) {
    return v.dtype == DataType::kInt64
               ? v.out
               : c.Op("Cast", {v.out}, {{"DstT", AttrValue(DataType::kInt64)}});
  };
  Output d = c.Op("Reshape", {to64(depth), c.Ints64({})});
  Output i = to64(indices);
  i = c.Op("Select", {c.Op("Less", {i, c.Scalar(0, DataType::kInt64)}), c.Op("Add", {i, d}), i});
  Output range = c.Op("Range", {c.Scalar(0, DataType::kInt64), d, c.Scalar(1, DataType::kInt64)});
  std::vector<int64_t> dims(r, 1);
  dims[axis] = -1;
  Output hot = c.Op("Equal", {c.Op("ExpandDims", {i, c.Int32(axis)}),
                              c.Op("Reshape", {range, c.Ints64(dims)})});
  Output off = c.Op("Gather", {values.out, c.Int32(0)});
  Output on = c.Op("Gather", {values.out, c.Int32(1)});
  Output y = c.Op("Select", {hot, c.Op("Add", {c.Op("ZerosLike", {c.Op("Cast", {hot},
                                                 {{"DstT", AttrValue(values.dtype)}})}), on}),
                             off});
  return c.SetOutput(0, y, values.dtype);
}

}  // namespace flowstate::onnx_import

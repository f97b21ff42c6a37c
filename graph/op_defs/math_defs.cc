// Element-wise arithmetic, comparisons, reductions and matrix products.
#include <algorithm>

#include "graph/op_defs/register_defs.h"

namespace flowstate::internal {
namespace {

constexpr const char* kNumeric = "T: {float32, float64, int32, int64, uint8}";
constexpr const char* kSigned = "T: {float32, float64, int32, int64}";
constexpr const char* kFloat = "T: {float32, float64}";

Status MatMulShape(InferenceContext* c) {
  const PartialShape& a = c->input(0);
  const PartialShape& b = c->input(1);
  if ((a.rank_known() && a.rank() != 2) || (b.rank_known() && b.rank() != 2)) {
    return c->Error("both inputs must be matrices, got shapes " + a.ToString() + " and " +
                    b.ToString());
  }
  bool ta = c->BoolAttr("transpose_a"), tb = c->BoolAttr("transpose_b");
  int64_t m = a.rank_known() ? a.dim(ta ? 1 : 0) : -1;
  int64_t ka = a.rank_known() ? a.dim(ta ? 0 : 1) : -1;
  int64_t kb = b.rank_known() ? b.dim(tb ? 1 : 0) : -1;
  int64_t n = b.rank_known() ? b.dim(tb ? 0 : 1) : -1;
  if (ka >= 0 && kb >= 0 && ka != kb) {
    return c->Error("inner dimensions differ: " + a.ToString() + (ta ? "ᵀ" : "") + " × " +
                    b.ToString() + (tb ? "ᵀ" : ""));
  }
  c->set_output(0, PartialShape({m, n}));
  return Status();
}

Status BatchMatMulShape(InferenceContext* c) {
  const PartialShape& a = c->input(0);
  const PartialShape& b = c->input(1);
  if (!a.rank_known() || !b.rank_known()) return shape_fns::Unknown(c);
  if (a.rank() < 2 || b.rank() < 2) {
    return c->Error("inputs must have rank >= 2, got " + a.ToString() + " and " + b.ToString());
  }
  bool ax = c->BoolAttr("adj_x"), ay = c->BoolAttr("adj_y");
  int ra = a.rank(), rb = b.rank();
  int64_t m = a.dim(ax ? ra - 1 : ra - 2), ka = a.dim(ax ? ra - 2 : ra - 1);
  int64_t kb = b.dim(ay ? rb - 1 : rb - 2), n = b.dim(ay ? rb - 2 : rb - 1);
  if (ka >= 0 && kb >= 0 && ka != kb) {
    return c->Error("inner dimensions differ: " + a.ToString() + " and " + b.ToString());
  }
  PartialShape ba(std::vector<int64_t>(a.dims().begin(), a.dims().end() - 2));
  PartialShape bb(std::vector<int64_t>(b.dims().begin(), b.dims().end() - 2));
  StatusOr<PartialShape> batch = shape_fns::Broadcast(ba, bb);
  if (!batch.ok()) return c->Error("batch dimensions: " + batch.status().message());
  std::vector<int64_t> out = batch->dims();
  out.push_back(m);
  out.push_back(n);
  c->set_output(0, PartialShape(std::move(out)));
  return Status();
}

Status ReductionShape(InferenceContext* c) {
  const PartialShape& in = c->input(0);
  bool keep = c->BoolAttr("keep_dims");
  auto axes = shape_fns::ConstantIntVector(c, 1);
  if (!in.rank_known()) return shape_fns::Unknown(c);
  int rank = in.rank();
  if (!axes) {
    c->set_output(0, keep ? PartialShape::UnknownOfRank(rank) : PartialShape::Unknown());
    return Status();
  }
  std::vector<bool> reduce(rank, axes->empty());  // empty: every axis
  for (int64_t a : *axes) {
    if (a < -rank || a >= rank) {
      return c->Error("reduction axis " + std::to_string(a) + " is out of range for shape " +
                      in.ToString());
    }
    reduce[a < 0 ? a + rank : a] = true;
  }
  std::vector<int64_t> out;
  for (int i = 0; i < rank; ++i) {
    if (!reduce[i]) {
      out.push_back(in.dim(i));
    } else if (keep) {
      out.push_back(1);
    }
  }
  c->set_output(0, PartialShape(std::move(out)));
  return Status();
}

Status ArgMaxShape(InferenceContext* c) {
  const PartialShape& in = c->input(0);
  auto axis = shape_fns::ConstantIntVector(c, 1);
  if (!in.rank_known()) return shape_fns::Unknown(c);
  if (!axis || axis->size() != 1) {
    c->set_output(0, PartialShape::UnknownOfRank(std::max(0, in.rank() - 1)));
    return Status();
  }
  int rank = in.rank();
  int64_t a = (*axis)[0];
  if (a < -rank || a >= rank) {
    return c->Error("dimension " + std::to_string(a) + " is out of range for shape " +
                    in.ToString());
  }
  if (a < 0) a += rank;
  std::vector<int64_t> out = in.dims();
  out.erase(out.begin() + a);
  c->set_output(0, PartialShape(std::move(out)));
  return Status();
}

Status AddNShape(InferenceContext* c) {
  PartialShape best = c->input(0);
  for (int i = 1; i < c->num_inputs(); ++i) {
    if (!best.IsCompatibleWith(c->input(i))) {
      return c->Error("inputs must have the same shape, got " + best.ToString() + " and " +
                      c->input(i).ToString());
    }
    if (!best.IsFullyDefined() && c->input(i).IsFullyDefined()) best = c->input(i);
  }
  c->set_output(0, best);
  return Status();
}

Status SelectShape(InferenceContext* c) {
  StatusOr<PartialShape> s = shape_fns::Broadcast(c->input(1), c->input(2));
  if (!s.ok()) return c->Error(s.status().message());
  StatusOr<PartialShape> t = shape_fns::Broadcast(c->input(0), *s);
  if (!t.ok()) return c->Error("condition: " + t.status().message());
  c->set_output(0, *t);
  return Status();
}

void Binary(OpRegistry* r, const char* name, const char* types, const char* doc) {
  MustRegister(r, OpDefBuilder(name)
                      .Input("x: T")
                      .Input("y: T")
                      .Output("z: T")
                      .Attr(types)
                      .SetShapeFn(shape_fns::BroadcastBinary)
                      .Doc(doc));
}

void Compare(OpRegistry* r, const char* name, const char* types, const char* doc) {
  MustRegister(r, OpDefBuilder(name)
                      .Input("x: T")
                      .Input("y: T")
                      .Output("z: bool")
                      .Attr(types)
                      .SetShapeFn(shape_fns::BroadcastBinary)
                      .Doc(doc));
}

void Unary(OpRegistry* r, const char* name, const char* types, const char* doc) {
  MustRegister(r, OpDefBuilder(name)
                      .Input("x: T")
                      .Output("y: T")
                      .Attr(types)
                      .SetShapeFn(shape_fns::UnchangedShape)
                      .Doc(doc));
}

void Reduction(OpRegistry* r, const char* name, const char* types, const char* doc) {
  MustRegister(r, OpDefBuilder(name)
                      .Input("input: T")
                      .Input("axis: Tidx")
                      .Output("output: T")
                      .Attr(types)
                      .Attr("Tidx: {int32, int64} = int32")
                      .Attr("keep_dims: bool = false")
                      .SetShapeFn(ReductionShape)
                      .Doc(doc));
}

}  // namespace

void RegisterMathOps(OpRegistry* r) {
  Binary(r, "Add", kNumeric, "x + y, element-wise, with NumPy broadcasting.");
  Binary(r, "Sub", kNumeric, "x - y, element-wise, with NumPy broadcasting.");
  Binary(r, "Mul", kNumeric, "x * y, element-wise, with NumPy broadcasting.");
  Binary(r, "Div", kNumeric,
         "x / y, element-wise, with NumPy broadcasting. Integer division truncates toward "
         "zero; an integer division by zero is an error.");
  Binary(r, "Pow", kNumeric, "x ** y, element-wise, with NumPy broadcasting.");
  Binary(r, "Maximum", kNumeric, "max(x, y), element-wise, with NumPy broadcasting.");
  Binary(r, "Minimum", kNumeric, "min(x, y), element-wise, with NumPy broadcasting.");
  Binary(r, "SquaredDifference", kNumeric, "(x - y)², element-wise, with broadcasting.");

  constexpr const char* kAll = "T: {float32, float64, int32, int64, uint8, bool}";
  Compare(r, "Equal", kAll, "x == y, element-wise, with broadcasting.");
  Compare(r, "NotEqual", kAll, "x != y, element-wise, with broadcasting.");
  Compare(r, "Less", kNumeric, "x < y, element-wise, with broadcasting.");
  Compare(r, "LessEqual", kNumeric, "x <= y, element-wise, with broadcasting.");
  Compare(r, "Greater", kNumeric, "x > y, element-wise, with broadcasting.");
  Compare(r, "GreaterEqual", kNumeric, "x >= y, element-wise, with broadcasting.");

  MustRegister(r, OpDefBuilder("LogicalAnd")
                      .Input("x: bool").Input("y: bool").Output("z: bool")
                      .SetShapeFn(shape_fns::BroadcastBinary)
                      .Doc("x && y, element-wise, with broadcasting."));
  MustRegister(r, OpDefBuilder("LogicalOr")
                      .Input("x: bool").Input("y: bool").Output("z: bool")
                      .SetShapeFn(shape_fns::BroadcastBinary)
                      .Doc("x || y, element-wise, with broadcasting."));
  MustRegister(r, OpDefBuilder("LogicalNot")
                      .Input("x: bool").Output("y: bool")
                      .SetShapeFn(shape_fns::UnchangedShape)
                      .Doc("!x, element-wise."));

  Unary(r, "Neg", kSigned, "-x, element-wise.");
  Unary(r, "Abs", kSigned, "|x|, element-wise.");
  Unary(r, "Square", kNumeric, "x², element-wise.");
  Unary(r, "Sign", kSigned, "-1, 0 or 1 by the sign of x, element-wise.");
  Unary(r, "Exp", kFloat, "eˣ, element-wise.");
  Unary(r, "Log", kFloat, "ln x, element-wise.");
  Unary(r, "Sqrt", kFloat, "√x, element-wise.");
  Unary(r, "Rsqrt", kFloat, "1/√x, element-wise.");
  Unary(r, "Reciprocal", kFloat, "1/x, element-wise.");
  Unary(r, "Cos", kFloat, "cos x, element-wise.");
  Unary(r, "Sin", kFloat, "sin x, element-wise.");
  Unary(r, "Floor", kFloat, "The largest integer <= x, element-wise.");
  MustRegister(r, OpDefBuilder("CheckNumerics")
                      .Input("tensor: T")
                      .Output("output: T")
                      .Attr(kFloat)
                      .Attr("message: string")
                      .SetShapeFn(shape_fns::UnchangedShape)
                      .Doc("Returns its input (sharing the buffer) when every element is finite; "
                           "otherwise fails the step with INVALID_ARGUMENT: `message` followed by "
                           "\"is NaN\" / \"is Inf\" / \"has NaN and Inf values\". Training "
                           "jobs guard their optimizer's updates with it (on_nan)."));

  MustRegister(r, OpDefBuilder("AddN")
                      .Input("inputs: N * T")
                      .Output("sum: T")
                      .Attr("N: int >= 1")
                      .Attr(kNumeric)
                      .SetShapeFn(AddNShape)
                      .Doc("Sum of N tensors of the same shape."));

  MustRegister(r, OpDefBuilder("Select")
                      .Input("condition: bool")
                      .Input("t: T")
                      .Input("e: T")
                      .Output("output: T")
                      .Attr("T: {float32, float64, int32, int64, uint8, bool}")
                      .SetShapeFn(SelectShape)
                      .Doc("condition ? t : e, element-wise; all three broadcast together."));

  MustRegister(r, OpDefBuilder("Cast")
                      .Input("x: SrcT")
                      .Output("y: DstT")
                      .Attr("SrcT: type")
                      .Attr("DstT: type")
                      .SetShapeFn(shape_fns::UnchangedShape)
                      .Doc("Converts x to DstT (float to integer truncates toward zero)."));

  MustRegister(r, OpDefBuilder("MatMul")
                      .Input("a: T")
                      .Input("b: T")
                      .Output("product: T")
                      .Attr(kFloat)
                      .Attr("transpose_a: bool = false")
                      .Attr("transpose_b: bool = false")
                      .SetShapeFn(MatMulShape)
                      .Doc("Matrix product op(a) × op(b), op transposing when asked."));

  MustRegister(r, OpDefBuilder("BatchMatMul")
                      .Input("x: T")
                      .Input("y: T")
                      .Output("output: T")
                      .Attr(kFloat)
                      .Attr("adj_x: bool = false")
                      .Attr("adj_y: bool = false")
                      .SetShapeFn(BatchMatMulShape)
                      .Doc("Matrix products over the last two dimensions; the batch "
                           "dimensions broadcast."));

  Reduction(r, "Sum", kNumeric, "Sum over the given axes (all when axis is empty).");
  Reduction(r, "Mean", kNumeric, "Mean over the given axes (all when axis is empty).");
  Reduction(r, "Prod", kNumeric, "Product over the given axes (all when axis is empty).");
  Reduction(r, "Max", kNumeric, "Maximum over the given axes (all when axis is empty).");
  Reduction(r, "Min", kNumeric, "Minimum over the given axes (all when axis is empty).");

  MustRegister(r, OpDefBuilder("ArgMax")
                      .Input("input: T")
                      .Input("dimension: Tidx")
                      .Output("output: output_type")
                      .Attr(kNumeric)
                      .Attr("Tidx: {int32, int64} = int32")
                      .Attr("output_type: {int32, int64} = int64")
                      .SetShapeFn(ArgMaxShape)
                      .Doc("Index of the largest value along `dimension` (first on ties)."));
  MustRegister(r, OpDefBuilder("ArgMin")
                      .Input("input: T")
                      .Input("dimension: Tidx")
                      .Output("output: output_type")
                      .Attr(kNumeric)
                      .Attr("Tidx: {int32, int64} = int32")
                      .Attr("output_type: {int32, int64} = int64")
                      .SetShapeFn(ArgMaxShape)
                      .Doc("Index of the smallest value along `dimension` (first on ties)."));
}

}  // namespace flowstate::internal

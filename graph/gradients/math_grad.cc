// Gradients of element-wise math, reductions and matrix products. Each
// function receives the gradients of the node's outputs and emits the
// gradients of its inputs as ordinary ops.
#include "graph/gradients/grad_util.h"

namespace flowstate::internal {
namespace {

using G = std::vector<Gradient>;

DataType TypeOf(GradContext* c) { return c->node().output_type(0); }
Output Zeros(GradContext* c, const Output& like) { return ops::ZerosLike(c->scope(), like); }

Status AddGrad(GradContext* c, G* in) {
  Output g = c->grad(0);
  (*in)[0] = Gradient::Dense(Unbroadcast(c, g, 0));
  (*in)[1] = Gradient::Dense(Unbroadcast(c, g, 1));
  return Status();
}

Status SubGrad(GradContext* c, G* in) {
  Output g = c->grad(0);
  (*in)[0] = Gradient::Dense(Unbroadcast(c, g, 0));
  (*in)[1] = Gradient::Dense(Unbroadcast(c, ops::Neg(c->scope(), g), 1));
  return Status();
}

Status MulGrad(GradContext* c, G* in) {
  const Scope& s = c->scope();
  Output g = c->grad(0);
  (*in)[0] = Gradient::Dense(Unbroadcast(c, ops::Mul(s, g, c->input(1)), 0));
  (*in)[1] = Gradient::Dense(Unbroadcast(c, ops::Mul(s, c->input(0), g), 1));
  return Status();
}

Status DivGrad(GradContext* c, G* in) {
  const Scope& s = c->scope();
  Output g = c->grad(0);
  Output y = c->input(1);
  (*in)[0] = Gradient::Dense(Unbroadcast(c, ops::Div(s, g, y), 0));
  // d(x/y)/dy = -(x/y)/y
  Output gy = ops::Neg(s, ops::Div(s, ops::Mul(s, g, c->output(0)), y));
  (*in)[1] = Gradient::Dense(Unbroadcast(c, gy, 1));
  return Status();
}

Status PowGrad(GradContext* c, G* in) {
  const Scope& s = c->scope();
  Output g = c->grad(0), x = c->input(0), y = c->input(1), z = c->output(0);
  DataType t = TypeOf(c);
  Output ym1 = ops::Sub(s, y, ScalarLike(c, t, 1));
  (*in)[0] = Gradient::Dense(Unbroadcast(c, ops::Mul(s, g, ops::Mul(s, y, ops::Pow(s, x, ym1))), 0));
  // d(x^y)/dy = x^y log x, taken as 0 where x <= 0.
  Output pos = ops::Greater(s, x, ScalarLike(c, t, 0));
  Output safe_x = ops::Select(s, pos, x, ops::OnesLike(s, x));
  Output logx = ops::Select(s, pos, ops::Log(s, safe_x), Zeros(c, x));
  (*in)[1] = Gradient::Dense(Unbroadcast(c, ops::Mul(s, g, ops::Mul(s, z, logx)), 1));
  return Status();
}

Status MaxMinGrad(GradContext* c, G* in, bool is_max) {
  const Scope& s = c->scope();
  Output g = c->grad(0), x = c->input(0), y = c->input(1);
  // Ties go to x, as in TensorFlow.
  Output pick_x = is_max ? ops::GreaterEqual(s, x, y) : ops::LessEqual(s, x, y);
  Output zeros = Zeros(c, g);
  (*in)[0] = Gradient::Dense(Unbroadcast(c, ops::Select(s, pick_x, g, zeros), 0));
  (*in)[1] = Gradient::Dense(Unbroadcast(c, ops::Select(s, pick_x, zeros, g), 1));
  return Status();
}

Status SquaredDifferenceGrad(GradContext* c, G* in) {
  const Scope& s = c->scope();
  Output g = c->grad(0);
  Output d = ops::Sub(s, c->input(0), c->input(1));
  Output two_g_d = ops::Mul(s, ops::Mul(s, g, ScalarLike(c, TypeOf(c), 2)), d);
  (*in)[0] = Gradient::Dense(Unbroadcast(c, two_g_d, 0));
  (*in)[1] = Gradient::Dense(Unbroadcast(c, ops::Neg(s, two_g_d), 1));
  return Status();
}

template <typename F>
GradFunc Unary(F f) {
  return [f](GradContext* c, G* in) {
    (*in)[0] = Gradient::Dense(f(c, c->scope(), c->grad(0), c->input(0), c->output(0)));
    return Status();
  };
}

Status AddNGrad(GradContext* c, G* in) {
  Output g = c->grad(0);
  for (auto& x : *in) x = Gradient::Dense(g);
  return Status();
}

Status SelectGrad(GradContext* c, G* in) {
  const Scope& s = c->scope();
  Output g = c->grad(0), cond = c->input(0);
  Output zeros = Zeros(c, g);
  (*in)[1] = Gradient::Dense(Unbroadcast(c, ops::Select(s, cond, g, zeros), 1));
  (*in)[2] = Gradient::Dense(Unbroadcast(c, ops::Select(s, cond, zeros, g), 2));
  return Status();
}

Status CastGrad(GradContext* c, G* in) {
  DataType src = c->node().input_type(0);
  if (src == DataType::kFloat32 || src == DataType::kFloat64 || src == DataType::kFloat16 ||
      src == DataType::kBFloat16) {
    (*in)[0] = Gradient::Dense(ops::Cast(c->scope(), c->grad(0), src));
  }
  return Status();
}

Status MatMulGrad(GradContext* c, G* in) {
  const Scope& s = c->scope();
  Output g = c->grad(0), a = c->input(0), b = c->input(1);
  bool ta = c->node().attrs().at("transpose_a").b();
  bool tb = c->node().attrs().at("transpose_b").b();
  if (!ta && !tb) {
    (*in)[0] = Gradient::Dense(ops::MatMul(s, g, b, false, true));
    (*in)[1] = Gradient::Dense(ops::MatMul(s, a, g, true, false));
  } else if (ta && !tb) {
    (*in)[0] = Gradient::Dense(ops::MatMul(s, b, g, false, true));
    (*in)[1] = Gradient::Dense(ops::MatMul(s, a, g, false, false));
  } else if (!ta && tb) {
    (*in)[0] = Gradient::Dense(ops::MatMul(s, g, b, false, false));
    (*in)[1] = Gradient::Dense(ops::MatMul(s, g, a, true, false));
  } else {
    (*in)[0] = Gradient::Dense(ops::MatMul(s, b, g, true, true));
    (*in)[1] = Gradient::Dense(ops::MatMul(s, g, a, true, true));
  }
  return Status();
}

// Sums a batched gradient over the batch dimensions that input i broadcast.
Output ReduceBatch(GradContext* c, const Output& grad, int i) {
  const Scope& s = c->scope();
  const Endpoint& e = c->node().input(i);
  const PartialShape& xs = c->graph().node(e.node).output_shape(e.output);
  const PartialShape& out = c->node().output_shape(0);
  if (xs.rank_known() && out.rank_known() && xs.rank() == out.rank()) {
    bool same = true;
    for (int d = 0; d + 2 < xs.rank(); ++d) same &= xs.dim(d) >= 0 && xs.dim(d) == out.dim(d);
    if (same) return grad;
  }
  Output sx = ops::Shape(s, c->input(i));
  Output r = ops::Generic(s, "BroadcastGradientArgs", {sx, ops::Shape(s, grad)}, {}, 2)[0];
  return SumToShape(s, grad, r, sx);
}

Status BatchMatMulGrad(GradContext* c, G* in) {
  const Scope& s = c->scope();
  Output g = c->grad(0), x = c->input(0), y = c->input(1);
  bool ax = c->node().attrs().at("adj_x").b();
  bool ay = c->node().attrs().at("adj_y").b();
  Output gx, gy;
  if (!ax && !ay) {
    gx = ops::BatchMatMul(s, g, y, false, true);
    gy = ops::BatchMatMul(s, x, g, true, false);
  } else if (ax && !ay) {
    gx = ops::BatchMatMul(s, y, g, false, true);
    gy = ops::BatchMatMul(s, x, g, false, false);
  } else if (!ax && ay) {
    gx = ops::BatchMatMul(s, g, y, false, false);
    gy = ops::BatchMatMul(s, g, x, true, false);
  } else {
    gx = ops::BatchMatMul(s, y, g, true, true);
    gy = ops::BatchMatMul(s, g, x, true, true);
  }
  (*in)[0] = Gradient::Dense(ReduceBatch(c, gx, 0));
  (*in)[1] = Gradient::Dense(ReduceBatch(c, gy, 1));
  return Status();
}

// g broadcast back over the reduced axes.
Output BroadcastReduced(GradContext* c, const Output& g) {
  const Scope& s = c->scope();
  return ops::Generic(s, "BroadcastTo",
                      {ops::Reshape(s, g, KeptShape(c)), InputShape(c, 0)})[0];
}

Status SumGrad(GradContext* c, G* in) {
  (*in)[0] = Gradient::Dense(BroadcastReduced(c, c->grad(0)));
  return Status();
}

Status MeanGrad(GradContext* c, G* in) {
  const Scope& s = c->scope();
  const Endpoint& e = c->node().input(0);
  const PartialShape& xs = c->graph().node(e.node).output_shape(e.output);
  const PartialShape& ys = c->node().output_shape(0);
  Output count;
  if (xs.IsFullyDefined() && ys.IsFullyDefined()) {
    int64_t ny = std::max<int64_t>(ys.num_elements(), 1);
    count = ScalarLike(c, TypeOf(c), double(xs.num_elements() / ny));
  } else {
    Output n = ops::Div(s, ops::Size(s, c->input(0)), ops::Maximum(s, ops::Size(s, c->output(0)),
                                                                   ops::Const(s, int32_t(1))));
    count = ops::Cast(s, n, TypeOf(c));
  }
  (*in)[0] = Gradient::Dense(ops::Div(s, BroadcastReduced(c, c->grad(0)), count));
  return Status();
}

Status MaxMinReduceGrad(GradContext* c, G* in) {
  const Scope& s = c->scope();
  Output kept = KeptShape(c);
  Output y = ops::Reshape(s, c->output(0), kept);
  Output g = ops::Reshape(s, c->grad(0), kept);
  Output mask = ops::Cast(s, ops::Equal(s, c->input(0), y), TypeOf(c));
  Output count = ops::Sum(s, mask, c->input(1), true);
  (*in)[0] = Gradient::Dense(ops::Div(s, ops::Mul(s, mask, g), count));
  return Status();
}

Status ProdGrad(GradContext* c, G* in) {
  const Scope& s = c->scope();
  Output g = ops::Reshape(s, c->grad(0), KeptShape(c));
  (*in)[0] = Gradient::Dense(ops::Generic(s, "ProdGrad", {c->input(0), c->input(1), g})[0]);
  return Status();
}

void Must(GradientRegistry* r, const char* op, GradFunc f) { r->Register(op, std::move(f)).CheckOk(); }

}  // namespace

void RegisterMathGradients(GradientRegistry* r) {
  Must(r, "Add", AddGrad);
  Must(r, "Sub", SubGrad);
  Must(r, "Mul", MulGrad);
  Must(r, "Div", DivGrad);
  Must(r, "Pow", PowGrad);
  Must(r, "Maximum", [](GradContext* c, G* in) { return MaxMinGrad(c, in, true); });
  Must(r, "Minimum", [](GradContext* c, G* in) { return MaxMinGrad(c, in, false); });
  Must(r, "SquaredDifference", SquaredDifferenceGrad);
  Must(r, "Neg", Unary([](GradContext*, const Scope& s, Output g, Output, Output) {
         return ops::Neg(s, g);
       }));
  Must(r, "Abs", Unary([](GradContext*, const Scope& s, Output g, Output x, Output) {
         return ops::Mul(s, g, ops::Sign(s, x));
       }));
  Must(r, "Square", Unary([](GradContext* c, const Scope& s, Output g, Output x, Output) {
         return ops::Mul(s, g, ops::Mul(s, x, ScalarLike(c, TypeOf(c), 2)));
       }));
  Must(r, "Sqrt", Unary([](GradContext* c, const Scope& s, Output g, Output, Output y) {
         return ops::Div(s, ops::Mul(s, g, ScalarLike(c, TypeOf(c), 0.5)), y);
       }));
  Must(r, "Rsqrt", Unary([](GradContext* c, const Scope& s, Output g, Output, Output y) {
         Output y3 = ops::Mul(s, ops::Square(s, y), y);
         return ops::Mul(s, g, ops::Mul(s, y3, ScalarLike(c, TypeOf(c), -0.5)));
       }));
  Must(r, "Exp", Unary([](GradContext*, const Scope& s, Output g, Output, Output y) {
         return ops::Mul(s, g, y);
       }));
  Must(r, "Log", Unary([](GradContext*, const Scope& s, Output g, Output x, Output) {
         return ops::Div(s, g, x);
       }));
  Must(r, "Reciprocal", Unary([](GradContext*, const Scope& s, Output g, Output, Output y) {
         return ops::Neg(s, ops::Mul(s, g, ops::Square(s, y)));
       }));
  Must(r, "Cos", Unary([](GradContext*, const Scope& s, Output g, Output x, Output) {
         return ops::Neg(s, ops::Mul(s, g, ops::Sin(s, x)));
       }));
  Must(r, "Sin", Unary([](GradContext*, const Scope& s, Output g, Output x, Output) {
         return ops::Mul(s, g, ops::Cos(s, x));
       }));
  Must(r, "AddN", AddNGrad);
  Must(r, "Select", SelectGrad);
  Must(r, "Cast", CastGrad);
  Must(r, "MatMul", MatMulGrad);
  Must(r, "BatchMatMul", BatchMatMulGrad);
  Must(r, "Sum", SumGrad);
  Must(r, "Mean", MeanGrad);
  Must(r, "Max", MaxMinReduceGrad);
  Must(r, "Min", MaxMinReduceGrad);
  Must(r, "Prod", ProdGrad);
  for (const char* op : {"Sign", "Floor", "Equal", "NotEqual", "Less", "LessEqual", "Greater",
                         "GreaterEqual", "LogicalAnd", "LogicalOr", "LogicalNot", "ArgMax",
                         "ArgMin"}) {
    r->RegisterNonDifferentiable(op);
  }
}

}  // namespace flowstate::internal

// Gradients of the neural-network ops, mostly through their backward ops.
#include "graph/gradients/grad_util.h"

namespace flowstate::internal {
namespace {

using G = std::vector<Gradient>;

AttrMap CopyAttrs(GradContext* c, std::initializer_list<const char*> names) {
  AttrMap m;
  for (const char* n : names) m[n] = c->node().attrs().at(n);
  return m;
}

Output One(GradContext* c, const std::string& op, std::vector<Output> inputs, AttrMap attrs = {}) {
  return ops::Generic(c->scope(), op, inputs, std::move(attrs))[0];
}

Status BiasAddGrad(GradContext* c, G* in) {
  Output g = c->grad(0);
  (*in)[0] = Gradient::Dense(g);
  (*in)[1] = Gradient::Dense(One(c, "BiasAddGrad", {g}));
  return Status();
}

// Activations whose backward op takes (gradients, features).
GradFunc FromFeatures(const char* grad_op, bool alpha = false) {
  return [grad_op, alpha](GradContext* c, G* in) {
    AttrMap a = alpha ? CopyAttrs(c, {"alpha"}) : AttrMap{};
    (*in)[0] = Gradient::Dense(One(c, grad_op, {c->grad(0), c->input(0)}, a));
    return Status();
  };
}

Status SoftmaxGrad(GradContext* c, G* in) {
  const Scope& s = c->scope();
  Output g = c->grad(0), y = c->output(0);
  Output dot = ops::Sum(s, ops::Mul(s, g, y), std::vector<int32_t>{-1}, true);
  (*in)[0] = Gradient::Dense(ops::Mul(s, ops::Sub(s, g, dot), y));
  return Status();
}

Status LogSoftmaxGrad(GradContext* c, G* in) {
  const Scope& s = c->scope();
  Output g = c->grad(0), y = c->output(0);
  Output sum = ops::Sum(s, g, std::vector<int32_t>{-1}, true);
  (*in)[0] = Gradient::Dense(ops::Sub(s, g, ops::Mul(s, ops::Exp(s, y), sum)));
  return Status();
}

Status XentGrad(GradContext* c, G* in, bool sparse) {
  const Scope& s = c->scope();
  if (c->has_grad(1)) {
    return Unimplemented("gradients through the backprop output of " + c->node().op() +
                         " are not supported");
  }
  Output g = ops::ExpandDims(s, c->grad(0), -1);
  (*in)[0] = Gradient::Dense(ops::Mul(s, g, c->output(1)));
  if (!sparse) {
    Output log_p = ops::Generic(s, "LogSoftmax", {c->input(0)})[0];
    (*in)[1] = Gradient::Dense(ops::Mul(s, g, ops::Neg(s, log_p)));
  }
  return Status();
}

Status SigmoidXentGrad(GradContext* c, G* in) {
  const Scope& s = c->scope();
  Output g = c->grad(0), z = c->input(0), x = c->input(1);
  Output sig = ops::Generic(s, "Sigmoid", {x})[0];
  (*in)[0] = Gradient::Dense(ops::Mul(s, g, ops::Neg(s, x)));
  (*in)[1] = Gradient::Dense(ops::Mul(s, g, ops::Sub(s, sig, z)));
  return Status();
}

Status L2LossGrad(GradContext* c, G* in) {
  (*in)[0] = Gradient::Dense(ops::Mul(c->scope(), c->input(0), c->grad(0)));
  return Status();
}

Status Conv2DGrad(GradContext* c, G* in) {
  const Scope& s = c->scope();
  AttrMap a = CopyAttrs(c, {"strides", "padding", "dilations", "data_format"});
  Output g = c->grad(0);
  (*in)[0] = Gradient::Dense(
      One(c, "Conv2DBackpropInput", {ops::Shape(s, c->input(0)), c->input(1), g}, a));
  (*in)[1] = Gradient::Dense(
      One(c, "Conv2DBackpropFilter", {c->input(0), ops::Shape(s, c->input(1)), g}, a));
  return Status();
}

Status MaxPoolGrad(GradContext* c, G* in) {
  AttrMap a = CopyAttrs(c, {"ksize", "strides", "padding", "data_format"});
  (*in)[0] = Gradient::Dense(One(c, "MaxPoolGrad", {c->input(0), c->output(0), c->grad(0)}, a));
  return Status();
}

Status AvgPoolGrad(GradContext* c, G* in) {
  AttrMap a = CopyAttrs(c, {"ksize", "strides", "padding", "data_format"});
  (*in)[0] = Gradient::Dense(
      One(c, "AvgPoolGrad", {ops::Shape(c->scope(), c->input(0)), c->grad(0)}, a));
  return Status();
}

Status DropoutGrad(GradContext* c, G* in) {
  (*in)[0] = Gradient::Dense(ops::Mul(c->scope(), c->grad(0), c->output(1)));
  return Status();
}

Status BatchNormGrad(GradContext* c, G* in) {
  if (c->has_grad(1) || c->has_grad(2)) {
    return Unimplemented("gradients through BatchNorm's batch statistics are not supported");
  }
  std::vector<Output> r = ops::Generic(
      c->scope(), "BatchNormGrad",
      {c->grad(0), c->input(0), c->input(1), c->output(3), c->output(4)},
      CopyAttrs(c, {"is_training"}), 3);
  (*in)[0] = Gradient::Dense(r[0]);
  (*in)[1] = Gradient::Dense(r[1]);
  (*in)[2] = Gradient::Dense(r[2]);
  return Status();
}

void Must(GradientRegistry* r, const char* op, GradFunc f) { r->Register(op, std::move(f)).CheckOk(); }

}  // namespace

void RegisterNnGradients(GradientRegistry* r) {
  Must(r, "BiasAdd", BiasAddGrad);
  Must(r, "Relu", FromFeatures("ReluGrad"));
  Must(r, "Relu6", FromFeatures("Relu6Grad"));
  Must(r, "LeakyRelu", FromFeatures("LeakyReluGrad", true));
  Must(r, "Softplus", FromFeatures("SoftplusGrad"));
  Must(r, "Elu", [](GradContext* c, G* in) {
    (*in)[0] = Gradient::Dense(One(c, "EluGrad", {c->grad(0), c->output(0)}));
    return Status();
  });
  Must(r, "Sigmoid", [](GradContext* c, G* in) {
    (*in)[0] = Gradient::Dense(One(c, "SigmoidGrad", {c->output(0), c->grad(0)}));
    return Status();
  });
  Must(r, "Tanh", [](GradContext* c, G* in) {
    (*in)[0] = Gradient::Dense(One(c, "TanhGrad", {c->output(0), c->grad(0)}));
    return Status();
  });
  Must(r, "Softmax", SoftmaxGrad);
  Must(r, "LogSoftmax", LogSoftmaxGrad);
  Must(r, "SoftmaxCrossEntropyWithLogits", [](GradContext* c, G* in) { return XentGrad(c, in, false); });
  Must(r, "SparseSoftmaxCrossEntropyWithLogits",
       [](GradContext* c, G* in) { return XentGrad(c, in, true); });
  Must(r, "SigmoidCrossEntropyWithLogits", SigmoidXentGrad);
  Must(r, "L2Loss", L2LossGrad);
  Must(r, "Conv2D", Conv2DGrad);
  Must(r, "MaxPool", MaxPoolGrad);
  Must(r, "AvgPool", AvgPoolGrad);
  Must(r, "Dropout", DropoutGrad);
  Must(r, "BatchNorm", BatchNormGrad);
}

}  // namespace flowstate::internal

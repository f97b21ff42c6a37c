// Neural-network ops: activations, bias, softmax and losses, convolution,
// pooling, dropout and batch normalization, with the backward ops their
// gradients use. Layout is NHWC; filters are HWIO.
#include <algorithm>

#include "graph/op_defs/register_defs.h"

namespace flowstate::internal {
namespace {

constexpr const char* kFloat = "T: {float32, float64}";

Status BiasAddShape(InferenceContext* c) {
  const PartialShape& v = c->input(0);
  const PartialShape& b = c->input(1);
  if (b.rank_known() && b.rank() != 1) return c->Error("bias must be a vector, got " + b.ToString());
  if (v.rank_known() && v.rank() < 1) return c->Error("value must have rank >= 1");
  if (v.rank_known() && b.rank_known() && v.dim(v.rank() - 1) >= 0 && b.dim(0) >= 0 &&
      v.dim(v.rank() - 1) != b.dim(0)) {
    return c->Error("bias of shape " + b.ToString() + " does not match the last dimension of " +
                    v.ToString());
  }
  c->set_output(0, v);
  return Status();
}

Status BiasAddGradShape(InferenceContext* c) {
  const PartialShape& g = c->input(0);
  c->set_output(0, g.rank_known() && g.rank() >= 1 ? PartialShape({g.dim(g.rank() - 1)})
                                                   : PartialShape({-1}));
  return Status();
}

// features [batch, classes] -> loss [batch], backprop [batch, classes]
Status XentShape(InferenceContext* c) {
  const PartialShape& f = c->input(0);
  if (f.rank_known() && f.rank() != 2) {
    return c->Error("logits must be [batch, classes], got " + f.ToString());
  }
  const PartialShape& l = c->input(1);
  bool sparse = c->op().name == "SparseSoftmaxCrossEntropyWithLogits";
  if (sparse && l.rank_known() && l.rank() != 1) {
    return c->Error("labels must be a vector of class indices, got " + l.ToString());
  }
  if (!sparse && !f.IsCompatibleWith(l)) {
    return c->Error("labels of shape " + l.ToString() + " do not match logits of shape " +
                    f.ToString());
  }
  int64_t batch = f.rank_known() ? f.dim(0) : (l.rank_known() ? l.dim(0) : -1);
  if (sparse && f.rank_known() && l.rank_known() && f.dim(0) >= 0 && l.dim(0) >= 0 &&
      f.dim(0) != l.dim(0)) {
    return c->Error("labels have " + std::to_string(l.dim(0)) + " entries for a batch of " +
                    std::to_string(f.dim(0)));
  }
  c->set_output(0, PartialShape({batch}));
  c->set_output(1, f.rank_known() ? f : PartialShape::UnknownOfRank(2));
  return Status();
}

// Output size of one spatial dimension.
StatusOr<int64_t> WindowOutput(int64_t in, int64_t k, int64_t stride, int64_t dilation,
                               const std::string& padding) {
  if (in < 0) return int64_t(-1);
  int64_t eff = (k - 1) * dilation + 1;
  if (padding == "VALID") return in < eff ? 0 : (in - eff) / stride + 1;
  return (in + stride - 1) / stride;  // SAME
}

Status CheckWindowAttrs(InferenceContext* c, const std::vector<int64_t>& strides,
                        const std::vector<int64_t>& dilations, const std::string& padding) {
  if (strides.size() != 4 || strides[0] != 1 || strides[3] != 1) {
    return c->Error("strides must be [1, sh, sw, 1]");
  }
  if (dilations.size() != 4 || dilations[0] != 1 || dilations[3] != 1) {
    return c->Error("dilations must be [1, dh, dw, 1]");
  }
  for (int i = 1; i < 3; ++i) {
    if (strides[i] < 1 || dilations[i] < 1) return c->Error("strides and dilations must be >= 1");
  }
  if (padding != "SAME" && padding != "VALID") {
    return c->Error("padding must be \"SAME\" or \"VALID\", got \"" + padding + "\"");
  }
  if (c->GetAttr("data_format").s() != "NHWC") return c->Error("only data_format NHWC is supported");
  return Status();
}

Status Conv2DShape(InferenceContext* c) {
  const auto& strides = c->GetAttr("strides").ints();
  const auto& dilations = c->GetAttr("dilations").ints();
  const std::string& padding = c->GetAttr("padding").s();
  FS_RETURN_IF_ERROR(CheckWindowAttrs(c, strides, dilations, padding));
  const PartialShape& in = c->input(0);
  const PartialShape& f = c->input(1);
  if (in.rank_known() && in.rank() != 4) return c->Error("input must be NHWC, got " + in.ToString());
  if (f.rank_known() && f.rank() != 4) return c->Error("filter must be HWIO, got " + f.ToString());
  if (!in.rank_known() || !f.rank_known()) {
    c->set_output(0, PartialShape::UnknownOfRank(4));
    return Status();
  }
  // Grouped (TensorFlow's rule): groups = input channels / the filter's.
  if (in.dim(3) >= 0 && f.dim(2) >= 0 && (f.dim(2) == 0 || in.dim(3) % f.dim(2) != 0)) {
    return c->Error("input has " + std::to_string(in.dim(3)) + " channels but the filter expects " +
                    std::to_string(f.dim(2)) + " (or, grouped, a multiple of it)");
  }
  if (in.dim(3) >= 0 && f.dim(2) > 0 && f.dim(3) >= 0 && f.dim(3) % (in.dim(3) / f.dim(2)) != 0) {
    return c->Error("the filter has " + std::to_string(f.dim(3)) + " output channels, not a " +
                    "multiple of the " + std::to_string(in.dim(3) / f.dim(2)) + " groups");
  }
  int64_t oh = -1, ow = -1;
  if (f.dim(0) >= 0) {
    FS_ASSIGN_OR_RETURN(oh, WindowOutput(in.dim(1), f.dim(0), strides[1], dilations[1], padding));
  }
  if (f.dim(1) >= 0) {
    FS_ASSIGN_OR_RETURN(ow, WindowOutput(in.dim(2), f.dim(1), strides[2], dilations[2], padding));
  }
  c->set_output(0, PartialShape({in.dim(0), oh, ow, f.dim(3)}));
  return Status();
}

Status PoolShape(InferenceContext* c) {
  const auto& ksize = c->GetAttr("ksize").ints();
  const auto& strides = c->GetAttr("strides").ints();
  const std::string& padding = c->GetAttr("padding").s();
  if (ksize.size() != 4 || ksize[0] != 1 || ksize[3] != 1 || ksize[1] < 1 || ksize[2] < 1) {
    return c->Error("ksize must be [1, kh, kw, 1]");
  }
  FS_RETURN_IF_ERROR(CheckWindowAttrs(c, strides, {1, 1, 1, 1}, padding));
  const PartialShape& in = c->input(0);
  if (!in.rank_known()) {
    c->set_output(0, PartialShape::UnknownOfRank(4));
    return Status();
  }
  if (in.rank() != 4) return c->Error("input must be NHWC, got " + in.ToString());
  FS_ASSIGN_OR_RETURN(int64_t oh, WindowOutput(in.dim(1), ksize[1], strides[1], 1, padding));
  FS_ASSIGN_OR_RETURN(int64_t ow, WindowOutput(in.dim(2), ksize[2], strides[2], 1, padding));
  c->set_output(0, PartialShape({in.dim(0), oh, ow, in.dim(3)}));
  return Status();
}

Status ShapeOfInput(InferenceContext* c, int i) {  // output 0 = input i
  c->set_output(0, c->input(i));
  return Status();
}

Status ShapeFromVectorInput(InferenceContext* c, int i) {
  auto dims = shape_fns::ConstantIntVector(c, i);
  c->set_output(0, dims ? PartialShape(*dims) : PartialShape::UnknownOfRank(4));
  return Status();
}

Status BatchNormShape(InferenceContext* c) {
  const PartialShape& x = c->input(0);
  if (x.rank_known() && x.rank() < 2) return c->Error("x must have rank >= 2, got " + x.ToString());
  int64_t ch = x.rank_known() ? x.dim(x.rank() - 1) : -1;
  for (int i = 1; i < 5; ++i) {
    const PartialShape& p = c->input(i);
    if (p.rank_known() && (p.rank() != 1 || (ch >= 0 && p.dim(0) >= 0 && p.dim(0) != ch))) {
      return c->Error("input " + std::to_string(i) + " must be a vector of " +
                      (ch >= 0 ? std::to_string(ch) : std::string("channel")) +
                      " entries, got " + p.ToString());
    }
  }
  c->set_output(0, x);
  for (int i = 1; i < 5; ++i) c->set_output(i, PartialShape({ch}));
  return Status();
}

Status BatchNormGradShape(InferenceContext* c) {
  const PartialShape& x = c->input(1);
  int64_t ch = x.rank_known() ? x.dim(x.rank() - 1) : -1;
  c->set_output(0, x);
  c->set_output(1, PartialShape({ch}));
  c->set_output(2, PartialShape({ch}));
  return Status();
}

void Activation(OpRegistry* r, const char* name, const char* doc, const char* extra = nullptr) {
  OpDefBuilder b(name);
  b.Input("features: T").Output("activations: T").Attr(kFloat).SetShapeFn(shape_fns::UnchangedShape).Doc(doc);
  if (extra) b.Attr(extra);
  MustRegister(r, b);
}

void ActivationGrad(OpRegistry* r, const char* name, const char* a, const char* b_, const char* doc,
                    const char* extra = nullptr) {
  OpDefBuilder b(name);
  b.Input(a).Input(b_).Output("backprops: T").Attr(kFloat).SetShapeFn(shape_fns::UnchangedShape).Doc(doc);
  if (extra) b.Attr(extra);
  MustRegister(r, b);
}

const char* kConvAttrs[] = {"strides: list(int)", "padding: string",
                            "dilations: list(int) = [1, 1, 1, 1]",
                            "data_format: string = \"NHWC\""};

}  // namespace

void RegisterNnOps(OpRegistry* r) {
  MustRegister(r, OpDefBuilder("BiasAdd")
                      .Input("value: T").Input("bias: T").Output("output: T").Attr(kFloat)
                      .Attr("data_format: string = \"NHWC\"")
                      .SetShapeFn(BiasAddShape)
                      .Doc("value + bias, the bias (a vector) added along the last dimension."));
  MustRegister(r, OpDefBuilder("BiasAddGrad")
                      .Input("out_backprop: T").Output("output: T").Attr(kFloat)
                      .Attr("data_format: string = \"NHWC\"")
                      .SetShapeFn(BiasAddGradShape)
                      .Doc("Sum of out_backprop over every dimension but the last."));

  Activation(r, "Relu", "max(features, 0).");
  Activation(r, "Relu6", "min(max(features, 0), 6).");
  Activation(r, "LeakyRelu", "features if > 0, else alpha * features.", "alpha: float = 0.2");
  Activation(r, "Elu", "features if > 0, else exp(features) - 1.");
  Activation(r, "Sigmoid", "1 / (1 + exp(-features)).");
  Activation(r, "Tanh", "tanh(features).");
  Activation(r, "Softplus", "log(1 + exp(features)), computed without overflow.");
  ActivationGrad(r, "ReluGrad", "gradients: T", "features: T", "gradients where features > 0, else 0.");
  ActivationGrad(r, "Relu6Grad", "gradients: T", "features: T",
                 "gradients where 0 < features < 6, else 0.");
  ActivationGrad(r, "LeakyReluGrad", "gradients: T", "features: T",
                 "gradients where features > 0, else alpha * gradients.", "alpha: float = 0.2");
  ActivationGrad(r, "EluGrad", "gradients: T", "outputs: T",
                 "gradients where outputs > 0, else gradients * (outputs + 1).");
  ActivationGrad(r, "SigmoidGrad", "y: T", "dy: T", "dy * y * (1 - y), y being sigmoid's output.");
  ActivationGrad(r, "TanhGrad", "y: T", "dy: T", "dy * (1 - y²), y being tanh's output.");
  ActivationGrad(r, "SoftplusGrad", "gradients: T", "features: T",
                 "gradients * sigmoid(features).");

  MustRegister(r, OpDefBuilder("Softmax")
                      .Input("logits: T").Output("softmax: T").Attr(kFloat)
                      .SetShapeFn(shape_fns::UnchangedShape)
                      .Doc("exp(logits) / sum(exp(logits)) along the last dimension, stably."));
  MustRegister(r, OpDefBuilder("LogSoftmax")
                      .Input("logits: T").Output("logsoftmax: T").Attr(kFloat)
                      .SetShapeFn(shape_fns::UnchangedShape)
                      .Doc("logits - log(sum(exp(logits))) along the last dimension, stably."));
  MustRegister(r, OpDefBuilder("SoftmaxCrossEntropyWithLogits")
                      .Input("features: T").Input("labels: T")
                      .Output("loss: T").Output("backprop: T").Attr(kFloat)
                      .SetShapeFn(XentShape)
                      .Doc("Per-example cross entropy of softmax(features) against label "
                           "distributions; backprop is its gradient with respect to features."));
  MustRegister(r, OpDefBuilder("SparseSoftmaxCrossEntropyWithLogits")
                      .Input("features: T").Input("labels: Tlabels")
                      .Output("loss: T").Output("backprop: T").Attr(kFloat)
                      .Attr("Tlabels: {int32, int64, uint8} = int64")
                      .SetShapeFn(XentShape)
                      .Doc("Per-example cross entropy of softmax(features) against class "
                           "indices; a label out of range is an error."));
  MustRegister(r, OpDefBuilder("SigmoidCrossEntropyWithLogits")
                      .Input("labels: T").Input("logits: T").Output("loss: T").Attr(kFloat)
                      .SetShapeFn([](InferenceContext* c) {
                        if (!c->input(0).IsCompatibleWith(c->input(1))) {
                          return c->Error("labels and logits must have the same shape");
                        }
                        return ShapeOfInput(c, 1);
                      })
                      .Doc("Element-wise logistic loss max(x, 0) - x * z + log(1 + exp(-|x|))."));
  MustRegister(r, OpDefBuilder("L2Loss")
                      .Input("t: T").Output("output: T").Attr(kFloat)
                      .SetShapeFn(shape_fns::ScalarShape)
                      .Doc("sum(t²) / 2."));

  {
    OpDefBuilder b("Conv2D");
    b.Input("input: T").Input("filter: T").Output("output: T").Attr(kFloat);
    for (const char* a : kConvAttrs) b.Attr(a);
    b.SetShapeFn(Conv2DShape).Doc(
        "2-D convolution of NHWC input with an HWIO filter. A filter of fewer input channels than "
        "the input has is grouped (TensorFlow's rule): groups = input channels / filter input "
        "channels, each group's output channels seeing its own input channels; one input channel "
        "per group is a depthwise convolution.");
    MustRegister(r, b);
  }
  {
    OpDefBuilder b("Conv2DBackpropInput");
    b.Input("input_sizes: int32").Input("filter: T").Input("out_backprop: T").Output("output: T")
        .Attr(kFloat);
    for (const char* a : kConvAttrs) b.Attr(a);
    b.SetShapeFn([](InferenceContext* c) { return ShapeFromVectorInput(c, 0); })
        .Doc("Gradient of Conv2D with respect to its input.");
    MustRegister(r, b);
  }
  {
    OpDefBuilder b("Conv2DBackpropFilter");
    b.Input("input: T").Input("filter_sizes: int32").Input("out_backprop: T").Output("output: T")
        .Attr(kFloat);
    for (const char* a : kConvAttrs) b.Attr(a);
    b.SetShapeFn([](InferenceContext* c) { return ShapeFromVectorInput(c, 1); })
        .Doc("Gradient of Conv2D with respect to its filter.");
    MustRegister(r, b);
  }
  MustRegister(r, OpDefBuilder("MaxPool")
                      .Input("input: T").Output("output: T").Attr(kFloat)
                      .Attr("ksize: list(int)").Attr("strides: list(int)").Attr("padding: string")
                      .Attr("data_format: string = \"NHWC\"")
                      .SetShapeFn(PoolShape)
                      .Doc("Maximum over each window."));
  MustRegister(r, OpDefBuilder("MaxPoolGrad")
                      .Input("orig_input: T").Input("orig_output: T").Input("grad: T")
                      .Output("output: T").Attr(kFloat)
                      .Attr("ksize: list(int)").Attr("strides: list(int)").Attr("padding: string")
                      .Attr("data_format: string = \"NHWC\"")
                      .SetShapeFn([](InferenceContext* c) { return ShapeOfInput(c, 0); })
                      .Doc("Routes each window's gradient to the position of its maximum."));
  MustRegister(r, OpDefBuilder("AvgPool")
                      .Input("value: T").Output("output: T").Attr(kFloat)
                      .Attr("ksize: list(int)").Attr("strides: list(int)").Attr("padding: string")
                      .Attr("data_format: string = \"NHWC\"")
                      .SetShapeFn(PoolShape)
                      .Doc("Mean over each window (SAME padding averages the valid cells only)."));
  MustRegister(r, OpDefBuilder("AvgPoolGrad")
                      .Input("orig_input_shape: int32").Input("grad: T").Output("output: T")
                      .Attr(kFloat)
                      .Attr("ksize: list(int)").Attr("strides: list(int)").Attr("padding: string")
                      .Attr("data_format: string = \"NHWC\"")
                      .SetShapeFn([](InferenceContext* c) { return ShapeFromVectorInput(c, 0); })
                      .Doc("Spreads each window's gradient evenly over its cells."));

  MustRegister(r, OpDefBuilder("Dropout")
                      .Input("x: T").Output("output: T").Output("mask: T").Attr(kFloat)
                      .Attr("rate: float").Attr("seed: int = 0").Attr("seed2: int = 0")
                      .SetIsStateful()
                      .SetShapeFn([](InferenceContext* c) {
                        double rate = c->FloatAttr("rate");
                        if (!(rate >= 0 && rate < 1)) return c->Error("rate must be in [0, 1)");
                        c->set_output(0, c->input(0));
                        c->set_output(1, c->input(0));
                        return Status();
                      })
                      .Doc("Zeroes each element with probability `rate` and scales the rest by "
                           "1/(1 - rate); mask holds the factor applied (0 or 1/(1 - rate)). "
                           "Seeded like the random ops. Evaluation graphs replace it by Identity."));

  MustRegister(r, OpDefBuilder("BatchNorm")
                      .Input("x: T").Input("scale: T").Input("offset: T")
                      .Input("moving_mean: Ref(T)").Input("moving_variance: Ref(T)")
                      .Output("y: T").Output("batch_mean: T").Output("batch_variance: T")
                      .Output("saved_mean: T").Output("saved_inv_std: T")
                      .Attr(kFloat)
                      .Attr("epsilon: float = 0.001").Attr("momentum: float = 0.99")
                      .Attr("is_training: bool = true")
                      .SetShapeFn(BatchNormShape)
                      .Doc("Normalizes x over every dimension but the last (channels). In "
                           "training it uses the batch's statistics and updates the moving "
                           "averages (moving = momentum * moving + (1 - momentum) * batch, the "
                           "variance unbiased); otherwise it uses the moving averages."));
  MustRegister(r, OpDefBuilder("BatchNormGrad")
                      .Input("y_backprop: T").Input("x: T").Input("scale: T")
                      .Input("saved_mean: T").Input("saved_inv_std: T")
                      .Output("x_backprop: T").Output("scale_backprop: T")
                      .Output("offset_backprop: T")
                      .Attr(kFloat).Attr("is_training: bool = true")
                      .SetShapeFn(BatchNormGradShape)
                      .Doc("Gradients of BatchNorm with respect to x, scale and offset."));
}

}  // namespace flowstate::internal

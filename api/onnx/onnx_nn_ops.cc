// Converters of ONNX's convolution, pooling and normalization ops (the
// table is in onnx_ops.cc). ONNX is NCHW with OIHW filters; Flowstate's
// Conv2D and pools are NHWC with HWIO filters, so each converter transposes
// in and out (and 1-D ops run as 2-D ones of height 1). Explicit padding
// that is not TensorFlow's SAME is built with Fill + Concat.
#include <algorithm>
#include <cmath>
#include <limits>

#include "api/onnx/convert_util.h"
#include "api/onnx/converters.h"

namespace flowstate::onnx_import {
namespace {

// The window attributes of a 2-D (or 1-D made 2-D) conv or pool.
struct Window {
  std::vector<int64_t> kernel{1, 1}, strides{1, 1}, dilations{1, 1};
  std::vector<int64_t> pads{0, 0, 0, 0};  // top, left, bottom, right
  std::string auto_pad = "NOTSET";
};

// Reads kernel_shape (or takes `kernel` from the weight), strides,
// dilations, pads and auto_pad for `n` spatial dims, widened to 2-D.
StatusOr<Window> ReadWindow(NodeContext& c, int n, std::vector<int64_t> kernel, bool dilations) {
  Window w;
  std::vector<int64_t> ones(n, 1), zeros(2 * n, 0);
  if (c.HasAttr("kernel_shape") || kernel.empty()) {
    FS_ASSIGN_OR_RETURN(std::vector<int64_t> k, c.Ints("kernel_shape"));
    if (!kernel.empty() && std::find(kernel.begin(), kernel.end(), -1) == kernel.end() &&
        k != kernel) {
      return c.Error("attribute 'kernel_shape' does not match the weight's shape");
    }
    kernel = k;
  } else {
    c.Ignore("kernel_shape");
  }
  FS_ASSIGN_OR_RETURN(std::vector<int64_t> strides, c.Ints("strides", ones));
  std::vector<int64_t> dil = ones;
  if (dilations) {
    FS_ASSIGN_OR_RETURN(dil, c.Ints("dilations", ones));
  }
  FS_ASSIGN_OR_RETURN(std::vector<int64_t> pads, c.Ints("pads", zeros));
  FS_ASSIGN_OR_RETURN(w.auto_pad, c.String("auto_pad", "NOTSET"));
  if (int(kernel.size()) != n || int(strides.size()) != n || int(dil.size()) != n ||
      int(pads.size()) != 2 * n) {
    return c.Error("kernel_shape, strides, dilations and pads must have " + std::to_string(n) +
                   " (pads: " + std::to_string(2 * n) + ") entries");
  }
  for (int i = 0; i < n; ++i) {
    if (kernel[i] < 1 || strides[i] < 1 || dil[i] < 1) {
      return c.Error("kernel_shape, strides and dilations must be >= 1");
    }
  }
  for (int64_t p : pads) {
    if (p < 0) return c.Error("attribute 'pads' has a negative entry");
  }
  if (w.auto_pad != "NOTSET" && w.auto_pad != "VALID" && w.auto_pad != "SAME_UPPER" &&
      w.auto_pad != "SAME_LOWER") {
    return c.Error("attribute 'auto_pad' = \"" + w.auto_pad + "\" is not a valid value");
  }
  int off = 2 - n;
  for (int i = 0; i < n; ++i) {
    w.kernel[off + i] = kernel[i];
    w.strides[off + i] = strides[i];
    w.dilations[off + i] = dil[i];
    w.pads[off + i] = pads[i];
    w.pads[2 + off + i] = pads[n + i];
  }
  return w;
}

// TensorFlow's SAME padding (before, after) of one dim, or nullopt when it
// depends on an unknown input size.
std::optional<std::pair<int64_t, int64_t>> SamePads(int64_t in, int64_t k, int64_t s, int64_t d) {
  int64_t eff = (k - 1) * d + 1;
  if (s == 1) return std::make_pair((eff - 1) / 2, eff - 1 - (eff - 1) / 2);
  if (in < 0) return std::nullopt;
  int64_t out = (in + s - 1) / s;
  int64_t total = std::max<int64_t>((out - 1) * s + eff - in, 0);
  return std::make_pair(total / 2, total - total / 2);
}

// Resolves auto_pad into explicit pads (in, 2-D) and says whether they
// equal TensorFlow's SAME padding. `in`: the input's H, W (-1 unknown).
StatusOr<bool> ResolvePads(NodeContext& c, Window* w, const std::vector<int64_t>& in) {
  if (w->auto_pad == "VALID") {
    w->pads = {0, 0, 0, 0};
    return false;
  }
  bool same = true;
  for (int i = 0; i < 2; ++i) {
    auto p = SamePads(in[i], w->kernel[i], w->strides[i], w->dilations[i]);
    if (w->auto_pad == "SAME_UPPER" || w->auto_pad == "SAME_LOWER") {
      if (!p) {
        if (w->auto_pad == "SAME_LOWER") {
          return c.Unsupported("auto_pad SAME_LOWER with a stride over an input of unknown size");
        }
        continue;  // SAME_UPPER is TensorFlow's SAME
      }
      bool lower = w->auto_pad == "SAME_LOWER";
      int64_t total = p->first + p->second;
      w->pads[i] = lower ? total - total / 2 : total / 2;
      w->pads[2 + i] = total - w->pads[i];
    }
    if (!p || w->pads[i] != p->first || w->pads[2 + i] != p->second) same = false;
  }
  if (w->auto_pad == "SAME_UPPER") return true;
  return same;
}

bool NoPads(const Window& w) {
  return std::all_of(w.pads.begin(), w.pads.end(), [](int64_t p) { return p == 0; });
}

AttrValue List4(int64_t a, int64_t b) { return AttrValue(std::vector<int64_t>{1, a, b, 1}); }

// NHWC pads vector for PadAll from a window's (top, left, bottom, right).
std::vector<int64_t> NhwcPads(const std::vector<int64_t>& p) {
  return {0, p[0], p[1], 0, 0, p[2], p[3], 0};
}

// The input made NHWC (1-D inputs get a height of 1), and its H, W.
struct Spatial {
  Output nhwc;
  std::vector<int64_t> hw;
};
StatusOr<Spatial> ToNhwc(NodeContext& c, const Value& x, const char* what) {
  FS_RETURN_IF_ERROR(NeedRank(c, x, what));
  if (x.rank() != 3 && x.rank() != 4) {
    return c.Unsupported("input '" + std::string(what) + "' of rank " + std::to_string(x.rank()) +
                         ": only 1-D and 2-D convolutions and pools are supported");
  }
  Spatial s;
  Output in = x.out;
  if (x.rank() == 3) {
    in = c.Op("ExpandDims", {in, c.Int32(2)});
    s.hw = {1, x.shape.dim(2)};
  } else {
    s.hw = {x.shape.dim(2), x.shape.dim(3)};
  }
  s.nhwc = Transpose(c, in, {0, 2, 3, 1});
  return s;
}

Output FromNhwc(NodeContext& c, const Output& y, int rank) {
  Output out = Transpose(c, y, {0, 3, 1, 2});
  if (rank == 3) out = c.Op("Squeeze", {out}, {{"axis", AttrValue(std::vector<int64_t>{2})}});
  return out;
}

// Extra end padding that ceil_mode needs so that VALID windows give ONNX's
// output size (from shape inference when known).
StatusOr<std::vector<int64_t>> CeilExtra(NodeContext& c, const Window& w,
                                         const std::vector<int64_t>& in, int rank) {
  std::vector<int64_t> extra{0, 0};
  PartialShape out = c.OutputShape(0);
  for (int i = 0; i < 2; ++i) {
    if (rank == 3 && i == 0) continue;
    int64_t eff = (w.kernel[i] - 1) * w.dilations[i] + 1;
    int64_t span = in[i] + w.pads[i] + w.pads[2 + i] - eff;
    int64_t o = -1;
    if (out.rank_known() && out.rank() == rank) o = out.dim(rank == 3 ? 2 : 2 + i);
    if (o < 0) {
      if (in[i] < 0) return c.Unsupported("ceil_mode over an input of unknown size");
      o = (span + w.strides[i] - 1) / w.strides[i] + 1;
    }
    if (in[i] < 0) return c.Unsupported("ceil_mode over an input of unknown size");
    extra[i] = std::max<int64_t>((o - 1) * w.strides[i] + eff - (in[i] + w.pads[i] + w.pads[2 + i]),
                                 0);
  }
  return extra;
}

// Reshapes a per-channel vector to [C, 1, ..., 1] for an NC... tensor.
Output ChannelParam(NodeContext& c, const Output& p, int rank) {
  if (rank <= 2) return p;
  std::vector<int64_t> dims(rank - 1, 1);
  dims[0] = -1;
  return c.Op("Reshape", {p, c.Ints64(dims)});
}

}  // namespace

Status ConvertConv(NodeContext& c) {
  FS_ASSIGN_OR_RETURN(Value x, c.input(0));
  FS_ASSIGN_OR_RETURN(Value w, c.input(1));
  FS_RETURN_IF_ERROR(NeedFloat(c, x, "X"));
  FS_ASSIGN_OR_RETURN(int64_t group, c.Int("group", 1));
  FS_RETURN_IF_ERROR(NeedRank(c, w, "W"));
  FS_ASSIGN_OR_RETURN(Spatial s, ToNhwc(c, x, "X"));
  const int n = x.rank() - 2;
  if (w.rank() != x.rank()) return c.Error("W must have the rank of X");
  std::vector<int64_t> kernel(w.shape.dims().begin() + 2, w.shape.dims().end());
  FS_ASSIGN_OR_RETURN(Window win, ReadWindow(c, n, kernel, true));
  FS_ASSIGN_OR_RETURN(bool same, ResolvePads(c, &win, s.hw));
  if (group < 1) return c.Error("attribute 'group' must be >= 1");
  int64_t cin = x.shape.dim(1);
  if (group > 1 && cin >= 0 && cin % group != 0) {
    return c.Error("attribute 'group' = " + std::to_string(group) + " does not divide the " +
                   std::to_string(cin) + " input channels");
  }
  // OIHW -> HWIO.
  Output filt = w.out;
  if (n == 1) filt = c.Op("ExpandDims", {filt, c.Int32(2)});
  filt = Transpose(c, filt, {2, 3, 1, 0});
  Output in = s.nhwc;
  std::string padding = "VALID";
  if (!NoPads(win)) {
    if (same) {
      padding = "SAME";
    } else {
      in = PadAll(c, in, 4, NhwcPads(win.pads), c.Scalar(0, x.dtype));
    }
  }
  AttrMap attrs{{"strides", List4(win.strides[0], win.strides[1])},
                {"dilations", List4(win.dilations[0], win.dilations[1])},
                {"padding", AttrValue(padding)}};
  Output y;
  if (group == 1) {
    y = c.Op("Conv2D", {in, filt}, attrs);
  } else {
    std::vector<Output> xs = c.OpN("Split", {c.Int32(3), in},
                                   {{"num_split", AttrValue(group)}}, int(group));
    std::vector<Output> fs = c.OpN("Split", {c.Int32(3), filt},
                                   {{"num_split", AttrValue(group)}}, int(group));
    std::vector<Output> ys;
    for (int g = 0; g < group; ++g) ys.push_back(c.Op("Conv2D", {xs[g], fs[g]}, attrs));
    ys.push_back(c.Int32(3));
    y = c.Op("Concat", ys);
  }
  if (c.has_input(2)) {
    FS_ASSIGN_OR_RETURN(Value b, c.input(2));
    y = c.Op("BiasAdd", {y, b.out});
  }
  return c.SetOutput(0, FromNhwc(c, y, x.rank()), x.dtype);
}

// The gradient of a VALID Conv2D with respect to its input
// (Conv2DBackpropInput) at the full size, cropped by the pads.
Status ConvertConvTranspose(NodeContext& c) {
  FS_ASSIGN_OR_RETURN(Value x, c.input(0));
  FS_ASSIGN_OR_RETURN(Value w, c.input(1));
  FS_RETURN_IF_ERROR(NeedFloat(c, x, "X"));
  FS_ASSIGN_OR_RETURN(int64_t group, c.Int("group", 1));
  FS_RETURN_IF_ERROR(NeedRank(c, w, "W"));
  FS_ASSIGN_OR_RETURN(Spatial s, ToNhwc(c, x, "X"));
  const int n = x.rank() - 2;
  if (w.rank() != x.rank()) return c.Error("W must have the rank of X");
  std::vector<int64_t> kernel(w.shape.dims().begin() + 2, w.shape.dims().end());
  FS_ASSIGN_OR_RETURN(Window win, ReadWindow(c, n, kernel, true));
  FS_ASSIGN_OR_RETURN(std::vector<int64_t> out_pad,
                      c.Ints("output_padding", std::vector<int64_t>(n, 0)));
  FS_ASSIGN_OR_RETURN(std::vector<int64_t> out_shape,
                      c.Ints("output_shape", std::vector<int64_t>{}));
  if (int(out_pad.size()) != n || (!out_shape.empty() && int(out_shape.size()) != n)) {
    return c.Error("output_padding and output_shape must have one entry per spatial axis");
  }
  if (group != 1) return c.Unsupported("attribute 'group' other than 1");
  const int64_t cout = w.shape.dim(1);
  if (cout < 0) return c.Unsupported("W of unknown shape");
  std::vector<int64_t> op2{0, 0}, os2{-1, -1};
  for (int i = 0; i < n; ++i) {
    op2[2 - n + i] = out_pad[i];
    if (!out_shape.empty()) os2[2 - n + i] = out_shape[i];
  }
  std::vector<int64_t> full(2);
  for (int i = 0; i < 2; ++i) {
    if (s.hw[i] < 0) return c.Unsupported("an input of unknown spatial size");
    int64_t eff = (win.kernel[i] - 1) * win.dilations[i] + 1;
    full[i] = (s.hw[i] - 1) * win.strides[i] + eff + op2[i];
    int64_t target = os2[i];
    if (target < 0 && (win.auto_pad == "SAME_UPPER" || win.auto_pad == "SAME_LOWER")) {
      target = s.hw[i] * win.strides[i];
    }
    if (win.auto_pad == "VALID") {
      win.pads[i] = win.pads[2 + i] = 0;
    } else if (target >= 0) {
      int64_t total = full[i] - target;
      if (total < 0) {  // a larger output_shape adds output padding
        if (-total >= std::max(win.strides[i], win.dilations[i])) {
          return c.Error("output_shape is larger than the stride allows");
        }
        full[i] = target;
        total = 0;
      }
      bool upper = win.auto_pad == "SAME_UPPER";
      win.pads[i] = upper ? total / 2 : total - total / 2;
      win.pads[2 + i] = total - win.pads[i];
    }
  }
  Output filt = w.out;
  if (n == 1) filt = c.Op("ExpandDims", {filt, c.Int32(2)});
  filt = Transpose(c, filt, {2, 3, 1, 0});  // [Cin, Cout, kh, kw] -> [kh, kw, Cout, Cin]
  Output batch = c.Op("Slice", {c.Op("Shape", {s.nhwc}, {{"out_type", AttrValue(DataType::kInt32)}}),
                                c.Ints32({0}), c.Ints32({1})});
  Output sizes = c.Op("Concat", {batch, c.Ints32({full[0], full[1], cout}), c.Int32(0)});
  Output y = c.Op("Conv2DBackpropInput", {sizes, filt, s.nhwc},
                  {{"strides", List4(win.strides[0], win.strides[1])},
                   {"dilations", List4(win.dilations[0], win.dilations[1])},
                   {"padding", AttrValue("VALID")}});
  if (!NoPads(win)) {
    int64_t h = full[0] - win.pads[0] - win.pads[2], wd = full[1] - win.pads[1] - win.pads[3];
    if (h < 0 || wd < 0) return c.Error("the pads are larger than the output");
    y = c.Op("Slice", {y, c.Ints64({0, win.pads[0], win.pads[1], 0}), c.Ints64({-1, h, wd, -1})});
  }
  if (c.has_input(2)) {
    FS_ASSIGN_OR_RETURN(Value b, c.input(2));
    y = c.Op("BiasAdd", {y, b.out});
  }
  return c.SetOutput(0, FromNhwc(c, y, x.rank()), x.dtype);
}

Status ConvertMaxPool(NodeContext& c) {
  FS_ASSIGN_OR_RETURN(Value x, c.input(0));
  FS_RETURN_IF_ERROR(NeedFloat(c, x, "X"));
  FS_ASSIGN_OR_RETURN(int64_t ceil_mode, c.Int("ceil_mode", 0));
  FS_ASSIGN_OR_RETURN(int64_t storage_order, c.Int("storage_order", 0));
  (void)storage_order;  // only the Indices output, which is not supported, depends on it
  FS_ASSIGN_OR_RETURN(Spatial s, ToNhwc(c, x, "X"));
  FS_ASSIGN_OR_RETURN(Window win, ReadWindow(c, x.rank() - 2, {}, true));
  if (win.dilations != std::vector<int64_t>{1, 1}) {
    return c.Unsupported("attribute 'dilations' other than 1");
  }
  FS_ASSIGN_OR_RETURN(bool same, ResolvePads(c, &win, s.hw));
  std::vector<int64_t> extra{0, 0};
  if (ceil_mode != 0) {
    FS_ASSIGN_OR_RETURN(extra, CeilExtra(c, win, s.hw, x.rank()));
  }
  std::string padding = "VALID";
  Output in = s.nhwc;
  bool has_extra = extra[0] > 0 || extra[1] > 0;
  if (!NoPads(win) || has_extra) {
    if (same && !has_extra) {
      padding = "SAME";
    } else {
      std::vector<int64_t> p = win.pads;
      p[2] += extra[0];
      p[3] += extra[1];
      in = PadAll(c, in, 4, NhwcPads(p),
                  c.Scalar(-std::numeric_limits<double>::infinity(), x.dtype));
    }
  }
  Output y = c.Op("MaxPool", {in}, {{"ksize", List4(win.kernel[0], win.kernel[1])},
                                    {"strides", List4(win.strides[0], win.strides[1])},
                                    {"padding", AttrValue(padding)}});
  return c.SetOutput(0, FromNhwc(c, y, x.rank()), x.dtype);
}

Status ConvertAveragePool(NodeContext& c) {
  FS_ASSIGN_OR_RETURN(Value x, c.input(0));
  FS_RETURN_IF_ERROR(NeedFloat(c, x, "X"));
  FS_ASSIGN_OR_RETURN(int64_t ceil_mode, c.Int("ceil_mode", 0));
  FS_ASSIGN_OR_RETURN(int64_t include_pad, c.Int("count_include_pad", 0));
  FS_ASSIGN_OR_RETURN(Spatial s, ToNhwc(c, x, "X"));
  FS_ASSIGN_OR_RETURN(Window win, ReadWindow(c, x.rank() - 2, {}, false));
  FS_ASSIGN_OR_RETURN(bool same, ResolvePads(c, &win, s.hw));
  std::vector<int64_t> extra{0, 0};
  if (ceil_mode != 0) {
    FS_ASSIGN_OR_RETURN(extra, CeilExtra(c, win, s.hw, x.rank()));
  }
  bool has_extra = extra[0] > 0 || extra[1] > 0;
  AttrMap attrs{{"ksize", List4(win.kernel[0], win.kernel[1])},
                {"strides", List4(win.strides[0], win.strides[1])}};
  auto pool = [&](const Output& in, const char* padding) {
    AttrMap a = attrs;
    a["padding"] = AttrValue(padding);
    return c.Op("AvgPool", {in}, a);
  };
  Output y;
  if (NoPads(win) && !has_extra) {
    y = pool(s.nhwc, "VALID");
  } else if (same && !has_extra && include_pad == 0) {
    y = pool(s.nhwc, "SAME");  // averages the cells inside the input only
  } else {
    // mean over the window of the zero-padded input, divided by the share
    // of the window that counts (padding counts with count_include_pad,
    // ceil_mode's overhang never does).
    std::vector<int64_t> p = win.pads;
    p[2] += extra[0];
    p[3] += extra[1];
    Output zero = c.Scalar(0, x.dtype);
    Output sum = pool(PadAll(c, s.nhwc, 4, NhwcPads(p), zero), "VALID");
    Output ones = c.Op("OnesLike", {s.nhwc});
    Output mask = PadAll(c, ones, 4, NhwcPads(win.pads), c.Scalar(include_pad ? 1 : 0, x.dtype));
    mask = PadAll(c, mask, 4, NhwcPads({0, 0, extra[0], extra[1]}), zero);
    y = c.Op("Div", {sum, pool(mask, "VALID")});
  }
  return c.SetOutput(0, FromNhwc(c, y, x.rank()), x.dtype);
}

Status ConvertGlobalPool(NodeContext& c, const char* op) {
  FS_ASSIGN_OR_RETURN(Value x, c.input(0));
  FS_RETURN_IF_ERROR(NeedRank(c, x, "X"));
  if (x.rank() < 3) return c.Error("X must have rank >= 3");
  std::vector<int64_t> axes;
  for (int i = 2; i < x.rank(); ++i) axes.push_back(i);
  Output y = c.Op(op, {x.out, c.Ints64(axes)}, {{"keep_dims", AttrValue(true)}});
  return c.SetOutput(0, y, x.dtype);
}

Status ConvertBatchNormalization(NodeContext& c) {
  FS_ASSIGN_OR_RETURN(Value x, c.input(0));
  FS_ASSIGN_OR_RETURN(Value scale, c.input(1));
  FS_ASSIGN_OR_RETURN(Value bias, c.input(2));
  FS_ASSIGN_OR_RETURN(Value mean, c.input(3));
  FS_ASSIGN_OR_RETURN(Value var, c.input(4));
  FS_ASSIGN_OR_RETURN(double eps, c.Float("epsilon", 1e-5));
  FS_ASSIGN_OR_RETURN(double momentum, c.Float("momentum", 0.9));
  (void)momentum;  // used by training mode only
  if (c.opset() >= 14) {
    FS_ASSIGN_OR_RETURN(int64_t training, c.Int("training_mode", 0));
    if (training != 0) return c.Unsupported("training_mode = 1");
  }
  FS_RETURN_IF_ERROR(NeedFloat(c, x, "X"));
  FS_RETURN_IF_ERROR(NeedRank(c, x, "X"));
  if (x.rank() < 2) return c.Error("X must have rank >= 2");
  for (const Value* p : {&scale, &bias, &mean, &var}) {
    if (p->dtype != x.dtype) {
      return c.Unsupported("parameters of another dtype than X (" +
                           std::string(DataTypeName(p->dtype)) + ")");
    }
  }
  const int r = x.rank();
  Output inv = c.Op("Mul", {c.Op("Rsqrt", {c.Op("Add", {var.out, c.Scalar(eps, x.dtype)})}),
                            scale.out});
  Output y = c.Op("Add", {c.Op("Mul", {c.Op("Sub", {x.out, ChannelParam(c, mean.out, r)}),
                                       ChannelParam(c, inv, r)}),
                          ChannelParam(c, bias.out, r)});
  return c.SetOutput(0, y, x.dtype, x.shape);
}

Status ConvertInstanceNormalization(NodeContext& c) {
  FS_ASSIGN_OR_RETURN(Value x, c.input(0));
  FS_ASSIGN_OR_RETURN(Value scale, c.input(1));
  FS_ASSIGN_OR_RETURN(Value bias, c.input(2));
  FS_ASSIGN_OR_RETURN(double eps, c.Float("epsilon", 1e-5));
  FS_RETURN_IF_ERROR(NeedFloat(c, x, "input"));
  FS_RETURN_IF_ERROR(NeedRank(c, x, "input"));
  const int r = x.rank();
  if (r < 3) return c.Error("input must have rank >= 3");
  std::vector<int64_t> axes;
  for (int i = 2; i < r; ++i) axes.push_back(i);
  AttrMap keep{{"keep_dims", AttrValue(true)}};
  Output m = c.Op("Mean", {x.out, c.Ints64(axes)}, keep);
  Output d = c.Op("Sub", {x.out, m});
  Output v = c.Op("Mean", {c.Op("Square", {d}), c.Ints64(axes)}, keep);
  Output norm = c.Op("Mul", {d, c.Op("Rsqrt", {c.Op("Add", {v, c.Scalar(eps, x.dtype)})})});
  Output y = c.Op("Add", {c.Op("Mul", {norm, ChannelParam(c, scale.out, r)}),
                          ChannelParam(c, bias.out, r)});
  return c.SetOutput(0, y, x.dtype, x.shape);
}

Status ConvertLayerNormalization(NodeContext& c) {
  FS_ASSIGN_OR_RETURN(Value x, c.input(0));
  FS_ASSIGN_OR_RETURN(Value scale, c.input(1));
  FS_ASSIGN_OR_RETURN(int64_t axis_attr, c.Int("axis", -1));
  FS_ASSIGN_OR_RETURN(double eps, c.Float("epsilon", 1e-5));
  FS_ASSIGN_OR_RETURN(int64_t stash, c.Int("stash_type", 1));
  if (stash != 1) return c.Unsupported("attribute 'stash_type' other than 1 (float)");
  FS_RETURN_IF_ERROR(NeedFloat(c, x, "X"));
  FS_RETURN_IF_ERROR(NeedRank(c, x, "X"));
  FS_ASSIGN_OR_RETURN(int axis, NormAxis(c, axis_attr, x.rank(), "axis"));
  std::vector<int64_t> axes;
  for (int i = axis; i < x.rank(); ++i) axes.push_back(i);
  AttrMap keep{{"keep_dims", AttrValue(true)}};
  Output m = c.Op("Mean", {x.out, c.Ints64(axes)}, keep);
  Output d = c.Op("Sub", {x.out, m});
  Output v = c.Op("Mean", {c.Op("Square", {d}), c.Ints64(axes)}, keep);
  Output inv = c.Op("Rsqrt", {c.Op("Add", {v, c.Scalar(eps, x.dtype)})});
  Output y = c.Op("Mul", {c.Op("Mul", {d, inv}), scale.out});
  if (c.has_input(2)) {
    FS_ASSIGN_OR_RETURN(Value b, c.input(2));
    y = c.Op("Add", {y, b.out});
  }
  FS_RETURN_IF_ERROR(c.SetOutput(0, y, x.dtype, x.shape));
  FS_RETURN_IF_ERROR(c.SetOutput(1, m, x.dtype));
  return c.SetOutput(2, inv, x.dtype);
}

}  // namespace flowstate::onnx_import

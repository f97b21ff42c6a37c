// Converters of ONNX's convolution, pooling and normalization ops (the
// table is in onnx_ops.cc). ONNX is NCHW with OIHW filters; Flowstate's
// Conv2D and pools are NHWC with HWIO filters, so each converter transposes
// in and out (and 1-D ops run as 2-D ones of height 1). Explicit padding
// that is not TensorFlow's SAME is built with Fill + Concat. 3-D convolutions
// and pools (depth known at import) are unrolled over the depth into 2-D
// ones; dilated max pooling is the maximum of strided slices.
#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <optional>

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
                         ": only 1-D, 2-D and 3-D convolutions and pools are supported");
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
                                         const std::vector<int64_t>& in,
                                         const std::vector<int64_t>& out_hw) {
  std::vector<int64_t> extra{0, 0};
  for (int i = 0; i < 2; ++i) {
    if (in[i] < 0) return c.Unsupported("ceil_mode over an input of unknown size");
    int64_t eff = (w.kernel[i] - 1) * w.dilations[i] + 1;
    int64_t span = in[i] + w.pads[i] + w.pads[2 + i] - eff;
    int64_t o = out_hw[i];
    if (o < 0) o = (span + w.strides[i] - 1) / w.strides[i] + 1;
    extra[i] = std::max<int64_t>((o - 1) * w.strides[i] + eff - (in[i] + w.pads[i] + w.pads[2 + i]),
                                 0);
  }
  return extra;
}

// H, W of output 0 as ONNX inferred them (-1 unknown), for an output of
// rank `rank` whose last two dims are H, W (1-D: H is 1).
std::vector<int64_t> InferredHw(NodeContext& c, int rank) {
  PartialShape out = c.OutputShape(0);
  if (!out.rank_known() || out.rank() != rank) return {-1, -1};
  if (rank == 3) return {1, out.dim(2)};
  return {out.dim(rank - 2), out.dim(rank - 1)};
}

// Reshapes a per-channel vector to [C, 1, ..., 1] for an NC... tensor.
Output ChannelParam(NodeContext& c, const Output& p, int rank) {
  if (rank <= 2) return p;
  std::vector<int64_t> dims(rank - 1, 1);
  dims[0] = -1;
  return c.Op("Reshape", {p, c.Ints64(dims)});
}

}  // namespace

namespace {

// A depthwise convolution (one filter per channel: group = input channels
// = output channels) of NHWC `in` with an HWIO filter [KH, KW, 1, C], as
// KH * KW strided slices of the padded input, each scaled by its tap's
// per-channel weights, summed: a few ops whatever the channel count (one
// Conv2D per group would be C of them), their gradients the slices' and
// products'. Needs explicit pads (win.pads, resolved) and a known H, W.
Output DepthwiseTaps(NodeContext& c, Output in, const std::vector<int64_t>& hw, const Output& filt,
                     const Window& win, DataType dt) {
  if (!NoPads(win)) in = PadAll(c, in, 4, NhwcPads(win.pads), c.Scalar(0, dt));
  int64_t out[2];
  for (int i = 0; i < 2; ++i) {
    const int64_t padded = hw[i] + win.pads[i] + win.pads[2 + i];
    const int64_t eff = (win.kernel[i] - 1) * win.dilations[i] + 1;
    out[i] = (padded - eff) / win.strides[i] + 1;
  }
  AttrMap masks{{"begin_mask", AttrValue(int64_t(9))}, {"end_mask", AttrValue(int64_t(9))}};
  std::optional<Output> sum;
  for (int64_t ky = 0; ky < win.kernel[0]; ++ky) {
    for (int64_t kx = 0; kx < win.kernel[1]; ++kx) {
      const int64_t y0 = ky * win.dilations[0], x0 = kx * win.dilations[1];
      Output tap = c.Op("StridedSlice",
                        {in, c.Ints32({0, y0, x0, 0}),
                         c.Ints32({0, y0 + (out[0] - 1) * win.strides[0] + 1, x0 + (out[1] - 1) * win.strides[1] + 1, 0}),
                         c.Ints32({1, win.strides[0], win.strides[1], 1})},
                        masks);
      Output w = c.Op("Reshape", {c.Op("Slice", {filt, c.Ints32({ky, kx, 0, 0}), c.Ints32({1, 1, 1, -1})}),
                                  c.Ints32({-1})});
      Output term = c.Op("Mul", {tap, w});
      sum = sum ? c.Op("Add", {*sum, term}) : term;
    }
  }
  return *sum;
}

// A 2-D convolution of NHWC `in` (spatial size hw) with an HWIO filter,
// `group` groups, padding as `win` says: NHWC out. `depthwise`: one filter
// per input channel (group = input channels = output channels).
StatusOr<Output> Conv2dCore(NodeContext& c, Output in, const std::vector<int64_t>& hw,
                            Output filt, Window win, int64_t group, DataType dt,
                            bool depthwise = false) {
  FS_ASSIGN_OR_RETURN(bool same, ResolvePads(c, &win, hw));
  // float32 and float64 have Conv2D kernels, grouped ones included (one
  // Conv2D whatever the groups: oneDNN's grouped primitives for float32);
  // other dtypes go group by group, a depthwise one as taps.
  const bool conv_kernels = dt == DataType::kFloat32 || dt == DataType::kFloat64;
  // With H and W known, ResolvePads has made every auto_pad explicit.
  if (!conv_kernels && depthwise && group > 1 && hw[0] >= 0 && hw[1] >= 0) {
    return DepthwiseTaps(c, in, hw, filt, win, dt);
  }
  std::string padding = "VALID";
  if (!NoPads(win)) {
    if (same) {
      padding = "SAME";
    } else {
      in = PadAll(c, in, 4, NhwcPads(win.pads), c.Scalar(0, dt));
    }
  }
  AttrMap attrs{{"strides", List4(win.strides[0], win.strides[1])},
                {"dilations", List4(win.dilations[0], win.dilations[1])},
                {"padding", AttrValue(padding)}};
  if (group == 1 || conv_kernels) return c.Op("Conv2D", {in, filt}, attrs);
  std::vector<Output> xs = c.OpN("Split", {c.Int32(3), in}, {{"num_split", AttrValue(group)}},
                                 int(group));
  std::vector<Output> fs = c.OpN("Split", {c.Int32(3), filt}, {{"num_split", AttrValue(group)}},
                                 int(group));
  std::vector<Output> ys;
  for (int g = 0; g < group; ++g) ys.push_back(c.Op("Conv2D", {xs[g], fs[g]}, attrs));
  ys.push_back(c.Int32(3));
  return c.Op("Concat", ys);
}

// The 3-D attributes: the depth's (kernel, stride, dilation, pad before,
// pad after) and the 2-D window of H, W.
struct Window3 {
  int64_t k = 1, s = 1, d = 1, pb = 0, pe = 0;
  Window hw;
};

StatusOr<Window3> ReadWindow3(NodeContext& c, std::vector<int64_t> kernel, bool dilations) {
  Window3 w;
  std::vector<int64_t> ones(3, 1), zeros(6, 0);
  if (c.HasAttr("kernel_shape") || kernel.empty()) {
    FS_ASSIGN_OR_RETURN(kernel, c.Ints("kernel_shape"));
  } else {
    c.Ignore("kernel_shape");
  }
  FS_ASSIGN_OR_RETURN(std::vector<int64_t> st, c.Ints("strides", ones));
  std::vector<int64_t> dil = ones;
  if (dilations) {
    FS_ASSIGN_OR_RETURN(dil, c.Ints("dilations", ones));
  }
  FS_ASSIGN_OR_RETURN(std::vector<int64_t> pads, c.Ints("pads", zeros));
  FS_ASSIGN_OR_RETURN(w.hw.auto_pad, c.String("auto_pad", "NOTSET"));
  if (kernel.size() != 3 || st.size() != 3 || dil.size() != 3 || pads.size() != 6) {
    return c.Error("kernel_shape, strides, dilations and pads must have 3 (pads: 6) entries");
  }
  for (int i = 0; i < 3; ++i) {
    if (kernel[i] < 1 || st[i] < 1 || dil[i] < 1) {
      return c.Error("kernel_shape, strides and dilations must be >= 1");
    }
  }
  for (int64_t p : pads) {
    if (p < 0) return c.Error("attribute 'pads' has a negative entry");
  }
  if (w.hw.auto_pad != "NOTSET" && w.hw.auto_pad != "VALID") {
    return c.Unsupported("attribute 'auto_pad' = \"" + w.hw.auto_pad + "\" in 3-D");
  }
  w.k = kernel[0];
  w.s = st[0];
  w.d = dil[0];
  w.pb = w.hw.auto_pad == "VALID" ? 0 : pads[0];
  w.pe = w.hw.auto_pad == "VALID" ? 0 : pads[3];
  w.hw.kernel = {kernel[1], kernel[2]};
  w.hw.strides = {st[1], st[2]};
  w.hw.dilations = {dil[1], dil[2]};
  w.hw.pads = {pads[1], pads[2], pads[4], pads[5]};
  return w;
}

// x[:, :, z] of an NCDHW tensor, as NHWC.
Output DepthSliceNhwc(NodeContext& c, const Output& x, int64_t z) {
  return Transpose(c, c.Op("Gather", {x, c.Int32(z)}, {{"axis", AttrValue(int64_t(2))}}),
                   {0, 2, 3, 1});
}

// [N, H, W, C] per output depth -> NCDHW.
Output StackDepth(NodeContext& c, const std::vector<Output>& planes) {
  std::vector<Output> parts;
  for (const Output& p : planes) parts.push_back(c.Op("ExpandDims", {p, c.Int32(1)}));
  parts.push_back(c.Int32(1));
  return Transpose(c, c.Op("Concat", parts), {0, 4, 1, 2, 3});
}

// A 3-D convolution as, for each output depth, the sum over the kernel's
// depth of 2-D convolutions of input planes (the depth must be known).
Status Conv3d(NodeContext& c, const Value& x, const Value& w, int64_t group) {
  std::vector<int64_t> kernel(w.shape.dims().begin() + 2, w.shape.dims().end());
  FS_ASSIGN_OR_RETURN(Window3 win, ReadWindow3(c, kernel, true));
  const int64_t depth = x.shape.dim(2);
  std::vector<int64_t> hw{x.shape.dim(3), x.shape.dim(4)};
  if (depth < 0) return c.Unsupported("a 3-D input of unknown depth");
  const int64_t eff = (win.k - 1) * win.d + 1;
  const int64_t out_d = (depth + win.pb + win.pe - eff) / win.s + 1;
  if (out_d < 1) return c.Error("the kernel is deeper than the padded input");
  std::map<int64_t, Output> planes, filters;
  std::vector<Output> outs;
  for (int64_t od = 0; od < out_d; ++od) {
    std::optional<Output> sum;
    for (int64_t k = 0; k < win.k; ++k) {
      int64_t z = od * win.s + k * win.d - win.pb;
      if (z < 0 || z >= depth) continue;
      if (!planes.count(z)) planes[z] = DepthSliceNhwc(c, x.out, z);
      if (!filters.count(k)) {
        filters[k] = Transpose(c, c.Op("Gather", {w.out, c.Int32(k)},
                                       {{"axis", AttrValue(int64_t(2))}}),
                               {2, 3, 1, 0});
      }
      FS_ASSIGN_OR_RETURN(Output y, Conv2dCore(c, planes[z], hw, filters[k], win.hw, group,
                                               x.dtype));
      sum = sum ? c.Op("Add", {*sum, y}) : y;
    }
    if (!sum) return c.Unsupported("an output plane that lies wholly in the padding");
    outs.push_back(*sum);
  }
  Output y = StackDepth(c, outs);
  if (c.has_input(2)) {
    FS_ASSIGN_OR_RETURN(Value b, c.input(2));
    y = c.Op("Add", {y, ChannelParam(c, b.out, 5)});
  }
  return c.SetOutput(0, y, x.dtype);
}

}  // namespace

Status ConvertConv(NodeContext& c) {
  FS_ASSIGN_OR_RETURN(Value x, c.input(0));
  FS_ASSIGN_OR_RETURN(Value w, c.input(1));
  FS_RETURN_IF_ERROR(NeedFloat(c, x, "X"));
  FS_ASSIGN_OR_RETURN(int64_t group, c.Int("group", 1));
  FS_RETURN_IF_ERROR(NeedRank(c, w, "W"));
  if (group < 1) return c.Error("attribute 'group' must be >= 1");
  int64_t cin = x.shape.rank_known() && x.rank() >= 2 ? x.shape.dim(1) : -1;
  if (group > 1 && cin >= 0 && cin % group != 0) {
    return c.Error("attribute 'group' = " + std::to_string(group) + " does not divide the " +
                   std::to_string(cin) + " input channels");
  }
  if (w.rank() != x.rank()) return c.Error("W must have the rank of X");
  if (x.rank() == 5) return Conv3d(c, x, w, group);
  FS_ASSIGN_OR_RETURN(Spatial s, ToNhwc(c, x, "X"));
  const int n = x.rank() - 2;
  std::vector<int64_t> kernel(w.shape.dims().begin() + 2, w.shape.dims().end());
  FS_ASSIGN_OR_RETURN(Window win, ReadWindow(c, n, kernel, true));
  // OIHW -> HWIO.
  Output filt = w.out;
  if (n == 1) filt = c.Op("ExpandDims", {filt, c.Int32(2)});
  filt = Transpose(c, filt, {2, 3, 1, 0});
  const bool depthwise = group > 1 && cin == group && w.shape.dim(0) == group && w.shape.dim(1) == 1;
  FS_ASSIGN_OR_RETURN(Output y, Conv2dCore(c, s.nhwc, s.hw, filt, win, group, x.dtype, depthwise));
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

namespace {

// 2-D pools of NHWC `in` (spatial size hw): NHWC out. `out_hw`: the output
// size ONNX inferred (-1 unknown), for ceil_mode.
StatusOr<Output> MaxPool2dCore(NodeContext& c, Output in, const std::vector<int64_t>& hw,
                               Window win, bool ceil_mode, const std::vector<int64_t>& out_hw,
                               DataType dt) {
  FS_ASSIGN_OR_RETURN(bool same, ResolvePads(c, &win, hw));
  std::vector<int64_t> extra{0, 0};
  if (ceil_mode) {
    FS_ASSIGN_OR_RETURN(extra, CeilExtra(c, win, hw, out_hw));
  }
  std::string padding = "VALID";
  bool has_extra = extra[0] > 0 || extra[1] > 0;
  if (!NoPads(win) || has_extra) {
    if (same && !has_extra) {
      padding = "SAME";
    } else {
      std::vector<int64_t> p = win.pads;
      p[2] += extra[0];
      p[3] += extra[1];
      in = PadAll(c, in, 4, NhwcPads(p), c.Scalar(-std::numeric_limits<double>::infinity(), dt));
    }
  }
  if (win.dilations != std::vector<int64_t>{1, 1}) {
    // Dilated: the maximum over the window's taps, each a strided slice.
    if (padding == "SAME") {
      in = PadAll(c, in, 4, NhwcPads(win.pads),
                  c.Scalar(-std::numeric_limits<double>::infinity(), dt));
    }
    std::vector<int64_t> size_in = hw;
    for (int i = 0; i < 2; ++i) {
      if (size_in[i] < 0) return c.Unsupported("dilated pooling over an input of unknown size");
      size_in[i] += win.pads[i] + win.pads[2 + i] + extra[i];
    }
    std::vector<int64_t> out(2);
    for (int i = 0; i < 2; ++i) {
      int64_t eff = (win.kernel[i] - 1) * win.dilations[i] + 1;
      out[i] = (size_in[i] - eff) / win.strides[i] + 1;
      if (out[i] < 1) return c.Error("the window is larger than the padded input");
    }
    std::optional<Output> y;
    int64_t all = 15;
    for (int64_t i = 0; i < win.kernel[0]; ++i) {
      for (int64_t j = 0; j < win.kernel[1]; ++j) {
        int64_t bi = i * win.dilations[0], bj = j * win.dilations[1];
        Output tap = c.Op("StridedSlice",
                          {in, c.Ints64({0, bi, bj, 0}),
                           c.Ints64({0, bi + (out[0] - 1) * win.strides[0] + 1,
                                     bj + (out[1] - 1) * win.strides[1] + 1, 0}),
                           c.Ints64({1, win.strides[0], win.strides[1], 1})},
                          {{"begin_mask", AttrValue(int64_t(9))},
                           {"end_mask", AttrValue(int64_t(9))}});
        (void)all;
        y = y ? c.Op("Maximum", {*y, tap}) : tap;
      }
    }
    return *y;
  }
  return c.Op("MaxPool", {in}, {{"ksize", List4(win.kernel[0], win.kernel[1])},
                                {"strides", List4(win.strides[0], win.strides[1])},
                                {"padding", AttrValue(padding)}});
}

StatusOr<Output> AvgPool2dCore(NodeContext& c, Output in, const std::vector<int64_t>& hw,
                               Window win, bool ceil_mode, bool include_pad,
                               const std::vector<int64_t>& out_hw, DataType dt) {
  FS_ASSIGN_OR_RETURN(bool same, ResolvePads(c, &win, hw));
  std::vector<int64_t> extra{0, 0};
  if (ceil_mode) {
    FS_ASSIGN_OR_RETURN(extra, CeilExtra(c, win, hw, out_hw));
  }
  bool has_extra = extra[0] > 0 || extra[1] > 0;
  AttrMap attrs{{"ksize", List4(win.kernel[0], win.kernel[1])},
                {"strides", List4(win.strides[0], win.strides[1])}};
  auto pool = [&](const Output& x, const char* padding) {
    AttrMap a = attrs;
    a["padding"] = AttrValue(padding);
    return c.Op("AvgPool", {x}, a);
  };
  if (NoPads(win) && !has_extra) return pool(in, "VALID");
  if (same && !has_extra && !include_pad) return pool(in, "SAME");  // the input's cells only
  // The mean over the window of the zero-padded input, divided by the share
  // of the window that counts (padding counts with count_include_pad,
  // ceil_mode's overhang never does).
  std::vector<int64_t> p = win.pads;
  p[2] += extra[0];
  p[3] += extra[1];
  Output zero = c.Scalar(0, dt);
  Output sum = pool(PadAll(c, in, 4, NhwcPads(p), zero), "VALID");
  Output ones = c.Op("OnesLike", {in});
  Output mask = PadAll(c, ones, 4, NhwcPads(win.pads), c.Scalar(include_pad ? 1 : 0, dt));
  mask = PadAll(c, mask, 4, NhwcPads({0, 0, extra[0], extra[1]}), zero);
  return c.Op("Div", {sum, pool(mask, "VALID")});
}

// A 3-D pool as, for each output depth, the maximum (or the mean) over the
// kernel's depth of 2-D pools of input planes.
Status Pool3d(NodeContext& c, const Value& x, bool max, bool ceil_mode, bool include_pad) {
  FS_ASSIGN_OR_RETURN(Window3 win, ReadWindow3(c, {}, max));
  if (max && (win.d != 1 || win.hw.dilations != std::vector<int64_t>{1, 1})) {
    return c.Unsupported("attribute 'dilations' other than 1 in 3-D");
  }
  const int64_t depth = x.shape.dim(2);
  std::vector<int64_t> hw{x.shape.dim(3), x.shape.dim(4)};
  if (depth < 0) return c.Unsupported("a 3-D input of unknown depth");
  PartialShape inferred = c.OutputShape(0);
  int64_t out_d = inferred.rank_known() && inferred.rank() == 5 ? inferred.dim(2) : -1;
  if (out_d < 0) {
    int64_t span = depth + win.pb + win.pe - win.k;
    out_d = (ceil_mode ? (span + win.s - 1) / win.s : span / win.s) + 1;
  }
  if (out_d < 1) return c.Error("the kernel is deeper than the padded input");
  std::vector<int64_t> out_hw = {inferred.rank_known() && inferred.rank() == 5 ? inferred.dim(3) : -1,
                                 inferred.rank_known() && inferred.rank() == 5 ? inferred.dim(4) : -1};
  std::map<int64_t, Output> pooled;
  std::vector<Output> outs;
  for (int64_t od = 0; od < out_d; ++od) {
    std::optional<Output> acc;
    int64_t count = 0;
    for (int64_t k = 0; k < win.k; ++k) {
      int64_t z = od * win.s + k - win.pb;
      if (z >= depth + win.pe) continue;  // ceil_mode's overhang
      if (z < 0 || z >= depth) {
        if (include_pad) ++count;
        continue;
      }
      ++count;
      if (!pooled.count(z)) {
        Output plane = DepthSliceNhwc(c, x.out, z);
        StatusOr<Output> p = max ? MaxPool2dCore(c, plane, hw, win.hw, ceil_mode, out_hw, x.dtype)
                                 : AvgPool2dCore(c, plane, hw, win.hw, ceil_mode, include_pad,
                                                 out_hw, x.dtype);
        if (!p.ok()) return p.status();
        pooled[z] = *p;
      }
      acc = !acc ? pooled[z] : c.Op(max ? "Maximum" : "Add", {*acc, pooled[z]});
    }
    if (!acc) return c.Unsupported("an output plane that lies wholly in the padding");
    if (!max) acc = c.Op("Div", {*acc, c.Scalar(double(count), x.dtype)});
    outs.push_back(*acc);
  }
  return c.SetOutput(0, StackDepth(c, outs), x.dtype);
}

}  // namespace

Status ConvertMaxPool(NodeContext& c) {
  FS_ASSIGN_OR_RETURN(Value x, c.input(0));
  FS_RETURN_IF_ERROR(NeedFloat(c, x, "X"));
  FS_ASSIGN_OR_RETURN(int64_t ceil_mode, c.Int("ceil_mode", 0));
  FS_ASSIGN_OR_RETURN(int64_t storage_order, c.Int("storage_order", 0));
  (void)storage_order;  // only the Indices output, which is not supported, depends on it
  FS_RETURN_IF_ERROR(NeedRank(c, x, "X"));
  if (x.rank() == 5) return Pool3d(c, x, true, ceil_mode != 0, false);
  FS_ASSIGN_OR_RETURN(Spatial s, ToNhwc(c, x, "X"));
  FS_ASSIGN_OR_RETURN(Window win, ReadWindow(c, x.rank() - 2, {}, true));
  FS_ASSIGN_OR_RETURN(Output y, MaxPool2dCore(c, s.nhwc, s.hw, win, ceil_mode != 0,
                                              InferredHw(c, x.rank()), x.dtype));
  return c.SetOutput(0, FromNhwc(c, y, x.rank()), x.dtype);
}

Status ConvertAveragePool(NodeContext& c) {
  FS_ASSIGN_OR_RETURN(Value x, c.input(0));
  FS_RETURN_IF_ERROR(NeedFloat(c, x, "X"));
  FS_ASSIGN_OR_RETURN(int64_t ceil_mode, c.Int("ceil_mode", 0));
  FS_ASSIGN_OR_RETURN(int64_t include_pad, c.Int("count_include_pad", 0));
  FS_RETURN_IF_ERROR(NeedRank(c, x, "X"));
  if (x.rank() == 5) return Pool3d(c, x, false, ceil_mode != 0, include_pad != 0);
  FS_ASSIGN_OR_RETURN(Spatial s, ToNhwc(c, x, "X"));
  FS_ASSIGN_OR_RETURN(Window win, ReadWindow(c, x.rank() - 2, {}, false));
  FS_ASSIGN_OR_RETURN(Output y, AvgPool2dCore(c, s.nhwc, s.hw, win, ceil_mode != 0,
                                              include_pad != 0, InferredHw(c, x.rank()),
                                              x.dtype));
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
  int64_t training_mode = 0;
  if (c.opset() >= 14) {
    // A model exported in training mode (PyTorch's TrainingMode.TRAINING)
    // is imported for a training job as one exported for inference.
    FS_ASSIGN_OR_RETURN(training_mode, c.Int("training_mode", 0));
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
  if (c.training() && c.IsVariable(mean) && c.IsVariable(var)) {
    // Training form: Flowstate's BatchNorm normalizes over every dimension
    // but the last, with the batch's statistics, and moves the running ones
    // (running = momentum * running + (1 - momentum) * batch, as ONNX and
    // PyTorch do); InferenceGraph switches it to the running ones. Channels
    // (dimension 1) go last around it.
    if (!(momentum >= 0 && momentum <= 1)) return c.Error("momentum must be in [0, 1]");
    std::vector<int64_t> to_last{0}, from_last{0, r - 1};
    for (int i = 2; i < r; ++i) to_last.push_back(i);
    to_last.push_back(1);
    for (int i = 1; i < r - 1; ++i) from_last.push_back(i);
    Output xl = r > 2 ? Transpose(c, x.out, to_last) : x.out;
    std::vector<Output> bn = c.OpN("BatchNorm", {xl, scale.out, bias.out, mean.out, var.out},
                                   {{"epsilon", AttrValue(eps)}, {"momentum", AttrValue(momentum)},
                                    {"is_training", AttrValue(true)}},
                                   5);
    Output y = r > 2 ? Transpose(c, bn[0], from_last) : bn[0];
    // Training mode's optional outputs, the running statistics after the
    // update, computed from the batch's (the Variables are updated in place).
    for (int k = 1; k <= 2; ++k) {
      if (!c.has_output(k)) continue;
      const Value& running = k == 1 ? mean : var;
      Output moved = c.Op("Add", {c.Op("Mul", {c.Op("Identity", {running.out}), c.Scalar(momentum, x.dtype)}),
                                  c.Op("Mul", {bn[k], c.Scalar(1 - momentum, x.dtype)})});
      FS_RETURN_IF_ERROR(c.SetOutput(k, moved, x.dtype));
    }
    return c.SetOutput(0, y, x.dtype, x.shape);
  }
  if (training_mode != 0) {
    // The operator's own training mode, outside a job (ONNX's definition):
    // the batch's mean and (biased) variance normalize; outputs 1 and 2 are
    // the running statistics moved towards them.
    std::vector<int64_t> axes{0};
    for (int i = 2; i < r; ++i) axes.push_back(i);
    Output bm = c.Op("Mean", {x.out, c.Ints64(axes)}, {{"keep_dims", AttrValue(true)}});
    Output d = c.Op("Sub", {x.out, bm});
    Output bv = c.Op("Mean", {c.Op("Square", {d}), c.Ints64(axes)}, {{"keep_dims", AttrValue(true)}});
    Output norm = c.Op("Mul", {d, c.Op("Rsqrt", {c.Op("Add", {bv, c.Scalar(eps, x.dtype)})})});
    Output y = c.Op("Add", {c.Op("Mul", {norm, ChannelParam(c, scale.out, r)}), ChannelParam(c, bias.out, r)});
    FS_RETURN_IF_ERROR(c.SetOutput(0, y, x.dtype, x.shape));
    for (int k = 1; k <= 2; ++k) {
      if (!c.has_output(k)) continue;
      Output batch = c.Op("Reshape", {k == 1 ? bm : bv, c.Ints64({-1})});
      Output moved = c.Op("Add", {c.Op("Mul", {(k == 1 ? mean : var).out, c.Scalar(momentum, x.dtype)}),
                                  c.Op("Mul", {batch, c.Scalar(1 - momentum, x.dtype)})});
      FS_RETURN_IF_ERROR(c.SetOutput(k, moved, x.dtype));
    }
    return Status();
  }
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

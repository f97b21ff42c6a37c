// Internal to devices/cpu: what the convolution, pooling and batch-norm
// kernels share — TensorFlow's window arithmetic, the parsing of the window
// attrs (strides, dilations, ksize, padding, data_format), the geometry of
// one 2-D convolution, and the registration functions that
// RegisterConvKernels() (conv_kernels.cc) calls for the other files.
//
// Window arithmetic, per spatial dimension, as in TensorFlow
// (tensorflow/core/framework/kernel_shape_util.cc):
//   eff_k = (k - 1) * dilation + 1
//   VALID: out = in >= eff_k ? (in - eff_k) / stride + 1 : 0, no padding
//   SAME:  out = ceil(in / stride),
//          pad_total = max((out - 1) * stride + eff_k - in, 0),
//          pad_before = pad_total / 2, pad_after = the rest (the extra
//          cell goes to the bottom/right).
// These agree with Conv2DShape/PoolShape in graph/op_defs/nn_defs.cc.
#ifndef FLOWSTATE_DEVICES_CPU_NN_KERNELS_COMMON_H_
#define FLOWSTATE_DEVICES_CPU_NN_KERNELS_COMMON_H_

#include <algorithm>
#include <cstdint>
#include <string>

#include "devices/kernel_registry.h"
#include "devices/op_kernel.h"
#include "graph/tensor.h"

namespace flowstate::internal {

// One spatial dimension of a window operation.
struct WindowDim {
  int64_t out = 0;
  int64_t pad_before = 0;
  int64_t pad_after = 0;
};

// REQUIRES: in >= 0, k >= 1, stride >= 1, dilation >= 1.
inline WindowDim ComputeWindowDim(int64_t in, int64_t k, int64_t stride, int64_t dilation,
                                  bool same) {
  const int64_t eff = (k - 1) * dilation + 1;
  WindowDim d;
  if (!same) {
    d.out = in >= eff ? (in - eff) / stride + 1 : 0;
    return d;
  }
  d.out = (in + stride - 1) / stride;
  const int64_t total = std::max<int64_t>((d.out - 1) * stride + eff - in, 0);
  d.pad_before = total / 2;
  d.pad_after = total - d.pad_before;
  return d;
}

// The window attrs of a convolution or pooling node, parsed and checked once
// when the kernel is built.
struct WindowAttrs {
  int64_t stride_h = 1, stride_w = 1;
  int64_t dilation_h = 1, dilation_w = 1;  // convolutions only
  int64_t ksize_h = 1, ksize_w = 1;        // pooling only
  bool same = false;                       // padding "SAME" (else "VALID")
};

// Reads strides, dilations, padding and data_format of a Conv2D* node;
// INVALID_ARGUMENT naming the node (also recorded on c) when they are
// malformed.
Status ParseConvAttrs(OpKernelConstruction* c, WindowAttrs* a);
// Reads ksize, strides, padding and data_format of a pooling node.
Status ParsePoolAttrs(OpKernelConstruction* c, WindowAttrs* a);

// "[1, 28, 28, 3]" of a shape, for messages.
inline std::string ShapeString(const Tensor& t) { return t.shape().ToString(); }

// The geometry of one Conv2D: input NHWC [n, h, w, c], filter HWIO
// [kh, kw, c / groups, o], output NHWC [n, oh, ow, o]. With groups > 1
// (TensorFlow's rule: groups = c / the filter's input channels) output
// channel j of group k = j / (o / groups) sees input channels
// [k * c / groups, (k + 1) * c / groups) only; groups = c = o is a
// depthwise convolution.
struct Conv2DGeometry {
  int64_t n = 0, h = 0, w = 0, c = 0;
  int64_t kh = 0, kw = 0, o = 0;
  int64_t oh = 0, ow = 0;
  int64_t stride_h = 1, stride_w = 1, dilation_h = 1, dilation_w = 1;
  int64_t pad_top = 0, pad_left = 0, pad_bottom = 0, pad_right = 0;
  int64_t groups = 1;  // divides c and o

  int64_t input_size() const { return n * h * w * c; }
  int64_t filter_size() const { return kh * kw * (c / groups) * o; }
  int64_t output_size() const { return n * oh * ow * o; }
  // The same convolution over images [0, batch) only.
  Conv2DGeometry WithBatch(int64_t batch) const {
    Conv2DGeometry g = *this;
    g.n = batch;
    return g;
  }
};

// Fills the geometry from the input and filter dimensions (REQUIRES: all
// >= 0, kh, kw >= 1).
inline Conv2DGeometry MakeConv2DGeometry(int64_t n, int64_t h, int64_t w, int64_t c, int64_t kh,
                                         int64_t kw, int64_t o, const WindowAttrs& a,
                                         int64_t groups = 1) {
  Conv2DGeometry g;
  g.n = n, g.h = h, g.w = w, g.c = c, g.kh = kh, g.kw = kw, g.o = o, g.groups = groups;
  g.stride_h = a.stride_h, g.stride_w = a.stride_w;
  g.dilation_h = a.dilation_h, g.dilation_w = a.dilation_w;
  const WindowDim dh = ComputeWindowDim(h, kh, a.stride_h, a.dilation_h, a.same);
  const WindowDim dw = ComputeWindowDim(w, kw, a.stride_w, a.dilation_w, a.same);
  g.oh = dh.out, g.pad_top = dh.pad_before, g.pad_bottom = dh.pad_after;
  g.ow = dw.out, g.pad_left = dw.pad_before, g.pad_right = dw.pad_after;
  return g;
}

// pool_kernels.cc and batch_norm_kernels.cc; called by RegisterConvKernels().
void RegisterPoolKernels(KernelRegistry* r);
void RegisterBatchNormKernels(KernelRegistry* r);

}  // namespace flowstate::internal

#endif  // FLOWSTATE_DEVICES_CPU_NN_KERNELS_COMMON_H_

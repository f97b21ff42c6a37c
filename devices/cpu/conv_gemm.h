// Internal to devices/cpu: Conv2D and its two backprops as im2col + GEMM
// (Eigen's product), for float64 and for float32 when oneDNN is absent or
// declines a convolution. Layouts as in nn_kernels_common.h: input and output
// NHWC, filter HWIO, all contiguous.
//
// The patches of a block of output pixels form a matrix [pixels,
// kh·kw·c] (zeros where the window hangs over the padding) that multiplies
// the filter viewed as [kh·kw·c, o]. Blocks are bounded (kPatchElements), so
// large images need no large buffer. Work is spread over the device's
// intra-op pool:
//   - forward: blocks of output pixels of the whole batch;
//   - backprop input: whole images (their patches overlap in the input);
//   - backprop filter: one partial filter gradient per thread, summed.
// A 1x1 filter with unit strides and no padding skips im2col. Each call
// allocates its scratch from `device`'s allocator; the functions are
// thread-safe.
#ifndef FLOWSTATE_DEVICES_CPU_CONV_GEMM_H_
#define FLOWSTATE_DEVICES_CPU_CONV_GEMM_H_

#include "devices/cpu/nn_kernels_common.h"
#include "devices/device.h"

namespace flowstate::internal {

// y = conv(x, f). REQUIRES: buffers of g's sizes.
template <typename T>
Status Conv2DForwardGemm(Device* device, const Conv2DGeometry& g, const T* x, const T* f, T* y);
// dx = the adjoint of conv(·, f) applied to dy.
template <typename T>
Status Conv2DBackpropInputGemm(Device* device, const Conv2DGeometry& g, const T* f, const T* dy,
                               T* dx);
// df = the adjoint of conv(x, ·) applied to dy.
template <typename T>
Status Conv2DBackpropFilterGemm(Device* device, const Conv2DGeometry& g, const T* x, const T* dy,
                                T* df);

}  // namespace flowstate::internal

#endif  // FLOWSTATE_DEVICES_CPU_CONV_GEMM_H_

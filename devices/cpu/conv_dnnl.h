// Internal to devices/cpu: float32 Conv2D and its two backprops, grouped
// (depthwise) ones included, through oneDNN's convolution primitives (only when built with oneDNN,
// FLOWSTATE_HAVE_ONEDNN). Layouts as in nn_kernels_common.h.
//
// Each convolution kernel owns one DnnlConvCache: the primitives it has
// built, keyed by (direction, geometry of a batch shard). Activations are
// passed to oneDNN in place as NHWC; the filter (or its gradient) in the
// format the primitive prefers, reordered from/to HWIO on each call (the
// filter is small; BENCHMARKS.md "Convolutions" has the measurements that
// chose this).
//
// Threading follows devices/cpu/matmul_kernels.cc: oneDNN's own OpenMP team is
// not used. The batch is split into one shard per thread of the device's
// intra-op pool (Device::ParallelFor); each shard runs a primitive built for
// one thread (the calling thread's OpenMP thread count is set to 1 before a
// primitive is built or run, so the primitive's internal work split matches
// the thread that runs it). Filter-gradient shards write partial gradients
// that are summed.
//
// Thread safety: all methods may be called concurrently (concurrent steps
// share a kernel). The cache is guarded by a mutex; primitives are built
// with a user-managed scratchpad and every execution brings its own
// scratchpad, stream and memory objects, which oneDNN 2.6 documents as safe
// for concurrent execution of one primitive.
#ifndef FLOWSTATE_DEVICES_CPU_CONV_DNNL_H_
#define FLOWSTATE_DEVICES_CPU_CONV_DNNL_H_

#ifdef FLOWSTATE_HAVE_ONEDNN

#include <array>
#include <map>
#include <memory>

#include "devices/cpu/nn_kernels_common.h"
#include "devices/device.h"
#include "graph/mutex.h"

namespace flowstate::internal {

class DnnlConvCache {
 public:
  DnnlConvCache();
  ~DnnlConvCache();
  DnnlConvCache(const DnnlConvCache&) = delete;
  DnnlConvCache& operator=(const DnnlConvCache&) = delete;

  // Each returns true when oneDNN computed the result, false when it has no
  // implementation for the geometry or failed (nothing useful is written;
  // the caller computes the result another way). REQUIRES: g has no zero
  // dimension, and the buffers have g's sizes.
  bool Forward(Device* device, const Conv2DGeometry& g, const float* x, const float* f, float* y);
  bool BackwardData(Device* device, const Conv2DGeometry& g, const float* f, const float* dy,
                    float* dx);
  bool BackwardWeights(Device* device, const Conv2DGeometry& g, const float* x, const float* dy,
                       float* df);

 private:
  enum class Kind { kForward, kBackwardData, kBackwardWeights };
  struct Entry;  // the primitives; oneDNN's types stay out of this header
  using Key = std::array<int64_t, 17>;

  bool Run(Kind kind, Device* device, const Conv2DGeometry& g, const float* src, const float* wei,
           const float* dst, float* out);
  bool RunShard(Kind kind, Device* device, const Conv2DGeometry& g, float* src, float* wei,
                float* dst);
  // The entry for one shard's geometry, built on first use; nullptr when
  // oneDNN cannot do it.
  std::shared_ptr<const Entry> Get(Kind kind, const Conv2DGeometry& g);

  Mutex mu_;
  std::map<Key, std::shared_ptr<const Entry>> entries_ ABSL_GUARDED_BY(mu_);
};

}  // namespace flowstate::internal

#endif  // FLOWSTATE_HAVE_ONEDNN
#endif  // FLOWSTATE_DEVICES_CPU_CONV_DNNL_H_

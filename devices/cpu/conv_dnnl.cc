// oneDNN convolutions (see conv_dnnl.h). Compiled to nothing without
// oneDNN.
#ifdef FLOWSTATE_HAVE_ONEDNN

#include "devices/cpu/conv_dnnl.h"
#include "graph/mutex.h"

#include <omp.h>

#include <algorithm>
#include <atomic>
#include <oneapi/dnnl/dnnl.hpp>
#include <vector>

namespace flowstate::internal {
namespace {

using dnnl::memory;
using Tag = memory::format_tag;

// Below this many multiply-adds a convolution runs as one shard.
constexpr int64_t kMinShardMacs = int64_t{1} << 22;
// A kernel sees few shapes; past this many entries the cache starts over.
constexpr size_t kMaxEntries = 64;
// Below this many input channels the backward-data primitive gets the
// filter as HWIO, which selects oneDNN's GEMM-based implementation: the
// direct JIT kernels vectorize over 16 input channels and waste most lanes
// on, say, a 1-channel image (28x28x1->32 5x5: 10 ms instead of 18 ms).
constexpr int64_t kDirectBackwardDataMinChannels = 16;

dnnl::engine& Engine() {
  static dnnl::engine* engine = new dnnl::engine(dnnl::engine::kind::cpu, 0);
  return *engine;
}

// oneDNN sizes its work split by the calling thread's OpenMP thread count
// when a primitive is built, and runs with it: one thread each.
void UseOneOpenMpThread() {
  if (omp_get_max_threads() != 1) omp_set_num_threads(1);
}

memory::desc ActivationDesc(int64_t n, int64_t c, int64_t h, int64_t w) {
  return memory::desc({n, c, h, w}, memory::data_type::f32, Tag::nhwc);
}

}  // namespace

struct DnnlConvCache::Entry {
  dnnl::primitive conv;
  memory::desc src, wei_user, wei_prim, dst;
  bool reorder_weights = false;
  dnnl::primitive reorder;  // HWIO -> wei_prim (forward, backward data) or back
  memory::desc conv_scratch, reorder_scratch;
  size_t scratch_bytes = 0;  // the larger of the two
};

DnnlConvCache::DnnlConvCache() = default;
DnnlConvCache::~DnnlConvCache() = default;

std::shared_ptr<const DnnlConvCache::Entry> DnnlConvCache::Get(Kind kind,
                                                                const Conv2DGeometry& g) {
  const Key key = {int64_t(kind), g.n,        g.h,        g.w,          g.c,        g.kh,
                   g.kw,          g.o,        g.stride_h, g.stride_w,   g.dilation_h,
                   g.dilation_w,  g.pad_top,  g.pad_left, g.pad_bottom, g.pad_right, g.groups};
  MutexLock l(mu_);
  auto it = entries_.find(key);
  if (it != entries_.end()) return it->second;
  if (entries_.size() >= kMaxEntries) entries_.clear();
  std::shared_ptr<Entry> e;
  try {
    UseOneOpenMpThread();
    dnnl::engine& eng = Engine();
    const memory::desc src = ActivationDesc(g.n, g.c, g.h, g.w);
    const memory::desc dst = ActivationDesc(g.n, g.o, g.oh, g.ow);
    // Grouped: weights [G, O/G, C/G, KH, KW], of which an HWIO filter
    // [KH, KW, C/G, O] is the layout hwigo (output channel g * O/G + j).
    const bool grouped = g.groups > 1;
    const memory::dims wei_dims =
        grouped ? memory::dims{g.groups, g.o / g.groups, g.c / g.groups, g.kh, g.kw}
                : memory::dims{g.o, g.c, g.kh, g.kw};
    const Tag user_tag = grouped ? Tag::hwigo : Tag::hwio;
    const memory::desc wei_user(wei_dims, memory::data_type::f32, user_tag);
    const bool fixed_weights =
        kind == Kind::kBackwardData && g.c / g.groups < kDirectBackwardDataMinChannels && !grouped;
    const memory::desc wei_any(wei_dims, memory::data_type::f32,
                               fixed_weights ? user_tag : Tag::any);
    const memory::dims strides = {g.stride_h, g.stride_w};
    const memory::dims dilates = {g.dilation_h - 1, g.dilation_w - 1};
    const memory::dims pad_l = {g.pad_top, g.pad_left}, pad_r = {g.pad_bottom, g.pad_right};
    dnnl::primitive_attr attr;
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    const auto algo = dnnl::algorithm::convolution_direct;
    dnnl::convolution_forward::desc fwd_desc(dnnl::prop_kind::forward_training, algo, src,
                                             wei_any, dst, strides, dilates, pad_l, pad_r);
    dnnl::convolution_forward::primitive_desc fwd(fwd_desc, attr, eng);
    e = std::make_shared<Entry>();
    e->wei_user = wei_user;
    memory::desc& scratch = e->conv_scratch;
    switch (kind) {
      case Kind::kForward:
        e->conv = dnnl::convolution_forward(fwd);
        e->src = fwd.src_desc(), e->wei_prim = fwd.weights_desc(), e->dst = fwd.dst_desc();
        scratch = fwd.scratchpad_desc();
        break;
      case Kind::kBackwardData: {
        dnnl::convolution_backward_data::desc d(algo, src, wei_any, dst, strides, dilates, pad_l,
                                                pad_r);
        dnnl::convolution_backward_data::primitive_desc pd(d, attr, eng, fwd);
        e->conv = dnnl::convolution_backward_data(pd);
        e->src = pd.diff_src_desc(), e->wei_prim = pd.weights_desc(), e->dst = pd.diff_dst_desc();
        scratch = pd.scratchpad_desc();
        break;
      }
      case Kind::kBackwardWeights: {
        dnnl::convolution_backward_weights::desc d(algo, src, wei_any, dst, strides, dilates,
                                                   pad_l, pad_r);
        dnnl::convolution_backward_weights::primitive_desc pd(d, attr, eng, fwd);
        e->conv = dnnl::convolution_backward_weights(pd);
        e->src = pd.src_desc(), e->wei_prim = pd.diff_weights_desc();
        e->dst = pd.diff_dst_desc();
        scratch = pd.scratchpad_desc();
        break;
      }
    }
    e->scratch_bytes = scratch.get_size();
    if (e->src != src || e->dst != dst) {
      e = nullptr;  // activations must stay in place, NHWC
    } else if (e->wei_prim != wei_user) {
      e->reorder_weights = true;
      const bool to_prim = kind != Kind::kBackwardWeights;
      dnnl::reorder::primitive_desc rpd(eng, to_prim ? wei_user : e->wei_prim, eng,
                                        to_prim ? e->wei_prim : wei_user, attr);
      e->reorder = dnnl::reorder(rpd);
      e->reorder_scratch = rpd.scratchpad_desc();
      e->scratch_bytes = std::max(e->scratch_bytes, e->reorder_scratch.get_size());
    }
  } catch (const dnnl::error&) {
    e = nullptr;
  }
  entries_[key] = e;
  return e;
}

bool DnnlConvCache::RunShard(Kind kind, Device* device, const Conv2DGeometry& g, float* src,
                             float* wei, float* dst) {
  try {
    UseOneOpenMpThread();
    std::shared_ptr<const Entry> e = Get(kind, g);
    if (e == nullptr) return false;
    dnnl::engine& eng = Engine();
    const size_t wei_bytes = e->reorder_weights ? e->wei_prim.get_size() : 0;
    const size_t scratch_at = (wei_bytes + 63) / 64 * 64;
    StatusOr<Tensor> buffer =
        Tensor::Allocate(device->allocator(), DataType::kUInt8,
                         TensorShape({int64_t(std::max<size_t>(scratch_at + e->scratch_bytes, 1))}));
    if (!buffer.ok()) return false;
    uint8_t* bytes = buffer->data<uint8_t>();
    dnnl::stream stream(eng);
    memory scratch_mem(e->conv_scratch, eng, bytes + scratch_at);
    memory src_mem(e->src, eng, src), dst_mem(e->dst, eng, dst);
    memory wei_user(e->wei_user, eng, wei);
    memory wei_mem = e->reorder_weights ? memory(e->wei_prim, eng, bytes) : wei_user;
    memory reorder_scratch =
        e->reorder_weights ? memory(e->reorder_scratch, eng, bytes + scratch_at) : scratch_mem;
    if (e->reorder_weights && kind != Kind::kBackwardWeights) {
      e->reorder.execute(stream, {{DNNL_ARG_FROM, wei_user},
                                  {DNNL_ARG_TO, wei_mem},
                                  {DNNL_ARG_SCRATCHPAD, reorder_scratch}});
    }
    switch (kind) {
      case Kind::kForward:
        e->conv.execute(stream, {{DNNL_ARG_SRC, src_mem},
                                 {DNNL_ARG_WEIGHTS, wei_mem},
                                 {DNNL_ARG_DST, dst_mem},
                                 {DNNL_ARG_SCRATCHPAD, scratch_mem}});
        break;
      case Kind::kBackwardData:
        e->conv.execute(stream, {{DNNL_ARG_DIFF_SRC, src_mem},
                                 {DNNL_ARG_WEIGHTS, wei_mem},
                                 {DNNL_ARG_DIFF_DST, dst_mem},
                                 {DNNL_ARG_SCRATCHPAD, scratch_mem}});
        break;
      case Kind::kBackwardWeights:
        e->conv.execute(stream, {{DNNL_ARG_SRC, src_mem},
                                 {DNNL_ARG_DIFF_WEIGHTS, wei_mem},
                                 {DNNL_ARG_DIFF_DST, dst_mem},
                                 {DNNL_ARG_SCRATCHPAD, scratch_mem}});
        if (e->reorder_weights) {
          e->reorder.execute(stream, {{DNNL_ARG_FROM, wei_mem},
                                      {DNNL_ARG_TO, wei_user},
                                      {DNNL_ARG_SCRATCHPAD, reorder_scratch}});
        }
        break;
    }
    stream.wait();
    return true;
  } catch (const dnnl::error&) {
    return false;
  }
}

bool DnnlConvCache::Run(Kind kind, Device* device, const Conv2DGeometry& g, const float* src,
                        const float* wei, const float* dst, float* out) {
  const int64_t macs = g.n * g.oh * g.ow * g.kh * g.kw * (g.c / g.groups) * g.o;
  const int64_t shards =
      std::max<int64_t>(1, std::min({int64_t(device->num_threads()), g.n, macs / kMinShardMacs}));
  // Filter-gradient shards 1.. write partial gradients here.
  std::vector<float> partial;
  if (kind == Kind::kBackwardWeights && shards > 1) {
    partial.resize(size_t((shards - 1) * g.filter_size()));
  }
  std::atomic<bool> ok{true};
  const int64_t in_image = g.h * g.w * g.c, out_image = g.oh * g.ow * g.o;
  device->ParallelFor(shards, std::max<int64_t>(1, macs / shards / 16), [&](int64_t s0,
                                                                            int64_t s1) {
    for (int64_t s = s0; s < s1 && ok.load(std::memory_order_relaxed); ++s) {
      const int64_t n0 = g.n * s / shards, n1 = g.n * (s + 1) / shards;
      const Conv2DGeometry sg = g.WithBatch(n1 - n0);
      // oneDNN takes non-const handles; it writes only the output.
      float* s_src = kind == Kind::kBackwardData ? out + n0 * in_image
                                                 : const_cast<float*>(src) + n0 * in_image;
      float* s_dst = kind == Kind::kForward ? out + n0 * out_image
                                            : const_cast<float*>(dst) + n0 * out_image;
      float* s_wei = kind != Kind::kBackwardWeights ? const_cast<float*>(wei)
                     : s == 0                        ? out
                                                     : partial.data() + (s - 1) * g.filter_size();
      if (!RunShard(kind, device, sg, s_src, s_wei, s_dst)) ok = false;
    }
  });
  if (!ok) return false;
  for (int64_t s = 1; s < shards && kind == Kind::kBackwardWeights; ++s) {
    const float* p = partial.data() + (s - 1) * g.filter_size();
    for (int64_t i = 0; i < g.filter_size(); ++i) out[i] += p[i];
  }
  return true;
}

bool DnnlConvCache::Forward(Device* device, const Conv2DGeometry& g, const float* x,
                            const float* f, float* y) {
  return Run(Kind::kForward, device, g, x, f, nullptr, y);
}

bool DnnlConvCache::BackwardData(Device* device, const Conv2DGeometry& g, const float* f,
                                 const float* dy, float* dx) {
  return Run(Kind::kBackwardData, device, g, nullptr, f, dy, dx);
}

bool DnnlConvCache::BackwardWeights(Device* device, const Conv2DGeometry& g, const float* x,
                                    const float* dy, float* df) {
  return Run(Kind::kBackwardWeights, device, g, x, nullptr, dy, df);
}

}  // namespace flowstate::internal

#endif  // FLOWSTATE_HAVE_ONEDNN

// Conv2D, Conv2DBackpropInput and Conv2DBackpropFilter on the CPU, float32
// and float64; NHWC activations, HWIO filters, TensorFlow's SAME/VALID
// arithmetic (nn_kernels_common.h). Grouped convolutions by TensorFlow's
// rule: a filter of fewer input channels than the input has makes
// groups = input channels / filter input channels (depthwise: one each).
//
// float32 runs through oneDNN's convolution primitives when built with it
// (conv_dnnl.h: cached per shape, the batch split over the device's
// threads; grouped ones as oneDNN's grouped primitives); float64, float32
// without oneDNN, and any geometry oneDNN declines run as im2col + Eigen
// GEMM (conv_gemm.h), a grouped one group by group on copies of its
// channels. The kernels validate
// every input themselves (the shape function cannot see fed values) and
// name the node in their errors.
//
// RegisterConvKernels() also registers the pooling (pool_kernels.cc) and batch
// normalization (batch_norm_kernels.cc) kernels.
#include <algorithm>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "devices/cpu/conv_dnnl.h"
#include "devices/cpu/conv_gemm.h"
#include "devices/cpu/nn_kernels_common.h"
#include "devices/cpu/register_kernels.h"

namespace flowstate::internal {
namespace {

std::string Dims(const std::vector<int64_t>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + "]";
}

// Reads a [1, h, w, 1] list attr into (h, w).
Status SpatialPair(OpKernelConstruction* c, const char* attr, int64_t* h, int64_t* w) {
  std::vector<int64_t> v;
  FS_RETURN_IF_ERROR(c->GetAttr(attr, &v));
  if (v.size() != 4 || v[0] != 1 || v[3] != 1 || v[1] < 1 || v[2] < 1) {
    return InvalidArgument(std::string(attr) + " must be [1, h, w, 1] with h, w >= 1, got " +
                               Dims(v),
                           c->def().name);
  }
  *h = v[1];
  *w = v[2];
  return Status();
}

Status PaddingAndFormat(OpKernelConstruction* c, WindowAttrs* a) {
  std::string padding, format;
  FS_RETURN_IF_ERROR(c->GetAttr("padding", &padding));
  FS_RETURN_IF_ERROR(c->GetAttr("data_format", &format));
  if (padding != "SAME" && padding != "VALID") {
    return InvalidArgument("padding must be \"SAME\" or \"VALID\", got \"" + padding + "\"",
                           c->def().name);
  }
  if (format != "NHWC") {
    return InvalidArgument("only data_format NHWC is supported, got \"" + format + "\"",
                           c->def().name);
  }
  a->same = padding == "SAME";
  return Status();
}

}  // namespace

Status ParseConvAttrs(OpKernelConstruction* c, WindowAttrs* a) {
  Status s = SpatialPair(c, "strides", &a->stride_h, &a->stride_w);
  if (s.ok()) s = SpatialPair(c, "dilations", &a->dilation_h, &a->dilation_w);
  if (s.ok()) s = PaddingAndFormat(c, a);
  if (!s.ok()) c->SetStatus(s);
  return s;
}

Status ParsePoolAttrs(OpKernelConstruction* c, WindowAttrs* a) {
  Status s = SpatialPair(c, "ksize", &a->ksize_h, &a->ksize_w);
  if (s.ok()) s = SpatialPair(c, "strides", &a->stride_h, &a->stride_w);
  if (s.ok()) s = PaddingAndFormat(c, a);
  if (!s.ok()) c->SetStatus(s);
  return s;
}

namespace {

// A 4-element int32 vector input (input_sizes, filter_sizes) of
// non-negative entries.
Status ReadSizes(const Tensor& t, const char* what, const std::string& node,
                 std::vector<int64_t>* out) {
  if (t.dtype() != DataType::kInt32 || t.rank() != 1 || t.dim(0) != 4) {
    return InvalidArgument(std::string(what) + " must be an int32 vector of 4 entries, got " +
                               std::string(DataTypeName(t.dtype())) + ShapeString(t),
                           node);
  }
  out->assign(4, 0);
  for (int i = 0; i < 4; ++i) {
    (*out)[i] = t.data<int32_t>()[i];
    if ((*out)[i] < 0) {
      return InvalidArgument(std::string(what) + " must not be negative, got " + Dims(*out),
                             node);
    }
  }
  return Status();
}

Status CheckFilterSpatial(int64_t kh, int64_t kw, const std::string& node) {
  if (kh < 1 || kw < 1) {
    return InvalidArgument("the filter's height and width must be >= 1, got " +
                               std::to_string(kh) + "x" + std::to_string(kw),
                           node);
  }
  return Status();
}

// The groups of a convolution whose input has `c` channels and whose filter
// has `fi` input and `fo` output channels: c / fi. `input` and `filter`
// name the two in messages.
StatusOr<int64_t> ConvGroups(int64_t c, int64_t fi, int64_t fo, const std::string& input,
                             const std::string& filter, const std::string& node) {
  if (fi < 1 || c % fi != 0) {
    return InvalidArgument(input + " has " + std::to_string(c) + " channels but " + filter +
                               " expects " + std::to_string(fi) +
                               (fi > 0 ? " (or, grouped, a multiple of it)" : ""),
                           node);
  }
  const int64_t groups = c / fi;
  if (groups > 1 && fo % groups != 0) {
    return InvalidArgument(filter + " has " + std::to_string(fo) + " output channels, not a " +
                               "multiple of the " + std::to_string(groups) + " groups (" + input +
                               " channels " + std::to_string(c) + " / " + std::to_string(fi) + ")",
                           node);
  }
  return groups;
}

// Channels [c0, c0 + n) of each of `rows` rows of `width` into dst (rows x
// n), and back.
template <typename T>
void TakeChannels(const T* src, int64_t rows, int64_t width, int64_t c0, int64_t n, T* dst) {
  for (int64_t r = 0; r < rows; ++r) std::copy_n(src + r * width + c0, n, dst + r * n);
}
template <typename T>
void PutChannels(const T* src, int64_t rows, int64_t width, int64_t c0, int64_t n, T* dst) {
  for (int64_t r = 0; r < rows; ++r) std::copy_n(src + r * n, n, dst + r * width + c0);
}

enum class ConvPart { kForward, kBackpropInput, kBackpropFilter };

// The GEMM path of a grouped convolution, group by group: each group's
// channels of the two inputs copied out, convolved as an ungrouped one, its
// result copied into its channels of the output. Inputs and output as the
// three kernels take them: (x, f) -> y, (f, dy) -> dx, (x, dy) -> df.
template <typename T>
Status GroupedGemm(ConvPart part, Device* device, const Conv2DGeometry& g, const T* a,
                   const T* b, T* out) {
  const int64_t cg = g.c / g.groups, og = g.o / g.groups;
  Conv2DGeometry sub = g;
  sub.c = cg, sub.o = og, sub.groups = 1;
  const int64_t x_rows = g.n * g.h * g.w, f_rows = g.kh * g.kw * cg, y_rows = g.n * g.oh * g.ow;
  std::vector<T> xk(size_t(x_rows * cg)), fk(size_t(f_rows * og)), yk(size_t(y_rows * og));
  for (int64_t k = 0; k < g.groups; ++k) {
    switch (part) {
      case ConvPart::kForward:
        TakeChannels(a, x_rows, g.c, k * cg, cg, xk.data());
        TakeChannels(b, f_rows, g.o, k * og, og, fk.data());
        FS_RETURN_IF_ERROR(Conv2DForwardGemm<T>(device, sub, xk.data(), fk.data(), yk.data()));
        PutChannels(yk.data(), y_rows, g.o, k * og, og, out);
        break;
      case ConvPart::kBackpropInput:
        TakeChannels(a, f_rows, g.o, k * og, og, fk.data());
        TakeChannels(b, y_rows, g.o, k * og, og, yk.data());
        FS_RETURN_IF_ERROR(Conv2DBackpropInputGemm<T>(device, sub, fk.data(), yk.data(), xk.data()));
        PutChannels(xk.data(), x_rows, g.c, k * cg, cg, out);
        break;
      case ConvPart::kBackpropFilter:
        TakeChannels(a, x_rows, g.c, k * cg, cg, xk.data());
        TakeChannels(b, y_rows, g.o, k * og, og, yk.data());
        FS_RETURN_IF_ERROR(Conv2DBackpropFilterGemm<T>(device, sub, xk.data(), yk.data(), fk.data()));
        PutChannels(fk.data(), f_rows, g.o, k * og, og, out);
        break;
    }
  }
  return Status();
}

// out_backprop must have the shape Conv2D would give.
Status CheckOutBackprop(const Tensor& dy, const Conv2DGeometry& g, const std::string& node) {
  const TensorShape want({g.n, g.oh, g.ow, g.o});
  if (dy.shape() != want) {
    return InvalidArgument("out_backprop must have the convolution's output shape " +
                               want.ToString() + ", got " + ShapeString(dy),
                           node);
  }
  return Status();
}

// The kernels' shared state: the parsed attrs and, for float32 with oneDNN,
// the primitive cache.
template <typename T>
class ConvKernelBase : public OpKernel {
 public:
  explicit ConvKernelBase(OpKernelConstruction* c) : OpKernel(c) {
    if (!ParseConvAttrs(c, &attrs_).ok()) return;
  }

 protected:
#ifdef FLOWSTATE_HAVE_ONEDNN
  static constexpr bool kUseDnnl = std::is_same_v<T, float>;
  DnnlConvCache dnnl_;
#else
  static constexpr bool kUseDnnl = false;
#endif
  WindowAttrs attrs_;
};

template <typename T>
class Conv2DOp final : public ConvKernelBase<T> {
 public:
  using ConvKernelBase<T>::ConvKernelBase;

  void Compute(OpKernelContext* ctx) override {
    const std::string& node = this->name();
    const Tensor& x = ctx->input(0);
    const Tensor& f = ctx->input(1);
    FS_OP_REQUIRES(ctx, x.rank() == 4,
                   InvalidArgument("input must be NHWC (rank 4), got " + ShapeString(x), node));
    FS_OP_REQUIRES(ctx, f.rank() == 4,
                   InvalidArgument("filter must be HWIO (rank 4), got " + ShapeString(f), node));
    StatusOr<int64_t> groups = ConvGroups(x.dim(3), f.dim(2), f.dim(3), "input", "the filter", node);
    FS_OP_REQUIRES_OK(ctx, groups.status());
    FS_OP_REQUIRES_OK(ctx, CheckFilterSpatial(f.dim(0), f.dim(1), node));
    const Conv2DGeometry g = MakeConv2DGeometry(x.dim(0), x.dim(1), x.dim(2), x.dim(3), f.dim(0),
                                                f.dim(1), f.dim(3), this->attrs_, *groups);
    Tensor* y = nullptr;
    FS_OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({g.n, g.oh, g.ow, g.o}), &y));
    if (g.output_size() == 0) return;
    const T* xd = x.data<T>();
    const T* fd = f.data<T>();
    T* yd = y->data<T>();
#ifdef FLOWSTATE_HAVE_ONEDNN
    if constexpr (ConvKernelBase<T>::kUseDnnl) {
      if (g.input_size() > 0 && this->dnnl_.Forward(ctx->device(), g, xd, fd, yd)) return;
    }
#endif
    if (g.groups > 1) {
      FS_OP_REQUIRES_OK(ctx, GroupedGemm<T>(ConvPart::kForward, ctx->device(), g, xd, fd, yd));
      return;
    }
    FS_OP_REQUIRES_OK(ctx, Conv2DForwardGemm<T>(ctx->device(), g, xd, fd, yd));
  }
};

template <typename T>
class Conv2DBackpropInputOp final : public ConvKernelBase<T> {
 public:
  using ConvKernelBase<T>::ConvKernelBase;

  void Compute(OpKernelContext* ctx) override {
    const std::string& node = this->name();
    const Tensor& f = ctx->input(1);
    const Tensor& dy = ctx->input(2);
    std::vector<int64_t> in;
    FS_OP_REQUIRES_OK(ctx, ReadSizes(ctx->input(0), "input_sizes", node, &in));
    FS_OP_REQUIRES(ctx, f.rank() == 4,
                   InvalidArgument("filter must be HWIO (rank 4), got " + ShapeString(f), node));
    FS_OP_REQUIRES(ctx, dy.rank() == 4,
                   InvalidArgument("out_backprop must be NHWC (rank 4), got " + ShapeString(dy),
                                   node));
    StatusOr<int64_t> groups =
        ConvGroups(in[3], f.dim(2), f.dim(3), "input_sizes " + Dims(in), "the filter", node);
    FS_OP_REQUIRES_OK(ctx, groups.status());
    FS_OP_REQUIRES_OK(ctx, CheckFilterSpatial(f.dim(0), f.dim(1), node));
    const Conv2DGeometry g = MakeConv2DGeometry(in[0], in[1], in[2], in[3], f.dim(0), f.dim(1),
                                                f.dim(3), this->attrs_, *groups);
    FS_OP_REQUIRES_OK(ctx, CheckOutBackprop(dy, g, node));
    Tensor* dx = nullptr;
    FS_OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({in[0], in[1], in[2], in[3]}), &dx));
    if (g.input_size() == 0) return;
    const T* fd = f.data<T>();
    const T* dyd = dy.data<T>();
    T* dxd = dx->data<T>();
#ifdef FLOWSTATE_HAVE_ONEDNN
    if constexpr (ConvKernelBase<T>::kUseDnnl) {
      if (g.output_size() > 0 && this->dnnl_.BackwardData(ctx->device(), g, fd, dyd, dxd)) {
        return;
      }
    }
#endif
    if (g.groups > 1) {
      FS_OP_REQUIRES_OK(ctx, GroupedGemm<T>(ConvPart::kBackpropInput, ctx->device(), g, fd, dyd, dxd));
      return;
    }
    FS_OP_REQUIRES_OK(ctx, Conv2DBackpropInputGemm<T>(ctx->device(), g, fd, dyd, dxd));
  }
};

template <typename T>
class Conv2DBackpropFilterOp final : public ConvKernelBase<T> {
 public:
  using ConvKernelBase<T>::ConvKernelBase;

  void Compute(OpKernelContext* ctx) override {
    const std::string& node = this->name();
    const Tensor& x = ctx->input(0);
    const Tensor& dy = ctx->input(2);
    std::vector<int64_t> fs;
    FS_OP_REQUIRES_OK(ctx, ReadSizes(ctx->input(1), "filter_sizes", node, &fs));
    FS_OP_REQUIRES(ctx, x.rank() == 4,
                   InvalidArgument("input must be NHWC (rank 4), got " + ShapeString(x), node));
    FS_OP_REQUIRES(ctx, dy.rank() == 4,
                   InvalidArgument("out_backprop must be NHWC (rank 4), got " + ShapeString(dy),
                                   node));
    StatusOr<int64_t> groups =
        ConvGroups(x.dim(3), fs[2], fs[3], "input", "filter_sizes " + Dims(fs), node);
    FS_OP_REQUIRES_OK(ctx, groups.status());
    FS_OP_REQUIRES_OK(ctx, CheckFilterSpatial(fs[0], fs[1], node));
    const Conv2DGeometry g = MakeConv2DGeometry(x.dim(0), x.dim(1), x.dim(2), x.dim(3), fs[0],
                                                fs[1], fs[3], this->attrs_, *groups);
    FS_OP_REQUIRES_OK(ctx, CheckOutBackprop(dy, g, node));
    Tensor* df = nullptr;
    FS_OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({fs[0], fs[1], fs[2], fs[3]}), &df));
    if (g.filter_size() == 0) return;
    const T* xd = x.data<T>();
    const T* dyd = dy.data<T>();
    T* dfd = df->data<T>();
#ifdef FLOWSTATE_HAVE_ONEDNN
    if constexpr (ConvKernelBase<T>::kUseDnnl) {
      if (g.output_size() > 0 && this->dnnl_.BackwardWeights(ctx->device(), g, xd, dyd, dfd)) {
        return;
      }
    }
#endif
    if (g.groups > 1) {
      FS_OP_REQUIRES_OK(ctx, GroupedGemm<T>(ConvPart::kBackpropFilter, ctx->device(), g, xd, dyd, dfd));
      return;
    }
    FS_OP_REQUIRES_OK(ctx, Conv2DBackpropFilterGemm<T>(ctx->device(), g, xd, dyd, dfd));
  }
};

template <typename T>
void RegisterForType(KernelRegistry* r) {
  const DataType t = kDataTypeOf<T>;
  MustRegister(r, KernelDef("Conv2D").TypeConstraint("T", t), MakeKernel<Conv2DOp<T>>);
  MustRegister(r, KernelDef("Conv2DBackpropInput").TypeConstraint("T", t),
               MakeKernel<Conv2DBackpropInputOp<T>>);
  MustRegister(r, KernelDef("Conv2DBackpropFilter").TypeConstraint("T", t),
               MakeKernel<Conv2DBackpropFilterOp<T>>);
}

}  // namespace

void RegisterConvKernels(KernelRegistry* r) {
  RegisterForType<float>(r);
  RegisterForType<double>(r);
  RegisterPoolKernels(r);
  RegisterBatchNormKernels(r);
}

}  // namespace flowstate::internal

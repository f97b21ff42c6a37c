// The element-wise kernel family: RegisterCwiseKernels registers the unary
// (cwise_unary_kernels.cc), binary (cwise_binary_kernels.cc) and Cast
// (cwise_cast_kernels.cc) kernels, and this file's Select, AddN, ZerosLike and
// OnesLike.
//
// - Select(condition, t, e): condition ? t : e with all three broadcast
//   together (TensorFlow's SelectV2 semantics).
// - AddN: the sum of N same-shape tensors, written into the buffer of one of
//   them when no one else holds it; integers wrap.
// - ZerosLike/OnesLike: every dtype; they reuse the input's buffer when they
//   can.
#include <algorithm>
#include <cstring>
#include <vector>

#include "devices/cpu/cwise_kernels_common.h"

namespace flowstate::internal {
namespace {

template <bool SC, bool ST, bool SE, typename T>
inline void SelectRun(const bool* c, const T* t, const T* e, T* o, int64_t n) {
  if constexpr (!SC) {
    // One condition for the whole run: a copy of one side.
    const T* src = *c ? t : e;
    const bool contiguous = *c ? ST : SE;
    if (contiguous) {
      for (int64_t i = 0; i < n; ++i) o[i] = src[i];
    } else {
      const T v = *src;
      for (int64_t i = 0; i < n; ++i) o[i] = v;
    }
  } else {
    const T tv = *t, ev = *e;  // used only where the side repeats
    for (int64_t i = 0; i < n; ++i) o[i] = c[i] ? (ST ? t[i] : tv) : (SE ? e[i] : ev);
  }
}

template <typename T>
class SelectOp final : public OpKernel {
 public:
  using OpKernel::OpKernel;

  void Compute(OpKernelContext* ctx) override {
    const Tensor& cond = ctx->input(0);
    const Tensor& t = ctx->input(1);
    const Tensor& e = ctx->input(2);
    BCast bc({cond.shape(), t.shape(), e.shape()});
    FS_OP_REQUIRES(ctx, bc.ok(), bc.ErrorStatus("Select: condition, t and e", name()));
    const bool* c = cond.data<bool>();
    const T* tp = t.data<T>();
    const T* ep = e.data<T>();
    Tensor* out = nullptr;
    FS_OP_REQUIRES_OK(ctx,
                      ctx->forward_input_or_allocate_output({1, 2, 0}, 0, bc.output_shape(), &out));
    if (bc.output_size() == 0) return;
    T* o = out->data<T>();
    auto go = [&]<bool SC, bool ST, bool SE>() {
      cwise::Shard(ctx, bc.output_size(), 2, [&](int64_t begin, int64_t end) {
        bc.ForEachRun(begin, end, [&](int64_t oo, const int64_t* io, int64_t n) {
          SelectRun<SC, ST, SE>(c + io[0], tp + io[1], ep + io[2], o + oo, n);
        });
      });
    };
    switch (bc.inner_contiguous_mask()) {
      case 7: go.template operator()<true, true, true>(); break;
      case 6: go.template operator()<false, true, true>(); break;
      case 5: go.template operator()<true, false, true>(); break;
      case 4: go.template operator()<false, false, true>(); break;
      case 3: go.template operator()<true, true, false>(); break;
      case 2: go.template operator()<false, true, false>(); break;
      case 1: go.template operator()<true, false, false>(); break;
      default: go.template operator()<false, false, false>(); break;
    }
  }
};

template <typename T>
inline T AddValues(T a, T b) {
  if constexpr (std::is_integral_v<T>) return cwise::WrapAdd(a, b);
  else return a + b;
}

template <typename T>
class AddNOp final : public OpKernel {
 public:
  using OpKernel::OpKernel;

  void Compute(OpKernelContext* ctx) override {
    const int n = ctx->num_inputs();
    const TensorShape shape = ctx->input(0).shape();
    for (int i = 1; i < n; ++i) {
      FS_OP_REQUIRES(ctx, ctx->input(i).shape() == shape,
                     InvalidArgument("AddN: inputs must have the same shape, but input 0 is " +
                                         shape.ToString() + " and input " + std::to_string(i) +
                                         " is " + ctx->input(i).shape().ToString(),
                                     name()));
    }
    if (n == 1) {
      ctx->forward_input(0, 0);
      return;
    }
    std::vector<const T*> src(n);
    int reuse = -1;  // an input nobody else holds: the sum goes into it
    for (int i = 0; i < n; ++i) {
      src[i] = ctx->input(i).template data<T>();
      if (reuse < 0 && ctx->input_ref(i) == nullptr && ctx->input(i).RefCountIsOne()) reuse = i;
    }
    Tensor* out = nullptr;
    if (reuse >= 0) {
      FS_OP_REQUIRES_OK(ctx, ctx->forward_input_or_allocate_output({reuse}, 0, shape, &out));
      // Read the reused input first: it is overwritten element by element.
      std::swap(src[0], src[reuse]);
    } else {
      FS_OP_REQUIRES_OK(ctx, ctx->allocate_output(0, shape, &out));
    }
    T* o = out->template data<T>();
    cwise::Shard(ctx, shape.num_elements(), n, [&](int64_t begin, int64_t end) {
      // Cache-sized blocks: each input is streamed once, the output stays hot.
      constexpr int64_t kBlock = 2048;
      for (int64_t s = begin; s < end; s += kBlock) {
        const int64_t m = std::min(kBlock, end - s);
        T* os = o + s;
        const T* a = src[0] + s;
        const T* b = src[1] + s;
        for (int64_t i = 0; i < m; ++i) os[i] = AddValues(a[i], b[i]);
        for (int k = 2; k < n; ++k) {
          const T* c = src[k] + s;
          for (int64_t i = 0; i < m; ++i) os[i] = AddValues(os[i], c[i]);
        }
      }
    });
  }
};

// Fills the output (the input's buffer when possible) with 0 or 1.
template <typename T, bool kOne>
class FillLikeOp final : public OpKernel {
 public:
  using OpKernel::OpKernel;

  void Compute(OpKernelContext* ctx) override {
    const TensorShape shape = ctx->input(0).shape();
    Tensor* out = nullptr;
    FS_OP_REQUIRES_OK(ctx, ctx->forward_input_or_allocate_output({0}, 0, shape, &out));
    if constexpr (!kOne) {
      if (out->TotalBytes() > 0) std::memset(out->raw_data(), 0, out->TotalBytes());
    } else {
      T one;
      if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>) one = T(1.0f);
      else one = T(1);
      T* o = out->template data<T>();
      std::fill(o, o + shape.num_elements(), one);
    }
  }
};

}  // namespace

void RegisterCwiseKernels(KernelRegistry* r) {
  RegisterCwiseUnaryKernels(r);
  RegisterCwiseBinaryKernels(r);
  RegisterCastKernels(r);

  cwise::ForEachType(cwise::Types<float, double, int32_t, int64_t, uint8_t, bool>{},
                     [&]<typename T>() {
                       MustRegister(r, KernelDef("Select").TypeConstraint("T", kDataTypeOf<T>),
                                    MakeKernel<SelectOp<T>>);
                     });
  cwise::ForEachType(cwise::NumericTypes{}, [&]<typename T>() {
    MustRegister(r, KernelDef("AddN").TypeConstraint("T", kDataTypeOf<T>),
                 MakeKernel<AddNOp<T>>);
  });
  cwise::ForEachType(cwise::AllTypes{}, [&]<typename T>() {
    MustRegister(r, KernelDef("ZerosLike").TypeConstraint("T", kDataTypeOf<T>),
                 MakeKernel<FillLikeOp<T, false>>);
    MustRegister(r, KernelDef("OnesLike").TypeConstraint("T", kDataTypeOf<T>),
                 MakeKernel<FillLikeOp<T, true>>);
  });
}

}  // namespace flowstate::internal

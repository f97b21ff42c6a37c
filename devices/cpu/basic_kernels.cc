// Const, Placeholder, Identity, StopGradient, NoOp: kernels that move no
// data. All are cheap, so the executor runs them inline. CheckNumerics also
// forwards its input, after one read of it.
#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "devices/cpu/register_kernels.h"

namespace flowstate::internal {
namespace {

class ConstOp final : public OpKernel {
 public:
  explicit ConstOp(OpKernelConstruction* c) : OpKernel(c) { (void)c->GetAttr("value", &value_); }
  // Every step shares the attr's buffer; consumers never write into it
  // because its reference count is never one.
  void Compute(OpKernelContext* ctx) override { ctx->set_output(0, value_); }
  bool IsExpensive() const override { return false; }

 private:
  Tensor value_;
};

class PlaceholderOp final : public OpKernel {
 public:
  using OpKernel::OpKernel;
  void Compute(OpKernelContext* ctx) override {
    ctx->SetStatus(InvalidArgument("placeholder '" + name() + "' must be fed a value", name()));
  }
  bool IsExpensive() const override { return false; }
};

class IdentityOp final : public OpKernel {
 public:
  using OpKernel::OpKernel;
  void Compute(OpKernelContext* ctx) override { ctx->forward_input(0, 0); }
  bool IsExpensive() const override { return false; }
};

// Whether no element of p[0, n) is NaN or Inf: one branch-free pass (NaN
// and Inf both fail |x| <= max), in blocks of 8 with a mask per lane so
// that GCC vectorizes it at -O2 (the plain loop's bool reduction ran
// scalar).
template <typename T>
bool AllFinite(const T* p, int64_t n) {
  constexpr T kMax = std::numeric_limits<T>::max();
  using Mask = std::conditional_t<sizeof(T) == 4, int32_t, int64_t>;
  Mask bad[8] = {};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    for (int k = 0; k < 8; ++k) bad[k] |= std::abs(p[i + k]) <= kMax ? Mask(0) : Mask(1);
  }
  Mask any = 0;
  for (int k = 0; k < 8; ++k) any |= bad[k];
  for (; i < n; ++i) any |= std::abs(p[i]) <= kMax ? Mask(0) : Mask(1);
  return any == 0;
}

template <typename T>
class CheckNumericsOp final : public OpKernel {
 public:
  explicit CheckNumericsOp(OpKernelConstruction* c) : OpKernel(c) { (void)c->GetAttr("message", &message_); }
  void Compute(OpKernelContext* ctx) override {
    const Tensor& x = ctx->input(0);
    const T* p = x.data<T>();
    const int64_t n = x.num_elements();
    if (!AllFinite(p, n)) {
      bool nan = false, inf = false;
      for (int64_t i = 0; i < n; ++i) {
        nan |= std::isnan(p[i]);
        inf |= std::isinf(p[i]);
      }
      const char* what = nan && inf ? "has NaN and Inf values" : nan ? "is NaN" : "is Inf";
      if (n > 1 && !(nan && inf)) what = nan ? "has NaN values" : "has Inf values";
      ctx->SetStatus(InvalidArgument(message_ + " " + what, name()));
      return;
    }
    ctx->forward_input(0, 0);
  }
  // One streaming read, about a memcpy's cost: inline, not worth a hand-off
  // to the inter-op pool.
  bool IsExpensive() const override { return false; }

 private:
  std::string message_;
};

class NoOpKernel final : public OpKernel {
 public:
  using OpKernel::OpKernel;
  void Compute(OpKernelContext* ctx) override {}
  bool IsExpensive() const override { return false; }
};

}  // namespace

void RegisterBasicKernels(KernelRegistry* r) {
  for (DataType t : AllDataTypes()) {
    MustRegister(r, KernelDef("Const").TypeConstraint("dtype", t), MakeKernel<ConstOp>);
    MustRegister(r, KernelDef("Placeholder").TypeConstraint("dtype", t), MakeKernel<PlaceholderOp>);
    MustRegister(r, KernelDef("Identity").TypeConstraint("T", t), MakeKernel<IdentityOp>);
    MustRegister(r, KernelDef("StopGradient").TypeConstraint("T", t), MakeKernel<IdentityOp>);
  }
  MustRegister(r, KernelDef("NoOp"), MakeKernel<NoOpKernel>);
  MustRegister(r, KernelDef("CheckNumerics").TypeConstraint("T", DataType::kFloat32),
               MakeKernel<CheckNumericsOp<float>>);
  MustRegister(r, KernelDef("CheckNumerics").TypeConstraint("T", DataType::kFloat64),
               MakeKernel<CheckNumericsOp<double>>);
}

}  // namespace flowstate::internal

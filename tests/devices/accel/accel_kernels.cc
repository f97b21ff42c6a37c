// The ACCEL device's kernels: a handful of float32 ops written against its
// scrambled memory (LoadFloats/StoreFloats), plus two with host-memory
// arguments: Reshape reads its `shape` on the host, Shape writes its output
// there. Every kernel first checks that each input is in the memory its
// registration says, so a copy the runtime skipped fails the step with an
// error naming the node.
#include <cstdint>
#include <vector>

#include "tests/devices/accel/accel_device.h"

namespace flowstate::testing {
namespace {

AccelDevice* Accel(OpKernelContext* ctx) { return static_cast<AccelDevice*>(ctx->device()); }

// FAILED_PRECONDITION unless every input is in the memory the kernel
// declared for it.
Status CheckInputMemory(OpKernelContext* ctx) {
  AccelDevice* d = Accel(ctx);
  for (int i = 0; i < ctx->num_inputs(); ++i) {
    const bool on_device = d->Holds(ctx->input(i));
    if (ctx->kernel().input_memory_type(i) == MemoryType::kHost) {
      if (on_device && ctx->input(i).num_elements() > 0) {
        return FailedPrecondition("input " + std::to_string(i) + " of " + ctx->kernel().name() +
                                  " is in " + d->name() +
                                  "'s memory but the kernel reads it on the host");
      }
      d->CountHostMemoryInput();
    } else if (!on_device) {
      return FailedPrecondition("input " + std::to_string(i) + " of " + ctx->kernel().name() +
                                " is not in " + d->name() +
                                "'s memory: a host-to-device copy is missing");
    }
  }
  return Status();
}

class IdentityOp final : public OpKernel {
 public:
  using OpKernel::OpKernel;
  void Compute(OpKernelContext* ctx) override {
    FS_OP_REQUIRES_OK(ctx, CheckInputMemory(ctx));
    ctx->set_output(0, ctx->input(0));
  }
};

template <bool kMul>
class BinaryOp final : public OpKernel {
 public:
  using OpKernel::OpKernel;
  void Compute(OpKernelContext* ctx) override {
    FS_OP_REQUIRES_OK(ctx, CheckInputMemory(ctx));
    const Tensor& x = ctx->input(0);
    const Tensor& y = ctx->input(1);
    FS_OP_REQUIRES(ctx, x.shape() == y.shape(),
                   InvalidArgument("ACCEL " + type_string() + " needs equal shapes, got " +
                                   x.shape().ToString() + " and " + y.shape().ToString()));
    std::vector<float> a = LoadFloats(x), b = LoadFloats(y);
    for (size_t i = 0; i < a.size(); ++i) a[i] = kMul ? a[i] * b[i] : a[i] + b[i];
    Tensor* out = nullptr;
    FS_OP_REQUIRES_OK(ctx, ctx->allocate_output(0, x.shape(), &out));
    StoreFloats(a, out);
  }
};

class MatMulOp final : public OpKernel {
 public:
  explicit MatMulOp(OpKernelConstruction* c) : OpKernel(c) {
    bool ta = false, tb = false;
    (void)c->GetAttr("transpose_a", &ta);  // an error is in c->status()
    (void)c->GetAttr("transpose_b", &tb);
    if (ta || tb) c->SetStatus(Unimplemented("ACCEL MatMul does not transpose"));
  }
  void Compute(OpKernelContext* ctx) override {
    FS_OP_REQUIRES_OK(ctx, CheckInputMemory(ctx));
    const Tensor& x = ctx->input(0);
    const Tensor& y = ctx->input(1);
    FS_OP_REQUIRES(ctx, x.rank() == 2 && y.rank() == 2 && x.dim(1) == y.dim(0),
                   InvalidArgument("ACCEL MatMul: bad shapes " + x.shape().ToString() + " × " +
                                   y.shape().ToString()));
    const int64_t m = x.dim(0), k = x.dim(1), n = y.dim(1);
    std::vector<float> a = LoadFloats(x), b = LoadFloats(y), c(size_t(m * n), 0.0f);
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t p = 0; p < k; ++p) {
        for (int64_t j = 0; j < n; ++j) c[i * n + j] += a[i * k + p] * b[p * n + j];
      }
    }
    Tensor* out = nullptr;
    FS_OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({m, n}), &out));
    StoreFloats(c, out);
  }
};

// Reshape: the data stays in device memory (the output shares its buffer);
// `shape` is read on the host.
class ReshapeOp final : public OpKernel {
 public:
  using OpKernel::OpKernel;
  void Compute(OpKernelContext* ctx) override {
    FS_OP_REQUIRES_OK(ctx, CheckInputMemory(ctx));
    const Tensor& in = ctx->input(0);
    const Tensor& spec = ctx->input(1);
    FS_OP_REQUIRES(ctx, spec.rank() == 1, InvalidArgument("shape must be a vector"));
    std::vector<int64_t> dims;
    int64_t known = 1, unknown = -1;
    for (int64_t i = 0; i < spec.num_elements(); ++i) {
      int64_t d = spec.data<int32_t>()[i];
      if (d == -1) {
        unknown = i;
      } else {
        known *= d;
      }
      dims.push_back(d);
    }
    if (unknown >= 0 && known > 0) dims[unknown] = in.num_elements() / known;
    StatusOr<TensorShape> shape = TensorShape::Make(dims);
    FS_OP_REQUIRES_OK(ctx, shape.status());
    StatusOr<Tensor> out = in.Reshaped(*shape);
    FS_OP_REQUIRES_OK(ctx, out.status());
    ctx->set_output(0, std::move(out).value());
  }
  bool IsExpensive() const override { return false; }
};

// Shape: reads only the input's shape; its output is in host memory.
class ShapeOp final : public OpKernel {
 public:
  using OpKernel::OpKernel;
  void Compute(OpKernelContext* ctx) override {
    FS_OP_REQUIRES_OK(ctx, CheckInputMemory(ctx));
    const Tensor& in = ctx->input(0);
    Tensor* out = nullptr;
    FS_OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({int64_t(in.rank())}), &out));
    for (int i = 0; i < in.rank(); ++i) out->data<int32_t>()[i] = int32_t(in.dim(i));
  }
  bool IsExpensive() const override { return false; }
};

void Must(KernelRegistry* r, const KernelDef& def, KernelFactory f) {
  r->Register(def, std::move(f)).CheckOk();
}

}  // namespace

void RegisterAccelKernels(KernelRegistry* r) {
  constexpr DataType kF = DataType::kFloat32;
  auto def = [](const char* op) {
    KernelDef d(op);
    d.Device("ACCEL");
    return d;
  };
  Must(r, def("Identity").TypeConstraint("T", kF), MakeKernel<IdentityOp>);
  Must(r, def("Add").TypeConstraint("T", kF), MakeKernel<BinaryOp<false>>);
  Must(r, def("Mul").TypeConstraint("T", kF), MakeKernel<BinaryOp<true>>);
  Must(r, def("MatMul").TypeConstraint("T", kF), MakeKernel<MatMulOp>);
  Must(r,
       def("Reshape").TypeConstraint("T", kF).TypeConstraint("Tshape", DataType::kInt32)
           .HostMemory("shape"),
       MakeKernel<ReshapeOp>);
  Must(r,
       def("Shape").TypeConstraint("T", kF).TypeConstraint("out_type", DataType::kInt32)
           .HostMemory("output"),
       MakeKernel<ShapeOp>);
}

}  // namespace flowstate::testing

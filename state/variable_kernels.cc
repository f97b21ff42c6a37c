// Kernels of the variable ops. Each kernel resolves its variable once, when
// it is built: the Variable kernel creates or finds the resource in the
// session's ResourceMgr and hands it to consumers by reference; the mutating
// kernels receive it through their Ref(T) input.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <mutex>

#include "devices/kernel_registry.h"
#include "devices/op_kernel.h"
#include "state/apply_util.h"
#include "state/kernels.h"
#include "state/replica_input.h"
#include "state/resource_mgr.h"
#include "state/variable.h"

namespace flowstate {

namespace internal {

Variable* AsVariable(OpKernelContext* ctx, int i) {
  TensorRef* ref = ctx->input_ref(i);
  auto* v = dynamic_cast<Variable*>(ref);
  if (v == nullptr) {
    ctx->SetStatus(InvalidArgument("input " + std::to_string(i) + " of " +
                                       ctx->kernel().type_string() + " '" + ctx->kernel().name() +
                                       "' must be a variable, got '" +
                                       (ref != nullptr ? ref->ref_name() : std::string()) + "'",
                                   ctx->kernel().name()));
  }
  return v;
}

}  // namespace internal

namespace {

using internal::AdamUpdate;
using internal::AsVariable;
using internal::ScopedFlushSubnormals;

class VariableOp final : public OpKernel {
 public:
  explicit VariableOp(OpKernelConstruction* c) : OpKernel(c) {
    DataType dtype;
    PartialShape shape;
    std::string container, shared_name;
    if (!c->GetAttr("dtype", &dtype).ok() || !c->GetAttr("shape", &shape).ok() ||
        !c->GetAttr("container", &container).ok() ||
        !c->GetAttr("shared_name", &shared_name).ok()) {
      return;
    }
    if (c->resource_manager() == nullptr) {
      c->SetStatus(FailedPrecondition("variables need a session's resource manager"));
      return;
    }
    const std::string& name = shared_name.empty() ? c->def().name : shared_name;
    auto v = c->resource_manager()->LookupOrCreate<Variable>(
        container, name, [&]() -> StatusOr<std::shared_ptr<Variable>> {
          // Its buffers count on (and against the limit of) its device.
          Allocator* a = c->device() != nullptr ? c->device()->allocator() : nullptr;
          return std::make_shared<Variable>(name, dtype, shape, a);
        });
    if (!v.ok()) {
      c->SetStatus(v.status());
      return;
    }
    if ((*v)->dtype() != dtype || !((*v)->declared_shape() == shape)) {
      c->SetStatus(InvalidArgument("variable '" + name + "' already exists as " +
                                   (*v)->DebugString() + ", not " + DataTypeName(dtype).data() +
                                   shape.ToString()));
      return;
    }
    var_ = *v;
  }
  void Compute(OpKernelContext* ctx) override { ctx->set_output_ref(0, var_.get()); }
  bool IsExpensive() const override { return false; }

 private:
  std::shared_ptr<Variable> var_;
};

class AssignOp final : public OpKernel {
 public:
  explicit AssignOp(OpKernelConstruction* c) : OpKernel(c) {
    (void)c->GetAttr("validate_shape", &validate_shape_);  // an error is in c->status()
  }
  void Compute(OpKernelContext* ctx) override {
    Variable* v = AsVariable(ctx, 0);
    if (v == nullptr) return;
    // An input referenced by this kernel's slot only (an initializer's
    // fresh output) becomes the variable's buffer: no copy of the table.
    FS_OP_REQUIRES_OK(ctx, v->AssignTakingBuffer(ctx->input(1), validate_shape_));
    ctx->set_output_ref(0, v);
  }

 private:
  bool validate_shape_ = true;
};

enum class Update { kAdd, kSub, kSet };

template <typename T, Update U>
void Apply(T* dst, const T* src, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    if constexpr (U == Update::kAdd) {
      dst[i] = T(dst[i] + src[i]);
    } else if constexpr (U == Update::kSub) {
      dst[i] = T(dst[i] - src[i]);
    } else {
      dst[i] = src[i];
    }
  }
}

template <typename T, Update U>
class AssignUpdateOp final : public OpKernel {
 public:
  using OpKernel::OpKernel;
  void Compute(OpKernelContext* ctx) override {
    Variable* v = AsVariable(ctx, 0);
    if (v == nullptr) return;
    const Tensor& value = ctx->input(1);
    FS_OP_REQUIRES_OK(ctx, v->Mutate([&](Tensor* t) -> Status {
      if (t->shape() != value.shape()) {
        return InvalidArgument("value of shape " + value.shape().ToString() +
                               " does not match variable '" + v->ref_name() + "' of shape " +
                               t->shape().ToString());
      }
      Apply<T, U>(t->data<T>(), value.data<T>(), t->num_elements());
      return Status();
    }));
    ctx->set_output_ref(0, v);
  }
};

template <typename T, typename Index, Update U>
class ScatterOp final : public OpKernel {
 public:
  using OpKernel::OpKernel;
  void Compute(OpKernelContext* ctx) override {
    Variable* v = AsVariable(ctx, 0);
    if (v == nullptr) return;
    const Tensor& indices = ctx->input(1);
    const Tensor& updates = ctx->input(2);
    FS_OP_REQUIRES_OK(ctx, v->Mutate([&](Tensor* t) -> Status {
      if (t->rank() < 1) return InvalidArgument("scatter needs a variable of rank >= 1");
      const int64_t rows = t->dim(0);
      const int64_t row_size = rows == 0 ? 0 : t->num_elements() / rows;
      const int64_t n = indices.num_elements();
      // updates.shape must be indices.shape + var.shape[1:].
      std::vector<int64_t> want = indices.shape().dim_vector();
      for (int d = 1; d < t->rank(); ++d) want.push_back(t->dim(d));
      if (updates.shape().dim_vector() != want) {
        return InvalidArgument("updates must have shape " + PartialShape(want).ToString() +
                               ", got " + updates.shape().ToString());
      }
      const Index* idx = indices.data<Index>();
      for (int64_t i = 0; i < n; ++i) {  // check everything before writing anything
        if (idx[i] < 0 || idx[i] >= rows) {
          return InvalidArgument("index " + std::to_string(idx[i]) + " is out of range for "
                                 "variable '" + v->ref_name() + "' with " +
                                 std::to_string(rows) + " rows");
        }
      }
      T* dst = t->data<T>();
      const T* src = updates.data<T>();
      for (int64_t i = 0; i < n; ++i) {
        Apply<T, U>(dst + int64_t(idx[i]) * row_size, src + i * row_size, row_size);
      }
      return Status();
    }));
    ctx->set_output_ref(0, v);
  }
};

// ApplyAdam: the Adam update of var and its two slots in one pass, under
// the three variables' locks (taken in input order; nothing else takes more
// than one), split over the device's intra-op threads. Element-wise, so bit
// for bit the same on any thread count.
template <typename T>
class ApplyAdamOp final : public OpKernel {
 public:
  using OpKernel::OpKernel;
  void Compute(OpKernelContext* ctx) override {
    Variable* var = AsVariable(ctx, 0);
    Variable* m = AsVariable(ctx, 1);
    Variable* v = AsVariable(ctx, 2);
    if (var == nullptr || m == nullptr || v == nullptr) return;
    T s[5];
    for (int i = 0; i < 5; ++i) {
      const Tensor& x = ctx->input(3 + i);
      if (x.num_elements() != 1) {
        ctx->SetStatus(InvalidArgument("lr, beta1, beta2, epsilon and t must be scalars", name()));
        return;
      }
      s[i] = x.data<T>()[0];
    }
    const T lr = s[0], b1 = s[1], b2 = s[2], eps = s[3], t = s[4];
    const T step = lr / (T(1) - std::pow(b1, t));
    const T inv_c2 = T(1) / (T(1) - std::pow(b2, t));
    const Tensor& grad = ctx->input(8);
    FS_OP_REQUIRES_OK(ctx, var->Mutate([&](Tensor* w) -> Status {
      return m->Mutate([&](Tensor* mt) -> Status {
        return v->Mutate([&](Tensor* vt) -> Status {
          if (w->shape() != grad.shape() || mt->shape() != grad.shape() ||
              vt->shape() != grad.shape()) {
            return InvalidArgument("var " + w->shape().ToString() + ", m " +
                                   mt->shape().ToString() + ", v " + vt->shape().ToString() +
                                   " and grad " + grad.shape().ToString() +
                                   " must have the same shape");
          }
          T* pw = w->data<T>();
          T* pm = mt->data<T>();
          T* pv = vt->data<T>();
          const T* g = grad.data<T>();
          const int64_t n = grad.num_elements();
          // Split in blocks of 4 KiB (whole cache lines); the cost, ~8
          // cycles an element, keeps variables below ~6k elements inline.
          constexpr int64_t kBlock = 4096 / sizeof(T);
          ctx->device()->ParallelFor((n + kBlock - 1) / kBlock, kBlock * 8,
                                     [&](int64_t blk0, int64_t blk1) {
            const int64_t i0 = blk0 * kBlock, i1 = std::min(n, blk1 * kBlock);
            ScopedFlushSubnormals flush;
            AdamUpdate<T>(pw + i0, pm + i0, pv + i0, g + i0, i1 - i0, b1, b2, eps, step, inv_c2);
          });
          return Status();
        });
      });
    }));
    ctx->set_output_ref(0, var);
  }
};

class IsInitializedOp final : public OpKernel {
 public:
  using OpKernel::OpKernel;
  void Compute(OpKernelContext* ctx) override {
    Tensor* out;
    FS_OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape(), &out));
    Variable* v = AsVariable(ctx, 0);
    if (v == nullptr) return;
    *out->data<bool>() = v->IsInitialized();
  }
  bool IsExpensive() const override { return false; }
};

void Must(const KernelDef& def, KernelFactory f) {
  Status s = KernelRegistry::Global()->Register(def, std::move(f));
  s.CheckOk();
}

template <typename T>
void RegisterNumeric() {
  constexpr DataType dt = kDataTypeOf<T>;
  Must(KernelDef("AssignAdd").TypeConstraint("T", dt), MakeKernel<AssignUpdateOp<T, Update::kAdd>>);
  Must(KernelDef("AssignSub").TypeConstraint("T", dt), MakeKernel<AssignUpdateOp<T, Update::kSub>>);
  Must(KernelDef("ScatterUpdate").TypeConstraint("T", dt).TypeConstraint("Tindices", DataType::kInt32),
       MakeKernel<ScatterOp<T, int32_t, Update::kSet>>);
  Must(KernelDef("ScatterUpdate").TypeConstraint("T", dt).TypeConstraint("Tindices", DataType::kInt64),
       MakeKernel<ScatterOp<T, int64_t, Update::kSet>>);
  Must(KernelDef("ScatterAdd").TypeConstraint("T", dt).TypeConstraint("Tindices", DataType::kInt32),
       MakeKernel<ScatterOp<T, int32_t, Update::kAdd>>);
  Must(KernelDef("ScatterAdd").TypeConstraint("T", dt).TypeConstraint("Tindices", DataType::kInt64),
       MakeKernel<ScatterOp<T, int64_t, Update::kAdd>>);
  Must(KernelDef("ScatterSub").TypeConstraint("T", dt).TypeConstraint("Tindices", DataType::kInt32),
       MakeKernel<ScatterOp<T, int32_t, Update::kSub>>);
  Must(KernelDef("ScatterSub").TypeConstraint("T", dt).TypeConstraint("Tindices", DataType::kInt64),
       MakeKernel<ScatterOp<T, int64_t, Update::kSub>>);
}

}  // namespace

namespace state {

void RegisterSaveRestoreKernels();  // save_restore_kernels.cc
void RegisterSparseApplyKernels();  // sparse_apply_kernels.cc
void RegisterQueueKernels();        // queue_kernels.cc

void RegisterKernels() {
  static std::once_flag once;
  std::call_once(once, [] {
    for (DataType t : AllDataTypes()) {
      Must(KernelDef("Variable").TypeConstraint("dtype", t), MakeKernel<VariableOp>);
      Must(KernelDef("Assign").TypeConstraint("T", t), MakeKernel<AssignOp>);
      Must(KernelDef("IsVariableInitialized").TypeConstraint("dtype", t),
           MakeKernel<IsInitializedOp>);
    }
    RegisterNumeric<float>();
    RegisterNumeric<double>();
    Must(KernelDef("ApplyAdam").TypeConstraint("T", DataType::kFloat32),
         MakeKernel<ApplyAdamOp<float>>);
    Must(KernelDef("ApplyAdam").TypeConstraint("T", DataType::kFloat64),
         MakeKernel<ApplyAdamOp<double>>);
    RegisterNumeric<int32_t>();
    RegisterNumeric<int64_t>();
    RegisterNumeric<uint8_t>();
    RegisterSparseApplyKernels();
    RegisterSaveRestoreKernels();
    RegisterReplicaInputKernels();
    RegisterQueueKernels();
  });
}

}  // namespace state
}  // namespace flowstate

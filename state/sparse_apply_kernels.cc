// Kernels of the SparseApply* ops (graph/op_defs/state_defs.cc): optimizer
// updates that read and write only the rows a sparse gradient names.
//
// Each kernel first checks the indices against the table (every index, in
// order, before anything is written: the first bad one is reported with the
// node's name), then sums the gradient rows of duplicate indices (from 0,
// in their order, as UnsortedSegmentSum does on the dense path), then
// updates each distinct row once, with the variable and its slots locked
// (in input order, as ApplyAdam) and the rows split over the device's
// intra-op threads. Row updates are independent, so the result does not
// depend on the thread count.
//
// The arithmetic is the dense optimizer's (graph/optimizers.cc) written per
// row, in the same order of operations, and this file is compiled without
// floating-point contraction (state/CMakeLists.txt), so SGD, AdaGrad and
// Momentum give the dense path's numbers bit for bit on the rows they
// touch; Adam runs ApplyAdam's element loop (state/apply_util.h).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <string>
#include <unordered_map>
#include <vector>

#include "devices/kernel_registry.h"
#include "devices/op_kernel.h"
#include "state/apply_util.h"
#include "state/variable.h"

namespace flowstate {
namespace {

using internal::AsVariable;

// The distinct rows of a sparse gradient and their summed gradients.
template <typename T>
struct SummedRows {
  std::vector<int64_t> rows;  // in the order of first occurrence
  std::vector<T> grad;        // rows.size() x row_size
  int64_t row_size = 0;
};

// Checks `grad` and `indices` against a variable of shape `shape` and sums
// duplicate rows. INVALID_ARGUMENT naming the node (and, for an index out
// of range, the first bad position and its value).
template <typename T, typename Index>
Status SumRows(const OpKernel& k, const TensorShape& shape, const Tensor& grad,
               const Tensor& indices, SummedRows<T>* out) {
  auto error = [&](const std::string& m) {
    return InvalidArgument(k.type_string() + " '" + k.name() + "': " + m, k.name());
  };
  if (shape.rank() < 1) return error("var must have rank >= 1, got a scalar");
  if (indices.rank() != 1) {
    return error("indices must be a vector, got shape " + indices.shape().ToString());
  }
  const int64_t n = indices.num_elements();
  std::vector<int64_t> want{n};
  for (int d = 1; d < shape.rank(); ++d) want.push_back(shape.dim(d));
  if (grad.shape().dim_vector() != want) {
    return error("grad must have shape [len(indices)] + var.shape[1:] = " +
                 PartialShape(want).ToString() + ", got " + grad.shape().ToString());
  }
  const int64_t rows = shape.dim(0);
  const int64_t row_size = rows == 0 ? 0 : shape.num_elements() / rows;
  const Index* idx = indices.data<Index>();
  for (int64_t i = 0; i < n; ++i) {
    if (idx[i] < 0 || int64_t(idx[i]) >= rows) {
      return error("indices[" + std::to_string(i) + "] = " + std::to_string(idx[i]) +
                   " is out of range for a variable of " + std::to_string(rows) +
                   " rows (shape " + shape.ToString() + ")");
    }
  }
  out->row_size = row_size;
  out->rows.clear();
  out->rows.reserve(size_t(n));
  std::unordered_map<int64_t, int64_t> slot;
  slot.reserve(size_t(n));
  std::vector<int64_t> where(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    auto [it, fresh] = slot.emplace(int64_t(idx[i]), int64_t(out->rows.size()));
    if (fresh) out->rows.push_back(int64_t(idx[i]));
    where[size_t(i)] = it->second;
  }
  out->grad.assign(out->rows.size() * size_t(row_size), T(0));
  const T* g = grad.data<T>();
  for (int64_t i = 0; i < n; ++i) {
    T* to = out->grad.data() + where[size_t(i)] * row_size;
    const T* from = g + i * row_size;
    for (int64_t j = 0; j < row_size; ++j) to[j] += from[j];
  }
  return Status();
}

// Runs fn with every variable of `vars` made exclusive and locked, in order.
Status MutateAll(const std::vector<Variable*>& vars, size_t i, std::vector<Tensor*>* tensors,
                 const std::function<Status()>& fn) {
  if (i == vars.size()) return fn();
  return vars[i]->Mutate([&](Tensor* t) -> Status {
    (*tensors)[i] = t;
    return MutateAll(vars, i + 1, tensors, fn);
  });
}

// How many rows ahead of the one being updated the kernels prefetch.
constexpr int64_t kPrefetchAhead = 4;

// The update of one row: pointers to the row in the variable and in each
// slot (in input order), the summed gradient row, its length.
template <typename T>
using RowUpdate = std::function<void(T* const* row, const T* g, int64_t n)>;

// What all SparseApply kernels share: `kRefs` Ref inputs (var, slots),
// `kScalars` scalar inputs, then grad and indices. Subclasses read their
// scalars and return the row update.
template <typename T, typename Index, int kRefs, int kScalars>
class SparseApplyOp : public OpKernel {
 public:
  using OpKernel::OpKernel;

  void Compute(OpKernelContext* ctx) final {
    std::vector<Variable*> vars;
    for (int i = 0; i < kRefs; ++i) {
      Variable* v = AsVariable(ctx, i);
      if (v == nullptr) return;
      // Each is locked once (a variable given twice would deadlock).
      if (std::find(vars.begin(), vars.end(), v) != vars.end()) {
        ctx->SetStatus(InvalidArgument(type_string() + " '" + name() + "': variable '" +
                                           v->ref_name() + "' is given twice; var and its " +
                                           "slots must be distinct variables",
                                       name()));
        return;
      }
      vars.push_back(v);
    }
    T s[kScalars > 0 ? kScalars : 1];
    for (int i = 0; i < kScalars; ++i) {
      const Tensor& x = ctx->input(kRefs + i);
      if (x.num_elements() != 1) {
        ctx->SetStatus(InvalidArgument(type_string() + " '" + name() + "': input " +
                                           std::to_string(kRefs + i) + " must be a scalar, got " +
                                           x.shape().ToString(),
                                       name()));
        return;
      }
      s[i] = x.data<T>()[0];
    }
    RowUpdate<T> update = MakeUpdate(s);
    const Tensor& grad = ctx->input(kRefs + kScalars);
    const Tensor& indices = ctx->input(kRefs + kScalars + 1);
    std::vector<Tensor*> t(vars.size());
    FS_OP_REQUIRES_OK(ctx, MutateAll(vars, 0, &t, [&]() -> Status {
      for (int i = 1; i < kRefs; ++i) {
        if (t[size_t(i)]->shape() != t[0]->shape()) {
          return InvalidArgument(type_string() + " '" + name() + "': slot '" +
                                     vars[size_t(i)]->ref_name() + "' has shape " +
                                     t[size_t(i)]->shape().ToString() + ", var '" +
                                     vars[0]->ref_name() + "' " + t[0]->shape().ToString(),
                                 name());
        }
      }
      SummedRows<T> rows;
      FS_RETURN_IF_ERROR((SumRows<T, Index>(*this, t[0]->shape(), grad, indices, &rows)));
      const int64_t rs = rows.row_size;
      T* base[kRefs];
      for (int i = 0; i < kRefs; ++i) base[i] = t[size_t(i)]->template data<T>();
      const int64_t prefetch_bytes = std::min<int64_t>(rs * int64_t(sizeof(T)), 1024);
      ctx->device()->ParallelFor(int64_t(rows.rows.size()), rs * 10 + 20,
                                 [&](int64_t b, int64_t e) {
        internal::ScopedFlushSubnormals flush;
        T* row[kRefs];
        for (int64_t u = b; u < e; ++u) {
          // The rows of a big table are cache misses: ask for the rows a few
          // updates ahead (their first 1 KiB) while this one is computed.
          if (u + kPrefetchAhead < e) {
            const int64_t ahead = rows.rows[size_t(u + kPrefetchAhead)] * rs;
            for (int i = 0; i < kRefs; ++i) {
              const char* p = reinterpret_cast<const char*>(base[i] + ahead);
              for (int64_t off = 0; off < prefetch_bytes; off += 64) __builtin_prefetch(p + off, 1);
            }
          }
          for (int i = 0; i < kRefs; ++i) row[i] = base[i] + rows.rows[size_t(u)] * rs;
          update(row, rows.grad.data() + u * rs, rs);
        }
      });
      return Status();
    }));
    ctx->set_output_ref(0, vars[0]);
  }

 protected:
  virtual RowUpdate<T> MakeUpdate(const T* scalars) const = 0;
};

// var -= g * alpha (AssignSub(var, Mul(g, lr)) on the dense path).
template <typename T, typename Index>
class SparseApplyGradientDescentOp final : public SparseApplyOp<T, Index, 1, 1> {
 public:
  using SparseApplyOp<T, Index, 1, 1>::SparseApplyOp;

 private:
  RowUpdate<T> MakeUpdate(const T* s) const override {
    const T lr = s[0];
    return [lr](T* const* r, const T* g, int64_t n) {
      T* w = r[0];
      for (int64_t j = 0; j < n; ++j) w[j] -= g[j] * lr;
    };
  }
};

// accum = accum * momentum + g; var -= (nesterov ? g + accum * momentum : accum) * lr.
template <typename T, typename Index>
class SparseApplyMomentumOp final : public SparseApplyOp<T, Index, 2, 2> {
 public:
  explicit SparseApplyMomentumOp(OpKernelConstruction* c) : SparseApplyOp<T, Index, 2, 2>(c) {
    (void)c->GetAttr("use_nesterov", &nesterov_);  // an error is in c->status()
  }

 private:
  RowUpdate<T> MakeUpdate(const T* s) const override {
    const T lr = s[0], mom = s[1];
    const bool nesterov = nesterov_;
    return [lr, mom, nesterov](T* const* r, const T* g, int64_t n) {
      T* w = r[0];
      T* accum = r[1];
      for (int64_t j = 0; j < n; ++j) {
        const T a = accum[j] * mom + g[j];
        accum[j] = a;
        const T dir = nesterov ? g[j] + a * mom : a;
        w[j] -= dir * lr;
      }
    };
  }
  bool nesterov_ = false;
};

// ApplyAdam's element loop on each row.
template <typename T, typename Index>
class SparseApplyAdamOp final : public SparseApplyOp<T, Index, 3, 5> {
 public:
  using SparseApplyOp<T, Index, 3, 5>::SparseApplyOp;

 private:
  RowUpdate<T> MakeUpdate(const T* s) const override {
    const T lr = s[0], b1 = s[1], b2 = s[2], eps = s[3], t = s[4];
    const T step = lr / (T(1) - std::pow(b1, t));
    const T inv_c2 = T(1) / (T(1) - std::pow(b2, t));
    return [=](T* const* r, const T* g, int64_t n) {
      internal::AdamUpdate<T>(r[0], r[1], r[2], g, n, b1, b2, eps, step, inv_c2);
    };
  }
};

// accum += g * g; var -= g * lr / (sqrt(accum) + eps).
template <typename T, typename Index>
class SparseApplyAdagradOp final : public SparseApplyOp<T, Index, 2, 2> {
 public:
  using SparseApplyOp<T, Index, 2, 2>::SparseApplyOp;

 private:
  RowUpdate<T> MakeUpdate(const T* s) const override {
    const T lr = s[0], eps = s[1];
    return [lr, eps](T* const* r, const T* g, int64_t n) {
      T* w = r[0];
      T* accum = r[1];
      for (int64_t j = 0; j < n; ++j) {
        const T a = accum[j] + g[j] * g[j];
        accum[j] = a;
        w[j] -= g[j] * lr / (std::sqrt(a) + eps);
      }
    };
  }
};

// ms = ms * rho + g * g * (1 - rho); step = g * lr / sqrt(ms + eps);
// with a momentum slot mom = mom * momentum + step, var -= mom; else var -= step.
template <typename T, typename Index, bool kMomentum>
class SparseApplyRmsPropOp final
    : public SparseApplyOp<T, Index, kMomentum ? 3 : 2, kMomentum ? 4 : 3> {
  using Base = SparseApplyOp<T, Index, kMomentum ? 3 : 2, kMomentum ? 4 : 3>;

 public:
  using Base::Base;

 private:
  RowUpdate<T> MakeUpdate(const T* s) const override {
    // Inputs: lr, rho, [momentum,] epsilon.
    const T lr = s[0], rho = s[1], momentum = kMomentum ? s[2] : T(0), eps = s[kMomentum ? 3 : 2];
    const T one_rho = T(1) - rho;
    return [=](T* const* r, const T* g, int64_t n) {
      T* w = r[0];
      T* ms = r[1];
      for (int64_t j = 0; j < n; ++j) {
        const T m2 = ms[j] * rho + g[j] * g[j] * one_rho;
        ms[j] = m2;
        const T step = g[j] * lr / std::sqrt(m2 + eps);
        if constexpr (kMomentum) {
          T* mom = r[2];
          const T mo = mom[j] * momentum + step;
          mom[j] = mo;
          w[j] -= mo;
        } else {
          w[j] -= step;
        }
      }
    };
  }
};

void Must(const KernelDef& def, KernelFactory f) {
  Status s = KernelRegistry::Global()->Register(def, std::move(f));
  s.CheckOk();
}

template <typename T, typename Index>
void RegisterFor() {
  auto def = [](const char* op) {
    return KernelDef(op).TypeConstraint("T", kDataTypeOf<T>).TypeConstraint("Tindices",
                                                                           kDataTypeOf<Index>);
  };
  Must(def("SparseApplyGradientDescent"), MakeKernel<SparseApplyGradientDescentOp<T, Index>>);
  Must(def("SparseApplyMomentum"), MakeKernel<SparseApplyMomentumOp<T, Index>>);
  Must(def("SparseApplyAdam"), MakeKernel<SparseApplyAdamOp<T, Index>>);
  Must(def("SparseApplyAdagrad"), MakeKernel<SparseApplyAdagradOp<T, Index>>);
  Must(def("SparseApplyRMSProp"), MakeKernel<SparseApplyRmsPropOp<T, Index, true>>);
  Must(def("SparseApplyRMSPropNoMomentum"), MakeKernel<SparseApplyRmsPropOp<T, Index, false>>);
}

}  // namespace

namespace state {

void RegisterSparseApplyKernels() {
  RegisterFor<float, int32_t>();
  RegisterFor<float, int64_t>();
  RegisterFor<double, int32_t>();
  RegisterFor<double, int64_t>();
}

}  // namespace state
}  // namespace flowstate

// BatchNorm and BatchNormGrad on the CPU, float32 and float64.
//
// x is viewed as [m, c]: c the last dimension (channels), m the product of
// the others (N for [N, C], N·H·W for NHWC). Statistics are per channel.
//
// BatchNorm(x, scale, offset, moving_mean: Ref, moving_variance: Ref):
//   training:  mean, var = the batch's mean and biased variance (two passes,
//              accumulated in double); y = (x - mean) · inv_std · scale +
//              offset with inv_std = 1 / sqrt(var + epsilon); outputs
//              batch_mean = mean, batch_variance = var · m / (m - 1) (the
//              unbiased variance; var itself when m = 1), saved_mean = mean,
//              saved_inv_std = inv_std; and, in the kernel, through the Ref
//              inputs: moving = momentum · moving + (1 - momentum) · batch
//              (the variance's batch value being the unbiased one). Both
//              variables are read and checked (initialized, dtype, [c])
//              before either is written. An empty batch (m = 0) gives NaN
//              statistics and leaves the moving averages alone.
//   inference: the moving averages stand in for the batch's: y uses them,
//              batch_mean/batch_variance are copies of them, saved_mean the
//              moving mean and saved_inv_std 1 / sqrt(moving_variance +
//              epsilon). Nothing is written.
// A variable that was never assigned is FAILED_PRECONDITION (from
// TensorRef).
//
// BatchNormGrad(dy, x, scale, saved_mean, saved_inv_std), with xhat =
// (x - saved_mean) · saved_inv_std and sums over the m rows:
//   offset_backprop = Σ dy, scale_backprop = Σ dy · xhat, and
//   training:  dx = scale · inv_std · (dy - Σ dy / m - xhat · Σ (dy · xhat) / m)
//   inference: dx = scale · inv_std · dy (the statistics are constants).
//
// Rows are spread over the device's threads; per-channel sums are formed
// per thread and then added, so results depend (within rounding) on the
// thread count.
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "devices/cpu/nn_kernels_common.h"
#include "devices/cpu/register_kernels.h"

namespace flowstate::internal {
namespace {

// Rows per shard at least (a shard's sums cost a few cycles per element).
constexpr int64_t kMinShardElements = 1 << 14;

// Per-channel sums over the rows of an [m, c] matrix: fn(r0, r1, acc) adds
// the contributions of rows [r0, r1) into acc[k * c] (k sums per channel);
// returns their totals.
template <typename F>
std::vector<double> ColumnSums(Device* device, int64_t m, int64_t c, int k, const F& fn) {
  const int64_t width = int64_t(k) * c;
  const int64_t shards = std::max<int64_t>(
      1, std::min<int64_t>(device->num_threads(), m * c / kMinShardElements));
  std::vector<double> acc(size_t(shards * width), 0.0);
  device->ParallelFor(shards, std::max<int64_t>(1, m * width / shards), [&](int64_t s0,
                                                                             int64_t s1) {
    for (int64_t s = s0; s < s1; ++s) {
      fn(m * s / shards, m * (s + 1) / shards, acc.data() + s * width);
    }
  });
  for (int64_t s = 1; s < shards; ++s) {
    for (int64_t q = 0; q < width; ++q) acc[size_t(q)] += acc[size_t(s * width + q)];
  }
  acc.resize(size_t(width));
  return acc;
}

// Runs fn(r0, r1) over the rows of an [m, c] matrix on the device's threads.
template <typename F>
void ForRows(Device* device, int64_t m, int64_t c, const F& fn) {
  device->ParallelFor(m, std::max<int64_t>(1, c), fn);
}

// x of rank >= 2 viewed as [m, c].
Status MatrixView(const Tensor& x, const char* what, const std::string& node, int64_t* m,
                  int64_t* c) {
  if (x.rank() < 2) {
    return InvalidArgument(std::string(what) + " must have rank >= 2 (channels last), got " +
                               ShapeString(x),
                           node);
  }
  *c = x.dim(x.rank() - 1);
  *m = 1;
  for (int i = 0; i + 1 < x.rank(); ++i) *m *= x.dim(i);
  return Status();
}

Status CheckChannelVector(const Tensor& t, DataType dtype, int64_t c, const std::string& what,
                          const std::string& node) {
  if (t.dtype() != dtype || t.shape() != TensorShape({c})) {
    return InvalidArgument(what + " must be a " + std::string(DataTypeName(dtype)) +
                               " vector of " + std::to_string(c) + " entries, got " +
                               std::string(DataTypeName(t.dtype())) + ShapeString(t),
                           node);
  }
  return Status();
}

template <typename T>
std::vector<double> ToDouble(const Tensor& t) {
  return std::vector<double>(t.data<T>(), t.data<T>() + t.num_elements());
}

template <typename T>
class BatchNormOp final : public OpKernel {
 public:
  explicit BatchNormOp(OpKernelConstruction* c) : OpKernel(c) {
    if (!c->GetAttr("epsilon", &epsilon_).ok()) return;
    if (!c->GetAttr("momentum", &momentum_).ok()) return;
    if (!c->GetAttr("is_training", &is_training_).ok()) return;
    if (!(epsilon_ >= 0) || !std::isfinite(epsilon_)) {
      c->SetStatus(InvalidArgument("epsilon must be a finite number >= 0, got " +
                                       std::to_string(epsilon_),
                                   c->def().name));
    } else if (!(momentum_ >= 0 && momentum_ <= 1)) {
      c->SetStatus(InvalidArgument("momentum must be in [0, 1], got " + std::to_string(momentum_),
                                   c->def().name));
    }
  }

  void Compute(OpKernelContext* ctx) override {
    const std::string& node = name();
    const DataType dtype = kDataTypeOf<T>;
    const Tensor& x = ctx->input(0);
    int64_t m = 0, c = 0;
    FS_OP_REQUIRES_OK(ctx, MatrixView(x, "x", node, &m, &c));
    FS_OP_REQUIRES_OK(ctx, CheckChannelVector(ctx->input(1), dtype, c, "scale", node));
    FS_OP_REQUIRES_OK(ctx, CheckChannelVector(ctx->input(2), dtype, c, "offset", node));
    TensorRef* mean_ref = ctx->input_ref(3);
    TensorRef* var_ref = ctx->input_ref(4);
    FS_OP_REQUIRES(ctx, mean_ref != nullptr && var_ref != nullptr,
                   InvalidArgument("moving_mean and moving_variance must be variables", node));
    // The moving averages, read (and checked) before anything is written.
    std::vector<double> moving_mean, moving_var;
    {
      StatusOr<Tensor> mean_value = mean_ref->Read();
      FS_OP_REQUIRES_OK(ctx, mean_value.status());
      StatusOr<Tensor> var_value = var_ref->Read();
      FS_OP_REQUIRES_OK(ctx, var_value.status());
      FS_OP_REQUIRES_OK(ctx, CheckChannelVector(*mean_value, dtype, c,
                                                "moving_mean '" + mean_ref->ref_name() + "'", node));
      FS_OP_REQUIRES_OK(ctx, CheckChannelVector(*var_value, dtype, c,
                                                "moving_variance '" + var_ref->ref_name() + "'",
                                                node));
      moving_mean = ToDouble<T>(*mean_value);
      moving_var = ToDouble<T>(*var_value);
    }  // the values are released here, so Mutate need not copy the buffers

    std::vector<double> mean, var, batch_var;  // var biased, batch_var as output
    if (!is_training_) {
      mean = moving_mean;
      var = moving_var;
      batch_var = moving_var;
    } else if (m == 0) {
      const double nan = std::numeric_limits<double>::quiet_NaN();
      mean.assign(size_t(c), nan);
      var.assign(size_t(c), nan);
      batch_var.assign(size_t(c), nan);
    } else {
      BatchMoments(ctx->device(), x.data<T>(), m, c, &mean, &var);
      const double unbias = double(m) / double(std::max<int64_t>(m - 1, 1));
      batch_var.resize(static_cast<size_t>(c));
      for (int64_t q = 0; q < c; ++q) batch_var[size_t(q)] = var[size_t(q)] * unbias;
    }
    std::vector<double> inv_std(static_cast<size_t>(c));
    for (int64_t q = 0; q < c; ++q) inv_std[size_t(q)] = 1.0 / std::sqrt(var[size_t(q)] + epsilon_);

    Tensor* y = nullptr;
    FS_OP_REQUIRES_OK(ctx, ctx->allocate_output(0, x.shape(), &y));
    const std::vector<double>* stats[4] = {&mean, &batch_var, &mean, &inv_std};
    for (int i = 0; i < 4; ++i) {
      Tensor* out = nullptr;
      FS_OP_REQUIRES_OK(ctx, ctx->allocate_output(i + 1, TensorShape({c}), &out));
      for (int64_t q = 0; q < c; ++q) out->data<T>()[q] = T((*stats[i])[size_t(q)]);
    }
    if (m > 0 && c > 0) {
      // y = (x - mean) · a + offset per channel.
      std::vector<T> a(static_cast<size_t>(c)), mu(static_cast<size_t>(c));
      const T* scale = ctx->input(1).data<T>();
      const T* offset = ctx->input(2).data<T>();
      for (int64_t q = 0; q < c; ++q) {
        const double aq = double(scale[q]) * inv_std[size_t(q)];
        a[size_t(q)] = T(aq);
        mu[size_t(q)] = T(mean[size_t(q)]);
      }
      const T* xd = x.data<T>();
      T* yd = y->data<T>();
      ForRows(ctx->device(), m, c, [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r) {
          const T* xr = xd + r * c;
          T* yr = yd + r * c;
          for (int64_t q = 0; q < c; ++q) yr[q] = (xr[q] - mu[size_t(q)]) * a[size_t(q)] + offset[q];
        }
      });
    }
    if (is_training_ && m > 0) {
      FS_OP_REQUIRES_OK(ctx, UpdateMovingAverage(mean_ref, mean, c, node));
      FS_OP_REQUIRES_OK(ctx, UpdateMovingAverage(var_ref, batch_var, c, node));
    }
  }

 private:
  // Per-channel mean and biased variance of the [m, c] matrix x (m >= 1).
  static void BatchMoments(Device* device, const T* x, int64_t m, int64_t c,
                           std::vector<double>* mean, std::vector<double>* var) {
    *mean = ColumnSums(device, m, c, 1, [&](int64_t r0, int64_t r1, double* acc) {
      for (int64_t r = r0; r < r1; ++r) {
        const T* xr = x + r * c;
        for (int64_t q = 0; q < c; ++q) acc[q] += double(xr[q]);
      }
    });
    for (double& v : *mean) v /= double(m);
    const double* mu = mean->data();
    *var = ColumnSums(device, m, c, 1, [&](int64_t r0, int64_t r1, double* acc) {
      for (int64_t r = r0; r < r1; ++r) {
        const T* xr = x + r * c;
        for (int64_t q = 0; q < c; ++q) {
          const double d = double(xr[q]) - mu[q];
          acc[q] += d * d;
        }
      }
    });
    for (double& v : *var) v /= double(m);
  }

  // moving = momentum · moving + (1 - momentum) · batch, in the variable.
  Status UpdateMovingAverage(TensorRef* ref, const std::vector<double>& batch, int64_t c,
                             const std::string& node) const {
    const double keep = momentum_;
    return ref->Mutate([&](Tensor* value) -> Status {
      FS_RETURN_IF_ERROR(CheckChannelVector(*value, kDataTypeOf<T>, c,
                                            "variable '" + ref->ref_name() + "'", node));
      T* v = value->data<T>();
      for (int64_t q = 0; q < c; ++q) {
        v[q] = T(keep * double(v[q]) + (1 - keep) * batch[size_t(q)]);
      }
      return Status();
    });
  }

  double epsilon_ = 0.001;
  double momentum_ = 0.99;
  bool is_training_ = true;
};

template <typename T>
class BatchNormGradOp final : public OpKernel {
 public:
  explicit BatchNormGradOp(OpKernelConstruction* c) : OpKernel(c) {
    if (!c->GetAttr("is_training", &is_training_).ok()) return;
  }

  void Compute(OpKernelContext* ctx) override {
    const std::string& node = name();
    const DataType dtype = kDataTypeOf<T>;
    const Tensor& dy = ctx->input(0);
    const Tensor& x = ctx->input(1);
    int64_t m = 0, c = 0;
    FS_OP_REQUIRES_OK(ctx, MatrixView(x, "x", node, &m, &c));
    FS_OP_REQUIRES(ctx, dy.shape() == x.shape(),
                   InvalidArgument("y_backprop must have x's shape " + ShapeString(x) + ", got " +
                                       ShapeString(dy),
                                   node));
    FS_OP_REQUIRES_OK(ctx, CheckChannelVector(ctx->input(2), dtype, c, "scale", node));
    FS_OP_REQUIRES_OK(ctx, CheckChannelVector(ctx->input(3), dtype, c, "saved_mean", node));
    FS_OP_REQUIRES_OK(ctx, CheckChannelVector(ctx->input(4), dtype, c, "saved_inv_std", node));
    const T* dyd = dy.data<T>();
    const T* xd = x.data<T>();
    const T* scale = ctx->input(2).data<T>();
    const T* mean = ctx->input(3).data<T>();
    const T* inv_std = ctx->input(4).data<T>();

    // sums[q] = Σ dy, sums[c + q] = Σ dy · xhat.
    std::vector<double> sums(size_t(2 * c), 0.0);
    if (m > 0 && c > 0) {
      sums = ColumnSums(ctx->device(), m, c, 2, [&](int64_t r0, int64_t r1, double* acc) {
        for (int64_t r = r0; r < r1; ++r) {
          const T* g = dyd + r * c;
          const T* xr = xd + r * c;
          for (int64_t q = 0; q < c; ++q) {
            const double gq = double(g[q]);
            acc[q] += gq;
            acc[c + q] += gq * (double(xr[q]) - double(mean[q])) * double(inv_std[q]);
          }
        }
      });
    }
    Tensor* dx = nullptr;
    Tensor* dscale = nullptr;
    Tensor* doffset = nullptr;
    FS_OP_REQUIRES_OK(ctx, ctx->allocate_output(0, x.shape(), &dx));
    FS_OP_REQUIRES_OK(ctx, ctx->allocate_output(1, TensorShape({c}), &dscale));
    FS_OP_REQUIRES_OK(ctx, ctx->allocate_output(2, TensorShape({c}), &doffset));
    for (int64_t q = 0; q < c; ++q) {
      doffset->data<T>()[q] = T(sums[size_t(q)]);
      dscale->data<T>()[q] = T(sums[size_t(c + q)]);
    }
    if (m == 0 || c == 0) return;
    // dx = k1 · dy + k2 · (x - mean) + k3 per channel, with
    //   training:  k1 = scale · inv_std, k2 = -k1 · inv_std · Σ(dy·xhat) / m,
    //              k3 = -k1 · Σdy / m;
    //   inference: k1 = scale · inv_std, k2 = k3 = 0.
    std::vector<T> k1(static_cast<size_t>(c)), k2(static_cast<size_t>(c)), k3(static_cast<size_t>(c));
    for (int64_t q = 0; q < c; ++q) {
      const double a = double(scale[q]) * double(inv_std[q]);
      double b = 0, d = 0;
      if (is_training_) {
        b = -a * double(inv_std[q]) * sums[size_t(c + q)] / double(m);
        d = -a * sums[size_t(q)] / double(m);
      }
      k1[size_t(q)] = T(a), k2[size_t(q)] = T(b), k3[size_t(q)] = T(d);
    }
    T* dxd = dx->data<T>();
    ForRows(ctx->device(), m, c, [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        const T* g = dyd + r * c;
        const T* xr = xd + r * c;
        T* out = dxd + r * c;
        for (int64_t q = 0; q < c; ++q) {
          out[q] = k1[size_t(q)] * g[q] + k2[size_t(q)] * (xr[q] - mean[q]) + k3[size_t(q)];
        }
      }
    });
  }

 private:
  bool is_training_ = true;
};

template <typename T>
void RegisterForType(KernelRegistry* r) {
  const DataType t = kDataTypeOf<T>;
  MustRegister(r, KernelDef("BatchNorm").TypeConstraint("T", t), MakeKernel<BatchNormOp<T>>);
  MustRegister(r, KernelDef("BatchNormGrad").TypeConstraint("T", t),
               MakeKernel<BatchNormGradOp<T>>);
}

}  // namespace

void RegisterBatchNormKernels(KernelRegistry* r) {
  RegisterForType<float>(r);
  RegisterForType<double>(r);
}

}  // namespace flowstate::internal

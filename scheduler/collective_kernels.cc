#include "scheduler/collective_kernels.h"

#include <algorithm>
#include <cstring>
#include <future>
#include <map>
#include <memory>
#include <thread>

#include "devices/kernel_registry.h"
#include "devices/op_kernel.h"
#include "scheduler/reduce_loops.h"
#include "scheduler/replica_comm.h"
#include "state/replica_input.h"

namespace flowstate {
namespace {

bool IsFloat(DataType t) { return t == DataType::kFloat32 || t == DataType::kFloat64; }

// x * factor into out[0, n) (x's dtype, float32 or float64; n its
// elements). Factor 0 (a replica without examples): zeros, even where x
// is NaN or Inf.
void ScaleInto(const Tensor& x, double factor, void* out) {
  const size_t n = size_t(x.num_elements());
  if (n == 0) return;  // an empty tensor's buffer is null
  if (factor == 0) {
    std::memset(out, 0, n * DataTypeSize(x.dtype()));
  } else if (x.dtype() == DataType::kFloat32) {
    reduce_loops::Scale(static_cast<float*>(out), x.data<float>(), n, float(factor));
  } else {
    reduce_loops::Scale(static_cast<double*>(out), x.data<double>(), n, factor);
  }
}

// Indices (int32 or int64) as a new int64 tensor: what travels between
// replicas.
Tensor AsInt64(const Tensor& indices) {
  Tensor out(DataType::kInt64, indices.shape());
  for (int64_t i = 0; i < indices.num_elements(); ++i) {
    out.data<int64_t>()[i] = indices.dtype() == DataType::kInt32 ? int64_t(indices.data<int32_t>()[i])
                                                                 : indices.data<int64_t>()[i];
  }
  return out;
}

// The session's ReplicaComm `group`, for the kernel `op`; FAILED_PRECONDITION
// outside a job with replicas.
StatusOr<std::shared_ptr<ReplicaComm>> LookupComm(OpKernelContext* ctx, const std::string& op,
                                                  const std::string& group) {
  if (ctx->resource_manager() == nullptr) {
    return FailedPrecondition(op + ": the session has no ResourceMgr");
  }
  StatusOr<std::shared_ptr<ReplicaComm>> comm =
      ctx->resource_manager()->Lookup<ReplicaComm>(kReplicaContainer, group);
  if (!comm.ok()) {
    return FailedPrecondition(op + ": no collective group '" + group +
                              "' in this session (it runs only in a job with replicas)");
  }
  return comm;
}

class AllReduceOp final : public AsyncOpKernel {
 public:
  explicit AllReduceOp(OpKernelConstruction* c) : AsyncOpKernel(c) {
    (void)c->GetAttr("group", &group_);  // an error is in c->status()
    (void)c->GetAttr("bucket", &bucket_);
  }

  void ComputeAsync(OpKernelContext* ctx, DoneCallback done) override {
    StatusOr<std::shared_ptr<ReplicaComm>> comm = LookupComm(ctx, "_AllReduce", group_);
    FS_OP_REQUIRES_ASYNC(ctx, comm.ok(), comm.status(), done);
    const int n = ctx->num_inputs() - 1;
    // The replica's examples: its weight (backup replicas: the communication
    // thread decides whether it counts at all, scheduler/replica_comm.h).
    const double count = ctx->input(n).scalar<double>();
    std::vector<std::pair<DataType, TensorShape>> layout;
    for (int i = 0; i < n; ++i) {
      const Tensor& x = ctx->input(i);
      FS_OP_REQUIRES_ASYNC(ctx, IsFloat(x.dtype()),
                           InvalidArgument("_AllReduce: input " + std::to_string(i) + " is " +
                                           std::string(DataTypeName(x.dtype())) +
                                           "; it reduces float32 and float64"),
                           done);
      layout.emplace_back(x.dtype(), x.shape());
    }
    auto callback = [ctx, done](const Status& s, std::vector<Tensor> out) {
      if (!s.ok()) {
        ctx->SetStatus(s);
      } else {
        for (size_t i = 0; i < out.size(); ++i) ctx->set_output(int(i), std::move(out[i]));
      }
      done();
    };
    if (std::shared_ptr<const ReplicaComm::FusedBucket> fused = ReplicaComm::FusedBucket::For(layout)) {
      // Each gradient weighted straight into its place in the flat tensor
      // (from the device's allocator, as below).
      StatusOr<Tensor> allocated = ctx->allocate_temp(fused->dtype, TensorShape({fused->elements}));
      FS_OP_REQUIRES_ASYNC(ctx, allocated.ok(), allocated.status(), done);
      Tensor flat = std::move(allocated).value();
      fused->ZeroGaps(&flat);
      const size_t width = DataTypeSize(fused->dtype);
      for (int i = 0; i < n; ++i) {
        char* at = static_cast<char*>(flat.raw_data()) + size_t(fused->offsets[i]) * width;
        ScaleInto(ctx->input(i), count, at);
      }
      std::vector<Tensor> one;
      one.push_back(std::move(flat));
      (*comm)->Submit(int(bucket_), std::move(one), count, std::move(callback), std::move(fused));
      return;
    }
    std::vector<Tensor> weighted;
    weighted.reserve(n);
    for (int i = 0; i < n; ++i) {
      const Tensor& x = ctx->input(i);
      // From the device's allocator, which keeps freed buffers for reuse:
      // a fresh allocation each step would page-fault its way through them.
      StatusOr<Tensor> w = ctx->allocate_temp(x.dtype(), x.shape());
      FS_OP_REQUIRES_ASYNC(ctx, w.ok(), w.status(), done);
      ScaleInto(x, count, w->raw_data());
      weighted.push_back(std::move(w).value());
    }
    (*comm)->Submit(int(bucket_), std::move(weighted), count, std::move(callback));
  }
  bool IsExpensive() const override { return false; }

 private:
  std::string group_;
  int64_t bucket_ = 0;
};

// A sparse gradient's rows, gathered from every replica
// (ReplicaComm::SubmitGather): the indices as int64, the values weighted by
// the replica's examples here and divided by everyone's there.
class AllGatherOp final : public AsyncOpKernel {
 public:
  explicit AllGatherOp(OpKernelConstruction* c) : AsyncOpKernel(c) {
    (void)c->GetAttr("group", &group_);  // an error is in c->status()
    (void)c->GetAttr("bucket", &bucket_);
  }

  void ComputeAsync(OpKernelContext* ctx, DoneCallback done) override {
    StatusOr<std::shared_ptr<ReplicaComm>> comm = LookupComm(ctx, "_AllGather", group_);
    FS_OP_REQUIRES_ASYNC(ctx, comm.ok(), comm.status(), done);
    const Tensor& indices = ctx->input(0);
    const Tensor& values = ctx->input(1);
    const double count = ctx->input(2).scalar<double>();
    FS_OP_REQUIRES_ASYNC(
        ctx, indices.shape().rank() == 1 && values.shape().rank() >= 1 &&
                 values.shape().dim(0) == indices.shape().dim(0),
        InvalidArgument("_AllGather: indices " + indices.shape().ToString() + " and values " +
                        values.shape().ToString() + " must have one row per index"),
        done);
    Tensor idx = AsInt64(indices);
    Tensor weighted(values.dtype(), values.shape());
    if (weighted.num_elements() > 0) ScaleInto(values, count, weighted.raw_data());
    (*comm)->SubmitGather(int(bucket_), std::move(idx), std::move(weighted), count,
                          [ctx, done](const Status& s, std::vector<Tensor> out) {
                            if (!s.ok()) {
                              ctx->SetStatus(s);
                            } else {
                              ctx->set_output(0, std::move(out[0]));
                              ctx->set_output(1, std::move(out[1]));
                            }
                            done();
                          });
  }
  bool IsExpensive() const override { return false; }

 private:
  std::string group_;
  int64_t bucket_ = 0;
};

// A lookup of a table the replicas share (ReplicaComm::SubmitLookup): N
// parts' local ids in, the rows of each out; the replica answers the
// lookups of every replica in the M parts it holds (params, the part
// indices in `held`) and zeros in the others.
class SharedGatherOp final : public AsyncOpKernel {
 public:
  explicit SharedGatherOp(OpKernelConstruction* c) : AsyncOpKernel(c) {
    (void)c->GetAttr("group", &group_);  // an error is in c->status()
    (void)c->GetAttr("bucket", &bucket_);
    (void)c->GetAttr("N", &parts_);
    (void)c->GetAttr("held", &held_);
    (void)c->GetAttr("T", &dtype_);
    PartialShape row;
    if (c->GetAttr("row_shape", &row).ok() && row.IsFullyDefined()) row_ = row.ToTensorShape();
  }

  void ComputeAsync(OpKernelContext* ctx, DoneCallback done) override {
    StatusOr<std::shared_ptr<ReplicaComm>> comm = LookupComm(ctx, "_SharedGather", group_);
    FS_OP_REQUIRES_ASYNC(ctx, comm.ok(), comm.status(), done);
    std::vector<Tensor> ids;
    for (int64_t p = 0; p < parts_; ++p) {
      const Tensor& indices = ctx->input(int(p));
      FS_OP_REQUIRES_ASYNC(ctx, indices.shape().rank() == 1,
                           InvalidArgument("_SharedGather '" + name() + "': indices must be vectors, "
                                               "got " + indices.shape().ToString(),
                                           name()),
                           done);
      ids.push_back(AsInt64(indices));
    }
    // The parts this replica holds, by part index.
    std::map<int64_t, Tensor> params;
    for (size_t k = 0; k < held_.size(); ++k) {
      const Tensor& t = ctx->input(int(parts_ + int64_t(k)));
      FS_OP_REQUIRES_ASYNC(ctx, t.shape().rank() >= 1,
                           InvalidArgument("_SharedGather '" + name() + "': a part must have rank 1 "
                                               "or more",
                                           name()),
                           done);
      params[held_[k]] = t;
    }
    ReplicaComm::RowsFn rows = [params = std::move(params), dtype = dtype_, row = row_,
                                node = name()](const std::vector<Tensor>& all) -> StatusOr<std::vector<Tensor>> {
      std::vector<Tensor> out;
      for (size_t p = 0; p < all.size(); ++p) {
        std::vector<int64_t> dims{all[p].num_elements()};
        for (int64_t d : row.dims()) dims.push_back(d);
        Tensor answer(dtype, TensorShape(dims));
        auto it = params.find(int64_t(p));
        if (it == params.end()) {
          // Another replica's part (no buffer when this replica looked up no rows).
          if (answer.TotalBytes() > 0) std::memset(answer.raw_data(), 0, answer.TotalBytes());
          out.push_back(std::move(answer));
          continue;
        }
        const Tensor& part = it->second;
        bool fits = part.dtype() == dtype && part.shape().rank() == row.rank() + 1;
        for (int d = 0; fits && d < row.rank(); ++d) fits = part.shape().dim(d + 1) == row.dim(d);
        const int64_t n = part.shape().dim(0);
        const size_t bytes = n > 0 ? part.TotalBytes() / size_t(n) : 0;
        if (!fits) {
          return InvalidArgument("_SharedGather '" + node + "': part " + std::to_string(p) + " is " +
                                     part.shape().ToString() + ", its rows must be " + row.ToString(),
                                 node);
        }
        const char* from = static_cast<const char*>(part.raw_data());
        char* to = static_cast<char*>(answer.raw_data());
        for (int64_t i = 0; bytes > 0 && i < all[p].num_elements(); ++i) {
          const int64_t r = all[p].data<int64_t>()[i];
          if (r < 0 || r >= n) {
            return InvalidArgument("_SharedGather '" + node + "': index " + std::to_string(r) +
                                       " of a replica's lookup is outside part " + std::to_string(p) +
                                       "'s " + std::to_string(n) + " rows",
                                   node);
          }
          std::memcpy(to + size_t(i) * bytes, from + size_t(r) * bytes, bytes);
        }
        out.push_back(std::move(answer));
      }
      return out;
    };
    (*comm)->SubmitLookup(int(bucket_), std::move(ids), std::move(rows),
                          [ctx, done](const Status& s, std::vector<Tensor> out) {
                            if (!s.ok()) {
                              ctx->SetStatus(s);
                            } else {
                              for (size_t p = 0; p < out.size(); ++p) ctx->set_output(int(p), std::move(out[p]));
                            }
                            done();
                          });
  }
  bool IsExpensive() const override { return false; }

 private:
  std::string group_;
  int64_t bucket_ = 0;
  int64_t parts_ = 1;
  std::vector<int64_t> held_;
  DataType dtype_ = DataType::kFloat32;
  TensorShape row_;
};

// A ReplicaComm as its replica's input sees it (state/replica_input.h); it
// does not keep the collective alive.
class CommPace final : public ReplicaPace {
 public:
  explicit CommPace(const std::shared_ptr<ReplicaComm>& comm) : comm_(comm) {}
  StatusOr<bool> Behind() override {
    std::shared_ptr<ReplicaComm> c = comm_.lock();
    return c != nullptr ? c->Behind() : StatusOr<bool>(false);
  }
  std::string DebugString() const override { return "ReplicaPace"; }

 private:
  const std::weak_ptr<ReplicaComm> comm_;
};

// Asynchronous: the rendezvous waits for the other ranks, on a thread of its
// own (an executor may run a ready kernel inline on the thread that goes on
// to start the step's other partitions, which must not wait behind it).
class CreateReplicaCommOp final : public AsyncOpKernel {
 public:
  explicit CreateReplicaCommOp(OpKernelConstruction* c) : AsyncOpKernel(c) {
    StatusOr<ReplicaGroupSpec> spec = ReplicaGroupSpec::FromNode(c->def());
    if (!spec.ok()) {
      c->SetStatus(spec.status());
      return;
    }
    spec_ = std::move(spec).value();
  }

  void ComputeAsync(OpKernelContext* ctx, DoneCallback done) override {
    ResourceMgr* rm = ctx->resource_manager();
    FS_OP_REQUIRES_ASYNC(
        ctx, rm != nullptr,
        FailedPrecondition("_CreateReplicaComm: the session has no ResourceMgr"), done);
    // The step (and so the session and its ResourceMgr) waits for `done`.
    std::thread([this, ctx, rm, done = std::move(done)] {
      Status s = Create(rm);
      if (!s.ok()) ctx->SetStatus(s);
      done();
    }).detach();
  }
  bool IsExpensive() const override { return false; }

 private:
  Status Create(ResourceMgr* rm) const {
    // A new membership replaces the old group (its destructor aborts it).
    (void)rm->Delete(kReplicaContainer, spec_.comm);
    StatusOr<std::unique_ptr<Collective>> c = CreateCollective(spec_.group);
    if (!c.ok()) return c.status();
    ReplicaComm::Options o;
    o.collective = std::shared_ptr<Collective>(std::move(c).value());
    o.num_buckets = spec_.num_buckets;
    o.timeout = spec_.allreduce_timeout;
    if (spec_.contributors > 0) {
      // Backup replicas: this rank's place in the group's race.
      StatusOr<std::shared_ptr<StepRace>> race = CreateStepRace(spec_.group, spec_.contributors);
      if (!race.ok()) return race.status();
      o.race = std::move(race).value();
    }
    auto comm = std::make_shared<ReplicaComm>(std::move(o));
    FS_RETURN_IF_ERROR(rm->LookupOrCreate<ReplicaComm>(
                             kReplicaContainer, spec_.comm,
                             [&]() -> StatusOr<std::shared_ptr<ReplicaComm>> { return comm; })
                           .status());
    (void)rm->Delete(kTaskContainer, kReplicaPaceResource);
    if (spec_.contributors == 0) return Status();
    // The replica's input asks it whether it is behind.
    return rm->LookupOrCreate<ReplicaPace>(
                 kTaskContainer, kReplicaPaceResource,
                 [&]() -> StatusOr<std::shared_ptr<ReplicaPace>> {
                   return std::shared_ptr<ReplicaPace>(std::make_shared<CommPace>(comm));
                 })
        .status();
  }

  ReplicaGroupSpec spec_;
};

// The totals of the session's ReplicaComm `group`: [seconds waited in
// collective calls, bytes reduced, calls], so that a replica on another
// task reports its own wait with the step that fetches them.
class ReplicaCommStatsOp final : public OpKernel {
 public:
  explicit ReplicaCommStatsOp(OpKernelConstruction* c) : OpKernel(c) {
    (void)c->GetAttr("group", &group_);
  }
  void Compute(OpKernelContext* ctx) override {
    FS_OP_REQUIRES(ctx, ctx->resource_manager() != nullptr,
                   FailedPrecondition("_ReplicaCommStats: the session has no ResourceMgr"));
    StatusOr<std::shared_ptr<ReplicaComm>> comm =
        ctx->resource_manager()->Lookup<ReplicaComm>(kReplicaContainer, group_);
    FS_OP_REQUIRES(ctx, comm.ok(),
                   FailedPrecondition("_ReplicaCommStats: no collective group '" + group_ +
                                      "' in this session"));
    ctx->set_output(0, Tensor::FromVector<double>({(*comm)->wait_seconds(), double((*comm)->bytes()),
                                                   double((*comm)->calls())},
                                                  TensorShape({3})));
  }

 private:
  std::string group_;
};

}  // namespace

namespace scheduler {

void RegisterCollectiveKernels(const std::string& device_type) {
  KernelDef d("_AllReduce");
  d.Device(device_type).HostMemory("input").HostMemory("count").HostMemory("output");
  KernelRegistry::Global()->Register(d, MakeKernel<AllReduceOp>).CheckOk();
  KernelRegistry::Global()
      ->Register(KernelDef("_AllGather")
                     .Device(device_type)
                     .HostMemory("indices")
                     .HostMemory("values")
                     .HostMemory("count")
                     .HostMemory("all_indices")
                     .HostMemory("all_values"),
                 MakeKernel<AllGatherOp>)
      .CheckOk();
  KernelRegistry::Global()
      ->Register(KernelDef("_SharedGather")
                     .Device(device_type)
                     .HostMemory("indices")
                     .HostMemory("params")
                     .HostMemory("output"),
                 MakeKernel<SharedGatherOp>)
      .CheckOk();
  KernelRegistry::Global()
      ->Register(KernelDef("_CreateReplicaComm").Device(device_type),
                 MakeKernel<CreateReplicaCommOp>)
      .CheckOk();
  KernelRegistry::Global()
      ->Register(KernelDef("_ReplicaCommStats").Device(device_type).HostMemory("stats"),
                 MakeKernel<ReplicaCommStatsOp>)
      .CheckOk();
}

}  // namespace scheduler
}  // namespace flowstate

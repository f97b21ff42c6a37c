#include "scheduler/collective_kernels.h"

#include <algorithm>
#include <cstring>
#include <future>
#include <memory>
#include <thread>

#include "devices/kernel_registry.h"
#include "devices/op_kernel.h"
#include "scheduler/reduce_loops.h"

namespace flowstate {
namespace {

bool IsFloat(DataType t) { return t == DataType::kFloat32 || t == DataType::kFloat64; }

// x * factor into out[0, n) (x's dtype, float32 or float64; n its
// elements). Factor 0 (a late backup replica's count): zeros, even where x
// is NaN or Inf.
void ScaleInto(const Tensor& x, double factor, void* out) {
  const size_t n = size_t(x.num_elements());
  if (factor == 0) {
    std::memset(out, 0, n * DataTypeSize(x.dtype()));
  } else if (x.dtype() == DataType::kFloat32) {
    reduce_loops::Scale(static_cast<float*>(out), x.data<float>(), n, float(factor));
  } else {
    reduce_loops::Scale(static_cast<double*>(out), x.data<double>(), n, factor);
  }
}

// x * factor, a new tensor.
Tensor Scaled(const Tensor& x, double factor) {
  Tensor out(x.dtype(), x.shape());
  ScaleInto(x, factor, out.raw_data());
  return out;
}

void DivideInPlace(Tensor* x, double by) {
  const int64_t n = x->num_elements();
  if (x->dtype() == DataType::kFloat32) {
    reduce_loops::Divide(x->data<float>(), size_t(n), float(by));
  } else {
    reduce_loops::Divide(x->data<double>(), size_t(n), by);
  }
}

class AllReduceOp final : public AsyncOpKernel {
 public:
  explicit AllReduceOp(OpKernelConstruction* c) : AsyncOpKernel(c) {
    (void)c->GetAttr("group", &group_);  // an error is in c->status()
    (void)c->GetAttr("bucket", &bucket_);
  }

  void ComputeAsync(OpKernelContext* ctx, DoneCallback done) override {
    FS_OP_REQUIRES_ASYNC(ctx, ctx->resource_manager() != nullptr,
                         FailedPrecondition("_AllReduce: the session has no ResourceMgr"), done);
    StatusOr<std::shared_ptr<ReplicaComm>> comm =
        ctx->resource_manager()->Lookup<ReplicaComm>(kReplicaContainer, group_);
    FS_OP_REQUIRES_ASYNC(
        ctx, comm.ok(),
        FailedPrecondition("_AllReduce: no collective group '" + group_ +
                           "' in this session (an all-reduce runs only in a job with replicas)"),
        done);
    const int n = ctx->num_inputs() - 1;
    double count = ctx->input(n).scalar<double>();
    // Backup replicas: the first replicas to get here contribute; a late
    // one joins this step with zeros (every bucket is one, see the builder).
    // A replica without examples (count 0) takes no place among them. (The
    // race's Arrive may call the group's store: a round trip on this
    // thread, once a step.)
    if (bucket_ == 0 && count > 0 && (*comm)->race() != nullptr) {
      StatusOr<bool> first = (*comm)->race()->Arrive((*comm)->steps_begun(), (*comm)->rank());
      FS_OP_REQUIRES_ASYNC(ctx, first.ok(), first.status(), done);
      if (!*first) count = 0;
    }
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

// Asynchronous: the rendezvous waits for the other ranks, on a thread of its
// own (an executor may run a ready kernel inline on the thread that goes on
// to start the step's other partitions, which must not wait behind it).
class CreateReplicaCommOp final : public AsyncOpKernel {
 public:
  explicit CreateReplicaCommOp(OpKernelConstruction* c) : AsyncOpKernel(c) {
    int64_t rank = 0, size = 1, buckets = 1, timeout = 1, allreduce_timeout = 1, contributors = 0;
    (void)c->GetAttr("group", &group_);
    (void)c->GetAttr("kind", &spec_.kind);
    (void)c->GetAttr("store_address", &spec_.store_address);
    (void)c->GetAttr("prefix", &spec_.prefix);
    (void)c->GetAttr("host", &spec_.host);
    (void)c->GetAttr("rank", &rank);
    (void)c->GetAttr("size", &size);
    (void)c->GetAttr("num_buckets", &buckets);
    (void)c->GetAttr("timeout_ms", &timeout);
    (void)c->GetAttr("allreduce_timeout_ms", &allreduce_timeout);
    (void)c->GetAttr("backup_contributors", &contributors);
    contributors_ = int(contributors);
    spec_.rank = int(rank);
    spec_.size = int(size);
    spec_.timeout = std::chrono::milliseconds(timeout);
    num_buckets_ = int(buckets);
    allreduce_timeout_ = std::chrono::milliseconds(allreduce_timeout);
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
    (void)rm->Delete(kReplicaContainer, group_);
    StatusOr<std::unique_ptr<Collective>> c = CreateCollective(spec_);
    if (!c.ok()) return c.status();
    ReplicaComm::Options o;
    o.collective = std::shared_ptr<Collective>(std::move(c).value());
    o.num_buckets = num_buckets_;
    o.timeout = allreduce_timeout_;
    if (contributors_ > 0) {
      // Backup replicas: this rank's place in the group's race.
      StatusOr<std::shared_ptr<StepRace>> race = CreateStepRace(spec_, contributors_);
      if (!race.ok()) return race.status();
      o.race = std::move(race).value();
    }
    auto comm = std::make_shared<ReplicaComm>(std::move(o));
    return rm->LookupOrCreate<ReplicaComm>(
                 kReplicaContainer, group_,
                 [&]() -> StatusOr<std::shared_ptr<ReplicaComm>> { return comm; })
        .status();
  }

  std::string group_;
  CollectiveGroupSpec spec_;
  int num_buckets_ = 1;
  int contributors_ = 0;  // > 0: backup replicas (the race's quota)
  std::chrono::milliseconds allreduce_timeout_{1};
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

LocalStepRace::LocalStepRace(int replicas, int contributors)
    : replicas_(replicas), quota_(contributors), dropped_(replicas, 0) {}

void LocalStepRace::Seen(int64_t step, StepState& s) {
  if (++s.seen >= replicas_) steps_.erase(step);
  // Steps far behind can no longer be decided: keep the map small.
  while (!steps_.empty() && steps_.begin()->first < step - 1000) steps_.erase(steps_.begin());
}

Status LocalStepRace::Begin(int64_t step, int contributors) {
  std::lock_guard<std::mutex> l(mu_);
  steps_[step].quota = contributors;
  return Status();
}

StatusOr<bool> LocalStepRace::Arrive(int64_t step, int rank) {
  std::lock_guard<std::mutex> l(mu_);
  StepState& s = steps_[step];
  bool contributes = s.contributors < (s.quota < 0 ? quota_ : s.quota);
  if (contributes) {
    ++s.contributors;
  } else {
    ++dropped_[rank];
  }
  cv_.notify_all();
  Seen(step, s);
  return contributes;
}

StatusOr<bool> LocalStepRace::WaitDecidedWithout(int64_t step, int rank,
                                                 std::chrono::milliseconds delay) {
  std::unique_lock<std::mutex> l(mu_);
  bool decided = cv_.wait_for(l, delay, [&] {
    const StepState& s = steps_[step];
    return s.contributors >= (s.quota < 0 ? quota_ : s.quota);
  });
  if (!decided) return false;
  ++dropped_[rank];
  Seen(step, steps_[step]);
  return true;
}

StatusOr<std::vector<int64_t>> LocalStepRace::Dropped() {
  std::lock_guard<std::mutex> l(mu_);
  return dropped_;
}

struct ReplicaComm::State {
  explicit State(const Options& o) : options(o) {}
  const Options options;
  std::atomic<int64_t> steps_begun{0};
  std::atomic<int64_t> bytes{0};
  std::atomic<int64_t> calls{0};
  std::atomic<int64_t> wait_ns{0};
  std::mutex mu;
  std::condition_variable cv;
  std::map<int, Request> pending;  // GUARDED_BY(mu): by bucket
  int next_bucket = 0;             // GUARDED_BY(mu)
  bool stop = false;               // GUARDED_BY(mu)
};

ReplicaComm::ReplicaComm(Options options)
    : options_(std::move(options)), state_(std::make_shared<State>(options_)) {
  thread_ = std::thread([state = state_] { Loop(state); });
}

ReplicaComm::~ReplicaComm() {
  options_.collective->Abort(Cancelled("the replica's collective was closed"));
  std::map<int, Request> pending;
  {
    std::lock_guard<std::mutex> l(state_->mu);
    state_->stop = true;
    state_->cv.notify_all();
    pending.swap(state_->pending);
  }
  if (thread_.get_id() == std::this_thread::get_id()) {
    thread_.detach();  // our own thread, in a callback: it ends when that returns
  } else {
    thread_.join();
  }
  for (auto& [b, r] : pending) r.done(Cancelled("the replica's collective was closed"), {});
}

int64_t ReplicaComm::steps_begun() const { return state_->steps_begun.load(); }
int64_t ReplicaComm::bytes() const { return state_->bytes.load(); }
int64_t ReplicaComm::calls() const { return state_->calls.load(); }

std::unique_ptr<ReplicaComm::FusedBucket> ReplicaComm::FusedBucket::For(
    const std::vector<std::pair<DataType, TensorShape>>& tensors) {
  if (tensors.size() < 2) return nullptr;
  for (const auto& [dtype, shape] : tensors) {
    if (dtype != tensors[0].first) return nullptr;
  }
  auto f = std::make_unique<FusedBucket>();
  f->dtype = tensors[0].first;
  const int64_t align = std::max<int64_t>(1, 64 / int64_t(DataTypeSize(f->dtype)));
  for (const auto& [dtype, shape] : tensors) {
    f->offsets.push_back(f->elements);
    f->shapes.push_back(shape);
    f->elements += (shape.num_elements() + align - 1) / align * align;
  }
  return f;
}

void ReplicaComm::FusedBucket::ZeroGaps(Tensor* flat) const {
  const size_t width = DataTypeSize(dtype);
  char* base = static_cast<char*>(flat->raw_data());
  for (size_t i = 0; i < offsets.size(); ++i) {
    const int64_t end = offsets[i] + shapes[i].num_elements();
    const int64_t next = i + 1 < offsets.size() ? offsets[i + 1] : elements;
    std::memset(base + size_t(end) * width, 0, size_t(next - end) * width);
  }
}

std::vector<Tensor> ReplicaComm::FusedBucket::Split(const Tensor& flat) const {
  std::vector<Tensor> out;
  out.reserve(offsets.size());
  for (size_t i = 0; i < offsets.size(); ++i) {
    Tensor view = flat.Slice(offsets[i], offsets[i] + shapes[i].num_elements());
    out.push_back(view.Reshaped(shapes[i]).value());  // the element counts match
  }
  return out;
}

void ReplicaComm::Submit(int bucket, std::vector<Tensor> weighted, double count, Callback done,
                         std::shared_ptr<const FusedBucket> fused) {
  weighted.push_back(Tensor::Scalar<double>(count));
  std::lock_guard<std::mutex> l(state_->mu);
  if (bucket == 0) state_->steps_begun.fetch_add(1);
  if (state_->stop || bucket >= options_.num_buckets || state_->pending.count(bucket)) {
    done(Internal("_AllReduce: bucket " + std::to_string(bucket) +
                  (state_->stop ? " after the collective was closed"
                                : " handed in twice or out of range")),
         {});
    return;
  }
  state_->pending.emplace(bucket, Request{std::move(weighted), std::move(done), std::move(fused)});
  state_->cv.notify_all();
}

StatusOr<std::vector<std::vector<Tensor>>> ReplicaComm::JoinWithZeros(
    const std::vector<std::vector<std::pair<DataType, TensorShape>>>& buckets) {
  std::vector<std::promise<StatusOr<std::vector<Tensor>>>> results(buckets.size());
  for (size_t b = 0; b < buckets.size(); ++b) {
    // The same layout as the other ranks' kernels hand in.
    std::shared_ptr<const FusedBucket> fused = FusedBucket::For(buckets[b]);
    std::vector<Tensor> zeros;
    if (fused != nullptr) {
      Tensor flat(fused->dtype, TensorShape({fused->elements}));
      std::memset(flat.raw_data(), 0, flat.TotalBytes());
      zeros.push_back(std::move(flat));
    } else {
      for (const auto& [dtype, shape] : buckets[b]) {
        Tensor z(dtype, shape);
        std::memset(z.raw_data(), 0, z.TotalBytes());
        zeros.push_back(std::move(z));
      }
    }
    Submit(int(b), std::move(zeros), 0.0,
           [p = &results[b]](const Status& s, std::vector<Tensor> out) {
             if (s.ok()) {
               p->set_value(std::move(out));
             } else {
               p->set_value(s);
             }
           },
           std::move(fused));
  }
  std::vector<std::vector<Tensor>> out;
  Status first;
  for (auto& p : results) {
    StatusOr<std::vector<Tensor>> r = p.get_future().get();
    if (!r.ok()) {
      if (first.ok()) first = r.status();
      continue;
    }
    out.push_back(std::move(r).value());
  }
  if (!first.ok()) return first;
  return out;
}

void ReplicaComm::Loop(std::shared_ptr<State> state) {
  const Options& options = state->options;
  for (;;) {
    Request req;
    {
      std::unique_lock<std::mutex> l(state->mu);
      state->cv.wait(l, [&] { return state->stop || state->pending.count(state->next_bucket) > 0; });
      if (state->stop) return;
      auto it = state->pending.find(state->next_bucket);
      req = std::move(it->second);
      state->pending.erase(it);
      state->next_bucket = (state->next_bucket + 1) % options.num_buckets;
    }
    int64_t nbytes = 0;
    for (const Tensor& t : req.tensors) nbytes += int64_t(t.TotalBytes());
    auto start = std::chrono::steady_clock::now();
    Status s = options.collective->AllReduce(&req.tensors, ReduceOp::kSum, start + options.timeout);
    state->wait_ns.fetch_add(std::chrono::duration_cast<std::chrono::nanoseconds>(
                           std::chrono::steady_clock::now() - start)
                           .count());
    state->calls.fetch_add(1);
    if (!s.ok()) {
      req.done(s, {});
      continue;
    }
    state->bytes.fetch_add(nbytes);
    double total = req.tensors.back().scalar<double>();
    req.tensors.pop_back();
    if (total <= 0) {
      req.done(Internal("all-reduce: no replica contributed examples to this step"), {});
      continue;
    }
    for (Tensor& t : req.tensors) {
      if (!t.RefCountIsOne()) t = Scaled(t, 1.0);  // never write a shared buffer
      DivideInPlace(&t, total);
    }
    if (req.fused != nullptr) {
      req.done(Status(), req.fused->Split(req.tensors.front()));
      continue;
    }
    req.done(Status(), std::move(req.tensors));
  }
}

double ReplicaComm::wait_seconds() const { return double(state_->wait_ns.load()) * 1e-9; }

std::string ReplicaComm::DebugString() const {
  return "ReplicaComm rank " + std::to_string(options_.collective->rank()) + " of " +
         std::to_string(options_.collective->size());
}

namespace scheduler {

void RegisterCollectiveKernels(const std::string& device_type) {
  KernelDef d("_AllReduce");
  d.Device(device_type).HostMemory("input").HostMemory("count").HostMemory("output");
  KernelRegistry::Global()->Register(d, MakeKernel<AllReduceOp>).CheckOk();
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

#include "scheduler/replica_comm.h"

#include <algorithm>
#include <cstring>
#include <future>
#include <memory>
#include <thread>

#include "scheduler/reduce_loops.h"

namespace flowstate {
namespace {

void DivideInPlace(Tensor* x, double by) {
  const int64_t n = x->num_elements();
  if (x->dtype() == DataType::kFloat32) {
    reduce_loops::Divide(x->data<float>(), size_t(n), float(by));
  } else {
    reduce_loops::Divide(x->data<double>(), size_t(n), by);
  }
}

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
      if (!t.RefCountIsOne()) t = t.DeepCopy();  // never write a shared buffer
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

}  // namespace flowstate

#include "scheduler/replica_comm.h"

#include <algorithm>
#include <deque>
#include <cstring>
#include <future>
#include <memory>
#include <thread>

#include "graph/mutex.h"
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

NodeDef ReplicaGroupSpec::ToNode(const std::string& name, const std::string& device) const {
  NodeDef n;
  n.name = name;
  n.op = "_CreateReplicaComm";
  n.device = device;
  n.attrs = {{"group", AttrValue(comm)},
             {"kind", AttrValue(group.kind)},
             {"store_address", AttrValue(group.store_address)},
             {"prefix", AttrValue(group.prefix)},
             {"rank", AttrValue(int64_t(group.rank))},
             {"size", AttrValue(int64_t(group.size))},
             {"timeout_ms", AttrValue(int64_t(group.timeout.count()))},
             {"host", AttrValue(group.host)},
             {"num_buckets", AttrValue(int64_t(num_buckets))},
             {"allreduce_timeout_ms", AttrValue(int64_t(allreduce_timeout.count()))},
             {"backup_contributors", AttrValue(int64_t(contributors))}};
  return n;
}

StatusOr<ReplicaGroupSpec> ReplicaGroupSpec::FromNode(const NodeDef& node) {
  auto missing = [&](const char* attr, const char* kind) {
    return InvalidArgument("node '" + node.name + "' (" + node.op + "): attribute '" + attr +
                               "' must be " + kind,
                           node.name);
  };
  auto str = [&](const char* attr, std::string* out) -> Status {
    auto it = node.attrs.find(attr);
    if (it == node.attrs.end() || it->second.kind() != AttrKind::kString) return missing(attr, "a string");
    *out = it->second.s();
    return Status();
  };
  auto num = [&](const char* attr, int64_t* out) -> Status {
    auto it = node.attrs.find(attr);
    if (it == node.attrs.end() || it->second.kind() != AttrKind::kInt) return missing(attr, "an int");
    *out = it->second.i();
    return Status();
  };
  ReplicaGroupSpec s;
  int64_t rank = 0, size = 1, timeout = 1, buckets = 1, allreduce_timeout = 1, contributors = 0;
  FS_RETURN_IF_ERROR(str("group", &s.comm));
  FS_RETURN_IF_ERROR(str("kind", &s.group.kind));
  FS_RETURN_IF_ERROR(str("store_address", &s.group.store_address));
  FS_RETURN_IF_ERROR(str("prefix", &s.group.prefix));
  FS_RETURN_IF_ERROR(str("host", &s.group.host));
  FS_RETURN_IF_ERROR(num("rank", &rank));
  FS_RETURN_IF_ERROR(num("size", &size));
  FS_RETURN_IF_ERROR(num("timeout_ms", &timeout));
  FS_RETURN_IF_ERROR(num("num_buckets", &buckets));
  FS_RETURN_IF_ERROR(num("allreduce_timeout_ms", &allreduce_timeout));
  if (node.attrs.count("backup_contributors")) FS_RETURN_IF_ERROR(num("backup_contributors", &contributors));
  s.group.rank = int(rank);
  s.group.size = int(size);
  s.group.timeout = std::chrono::milliseconds(timeout);
  s.num_buckets = int(buckets);
  s.allreduce_timeout = std::chrono::milliseconds(allreduce_timeout);
  s.contributors = int(contributors);
  return s;
}

LocalStepRace::LocalStepRace(int replicas, int contributors)
    : replicas_(replicas), quota_(contributors), dropped_(replicas, 0) {}

StatusOr<StepRace::Decision> LocalStepRace::Decide(int64_t step, int rank, bool has_examples,
                                                   std::chrono::steady_clock::time_point deadline) {
  MutexLock l(mu_);
  StepState& s = steps_[step];
  ++s.arrived;
  if (has_examples) s.with.push_back(rank);
  const int with = int(s.with.size());
  if (!s.decided && ((has_examples && with == quota_) || (s.arrived == replicas_ && with < quota_))) {
    s.decided = true;
    s.members = s.with;
    std::sort(s.members.begin(), s.members.end());
    cv_.NotifyAll();
  }
  while (!s.decided && cv_.WaitUntil(mu_, deadline)) {
  }
  if (!s.decided) {
    return DeadlineExceeded("backup replicas: step " + std::to_string(step) +
                            " was not decided by the deadline (rank " + std::to_string(rank) + ")");
  }
  Decision d;
  d.members = s.members;
  d.contributes = std::binary_search(d.members.begin(), d.members.end(), rank);
  if (has_examples && !d.contributes) ++dropped_[rank];
  return d;
}

StatusOr<bool> LocalStepRace::Decided(int64_t step) {
  MutexLock l(mu_);
  auto it = steps_.find(step);
  return it != steps_.end() && it->second.decided;
}

StatusOr<bool> LocalStepRace::WaitDecidedWithout(int64_t step, int rank,
                                                 std::chrono::milliseconds delay) {
  MutexLock l(mu_);
  StepState& s = steps_[step];
  const auto until = std::chrono::steady_clock::now() + delay;
  while (!s.decided && cv_.WaitUntil(mu_, until)) {
  }
  if (!s.decided) return false;
  ++dropped_[rank];
  return true;
}

Status LocalStepRace::End(int64_t step) {
  MutexLock l(mu_);
  steps_.erase(step);
  return Status();
}

StatusOr<std::vector<int64_t>> LocalStepRace::Dropped() {
  MutexLock l(mu_);
  return dropped_;
}

struct ReplicaComm::State {
  explicit State(const Options& o) : options(o) {}
  const Options options;
  std::atomic<int64_t> steps_begun{0};
  std::atomic<int64_t> bytes{0};
  std::atomic<int64_t> calls{0};
  std::atomic<int64_t> wait_ns{0};
  // The last step this replica had examples for went on without it.
  std::atomic<bool> dropped_last{false};
  Mutex mu;
  CondVar cv;
  std::map<int, Request> pending ABSL_GUARDED_BY(mu);  // by bucket
  int next_bucket ABSL_GUARDED_BY(mu) = 0;
  bool stop ABSL_GUARDED_BY(mu) = false;
  // Results this rank sends to the ranks a step went on without, in order
  // (ForwardLoop); at most kMaxForwards.
  struct Forward {
    std::vector<Tensor> tensors;
    int to = 0;
    uint32_t tag = 0;
  };
  std::deque<Forward> forwards ABSL_GUARDED_BY(mu);
};

ReplicaComm::ReplicaComm(Options options)
    : options_(std::move(options)), state_(std::make_shared<State>(options_)) {
  thread_ = std::thread([state = state_] { Loop(state); });
  if (options_.race != nullptr && options_.collective->supports_subgroups()) {
    forward_thread_ = std::thread([state = state_] { ForwardLoop(state); });
  }
}

ReplicaComm::~ReplicaComm() {
  options_.collective->Abort(Cancelled("the replica's collective was closed"));
  std::map<int, Request> pending;
  {
    MutexLock l(state_->mu);
    state_->stop = true;
    state_->cv.NotifyAll();
    pending.swap(state_->pending);
  }
  for (std::thread* t : {&thread_, &forward_thread_}) {
    if (!t->joinable()) continue;
    if (t->get_id() == std::this_thread::get_id()) {
      t->detach();  // our own thread, in a callback: it ends when that returns
    } else {
      t->join();
    }
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
  MutexLock l(state_->mu);
  if (bucket == 0) state_->steps_begun.fetch_add(1);
  if (state_->stop || bucket >= options_.num_buckets || state_->pending.count(bucket)) {
    done(Internal("_AllReduce: bucket " + std::to_string(bucket) +
                  (state_->stop ? " after the collective was closed"
                                : " handed in twice or out of range")),
         {});
    return;
  }
  state_->pending.emplace(bucket, Request{std::move(weighted), std::move(done), std::move(fused)});
  state_->cv.NotifyAll();
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

StatusOr<bool> ReplicaComm::Behind() const {
  if (options_.race == nullptr || !state_->dropped_last.load()) return false;
  return options_.race->Decided(steps_begun());
}

namespace {

// Zeros what a dropped replica hands in (its count included), so that it
// joins a round of every rank with nothing.
void ZeroAll(std::vector<Tensor>* tensors) {
  for (Tensor& t : *tensors) {
    if (!t.RefCountIsOne()) t = Tensor(t.dtype(), t.shape());
    std::memset(t.raw_data(), 0, t.TotalBytes());
  }
}

// The ranks a step went on without, and who sends each the step's result:
// the j-th of them gets it from members[j % members.size()].
int SenderFor(int rank, const std::vector<int>& members) {
  int j = 0;
  for (int r = 0; r < rank; ++r) j += std::binary_search(members.begin(), members.end(), r) ? 0 : 1;
  return members[size_t(j) % members.size()];
}

}  // namespace

void ReplicaComm::Loop(std::shared_ptr<State> state) {
  const Options& options = state->options;
  Collective& collective = *options.collective;
  const int rank = collective.rank();
  // Backup replicas on a collective with subgroup rounds: the step's
  // contributors reduce among themselves, and the others receive the result.
  const bool among = options.race != nullptr && collective.supports_subgroups();
  int64_t step = 0;  // the step of the bucket in hand
  StatusOr<StepRace::Decision> decision = StepRace::Decision{};
  for (;;) {
    Request req;
    int bucket = 0;
    {
      MutexLock l(state->mu);
      while (!(state->stop || state->pending.count(state->next_bucket) > 0)) state->cv.Wait(state->mu);
      if (state->stop) return;
      bucket = state->next_bucket;
      auto it = state->pending.find(bucket);
      req = std::move(it->second);
      state->pending.erase(it);
      state->next_bucket = (state->next_bucket + 1) % options.num_buckets;
    }
    const int64_t this_step = step;
    if (bucket == options.num_buckets - 1) ++step;
    // Every call of a step shares one tag per bucket.
    const uint32_t tag = uint32_t(this_step * options.num_buckets + bucket);
    int64_t nbytes = 0;
    for (const Tensor& t : req.tensors) nbytes += int64_t(t.TotalBytes());
    const auto start = std::chrono::steady_clock::now();
    const auto deadline = start + options.timeout;
    if (options.race != nullptr && bucket == 0) {
      // The step's first bucket: who contributes to it.
      const bool has_examples = req.tensors.back().scalar<double>() > 0;
      decision = options.race->Decide(this_step, rank, has_examples, deadline);
      state->dropped_last = decision.ok() && has_examples && !decision->contributes;
    }
    Status s;
    bool received = false;
    if (!decision.ok()) {
      s = decision.status();
    } else if (among && decision->contributes) {
      s = collective.AllReduceAmong(&req.tensors, decision->members, tag, deadline);
    } else if (among) {
      // Divided already by the sender.
      req.tensors.pop_back();
      s = collective.Recv(&req.tensors, SenderFor(rank, decision->members), tag, deadline);
      received = true;
    } else {
      if (options.race != nullptr && !decision->contributes) ZeroAll(&req.tensors);
      s = collective.AllReduce(&req.tensors, ReduceOp::kSum, deadline);
    }
    state->wait_ns.fetch_add(std::chrono::duration_cast<std::chrono::nanoseconds>(
                           std::chrono::steady_clock::now() - start)
                           .count());
    state->calls.fetch_add(1);
    // Every buffer a request holds is released before its `done` runs:
    // `done` may drop the last reference to this ReplicaComm (its thread is
    // then detached) and the task's devices, whose allocators the buffers
    // came from, may go right after.
    if (!s.ok()) {
      req.tensors.clear();
      req.done(s, {});
      continue;
    }
    state->bytes.fetch_add(nbytes);
    if (!received) {
      double total = req.tensors.back().scalar<double>();
      req.tensors.pop_back();
      if (total <= 0) {
        req.tensors.clear();
        req.done(Internal("all-reduce: no replica contributed examples to this step"), {});
        continue;
      }
      for (Tensor& t : req.tensors) {
        if (!t.RefCountIsOne()) t = t.DeepCopy();  // never write a shared buffer
        DivideInPlace(&t, total);
      }
      if (among) Forward(state.get(), decision->members, req.tensors, tag);
    }
    if (req.fused != nullptr) {
      std::vector<Tensor> views = req.fused->Split(req.tensors.front());
      req.tensors.clear();  // the views hold the buffer
      req.done(Status(), std::move(views));
      continue;
    }
    req.done(Status(), std::move(req.tensors));
  }
}

void ReplicaComm::Forward(State* state, const std::vector<int>& members,
                          const std::vector<Tensor>& result, uint32_t tag) {
  const int rank = state->options.collective->rank();
  const int size = state->options.collective->size();
  MutexLock l(state->mu);
  for (int r = 0; r < size; ++r) {
    if (std::binary_search(members.begin(), members.end(), r) || SenderFor(r, members) != rank) {
      continue;
    }
    // A receiver far behind holds the contributors back here, not the memory.
    while (!(state->stop || state->forwards.size() < kMaxForwards)) state->cv.Wait(state->mu);
    if (state->stop) return;
    state->forwards.push_back(State::Forward{result, r, tag});
    state->cv.NotifyAll();
  }
}

void ReplicaComm::ForwardLoop(std::shared_ptr<State> state) {
  const Options& options = state->options;
  for (;;) {
    State::Forward f;
    {
      MutexLock l(state->mu);
      while (!(state->stop || !state->forwards.empty())) state->cv.Wait(state->mu);
      if (state->stop) return;
      f = std::move(state->forwards.front());
      state->forwards.pop_front();
      state->cv.NotifyAll();
    }
    Status s = options.collective->Send(f.tensors, f.to, f.tag,
                                        std::chrono::steady_clock::now() + options.timeout);
    // The receiver would wait for it in vain: the group fails now.
    if (!s.ok()) options.collective->Abort(s);
  }
}

double ReplicaComm::wait_seconds() const { return double(state_->wait_ns.load()) * 1e-9; }

std::string ReplicaComm::DebugString() const {
  return "ReplicaComm rank " + std::to_string(options_.collective->rank()) + " of " +
         std::to_string(options_.collective->size());
}

}  // namespace flowstate

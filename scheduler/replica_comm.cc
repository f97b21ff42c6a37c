#include "scheduler/replica_comm.h"

#include <algorithm>
#include <deque>
#include <cstring>
#include <future>
#include <memory>
#include <optional>
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
  // Backup replicas over subgroup rounds: the reduction or receive in
  // progress, which the stall watch looks at (watch_cv: changes of it).
  struct Call {
    uint64_t seq = 0;  // calls begun
    bool active = false;
    int64_t step = 0;
    bool member = false;  // a reduction (else a receive)
    std::chrono::steady_clock::time_point since;
  };
  Call call ABSL_GUARDED_BY(mu);
  CondVar watch_cv;
  int64_t abandoned_through ABSL_GUARDED_BY(mu) = -1;  // the last step known abandoned
  // The stall timeout (Options::min_stall, or 4x the median recent step
  // period), in microseconds; 0 until a few steps have been timed.
  std::atomic<int64_t> stall_us{0};
  std::atomic<int64_t> abandoned{0};
};

ReplicaComm::ReplicaComm(Options options)
    : options_(std::move(options)), state_(std::make_shared<State>(options_)) {
  thread_ = std::thread([state = state_] { Loop(state); });
  if (options_.race != nullptr && options_.collective->supports_subgroups()) {
    forward_thread_ = std::thread([state = state_] { ForwardLoop(state); });
    stall_thread_ = std::thread([state = state_] { StallWatch(state); });
  }
}

ReplicaComm::~ReplicaComm() {
  options_.collective->Abort(Cancelled("the replica's collective was closed"));
  std::map<int, Request> pending;
  {
    MutexLock l(state_->mu);
    state_->stop = true;
    state_->cv.NotifyAll();
    state_->watch_cv.NotifyAll();
    pending.swap(state_->pending);
  }
  for (std::thread* t : {&thread_, &forward_thread_, &stall_thread_}) {
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
int64_t ReplicaComm::abandoned_steps() const { return state_->abandoned.load(); }

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
    if (next > end) std::memset(base + size_t(end) * width, 0, size_t(next - end) * width);
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
  Enqueue(bucket, Request{std::move(weighted), std::move(done), std::move(fused), false, nullptr});
}

void ReplicaComm::SubmitGather(int bucket, Tensor indices, Tensor weighted_values, double count,
                               Callback done) {
  std::vector<Tensor> rows;
  rows.push_back(std::move(indices));
  rows.push_back(std::move(weighted_values));
  rows.push_back(Tensor::Scalar<double>(count));
  Enqueue(bucket, Request{std::move(rows), std::move(done), nullptr, true, nullptr});
}

void ReplicaComm::SubmitLookup(int bucket, std::vector<Tensor> ids, RowsFn rows, Callback done) {
  ids.push_back(Tensor::Scalar<double>(0.0));
  Request r{std::move(ids), std::move(done), nullptr, false, std::move(rows)};
  Enqueue(bucket, std::move(r));
}

void ReplicaComm::Enqueue(int bucket, Request request) {
  MutexLock l(state_->mu);
  if (bucket == 0) state_->steps_begun.fetch_add(1);
  if (state_->stop || bucket >= options_.num_buckets || state_->pending.count(bucket)) {
    request.done(Internal("_AllReduce: bucket " + std::to_string(bucket) +
                          (state_->stop ? " after the collective was closed"
                                        : " handed in twice or out of range")),
                 {});
    return;
  }
  state_->pending.emplace(bucket, std::move(request));
  state_->cv.NotifyAll();
}

StatusOr<std::vector<std::vector<Tensor>>> ReplicaComm::JoinWithZeros(
    const std::vector<BucketLayout>& layouts) {
  std::vector<std::promise<StatusOr<std::vector<Tensor>>>> results(layouts.size());
  for (size_t b = 0; b < layouts.size(); ++b) {
    auto deliver = [p = &results[b]](const Status& s, std::vector<Tensor> out) {
      if (s.ok()) {
        p->set_value(std::move(out));
      } else {
        p->set_value(s);
      }
    };
    const auto& bucket = layouts[b].tensors;
    if (layouts[b].gather) {
      // No rows (the shapes say a first dimension of 0).
      if (bucket.size() != 2) {
        deliver(Internal("JoinWithZeros: a bucket of rows has indices and values"), {});
        continue;
      }
      SubmitGather(int(b), Tensor(bucket[0].first, bucket[0].second),
                   Tensor(bucket[1].first, bucket[1].second), 0.0, deliver);
      continue;
    }
    // The same layout as the other ranks' kernels hand in.
    std::shared_ptr<const FusedBucket> fused = FusedBucket::For(bucket);
    std::vector<Tensor> zeros;
    if (fused != nullptr) {
      Tensor flat(fused->dtype, TensorShape({fused->elements}));
      if (flat.TotalBytes() > 0) std::memset(flat.raw_data(), 0, flat.TotalBytes());
      zeros.push_back(std::move(flat));
    } else {
      for (const auto& [dtype, shape] : bucket) {
        Tensor z(dtype, shape);
        if (z.TotalBytes() > 0) std::memset(z.raw_data(), 0, z.TotalBytes());  // empty: no buffer
        zeros.push_back(std::move(z));
      }
    }
    Submit(int(b), std::move(zeros), 0.0, deliver, std::move(fused));
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
    if (t.TotalBytes() == 0) continue;  // an empty tensor has no buffer
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

Mutex test_stall_mu;
std::shared_ptr<const ReplicaComm::TestStallHook> test_stall_hook ABSL_GUARDED_BY(test_stall_mu);

std::shared_ptr<const ReplicaComm::TestStallHook> TestStall() {
  MutexLock l(test_stall_mu);
  return test_stall_hook;
}

// Hands a request its result: the tensors, or views of the flat one.
void Deliver(ReplicaComm::Callback& done, std::vector<Tensor> tensors,
             const std::shared_ptr<const ReplicaComm::FusedBucket>& fused) {
  if (fused != nullptr) {
    std::vector<Tensor> views = fused->Split(tensors.front());
    tensors.clear();  // the views hold the buffer
    done(Status(), std::move(views));
    return;
  }
  done(Status(), std::move(tensors));
}

// A lookup's rounds (ReplicaComm::SubmitLookup): every replica's ids of
// each part (and its counts, to find its own among them), the answers of
// the parts' holders summed with the others' zeros, then this replica's
// rows of each part.
StatusOr<std::vector<Tensor>> LookUp(Collective& collective, std::vector<Tensor> ids,
                                     const ReplicaComm::RowsFn& answer, Collective::Deadline deadline,
                                     int64_t* bytes) {
  const size_t parts = ids.size();
  Tensor counts(DataType::kInt64, TensorShape({1, int64_t(parts)}));
  for (size_t p = 0; p < parts; ++p) counts.data<int64_t>()[p] = ids[p].num_elements();
  ids.push_back(std::move(counts));
  FS_RETURN_IF_ERROR(collective.AllGather(&ids, deadline));
  const Tensor all_counts = std::move(ids.back());  // [replicas, parts]
  ids.pop_back();
  FS_ASSIGN_OR_RETURN(std::vector<Tensor> rows, answer(ids));
  if (rows.size() != parts) return Internal("_SharedGather: rows for the wrong number of parts");
  for (size_t p = 0; p < parts; ++p) {
    if (rows[p].shape().rank() < 1 || rows[p].shape().dim(0) != ids[p].num_elements()) {
      return Internal("_SharedGather: " + std::to_string(ids[p].num_elements()) + " ids of part " +
                      std::to_string(p) + " gave rows " + rows[p].shape().ToString());
    }
  }
  for (const Tensor& t : rows) *bytes += int64_t(t.TotalBytes());
  FS_RETURN_IF_ERROR(collective.AllReduce(&rows, ReduceOp::kSum, deadline));
  std::vector<Tensor> mine;
  for (size_t p = 0; p < parts; ++p) {
    int64_t offset = 0;
    for (int r = 0; r < collective.rank(); ++r) offset += all_counts.data<int64_t>()[size_t(r) * parts + p];
    const int64_t k = all_counts.data<int64_t>()[size_t(collective.rank()) * parts + p];
    mine.push_back(rows[p].Slice(offset, offset + k));
  }
  return mine;
}

}  // namespace

void ReplicaComm::SetTestStallHook(TestStallHook hook) {
  MutexLock l(test_stall_mu);
  test_stall_hook = hook ? std::make_shared<const TestStallHook>(std::move(hook)) : nullptr;
}

void ReplicaComm::Loop(std::shared_ptr<State> state) {
  const Options& options = state->options;
  Collective& collective = *options.collective;
  const int rank = collective.rank();
  // Backup replicas on a collective with subgroup rounds: the step's
  // contributors reduce among themselves, and the others receive the result.
  const bool among = options.race != nullptr && collective.supports_subgroups();
  int64_t step = 0;  // the step of the bucket in hand
  StatusOr<StepRace::Decision> decision = StepRace::Decision{};
  // Among: a contributor's reduced buckets of this step (divided), held
  // until the step is settled, with their tags.
  std::vector<std::pair<Request, uint32_t>> held;
  // Among: the periods of this rank's last steps (from the end of one to
  // the end of the next), for the stall timeout.
  std::deque<int64_t> periods_us;
  std::optional<std::chrono::steady_clock::time_point> last_end;
  auto step_ended = [&]() {
    const auto now = std::chrono::steady_clock::now();
    if (last_end.has_value()) {
      periods_us.push_back(std::chrono::duration_cast<std::chrono::microseconds>(now - *last_end).count());
    }
    last_end = now;
    if (periods_us.size() > 16) periods_us.pop_front();
    if (periods_us.size() < 4) return;
    std::vector<int64_t> sorted(periods_us.begin(), periods_us.end());
    std::nth_element(sorted.begin(), sorted.begin() + sorted.size() / 2, sorted.end());
    state->stall_us = std::max<int64_t>(
        4 * sorted[sorted.size() / 2],
        std::chrono::duration_cast<std::chrono::microseconds>(options.min_stall).count());
  };
  int64_t recorded_abandoned = -1;  // the last abandoned step counted
  for (;;) {
    Request req;
    int bucket = 0;
    {
      MutexLock l(state->mu);
      while (!state->stop && state->pending.count(state->next_bucket) == 0) state->cv.Wait(state->mu);
      if (state->stop) break;
      bucket = state->next_bucket;
      auto it = state->pending.find(bucket);
      req = std::move(it->second);
      state->pending.erase(it);
      state->next_bucket = (state->next_bucket + 1) % options.num_buckets;
    }
    const int64_t this_step = step;
    const bool last = bucket == options.num_buckets - 1;
    if (last) ++step;
    // Every call of a step shares one tag per bucket.
    const uint32_t tag = uint32_t(this_step * options.num_buckets + bucket);
    int64_t nbytes = 0;
    for (const Tensor& t : req.tensors) nbytes += int64_t(t.TotalBytes());
    const auto start = std::chrono::steady_clock::now();
    // A collective call done: its time and count in the totals.
    auto count_call = [&]() {
      state->wait_ns.fetch_add(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                   std::chrono::steady_clock::now() - start)
                                   .count());
      state->calls.fetch_add(1);
    };
    const auto deadline = start + options.timeout;
    if (options.race != nullptr && bucket == 0) {
      // The step's first bucket: who contributes to it.
      const bool has_examples = req.tensors.back().scalar<double>() > 0;
      // Across processes, a step whose other replicas stall is decided
      // without them after the stall timeout (an epoch's last step, where
      // every replica must arrive, too).
      decision = options.race->Decide(
          this_step, rank, has_examples, deadline,
          among ? std::chrono::duration_cast<std::chrono::milliseconds>(
                      std::chrono::microseconds(state->stall_us.load()))
                : std::chrono::milliseconds(0));
      state->dropped_last = decision.ok() && has_examples && !decision->contributes;
    }
    // Every buffer a request holds is released before its `done` runs:
    // `done` may drop the last reference to this ReplicaComm (its thread is
    // then detached) and the task's devices, whose allocators the buffers
    // came from, may go right after.
    auto fail = [](Request* r, const Status& s) {
      r->tensors.clear();
      r->rows = nullptr;
      r->done(s, {});
    };
    auto fail_held = [&](const Status& s) {
      for (auto& [r, t] : held) fail(&r, s);
      held.clear();
    };
    if (among) {
      // A step given up: every replica applies zeros for each of its buckets.
      auto abandoned = [&]() {
        MutexLock l(state->mu);
        return state->abandoned_through >= this_step;
      };
      // `current`: the request in hand, unless it is held already.
      auto give_up = [&](bool member, Request* current) {
        if (recorded_abandoned < this_step) {
          recorded_abandoned = this_step;
          state->abandoned.fetch_add(1);
          state->dropped_last = true;
          if (member) (void)options.race->RecordAbandoned(this_step, rank);
        }
        for (auto& [r, t] : held) {
          ZeroAll(&r.tensors);
          Deliver(r.done, std::move(r.tensors), r.fused);
        }
        held.clear();
        if (current == nullptr) return;
        current->tensors.pop_back();  // the count
        ZeroAll(&current->tensors);
        Deliver(current->done, std::move(current->tensors), current->fused);
      };
      if (!decision.ok() || req.gather || req.rows) {
        const Status s = !decision.ok() ? decision.status()
                         : req.rows     ? Unimplemented("_SharedGather: shared tables are not "
                                                        "looked up with backup replicas")
                                        : Unimplemented("_AllGather: rows are not gathered with "
                                                        "backup replicas across processes");
        fail_held(s);
        fail(&req, s);
        continue;
      }
      const bool member = decision->contributes;
      if (member) {
        if (auto hook = TestStall()) (*hook)(rank, this_step, bucket);
      }
      if (abandoned()) {
        give_up(member, &req);
        continue;
      }
      {
        MutexLock l(state->mu);
        state->call = State::Call{state->call.seq + 1, true, this_step, member,
                                  std::chrono::steady_clock::now()};
        state->watch_cv.NotifyAll();
      }
      Status s;
      if (member) {
        s = collective.AllReduceAmong(&req.tensors, decision->members, tag, deadline);
      } else {
        Tensor count = std::move(req.tensors.back());
        req.tensors.pop_back();  // divided already by the sender
        s = collective.Recv(&req.tensors, SenderFor(rank, decision->members), tag, deadline);
        req.tensors.push_back(std::move(count));
      }
      {
        MutexLock l(state->mu);
        state->call.active = false;
        state->watch_cv.NotifyAll();
      }
      count_call();
      if (!s.ok() || abandoned()) {
        if (abandoned()) {
          give_up(member, &req);
        } else {
          fail_held(s);
          fail(&req, s);
        }
        continue;
      }
      state->bytes.fetch_add(nbytes);
      const double total = req.tensors.back().scalar<double>();
      req.tensors.pop_back();
      if (!member) {
        // Sent only once the step was settled done.
        if (last) step_ended();
        Deliver(req.done, std::move(req.tensors), req.fused);
        continue;
      }
      if (total <= 0) {
        fail_held(Internal("all-reduce: no replica contributed examples to this step"));
        fail(&req, Internal("all-reduce: no replica contributed examples to this step"));
        continue;
      }
      for (Tensor& t : req.tensors) {
        if (!t.RefCountIsOne()) t = t.DeepCopy();  // never write a shared buffer
        DivideInPlace(&t, total);
      }
      held.emplace_back(std::move(req), tag);
      if (!last) continue;
      StatusOr<StepRace::Outcome> outcome =
          options.race->Settle(this_step, StepRace::Outcome::kDone, deadline);
      if (!outcome.ok()) {
        fail_held(outcome.status());
        continue;
      }
      if (*outcome == StepRace::Outcome::kAbandoned) {
        {
          MutexLock l(state->mu);
          state->abandoned_through = std::max(state->abandoned_through, this_step);
        }
        give_up(member, nullptr);  // `req` is held
        continue;
      }
      step_ended();
      for (auto& [r, t] : held) {
        Forward(state.get(), decision->members, r.tensors, t);
        Deliver(r.done, std::move(r.tensors), r.fused);
      }
      held.clear();
      continue;
    }
    if (req.rows) {
      Status s = decision.ok() && options.race == nullptr
                     ? Status()
                     : Unimplemented("_SharedGather: shared tables are not looked up with "
                                     "backup replicas");
      req.tensors.pop_back();  // the count
      int64_t answered = 0;  // the rows summed
      StatusOr<std::vector<Tensor>> mine =
          s.ok() ? LookUp(collective, std::move(req.tensors), req.rows, deadline, &answered)
                 : StatusOr<std::vector<Tensor>>(s);
      req.tensors.clear();
      req.rows = nullptr;  // the parts' buffers, before `done`
      count_call();
      if (!mine.ok()) {
        fail(&req, mine.status());
        continue;
      }
      state->bytes.fetch_add(nbytes + answered);
      Deliver(req.done, std::move(mine).value(), nullptr);
      continue;
    }
    Status s;
    if (!decision.ok()) {
      s = decision.status();
    } else if (req.gather) {
      if (options.race != nullptr && !decision->contributes) {
        // Dropped: no rows, count 0.
        for (Tensor& t : req.tensors) {
          TensorShape none = t.shape();
          if (none.rank() > 0) none.set_dim(0, 0);
          t = Tensor(t.dtype(), none);
        }
        req.tensors.back() = Tensor::Scalar<double>(0);
      }
      // The count travels as one row of its own: the sum is over the rows.
      req.tensors.back() = Tensor::FromVector<double>({req.tensors.back().scalar<double>()}, TensorShape({1}));
      s = collective.AllGather(&req.tensors, deadline);
      if (s.ok()) {
        const Tensor counts = std::move(req.tensors.back());
        double total = 0;
        for (int64_t r = 0; r < counts.num_elements(); ++r) total += counts.data<double>()[r];
        req.tensors.back() = Tensor::Scalar<double>(total);
      }
    } else {
      if (options.race != nullptr && !decision->contributes) ZeroAll(&req.tensors);
      s = collective.AllReduce(&req.tensors, ReduceOp::kSum, deadline);
    }
    count_call();
    if (!s.ok()) {
      fail(&req, s);
      continue;
    }
    state->bytes.fetch_add(nbytes);
    double total = req.tensors.back().scalar<double>();
    req.tensors.pop_back();
    if (total <= 0) {
      fail(&req, Internal("all-reduce: no replica contributed examples to this step"));
      continue;
    }
    for (size_t i = req.gather ? 1 : 0; i < req.tensors.size(); ++i) {  // not the indices
      Tensor& t = req.tensors[i];
      if (!t.RefCountIsOne()) t = t.DeepCopy();  // never write a shared buffer
      DivideInPlace(&t, total);
    }
    Deliver(req.done, std::move(req.tensors), req.fused);
  }
  // Closed with buckets of a step held: their kernels must still end.
  for (auto& [r, t] : held) {
    r.tensors.clear();
    r.done(Cancelled("the replica's collective was closed"), {});
  }
}

void ReplicaComm::StallWatch(std::shared_ptr<State> state) {
  const Options& options = state->options;
  MutexLock l(state->mu);
  for (;;) {
    while (!state->stop && !state->call.active) state->watch_cv.Wait(state->mu);
    if (state->stop) return;
    const State::Call call = state->call;
    auto same = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(state->mu) {
      return !state->stop && state->call.active && state->call.seq == call.seq;
    };
    // Looks from the second poll on: most calls end before.
    auto next = call.since + 2 * kStallPoll;
    for (;;) {
      while (same() && state->watch_cv.WaitUntil(state->mu, next)) {
      }
      if (!same() || state->abandoned_through >= call.step) break;
      const auto now = std::chrono::steady_clock::now();
      const int64_t stall_us = state->stall_us.load();
      const bool stalled =
          call.member && stall_us > 0 && now - call.since > std::chrono::microseconds(stall_us);
      l.Unlock();
      // Bounded: the destructor joins this thread.
      StatusOr<StepRace::Outcome> outcome =
          stalled ? options.race->Settle(call.step, StepRace::Outcome::kAbandoned,
                                         now + std::min<std::chrono::milliseconds>(
                                                   options.timeout, std::chrono::seconds(10)))
                  : options.race->OutcomeOf(call.step);
      l.Lock();
      if (outcome.ok() && *outcome == StepRace::Outcome::kDone) break;  // it will end
      if (outcome.ok() && *outcome == StepRace::Outcome::kAbandoned) {
        state->abandoned_through = std::max(state->abandoned_through, call.step);
        l.Unlock();
        for (int b = 0; b < options.num_buckets; ++b) {
          options.collective->Abandon(uint32_t(call.step * options.num_buckets + b));
        }
        l.Lock();
        break;
      }
      next = std::chrono::steady_clock::now() + kStallPoll;
    }
    // The call ends (or the step is settled): wait for the next.
    while (same()) state->watch_cv.Wait(state->mu);
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
    while (!state->stop && state->forwards.size() >= kMaxForwards) state->cv.Wait(state->mu);
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
      while (!state->stop && state->forwards.empty()) state->cv.Wait(state->mu);
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

#include "scheduler/collective.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <string>

#include "graph/mutex.h"
#include "scheduler/reduce_loops.h"

namespace flowstate {
namespace {

// The ranks' tensors in one round (the k-th call of every rank). Phase 1:
// ranks arrive; the last one checks the inputs. Phase 2: each rank reduces
// its slice of every tensor, reading every rank's tensors and writing the
// sum into all of them in place (no buffer is allocated per round), so no
// rank returns before all slices are done.
struct Round {
  explicit Round(int size) : inputs(size), ops(size) {}
  std::vector<std::vector<Tensor>*> inputs;  // null until the rank arrived
  std::vector<ReduceOp> ops;
  int arrived = 0;
  int reduced = 0;
  bool ready = false;  // everyone arrived, the inputs agree: phase 2 runs
  Status error;        // the round failed (mismatch, a deadline)
};

bool Supported(DataType t) {
  return t == DataType::kFloat32 || t == DataType::kFloat64 || t == DataType::kInt32 ||
         t == DataType::kInt64;
}

std::string Describe(const Tensor& t) {
  if (!t.IsInitialized()) return "an empty tensor";
  return std::string(DataTypeName(t.dtype())) + t.shape().ToString();
}

// INVALID_ARGUMENT naming the first rank whose call differs from rank 0's.
Status Check(const Round& r) {
  const std::vector<Tensor>& first = *r.inputs[0];
  for (size_t i = 0; i < first.size(); ++i) {
    if (!first[i].IsInitialized() || !Supported(first[i].dtype())) {
      return InvalidArgument("all-reduce: tensor " + std::to_string(i) + " of rank 0 is " +
                             Describe(first[i]) +
                             "; all-reduce takes float32, float64, int32 and int64");
    }
  }
  for (size_t rank = 1; rank < r.inputs.size(); ++rank) {
    const std::vector<Tensor>& mine = *r.inputs[rank];
    const std::string who = "all-reduce: rank " + std::to_string(rank);
    if (r.ops[rank] != r.ops[0]) {
      return InvalidArgument(who + " asks for another reduction (sum or mean) than rank 0");
    }
    if (mine.size() != first.size()) {
      return InvalidArgument(who + " passed " + std::to_string(mine.size()) +
                             " tensors, rank 0 passed " + std::to_string(first.size()));
    }
    for (size_t i = 0; i < first.size(); ++i) {
      if (!mine[i].IsInitialized() || mine[i].dtype() != first[i].dtype() ||
          mine[i].shape() != first[i].shape()) {
        return InvalidArgument(who + ": tensor " + std::to_string(i) + " is " +
                               Describe(mine[i]) + ", rank 0's is " + Describe(first[i]));
      }
    }
  }
  return Status();
}

// Every input's [lo, hi) = in_0 + in_1 + ... (in rank order), then / n for
// a mean: the sum goes to rank 0's tensor and is copied to the others'.
// Ranks reduce disjoint slices, so each reads and writes only its own.
template <typename T>
void ReduceSliceInPlace(const std::vector<std::vector<Tensor>*>& inputs, size_t index,
                        ReduceOp op, int64_t lo, int64_t hi) {
  T* o = (*inputs[0])[index].data<T>();
  for (size_t r = 1; r < inputs.size(); ++r) {
    const T* in = (*inputs[r])[index].data<T>();
    reduce_loops::Sum<T>(o + lo, o + lo, in + lo, size_t(hi - lo));
  }
  if (op == ReduceOp::kMean) reduce_loops::Divide<T>(o + lo, size_t(hi - lo), T(inputs.size()));
  for (size_t r = 1; r < inputs.size() && hi > lo; ++r) {
    T* dst = (*inputs[r])[index].data<T>();
    std::memcpy(dst + lo, o + lo, size_t(hi - lo) * sizeof(T));
  }
}

}  // namespace

struct InProcessCollective::Group {
  explicit Group(int n) : size(n), next_round(n, 0) {}
  const int size;
  Mutex mu;
  CondVar cv;  // any change of a round or of `aborted`
  Status aborted ABSL_GUARDED_BY(mu);
  std::vector<int64_t> next_round ABSL_GUARDED_BY(mu);                  // per rank
  std::map<int64_t, std::shared_ptr<Round>> rounds ABSL_GUARDED_BY(mu);  // not yet joined by all
};

std::vector<std::unique_ptr<InProcessCollective>> InProcessCollective::Create(int size) {
  auto group = std::make_shared<Group>(size);
  std::vector<std::unique_ptr<InProcessCollective>> out;
  for (int r = 0; r < size; ++r) out.emplace_back(new InProcessCollective(group, r));
  return out;
}

int InProcessCollective::size() const { return group_->size; }

Status Collective::AllReduceAmong(std::vector<Tensor>*, const std::vector<int>&, uint32_t,
                                  Deadline) {
  return Unimplemented("this collective has no rounds of some ranks only");
}

Status Collective::Send(const std::vector<Tensor>&, int, uint32_t, Deadline) {
  return Unimplemented("this collective has no transfers between two ranks");
}

Status Collective::Recv(std::vector<Tensor>*, int, uint32_t, Deadline) {
  return Unimplemented("this collective has no transfers between two ranks");
}

void Collective::Abandon(uint32_t) {}  // no subgroup rounds to give up

Status Collective::AllGather(std::vector<Tensor>* tensors, Deadline deadline) {
  const int64_t p = size(), me = rank(), k = int64_t(tensors->size());
  for (int64_t i = 0; i < k; ++i) {
    const Tensor& t = (*tensors)[size_t(i)];
    if (!t.IsInitialized() || t.shape().rank() == 0 || !Supported(t.dtype())) {
      return InvalidArgument("all-gather: tensor " + std::to_string(i) + " is " + Describe(t) +
                             "; all-gather takes tensors of rank 1 or more of float32, float64, "
                             "int32 or int64");
    }
  }
  // Round 1: every rank's row counts, rank r's k of them at r * k.
  std::vector<Tensor> counts = {Tensor(DataType::kInt64, TensorShape({p * k}))};
  int64_t* c = counts[0].data<int64_t>();
  std::fill(c, c + p * k, int64_t(0));
  for (int64_t i = 0; i < k; ++i) c[me * k + i] = (*tensors)[size_t(i)].shape().dim(0);
  FS_RETURN_IF_ERROR(AllReduce(&counts, ReduceOp::kSum, deadline));
  c = counts[0].data<int64_t>();
  // Round 2: this rank's rows at their offset in zeros of every rank's.
  std::vector<Tensor> placed;
  placed.reserve(size_t(k));
  for (int64_t i = 0; i < k; ++i) {
    const Tensor& t = (*tensors)[size_t(i)];
    int64_t total = 0, offset = 0;
    for (int64_t r = 0; r < p; ++r) {
      if (r == me) offset = total;
      total += c[r * k + i];
    }
    TensorShape shape = t.shape();
    shape.set_dim(0, total);
    Tensor all(t.dtype(), shape);
    const size_t row = total > 0 ? all.TotalBytes() / size_t(total) : 0;
    char* base = static_cast<char*>(all.raw_data());
    if (all.TotalBytes() > 0) {
      std::memset(base, 0, size_t(offset) * row);
      if (t.TotalBytes() > 0) std::memcpy(base + size_t(offset) * row, t.raw_data(), t.TotalBytes());
      const size_t end = size_t(offset) * row + t.TotalBytes();
      std::memset(base + end, 0, all.TotalBytes() - end);
    }
    placed.push_back(std::move(all));
  }
  FS_RETURN_IF_ERROR(AllReduce(&placed, ReduceOp::kSum, deadline));
  *tensors = std::move(placed);
  return Status();
}

void InProcessCollective::Abort(const Status& status) {
  Group& g = *group_;
  MutexLock l(g.mu);
  if (!g.aborted.ok()) return;
  g.aborted = status.ok() ? Cancelled("the collective was aborted") : status;
  g.cv.NotifyAll();
}

Status InProcessCollective::AllReduce(std::vector<Tensor>* tensors, ReduceOp op,
                                      Deadline deadline) {
  Group& g = *group_;
  std::shared_ptr<Round> round;
  int64_t round_id = 0;
  {
    MutexLock l(g.mu);
    if (!g.aborted.ok()) return g.aborted;
    round_id = g.next_round[rank_]++;
    std::shared_ptr<Round>& slot = g.rounds[round_id];
    if (slot == nullptr) slot = std::make_shared<Round>(g.size);
    round = slot;
    Round& r = *round;
    ++r.arrived;
    if (r.arrived == g.size) g.rounds.erase(round_id);  // everyone holds it now
    if (!r.error.ok()) return r.error;  // the round failed before this rank came
    // The sum is written into every rank's tensors in place: a buffer that
    // is shared with anything else gets a copy of its own first.
    for (Tensor& t : *tensors) {
      if (!t.RefCountIsOne() && t.TotalBytes() > 0) {
        Tensor own(t.dtype(), t.shape());
        own.CopyFromBytes(t.raw_data(), t.TotalBytes());
        t = std::move(own);
      }
    }
    r.inputs[rank_] = tensors;
    r.ops[rank_] = op;
    if (r.arrived == g.size) {
      r.error = Check(r);
      if (r.error.ok()) r.ready = true;
      g.cv.NotifyAll();
    } else {
      auto done = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(g.mu) { return r.ready || !r.error.ok() || !g.aborted.ok(); };
      while (!done() && g.cv.WaitUntil(g.mu, deadline)) {
      }
      if (!done()) {
        std::string missing;
        for (int k = 0; k < g.size; ++k) {
          if (r.inputs[k] == nullptr) missing += (missing.empty() ? "" : ", ") + std::to_string(k);
        }
        r.error = DeadlineExceeded("all-reduce round " + std::to_string(round_id) +
                                   ": rank(s) " + missing + " did not join by the deadline");
        g.cv.NotifyAll();
      }
    }
    // Once phase 2 runs, every rank takes part: the others read our inputs.
    if (!r.ready) {
      r.inputs[rank_] = nullptr;
      return !r.error.ok() ? r.error : g.aborted;
    }
  }

  // Phase 2: this rank's slice of every tensor, then wait for the others'
  // (until then they read this rank's tensors).
  Round& r = *round;
  for (size_t i = 0; i < tensors->size(); ++i) {
    const int64_t n = (*tensors)[i].num_elements();
    const int64_t lo = n * rank_ / g.size, hi = n * (rank_ + 1) / g.size;
    if (lo == hi) continue;
    DispatchDataType((*tensors)[i].dtype(), [&]<typename T>() {
      if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double> ||
                    std::is_same_v<T, int32_t> || std::is_same_v<T, int64_t>) {
        ReduceSliceInPlace<T>(r.inputs, i, op, lo, hi);
      }
    });
  }
  {
    MutexLock l(g.mu);
    if (++r.reduced == g.size) g.cv.NotifyAll();
    // Bounded without a deadline: every rank is here and only computes.
    while (r.reduced != g.size) g.cv.Wait(g.mu);
  }
  return Status();
}

namespace {
Mutex& FactoryMu() {
  static Mutex mu;
  return mu;
}
std::map<std::string, CollectiveFactory>& Factories() {
  static auto* f = new std::map<std::string, CollectiveFactory>();
  return *f;
}
Mutex& RaceFactoryMu() {
  static Mutex mu;
  return mu;
}
std::map<std::string, StepRaceFactory>& RaceFactories() {
  static auto* f = new std::map<std::string, StepRaceFactory>();
  return *f;
}

}  // namespace

void RegisterCollectiveFactory(const std::string& kind, CollectiveFactory factory) {
  MutexLock l(FactoryMu());
  Factories()[kind] = std::move(factory);
}

StatusOr<std::unique_ptr<Collective>> CreateCollective(const CollectiveGroupSpec& spec) {
  CollectiveFactory f;
  {
    MutexLock l(FactoryMu());
    auto it = Factories().find(spec.kind);
    if (it == Factories().end()) {
      return NotFound("no collective of kind '" + spec.kind +
                      "' in this process (a task trains replicas across processes only when it "
                      "links and registers that collective)");
    }
    f = it->second;
  }
  if (spec.size < 1 || spec.rank < 0 || spec.rank >= spec.size) {
    return InvalidArgument("collective rank " + std::to_string(spec.rank) + " of size " +
                           std::to_string(spec.size) + " is out of range");
  }
  return f(spec);
}

void RegisterStepRaceFactory(const std::string& kind, StepRaceFactory factory) {
  MutexLock l(RaceFactoryMu());
  RaceFactories()[kind] = std::move(factory);
}

StatusOr<std::shared_ptr<StepRace>> CreateStepRace(const CollectiveGroupSpec& spec,
                                                   int contributors) {
  StepRaceFactory f;
  {
    MutexLock l(RaceFactoryMu());
    auto it = RaceFactories().find(spec.kind);
    if (it == RaceFactories().end()) {
      return NotFound("no backup-replica race for collectives of kind '" + spec.kind +
                      "' in this process");
    }
    f = it->second;
  }
  if (spec.size < 1 || spec.rank < 0 || spec.rank >= spec.size || contributors < 1 ||
      contributors > spec.size) {
    return InvalidArgument("backup-replica race: rank " + std::to_string(spec.rank) + " of " +
                           std::to_string(spec.size) + " with " + std::to_string(contributors) +
                           " contributors is out of range");
  }
  return f(spec, contributors);
}

}  // namespace flowstate

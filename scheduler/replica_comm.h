// The all-reduce of data-parallel training: ReplicaComm, the resource through
// which a replica's _AllReduce kernels reach its Collective (the in-process
// StepRace of backup replicas is in scheduler/local_step_race.h). The
// kernels themselves are in collective_kernels.cc.
//
// Each replica of a training job has its own session and ResourceMgr; the
// job creates one ReplicaComm there (container kReplicaContainer, name = the
// _AllReduce nodes' `group`) holding the replica's Collective participant.
// An _AllReduce kernel (AsyncOpKernel) weights its bucket by the replica's
// examples, hands it to the ReplicaComm and returns: the ReplicaComm's
// communication thread runs the collective calls in bucket order (bucket 0,
// 1, ... of a step, then the next step's), so that the k-th call of every
// rank is the same bucket whatever order the executor finishes the buckets
// in, and no executor thread waits on the network. The thread then divides
// by the sum of the examples and calls the kernel's `done`. A bucket of
// several tensors of one dtype travels as one flat tensor (FusedBucket):
// the kernel weights each gradient straight into its place there and its
// outputs are views of the reduced tensor, so the collective reduces it in
// place with no copy in or out.
//
// A replica that does not compute a step (no data left in the epoch, or a
// backup replica that abandoned it) joins every bucket of the step with
// zeros and count 0 through JoinWithZeros, and feeds the results to its
// optimizer.
//
// Backup replicas (Options::race): when a step's first bucket is handed in,
// the communication thread asks the race who contributes to the step
// (StepRace::Decide). On a collective with subgroup rounds (across
// processes) the contributors reduce every bucket of the step among
// themselves, so that the step never waits for the others; each of the
// others receives the step's result from one contributor (whose second
// thread sends it, in order, however late the receiver comes: at most
// kMaxForwards results wait) and applies it like everyone else, so the
// replicas stay identical. A replica whose next step is decided before it
// starts is Behind and computes that step on one example, to catch up. On
// a collective of one process, a dropped replica joins a round of every
// replica with zeros.
//
// A contributor that stops in the middle of a step (stopped, swapped out,
// starved of CPU) would hold that step. So across processes a step can be
// abandoned: a contributor holds its buckets' results until the step is
// settled (StepRace::Settle: the first proposal wins); once its last
// bucket is reduced it proposes "done", and a third thread, the stall
// watch, proposes "abandoned" for it when one of its reductions has waited
// longer than the stall timeout (Options::min_stall, or four times the
// median of its recent step periods when that is longer). Waits of more
// than kStallPoll also read the step's outcome, so that every replica,
// the stalled one once it wakes, learns an abandoned step and gives up its
// reductions and receives of it (Collective::Abandon). An abandoned step
// applies a zero gradient on every replica (identical again); it counts as
// dropped for its contributors, and its rows are not carried over.
//
// Thread safety: ReplicaComm and every StepRace are thread-safe. A ReplicaComm's
// destructor aborts its collective and joins its threads (detaches one
// when it runs on it: a callback dropped the last reference).
#ifndef FLOWSTATE_SCHEDULER_REPLICA_COMM_H_
#define FLOWSTATE_SCHEDULER_REPLICA_COMM_H_

#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "graph/attr_value.h"
#include "graph/mutex.h"
#include "graph/status.h"
#include "graph/tensor.h"
#include "scheduler/collective.h"
#include "state/resource_mgr.h"

namespace flowstate {

// The container of ReplicaComm resources.
inline constexpr const char* kReplicaContainer = "_replicas";

// A replica's place in a collective group across processes, as the
// _CreateReplicaComm node of its graph carries it to its task: the group
// (CollectiveGroupSpec), the ReplicaComm's name and options. ToNode and
// FromNode are the one encoding of it in a graph. Plain value.
struct ReplicaGroupSpec {
  CollectiveGroupSpec group;
  std::string comm = "replicas";  // the ReplicaComm's name (the _AllReduce nodes' `group`)
  int num_buckets = 1;
  std::chrono::milliseconds allreduce_timeout{std::chrono::minutes(5)};
  int contributors = 0;  // > 0: backup replicas (the race's places)

  // A _CreateReplicaComm node named `name` on `device`.
  NodeDef ToNode(const std::string& name, const std::string& device) const;
  // INVALID_ARGUMENT naming the node and the attribute when one is missing
  // or of another kind.
  static StatusOr<ReplicaGroupSpec> FromNode(const NodeDef& node);
};

class ReplicaComm final : public ResourceBase {
 public:
  struct Options {
    std::shared_ptr<Collective> collective;  // this replica's participant
    int num_buckets = 1;
    std::chrono::milliseconds timeout{std::chrono::minutes(5)};  // per collective call
    std::shared_ptr<StepRace> race;  // null: every replica contributes
    // Backup replicas over subgroup rounds: a reduction of a step that
    // waits longer than this (or four times the recent step period) gives
    // the step up.
    std::chrono::milliseconds min_stall{250};
  };
  using Callback = std::function<void(const Status&, std::vector<Tensor>)>;

  // Where the tensors of a bucket lie in one flat tensor of their dtype:
  // each at an offset that keeps it 64-byte aligned, the gaps zero. Every
  // rank computes the same layout from the same dtypes and shapes, so the
  // ranks' calls match. Immutable values.
  struct FusedBucket {
    DataType dtype = DataType::kFloat32;
    int64_t elements = 0;            // of the flat tensor, gaps included
    std::vector<int64_t> offsets;    // of each tensor, in elements
    std::vector<TensorShape> shapes;
    // Null unless the bucket has two or more tensors, all of one dtype.
    static std::unique_ptr<FusedBucket> For(const std::vector<std::pair<DataType, TensorShape>>& tensors);
    // Zeros the gaps of a flat tensor of this layout (the tensors' places
    // are the caller's to fill).
    void ZeroGaps(Tensor* flat) const;
    // The tensors, as views sharing `flat`'s buffer.
    std::vector<Tensor> Split(const Tensor& flat) const;
  };

  explicit ReplicaComm(Options options);
  ~ReplicaComm() override;

  int rank() const { return options_.collective->rank(); }
  StepRace* race() const { return options_.race.get(); }
  // Steps whose bucket 0 has been handed in (the number of the next step).
  int64_t steps_begun() const;

  // Hands in bucket `bucket` of the current step: `weighted` already holds
  // count * tensor (with `fused`: one flat tensor of that layout). `done`
  // runs on the communication thread with the reduced, divided tensors (the
  // bucket's own tensors, views of the flat one when fused) or an error.
  void Submit(int bucket, std::vector<Tensor> weighted, double count, Callback done,
              std::shared_ptr<const FusedBucket> fused = nullptr);
  // Hands in a bucket of rows to gather instead (a sparse gradient): the
  // indices (int64) and the values, already count * values. `done` gets
  // every replica's rows in replica order, the values divided by the sum of
  // the counts (Collective::AllGather). Not with backup replicas across
  // processes (the training graph reduces their gradients densely).
  void SubmitGather(int bucket, Tensor indices, Tensor weighted_values, double count, Callback done);
  // Hands in a lookup of a table shared by the replicas (jobs'
  // "partitioned_tables": "shared", graph/shared_tables.h): `ids` (int64,
  // one vector per part of the table: this replica's local rows of it).
  // The communication thread gathers every replica's ids of every part
  // (Collective::AllGather, two rounds), calls `rows` with them (per part,
  // every replica's in replica order): it answers, per part, their rows
  // where this replica holds the part and zeros of the same shape where
  // not; the answers are summed over the replicas (one round; exact: one
  // holder's rows plus zeros) and `done` gets this replica's rows of each
  // part. `rows` runs on the communication thread and is destroyed before
  // `done` runs. Not with backup replicas.
  using RowsFn = std::function<StatusOr<std::vector<Tensor>>(const std::vector<Tensor>& all_ids)>;
  void SubmitLookup(int bucket, std::vector<Tensor> ids, RowsFn rows, Callback done);
  // What one bucket holds, for JoinWithZeros: the tensors' dtypes and
  // shapes, or for a bucket of rows (`gather`) their dtypes and shapes with
  // no rows (a first dimension of 0).
  struct BucketLayout {
    std::vector<std::pair<DataType, TensorShape>> tensors;
    bool gather = false;
  };
  // Joins every bucket of one step with zeros of these dtypes and shapes
  // (or no rows) and count 0; returns the results per bucket.
  StatusOr<std::vector<std::vector<Tensor>>> JoinWithZeros(const std::vector<BucketLayout>& buckets);

  // Whether this replica is behind: the last step it had examples for went
  // on without it, and the next one is decided already. Then its next step
  // computes on one example only (its gradients would not count), to catch
  // up (state/replica_input.h). False without backup replicas.
  StatusOr<bool> Behind() const;

  // Fails the group's pending and later calls (a replica's step failed).
  void Abort(const Status& s) { options_.collective->Abort(s); }

  // Totals since creation: seconds inside collective calls (waiting for the
  // other replicas, and reducing), bytes reduced, calls, steps abandoned
  // (that this replica took part in or received).
  double wait_seconds() const;
  int64_t bytes() const;
  int64_t calls() const;
  int64_t abandoned_steps() const;

  std::string DebugString() const override;

  // For tests only (no request reaches it): runs on the communication
  // thread of every ReplicaComm of the process before each reduction it
  // contributes to across processes, with its rank, step and bucket; it
  // may block there, as a contributor stopped in the middle of a step
  // would. Null: none.
  using TestStallHook = std::function<void(int rank, int64_t step, int bucket)>;
  static void SetTestStallHook(TestStallHook hook);

 private:
  struct Request {
    std::vector<Tensor> tensors;  // weighted, then the count
    Callback done;
    std::shared_ptr<const FusedBucket> fused;  // null: the tensors as they are
    bool gather = false;  // rows to gather (SubmitGather), not tensors to reduce
    RowsFn rows;          // non-null: a lookup (SubmitLookup); tensors = ids..., count 0
  };
  void Enqueue(int bucket, Request request);
  // What the communication thread uses, shared with it: a ReplicaComm
  // whose last reference is dropped on that thread (by a callback) detaches
  // it instead of joining itself, and the thread ends touching only this.
  struct State;
  static void Loop(std::shared_ptr<State> state);
  // Queues the step's result (divided) for each rank the step went on
  // without whose sender this rank is; ForwardLoop sends them in order.
  static void Forward(State* state, const std::vector<int>& members,
                      const std::vector<Tensor>& result, uint32_t tag);
  static void ForwardLoop(std::shared_ptr<State> state);
  // The stall watch (above): settles or reads the outcome of the step whose
  // reduction or receive is waiting, and abandons it when it is abandoned.
  static void StallWatch(std::shared_ptr<State> state);
  // Results queued for a slow receiver: beyond, the contributors wait.
  static constexpr size_t kMaxForwards = 1024;
  // How often the stall watch looks at a waiting call (from its second look).
  static constexpr std::chrono::milliseconds kStallPoll{50};

  const Options options_;
  std::shared_ptr<State> state_;
  std::thread thread_;
  std::thread forward_thread_;  // backup replicas over subgroup rounds only
  std::thread stall_thread_;    // likewise
};


}  // namespace flowstate

#endif  // FLOWSTATE_SCHEDULER_REPLICA_COMM_H_

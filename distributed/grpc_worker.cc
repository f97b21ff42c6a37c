#include "distributed/grpc_worker_internal.h"

#include <algorithm>
#include <atomic>
#include <map>
#include <unordered_map>
#include <vector>

#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>

#include "api/worker.grpc.pb.h"
#include "api/worker.pb.h"
#include "api/proto_convert.h"
#include "distributed/tensor_wire_internal.h"
#include "distributed/wire_internal.h"
#include "scheduler/call_frame.h"
#include "graph/mutex.h"

namespace flowstate::distributed_internal {

uint64_t CallTracker::Add(::grpc::ClientContext* ctx) {
  MutexLock l(mu_);
  calls_[next_] = ctx;
  return next_++;
}

std::string CallTracker::Remove(uint64_t token) {
  MutexLock l(mu_);
  calls_.erase(token);
  auto it = cancelled_.find(token);
  if (it == cancelled_.end()) return "";
  std::string reason = std::move(it->second);
  cancelled_.erase(it);
  return reason;
}

uint64_t CallTracker::Mark() {
  MutexLock l(mu_);
  return next_;
}

void CallTracker::CancelBefore(uint64_t mark, const std::string& reason) {
  MutexLock l(mu_);
  for (auto it = calls_.begin(); it != calls_.end() && it->first < mark;) {
    it->second->TryCancel();  // under the lock: Remove comes before the context goes
    cancelled_[it->first] = reason;
    it = calls_.erase(it);
  }
}

Status TrackedCallFailed(CallTracker* tracker, uint64_t token, const std::string& task,
                         std::string_view rpc, const ::grpc::Status& s) {
  std::string reason = tracker != nullptr ? tracker->Remove(token) : "";
  if (!reason.empty()) {
    return Unavailable(task + " is unavailable: " + std::string(rpc) +
                       " was cancelled because the task stopped answering heartbeats (" + reason + ")");
  }
  return CallFailed(task, rpc, s);
}

namespace {

template <class Req, class Resp>
struct Call {
  ::grpc::ClientContext ctx;
  Req req;
  Resp resp;
};

class RemoteGraph final : public RegisteredGraph {
 public:
  std::string handle;
  // The task's incarnation that registered it (0: not known, an older
  // task): RunGraph and DeregisterGraph name it, so that a restarted task
  // neither runs nor drops a graph of its own under the same handle.
  uint64_t incarnation = 0;
  std::vector<int> args;  // the _Arg indices of the partition
};

class GrpcRemoteWorker final : public Worker {
 public:
  explicit GrpcRemoteWorker(RemoteWorkerOptions o)
      : o_(std::move(o)), stub_(wpb::Worker::NewStub(o_.channel)) {}

  ~GrpcRemoteWorker() override {
    FlushCleanups();
    ::grpc::ClientContext ctx;
    ctx.set_deadline(DeadlineIn(std::min(o_.rpc_timeout_s, 2.0)));
    wpb::CloseSessionRequest req;
    wpb::CloseSessionResponse resp;
    req.set_session_handle(o_.session_handle);
    stub_->CloseSession(&ctx, req, &resp);  // best effort: a dead task has nothing to close
  }

  StatusOr<RegisteredGraph*> RegisterGraph(RegisterGraphRequest request) override {
    auto g = std::make_unique<RemoteGraph>();
    for (const NodeDef& n : request.graph.nodes) {
      if (n.op != "_Arg") continue;
      auto it = n.attrs.find("index");
      if (it != n.attrs.end()) g->args.push_back(int(it->second.i()));
    }
    ::grpc::ClientContext ctx;
    ctx.set_deadline(DeadlineIn(o_.rpc_timeout_s));
    ctx.set_wait_for_ready(true);
    wpb::RegisterGraphRequest req;
    wpb::RegisterGraphResponse resp;
    req.set_session_handle(o_.session_handle);
    req.set_device(request.device);
    req.set_expected_incarnation(request.incarnation);
    req.set_master_task(o_.master_task);
    req.set_master_incarnation(o_.master_incarnation);
    proto_convert::GraphToProto(request.graph, req.mutable_graph());
    const uint64_t token = o_.tracker->Add(&ctx);
    ::grpc::Status s = stub_->RegisterGraph(&ctx, req, &resp);
    if (!s.ok()) return TrackedCallFailed(o_.tracker.get(), token, o_.task, "RegisterGraph", s);
    o_.tracker->Remove(token);
    FS_RETURN_IF_ERROR(WithTask(o_.task, StatusFromProto(resp.status())));
    g->handle = resp.graph_handle();
    g->incarnation = resp.incarnation();
    std::map<std::string, std::string> pending;
    {
      MutexLock l(mu_);
      if (!registered_) pending.swap(pending_states_);
      registered_ = true;
    }
    if (!pending.empty()) {
      Status st = SendKernelStates(pending);
      if (!st.ok()) {
        DeregisterGraph(g.release());
        return st;
      }
    }
    return g.release();
  }

  void DeregisterGraph(RegisteredGraph* graph) override {
    std::unique_ptr<RemoteGraph> g(static_cast<RemoteGraph*>(graph));
    ::grpc::ClientContext ctx;
    ctx.set_deadline(DeadlineIn(std::min(o_.rpc_timeout_s, 2.0)));
    wpb::DeregisterGraphRequest req;
    wpb::DeregisterGraphResponse resp;
    req.set_session_handle(o_.session_handle);
    req.set_graph_handle(g->handle);
    req.set_expected_incarnation(g->incarnation);
    stub_->DeregisterGraph(&ctx, req, &resp);  // best effort
  }

  void RunGraph(RegisteredGraph* graph, const RunGraphArgs& args, StatusCallback done) override {
    const auto* g = static_cast<const RemoteGraph*>(graph);
    using RunCall = Call<wpb::RunGraphRequest, wpb::RunGraphResponse>;
    auto call = std::make_shared<RunCall>();
    call->ctx.set_deadline(DeadlineIn(o_.step_timeout_s));
    call->ctx.set_wait_for_ready(true);
    call->req.set_session_handle(o_.session_handle);
    call->req.set_graph_handle(g->handle);
    call->req.set_expected_incarnation(g->incarnation);
    call->req.set_step_id(args.step_id);
    if (args.iterations > 1) call->req.set_iterations(args.iterations);
    {
      MutexLock l(mu_);
      for (int64_t s : to_clean_) call->req.add_cleanup_step_ids(s);
      to_clean_.clear();
    }
    CallFrame* frame = args.call_frame;
    if (frame != nullptr) {
      call->req.set_num_rets(int(frame->rets().size()));
      for (int i : g->args) {
        if (i < 0 || i >= frame->num_args()) continue;
        wpb::IndexedTensor* a = call->req.add_args();
        a->set_index(i);
        EncodeTensor(frame->arg(i), a->mutable_tensor());
      }
    }
    const std::string task = o_.task;
    std::shared_ptr<CallTracker> tracker = o_.tracker;
    const uint64_t token = tracker->Add(&call->ctx);
    stub_->async()->RunGraph(
        &call->ctx, &call->req, &call->resp,
        [call, frame, task, tracker, token, done = std::move(done)](::grpc::Status s) {
          if (!s.ok()) {
            done(TrackedCallFailed(tracker.get(), token, task, "RunGraph", s));
            return;
          }
          tracker->Remove(token);
          Status st = WithTask(task, StatusFromProto(call->resp.status()));
          if (st.ok() && frame != nullptr) {
            for (const wpb::IndexedTensor& r : call->resp.rets()) {
              if (r.index() < 0 || r.index() >= int(frame->rets().size())) {
                st = Internal(task + ": result " + std::to_string(r.index()) + " out of range");
                break;
              }
              StatusOr<Tensor> t = DecodeTensor(r.tensor(), "rets[" + std::to_string(r.index()) + "]");
              if (!t.ok()) {
                st = WithTask(task, t.status());
                break;
              }
              frame->set_ret(r.index(), std::move(t).value());
            }
          }
          done(st);
        });
  }

  void AbortStep(int64_t step_id, const Status& status) override {
    using AbortCall = Call<wpb::AbortStepRequest, wpb::AbortStepResponse>;
    auto call = std::make_shared<AbortCall>();
    call->ctx.set_deadline(DeadlineIn(o_.rpc_timeout_s));
    call->req.set_step_id(step_id);
    call->req.set_session_handle(o_.session_handle);
    call->req.set_reason(status.message());
    StatusToProto(status.ok() ? Cancelled("the step was aborted") : status,
                  call->req.mutable_status());
    stub_->async()->AbortStep(&call->ctx, &call->req, &call->resp, [call](::grpc::Status) {});
  }

  void CleanupStep(int64_t step_id) override {
    {
      MutexLock l(mu_);
      to_clean_.push_back(step_id);
      if (to_clean_.size() < kMaxDeferredCleanups) return;
    }
    FlushCleanups();
  }

  StatusOr<std::map<std::string, std::string>> ExportKernelStates() override {
    return std::map<std::string, std::string>();
  }
  Status ImportKernelStates(const std::map<std::string, std::string>& states) override {
    if (states.empty()) return Status();
    {
      // The task makes this session's worker there at its first
      // RegisterGraph: until then the states wait here.
      MutexLock l(mu_);
      if (!registered_) {
        for (const auto& [node, state] : states) pending_states_[node] = state;
        return Status();
      }
    }
    return SendKernelStates(states);
  }

  Status SendKernelStates(const std::map<std::string, std::string>& states) {
    ::grpc::ClientContext ctx;
    ctx.set_deadline(DeadlineIn(o_.rpc_timeout_s));
    ctx.set_wait_for_ready(true);
    wpb::ImportKernelStatesRequest req;
    wpb::ImportKernelStatesResponse resp;
    req.set_session_handle(o_.session_handle);
    for (const auto& [node, state] : states) (*req.mutable_states())[node] = state;
    const uint64_t token = o_.tracker->Add(&ctx);
    ::grpc::Status s = stub_->ImportKernelStates(&ctx, req, &resp);
    if (!s.ok()) return TrackedCallFailed(o_.tracker.get(), token, o_.task, "ImportKernelStates", s);
    o_.tracker->Remove(token);
    return WithTask(o_.task, StatusFromProto(resp.status()));
  }

  void ClearKernelStates() override {}

 private:
  // Sends the deferred cleanups now, as one CleanupStep call.
  void FlushCleanups() {
    std::vector<int64_t> steps;
    {
      MutexLock l(mu_);
      steps.swap(to_clean_);
    }
    if (steps.empty()) return;
    using CleanupCall = Call<wpb::CleanupStepRequest, wpb::CleanupStepResponse>;
    auto call = std::make_shared<CleanupCall>();
    call->ctx.set_deadline(DeadlineIn(o_.rpc_timeout_s));
    call->req.set_step_id(steps[0]);
    for (size_t i = 1; i < steps.size(); ++i) call->req.add_more_step_ids(steps[i]);
    call->req.set_session_handle(o_.session_handle);
    stub_->async()->CleanupStep(&call->ctx, &call->req, &call->resp, [call](::grpc::Status) {});
  }

  static constexpr size_t kMaxDeferredCleanups = 64;
  RemoteWorkerOptions o_;
  std::unique_ptr<wpb::Worker::Stub> stub_;  // on o_.channel
  Mutex mu_;
  std::vector<int64_t> to_clean_ ABSL_GUARDED_BY(mu_);  // steps ended, not yet forgotten there
  // Kernel states imported before the first RegisterGraph (the task has no
  // worker of this session until then).
  bool registered_ ABSL_GUARDED_BY(mu_) = false;
  std::map<std::string, std::string> pending_states_ ABSL_GUARDED_BY(mu_);
};

// --- The rendezvous.

class DistributedRendezvous final : public Rendezvous {
 public:
  DistributedRendezvous(int64_t step_id, std::string self_task, ConnectionFor connection_for,
                        AllocatorFor allocator_for, ThreadPool* delivery, double timeout_s)
      : core_(std::make_shared<Core>()) {
    core_->delivery = delivery;
    core_->allocator_for = std::move(allocator_for);
    core_->step_id = step_id;
    core_->self_task = std::move(self_task);
    core_->connection_for = std::move(connection_for);
    core_->timeout_s = timeout_s;
  }
  ~DistributedRendezvous() override { StartAbort(Cancelled("the step ended")); }

  Status Send(const std::string& key, const Tensor& value) override {
    return core_->local.Send(key, value);
  }

  void RecvAsync(const std::string& key, DoneCallback done) override {
    const std::string src_task = TaskOfDevice(std::string_view(key).substr(0, key.find(';')));
    if (src_task.empty() || src_task == core_->self_task) {
      core_->local.RecvAsync(key, std::move(done));
      return;
    }
    TaskConnection conn = core_->connection_for(src_task);
    if (conn.channel == nullptr) {
      done(Internal("tensor '" + key + "' comes from " + src_task + ", which is not in the cluster"),
           Tensor());
      return;
    }
    // "<src>;<incarnation>;<dst>;<name>": the tensor lands in dst's memory.
    std::string_view dst = key;
    for (int i = 0; i < 2 && dst.find(';') != std::string_view::npos; ++i) dst.remove_prefix(dst.find(';') + 1);
    dst = dst.substr(0, dst.find(';'));
    Allocator* allocator = core_->allocator_for ? core_->allocator_for(dst) : nullptr;
    auto pull = std::make_shared<Pull>(core_, src_task, key, allocator, std::move(done));
    pull->ctx.set_deadline(DeadlineIn(core_->timeout_s));
    pull->ctx.set_wait_for_ready(true);
    pull->tracker = conn.tracker;
    {
      wpb::RecvTensorRequest req;
      req.set_step_id(core_->step_id);
      req.set_rendezvous_key(key);
      ::grpc::Slice s(req.SerializeAsString());
      pull->req = ::grpc::ByteBuffer(&s, 1);
    }
    Status aborted;
    {
      MutexLock l(core_->mu);
      if (!core_->aborted.ok()) {
        aborted = core_->aborted;
      } else {
        core_->pending.emplace(pull.get(), pull);
      }
    }
    if (!aborted.ok()) {
      pull->done(aborted, Tensor());
      return;
    }
    pull->Start(pull, conn.channel);
  }

  void StartAbort(const Status& status) override {
    const Status abort = status.ok() ? Cancelled("aborted") : status;
    core_->local.StartAbort(abort);
    std::unordered_map<Pull*, std::shared_ptr<Pull>> pending;
    {
      MutexLock l(core_->mu);
      if (!core_->aborted.ok()) return;
      core_->aborted = abort;
      pending.swap(core_->pending);
    }
    for (auto& [p, pull] : pending) {
      pull->ctx.TryCancel();
      pull->done(abort, Tensor());
    }
  }

 private:
  struct Core;
  // One pull: a RecvTensorStream call whose chunks go straight into the
  // tensor. It keeps itself alive (self) until gRPC is done with it.
  struct Pull final : ::grpc::ClientBidiReactor<::grpc::ByteBuffer, ::grpc::ByteBuffer> {
    Pull(const std::shared_ptr<Core>& core, std::string task, const std::string& key,
         Allocator* allocator, DoneCallback d)
        : core(core), task(std::move(task)), receiver(key, allocator), done(std::move(d)) {}

    void Start(const std::shared_ptr<Pull>& me, const std::shared_ptr<::grpc::Channel>& channel) {
      self = me;
      if (tracker) token = tracker->Add(&ctx);
      ::grpc::GenericStub stub(channel);  // the call holds the channel, not the stub
      stub.PrepareBidiStreamingCall(&ctx, "/flowstate.worker.v1.Worker/RecvTensorStream",
                                     ::grpc::StubOptions(), this);
      StartWriteLast(&req, ::grpc::WriteOptions());
      StartRead(&chunk);
      HandOff();
      StartCall();
    }
    void OnReadDone(bool ok) override {
      TakeOver();
      if (!ok) return;  // the stream ended: OnDone follows
      Status s = receiver.Add(chunk);
      chunk.Clear();
      if (!s.ok()) {
        error = s;
        HandOff();
        ctx.TryCancel();
        return;
      }
      HandOff();
      StartRead(&chunk);
    }
    void OnDone(const ::grpc::Status& s) override {
      TakeOver();
      std::shared_ptr<Pull> me = std::move(self);  // alive until this returns
      std::string cancelled_for = tracker ? tracker->Remove(token) : "";
      // Whoever takes the pull out of `pending` calls its done: this end of
      // the call or StartAbort.
      std::shared_ptr<Core> c = core.lock();
      if (c == nullptr) return;  // the rendezvous aborted it when it went away
      {
        MutexLock l(c->mu);
        if (c->pending.erase(this) == 0) return;
      }
      Status result;
      Tensor value;
      if (!error.ok()) {
        result = WithTask(task, error);
      } else if (!s.ok()) {
        result = cancelled_for.empty()
                     ? CallFailed(task, "RecvTensorStream", s)
                     : Unavailable(task + " is unavailable: RecvTensorStream was cancelled because "
                                          "the task stopped answering heartbeats (" + cancelled_for + ")");
      } else {
        StatusOr<Tensor> t = receiver.Finish();
        if (t.ok()) {
          value = std::move(t).value();
        } else {
          result = WithTask(task, t.status());
        }
      }
      if (c->delivery == nullptr) {
        done(result, value);
        return;
      }
      c->delivery->Schedule([d = std::move(done), result, value] { d(result, value); });
    }

    std::weak_ptr<Core> core;
    std::string task;
    ::grpc::ClientContext ctx;
    ::grpc::ByteBuffer req;
    ::grpc::ByteBuffer chunk;
    ChunkReceiver receiver;
    Status error;  // a malformed chunk, or the status a failed receive carried
    DoneCallback done;
    std::shared_ptr<CallTracker> tracker;
    uint64_t token = 0;
    std::shared_ptr<Pull> self;

    // A pull's fields are written by the thread that starts the call (a
    // _Recv's) or a read (the previous reaction's), and read by the next
    // reaction, on a thread of gRPC's. gRPC orders the two inside libgrpc,
    // where TSan cannot see it: when the call waited for a lost task's
    // channel to come back, TSan reported the receiver read in OnReadDone
    // against its construction in RecvAsync
    // (ReplicaFailures.ALostTaskWithSharedTablesResumesFromTheCheckpoint).
    // This release before each start and acquire in each reaction shows it
    // the order gRPC keeps anyway; it costs an uncontended atomic per chunk.
    void HandOff() { handoff.fetch_add(1, std::memory_order_release); }
    void TakeOver() { (void)handoff.load(std::memory_order_acquire); }
    std::atomic<uint64_t> handoff{0};
  };
  struct Core {
    int64_t step_id = 0;
    std::string self_task;
    ConnectionFor connection_for;
    AllocatorFor allocator_for;
    ThreadPool* delivery = nullptr;
    double timeout_s = 0;
    LocalRendezvous local;
    Mutex mu;
    Status aborted ABSL_GUARDED_BY(mu);
    std::unordered_map<Pull*, std::shared_ptr<Pull>> pending ABSL_GUARDED_BY(mu);
  };
  std::shared_ptr<Core> core_;
};

}  // namespace

std::unique_ptr<Worker> NewGrpcRemoteWorker(RemoteWorkerOptions options) {
  return std::make_unique<GrpcRemoteWorker>(std::move(options));
}

std::shared_ptr<Rendezvous> NewDistributedRendezvous(int64_t step_id, std::string self_task,
                                                     ConnectionFor connection_for, AllocatorFor allocator_for,
                                                     ThreadPool* delivery, double timeout_s) {
  return std::make_shared<DistributedRendezvous>(step_id, std::move(self_task),
                                                 std::move(connection_for), std::move(allocator_for),
                                                 delivery, timeout_s);
}

}  // namespace flowstate::distributed_internal

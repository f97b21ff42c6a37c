#include "distributed/worker_service.h"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <map>
#include <set>
#include <thread>
#include <unordered_set>

#include <grpcpp/grpcpp.h>

#include "api/worker.grpc.pb.h"
#include "api/worker.pb.h"
#include "api/proto_convert.h"
#include "distributed/cluster.h"
#include "distributed/tensor_wire_internal.h"
#include "distributed/wire_internal.h"
#include "scheduler/call_frame.h"
#include "scheduler/local_worker.h"
#include "scheduler/rendezvous.h"
#include "scheduler/runtime_kernels.h"
#include "scheduler/thread_pool.h"
#include "state/kernels.h"
#include "state/replica_input.h"
#include "state/resource_mgr.h"
#include "graph/mutex.h"
#include "graph/periodic_thread.h"

namespace flowstate {

using namespace distributed_internal;  // NOLINT: this library's private helpers

namespace {

// An incarnation as error messages and rendezvous keys write it (hex).
std::string HexIncarnation(uint64_t v) {
  char buf[24];
  std::snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

// A call that waits for its work; Shutdown answers those still waiting.
struct Waiting {
  virtual ~Waiting() = default;
  // Ends the call with `s` unless it was answered (or started answering).
  virtual void Abandon(const ::grpc::Status& s) = 0;
};

// A unary call answered later, exactly once: by its work, by its
// cancellation or by Shutdown, whichever comes first.
struct Pending final : Waiting {
  void Abandon(const ::grpc::Status& s) override;
  Mutex mu;
  bool finished ABSL_GUARDED_BY(mu) = false;
  ::grpc::ServerUnaryReactor* reactor = nullptr;
  std::function<void()> on_cancel;  // set before the work starts
};

// Runs fill() (which writes the response) and finishes the call, unless it
// was finished already; false then.
bool Answer(const std::shared_ptr<Pending>& p, const ::grpc::Status& s,
            const std::function<void()>& fill = nullptr) {
  MutexLock l(p->mu);
  if (p->finished) return false;
  p->finished = true;
  if (fill && s.ok()) fill();
  p->reactor->Finish(s);
  return true;
}

void Pending::Abandon(const ::grpc::Status& s) {
  MutexLock l(mu);
  if (finished) return;
  finished = true;
  reactor->Finish(s);
}

// RecvTensorStream: waits for the tensor (holding no thread), then writes it
// in chunks of kChunkBytes, each pointing at the tensor's bytes, one after
// the other; deletes itself when the call is done.
class StreamSender final : public ::grpc::ServerWriteReactor<::grpc::ByteBuffer> {
 public:
  struct State final : Waiting {
    Mutex mu;
    bool finished ABSL_GUARDED_BY(mu) = false;  // waiting is over (Finish called or writing)
    StreamSender* reactor = nullptr;
    void Abandon(const ::grpc::Status& s) override {
      MutexLock l(mu);
      if (finished) return;
      finished = true;
      reactor->Finish(s);
    }
  };
  StreamSender() : state_(std::make_shared<State>()) { state_->reactor = this; }
  const std::shared_ptr<State>& state() const { return state_; }

  // The rendezvous answered: write the tensor (or the error) unless the call
  // ended while it waited.
  static void Begin(const std::shared_ptr<State>& st, const Status& s, const Tensor& t) {
    MutexLock l(st->mu);
    if (st->finished) return;
    st->finished = true;
    StreamSender* self = st->reactor;
    if (!s.ok()) {
      self->error_ = true;
      self->buf_ = EncodeChunkStatus(s);
      self->writing_.store(true, std::memory_order_release);
      self->StartWrite(&self->buf_);
      return;
    }
    self->tensor_ = t;
    self->WriteNext();
  }

  void OnWriteDone(bool ok) override {
    // The fields were last written by the thread that started the write
    // (Begin's: a _Send's, when the tensor came after the request). gRPC
    // orders that before this callback inside libgrpc, where TSan cannot see
    // it; this acquire of the release in WriteNext shows it the order.
    (void)writing_.load(std::memory_order_acquire);
    buf_.Clear();
    if (!ok) {
      Finish(::grpc::Status(::grpc::StatusCode::CANCELLED, "the receiver went away"));
    } else if (error_ || offset_ >= tensor_.TotalBytes()) {
      tensor_ = Tensor();
      Finish(::grpc::Status::OK);
    } else {
      WriteNext();
    }
  }
  void OnCancel() override { state_->Abandon(::grpc::Status(::grpc::StatusCode::CANCELLED, "cancelled")); }
  void OnDone() override { delete this; }

 private:
  void WriteNext() {
    const size_t n = std::min(kChunkBytes, tensor_.TotalBytes() - offset_);
    buf_ = EncodeTensorChunk(tensor_, offset_, n);
    offset_ += n;
    if (n == 0) offset_ = 1;  // an empty tensor: its header chunk is the last
    writing_.store(true, std::memory_order_release);
    StartWrite(&buf_);
  }

  std::shared_ptr<State> state_;
  std::atomic<bool> writing_{false};  // see OnWriteDone
  Tensor tensor_;
  size_t offset_ = 0;
  bool error_ = false;
  ::grpc::ByteBuffer buf_;
};

class Reactor final : public ::grpc::ServerUnaryReactor {
 public:
  explicit Reactor(std::shared_ptr<Pending> p) : p_(std::move(p)) { p_->reactor = this; }
  void OnCancel() override {
    if (Answer(p_, ::grpc::Status(::grpc::StatusCode::CANCELLED, "cancelled")) && p_->on_cancel) {
      p_->on_cancel();
    }
  }
  void OnDone() override { delete this; }

 private:
  std::shared_ptr<Pending> p_;
};

// One master session's state on this task.
struct WorkerSession {
  // The master's task and incarnation (RegisterGraph's); "" / 0: unknown.
  std::string master_task;
  uint64_t master_incarnation = 0;
  std::chrono::steady_clock::time_point master_seen = std::chrono::steady_clock::now();
  std::shared_ptr<ResourceMgr> resources;
  std::unique_ptr<LocalWorker> worker;
  Mutex mu;
  std::map<std::string, RegisteredGraph*> graphs ABSL_GUARDED_BY(mu);
  std::multiset<int64_t> running ABSL_GUARDED_BY(mu);                  // step ids
  int next_graph ABSL_GUARDED_BY(mu) = 0;

  ~WorkerSession() {
    for (auto& [h, g] : graphs) worker->DeregisterGraph(g);
  }
};

::grpc::Status NotReady() {
  return ::grpc::Status(::grpc::StatusCode::UNAVAILABLE, "the task is not ready");
}
::grpc::Status ShuttingDown() {
  return ::grpc::Status(::grpc::StatusCode::UNAVAILABLE, "the task is shutting down");
}

}  // namespace

// Every method is a callback method (no thread waits on a call) except
// GetStatus, the heartbeat, which is synchronous: served by the server's
// own threads, it is answered even while kernels that a partition started
// on a callback thread run long. RecvTensor and RecvTensorStream are raw:
// their messages are encoded by hand, pointing at the tensor's bytes
// (tensor_wire.h).
using WorkerBase = wpb::Worker::WithRawCallbackMethod_RecvTensorStream<
    wpb::Worker::WithRawCallbackMethod_RecvTensor<wpb::Worker::WithCallbackMethod_RegisterGraph<
        wpb::Worker::WithCallbackMethod_DeregisterGraph<wpb::Worker::WithCallbackMethod_RunGraph<
            wpb::Worker::WithCallbackMethod_AbortStep<wpb::Worker::WithCallbackMethod_CleanupStep<
                wpb::Worker::WithCallbackMethod_CloseSession<wpb::Worker::Service>>>>>>>>;

class WorkerService::Impl final : public WorkerBase {
 public:
  Impl(Cluster* cluster, const WorkerServiceOptions& o)
      : cluster_(cluster), options_(o), pool_(std::make_unique<ThreadPool>(o.inter_op_threads)) {
    scheduler::RegisterRuntimeKernels();
    state::RegisterKernels();
    sweeper_ = std::make_unique<PeriodicThread>(std::chrono::seconds(1), [this] { ReclaimOrphans(); });
  }
  void StopSweeping() { sweeper_->Stop(); }

  // The background ReclaimOrphans, once a second until Shutdown.
  std::unique_ptr<PeriodicThread> sweeper_;

  std::atomic<Cluster*> cluster_;
  const WorkerServiceOptions options_;
  // Runs the partitions; destroyed (joined) last, after the partitions ended.
  std::unique_ptr<ThreadPool> pool_;
  std::unique_ptr<::grpc::Server> server_;

  // What the callbacks of calls in flight touch; shared with them, so that
  // one that comes late (a rendezvous aborted when the cluster goes away)
  // finds it alive.
  struct Shared {
    Mutex mu;
    bool shutdown ABSL_GUARDED_BY(mu) = false;
    std::unordered_set<std::shared_ptr<Waiting>> pending ABSL_GUARDED_BY(mu);  // calls waiting
    int partitions_running ABSL_GUARDED_BY(mu) = 0;
    CondVar idle_cv;
    // WorkerSessions not yet destroyed. The last reference to one may be
    // dropped by a kernel's late callback (an aborted collective's thread)
    // after its partition has ended: its variables go back to the task's
    // devices then, so the service is destroyed (and the devices after it)
    // only once every session is. Its own mutex: a session is released
    // with `mu` held (CloseSession, the orphan sweep).
    Mutex alive_mu;
    CondVar alive_cv;
    int sessions_alive ABSL_GUARDED_BY(alive_mu) = 0;
  };
  std::shared_ptr<Shared> sh_ = std::make_shared<Shared>();
  std::map<std::string, std::shared_ptr<WorkerSession>> sessions_ ABSL_GUARDED_BY(sh_->mu);

  // A reactor for `ctx`'s call, tracked until answered (Shutdown answers it).
  std::pair<Reactor*, std::shared_ptr<Pending>> NewCall() {
    auto p = std::make_shared<Pending>();
    auto* r = new Reactor(p);
    return {r, p};
  }
  static bool Track(Shared& sh, const std::shared_ptr<Waiting>& p) {
    MutexLock l(sh.mu);
    if (sh.shutdown) return false;
    sh.pending.insert(p);
    return true;
  }
  static void Untrack(Shared& sh, const std::shared_ptr<Waiting>& p) {
    MutexLock l(sh.mu);
    sh.pending.erase(p);
  }
  // Answers and forgets a tracked call; after Shutdown, UNAVAILABLE.
  static void Reply(Shared& sh, const std::shared_ptr<Pending>& p, const std::function<void()>& fill) {
    bool down;
    {
      MutexLock l(sh.mu);
      down = sh.shutdown;
      sh.pending.erase(p);
    }
    Answer(p, down ? ShuttingDown() : ::grpc::Status::OK, fill);
  }

  // Forgets a step that ended on every task.
  static void Cleanup(Cluster* c, WorkerSession* s, int64_t step) {
    if (s != nullptr) s->worker->CleanupStep(step);
    c->rendezvous_mgr()->Cleanup(step);
  }

  std::shared_ptr<WorkerSession> FindSession(const std::string& handle) {
    MutexLock l(sh_->mu);
    auto it = sessions_.find(handle);
    return it == sessions_.end() ? nullptr : it->second;
  }

  std::shared_ptr<WorkerSession> GetOrCreateSession(Cluster* c, const std::string& handle,
                                                    const std::string& master_task,
                                                    uint64_t master_incarnation) {
    MutexLock l(sh_->mu);
    std::shared_ptr<WorkerSession>& s = sessions_[handle];
    if (s == nullptr) {
      {
        MutexLock a(sh_->alive_mu);
        ++sh_->sessions_alive;
      }
      s = std::shared_ptr<WorkerSession>(new WorkerSession(), [sh = sh_](WorkerSession* w) {
        delete w;
        MutexLock a(sh->alive_mu);
        if (--sh->sessions_alive == 0) sh->alive_cv.NotifyAll();
      });
      s->master_task = master_task;
      s->master_incarnation = master_incarnation;
      s->resources = std::make_shared<ResourceMgr>();
      if (!options_.data_root.empty()) {
        (void)s->resources->LookupOrCreate<TaskDataRoot>(
            kTaskContainer, kDataRootResource, [&]() -> StatusOr<std::shared_ptr<TaskDataRoot>> {
              return std::make_shared<TaskDataRoot>(options_.data_root);
            });
      }
      LocalWorkerOptions o;
      o.devices = c->devices();
      o.resources = s->resources.get();
      o.inter_op_pool = pool_.get();
      o.rendezvous_mgr = c->rendezvous_mgr();
      s->worker = std::make_unique<LocalWorker>(o);
    }
    return s;
  }

  // --- RPCs.

  ::grpc::ServerUnaryReactor* RegisterGraph(::grpc::CallbackServerContext* ctx,
                                            const wpb::RegisterGraphRequest* req,
                                            wpb::RegisterGraphResponse* resp) override {
    auto* r = ctx->DefaultReactor();
    Cluster* c = cluster_.load();
    if (c == nullptr) {
      r->Finish(NotReady());
      return r;
    }
    {
      MutexLock l(sh_->mu);
      if (sh_->shutdown) {
        r->Finish(ShuttingDown());
        return r;
      }
    }
    const std::string task = c->local_task();
    Status st = [&]() -> Status {
      if (req->expected_incarnation() != 0 && req->expected_incarnation() != c->local_incarnation()) {
        return Aborted("the graph was cut for another incarnation of this task (it restarted): "
                       "expected " + std::to_string(req->expected_incarnation()) + ", this is " +
                       std::to_string(c->local_incarnation()));
      }
      proto_convert::GraphOptions go;
      go.max_tensor_bytes = size_t(kMaxMessageBytes);
      FS_ASSIGN_OR_RETURN(GraphDef graph, proto_convert::GraphFromProto(req->graph(), "graph", go));
      std::shared_ptr<WorkerSession> s = GetOrCreateSession(c, req->session_handle(), req->master_task(),
                                                            req->master_incarnation());
      RegisterGraphRequest r;
      r.device = req->device();
      r.graph = std::move(graph);
      r.session = req->session_handle();
      FS_ASSIGN_OR_RETURN(RegisteredGraph * g, s->worker->RegisterGraph(std::move(r)));
      MutexLock l(s->mu);
      std::string handle = "graph-" + std::to_string(s->next_graph++);
      s->graphs[handle] = g;
      resp->set_graph_handle(handle);
      return Status();
    }();
    resp->set_incarnation(c->local_incarnation());
    StatusToProto(WithTask(task, st), resp->mutable_status());
    r->Finish(::grpc::Status::OK);
    return r;
  }

  ::grpc::ServerUnaryReactor* DeregisterGraph(::grpc::CallbackServerContext* ctx,
                                              const wpb::DeregisterGraphRequest* req,
                                              wpb::DeregisterGraphResponse*) override {
    auto* r = ctx->DefaultReactor();
    Cluster* c = cluster_.load();
    if (req->expected_incarnation() != 0 &&
        (c == nullptr || req->expected_incarnation() != c->local_incarnation())) {
      // Registered on an earlier incarnation of this task: a graph of this
      // one with the same handle is another graph.
      r->Finish(::grpc::Status::OK);
      return r;
    }
    if (std::shared_ptr<WorkerSession> s = FindSession(req->session_handle())) {
      RegisteredGraph* g = nullptr;
      {
        MutexLock l(s->mu);
        auto it = s->graphs.find(req->graph_handle());
        if (it != s->graphs.end()) {
          g = it->second;
          s->graphs.erase(it);
        }
      }
      if (g != nullptr) s->worker->DeregisterGraph(g);
    }
    r->Finish(::grpc::Status::OK);
    return r;
  }

  ::grpc::ServerUnaryReactor* RunGraph(::grpc::CallbackServerContext* ctx,
                                       const wpb::RunGraphRequest* req,
                                       wpb::RunGraphResponse* resp) override {
    auto [r, p] = NewCall();
    Cluster* c = cluster_.load();
    if (c == nullptr) {
      Answer(p, NotReady());
      return r;
    }
    const std::string task = c->local_task();
    const uint64_t incarnation = c->local_incarnation();
    // Every answer says which incarnation of the task gave it (written
    // before any answer is sent).
    resp->set_incarnation(incarnation);
    auto fail = [&, p = p](const Status& st) {
      Answer(p, ::grpc::Status::OK, [&] { StatusToProto(WithTask(task, st), resp->mutable_status()); });
    };
    std::shared_ptr<WorkerSession> s = FindSession(req->session_handle());
    for (int64_t done_step : req->cleanup_step_ids()) Cleanup(c, s.get(), done_step);
    if (req->expected_incarnation() != 0 && req->expected_incarnation() != incarnation) {
      // The master registered the graph on an earlier incarnation of this
      // task: it restarted since, and holds none of the session's graphs
      // (a graph of its own may have the same handle). The master
      // registers them again, or asks for a new session where state of it
      // lived here (scheduler/session.h).
      fail(Unavailable("the task restarted (incarnation " + HexIncarnation(incarnation) + ", was " +
                       HexIncarnation(req->expected_incarnation()) + ") since graph '" +
                       req->graph_handle() + "' of session '" + req->session_handle() +
                       "' was registered on it: the step did not run there; the session registers "
                       "its partitions on the new incarnation at its next step"));
      return r;
    }
    RegisteredGraph* g = nullptr;
    if (s != nullptr) {
      MutexLock l(s->mu);
      auto it = s->graphs.find(req->graph_handle());
      if (it != s->graphs.end()) g = it->second;
    }
    if (g == nullptr) {
      // The task restarted (or the master deregistered it): the master
      // registers again.
      fail(Unavailable("graph '" + req->graph_handle() + "' of session '" + req->session_handle() +
                       "' is not registered here (did the task restart?)"));
      return r;
    }
    std::vector<Tensor> args;
    for (const wpb::IndexedTensor& a : req->args()) {
      if (a.index() < 0 || a.index() > 1 << 20) {
        fail(InvalidArgument("argument index " + std::to_string(a.index()) + " is out of range"));
        return r;
      }
      if (size_t(a.index()) >= args.size()) args.resize(a.index() + 1);
      StatusOr<Tensor> t = DecodeTensor(a.tensor(), "args[" + std::to_string(a.index()) + "]");
      if (!t.ok()) {
        fail(t.status());
        return r;
      }
      args[a.index()] = std::move(t).value();
    }
    if (req->num_rets() < 0 || req->num_rets() > 1 << 20) {
      fail(InvalidArgument("num_rets " + std::to_string(req->num_rets()) + " is out of range"));
      return r;
    }
    if (req->iterations() < 0 || req->iterations() > 1 << 20) {
      fail(InvalidArgument("iterations " + std::to_string(req->iterations()) + " is out of range"));
      return r;
    }
    auto frame = std::make_shared<CallFrame>(std::move(args), req->num_rets());
    const int64_t step = req->step_id();
    {
      MutexLock l(sh_->mu);
      if (sh_->shutdown) {
        Answer(p, ShuttingDown());
        return r;
      }
      sh_->pending.insert(p);
      ++sh_->partitions_running;
    }
    {
      MutexLock l(s->mu);
      s->running.insert(step);
    }
    {
      // The master went away or gave up: fail the step here.
      MutexLock l(p->mu);
      std::weak_ptr<WorkerSession> weak = s;
      p->on_cancel = [weak, step] {
        if (auto ws = weak.lock()) ws->worker->AbortStep(step, Cancelled("the master cancelled the step"));
      };
    }
    RunGraphArgs a;
    a.step_id = step;
    a.call_frame = frame.get();
    a.iterations = std::max(1, int(req->iterations()));
    // Started on gRPC's thread (a hop to the pool costs a wake-up per
    // partition per step); GetStatus is served by other threads, so a long
    // kernel here never delays a heartbeat.
    s->worker->RunGraph(g, a, [sh = sh_, p = p, s, frame, resp, step, task](const Status& st) {
      Reply(*sh, p, [&] {
        StatusToProto(WithTask(task, st), resp->mutable_status());
        if (!st.ok()) return;
        std::vector<Tensor>& rets = frame->rets();
        for (size_t i = 0; i < rets.size(); ++i) {
          if (!rets[i].IsInitialized()) continue;
          wpb::IndexedTensor* t = resp->add_rets();
          t->set_index(int(i));
          EncodeTensor(rets[i], t->mutable_tensor());
        }
      });
      {
        MutexLock l(s->mu);
        s->running.erase(s->running.find(step));
      }
      MutexLock l(sh->mu);
      if (--sh->partitions_running == 0) sh->idle_cv.NotifyAll();
    });
    return r;
  }

  ::grpc::ServerUnaryReactor* RecvTensor(::grpc::CallbackServerContext* ctx,
                                         const ::grpc::ByteBuffer* request,
                                         ::grpc::ByteBuffer* resp) override {
    auto [r, p] = NewCall();
    wpb::RecvTensorRequest parsed;
    {
      ::grpc::Slice whole;
      if (!request->DumpToSingleSlice(&whole).ok() ||
          !parsed.ParseFromArray(whole.begin(), int(whole.size()))) {
        Answer(p, ::grpc::Status(::grpc::StatusCode::INVALID_ARGUMENT, "malformed RecvTensorRequest"));
        return r;
      }
    }
    const wpb::RecvTensorRequest* req = &parsed;
    Cluster* c = cluster_.load();
    if (c == nullptr) {
      Answer(p, NotReady());
      return r;
    }
    const std::string task = c->local_task();
    const std::string& key = req->rendezvous_key();
    if (TaskOfDevice(std::string_view(key).substr(0, key.find(';'))) != task) {
      Answer(p, ::grpc::Status::OK, [&] {
        *resp = EncodeRecvTensorResponse(
            InvalidArgument(task + ": tensor '" + key + "' is not sent by this task"), Tensor());
      });
      return r;
    }
    if (!Track(*sh_, p)) {
      Answer(p, ShuttingDown());
      return r;
    }
    std::shared_ptr<Rendezvous> rendezvous = c->rendezvous_mgr()->Find(req->step_id());
    rendezvous->RecvAsync(key, [sh = sh_, p = p, resp, task](const Status& st, const Tensor& t) {
      Reply(*sh, p, [&] { *resp = EncodeRecvTensorResponse(WithTask(task, st), t); });
    });
    return r;
  }

  ::grpc::ServerWriteReactor<::grpc::ByteBuffer>* RecvTensorStream(
      ::grpc::CallbackServerContext* ctx, const ::grpc::ByteBuffer* request) override {
    auto* sender = new StreamSender();
    std::shared_ptr<StreamSender::State> st = sender->state();
    wpb::RecvTensorRequest req;
    ::grpc::Slice whole;
    if (!request->DumpToSingleSlice(&whole).ok() ||
        !req.ParseFromArray(whole.begin(), int(whole.size()))) {
      st->Abandon(::grpc::Status(::grpc::StatusCode::INVALID_ARGUMENT, "malformed RecvTensorRequest"));
      return sender;
    }
    Cluster* c = cluster_.load();
    if (c == nullptr) {
      st->Abandon(NotReady());
      return sender;
    }
    const std::string task = c->local_task();
    const std::string& key = req.rendezvous_key();
    if (TaskOfDevice(std::string_view(key).substr(0, key.find(';'))) != task) {
      StreamSender::Begin(st, InvalidArgument(task + ": tensor '" + key + "' is not sent by this task"),
                          Tensor());
      return sender;
    }
    if (!Track(*sh_, st)) {
      st->Abandon(ShuttingDown());
      return sender;
    }
    std::shared_ptr<Rendezvous> rendezvous = c->rendezvous_mgr()->Find(req.step_id());
    rendezvous->RecvAsync(key, [sh = sh_, st, task](const Status& s, const Tensor& t) {
      Untrack(*sh, st);
      StreamSender::Begin(st, WithTask(task, s), t);
    });
    return sender;
  }

  ::grpc::ServerUnaryReactor* AbortStep(::grpc::CallbackServerContext* ctx,
                                        const wpb::AbortStepRequest* req,
                                        wpb::AbortStepResponse*) override {
    auto* r = ctx->DefaultReactor();
    Cluster* c = cluster_.load();
    if (c != nullptr) {
      Status st = StatusFromProto(req->status());
      if (st.ok()) st = Cancelled(req->reason().empty() ? "the step was aborted" : req->reason());
      if (std::shared_ptr<WorkerSession> s = FindSession(req->session_handle())) {
        s->worker->AbortStep(req->step_id(), st);
      } else {
        c->rendezvous_mgr()->AbortStep(req->step_id(), st);
      }
    }
    r->Finish(c == nullptr ? NotReady() : ::grpc::Status::OK);
    return r;
  }

  ::grpc::ServerUnaryReactor* CleanupStep(::grpc::CallbackServerContext* ctx,
                                          const wpb::CleanupStepRequest* req,
                                          wpb::CleanupStepResponse*) override {
    auto* r = ctx->DefaultReactor();
    Cluster* c = cluster_.load();
    if (c != nullptr) {
      std::shared_ptr<WorkerSession> s = FindSession(req->session_handle());
      Cleanup(c, s.get(), req->step_id());
      for (int64_t step : req->more_step_ids()) Cleanup(c, s.get(), step);
    }
    r->Finish(c == nullptr ? NotReady() : ::grpc::Status::OK);
    return r;
  }

  ::grpc::ServerUnaryReactor* CloseSession(::grpc::CallbackServerContext* ctx,
                                           const wpb::CloseSessionRequest* req,
                                           wpb::CloseSessionResponse*) override {
    auto* r = ctx->DefaultReactor();
    std::shared_ptr<WorkerSession> s;  // destroyed outside the lock (its last step may hold it)
    {
      MutexLock l(sh_->mu);
      auto it = sessions_.find(req->session_handle());
      if (it != sessions_.end()) {
        s = std::move(it->second);
        sessions_.erase(it);
      }
    }
    r->Finish(::grpc::Status::OK);
    return r;
  }

  // Synchronous, like GetStatus (a restore's rare call).
  ::grpc::Status ImportKernelStates(::grpc::ServerContext*, const wpb::ImportKernelStatesRequest* req,
                                    wpb::ImportKernelStatesResponse* resp) override {
    Cluster* c = cluster_.load();
    if (c == nullptr) return NotReady();
    const std::string task = c->local_task();
    std::shared_ptr<WorkerSession> s = FindSession(req->session_handle());
    Status st;
    if (s == nullptr) {
      st = FailedPrecondition("no session '" + req->session_handle() +
                              "' on this task (it registered no graph here, or it was closed)");
    } else {
      std::map<std::string, std::string> states(req->states().begin(), req->states().end());
      st = s->worker->ImportKernelStates(states);
    }
    StatusToProto(WithTask(task, st), resp->mutable_status());
    return ::grpc::Status::OK;
  }

  ::grpc::Status GetStatus(::grpc::ServerContext*, const wpb::GetStatusRequest*,
                           wpb::GetStatusResponse* resp) override {
    Cluster* c = cluster_.load();
    bool down;
    {
      MutexLock l(sh_->mu);
      down = sh_->shutdown;
    }
    if (c == nullptr || down) return c == nullptr ? NotReady() : ShuttingDown();
    resp->set_job(c->spec().self.job);
    resp->set_task_index(c->spec().self.index);
    resp->set_incarnation(c->local_incarnation());
    for (Device* d : c->devices()->devices()) {
      wpb::DeviceAttributes* a = resp->add_devices();
      a->set_name(d->name());
      a->set_device_type(d->type());
      a->set_host_memory(d->memory_type() == MemoryType::kHost);
      a->set_description(d->Description());
      AllocatorStats st = d->allocator()->Stats();
      a->set_memory_limit_bytes(st.bytes_limit);
      a->set_bytes_in_use(st.bytes_in_use);
    }
    return ::grpc::Status::OK;
  }

  // Drops the sessions whose master went away: its task restarted (the
  // heartbeats report a new incarnation) or has been unreachable for longer
  // than options_.orphan_session_seconds. Their running steps are aborted
  // first. Returns how many were dropped.
  int ReclaimOrphans() {
    Cluster* c = cluster_.load();
    if (c == nullptr || options_.orphan_session_seconds <= 0) return 0;
    std::map<std::string, ClusterTaskInfo> tasks;
    for (ClusterTaskInfo& t : c->Snapshot()) tasks[t.name] = std::move(t);
    const auto now = std::chrono::steady_clock::now();
    std::vector<std::pair<std::shared_ptr<WorkerSession>, std::string>> orphans;
    {
      MutexLock l(sh_->mu);
      if (sh_->shutdown) return 0;
      for (auto it = sessions_.begin(); it != sessions_.end();) {
        WorkerSession& s = *it->second;
        auto t = tasks.find(s.master_task);
        std::string why;
        if (t != tasks.end() && !t->second.is_self) {
          const ClusterTaskInfo& m = t->second;
          if (m.state == ClusterTaskInfo::State::kUp) s.master_seen = now;
          if (m.incarnation != 0 && s.master_incarnation != 0 && m.incarnation != s.master_incarnation) {
            why = "its master " + s.master_task + " restarted";
          } else if (m.state != ClusterTaskInfo::State::kUp &&
                     now - s.master_seen > std::chrono::duration<double>(options_.orphan_session_seconds)) {
            why = "its master " + s.master_task + " has been unreachable for over " +
                  std::to_string(int64_t(options_.orphan_session_seconds)) + " s";
          }
        }
        if (why.empty()) {
          ++it;
          continue;
        }
        orphans.emplace_back(std::move(it->second), std::move(why));
        it = sessions_.erase(it);
      }
    }
    for (auto& [s, why] : orphans) {
      std::vector<int64_t> steps;
      {
        MutexLock l(s->mu);
        steps.assign(s->running.begin(), s->running.end());
      }
      const Status abort = Aborted("the session's state on " + c->local_task() + " was dropped: " + why);
      for (int64_t step : steps) s->worker->AbortStep(step, abort);
    }
    return int(orphans.size());
  }

  void Shutdown() {
    StopSweeping();
    std::unordered_set<std::shared_ptr<Waiting>> pending;
    std::vector<std::shared_ptr<WorkerSession>> sessions;
    {
      MutexLock l(sh_->mu);
      if (sh_->shutdown) return;
      sh_->shutdown = true;
      pending.swap(sh_->pending);
      for (auto& [h, s] : sessions_) sessions.push_back(s);
    }
    // Every call in flight fails UNAVAILABLE (the master reports the task
    // as gone), then the partitions still running are aborted.
    for (const auto& p : pending) p->Abandon(ShuttingDown());
    const Status abort = Unavailable("the task is shutting down");
    for (auto& s : sessions) {
      std::vector<int64_t> steps;
      {
        MutexLock l(s->mu);
        steps.assign(s->running.begin(), s->running.end());
      }
      for (int64_t step : steps) s->worker->AbortStep(step, abort);
    }
    if (server_ != nullptr) {
      server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
    }
    {
      // Kernels that ignore cancellation may run on; give up waiting after
      // a while rather than hang the shutdown (they hold what they use).
      MutexLock l(sh_->mu);
      const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(10);
      while (sh_->partitions_running != 0 && sh_->idle_cv.WaitUntil(sh_->mu, give_up)) {
      }
    }
    if (server_ != nullptr) server_->Wait();
  }
};

WorkerService::WorkerService(Cluster* cluster, const WorkerServiceOptions& options)
    : impl_(std::make_unique<Impl>(cluster, options)) {}

WorkerService::~WorkerService() {
  Shutdown();
  std::map<std::string, std::shared_ptr<WorkerSession>> sessions;
  {
    MutexLock l(impl_->sh_->mu);
    sessions.swap(impl_->sessions_);
  }
  sessions.clear();
  {
    // A session still referenced by a late callback (see Shared): waited
    // for, bounded like the partitions in Shutdown.
    Impl::Shared& sh = *impl_->sh_;
    MutexLock a(sh.alive_mu);
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (sh.sessions_alive != 0 && sh.alive_cv.WaitUntil(sh.alive_mu, give_up)) {
    }
  }
  // Joins the pool's threads: what they hold of the partitions goes first.
  impl_->pool_.reset();
}

void WorkerService::Attach(Cluster* cluster) {
  Cluster* expected = nullptr;
  impl_->cluster_.compare_exchange_strong(expected, cluster);
}

void WorkerService::RegisterOn(::grpc::ServerBuilder* builder) {
  builder->RegisterService(impl_.get());
  // Clients ping every heartbeat interval, also between calls.
  builder->AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, 50);
  builder->AddChannelArgument(GRPC_ARG_HTTP2_MAX_PING_STRIKES, 0);
  builder->AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
}

StatusOr<int> WorkerService::Start(const std::string& host, int port) {
  if (impl_->server_ != nullptr) return FailedPrecondition("the worker service is already started");
  ::grpc::ServerBuilder builder;
  int selected = 0;
  const std::string address = host + ":" + std::to_string(port);
  builder.AddListeningPort(address, ::grpc::InsecureServerCredentials(), &selected);
  builder.SetMaxReceiveMessageSize(kMaxMessageBytes);
  builder.SetMaxSendMessageSize(kMaxMessageBytes);
  RegisterOn(&builder);
  impl_->server_ = builder.BuildAndStart();
  if (impl_->server_ == nullptr || selected == 0) {
    impl_->server_.reset();
    return Unavailable("cannot serve the worker service on " + address);
  }
  return selected;
}

void WorkerService::Shutdown() { impl_->Shutdown(); }

int WorkerService::ReclaimOrphanSessions() { return impl_->ReclaimOrphans(); }

int WorkerService::num_sessions() const {
  MutexLock l(impl_->sh_->mu);
  return int(impl_->sessions_.size());
}

}  // namespace flowstate

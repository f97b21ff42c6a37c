// Jobs/Watch as a callback method that holds no thread while it waits
// (grpc_server.cc's top comment; grpc_frontend.h).
#include <atomic>
#include <optional>

#include "graph/mutex.h"
#include "server/grpc/grpc_frontend.h"

namespace flowstate::grpc_internal {

// --- Watch.

// One Jobs/Watch call (grpc_server.cc's top comment). Owns itself from Start()
// until OnDone(); the pump and the stream's waker hold it weakly or share
// it, so a late wake-up finds it finished rather than gone.
class WatchCall final : public ::grpc::ServerWriteReactor<pb::JobEvent>,
                        public std::enable_shared_from_this<WatchCall> {
 public:
  static constexpr const char* kMethod = "flowstate.v1.Jobs/Watch";

  WatchCall(Frontend* f, ::grpc::CallbackServerContext* ctx)
      : f_(f), ctx_(ctx), start_(std::chrono::steady_clock::now()) {}

  static WatchCall* Start(Frontend* f, ::grpc::CallbackServerContext* ctx,
                          const pb::WatchJobRequest& req) {
    auto call = std::make_shared<WatchCall>(f, ctx);
    call->self_ = call;
    Status s = f->Authenticate(*ctx);
    std::unique_ptr<JobEventStream> stream;
    if (s.ok()) {
      StatusOr<std::unique_ptr<JobEventStream>> watched =
          f->service().WatchJob(req.job_id(), req.history());
      if (watched.ok()) {
        stream = std::move(watched).value();
      } else {
        s = watched.status();
      }
    }
    if (s.ok() && !f->AddStream(stream.get())) s = Unavailable("the server is shutting down");
    if (!s.ok()) {
      {
        MutexLock l(call->mu_);
        call->finished_ = true;
      }
      call->FinishWith(s);
      return call.get();
    }
    JobEventStream* raw = stream.get();
    {
      MutexLock l(call->mu_);
      call->stream_ = std::move(stream);
    }
    std::weak_ptr<WatchCall> weak = call;
    std::weak_ptr<WatchPump> pump = f->watch_pump();
    raw->SetWaker([weak, pump] {
      std::shared_ptr<WatchCall> c = weak.lock();
      if (c == nullptr || c->queued_.exchange(true)) return;
      if (std::shared_ptr<WatchPump> p = pump.lock()) p->Wake(weak);
    });
    call->Pump();
    return call.get();
  }

  // Sends what the stream has, one event per write; finishes the call at
  // its end. Any thread; does nothing while a write is under way.
  void Pump() {
    queued_ = false;
    MutexLock l(mu_);
    if (writing_ || finished_ || stream_ == nullptr) return;
    std::optional<JobEvent> event = stream_->Next(std::chrono::milliseconds(0));
    if (event) {
      proto_convert::JobEventToProto(*event, &event_);
      writing_ = true;
      l.Unlock();
      StartWrite(&event_);
      return;
    }
    if (stream_->timed_out()) return;  // idle: the waker calls again
    // The job ended and all its events were sent, or the stream was closed
    // (the server stopping, the client cancelling).
    finished_ = true;
    Status s;
    if (cancelled_) {
      s = Cancelled("the client cancelled the call");
    } else if (f_->stopping()) {
      s = Unavailable("the server is shutting down");
    }
    l.Unlock();
    FinishWith(s);
  }

  void OnWriteDone(bool ok) override {
    {
      MutexLock l(mu_);
      writing_ = false;
      if (!ok) {
        if (finished_) return;
        finished_ = true;
      }
    }
    if (!ok) return FinishWith(Cancelled("the client went away"));
    Pump();
  }

  void OnCancel() override {
    JobEventStream* stream = nullptr;
    {
      MutexLock l(mu_);
      cancelled_ = true;
      stream = stream_.get();
    }
    if (stream != nullptr) stream->Close();  // its waker pumps us to the end
  }

  void OnDone() override {
    std::unique_ptr<JobEventStream> stream;
    {
      MutexLock l(mu_);
      stream = std::move(stream_);
    }
    if (stream != nullptr) f_->RemoveStream(stream.get());
    stream.reset();  // gives its event-stream slot back
    std::shared_ptr<WatchCall> me = std::move(self_);  // may be the last owner
  }

 private:
  void FinishWith(const Status& s) { Finish(f_->Answer(ctx_, kMethod, s, start_)); }

  Frontend* const f_;
  ::grpc::CallbackServerContext* const ctx_;
  const std::chrono::steady_clock::time_point start_;
  std::atomic<bool> queued_{false};  // on the pump's queue
  Mutex mu_;
  std::unique_ptr<JobEventStream> stream_ ABSL_GUARDED_BY(mu_);  // until OnDone
  pb::JobEvent event_;                      // being written
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
  std::shared_ptr<WatchCall> self_;         // until OnDone
};

void WatchPump::Loop() {
  MutexLock l(mu_);
  for (;;) {
    while (!stopped_ && queue_.empty()) cv_.Wait(mu_);
    if (queue_.empty()) return;  // stopped, and nothing left
    std::weak_ptr<WatchCall> next = std::move(queue_.front());
    queue_.pop_front();
    l.Unlock();
    if (std::shared_ptr<WatchCall> call = next.lock()) call->Pump();
    l.Lock();
  }
}

::grpc::ServerWriteReactor<pb::JobEvent>* StartWatch(Frontend* f, ::grpc::CallbackServerContext* ctx,
                                                    const pb::WatchJobRequest& req) {
  return WatchCall::Start(f, ctx, req);
}

}  // namespace flowstate::grpc_internal

// Private to distributed/ (worker_service.cc): the worker service's calls
// in flight. Every callback method's call is answered exactly once -- by its
// work, by its cancellation or by Shutdown, whichever comes first -- so the
// service tracks each as a Waiting until answered: a unary call as a Pending
// behind a Reactor, RecvTensorStream as a StreamSender. gRPC types appear
// here because these are gRPC reactors; the header is included only by the
// service's .cc files.
//
// Thread safety: Answer and Abandon may race from any threads (the work's,
// gRPC's cancellation, Shutdown); each call's mutex makes the first one win.
// A reactor deletes itself when gRPC is done with its call.
#ifndef FLOWSTATE_DISTRIBUTED_WORKER_CALLS_INTERNAL_H_
#define FLOWSTATE_DISTRIBUTED_WORKER_CALLS_INTERNAL_H_

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <functional>
#include <memory>

#include "graph/mutex.h"
#include "graph/status.h"
#include "graph/tensor.h"

namespace flowstate::distributed_internal {

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
            const std::function<void()>& fill = nullptr);

// The reactor of a Pending unary call: a cancellation answers CANCELLED and
// runs the call's on_cancel.
class Reactor final : public ::grpc::ServerUnaryReactor {
 public:
  explicit Reactor(std::shared_ptr<Pending> p) : p_(std::move(p)) { p_->reactor = this; }
  void OnCancel() override;
  void OnDone() override { delete this; }

 private:
  std::shared_ptr<Pending> p_;
};

// RecvTensorStream: waits for the tensor (holding no thread), then writes it
// in chunks of kChunkBytes (tensor_wire_internal.h), each pointing at the
// tensor's bytes, one after the other; deletes itself when the call is done.
class StreamSender final : public ::grpc::ServerWriteReactor<::grpc::ByteBuffer> {
 public:
  struct State final : Waiting {
    Mutex mu;
    bool finished ABSL_GUARDED_BY(mu) = false;  // waiting is over (Finish called or writing)
    StreamSender* reactor = nullptr;
    void Abandon(const ::grpc::Status& s) override;
  };
  StreamSender() : state_(std::make_shared<State>()) { state_->reactor = this; }
  const std::shared_ptr<State>& state() const { return state_; }

  // The rendezvous answered: write the tensor (or the error) unless the call
  // ended while it waited.
  static void Begin(const std::shared_ptr<State>& st, const Status& s, const Tensor& t);

  void OnWriteDone(bool ok) override;
  void OnCancel() override;
  void OnDone() override { delete this; }

 private:
  void WriteNext();

  std::shared_ptr<State> state_;
  std::atomic<bool> writing_{false};  // see OnWriteDone
  Tensor tensor_;
  size_t offset_ = 0;
  bool error_ = false;
  ::grpc::ByteBuffer buf_;
};

}  // namespace flowstate::distributed_internal

#endif  // FLOWSTATE_DISTRIBUTED_WORKER_CALLS_INTERNAL_H_

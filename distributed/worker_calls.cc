// The worker service's calls in flight (worker_calls_internal.h).
#include <algorithm>

#include "distributed/tensor_wire_internal.h"
#include "distributed/worker_calls_internal.h"

namespace flowstate::distributed_internal {

bool Answer(const std::shared_ptr<Pending>& p, const ::grpc::Status& s,
            const std::function<void()>& fill) {
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

void Reactor::OnCancel() {
  if (Answer(p_, ::grpc::Status(::grpc::StatusCode::CANCELLED, "cancelled")) && p_->on_cancel) {
    p_->on_cancel();
  }
}

void StreamSender::State::Abandon(const ::grpc::Status& s) {
  MutexLock l(mu);
  if (finished) return;
  finished = true;
  reactor->Finish(s);
}

void StreamSender::Begin(const std::shared_ptr<State>& st, const Status& s, const Tensor& t) {
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

void StreamSender::OnWriteDone(bool ok) {
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

void StreamSender::OnCancel() {
  state_->Abandon(::grpc::Status(::grpc::StatusCode::CANCELLED, "cancelled"));
}

void StreamSender::WriteNext() {
  const size_t n = std::min(kChunkBytes, tensor_.TotalBytes() - offset_);
  buf_ = EncodeTensorChunk(tensor_, offset_, n);
  offset_ += n;
  if (n == 0) offset_ = 1;  // an empty tensor: its header chunk is the last
  writing_.store(true, std::memory_order_release);
  StartWrite(&buf_);
}

}  // namespace flowstate::distributed_internal

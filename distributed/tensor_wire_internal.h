// Private to distributed/: RecvTensorResponse (api/worker.proto) encoded
// and decoded by hand, so that a tensor crosses without the copies protobuf
// would make. The encoder's buffer is a small header followed by one slice
// that points at the tensor's own bytes and keeps the tensor alive until
// gRPC has sent it; the decoder copies the received slices straight into a
// tensor allocated for them. The bytes on the wire are exactly protobuf's,
// so either side may be a plain protobuf peer. Stateless functions are
// thread-safe; a ChunkReceiver is not.
#ifndef FLOWSTATE_DISTRIBUTED_TENSOR_WIRE_INTERNAL_H_
#define FLOWSTATE_DISTRIBUTED_TENSOR_WIRE_INTERNAL_H_

#include <string>
#include <string_view>

#include "graph/allocator.h"
#include "graph/status.h"
#include "graph/tensor.h"

namespace grpc {
class ByteBuffer;  // <grpcpp/support/byte_buffer.h>, included by the .cc files
}  // namespace grpc

namespace flowstate::distributed_internal {

// A response carrying `t` (OK), or the status (not OK; t ignored). An
// uninitialized `t` is the rendezvous's dead mark: is_dead, no tensor.
::grpc::ByteBuffer EncodeRecvTensorResponse(const Status& status, const Tensor& t);

// The tensor of a response (uninitialized when is_dead); the status it
// carries when not OK; INVALID_ARGUMENT for a malformed one (naming `what`).
StatusOr<Tensor> DecodeRecvTensorResponse(const ::grpc::ByteBuffer& buffer, std::string_view what);

// RecvTensorStream's chunks (RecvTensorChunk): bytes [offset, offset + n)
// of `t`, the first (offset 0) with the dtype, shape and total size; the
// data slice points at the tensor's bytes. A failed receive: one chunk with
// the status. An uninitialized `t` (the dead mark) is one chunk with
// is_dead.
::grpc::ByteBuffer EncodeTensorChunk(const Tensor& t, size_t offset, size_t n);
::grpc::ByteBuffer EncodeChunkStatus(const Status& status);
// The size of the chunks the worker service sends.
constexpr size_t kChunkBytes = size_t(4) << 20;

// Puts a tensor together from its chunks as they arrive: the first
// allocates it, every chunk is copied straight into it. Not thread-safe.
class ChunkReceiver {
 public:
  // The tensor is allocated from `allocator` (not owned; null: the host's).
  ChunkReceiver(std::string what, Allocator* allocator)
      : what_(std::move(what)), allocator_(allocator) {}
  // INVALID_ARGUMENT for a malformed chunk or one out of place; the status
  // a failed receive carries.
  Status Add(const ::grpc::ByteBuffer& chunk);
  // The tensor, once every byte came (uninitialized, the dead mark, for a
  // dead value); INVALID_ARGUMENT otherwise.
  StatusOr<Tensor> Finish();

 private:
  std::string what_;
  Allocator* allocator_;
  bool have_header_ = false;
  bool dead_ = false;
  Tensor tensor_;
  size_t total_ = 0;
  size_t received_ = 0;
};

}  // namespace flowstate::distributed_internal

#endif  // FLOWSTATE_DISTRIBUTED_TENSOR_WIRE_INTERNAL_H_

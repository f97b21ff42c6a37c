// Private to distributed/: RecvTensorResponse (api/worker.proto) encoded
// and decoded by hand, so that a tensor crosses without the copies protobuf
// would make. The encoder's buffer is a small header followed by one slice
// that points at the tensor's own bytes and keeps the tensor alive until
// gRPC has sent it; the decoder copies the received slices straight into a
// tensor allocated for them. The bytes on the wire are exactly protobuf's,
// so either side may be a plain protobuf peer.
#ifndef FLOWSTATE_DISTRIBUTED_TENSOR_WIRE_H_
#define FLOWSTATE_DISTRIBUTED_TENSOR_WIRE_H_

#include <grpcpp/support/byte_buffer.h>

#include "graph/status.h"
#include "graph/tensor.h"

namespace flowstate::distributed_internal {

// A response carrying `t` (OK), or the status (not OK; t ignored).
::grpc::ByteBuffer EncodeRecvTensorResponse(const Status& status, const Tensor& t);

// The tensor of a response; the status it carries when not OK;
// INVALID_ARGUMENT for a malformed one (naming `what`).
StatusOr<Tensor> DecodeRecvTensorResponse(const ::grpc::ByteBuffer& buffer, std::string_view what);

}  // namespace flowstate::distributed_internal

#endif  // FLOWSTATE_DISTRIBUTED_TENSOR_WIRE_H_

// The fuzz entry of the worker-to-worker tensor decoders (entries.h): a
// peer's RecvTensor response and RecvTensorStream chunks
// (distributed/tensor_wire_internal.h), the bytes another task of a cluster sends.
#include <grpcpp/support/byte_buffer.h>
#include <grpcpp/support/slice.h>

#include <cstring>
#include <string>
#include <vector>

#include "distributed/tensor_wire_internal.h"
#include "fuzz/entries.h"
#include "fuzz/entries_internal.h"

namespace flowstate::fuzz {
namespace {

namespace dw = ::flowstate::distributed_internal;

// `bytes` cut into slices of `piece` bytes, as gRPC may hand them over.
::grpc::ByteBuffer Slices(std::string_view bytes, size_t piece) {
  std::vector<::grpc::Slice> slices;
  for (size_t i = 0; i < bytes.size(); i += piece) {
    slices.emplace_back(std::string(bytes.substr(i, piece)));
  }
  return ::grpc::ByteBuffer(slices.data(), slices.size());
}

// A status a peer sent is passed through with its own code: only the
// decoder's own errors must be client errors.
Status Outcome(const Status& s) { return IsClientError(s) ? s : Status(); }

void CheckRoundTrip(const Tensor& t, const char* entry) {
  // An uninitialized tensor is the rendezvous's dead mark (is_dead and no
  // tensor; tensor_wire_internal.h), a value the decoders accept: it must
  // come back as the dead mark.
  if (!t.IsInitialized()) {
    StatusOr<Tensor> again = dw::DecodeRecvTensorResponse(dw::EncodeRecvTensorResponse(Status(), t),
                                                         "again");
    if (!again.ok() || again->IsInitialized()) {
      Fail(entry, "the dead mark does not encode and decode back: " + again.status().ToString());
    }
    return;
  }
  CheckTensor(t, entry);
  StatusOr<Tensor> again = dw::DecodeRecvTensorResponse(dw::EncodeRecvTensorResponse(Status(), t),
                                                         "again");
  if (!again.ok() || again->dtype() != t.dtype() || again->shape() != t.shape() ||
      (t.TotalBytes() > 0 && std::memcmp(again->raw_data(), t.raw_data(), t.TotalBytes()) != 0)) {
    Fail(entry, "an accepted tensor does not encode and decode back exactly: " +
                    again.status().ToString());
  }
}

}  // namespace

Status TensorWire(std::string_view input) {
  if (input.empty()) return InvalidArgument("empty input");
  const uint8_t mode = uint8_t(input[0]);
  input.remove_prefix(1);
  const size_t piece = size_t(mode >> 1) % 16 + 1;
  if ((mode & 1) == 0) {
    StatusOr<Tensor> t = dw::DecodeRecvTensorResponse(Slices(input, piece), "fuzz");
    if (t.ok()) CheckRoundTrip(*t, "TensorWire(response)");
    return Outcome(t.status());
  }
  // Chunks: each a one-byte length, then that many bytes.
  dw::ChunkReceiver receiver("fuzz", nullptr);
  while (!input.empty()) {
    const size_t n = std::min(size_t(uint8_t(input[0])), input.size() - 1);
    Status s = receiver.Add(Slices(input.substr(1, n), piece));
    if (!s.ok()) return Outcome(s);
    input.remove_prefix(1 + n);
  }
  StatusOr<Tensor> t = receiver.Finish();
  if (t.ok()) CheckRoundTrip(*t, "TensorWire(chunks)");
  return Outcome(t.status());
}

}  // namespace flowstate::fuzz

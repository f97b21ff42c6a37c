// The fuzz targets' entry points (fuzz/README.md): each feeds one input, as
// raw bytes, through a decoder of client input, checks what it decoded, and
// returns the decoder's Status. Shared by the libFuzzer targets (fuzz/
// target.cc, built only with -DFLOWSTATE_BUILD_FUZZ=ON and clang) and by the
// regression test tests/fuzz/fuzz_regression_test.cc (the normal build),
// which feeds every kept input through the same function.
//
// A broken invariant aborts (so that libFuzzer reports it): a decoder error
// that is not a client error with a message (CheckClientError), or a value a
// decoder accepted that does not print and read back. Every other outcome is
// a return; the Status says what the decoder made of the input.
//
// Thread-compatible (the checkpoint entry reuses one in-memory file).
#ifndef FLOWSTATE_FUZZ_ENTRIES_H_
#define FLOWSTATE_FUZZ_ENTRIES_H_

#include <string_view>

#include "graph/status.h"

namespace flowstate::fuzz {

// The largest tensor an input may decode to: the server's limit is 64 MiB,
// but a fuzzer should not spend its time filling buffers.
inline constexpr size_t kFuzzMaxTensorBytes = size_t{1} << 20;

// api::ParseGraphJson; an accepted graph prints (GraphToJson, every
// encoding) and reads back.
Status GraphJson(std::string_view input);
// api::ParseTensorJson: the first byte picks the dtype asked for (none or
// one of DataType), the rest is the JSON; an accepted tensor prints in every
// encoding and reads back with its dtype, and exactly (bytes) under b64.
Status TensorJson(std::string_view input);
// The request bodies: ParseRunRequestJson, ParsePredictRequestJson,
// ParseGraphRequestJson, ParseRunOutputsJson and StatusFromJson on the same
// text; a run request that is accepted prints and reads back. The same bytes
// as a binary body (SplitBinaryBody): accepted feeds write out as a binary
// answer and read back. Returns the run request's Status.
Status Requests(std::string_view input);
// ParseJobSpec (api/job_spec.h), a job file or POST /v1/jobs body.
Status JobSpec(std::string_view input);
// The gRPC request conversions (api/proto_convert.h): the first byte picks
// the message (CreateSessionRequest, ExtendSessionRequest, RunSessionRequest,
// PredictRequest, Tensor, GraphDef), the rest is its protobuf encoding. An
// accepted tensor or graph converts back to protobuf and reads again.
Status GrpcRequests(std::string_view input);
// checkpoints::ImportSnapshot of the input as a file, and the tensor, chunk
// header and index records of checkpoints/format.h of the same bytes.
Status CheckpointImport(std::string_view input);

// distributed/tensor_wire_internal.h's decoders of another task's bytes: the first
// byte picks a RecvTensor response (even) or RecvTensorStream chunks (odd,
// each a one-byte length and its bytes) and the slice size gRPC hands them
// over in; an accepted tensor encodes and decodes back exactly. A status the
// peer sent comes back as OK (its code is the peer's, not a decoder error).
Status TensorWire(std::string_view input);

// api/onnx/'s ImportOnnx (with Variables and with constants) and
// ParseOnnxTensor of the input; an op, attribute value or dtype Flowstate
// lacks (UNIMPLEMENTED with a message) counts as a clean refusal and
// returns OK.
Status OnnxModel(std::string_view input);

// True when `s` is OK or an error a client's input may cause
// (INVALID_ARGUMENT, RESOURCE_EXHAUSTED, OUT_OF_RANGE, FAILED_PRECONDITION,
// NOT_FOUND; DATA_LOSS where `data_loss_ok`) with a message.
bool IsClientError(const Status& s, bool data_loss_ok = false);
// Aborts, naming `entry`, unless IsClientError(s, data_loss_ok).
void CheckClientError(const Status& s, const char* entry, bool data_loss_ok = false);

}  // namespace flowstate::fuzz

#endif  // FLOWSTATE_FUZZ_ENTRIES_H_

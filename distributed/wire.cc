#include "distributed/wire_internal.h"

#include <grpcpp/grpcpp.h>

#include "api/worker.grpc.pb.h"
#include "api/worker.pb.h"
#include "api/proto_convert.h"

namespace flowstate::distributed_internal {

void StatusToProto(const Status& s, wpb::StepStatus* proto) {
  proto->set_code(int(s.code()));
  proto->set_message(s.message());
  proto->set_node(s.node());
}

Status StatusFromProto(const wpb::StepStatus& proto) {
  if (proto.code() == 0) return Status();
  return Status(Code(proto.code()), proto.message(), proto.node());
}

void EncodeTensor(const Tensor& t, ::flowstate::v1::Tensor* proto) {
  proto_convert::TensorToProto(t, proto);
}

StatusOr<Tensor> DecodeTensor(const ::flowstate::v1::Tensor& proto, std::string_view what) {
  return proto_convert::TensorFromProto(proto, what, size_t(kMaxMessageBytes));
}

Status CallFailed(const std::string& task, std::string_view rpc, const ::grpc::Status& s) {
  std::string detail = std::string(rpc) + " failed: " + s.error_message();
  if (s.error_code() == ::grpc::StatusCode::RESOURCE_EXHAUSTED) {
    return ResourceExhausted(task + ": " + detail);
  }
  if (s.error_code() == ::grpc::StatusCode::DEADLINE_EXCEEDED) {
    return Unavailable(task + " is unavailable: " + std::string(rpc) +
                       " got no answer within its deadline");
  }
  return Unavailable(task + " is unavailable: " + detail + " (gRPC code " +
                     std::to_string(int(s.error_code())) + ")");
}

Status WithTask(const std::string& task, const Status& s) {
  if (s.ok() || s.message().rfind("/job:", 0) == 0) return s;
  return Status(s.code(), task + ": " + s.message(), s.node());
}

std::string TaskOfDevice(std::string_view device) {
  size_t job = device.find("/job:");
  size_t task = device.find("/task:");
  if (job == std::string_view::npos || task == std::string_view::npos) return "";
  size_t job_end = device.find('/', job + 5);
  size_t task_end = device.find('/', task + 6);
  std::string out(device.substr(job, job_end - job));
  out += device.substr(task, task_end == std::string_view::npos ? std::string_view::npos
                                                                : task_end - task);
  return out;
}

std::shared_ptr<::grpc::Channel> NewWorkerChannel(const std::string& address, double keepalive_s,
                                                  double keepalive_timeout_s) {
  ::grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(kMaxMessageBytes);
  args.SetMaxSendMessageSize(kMaxMessageBytes);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, std::max(100, int(keepalive_s * 1000)));
  args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, std::max(100, int(keepalive_timeout_s * 1000)));
  args.SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  // A receive window of a few chunks from the start (tensor_wire.h's
  // kChunkBytes), instead of growing it from 64 KiB.
  args.SetInt(GRPC_ARG_HTTP2_STREAM_LOOKAHEAD_BYTES, 8 << 20);
  args.SetInt(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
  // Reconnect soon after a task comes back (the default backoff grows to 2 min).
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 250);
  // One connection per task address, not shared with other channels.
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  return ::grpc::CreateCustomChannel(address, ::grpc::InsecureChannelCredentials(), args);
}

std::chrono::system_clock::time_point DeadlineIn(double seconds) {
  return std::chrono::system_clock::now() +
         std::chrono::microseconds(int64_t(seconds * 1e6));
}

}  // namespace flowstate::distributed_internal

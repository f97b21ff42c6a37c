// Private to distributed/: conversions between the engine's types and
// api/worker.proto's messages, the gRPC settings every worker channel and
// server uses, and task names. gRPC's and the generated messages' types are
// only declared here: the .cc files that use them include their headers
// (gRPC stays inside .cc files). Stateless functions: thread-safe.
#ifndef FLOWSTATE_DISTRIBUTED_WIRE_INTERNAL_H_
#define FLOWSTATE_DISTRIBUTED_WIRE_INTERNAL_H_

#include <chrono>
#include <climits>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "graph/status.h"
#include "graph/tensor.h"

namespace grpc {
class Channel;
class Status;
}  // namespace grpc
namespace flowstate::v1 {
class Tensor;
}  // namespace flowstate::v1
namespace flowstate::worker::v1 {
class StepStatus;
}  // namespace flowstate::worker::v1

namespace flowstate::distributed_internal {

namespace wpb = ::flowstate::worker::v1;

// gRPC's message limit for worker calls both ways: a tensor of up to about
// 2 GiB crosses in one message (protobuf's own limit).
constexpr int kMaxMessageBytes = INT_MAX;

void StatusToProto(const Status& s, wpb::StepStatus* proto);
Status StatusFromProto(const wpb::StepStatus& proto);

// Tensor <-> message; the decode refuses a malformed tensor (INVALID_ARGUMENT
// naming `what`).
void EncodeTensor(const Tensor& t, ::flowstate::v1::Tensor* proto);
StatusOr<Tensor> DecodeTensor(const ::flowstate::v1::Tensor& proto, std::string_view what);

// A failed call to `task` as the engine reports it: UNAVAILABLE naming the
// task (the task died, restarted, is unreachable or did not answer within
// the deadline), RESOURCE_EXHAUSTED for a message over the limits.
Status CallFailed(const std::string& task, std::string_view rpc, const ::grpc::Status& s);

// "<task>: <message>" unless the message already names a task ("/job:").
Status WithTask(const std::string& task, const Status& s);

// "/job:worker/task:2" of a device name "/job:worker/replica:0/task:2/device:CPU:0";
// "" when the name has no job or task.
std::string TaskOfDevice(std::string_view device);

// A channel to a worker: the message limits, and keepalive pings every
// `keepalive_s` that fail the calls on a connection whose peer stopped
// answering within `keepalive_timeout_s` (a task whose host vanished).
std::shared_ptr<::grpc::Channel> NewWorkerChannel(const std::string& address, double keepalive_s,
                                                  double keepalive_timeout_s);
// Deadline `seconds` from now.
std::chrono::system_clock::time_point DeadlineIn(double seconds);

}  // namespace flowstate::distributed_internal

#endif  // FLOWSTATE_DISTRIBUTED_WIRE_INTERNAL_H_

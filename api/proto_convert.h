// Conversions between api/flowstate.proto's messages and the engine's own
// types, for the gRPC frontend (server-internal: the only header outside
// generated code that names protobuf or gRPC types).
//
// Input conversions validate as the JSON codec (api/json_codec.h) does and
// report errors the same way: INVALID_ARGUMENT (RESOURCE_EXHAUSTED for a
// tensor over the size limit) whose message starts with the path of the
// offending field under a caller-chosen root, written as the JSON codec
// writes paths, so that the same mistake reads the same over REST and gRPC:
//
//   feeds["x:0"].shape[1]: expected a dimension (an int >= 0), got -3
//   graph.nodes[2].attrs.value.content: has 12 bytes, but a float32[2, 2] tensor has 16
//
// Errors inside a graph node name the node (Status::node()). Map fields are
// read in key order, so the first error reported is deterministic.
//
// Thread-safe: pure functions.
#ifndef FLOWSTATE_API_PROTO_CONVERT_H_
#define FLOWSTATE_API_PROTO_CONVERT_H_

#include <grpcpp/support/status.h>

#include <cstddef>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "api/flowstate.pb.h"
#include "graph/attr_value.h"
#include "graph/op_def.h"
#include "graph/status.h"
#include "graph/tensor.h"
#include "api/views.h"

namespace flowstate::proto_convert {

namespace pb = ::flowstate::v1;

using NamedTensors = std::vector<std::pair<std::string, Tensor>>;
using TensorMap = ::google::protobuf::Map<std::string, pb::Tensor>;
using StringList = ::google::protobuf::RepeatedPtrField<std::string>;

// --- Tensors.

// Checks dtype (a known name), shape (dims >= 0, rank <= 8), the size limit
// (RESOURCE_EXHAUSTED, before allocating) and that `content` holds exactly
// the tensor's bytes (bool bytes must be 0 or 1); `path` names the tensor.
StatusOr<Tensor> TensorFromProto(const pb::Tensor& proto, std::string_view path,
                                 size_t max_bytes);
// REQUIRES: t.IsInitialized().
void TensorToProto(const Tensor& t, pb::Tensor* proto);

// {name: tensor}: names must be tensor names ("x", "x:1"), as REST's feeds.
// Sorted by name.
StatusOr<NamedTensors> NamedTensorsFromProto(const TensorMap& tensors, std::string_view path,
                                             size_t max_bytes);
// Later duplicates of a name replace earlier ones.
void NamedTensorsToProto(const NamedTensors& tensors, TensorMap* proto);

// Fetches ("x", "x:1", not "^x") and targets (node names), checked as
// REST's run requests check them.
StatusOr<std::vector<std::string>> TensorNamesFromProto(const StringList& names,
                                                        std::string_view path);
StatusOr<std::vector<std::string>> NodeNamesFromProto(const StringList& names,
                                                      std::string_view path);

// --- Graphs.

struct GraphOptions {
  const OpRegistry* registry = nullptr;  // nullptr: OpRegistry::Global()
  size_t max_tensor_bytes = size_t{64} << 20;
};

// Reads nodes as api::ParseGraphJson does: name and op required, the op
// must be registered, inputs must parse as "x", "x:1" or "^x", attrs must be
// declared by the op (or named "_...") and hold a value of the declared kind
// (or one that converts without loss: AttrValue::CoercedTo); a tensor attr
// takes its dtype from, or sets, the node's "dtype" attr. Graph-level checks
// (duplicate names, dangling inputs, dtypes, shapes) are Graph::Create's.
StatusOr<GraphDef> GraphFromProto(const pb::GraphDef& proto, std::string_view path,
                                  const GraphOptions& options = {});
void GraphToProto(const GraphDef& graph, pb::GraphDef* proto);

// The graph of a Create/Extend request: graph_json (parsed by
// api::ParseGraphJson under the path "graph", exactly as REST's body field
// "graph"), or the structured graph (path "graph"); INVALID_ARGUMENT when
// neither is set (REST refuses a body without "graph" too).
StatusOr<GraphDef> GraphFromRequest(const pb::CreateSessionRequest& request,
                                    const GraphOptions& options = {});
StatusOr<GraphDef> GraphFromRequest(const pb::ExtendSessionRequest& request,
                                    const GraphOptions& options = {});
StatusOr<GraphDef> GraphFromRequest(const pb::GradientsRequest& request,
                                    const GraphOptions& options = {});

// --- Responses.

void JobToProto(const JobInfo& job, pb::Job* proto);
void JobEventToProto(const JobEvent& event, pb::JobEvent* proto);
void CheckpointToProto(const JobCheckpointInfo& c, pb::JobCheckpoint* proto);
// GET /v1/jobs/{id}/history as a message (time: seconds since the epoch).
void JobHistoryToProto(const JobHistory& h, pb::JobHistory* proto);
void OpToProto(const OpInfo& op, pb::Op* proto);
void DeviceToProto(const DeviceInfo& device, pb::Device* proto);
// An uploaded ONNX model (gRPC Models/*) and dataset (Datasets/*).
void ModelToProto(const ModelInfo& model, pb::Model* proto);
void DatasetToProto(const DatasetInfo& dataset, pb::Dataset* proto);
// `now`: seconds since the epoch, the time of the view (heartbeat ages), as
// api/views_json.h's ClusterInfoToJson.
void ClusterToProto(const ClusterInfo& cluster, double now, pb::GetClusterResponse* proto);
// Seconds since the epoch, rounded to milliseconds as REST prints them.
void SecondsToTimestamp(double seconds, ::google::protobuf::Timestamp* proto);

// --- Status.

// The same code (the codes are gRPC's) and the message, followed by
// " [node: NAME]" when the status names a node.
::grpc::Status ToGrpcStatus(const Status& status);
// The inverse, for clients and tests: the node is recovered from the
// message's " [node: NAME]" suffix.
Status FromGrpcStatus(const ::grpc::Status& status);

}  // namespace flowstate::proto_convert

#endif  // FLOWSTATE_API_PROTO_CONVERT_H_

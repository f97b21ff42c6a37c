// The fuzz entries of the service's decoders (entries.h): the job spec and
// the gRPC request conversions, both in api/ (no server library needed).
#include <cstring>
#include <string>

#include "api/flowstate.pb.h"
#include "fuzz/entries.h"
#include "fuzz/entries_internal.h"
#include "api/proto_convert.h"
#include "api/job_spec.h"

namespace flowstate::fuzz {
namespace {

namespace pb = ::flowstate::v1;
namespace gc = ::flowstate::proto_convert;

template <typename Message>
bool Decode(std::string_view bytes, Message* m) {
  return m->ParseFromArray(bytes.data(), int(bytes.size()));
}

Status TensorMessage(const pb::Tensor& proto) {
  StatusOr<Tensor> t = gc::TensorFromProto(proto, "tensor", kFuzzMaxTensorBytes);
  CheckClientError(t.status(), "GrpcRequests(tensor)");
  if (!t.ok()) return t.status();
  CheckTensor(*t, "GrpcRequests(tensor)");
  pb::Tensor back;
  gc::TensorToProto(*t, &back);
  StatusOr<Tensor> again = gc::TensorFromProto(back, "tensor", kFuzzMaxTensorBytes);
  if (!again.ok() || again->dtype() != t->dtype() || again->shape() != t->shape() ||
      (t->TotalBytes() > 0 &&
       std::memcmp(again->raw_data(), t->raw_data(), t->TotalBytes()) != 0)) {
    Fail("GrpcRequests", "an accepted tensor does not convert back exactly: " +
                             again.status().ToString());
  }
  return Status();
}

Status GraphMessage(const pb::GraphDef& proto) {
  StatusOr<GraphDef> g = gc::GraphFromProto(proto, "graph");
  CheckClientError(g.status(), "GrpcRequests(graph)");
  if (!g.ok()) return g.status();
  CheckGraphTensors(*g, "GrpcRequests(graph)");
  pb::GraphDef back;
  gc::GraphToProto(*g, &back);
  StatusOr<GraphDef> again = gc::GraphFromProto(back, "graph");
  if (!again.ok() || again->nodes.size() != g->nodes.size()) {
    Fail("GrpcRequests", "an accepted graph does not convert back: " + again.status().ToString());
  }
  return Status();
}

// The names and tensors of a run or predict request, as the frontend reads
// them; the first error.
Status NamesAndTensors(const gc::TensorMap& tensors, const gc::StringList& fetches,
                       const gc::StringList* targets, const char* tensors_path) {
  StatusOr<gc::NamedTensors> t = gc::NamedTensorsFromProto(tensors, tensors_path, kFuzzMaxTensorBytes);
  CheckClientError(t.status(), "GrpcRequests(tensors)");
  if (t.ok()) {
    for (const auto& [name, tensor] : *t) CheckTensor(tensor, "GrpcRequests(tensors)");
  }
  StatusOr<std::vector<std::string>> f = gc::TensorNamesFromProto(fetches, "fetches");
  CheckClientError(f.status(), "GrpcRequests(fetches)");
  Status s = t.ok() ? f.status() : t.status();
  if (targets != nullptr) {
    StatusOr<std::vector<std::string>> n = gc::NodeNamesFromProto(*targets, "targets");
    CheckClientError(n.status(), "GrpcRequests(targets)");
    if (s.ok()) s = n.status();
  }
  return s;
}

}  // namespace

Status JobSpec(std::string_view input) {
  StatusOr<flowstate::JobSpec> spec = ParseJobSpec(input);
  CheckClientError(spec.status(), "JobSpec");
  return spec.status();
}

Status GrpcRequests(std::string_view input) {
  if (input.empty()) return Status();
  const int pick = static_cast<unsigned char>(input[0]) % 6;
  input.remove_prefix(1);
  Status s;
  switch (pick) {
    case 0: {
      pb::CreateSessionRequest m;
      if (!Decode(input, &m)) return Status();
      StatusOr<GraphDef> g = gc::GraphFromRequest(m);
      if (g.ok()) CheckGraphTensors(*g, "GrpcRequests(create)");
      s = g.status();
      break;
    }
    case 1: {
      pb::ExtendSessionRequest m;
      if (!Decode(input, &m)) return Status();
      StatusOr<GraphDef> g = gc::GraphFromRequest(m);
      if (g.ok()) CheckGraphTensors(*g, "GrpcRequests(extend)");
      s = g.status();
      break;
    }
    case 2: {
      pb::RunSessionRequest m;
      if (!Decode(input, &m)) return Status();
      return NamesAndTensors(m.feeds(), m.fetches(), &m.targets(), "feeds");
    }
    case 3: {
      pb::PredictRequest m;
      if (!Decode(input, &m)) return Status();
      return NamesAndTensors(m.inputs(), m.fetches(), nullptr, "inputs");
    }
    case 4: {
      pb::Tensor m;
      if (!Decode(input, &m)) return Status();
      return TensorMessage(m);
    }
    default: {
      pb::GraphDef m;
      if (!Decode(input, &m)) return Status();
      return GraphMessage(m);
    }
  }
  CheckClientError(s, "GrpcRequests(session graph)");
  return s;
}

}  // namespace flowstate::fuzz

// The fuzz entries of api/'s JSON codec (entries.h), and CheckClientError.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>

#include "api/json_codec.h"
#include "fuzz/entries.h"
#include "fuzz/entries_internal.h"

namespace flowstate::fuzz {

void Fail(const char* entry, const std::string& why) {
  std::fprintf(stderr, "fuzz entry %s: %s\n", entry, why.c_str());
  std::abort();
}

bool IsClientError(const Status& s, bool data_loss_ok) {
  if (s.ok()) return true;
  switch (s.code()) {
    case Code::kInvalidArgument:
    case Code::kResourceExhausted:
    case Code::kOutOfRange:
    case Code::kFailedPrecondition:
    case Code::kNotFound:
      return !s.message().empty();
    case Code::kDataLoss:
      return data_loss_ok && !s.message().empty();
    default:
      return false;
  }
}

void CheckClientError(const Status& s, const char* entry, bool data_loss_ok) {
  if (!IsClientError(s, data_loss_ok)) {
    Fail(entry, "not a client error with a message: " + s.ToString());
  }
}

void CheckTensor(const Tensor& t, const char* entry) {
  if (!t.IsInitialized()) Fail(entry, "an uninitialized tensor");
  const size_t size = DataTypeSize(t.dtype());
  const int64_t n = t.num_elements();
  if (size == 0 || n < 0 || uint64_t(n) > SIZE_MAX / size || uint64_t(n) * size != t.TotalBytes()) {
    Fail(entry, "a tensor whose byte size overflows: " + std::string(DataTypeName(t.dtype())) +
                    t.shape().ToString());
  }
  if (t.TotalBytes() > 0) {
    if (t.raw_data() == nullptr) Fail(entry, "a tensor without a buffer");
    const volatile char* p = static_cast<const char*>(t.raw_data());
    (void)p[0];
    (void)p[t.TotalBytes() - 1];
  }
}

void CheckGraphTensors(const GraphDef& g, const char* entry) {
  for (const NodeDef& n : g.nodes) {
    for (const auto& [name, v] : n.attrs) {
      if (v.kind() == AttrKind::kTensor) CheckTensor(v.tensor(), entry);
    }
  }
}

namespace {

constexpr api::Encoding kEncodings[] = {api::Encoding::kData, api::Encoding::kB64,
                                        api::Encoding::kNested};

}  // namespace

Status GraphJson(std::string_view input) {
  StatusOr<GraphDef> g = api::ParseGraphJson(input);
  CheckClientError(g.status(), "GraphJson");
  if (!g.ok()) return g.status();
  CheckGraphTensors(*g, "GraphJson");
  for (api::Encoding e : kEncodings) {
    std::string text = api::GraphToJson(*g, e);
    StatusOr<GraphDef> again = api::ParseGraphJson(text);
    if (!again.ok()) {
      Fail("GraphJson", "an accepted graph does not read back from its " +
                            std::string(api::EncodingName(e)) +
                            " form: " + again.status().ToString() + "\n" + text.substr(0, 2000));
    }
    if (again->nodes.size() != g->nodes.size()) Fail("GraphJson", "read back with other nodes");
  }
  return Status();
}

Status TensorJson(std::string_view input) {
  std::optional<DataType> dtype;
  if (!input.empty()) {
    int pick = static_cast<unsigned char>(input[0]) % (kNumDataTypes + 1);
    if (pick < kNumDataTypes) dtype = DataType(pick);  // kInvalid: "none", as nullopt
    input.remove_prefix(1);
  }
  StatusOr<Tensor> t = api::ParseTensorJson(input, dtype, "tensor", kFuzzMaxTensorBytes);
  CheckClientError(t.status(), "TensorJson");
  if (!t.ok()) return t.status();
  CheckTensor(*t, "TensorJson");
  for (api::Encoding e : kEncodings) {
    std::string text = api::TensorToJson(*t, e);
    StatusOr<Tensor> again = api::ParseTensorJson(text, t->dtype(), "tensor", kFuzzMaxTensorBytes);
    if (!again.ok()) {
      Fail("TensorJson", "an accepted tensor does not read back from its " +
                             std::string(api::EncodingName(e)) +
                             " form: " + again.status().ToString() + "\n" + text.substr(0, 2000));
    }
    if (again->dtype() != t->dtype()) Fail("TensorJson", "read back with another dtype");
    if (e == api::Encoding::kB64 &&
        (again->shape() != t->shape() ||
         (t->TotalBytes() > 0 &&
          std::memcmp(again->raw_data(), t->raw_data(), t->TotalBytes()) != 0))) {
      Fail("TensorJson", "b64 did not read back exactly: " + text.substr(0, 2000));
    }
  }
  return Status();
}

Status Requests(std::string_view input) {
  CheckClientError(api::ParsePredictRequestJson(input, "", kFuzzMaxTensorBytes).status(),
                   "Requests(predict)");
  CheckClientError(api::ParseGraphRequestJson(input, "a session").status(), "Requests(graph)");
  CheckClientError(api::ParseRunOutputsJson(input, "", kFuzzMaxTensorBytes).status(),
                   "Requests(outputs)");
  (void)api::StatusFromJson(input);  // any Status; it must just not crash
  // The same bytes as a binary body: an accepted one's feeds write out as a
  // binary answer and read back the same.
  if (StatusOr<api::BinaryBody> b = api::SplitBinaryBody(input); b.ok()) {
    StatusOr<api::RunRequest> binary =
        api::ParseRunRequestJson(b->json, "", kFuzzMaxTensorBytes, nullptr, b->tensor_bytes);
    CheckClientError(binary.status(), "Requests(binary run)");
    if (binary.ok()) {
      for (const auto& [name, t] : binary->feeds) CheckTensor(t, "Requests(binary run)");
      StatusOr<api::NamedTensors> back =
          api::ParseRunOutputsBinary(api::RunOutputsToBinary(binary->feeds), kFuzzMaxTensorBytes);
      if (!back.ok() || back->size() != binary->feeds.size()) {
        Fail("Requests", "a binary body's feeds do not read back as a binary answer: " +
                             (back.ok() ? std::string("another count") : back.status().ToString()));
      }
      for (size_t i = 0; back.ok() && i < back->size(); ++i) {
        const Tensor& a = binary->feeds[i].second;
        const Tensor& t = (*back)[i].second;
        if (a.dtype() != t.dtype() || a.shape() != t.shape() ||
            std::memcmp(a.raw_data(), t.raw_data(), a.TotalBytes()) != 0) {
          Fail("Requests", "feed '" + binary->feeds[i].first + "' read back different in binary");
        }
      }
    }
  }
  StatusOr<api::RunRequest> r = api::ParseRunRequestJson(input, "", kFuzzMaxTensorBytes);
  CheckClientError(r.status(), "Requests(run)");
  if (!r.ok()) return r.status();
  for (const auto& [name, t] : r->feeds) CheckTensor(t, "Requests(run)");
  for (api::Encoding e : kEncodings) {
    std::string text = api::RunRequestToJson(*r, e);
    StatusOr<api::RunRequest> again = api::ParseRunRequestJson(text, "", kFuzzMaxTensorBytes);
    if (!again.ok()) {
      Fail("Requests", "an accepted run request does not read back from its " +
                           std::string(api::EncodingName(e)) +
                           " form: " + again.status().ToString() + "\n" + text.substr(0, 2000));
    }
    if (again->feeds.size() != r->feeds.size() || again->fetches != r->fetches ||
        again->targets != r->targets) {
      Fail("Requests", "a run request read back different: " + text.substr(0, 2000));
    }
    for (size_t i = 0; i < r->feeds.size(); ++i) {
      const Tensor& a = r->feeds[i].second;
      const Tensor& b = again->feeds[i].second;
      if (a.dtype() != b.dtype() || a.shape() != b.shape()) {
        Fail("Requests", "feed '" + r->feeds[i].first + "' read back as another dtype or shape: " +
                             text.substr(0, 2000));
      }
    }
  }
  return Status();
}

}  // namespace flowstate::fuzz

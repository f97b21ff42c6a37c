// Session-run, predict and graph request bodies, named tensor maps and
// error bodies (json_codec.h).
#include <vector>

#include "api/json_internal.h"
#include "graph/allocator.h"
#include "graph/graph.h"

namespace flowstate::api {
namespace internal {
namespace {

// A list of strings, each checked by `check` (which returns the error
// message for a bad one, or "").
template <typename Check>
StatusOr<std::vector<std::string>> ReadNames(const Json& v, const JsonPath& path, Check check) {
  if (!v.is_array()) return PathError(path, "expected a list of strings, got " + DescribeValue(v));
  std::vector<std::string> out;
  for (size_t i = 0; i < v.size(); ++i) {
    FS_ASSIGN_OR_RETURN(std::string s, ReadString(v[i], path.Index(int64_t(i))));
    std::string error = check(s);
    if (!error.empty()) return PathError(path.Index(int64_t(i)), error);
    out.push_back(std::move(s));
  }
  return out;
}

// "" when `name` is a tensor name ("x" or "x:1"), else why not.
std::string CheckTensorName(const std::string& name) {
  StatusOr<TensorId> id = ParseTensorId(name);
  if (!id.ok()) return id.status().message();
  if (id->is_control()) {
    return "'" + name + "' is a control input, not a tensor (list the node in \"targets\")";
  }
  return "";
}

// A request's "encoding" of its outputs: one of the JSON encodings, or
// "binary" (a binary body; *encoding stays as it was).
Status ReadOutputEncoding(const Json& v, const JsonPath& path, Encoding* encoding, bool* binary) {
  FS_ASSIGN_OR_RETURN(std::string name, ReadString(v, path));
  if (name == "binary") {
    *binary = true;
    return Status();
  }
  StatusOr<Encoding> e = EncodingFromString(name);
  if (!e.ok()) {
    return PathError(path, "unknown encoding '" + name +
                               "' (expected \"data\", \"b64\", \"nested\" or \"binary\")");
  }
  *encoding = *e;
  return Status();
}

StatusOr<Code> CodeFromName(std::string_view name) {
  for (int c = 0; c <= int(Code::kUnauthenticated); ++c) {
    if (CodeName(Code(c)) == name) return Code(c);
  }
  return InvalidArgument("unknown status code '" + std::string(name) + "'");
}

}  // namespace

StatusOr<NamedTensors> NamedTensorsFromJson(const Json& v, const JsonPath& path,
                                            size_t max_bytes, const FeedDtypes& dtypes,
                                            const std::string_view* tensor_bytes) {
  if (!v.is_object()) {
    return PathError(path, "expected an object of named tensors, got " + DescribeValue(v));
  }
  NamedTensors out;
  out.reserve(v.size());
  for (auto it = v.begin(); it != v.end(); ++it) {
    const JsonPath tensor_path = path.Key(it.key());
    std::string error = CheckTensorName(it.key());
    if (!error.empty()) return PathError(tensor_path, "bad name: " + error);
    // A nested array takes the dtype the graph expects, when known.
    std::optional<DataType> dtype;
    if (dtypes && !it->is_object()) dtype = dtypes(it.key());
    FS_ASSIGN_OR_RETURN(Tensor t, TensorFromJson(*it, dtype, tensor_path, max_bytes, tensor_bytes));
    out.emplace_back(it.key(), std::move(t));
  }
  return out;
}

void AppendNamedTensors(const NamedTensors& tensors, Encoding encoding, std::string* out,
                        bool self_describing) {
  out->push_back('{');
  for (size_t i = 0; i < tensors.size(); ++i) {
    if (i) out->push_back(',');
    AppendJsonString(tensors[i].first, out);
    out->push_back(':');
    const DataType dtype = tensors[i].second.dtype();
    const bool inferred_back = dtype == DataType::kFloat32 || dtype == DataType::kInt32 ||
                               dtype == DataType::kBool;
    AppendTensorJson(tensors[i].second,
                     self_describing && encoding == Encoding::kNested && !inferred_back
                         ? Encoding::kData
                         : encoding,
                     out);
  }
  out->push_back('}');
}

}  // namespace internal

using internal::Json;
using internal::JsonPath;

StatusOr<RunRequest> ParseRunRequestJson(std::string_view json, std::string_view path,
                                         size_t max_tensor_bytes, const FeedDtypes& dtypes,
                                         std::optional<std::string_view> tensor_bytes) {
  JsonPath root(path);
  internal::Document doc;
  Json& v = *doc;
  FS_RETURN_IF_ERROR(internal::ParseJsonText(json, root, &v, /*pack_tensor_data=*/true));
  FS_RETURN_IF_ERROR(internal::CheckObject(v, root, "a run request",
                                           {"feeds", "fetches", "targets", "encoding", "trace",
                                            "timeout_ms", "step_tag"}));
  RunRequest r;
  if (const Json* feeds = internal::FindField(v, "feeds")) {
    FS_ASSIGN_OR_RETURN(r.feeds, internal::NamedTensorsFromJson(
                                     *feeds, root.Key("feeds"), max_tensor_bytes, dtypes,
                                     tensor_bytes ? &*tensor_bytes : nullptr));
  }
  if (const Json* fetches = internal::FindField(v, "fetches")) {
    FS_ASSIGN_OR_RETURN(r.fetches, internal::ReadNames(*fetches, root.Key("fetches"),
                                                       internal::CheckTensorName));
  }
  if (const Json* targets = internal::FindField(v, "targets")) {
    auto check_node_name = [](const std::string& s) {
      Status st = ValidateNodeName(s);
      return st.ok() ? std::string() : st.message();
    };
    FS_ASSIGN_OR_RETURN(r.targets,
                        internal::ReadNames(*targets, root.Key("targets"), check_node_name));
  }
  if (const Json* encoding = internal::FindField(v, "encoding")) {
    FS_RETURN_IF_ERROR(internal::ReadOutputEncoding(*encoding, root.Key("encoding"), &r.encoding,
                                                    &r.binary_outputs));
  }
  FS_RETURN_IF_ERROR(internal::ReadBoolField(v, root, "trace", &r.trace));
  FS_RETURN_IF_ERROR(internal::ReadIntField(v, root, "timeout_ms", &r.timeout_ms, 0));
  FS_RETURN_IF_ERROR(internal::ReadStringField(v, root, "step_tag", &r.step_tag));
  if (r.step_tag.size() > 128) return internal::PathError(root.Key("step_tag"), "longer than 128 characters");
  return r;
}

StatusOr<PredictRequest> ParsePredictRequestJson(std::string_view json, std::string_view path,
                                                 size_t max_tensor_bytes, const FeedDtypes& dtypes,
                                                 std::optional<std::string_view> tensor_bytes) {
  JsonPath root(path);
  internal::Document doc;
  Json& v = *doc;
  FS_RETURN_IF_ERROR(internal::ParseJsonText(json, root, &v, /*pack_tensor_data=*/true));
  FS_RETURN_IF_ERROR(internal::CheckObject(v, root, "a predict request",
                                           {"inputs", "fetches", "encoding"}));
  PredictRequest r;
  if (const Json* inputs = internal::FindField(v, "inputs")) {
    FS_ASSIGN_OR_RETURN(r.inputs, internal::NamedTensorsFromJson(
                                      *inputs, root.Key("inputs"), max_tensor_bytes, dtypes,
                                      tensor_bytes ? &*tensor_bytes : nullptr));
  }
  const Json* fetches = internal::FindField(v, "fetches");
  if (fetches == nullptr) {
    return internal::PathError(root.Key("fetches"), "missing (the tensors to compute)");
  }
  FS_ASSIGN_OR_RETURN(r.fetches, internal::ReadNames(*fetches, root.Key("fetches"),
                                                     internal::CheckTensorName));
  if (const Json* encoding = internal::FindField(v, "encoding")) {
    FS_RETURN_IF_ERROR(internal::ReadOutputEncoding(*encoding, root.Key("encoding"), &r.encoding,
                                                    &r.binary_outputs));
  }
  return r;
}

StatusOr<GraphDef> ParseGraphRequestJson(std::string_view json, std::string_view what,
                                         const GraphJsonOptions& options) {
  JsonPath root("");
  internal::Document doc;
  Json& v = *doc;
  FS_RETURN_IF_ERROR(internal::ParseJsonText(json, root, &v));
  FS_RETURN_IF_ERROR(internal::CheckObject(v, root, what, {"graph"}));
  const Json* graph = internal::FindField(v, "graph");
  if (graph == nullptr) {
    return internal::PathError(root.Key("graph"),
                               "missing (the body is {\"graph\": {\"nodes\": [...]}})");
  }
  return internal::GraphFromJson(*graph, root.Key("graph"), options);
}

StatusOr<std::string> ParseCancelStepJson(std::string_view json) {
  JsonPath root("");
  internal::Document doc;
  Json& v = *doc;
  FS_RETURN_IF_ERROR(internal::ParseJsonText(json, root, &v));
  FS_RETURN_IF_ERROR(internal::CheckObject(v, root, "a cancel request", {"step_tag"}));
  std::string tag;
  FS_RETURN_IF_ERROR(internal::ReadStringField(v, root, "step_tag", &tag));
  if (tag.empty()) return internal::PathError(root.Key("step_tag"), "missing: the tag the run carried");
  return tag;
}

StatusOr<GradientsRequest> ParseGradientsRequestJson(std::string_view json,
                                                     const GraphJsonOptions& options) {
  JsonPath root("");
  internal::Document doc;
  Json& v = *doc;
  FS_RETURN_IF_ERROR(internal::ParseJsonText(json, root, &v));
  FS_RETURN_IF_ERROR(internal::CheckObject(v, root, "a gradients request", {"graph", "y", "xs", "prefix"}));
  GradientsRequest r;
  const Json* graph = internal::FindField(v, "graph");
  if (graph == nullptr) return internal::PathError(root.Key("graph"), "missing");
  FS_ASSIGN_OR_RETURN(r.graph, internal::GraphFromJson(*graph, root.Key("graph"), options));
  const Json* y = internal::FindField(v, "y");
  if (y == nullptr || !y->is_string()) {
    return internal::PathError(root.Key("y"), "expected the name of the tensor to differentiate");
  }
  r.y = y->get<std::string>();
  const Json* xs = internal::FindField(v, "xs");
  if (xs == nullptr || !xs->is_array() || xs->empty()) {
    return internal::PathError(root.Key("xs"), "expected a non-empty list of tensor names");
  }
  for (size_t i = 0; i < xs->size(); ++i) {
    if (!(*xs)[i].is_string()) return internal::PathError(root.Key("xs").Index(int64_t(i)), "expected a tensor name");
    r.xs.push_back((*xs)[i].get<std::string>());
  }
  if (const Json* p = internal::FindField(v, "prefix")) {
    if (!p->is_string()) return internal::PathError(root.Key("prefix"), "expected a name");
    r.prefix = p->get<std::string>();
  }
  return r;
}

std::string GradientsToJson(const GraphDef& added, const std::string& prefix,
                            const std::vector<Gradient>& grads) {
  std::string out = "{\"prefix\":";
  internal::AppendJsonString(prefix, &out);
  std::string nodes = GraphToJson(added);  // {"nodes":[...]}
  out += "," + nodes.substr(1, nodes.size() - 2) + ",\"gradients\":[";
  for (size_t i = 0; i < grads.size(); ++i) {
    if (i) out.push_back(',');
    const Gradient& g = grads[i];
    if (g.is_none()) {
      out += "null";
    } else if (!g.is_sparse) {
      out += "{\"dense\":";
      internal::AppendJsonString(g.dense.name(), &out);
      out.push_back('}');
    } else {
      out += "{\"indices\":";
      internal::AppendJsonString(g.indices.name(), &out);
      out += ",\"values\":";
      internal::AppendJsonString(g.values.name(), &out);
      out += ",\"dense_shape\":";
      internal::AppendJsonString(g.dense_shape.name(), &out);
      out.push_back('}');
    }
  }
  return out + "]}";
}

std::string RunRequestToJson(const RunRequest& request, Encoding feed_encoding) {
  std::string out = "{\"feeds\":";
  internal::AppendNamedTensors(request.feeds, feed_encoding, &out, /*self_describing=*/true);
  for (const auto& [key, names] : {std::pair{"fetches", &request.fetches},
                                   std::pair{"targets", &request.targets}}) {
    out += ",\"" + std::string(key) + "\":[";
    for (size_t i = 0; i < names->size(); ++i) {
      if (i) out.push_back(',');
      internal::AppendJsonString((*names)[i], &out);
    }
    out.push_back(']');
  }
  out += ",\"encoding\":";
  internal::AppendJsonString(request.binary_outputs ? "binary" : EncodingName(request.encoding),
                             &out);
  if (request.trace) out += ",\"trace\":true";
  if (request.timeout_ms != 0) out += ",\"timeout_ms\":" + std::to_string(request.timeout_ms);
  if (!request.step_tag.empty()) {
    out += ",\"step_tag\":";
    internal::AppendJsonString(request.step_tag, &out);
  }
  out.push_back('}');
  return out;
}

std::string RunOutputsToJson(const NamedTensors& outputs, Encoding encoding,
                             std::string_view trace_json) {
  std::string out = "{\"outputs\":";
  internal::AppendNamedTensors(outputs, encoding, &out);
  if (!trace_json.empty()) {
    out += ",\"trace\":";
    out += trace_json;
  }
  out.push_back('}');
  return out;
}

StatusOr<NamedTensors> ParseRunOutputsJson(std::string_view json, std::string_view path,
                                           size_t max_tensor_bytes) {
  JsonPath root(path);
  internal::Document doc;
  Json& v = *doc;
  FS_RETURN_IF_ERROR(internal::ParseJsonText(json, root, &v));
  FS_RETURN_IF_ERROR(internal::CheckObject(v, root, "a run response", {"outputs"}));
  const Json* outputs = internal::FindField(v, "outputs");
  if (outputs == nullptr) return internal::PathError(root, "missing \"outputs\"");
  return internal::NamedTensorsFromJson(*outputs, root.Key("outputs"), max_tensor_bytes);
}

StatusOr<BinaryBody> SplitBinaryBody(std::string_view body) {
  if (body.size() < 8) {
    return InvalidArgument("a binary body (" + std::string(kTensorsContentType) +
                           ") begins with 8 bytes that give the JSON's length; this one has " +
                           std::to_string(body.size()) + " bytes");
  }
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(body[size_t(i)]);
  if (n > body.size() - 8) {
    return InvalidArgument("a binary body's JSON is " + std::to_string(n) + " bytes long, but only " +
                           std::to_string(body.size() - 8) + " bytes follow its length");
  }
  return BinaryBody{body.substr(8, size_t(n)), body.substr(8 + size_t(n))};
}

std::string RunOutputsToBinary(const NamedTensors& outputs, std::string_view trace_json) {
  constexpr size_t kAlign = 64;
  std::string json = "{\"outputs\":{";
  size_t offset = 0;
  std::vector<size_t> begins;
  begins.reserve(outputs.size());
  for (size_t i = 0; i < outputs.size(); ++i) {
    const Tensor& t = outputs[i].second;
    offset = (offset + kAlign - 1) / kAlign * kAlign;
    begins.push_back(offset);
    if (i) json.push_back(',');
    internal::AppendJsonString(outputs[i].first, &json);
    json += ":{\"dtype\":";
    internal::AppendJsonString(DataTypeName(t.dtype()), &json);
    json += ",\"shape\":[";
    for (int d = 0; d < t.shape().rank(); ++d) {
      if (d) json.push_back(',');
      json += std::to_string(t.shape().dim(d));
    }
    json += "],\"data_offsets\":[" + std::to_string(offset) + "," +
            std::to_string(offset + t.TotalBytes()) + "]}";
    offset += t.TotalBytes();
  }
  json += "}";
  if (!trace_json.empty()) {
    json += ",\"trace\":";
    json += trace_json;
  }
  json += "}";
  // The JSON is padded with spaces so that the tensor bytes begin on a
  // multiple of kAlign from the body's start, as each tensor does from theirs.
  size_t head = 8 + json.size();
  json.append((kAlign - head % kAlign) % kAlign, ' ');
  std::string out;
  out.reserve(8 + json.size() + offset);
  AdviseHostHugePages(out.data(), out.capacity());
  uint64_t n = json.size();
  for (int i = 0; i < 8; ++i) out.push_back(char((n >> (8 * i)) & 0xff));
  out += json;
  const size_t base = out.size();
  for (size_t i = 0; i < outputs.size(); ++i) {
    const Tensor& t = outputs[i].second;
    out.append(base + begins[i] - out.size(), '\0');
    out.append(static_cast<const char*>(t.raw_data()), t.TotalBytes());
  }
  return out;
}

StatusOr<NamedTensors> ParseRunOutputsBinary(std::string_view body, size_t max_tensor_bytes) {
  FS_ASSIGN_OR_RETURN(BinaryBody b, SplitBinaryBody(body));
  JsonPath root("");
  internal::Document doc;
  Json& v = *doc;
  FS_RETURN_IF_ERROR(internal::ParseJsonText(b.json, root, &v));
  FS_RETURN_IF_ERROR(internal::CheckObject(v, root, "a run response", {"outputs", "trace"}));
  const Json* outputs = internal::FindField(v, "outputs");
  if (outputs == nullptr) return internal::PathError(root, "missing \"outputs\"");
  return internal::NamedTensorsFromJson(*outputs, root.Key("outputs"), max_tensor_bytes, nullptr,
                                        &b.tensor_bytes);
}

std::string StatusToJson(const Status& status) {
  std::string out = "{\"error\":{\"code\":";
  internal::AppendJsonString(CodeName(status.code()), &out);
  out += ",\"message\":";
  internal::AppendJsonString(status.message(), &out);
  out += ",\"node\":";
  internal::AppendJsonString(status.node(), &out);
  out += "}}";
  return out;
}

Status StatusFromJson(std::string_view json) {
  auto malformed = [](const Status& why) {
    return Status(Code::kUnknown, "malformed error body: " + why.message());
  };
  JsonPath root("");
  Json v;
  Status s = internal::ParseJsonText(json, root, &v);
  if (!s.ok()) return malformed(s);
  const Json* error = v.is_object() ? internal::FindField(v, "error") : nullptr;
  if (error == nullptr) return malformed(InvalidArgument("expected {\"error\": {...}}"));
  const Json& e = *error;
  const JsonPath error_path = root.Key("error");
  s = internal::CheckObject(e, error_path, "an error", {"code", "message", "node"});
  if (!s.ok()) return malformed(s);
  std::string strings[3];
  const char* keys[3] = {"code", "message", "node"};
  for (int k = 0; k < 3; ++k) {
    if (const Json* f = internal::FindField(e, keys[k])) {
      StatusOr<std::string> str = internal::ReadString(*f, error_path.Key(keys[k]));
      if (!str.ok()) return malformed(str.status());
      strings[k] = *str;
    }
  }
  StatusOr<Code> code = internal::CodeFromName(strings[0]);
  if (!code.ok()) return malformed(code.status());
  if (*code == Code::kOk) return Status();
  return Status(*code, strings[1], strings[2]);
}

int HttpStatusFor(Code code, int resource_exhausted_status) {
  switch (code) {
    case Code::kOk: return 200;
    case Code::kInvalidArgument:
    case Code::kFailedPrecondition:
    case Code::kOutOfRange: return 400;
    case Code::kUnauthenticated: return 401;
    case Code::kPermissionDenied: return 403;
    case Code::kNotFound: return 404;
    case Code::kAlreadyExists:
    case Code::kAborted: return 409;
    case Code::kResourceExhausted: return resource_exhausted_status;
    case Code::kCancelled: return 499;
    case Code::kUnimplemented: return 501;
    case Code::kUnavailable: return 503;
    case Code::kDeadlineExceeded: return 504;
    case Code::kUnknown:
    case Code::kInternal:
    case Code::kDataLoss: return 500;
  }
  return 500;
}

}  // namespace flowstate::api

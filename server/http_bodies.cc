#include "server/http_bodies.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cctype>

#include "server/json_views.h"

namespace flowstate::http_internal {
namespace {

// Objects keep the order of the document (the order of "inputs").
using Json = nlohmann::ordered_json;

bool IsIdentifier(std::string_view s) {
  if (s.empty() || std::isdigit(static_cast<unsigned char>(s[0]))) return false;
  return std::all_of(s.begin(), s.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_';
  });
}

// The codec's path syntax: ".key", or ["key"] when not an identifier.
std::string PathKey(const std::string& path, std::string_view key) {
  if (IsIdentifier(key)) return path.empty() ? std::string(key) : path + "." + std::string(key);
  return path + "[" + Json(std::string(key)).dump(-1, ' ', false, Json::error_handler_t::replace) +
         "]";
}

std::string PathIndex(const std::string& path, size_t i) {
  return path + "[" + std::to_string(i) + "]";
}

Status PathError(const std::string& path, const std::string& message) {
  return InvalidArgument(path.empty() ? message : path + ": " + message);
}

const char* KindOf(const Json& v) {
  switch (v.type()) {
    case Json::value_t::null: return "null";
    case Json::value_t::boolean: return "a bool";
    case Json::value_t::number_integer:
    case Json::value_t::number_unsigned: return "an integer";
    case Json::value_t::number_float: return "a number";
    case Json::value_t::string: return "a string";
    case Json::value_t::array: return "an array";
    case Json::value_t::object: return "an object";
    default: return "a value";
  }
}

// Parses a whole request body that must be a JSON object with only the
// fields in `allowed`.
Status ParseBody(std::string_view body, std::string_view what,
                 std::initializer_list<std::string_view> allowed, Json* out) {
  if (std::all_of(body.begin(), body.end(), [](char c) { return std::isspace(static_cast<unsigned char>(c)); })) {
    return InvalidArgument("the request has no body; expected " + std::string(what) +
                           " (a JSON object)");
  }
  try {
    *out = Json::parse(body.begin(), body.end());
  } catch (const Json::exception& e) {
    // "[json.exception.parse_error.101] parse error at line 1, column 2: ..."
    std::string_view w = e.what();
    size_t close = w.find("] ");
    if (w.starts_with("[json.exception.") && close != std::string_view::npos) w.remove_prefix(close + 2);
    return InvalidArgument("malformed JSON: " + std::string(w));
  }
  if (!out->is_object()) {
    return InvalidArgument("expected " + std::string(what) + " (a JSON object), got " + KindOf(*out));
  }
  for (auto it = out->begin(); it != out->end(); ++it) {
    if (std::find(allowed.begin(), allowed.end(), it.key()) != allowed.end()) continue;
    std::string fields;
    for (std::string_view f : allowed) fields += (fields.empty() ? "\"" : ", \"") + std::string(f) + "\"";
    return PathError(PathKey("", it.key()),
                     "unknown field (" + std::string(what) + " has " + fields + ")");
  }
  return Status();
}

const Json* Field(const Json& o, std::string_view key) {
  auto it = o.find(key);
  return it == o.end() || it->is_null() ? nullptr : &*it;
}

// A sub-document as text for the codec. (The parser refuses numbers a
// double cannot hold, 1e999, as malformed, so every number prints back.)
std::string SubDocument(const Json& v) { return v.dump(); }

// "" when `name` is a tensor name ("x" or "x:1"), else why not.
std::string CheckTensorName(const std::string& name) {
  StatusOr<TensorId> id = ParseTensorId(name);
  if (!id.ok()) return id.status().message();
  if (id->is_control()) return "'" + name + "' is a control input, not a tensor";
  return "";
}

class JobEventSource final : public EventSource {
 public:
  JobEventSource(std::unique_ptr<JobEventStream> stream, std::chrono::milliseconds keep_alive)
      : stream_(std::move(stream)),
        keep_alive_(std::max(keep_alive, std::chrono::milliseconds(1))),
        last_(std::chrono::steady_clock::now()) {}

  Pull Next(std::chrono::milliseconds timeout, std::string* chunk) override {
    if (ended_) return Pull::kEnd;
    auto now = std::chrono::steady_clock::now();
    auto until_keep_alive =
        std::chrono::duration_cast<std::chrono::milliseconds>(last_ + keep_alive_ - now);
    auto wait = std::min(std::max(until_keep_alive, std::chrono::milliseconds(0)),
                         std::max(timeout, std::chrono::milliseconds(0)));
    std::optional<JobEvent> e = stream_->Next(wait);
    now = std::chrono::steady_clock::now();
    if (e) {
      *chunk = "event: ";
      *chunk += JobEventKindName(e->kind);
      *chunk += "\ndata: ";
      *chunk += JobEventDataToJson(*e);
      *chunk += "\n\n";
      last_ = now;
      return Pull::kData;
    }
    if (!stream_->timed_out()) {  // the terminal event was read, or Close()
      ended_ = true;
      return Pull::kEnd;
    }
    if (now - last_ >= keep_alive_) {
      *chunk = ": keep-alive\n\n";
      last_ = now;
      return Pull::kData;
    }
    return Pull::kIdle;
  }

  void Close() override { stream_->Close(); }

 private:
  std::unique_ptr<JobEventStream> stream_;
  const std::chrono::milliseconds keep_alive_;
  std::chrono::steady_clock::time_point last_;  // of the last piece sent
  bool ended_ = false;
};

}  // namespace

StatusOr<GraphDef> ParseGraphBody(std::string_view body, std::string_view what,
                                  int64_t max_tensor_bytes) {
  Json v;
  FS_RETURN_IF_ERROR(ParseBody(body, what, {"graph"}, &v));
  const Json* graph = Field(v, "graph");
  if (graph == nullptr) return PathError("graph", "missing (the body is {\"graph\": {\"nodes\": [...]}})");
  const std::string text = SubDocument(*graph);
  api::GraphJsonOptions options;
  options.max_tensor_bytes = size_t(std::max<int64_t>(0, max_tensor_bytes));
  return api::ParseGraphJson(text, "graph", options);
}

StatusOr<PredictRequest> ParsePredictBody(std::string_view body, int64_t max_tensor_bytes) {
  Json v;
  FS_RETURN_IF_ERROR(ParseBody(body, "a predict request", {"inputs", "fetches", "encoding"}, &v));
  PredictRequest r;
  const size_t limit = size_t(std::max<int64_t>(0, max_tensor_bytes));
  if (const Json* inputs = Field(v, "inputs")) {
    if (!inputs->is_object()) {
      return PathError("inputs", std::string("expected an object of named tensors, got ") +
                                     KindOf(*inputs));
    }
    for (auto it = inputs->begin(); it != inputs->end(); ++it) {
      const std::string path = PathKey("inputs", it.key());
      std::string why = CheckTensorName(it.key());
      if (!why.empty()) return PathError(path, "bad name: " + why);
      const std::string text = SubDocument(*it);
      FS_ASSIGN_OR_RETURN(Tensor t, api::ParseTensorJson(text, std::nullopt, path, limit));
      r.inputs.emplace_back(it.key(), std::move(t));
    }
  }
  const Json* fetches = Field(v, "fetches");
  if (fetches == nullptr) return PathError("fetches", "missing (the tensors to compute)");
  if (!fetches->is_array()) {
    return PathError("fetches", std::string("expected a list of strings, got ") + KindOf(*fetches));
  }
  for (size_t i = 0; i < fetches->size(); ++i) {
    const Json& f = (*fetches)[i];
    if (!f.is_string()) {
      return PathError(PathIndex("fetches", i), std::string("expected a string, got ") + KindOf(f));
    }
    std::string why = CheckTensorName(f.get<std::string>());
    if (!why.empty()) return PathError(PathIndex("fetches", i), why);
    r.fetches.push_back(f.get<std::string>());
  }
  if (const Json* encoding = Field(v, "encoding")) {
    if (!encoding->is_string()) {
      return PathError("encoding", std::string("expected a string, got ") + KindOf(*encoding));
    }
    StatusOr<api::Encoding> e = api::EncodingFromString(encoding->get<std::string>());
    if (!e.ok()) return PathError("encoding", e.status().message());
    r.encoding = *e;
  }
  return r;
}

std::shared_ptr<EventSource> MakeJobEventSource(std::unique_ptr<JobEventStream> stream,
                                                std::chrono::milliseconds keep_alive) {
  return std::make_shared<JobEventSource>(std::move(stream), keep_alive);
}

}  // namespace flowstate::http_internal

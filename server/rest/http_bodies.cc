#include "server/rest/http_bodies.h"

#include <algorithm>
#include <cctype>

#include "api/views_json.h"

namespace flowstate::http_internal {
namespace {

// A body of only white space is no document: say so rather than "malformed".
Status CheckHasBody(std::string_view body, std::string_view what) {
  if (std::all_of(body.begin(), body.end(),
                  [](char c) { return std::isspace(static_cast<unsigned char>(c)); })) {
    return InvalidArgument("the request has no body; expected " + std::string(what) +
                           " (a JSON object)");
  }
  return Status();
}

size_t TensorLimit(int64_t max_tensor_bytes) {
  return size_t(std::max<int64_t>(0, max_tensor_bytes));
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

  void SetWaker(std::function<void()> wake) override { stream_->SetWaker(std::move(wake)); }

  std::chrono::milliseconds UntilKeepAlive() const override {
    auto left = std::chrono::ceil<std::chrono::milliseconds>(last_ + keep_alive_ -
                                                             std::chrono::steady_clock::now());
    return std::max(left, std::chrono::milliseconds(0));
  }

 private:
  std::unique_ptr<JobEventStream> stream_;
  const std::chrono::milliseconds keep_alive_;
  std::chrono::steady_clock::time_point last_;  // of the last piece sent
  bool ended_ = false;
};

}  // namespace

StatusOr<GraphDef> ParseGraphBody(std::string_view body, std::string_view what,
                                  int64_t max_tensor_bytes) {
  FS_RETURN_IF_ERROR(CheckHasBody(body, what));
  api::GraphJsonOptions options;
  options.max_tensor_bytes = TensorLimit(max_tensor_bytes);
  return api::ParseGraphRequestJson(body, what, options);
}

bool IsTensorsBody(const HttpRequest& req) {
  auto it = req.headers.find("content-type");
  if (it == req.headers.end()) return false;
  std::string_view v = it->second;
  v = v.substr(0, v.find(';'));  // parameters, if any, say nothing here
  while (!v.empty() && std::isspace(static_cast<unsigned char>(v.back()))) v.remove_suffix(1);
  while (!v.empty() && std::isspace(static_cast<unsigned char>(v.front()))) v.remove_prefix(1);
  return v.size() == api::kTensorsContentType.size() &&
         std::equal(v.begin(), v.end(), api::kTensorsContentType.begin(), [](char a, char b) {
           return std::tolower(static_cast<unsigned char>(a)) == b;
         });
}

StatusOr<api::RunRequest> ParseRunBody(std::string_view body, bool binary, int64_t max_tensor_bytes,
                                       const api::FeedDtypes& dtypes) {
  if (binary) {
    FS_ASSIGN_OR_RETURN(api::BinaryBody b, api::SplitBinaryBody(body));
    FS_RETURN_IF_ERROR(CheckHasBody(b.json, "a run request"));
    return api::ParseRunRequestJson(b.json, "", TensorLimit(max_tensor_bytes), dtypes,
                                    b.tensor_bytes);
  }
  FS_RETURN_IF_ERROR(CheckHasBody(body, "a run request"));
  return api::ParseRunRequestJson(body, "", TensorLimit(max_tensor_bytes), dtypes);
}

StatusOr<api::PredictRequest> ParsePredictBody(std::string_view body, bool binary,
                                               int64_t max_tensor_bytes,
                                               const api::FeedDtypes& dtypes) {
  if (binary) {
    FS_ASSIGN_OR_RETURN(api::BinaryBody b, api::SplitBinaryBody(body));
    FS_RETURN_IF_ERROR(CheckHasBody(b.json, "a predict request"));
    return api::ParsePredictRequestJson(b.json, "", TensorLimit(max_tensor_bytes), dtypes,
                                        b.tensor_bytes);
  }
  FS_RETURN_IF_ERROR(CheckHasBody(body, "a predict request"));
  return api::ParsePredictRequestJson(body, "", TensorLimit(max_tensor_bytes), dtypes);
}

HttpResponse OutputsResponse(const api::NamedTensors& outputs, bool binary, api::Encoding encoding,
                             std::string_view trace_json) {
  HttpResponse r;
  if (binary) {
    r.content_type = std::string(api::kTensorsContentType);
    r.body = api::RunOutputsToBinary(outputs, trace_json);
  } else {
    r.body = api::RunOutputsToJson(outputs, encoding, trace_json);
  }
  return r;
}

std::shared_ptr<EventSource> MakeJobEventSource(std::unique_ptr<JobEventStream> stream,
                                                std::chrono::milliseconds keep_alive) {
  return std::make_shared<JobEventSource>(std::move(stream), keep_alive);
}

}  // namespace flowstate::http_internal

// PRIVATE to the REST frontend (http_routes.cc): request bodies that hold a
// graph or a predict request, parsed once by the JSON codec (api/json_codec.h)
// after an empty body is refused with its own message, so errors name the
// JSON path ("graph.nodes[2].attrs.dtype: ...", "inputs.x[1]: ..."); and the
// job event stream as server-sent events.
#ifndef FLOWSTATE_SERVER_REST_HTTP_BODIES_H_
#define FLOWSTATE_SERVER_REST_HTTP_BODIES_H_

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "api/json_codec.h"
#include "graph/attr_value.h"
#include "graph/status.h"
#include "graph/tensor.h"
#include "server/rest/http_routes.h"
#include "jobs/job_manager.h"

namespace flowstate::http_internal {

// {"graph": {...}} (POST /v1/sessions, POST /v1/sessions/{id}/extend).
// `what` names the body in messages ("a session").
StatusOr<GraphDef> ParseGraphBody(std::string_view body, std::string_view what,
                                  int64_t max_tensor_bytes);

// Whether a request's Content-Type is api::kTensorsContentType (a binary
// body: the JSON after its 8-byte length, then the tensor bytes); any other
// type, or none, is read as JSON.
bool IsTensorsBody(const HttpRequest& req);

// {"feeds": {name: tensor}, "fetches": [...], "targets": [...], "encoding": "data"}
// (POST /v1/sessions/{id}/run), in JSON or, with `binary`, a binary body.
StatusOr<api::RunRequest> ParseRunBody(std::string_view body, bool binary, int64_t max_tensor_bytes,
                                       const api::FeedDtypes& dtypes = nullptr);

// {"inputs": {name: tensor}, "fetches": [...], "encoding": "data"}
// (POST /v1/jobs/{id}/predict), as a run's. "fetches" is required.
StatusOr<api::PredictRequest> ParsePredictBody(std::string_view body, bool binary,
                                               int64_t max_tensor_bytes,
                                               const api::FeedDtypes& dtypes = nullptr);

// The outputs of a run or predict: binary (api::RunOutputsToBinary) when the
// request asked "encoding": "binary", else JSON in `encoding`.
HttpResponse OutputsResponse(const api::NamedTensors& outputs, bool binary, api::Encoding encoding,
                             std::string_view trace_json = {});

// The events of one job as text/event-stream ("event: step\ndata: {job}\n\n"),
// with ": keep-alive" comments after `keep_alive` of silence; ends after the
// event of a terminal state or on Close(). Its waker is the job stream's.
std::shared_ptr<EventSource> MakeJobEventSource(std::unique_ptr<JobEventStream> stream,
                                                std::chrono::milliseconds keep_alive);

}  // namespace flowstate::http_internal

#endif  // FLOWSTATE_SERVER_REST_HTTP_BODIES_H_

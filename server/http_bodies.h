// PRIVATE to the REST frontend (http_routes.cc): the small request bodies
// that are not the codec's own documents, parsed with every error naming
// the JSON path of the bad value, and the job event stream as server-sent
// events. Graphs and tensors inside the bodies go through the JSON codec
// (api/json_codec.h), so their errors read "graph.nodes[2].attrs.dtype: ..."
// and "inputs.x[1]: ...".
#ifndef FLOWSTATE_SERVER_HTTP_BODIES_H_
#define FLOWSTATE_SERVER_HTTP_BODIES_H_

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
#include "server/http_routes.h"
#include "server/job_manager.h"

namespace flowstate::http_internal {

// {"graph": {...}} (POST /v1/sessions, POST /v1/sessions/{id}/extend).
// `what` names the body in messages ("a session").
StatusOr<GraphDef> ParseGraphBody(std::string_view body, std::string_view what,
                                  int64_t max_tensor_bytes);

// {"inputs": {name: tensor}, "fetches": [...], "encoding": "data"}
// (POST /v1/jobs/{id}/predict). "fetches" is required.
struct PredictRequest {
  std::vector<std::pair<std::string, Tensor>> inputs;
  std::vector<std::string> fetches;
  api::Encoding encoding = api::Encoding::kData;
};
StatusOr<PredictRequest> ParsePredictBody(std::string_view body, int64_t max_tensor_bytes);

// The events of one job as text/event-stream ("event: step\ndata: {job}\n\n"),
// with ": keep-alive" comments after `keep_alive` of silence; ends after the
// event of a terminal state or on Close().
std::shared_ptr<EventSource> MakeJobEventSource(std::unique_ptr<JobEventStream> stream,
                                                std::chrono::milliseconds keep_alive);

}  // namespace flowstate::http_internal

#endif  // FLOWSTATE_SERVER_HTTP_BODIES_H_

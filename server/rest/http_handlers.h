// PRIVATE to the REST frontend (http_routes.cc, http_catalog_routes.cc):
// what a route's handler is handed (Call), the helpers every handler uses,
// and the handlers that live outside http_routes.cc -- the catalog's:
// uploaded models (and a job's ONNX export), uploaded datasets and the
// gradients of a graph. http_routes.cc's route table names them.
//
// Handlers are plain functions of their Call; they may run on many threads
// at once (http_routes.h's thread safety).
#ifndef FLOWSTATE_SERVER_REST_HTTP_HANDLERS_H_
#define FLOWSTATE_SERVER_REST_HTTP_HANDLERS_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "server/rest/http_routes.h"
#include "server/service.h"

namespace flowstate::http_internal {

// One call of a route: the request, the context and the {id} of the path.
struct Call {
  const HttpRequest& req;
  RouteContext& ctx;
  const std::string& id;
  const std::string& arg;  // the second parameter of the path ({step}), "" when none
  Service& service() const { return *ctx.service; }
  int64_t max_tensor_bytes() const { return ctx.options.max_tensor_bytes; }
};

using Handler = HttpResponse (*)(const Call&);

// A JSON answer with this status.
HttpResponse JsonResponse(int status, std::string body);

// The value of `key` in the target's query ("?step=5&x=1"), if present,
// percent-decoded ("my%20cnn", "my+cnn" -> "my cnn"; a '%' not followed by
// two hex digits stays as it is).
std::optional<std::string> QueryParam(std::string_view target, std::string_view key);

// --- The catalog (http_catalog_routes.cc).

// POST /v1/models[?name=]: the body is the .onnx file's bytes.
HttpResponse UploadModel(const Call& c);
HttpResponse ListModels(const Call& c);
HttpResponse GetModel(const Call& c);
HttpResponse DeleteModel(const Call& c);
// GET /v1/jobs/{id}/model.onnx
HttpResponse ExportJobOnnx(const Call& c);
// POST /v1/datasets[?final=false], POST /v1/datasets/{id}/append?offset=N
HttpResponse UploadDataset(const Call& c);
HttpResponse AppendDataset(const Call& c);
HttpResponse ListDatasets(const Call& c);
HttpResponse GetDataset(const Call& c);
HttpResponse DeleteDataset(const Call& c);
// POST /v1/gradients
HttpResponse Gradients(const Call& c);

}  // namespace flowstate::http_internal

#endif  // FLOWSTATE_SERVER_REST_HTTP_HANDLERS_H_

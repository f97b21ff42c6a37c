// The REST API as a pure function: HandleRequest maps one HTTP request
// (plain structs, no sockets, no Boost) onto the Service and renders the
// answer, exactly as DESIGN.md's route table and server/API.md say. The
// socket layer (http_server.cc) only moves bytes; tests drive this directly.
// The handlers are http_routes.cc's and, for the catalog (models, datasets,
// gradients), http_catalog_routes.cc's (http_handlers.h).
//
//   GET    /healthz /readyz /metrics /v1/openapi.json
//   GET    /v1/ops   /v1/devices   /v1/cluster
//   POST   /v1/sessions                 DELETE /v1/sessions/{id}
//   POST   /v1/sessions/{id}/extend     POST   /v1/sessions/{id}/run
//   POST   /v1/sessions/{id}/cancel     POST   /v1/gradients
//   GET    /v1/jobs   POST /v1/jobs     GET    /v1/jobs/{id}
//   GET    /v1/jobs/{id}/events (server-sent events)
//   POST   /v1/jobs/{id}/cancel | pause | resume | predict
//   GET    POST /v1/jobs/{id}/checkpoints (501 on a server without a store)
//   GET    /v1/jobs/{id}/checkpoints/export[?step=N][&format=fsck|npz]
//   POST   /v1/checkpoints/import
//   GET    /v1/jobs/{id}/spec (the document as submitted)
//   GET    /v1/jobs/{id}/history   /v1/jobs/{id}/traces   /v1/jobs/{id}/traces/{step}
//   GET    /v1/jobs/{id}/model.onnx
//   GET    POST /v1/models              GET    DELETE /v1/models/{id}
//   GET    POST /v1/datasets            GET    DELETE /v1/datasets/{id}
//   POST   /v1/datasets/{id}/append
//   GET    /  /console/{file}           the web console (web/), served without a token
//
// api/openapi.json describes every route of the table (RouteTable below;
// tests/server/openapi_test.cc holds the two to each other).
//
// Errors are api::StatusToJson bodies with the api::HttpStatusFor status;
// an unknown path is 404, a known path with another method 405 with an
// Allow header, a missing or wrong bearer token 401 with WWW-Authenticate
// (checked before the route is looked up, except for open routes and the
// console's files; the rule is server/auth.h's, shared with gRPC).
// CheckHead tells the socket layer, from the request's header alone, whether
// it will be refused whatever its body, so that it never reads the body of
// such a request. A rejected request changes nothing: bodies are parsed and checked in full
// before the Service is called, and the Service refuses atomically.
//
// Thread safety: HandleRequest may run on many threads at once with one
// RouteContext (it only reads it; Service and Metrics are thread-safe).
#ifndef FLOWSTATE_SERVER_REST_HTTP_ROUTES_H_
#define FLOWSTATE_SERVER_REST_HTTP_ROUTES_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "graph/status.h"

namespace flowstate {

class Service;
class Metrics;

struct HttpRequest {
  std::string method;  // "GET", as sent (methods are case-sensitive)
  std::string target;  // origin form: "/v1/jobs/job-3?x=1" (the query is ignored)
  // Names lower-case; a header sent twice is here twice, in the order sent.
  std::multimap<std::string, std::string> headers;
  std::string body;
  // Set by the socket layer when it handles the request on a thread that
  // must not block (an I/O thread, InlinePolicy): a step route whose step
  // may wait or run unbounded (Service::SessionStepMayWait,
  // PredictMayWait) then answers `deferred` without running it, and the
  // socket layer hands the request to its step threads.
  bool must_not_wait = false;
};

// The body of a streaming response (text/event-stream), pulled piece by
// piece by the socket layer. Next(), UntilKeepAlive() and the destructor are
// called from one thread at a time; Close() and SetWaker() from any thread.
//
// The socket layer waits without a thread or a polling timer: it pulls with
// Next(0) until kIdle, then waits until the waker is called or
// UntilKeepAlive() has passed, whichever comes first.
class EventSource {
 public:
  enum class Pull { kData, kIdle, kEnd };
  virtual ~EventSource() = default;
  // Waits at most `timeout` (0: not at all) for the next piece. kData: it is
  // in *chunk. kIdle: none yet. kEnd: the body is complete (also after
  // Close()), and every later call says so again.
  virtual Pull Next(std::chrono::milliseconds timeout, std::string* chunk) = 0;
  // Ends the stream early and wakes a waiting Next().
  virtual void Close() = 0;
  // `wake` is called, from any thread and possibly under the producer's
  // locks (so it must only schedule work), whenever Next(0) may have
  // something new: a piece, the end. Replaces the previous one.
  virtual void SetWaker(std::function<void()> wake) = 0;
  // How long from now until Next would send a keep-alive comment by itself
  // (0 when one is due).
  virtual std::chrono::milliseconds UntilKeepAlive() const = 0;
};

struct HttpResponse {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;
  // Headers besides Content-Type, Content-Length and Connection.
  std::vector<std::pair<std::string, std::string>> headers;
  // Non-null: a streaming response; `body` is empty and the socket layer
  // sends what `stream` yields until it ends.
  std::shared_ptr<EventSource> stream;
  // Where the server's time went (name, seconds), in the order measured,
  // for the Server-Timing header (W3C Server Timing) the socket layer sends:
  // "step" is the engine's part of a session run or predict, "handler" all
  // of HandleRequest; the socket layer adds "read" and "total".
  std::vector<std::pair<const char*, double>> timings;
  // The request was not handled: it must run where it may wait
  // (HttpRequest::must_not_wait). Nothing else is set, nothing recorded.
  bool deferred = false;
};

struct RouteOptions {
  std::vector<std::string> tokens;  // empty: no authentication
  // Paths or route templates ("/v1/jobs/{id}") served without a token.
  std::vector<std::string> open_routes = {"/healthz", "/readyz", "/metrics", "/v1/openapi.json"};
  int64_t max_tensor_bytes = int64_t{64} << 20;  // per tensor of a request (413 above)
  // An event stream sends ": keep-alive" after this much silence.
  std::chrono::milliseconds keep_alive_interval{15000};
};

struct RouteContext {
  Service* service = nullptr;  // required, not owned
  Metrics* metrics = nullptr;  // optional, not owned: /metrics and request metrics
  RouteOptions options;
};

// Handles one request, records it with metrics->ObserveHttpRequest(route
// template, status, seconds), appends {"handler", seconds} to the response's
// timings, and never throws (an exception becomes 500).
HttpResponse HandleRequest(const HttpRequest& req, RouteContext& ctx);

// What the socket layer does with a request whose header (method, target,
// headers; no body yet) has been read. kRead: read the body (up to
// http.body_limit_bytes) and handle it. kReadUnauthenticated: the same, but
// the request carries no valid token and needs none (an open route while
// tokens are configured), so its body may be at most
// http.unauthenticated_body_limit_bytes. kRefuse: HandleRequest will refuse
// it whatever its body (401 without a valid token, 404 for an unknown path,
// 405 for a method the route lacks): do not read the body; HandleRequest on
// the header alone gives the answer.
enum class HeadVerdict { kRead, kReadUnauthenticated, kRefuse };
HeadVerdict CheckHead(const HttpRequest& head, const RouteContext& ctx);

// Where the socket layer runs a request: kCheap on its I/O thread;
// kExpensive (parses and validates a graph, closes a session: bounded, but
// not cheap) off it, on the handler pool; kStep (POST
// /v1/sessions/{id}/run, /v1/jobs/{id}/predict: may wait on a queue or run
// a loop) on the step threads (server/step_threads.h), where no step
// delays another request -- or on the I/O thread when the last one of the
// same path was quick (InlinePolicy) and this step cannot wait or run
// unbounded (HttpRequest::must_not_wait). Unknown routes and methods are
// kCheap (their 404/405 is).
enum class RequestCost { kCheap, kExpensive, kStep };
RequestCost CostOf(const HttpRequest& req);

// Every (method, route template) of the table, in its order:
// {"GET", "/v1/jobs/{id}"}, ... For checks of the table against its
// description (api/openapi.h).
struct RouteMethod {
  std::string method;
  std::string path;
};
std::vector<RouteMethod> RouteTable();

// The route template a target belongs to ("/v1/jobs/{id}"), or "unmatched":
// the label of requests the socket layer answers itself (413, 400).
std::string RouteTemplateFor(std::string_view target);

// An error response: api::StatusToJson(status) with `http_status`, or
// api::HttpStatusFor(status.code()) when 0. REQUIRES: !status.ok().
HttpResponse ErrorResponse(const Status& status, int http_status = 0);

}  // namespace flowstate

#endif  // FLOWSTATE_SERVER_REST_HTTP_ROUTES_H_

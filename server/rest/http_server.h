// HttpServer: the REST frontend (Boost.Beast, asynchronous, a thread pool):
// keep-alive, read and idle timeouts, body limits answered with 413 (no
// body is read before its request is authenticated), a cap on connections,
// bounded pipelining, bearer-token auth, server-sent events for job
// progress (event-driven: an idle stream costs no thread and no timer but
// its keep-alive), and /metrics. Requests are handled by pure functions of the
// request and the Service (http_routes.h); this class only owns sockets.
//
// Thread safety: Start/Stop from one thread; serves from its own threads.
#ifndef FLOWSTATE_SERVER_REST_HTTP_SERVER_H_
#define FLOWSTATE_SERVER_REST_HTTP_SERVER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "graph/status.h"

namespace flowstate {

class Service;
class Metrics;

struct HttpServerOptions {
  std::string address = "127.0.0.1:8080";  // port 0: pick a free one
  int threads = 2;
  // The body of an authenticated request (or of any request when there are
  // no tokens): 413 above it.
  int64_t body_limit_bytes = int64_t{64} << 20;
  // Never is a body read before its request is authenticated: a request
  // refused on its header (401, 404, 405; CheckHead in http_routes.h) is
  // answered without reading its body, and its connection closed -- unless
  // the body is declared no bigger than this, which is then read and
  // dropped so that the connection can go on. Requests served without a
  // valid token (open routes while tokens are configured) may send at most
  // this much (413 above it).
  int64_t unauthenticated_body_limit_bytes = int64_t{64} << 10;
  // Connections open at once, event streams included. One more is answered
  // 503 (Retry-After: 1) and closed; beyond 64 such answers under way at
  // once, further ones are closed unanswered.
  int max_connections = 4096;
  double read_timeout_seconds = 30;
  double idle_timeout_seconds = 60;
  int max_pipelined_requests = 16;
  std::vector<std::string> tokens;  // empty: no authentication
  std::vector<std::string> open_routes = {"/healthz", "/readyz", "/metrics", "/v1/openapi.json"};
  int64_t max_tensor_bytes = int64_t{64} << 20;
  // A step (session run, predict) whose last run of the same route and id
  // took less than this runs on the I/O thread instead of the handler pool,
  // at most threads - 1 at once. 0: always the pool.
  int64_t inline_below_us = 500;
  // After its last handler, an I/O thread polls this long before it sleeps,
  // so that a client's next request finds it awake. 0: never spin.
  int64_t spin_us = 100;
  // Send a Server-Timing header (W3C Server Timing) with each response, in
  // milliseconds: "read" (from the request's first bytes to it being read
  // and parsed), "step" (the engine's part of a session run or predict),
  // "handler" (the route's), "total" (from the first bytes to the response
  // being queued for writing).
  bool server_timing = true;
  bool log_requests = false;
};

class HttpServer {
 public:
  // Binds and starts serving; UNAVAILABLE naming the address if it cannot
  // bind. `service` and `metrics` must outlive the server.
  static StatusOr<std::unique_ptr<HttpServer>> Start(Service* service, Metrics* metrics,
                                                     const HttpServerOptions& options);
  virtual ~HttpServer() = default;
  // The bound port (useful with port 0).
  virtual int port() const = 0;
  // Stops accepting, ends open connections (event streams included) and
  // joins the threads. Idempotent.
  virtual void Stop() = 0;
};

}  // namespace flowstate

#endif  // FLOWSTATE_SERVER_REST_HTTP_SERVER_H_

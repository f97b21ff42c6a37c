// HttpServer: the REST frontend (Boost.Beast, asynchronous, a thread pool):
// keep-alive, read and idle timeouts, a body limit answered with 413,
// bounded pipelining, bearer-token auth, server-sent events for job
// progress, and /metrics. Requests are handled by pure functions of the
// request and the Service (http_routes.h); this class only owns sockets.
//
// Thread safety: Start/Stop from one thread; serves from its own threads.
#ifndef FLOWSTATE_SERVER_HTTP_SERVER_H_
#define FLOWSTATE_SERVER_HTTP_SERVER_H_

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
  int64_t body_limit_bytes = int64_t{64} << 20;
  double read_timeout_seconds = 30;
  double idle_timeout_seconds = 60;
  int max_pipelined_requests = 16;
  std::vector<std::string> tokens;  // empty: no authentication
  std::vector<std::string> open_routes = {"/healthz", "/readyz", "/metrics"};
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

#endif  // FLOWSTATE_SERVER_HTTP_SERVER_H_

// The REST frontend's sockets: Boost.Beast's asynchronous HTTP/1.1 server
// (after example/advanced/server). This file listens, accepts and runs the
// threads; http_connection.cc serves one connection; http_connection.h
// declares both and is the only header of the server that names Boost (the
// CLI's HTTP client, cli/client_command.cc, is Boost's other user).
//
// Threads. Each of the `options.threads` I/O threads runs its own
// io_context, and a new connection goes to the next one in turn: the thread
// that epoll wakes for a socket runs its handlers (a shared io_context would
// hand each handler to another sleeping thread, a wake-up per request).
// Each connection owns a strand, so its handlers never run concurrently. An
// I/O thread polls for options.spin_us after its last handler before it
// sleeps (RunContext). Cheap requests are
// handled on the I/O thread; expensive ones (CostOf: graph
// parsing, steps) on a small handler pool, whose result is posted back to the
// connection's strand, so a long step stalls no other connection. Steps
// (RequestCost::kStep: session run, predict) run on StepThreads, a thread
// each, so that steps blocked on a queue or in a loop hold up neither other
// requests nor the QueueClose or DELETE that would end them -- except that
// a step whose previous run (same method and path) took less than
// options.inline_below_us runs on the I/O thread, at most threads - 1 at
// once (InlinePolicy), when it cannot wait or run unbounded (no queue, no
// Recv, no collective, no loop: Service::SessionStepMayWait; else the route
// answers `deferred` and it goes to the step threads): a tiny step then
// costs no hand-off and back.
//
// A connection handles one request at a time, in order: read it, handle it,
// queue its response, read the next. Responses are written in order while
// the next requests are read (pipelining), at most max_pipelined_requests
// queued; beyond that it stops reading until a write completes.
//
// Server-Timing: a connection stamps when a request's first bytes were read
// (or, pipelined, when reading it began with them buffered) and when it was
// parsed; the handler's timings (HttpResponse::timings) then get "read"
// before and "total" after them, sent unless options.server_timing is off.
//
// Timeouts (beast::tcp_stream, separate read and write timers): a request
// must arrive whole within read_timeout of its first byte (of the accept for
// the first request); between requests a connection may be silent for
// idle_timeout; a write must finish within max(read_timeout, 30 s).
//
// Event streams: the response head is written, then the connection pulls
// the EventSource without waiting (Next with a 0 timeout) and, when it has
// nothing, waits -- for the source's waker (a new event, the end), which
// posts one wake-up to the connection's strand (StreamWake), or for its
// steady_timer, set to when a keep-alive comment is due. An idle stream thus
// costs no thread and no wake-up but its keep-alives; an I/O thread never
// blocks on it. The body is chunked (HTTP/1.1) or ends with the connection
// (HTTP/1.0). A connection reads no further requests while a stream is queued.
//
// Bodies and auth: a request's header is read first and judged
// (CheckHead): one that will be refused whatever its body (401, 404, 405)
// is answered at once and its connection closed, its body never read
// (unless declared no bigger than unauthenticated_body_limit_bytes: then it
// is read and the connection goes on). A body is then read up to
// body_limit_bytes, or up to unauthenticated_body_limit_bytes for a request
// served without a valid token (open routes). So an unauthenticated client
// makes the server buffer at most that much per connection.
//
// Connections: at most max_connections are served at once; one more is
// answered 503 and closed (at most kMaxRefusing of those at once; further
// ones are closed unanswered), counted by Metrics.
//
// Closing: after a "Connection: close" response or a request that could not
// be read (413, 400), the connection shuts down its sending side and reads
// and discards what the client still sends for a moment, so the client sees
// the response rather than a reset. Stop() closes the acceptor and every
// connection (streams included), then joins the threads.
#include "server/rest/http_server.h"

#include "graph/mutex.h"
#include "server/rest/http_connection.h"

namespace flowstate {
namespace rest_internal {

// --- The server.

StatusOr<tcp::endpoint> ResolveAddress(const std::string& address, net::io_context& ioc) {
  size_t colon = address.rfind(':');
  if (colon == std::string::npos) {
    return InvalidArgument("http address '" + address + "' is not HOST:PORT");
  }
  std::string host = address.substr(0, colon), port_text = address.substr(colon + 1);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  if (host.empty() || host == "*") host = "0.0.0.0";
  int port = -1;
  if (!port_text.empty() && port_text.size() <= 5 &&
      std::all_of(port_text.begin(), port_text.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    port = std::stoi(port_text);
  }
  if (port < 0 || port > 65535) {
    return InvalidArgument("http address '" + address + "': bad port '" + port_text + "'");
  }
  beast::error_code ec;
  net::ip::address ip = net::ip::make_address(host, ec);
  if (!ec) return tcp::endpoint(ip, static_cast<unsigned short>(port));
  tcp::resolver resolver(ioc);
  auto results = resolver.resolve(host, port_text, ec);
  if (ec || results.empty()) {
    return Unavailable("cannot resolve http address '" + address + "': " + ec.message());
  }
  return results.begin()->endpoint();
}

Status HttpServerImpl::Listen() {
  FS_ASSIGN_OR_RETURN(tcp::endpoint endpoint, ResolveAddress(options_.address, *iocs_[0]));
  beast::error_code ec;
  auto fail = [&](const char* what) {
    return Unavailable("cannot listen on " + options_.address + ": " + what + ": " + ec.message());
  };
  acceptor_.open(endpoint.protocol(), ec);
  if (ec) return fail("open");
  acceptor_.set_option(net::socket_base::reuse_address(true), ec);
  if (ec) return fail("set_option");
  acceptor_.bind(endpoint, ec);
  if (ec) return fail("bind");
  acceptor_.listen(net::socket_base::max_listen_connections, ec);
  if (ec) return fail("listen");
  port_ = acceptor_.local_endpoint(ec).port();
  return Status();
}

// Runs `ioc` until it stops. After the last handler, the thread keeps
// polling (non-blocking epoll) for `spin` before it sleeps in epoll_wait: a
// client's next request usually comes within that, and is then handled
// without waking a sleeping thread -- on an idle VM each wake-up costs tens
// of microseconds. Spinning burns at most `spin` of a core per burst of
// requests; 0 never spins.
void RunContext(net::io_context& ioc, std::chrono::microseconds spin) {
  if (spin.count() == 0) {
    ioc.run();
    return;
  }
  while (!ioc.stopped()) {
    if (ioc.poll() > 0) continue;
    const auto until = Clock::now() + spin;
    bool ran = false;
    while (!ioc.stopped() && Clock::now() < until) {
      if (ioc.poll() > 0) {
        ran = true;
        break;
      }
    }
    if (!ran && !ioc.stopped()) ioc.run_one();
  }
}

void HttpServerImpl::Run() {
  net::dispatch(acceptor_.get_executor(), [this] { Accept(); });
  for (auto& ioc : iocs_) works_.push_back(net::make_work_guard(*ioc));
  const auto spin = std::chrono::microseconds(std::max<int64_t>(0, options_.spin_us));
  for (auto& ioc : iocs_) {
    threads_.emplace_back([ioc = ioc.get(), spin] {
      for (;;) {
        try {
          RunContext(*ioc, spin);
          return;
        } catch (const std::exception& e) {
          std::fprintf(stderr, "http: unexpected exception in an I/O thread: %s\n", e.what());
        }
      }
    });
  }
}

void HttpServerImpl::Accept() {
  net::io_context& ioc = *iocs_[next_context_++ % iocs_.size()];
  acceptor_.async_accept(net::make_strand(ioc), [this](beast::error_code ec, tcp::socket socket) {
    if (!acceptor_.is_open()) return;
    if (ec) {
      // Out of file descriptors and the like: breathe, then go on.
      if (ec == net::error::operation_aborted) return;
      retry_timer_.expires_after(std::chrono::milliseconds(50));
      retry_timer_.async_wait([this](beast::error_code e) {
        if (!e && acceptor_.is_open()) Accept();
      });
      return;
    }
    beast::error_code ignored;
    socket.set_option(tcp::no_delay(true), ignored);
    auto c = std::make_shared<Connection>(std::move(socket), this);
    switch (Register(c)) {
      case Admission::kServe: c->Start(); break;
      case Admission::kRefuse: c->Refuse(); break;
      case Admission::kClose: break;  // c's socket closes with it
    }
    Accept();
  });
}

HttpServerImpl::Admission HttpServerImpl::Register(const std::shared_ptr<Connection>& c) {
  MutexLock l(mu_);
  if (stopped_) return Admission::kClose;
  Metrics* m = ctx_.metrics;
  if (served_ < std::max(1, options_.max_connections)) {
    connections_[c.get()] = Entry{c, true};
    ++served_;
    if (m != nullptr) m->SetHttpConnections(served_);
    return Admission::kServe;
  }
  if (m != nullptr) m->CountRefusedHttpConnection();
  if (refusing_ >= kMaxRefusing) return Admission::kClose;
  connections_[c.get()] = Entry{c, false};
  ++refusing_;
  return Admission::kRefuse;
}

void HttpServerImpl::Unregister(Connection* c) {
  MutexLock l(mu_);
  auto it = connections_.find(c);
  if (it == connections_.end()) return;
  if (it->second.served) {
    --served_;
    if (ctx_.metrics != nullptr) ctx_.metrics->SetHttpConnections(served_);
  } else {
    --refusing_;
  }
  connections_.erase(it);
}

void HttpServerImpl::Stop() {
  std::vector<std::shared_ptr<Connection>> open;
  {
    MutexLock l(mu_);
    if (stopped_) return;
    stopped_ = true;
    for (auto& [p, e] : connections_) {
      if (auto c = e.connection.lock()) open.push_back(std::move(c));
    }
  }
  net::post(acceptor_.get_executor(), [this] {
    beast::error_code ec;
    acceptor_.close(ec);
    retry_timer_.cancel();
  });
  for (auto& c : open) c->Close();
  open.clear();
  for (auto& w : works_) w.reset();
  // Closed sockets complete their operations at once; give the threads a
  // moment to run out of work, then stop whatever is left.
  auto deadline = Clock::now() + std::chrono::seconds(2);
  auto all_stopped = [&] {
    return std::all_of(iocs_.begin(), iocs_.end(), [](const auto& c) { return c->stopped(); });
  };
  while (!all_stopped() && Clock::now() < deadline && !threads_.empty()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  for (auto& ioc : iocs_) ioc->stop();
  for (auto& t : threads_) t.join();
  threads_.clear();
  pool_.join();  // handlers under way finish; their answers go nowhere
  // Steps under way finish (the service ends them first on a shutdown:
  // Service::CloseSessions); their answers go nowhere.
  step_threads_.Stop();
}

}  // namespace rest_internal

using rest_internal::HttpServerImpl;

StatusOr<std::unique_ptr<HttpServer>> HttpServer::Start(Service* service, Metrics* metrics,
                                                        const HttpServerOptions& options) {
  auto server = std::make_unique<HttpServerImpl>(service, metrics, options);
  FS_RETURN_IF_ERROR(server->Listen());
  server->Run();
  return std::unique_ptr<HttpServer>(std::move(server));
}

}  // namespace flowstate
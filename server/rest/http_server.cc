// The REST frontend's sockets: Boost.Beast's asynchronous HTTP/1.1 server
// (after example/advanced/server), the only translation unit that sees Boost.
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
// connection's strand, so a long step stalls no other connection -- except
// that a step (RequestCost::kStep: session run, predict) whose previous run
// (same method and path) took less than options.inline_below_us runs on the
// I/O thread too, at most threads - 1 at once (InlinePolicy): a tiny step
// then costs no hand-off to the pool and back.
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

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <deque>
#include <limits>
#include <map>
#include <mutex>
#include <optional>
#include <thread>

#include "server/rest/http_routes.h"
#include "server/inline_policy.h"
#include "server/metrics.h"
#include "server/server_timing.h"

namespace flowstate {
namespace {

namespace beast = boost::beast;
namespace http = beast::http;
namespace net = boost::asio;
using tcp = net::ip::tcp;
using Clock = std::chrono::steady_clock;

// Connections answered 503 (over max_connections) at once; beyond, closed.
constexpr int kMaxRefusing = 64;
constexpr auto kLinger = std::chrono::seconds(2);
constexpr size_t kLingerBytes = size_t{64} << 20;
constexpr size_t kMaxStreamWrite = size_t{64} << 10;
constexpr uint32_t kHeaderLimit = 64 * 1024;

Clock::duration Seconds(double s) {
  return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(std::max(s, 0.001)));
}

std::string Lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = char(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

class HttpServerImpl;
class Connection;

// How an event stream's producer wakes the connection that sends it: Fire()
// (any thread, possibly under the producer's locks) posts one OnStreamWake
// to the connection's strand -- at most one queued at a time -- until
// Detach().
class StreamWake {
 public:
  StreamWake(std::weak_ptr<Connection> c, net::any_io_executor ex)
      : conn_(std::move(c)), executor_(std::move(ex)) {}
  void Fire();
  // On the strand, before the connection pulls the source.
  void Clear() {
    std::lock_guard<std::mutex> l(mu_);
    pending_ = false;
  }
  void Detach() {
    std::lock_guard<std::mutex> l(mu_);
    conn_.reset();
  }

 private:
  std::mutex mu_;
  std::weak_ptr<Connection> conn_;  // GUARDED_BY(mu_); empty once detached
  net::any_io_executor executor_;
  bool pending_ = false;  // GUARDED_BY(mu_)
};

// The request's method, target and headers (no body).
HttpRequest HeadOf(const http::request<http::string_body>& req) {
  HttpRequest r;
  r.method = std::string(req.method_string());
  r.target = std::string(req.target());
  for (const auto& f : req) r.headers.emplace(Lower(f.name_string()), std::string(f.value()));
  return r;
}

class Connection : public std::enable_shared_from_this<Connection> {
 public:
  Connection(tcp::socket&& socket, HttpServerImpl* server);
  ~Connection();
  void Start();
  // Answers 503 (the server is at max_connections), then closes.
  void Refuse();
  // Closes now (Stop()); thread-safe.
  void Close();
  // A stream's source may have something new (StreamWake).
  void OnStreamWake();

 private:
  struct Outgoing {
    std::shared_ptr<http::response<http::string_body>> message;
    // A streaming response: its head, and the source of its body.
    std::shared_ptr<http::response<http::empty_body>> head;
    std::shared_ptr<http::response_serializer<http::empty_body>> serializer;
    std::shared_ptr<EventSource> source;
    bool chunked = false;
    bool close = false;  // close the connection after it
  };

  void DoRead();
  void OnIdleRead(beast::error_code ec, size_t n);
  void ReadHeader();
  void OnHeader(beast::error_code ec);
  void ReadBody();
  void OnBody(beast::error_code ec);
  void OnReadError(beast::error_code ec);
  // Answers a request refused on its header, without reading its body.
  void RefuseUnread(HttpRequest head, unsigned version);
  void Handle(http::request<http::string_body> req);
  void OnHandled(HttpResponse r, bool keep_alive, unsigned version, std::string method,
                 std::string target, Clock::time_point t0);
  void Enqueue(HttpResponse r, bool keep_alive, unsigned version);
  void MaybeRead();
  void WriteFront();
  void OnWritten(beast::error_code ec);
  void PumpStream();
  void OnStreamWritten(beast::error_code ec, bool last);
  void FinishFront();
  void GracefulClose();
  void Drain();
  void CloseNow();

  HttpServerImpl* server_;
  beast::tcp_stream stream_;
  net::steady_timer poll_timer_;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  std::deque<Outgoing> queue_;  // front: being written
  std::string chunk_;           // the stream piece being written
  std::shared_ptr<StreamWake> wake_;  // of the stream being sent
  bool stream_waiting_ = false;  // for the waker or the keep-alive timer
  // The body limit of the request being read, and its setting's name.
  int64_t body_limit_ = 0;
  const char* body_limit_key_ = "http.body_limit_bytes";
  char discard_[4096];
  size_t drained_ = 0;
  Clock::time_point read_deadline_;
  // When the request being read began to arrive (its first bytes were read,
  // or it was already buffered): the start of Server-Timing's "total".
  Clock::time_point request_start_;
  Clock::time_point request_read_;  // when it had been read and parsed
  bool first_request_ = true;
  bool reading_ = false;
  bool handling_ = false;
  bool no_more_reads_ = false;  // the client or a response ended the connection
  int streams_queued_ = 0;
  bool closing_ = false;        // graceful close under way
  bool closed_ = false;
};

class HttpServerImpl final : public HttpServer {
 public:
  HttpServerImpl(Service* service, Metrics* metrics, const HttpServerOptions& options)
      : options_(options),
        iocs_(MakeContexts(std::max(1, options.threads))),
        acceptor_(net::make_strand(*iocs_[0])),
        retry_timer_(acceptor_.get_executor()),
        pool_(size_t(std::max(2, options.threads))),
        inline_policy_(InlinePolicy::Options{
            std::chrono::microseconds(options.inline_below_us),
            // One I/O thread always stays free of steps.
            std::max(0, options.threads - 1)}) {
    ctx_.service = service;
    ctx_.metrics = metrics;
    ctx_.options.tokens = options.tokens;
    ctx_.options.open_routes = options.open_routes;
    ctx_.options.max_tensor_bytes = options.max_tensor_bytes;
    read_timeout_ = Seconds(options.read_timeout_seconds);
    idle_timeout_ = Seconds(options.idle_timeout_seconds);
    write_timeout_ = std::max<Clock::duration>(read_timeout_, std::chrono::seconds(30));
  }
  ~HttpServerImpl() override { Stop(); }

  Status Listen();
  void Run();
  int port() const override { return port_; }
  void Stop() override;

  // For connections.
  RouteContext& ctx() { return ctx_; }
  net::thread_pool& pool() { return pool_; }
  InlinePolicy& inline_policy() { return inline_policy_; }
  const HttpServerOptions& options() const { return options_; }
  Clock::duration read_timeout() const { return read_timeout_; }
  Clock::duration idle_timeout() const { return idle_timeout_; }
  Clock::duration write_timeout() const { return write_timeout_; }
  enum class Admission { kServe, kRefuse, kClose };
  // kServe: serve it; kRefuse: answer 503 (over max_connections); kClose:
  // close it (stopping, or too many being refused).
  Admission Register(const std::shared_ptr<Connection>& c);
  void Unregister(Connection* c);

 private:
  static std::vector<std::unique_ptr<net::io_context>> MakeContexts(int n) {
    std::vector<std::unique_ptr<net::io_context>> v;
    for (int i = 0; i < n; ++i) v.push_back(std::make_unique<net::io_context>(1));
    return v;
  }
  void Accept();

  const HttpServerOptions options_;
  RouteContext ctx_;
  Clock::duration read_timeout_{}, idle_timeout_{}, write_timeout_{};
  // Declared before the io_context: connections still queued in it when it
  // is destroyed unregister themselves.
  std::mutex mu_;
  struct Entry {
    std::weak_ptr<Connection> connection;
    bool served = false;  // else being refused
  };
  std::map<Connection*, Entry> connections_;  // GUARDED_BY(mu_)
  int served_ = 0, refusing_ = 0;             // GUARDED_BY(mu_)
  bool stopped_ = false;                      // GUARDED_BY(mu_)
  // One io_context per I/O thread (concurrency hint 1): the thread that
  // epoll reports a socket to runs its handlers itself.
  std::vector<std::unique_ptr<net::io_context>> iocs_;
  std::vector<net::executor_work_guard<net::io_context::executor_type>> works_;
  size_t next_context_ = 0;  // round robin of new connections; on iocs_[0]
  tcp::acceptor acceptor_;
  net::steady_timer retry_timer_;
  net::thread_pool pool_;
  InlinePolicy inline_policy_;
  std::vector<std::thread> threads_;
  int port_ = 0;
};

// --- Connection.

void StreamWake::Fire() {
  std::lock_guard<std::mutex> l(mu_);
  if (pending_ || conn_.expired()) return;
  pending_ = true;
  net::post(executor_, [w = conn_] {
    if (auto c = w.lock()) c->OnStreamWake();
  });
}

Connection::Connection(tcp::socket&& socket, HttpServerImpl* server)
    : server_(server), stream_(std::move(socket)), poll_timer_(stream_.get_executor()) {}

Connection::~Connection() {
  if (wake_) wake_->Detach();
  server_->Unregister(this);
}

void Connection::Refuse() {
  net::dispatch(stream_.get_executor(), [self = shared_from_this()] {
    self->no_more_reads_ = true;
    const int limit = self->server_->options().max_connections;
    HttpResponse r = ErrorResponse(
        Unavailable("the server has its maximum of " + std::to_string(limit) +
                    " open connections (http.max_connections); retry later"),
        503);
    r.headers.emplace_back("Retry-After", "1");
    self->Enqueue(std::move(r), /*keep_alive=*/false, 11);
  });
}

void Connection::Start() {
  net::dispatch(stream_.get_executor(), [self = shared_from_this()] {
    self->read_deadline_ = Clock::now() + self->server_->read_timeout();
    self->DoRead();
  });
}

void Connection::Close() {
  net::post(stream_.get_executor(), [self = shared_from_this()] { self->CloseNow(); });
}

void Connection::DoRead() {
  if (closed_ || closing_) return;
  reading_ = true;
  parser_.emplace();
  // The body's limit depends on the header (OnHeader); until then, none.
  parser_->body_limit(std::numeric_limits<uint64_t>::max());
  body_limit_ = server_->options().body_limit_bytes;
  body_limit_key_ = "http.body_limit_bytes";
  parser_->header_limit(kHeaderLimit);
  if (buffer_.size() == 0) {
    // Wait for the request to begin: between requests up to the idle
    // timeout, the first one within the read timeout of the accept.
    if (first_request_) {
      stream_.expires_at(read_deadline_);
    } else {
      stream_.expires_after(server_->idle_timeout());
    }
    stream_.async_read_some(buffer_.prepare(4096),
                            beast::bind_front_handler(&Connection::OnIdleRead, shared_from_this()));
    return;
  }
  request_start_ = Clock::now();  // pipelined: already here
  if (!first_request_) read_deadline_ = request_start_ + server_->read_timeout();
  ReadHeader();
}

void Connection::OnIdleRead(beast::error_code ec, size_t n) {
  request_start_ = Clock::now();
  if (ec) return OnReadError(ec == net::error::eof ? beast::error_code(http::error::end_of_stream) : ec);
  buffer_.commit(n);
  if (!first_request_) read_deadline_ = request_start_ + server_->read_timeout();
  ReadHeader();
}

void Connection::ReadHeader() {
  stream_.expires_at(read_deadline_);
  http::async_read_header(stream_, buffer_, *parser_,
                          [self = shared_from_this()](beast::error_code ec, size_t) {
                            self->OnHeader(ec);
                          });
}

void Connection::OnHeader(beast::error_code ec) {
  if (closed_) return;
  if (ec) return OnReadError(ec);
  // Judge the request on its header, before any of its body is read.
  const HttpServerOptions& o = server_->options();
  HttpRequest head = HeadOf(parser_->get());
  const HeadVerdict verdict = CheckHead(head, server_->ctx());
  const auto length = parser_->content_length();  // boost::optional
  const int64_t small = std::max<int64_t>(0, o.unauthenticated_body_limit_bytes);
  if (verdict == HeadVerdict::kRefuse && !parser_->is_done() && !(length && *length <= uint64_t(small))) {
    return RefuseUnread(std::move(head), parser_->get().version());
  }
  body_limit_ = std::max<int64_t>(0, o.body_limit_bytes);
  body_limit_key_ = "http.body_limit_bytes";
  if (verdict != HeadVerdict::kRead && small < body_limit_) {
    body_limit_ = small;
    body_limit_key_ = "http.unauthenticated_body_limit_bytes";
  }
  // A declared length is checked here (Beast checks it only while parsing
  // the header); a chunked body, as it arrives.
  if (length && *length > uint64_t(body_limit_)) return OnReadError(http::error::body_limit);
  parser_->body_limit(uint64_t(body_limit_));
  auto expect = parser_->get().find(http::field::expect);
  if (expect != parser_->get().end() && Lower(expect->value()) == "100-continue" &&
      !parser_->is_done() && queue_.empty()) {
    // curl waits for this before sending a body; nothing else is being
    // written (the queue is empty), so it cannot interleave with a response.
    static const char kContinue[] = "HTTP/1.1 100 Continue\r\n\r\n";
    stream_.expires_at(read_deadline_);
    net::async_write(stream_, net::buffer(kContinue, sizeof(kContinue) - 1),
                     [self = shared_from_this()](beast::error_code ec, size_t) {
                       if (ec) return self->CloseNow();
                       self->ReadBody();
                     });
    return;
  }
  ReadBody();
}

void Connection::ReadBody() {
  if (closed_) return;
  if (parser_->is_done()) return OnBody({});
  stream_.expires_at(read_deadline_);
  http::async_read(stream_, buffer_, *parser_,
                   [self = shared_from_this()](beast::error_code ec, size_t) { self->OnBody(ec); });
}

void Connection::OnBody(beast::error_code ec) {
  if (closed_) return;
  if (ec) return OnReadError(ec);
  reading_ = false;
  first_request_ = false;
  Handle(parser_->release());
}

void Connection::RefuseUnread(HttpRequest head, unsigned version) {
  reading_ = false;
  first_request_ = false;
  no_more_reads_ = true;  // the body is still on the wire: close after the answer
  request_read_ = Clock::now();
  handling_ = true;
  // Refused before any handler reads the body (CheckHead): cheap.
  HttpResponse resp = HandleRequest(head, server_->ctx());
  OnHandled(std::move(resp), /*keep_alive=*/false, version, std::move(head.method),
            std::move(head.target), request_start_);
}

void Connection::OnReadError(beast::error_code ec) {
  reading_ = false;
  if (closed_) return;
  if (ec == http::error::end_of_stream || ec == net::error::eof) {
    // The client is done sending; answer what it asked, then close.
    no_more_reads_ = true;
    if (queue_.empty() && !handling_) GracefulClose();
    return;
  }
  const bool http_error = ec.category() == beast::error_code(http::error::end_of_stream).category();
  if (!http_error || ec == http::error::partial_message) {
    // Silent past its timeout, reset, or gone mid-request: no one is
    // listening for an answer.
    if (ec == beast::error::timeout && server_->options().log_requests) {
      std::fprintf(stderr, "http: closing a connection after its read timeout\n");
    }
    return CloseNow();
  }
  // The request cannot be read: say why, then close.
  no_more_reads_ = true;
  Status why;
  int status = 400;
  if (ec == http::error::body_limit) {
    status = 413;
    why = ResourceExhausted("the request body is over the limit of " + std::to_string(body_limit_) +
                            " bytes (" + body_limit_key_ + ")");
  } else if (ec == http::error::header_limit) {
    status = 431;
    why = InvalidArgument("the request header is over the limit of " + std::to_string(kHeaderLimit) +
                          " bytes");
  } else {
    why = InvalidArgument("malformed HTTP request: " + ec.message());
  }
  std::string target = parser_->is_header_done() ? std::string(parser_->get().target()) : "";
  if (Metrics* m = server_->ctx().metrics) m->ObserveHttpRequest(RouteTemplateFor(target), status, 0);
  if (server_->options().log_requests) {
    std::fprintf(stderr, "http %s -> %d (%s)\n", target.c_str(), status, why.message().c_str());
  }
  unsigned version = parser_->is_header_done() ? parser_->get().version() : 11;
  Enqueue(ErrorResponse(why, status), /*keep_alive=*/false, version);
}

void Connection::Handle(http::request<http::string_body> req) {
  request_read_ = Clock::now();
  HttpRequest r = HeadOf(req);
  r.body = std::move(req.body());
  bool keep_alive = req.keep_alive();
  unsigned version = req.version();
  if (!keep_alive) no_more_reads_ = true;
  handling_ = true;
  const Clock::time_point t0 = request_start_;
  const RequestCost cost = CostOf(r);
  if (cost != RequestCost::kCheap) {
    std::string key = r.method + " " + r.target.substr(0, r.target.find('?'));
    InlinePolicy& policy = server_->inline_policy();
    const size_t bytes = r.body.size();
    if (cost == RequestCost::kStep && policy.BeginInline(key, bytes)) {
      const Clock::time_point start = Clock::now();
      HttpResponse resp = HandleRequest(r, server_->ctx());
      policy.Finish(key, bytes, Clock::now() - start, /*inlined=*/true);
      OnHandled(std::move(resp), keep_alive, version, std::move(r.method), std::move(r.target), t0);
      return;
    }
    net::post(server_->pool(), [self = shared_from_this(), r = std::move(r), keep_alive, version,
                                t0, key = std::move(key), bytes]() mutable {
      Clock::time_point start = Clock::now();
      HttpResponse resp = HandleRequest(r, self->server_->ctx());
      self->server_->inline_policy().Finish(key, bytes, Clock::now() - start, /*inlined=*/false);
      net::post(self->stream_.get_executor(),
                [self, resp = std::move(resp), keep_alive, version, method = std::move(r.method),
                 target = std::move(r.target), t0]() mutable {
                  self->OnHandled(std::move(resp), keep_alive, version, std::move(method),
                                  std::move(target), t0);
                });
    });
    return;
  }
  HttpResponse resp = HandleRequest(r, server_->ctx());
  OnHandled(std::move(resp), keep_alive, version, std::move(r.method), std::move(r.target), t0);
}

void Connection::OnHandled(HttpResponse r, bool keep_alive, unsigned version, std::string method,
                           std::string target, Clock::time_point t0) {
  handling_ = false;
  // A connection handles one request at a time: request_start_ and
  // request_read_ are still this one's.
  const Clock::duration took = Clock::now() - t0;
  r.timings.insert(r.timings.begin(),
                   {"read", std::chrono::duration<double>(request_read_ - request_start_).count()});
  r.timings.emplace_back("total", std::chrono::duration<double>(took).count());
  if (server_->options().log_requests) {
    double ms = std::chrono::duration<double, std::milli>(took).count();
    std::fprintf(stderr, "http %s %s -> %d (%.1f ms)\n", method.c_str(), target.c_str(), r.status, ms);
  }
  if (closed_ || closing_) {
    if (r.stream) r.stream->Close();
    return;
  }
  Enqueue(std::move(r), keep_alive, version);
  MaybeRead();
}

void Connection::Enqueue(HttpResponse r, bool keep_alive, unsigned version) {
  Outgoing o;
  auto fill = [&](auto& m) {
    m.set(http::field::server, "flowstate");
    m.set(http::field::content_type, r.content_type);
    for (const auto& [name, value] : r.headers) m.insert(name, value);
    if (server_->options().server_timing && !r.timings.empty()) {
      m.set("Server-Timing", ServerTimingHeader(r.timings));
    }
    if (r.status == 499) m.reason("Client Closed Request");
  };
  if (r.stream) {
    o.source = r.stream;
    if (!wake_) wake_ = std::make_shared<StreamWake>(weak_from_this(), stream_.get_executor());
    o.source->SetWaker([wake = wake_] { wake->Fire(); });
    o.head = std::make_shared<http::response<http::empty_body>>(http::status(r.status), version);
    fill(*o.head);
    o.chunked = version >= 11;
    if (!o.chunked) keep_alive = false;  // HTTP/1.0: the body ends with the connection
    o.head->keep_alive(keep_alive);
    if (o.chunked) o.head->chunked(true);
    o.serializer = std::make_shared<http::response_serializer<http::empty_body>>(*o.head);
    ++streams_queued_;
  } else {
    o.message = std::make_shared<http::response<http::string_body>>(http::status(r.status), version);
    fill(*o.message);
    o.message->body() = std::move(r.body);
    o.message->keep_alive(keep_alive);
    o.message->prepare_payload();
  }
  o.close = !keep_alive;
  if (o.close) no_more_reads_ = true;
  queue_.push_back(std::move(o));
  if (queue_.size() == 1) WriteFront();
}

void Connection::MaybeRead() {
  if (closed_ || closing_ || reading_ || handling_ || no_more_reads_ || streams_queued_ > 0 ||
      int(queue_.size()) >= std::max(1, server_->options().max_pipelined_requests)) {
    return;
  }
  DoRead();
}

void Connection::WriteFront() {
  Outgoing& o = queue_.front();
  stream_.expires_after(server_->write_timeout());
  if (o.message) {
    http::async_write(stream_, *o.message, [self = shared_from_this()](beast::error_code ec, size_t) {
      self->OnWritten(ec);
    });
    return;
  }
  http::async_write_header(stream_, *o.serializer,
                           [self = shared_from_this()](beast::error_code ec, size_t) {
                             if (ec || self->closed_) return self->CloseNow();
                             self->PumpStream();
                           });
}

void Connection::OnWritten(beast::error_code ec) {
  if (closed_) return;
  if (ec) return CloseNow();
  FinishFront();
}

void Connection::PumpStream() {
  if (closed_) return;
  Outgoing& o = queue_.front();
  chunk_.clear();
  EventSource::Pull pull = EventSource::Pull::kIdle;
  std::string piece;
  while (chunk_.size() < kMaxStreamWrite &&
         (pull = o.source->Next(std::chrono::milliseconds(0), &piece)) == EventSource::Pull::kData) {
    chunk_ += piece;
  }
  auto done = [self = shared_from_this()](bool last) {
    return [self, last](beast::error_code ec, size_t) { self->OnStreamWritten(ec, last); };
  };
  if (!chunk_.empty()) {
    stream_.expires_after(server_->write_timeout());
    if (o.chunked) {
      net::async_write(stream_, http::make_chunk(net::const_buffer(chunk_.data(), chunk_.size())), done(false));
    } else {
      net::async_write(stream_, net::const_buffer(chunk_.data(), chunk_.size()), done(false));
    }
    return;
  }
  if (pull == EventSource::Pull::kEnd) {
    if (!o.chunked) return OnStreamWritten({}, true);
    stream_.expires_after(server_->write_timeout());
    net::async_write(stream_, http::make_chunk_last(), done(true));
    return;
  }
  // Idle: wait for the source's waker, or until a keep-alive is due.
  stream_waiting_ = true;
  poll_timer_.expires_after(std::max(o.source->UntilKeepAlive(), std::chrono::milliseconds(1)));
  poll_timer_.async_wait([self = shared_from_this()](beast::error_code ec) {
    if (ec || self->closed_ || !self->stream_waiting_) return;
    self->stream_waiting_ = false;
    self->PumpStream();
  });
}

void Connection::OnStreamWake() {
  if (wake_) wake_->Clear();
  if (closed_ || !stream_waiting_) return;  // being written: it pulls again after
  stream_waiting_ = false;
  poll_timer_.cancel();
  PumpStream();
}

void Connection::OnStreamWritten(beast::error_code ec, bool last) {
  if (closed_) return;
  if (ec) return CloseNow();
  if (!last) return PumpStream();
  queue_.front().source.reset();
  --streams_queued_;
  FinishFront();
}

// The front response is written: on to the next one, or close.
void Connection::FinishFront() {
  bool close = queue_.front().close;
  queue_.pop_front();
  if (close) return GracefulClose();
  if (!queue_.empty()) {
    WriteFront();
  } else if (no_more_reads_ && !handling_ && !reading_) {
    return GracefulClose();
  }
  MaybeRead();
}

void Connection::GracefulClose() {
  if (closed_ || closing_) return;
  closing_ = true;
  beast::error_code ec;
  stream_.socket().shutdown(tcp::socket::shutdown_send, ec);
  if (ec) return CloseNow();
  // Read what the client still sends (an unread body) until it closes too,
  // so that closing does not reset the connection under our response.
  stream_.expires_after(kLinger);
  Drain();
}

void Connection::Drain() {
  stream_.async_read_some(net::buffer(discard_), [self = shared_from_this()](beast::error_code ec,
                                                                               size_t n) {
    self->drained_ += n;
    if (ec || self->closed_ || self->drained_ > kLingerBytes) return self->CloseNow();
    self->Drain();
  });
}

void Connection::CloseNow() {
  if (closed_) return;
  closed_ = true;
  stream_waiting_ = false;
  if (wake_) wake_->Detach();
  for (Outgoing& o : queue_) {
    if (o.source) o.source->Close();
  }
  poll_timer_.cancel();
  beast::error_code ec;
  stream_.socket().shutdown(tcp::socket::shutdown_both, ec);
  stream_.close();
}

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
  std::lock_guard<std::mutex> l(mu_);
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
  std::lock_guard<std::mutex> l(mu_);
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
    std::lock_guard<std::mutex> l(mu_);
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
}

}  // namespace

StatusOr<std::unique_ptr<HttpServer>> HttpServer::Start(Service* service, Metrics* metrics,
                                                        const HttpServerOptions& options) {
  auto server = std::make_unique<HttpServerImpl>(service, metrics, options);
  FS_RETURN_IF_ERROR(server->Listen());
  server->Run();
  return std::unique_ptr<HttpServer>(std::move(server));
}

}  // namespace flowstate

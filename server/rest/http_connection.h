// The REST frontend's internals, shared by its two files: the connection
// (http_connection.cc: reading heads and bodies, handing requests to the
// routes, writing responses and event streams) and the server
// (http_server.cc: listening, accepting, admission, threads). See
// http_server.cc's top comment for the design.
//
// Private to server/rest/: the only header of the server that names Boost
// types. Thread safety: a Connection's methods run on its strand;
// HttpServerImpl's public methods are thread-safe.
#ifndef FLOWSTATE_SERVER_REST_HTTP_CONNECTION_H_
#define FLOWSTATE_SERVER_REST_HTTP_CONNECTION_H_

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
#include <optional>
#include <thread>

#include "server/rest/http_routes.h"
#include "server/inline_policy.h"
#include "server/step_threads.h"
#include "server/metrics.h"
#include "server/server_timing.h"
#include "graph/mutex.h"

namespace flowstate::rest_internal {

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

inline Clock::duration Seconds(double s) {
  return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(std::max(s, 0.001)));
}

inline std::string Lower(std::string_view s) {
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
    MutexLock l(mu_);
    pending_ = false;
  }
  void Detach() {
    MutexLock l(mu_);
    conn_.reset();
  }

 private:
  Mutex mu_;
  std::weak_ptr<Connection> conn_ ABSL_GUARDED_BY(mu_);  // empty once detached
  net::any_io_executor executor_;
  bool pending_ ABSL_GUARDED_BY(mu_) = false;
};

// The request's method, target and headers (no body).
inline HttpRequest HeadOf(const http::request<http::string_body>& req) {
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
  // A body of a declared length of at least kAdvisedBodyBytes, read
  // straight into its string in reads as large as the socket gives.
  void ReadLargeBody(uint64_t length);
  void ReadLargeBodySome(size_t length, size_t got);
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
        step_threads_(StepThreads::Options{}),
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
  StepThreads& step_threads() { return step_threads_; }
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
  Mutex mu_;
  struct Entry {
    std::weak_ptr<Connection> connection;
    bool served = false;  // else being refused
  };
  std::map<Connection*, Entry> connections_ ABSL_GUARDED_BY(mu_);
  int served_ ABSL_GUARDED_BY(mu_) = 0;
  int refusing_ ABSL_GUARDED_BY(mu_) = 0;
  bool stopped_ ABSL_GUARDED_BY(mu_) = false;
  // One io_context per I/O thread (concurrency hint 1): the thread that
  // epoll reports a socket to runs its handlers itself.
  std::vector<std::unique_ptr<net::io_context>> iocs_;
  std::vector<net::executor_work_guard<net::io_context::executor_type>> works_;
  size_t next_context_ = 0;  // round robin of new connections; on iocs_[0]
  tcp::acceptor acceptor_;
  net::steady_timer retry_timer_;
  net::thread_pool pool_;       // kExpensive requests
  StepThreads step_threads_;    // kStep requests that do not run inline
  InlinePolicy inline_policy_;
  std::vector<std::thread> threads_;
  int port_ = 0;
};

// --- Connection.

}  // namespace flowstate::rest_internal

#endif  // FLOWSTATE_SERVER_REST_HTTP_CONNECTION_H_

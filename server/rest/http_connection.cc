// The REST frontend's connections (http_connection.h; the design is in
// http_server.cc's top comment).
#include "server/rest/http_connection.h"

#include "graph/allocator.h"
#include "graph/mutex.h"

namespace flowstate::rest_internal {
namespace {

// A body of at least this many bytes is advised as huge pages before it is
// read (AdviseHostHugePages).
constexpr uint64_t kAdvisedBodyBytes = uint64_t{4} << 20;
// How far ahead of the bytes received such a body's string is grown.
constexpr size_t kBodyStepBytes = size_t{4} << 20;

}  // namespace

// --- Connection.

void StreamWake::Fire() {
  MutexLock l(mu_);
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
  const auto length = parser_->content_length();
  if (length && *length >= kAdvisedBodyBytes && !parser_->chunked()) return ReadLargeBody(*length);
  stream_.expires_at(read_deadline_);
  http::async_read(stream_, buffer_, *parser_,
                   [self = shared_from_this()](beast::error_code ec, size_t) { self->OnBody(ec); });
}

// Beast's parser reads a body 64 KiB at a time, each read a recvmsg, an epoll
// wait and a timer reset; for a 64 MiB feed that was 1,024 rounds and 4x the
// time of the bytes' copy over loopback (BENCHMARKS.md, "Large tensors over
// REST"). A large body of a declared length (already checked against the
// body limit) is read here instead, straight into its string, as much per
// read as the socket holds. Its string is reserved for the whole length and
// advised as huge pages before it is first written, so that it faults once
// per 2 MiB rather than per 4 KiB page; it is grown (zero-filled) at most
// kBodyStepBytes ahead of what has arrived, so that a client declaring a
// large body and sending little commits little memory. The parser, done
// with the header, is then only asked to release the message.
void Connection::ReadLargeBody(uint64_t length) {
  std::string& body = parser_->get().body();
  body.reserve(size_t(length));
  AdviseHostHugePages(body.data(), body.capacity());
  // What the header's read brought of the body already (a pipelined request
  // after it stays in the buffer).
  const size_t have = std::min<size_t>(buffer_.size(), size_t(length));
  body.resize(have);
  net::buffer_copy(net::buffer(body.data(), have), buffer_.data());
  buffer_.consume(have);
  ReadLargeBodySome(size_t(length), have);
}

void Connection::ReadLargeBodySome(size_t length, size_t got) {
  if (closed_) return;
  std::string& body = parser_->get().body();
  if (got == length) return OnBody({});
  if (body.size() == got) body.resize(std::min(length, got + kBodyStepBytes));
  stream_.expires_at(read_deadline_);
  stream_.async_read_some(net::buffer(body.data() + got, body.size() - got),
                          [self = shared_from_this(), length, got](beast::error_code ec, size_t n) {
                            // The client stopped sending mid-body: as the parser says it.
                            if (ec == net::error::eof) ec = http::error::partial_message;
                            if (ec) return self->OnBody(ec);
                            self->ReadLargeBodySome(length, got + n);
                          });
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
      r.must_not_wait = true;
      HttpResponse resp = HandleRequest(r, server_->ctx());
      r.must_not_wait = false;
      if (!resp.deferred) {
        policy.Finish(key, bytes, Clock::now() - start, /*inlined=*/true);
        OnHandled(std::move(resp), keep_alive, version, std::move(r.method), std::move(r.target), t0);
        return;
      }
      // This step may wait: the next of its path starts on the step
      // threads too, until one of them is quick again.
      policy.Finish(key, bytes, InlinePolicy::kMayWait, /*inlined=*/true);
    }
    auto handle = [self = shared_from_this(), r = std::move(r), keep_alive, version, t0,
                   key = std::move(key), bytes]() mutable {
      Clock::time_point start = Clock::now();
      HttpResponse resp = HandleRequest(r, self->server_->ctx());
      self->server_->inline_policy().Finish(key, bytes, Clock::now() - start, /*inlined=*/false);
      net::post(self->stream_.get_executor(),
                [self, resp = std::move(resp), keep_alive, version, method = std::move(r.method),
                 target = std::move(r.target), t0]() mutable {
                  self->OnHandled(std::move(resp), keep_alive, version, std::move(method),
                                  std::move(target), t0);
                });
    };
    if (cost == RequestCost::kStep) {
      // A thread of its own: a step that waits delays no other request.
      if (!server_->step_threads().Schedule(std::move(handle))) {
        OnHandled(ErrorResponse(Unavailable("the server is stopping"), 503), keep_alive, version,
                  "POST", "", t0);
      }
      return;
    }
    net::post(server_->pool(), std::move(handle));
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
    // A 304 has no body; a Content-Length would have to be the 200's.
    if (r.status == 304) o.message->erase(http::field::content_length);
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

}  // namespace flowstate::rest_internal

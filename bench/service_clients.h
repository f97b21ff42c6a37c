// The loopback clients of service_bench: a Beast keep-alive REST client
// (RestClient), a raw-socket REST client that polls for its response instead
// of sleeping (PollingRestClient), and a bare TCP echo that gives the floor
// under any request (TcpEcho). Each aborts the benchmark (Die) on a failed
// exchange, since a figure measured over errors would mean nothing.
//
// Header-only, for service_bench alone. Each object is one connection, used
// from one thread (TcpEcho's server end runs on a thread of its own).
#ifndef FLOWSTATE_BENCH_SERVICE_CLIENTS_H_
#define FLOWSTATE_BENCH_SERVICE_CLIENTS_H_

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

namespace flowstate::bench {

// Prints "service_bench: <what>" to stderr and exits 1.
[[noreturn]] inline void Die(const std::string& what) {
  std::fprintf(stderr, "service_bench: %s\n", what.c_str());
  std::exit(1);
}

// One keep-alive HTTP/1.1 connection.
class RestClient {
 public:
  explicit RestClient(int port) : stream_(ioc_) {
    boost::asio::ip::tcp::resolver r(ioc_);
    stream_.connect(r.resolve("127.0.0.1", std::to_string(port)));
    stream_.socket().set_option(boost::asio::ip::tcp::no_delay(true));
  }
  // `server_timing`, when given, gets the response's Server-Timing header.
  std::string Post(const std::string& target, const std::string& body, int* status,
                   std::string* server_timing = nullptr) {
    return Send(boost::beast::http::verb::post, target, body, status, server_timing);
  }
  std::string Get(const std::string& target, int* status) {
    return Send(boost::beast::http::verb::get, target, "", status, nullptr);
  }

 private:
  std::string Send(boost::beast::http::verb verb, const std::string& target,
                   const std::string& body, int* status, std::string* server_timing) {
    namespace http = boost::beast::http;
    http::request<http::string_body> req{verb, target, 11};
    req.set(http::field::host, "127.0.0.1");
    if (verb == http::verb::post) req.set(http::field::content_type, "application/json");
    req.keep_alive(true);
    req.body() = body;
    req.prepare_payload();
    http::write(stream_, req);
    http::response<http::string_body> res;
    http::read(stream_, buf_, res);
    *status = res.result_int();
    if (server_timing != nullptr) server_timing->assign(res["Server-Timing"]);
    return std::move(res.body());
  }

  boost::asio::io_context ioc_;
  boost::beast::tcp_stream stream_;
  boost::beast::flat_buffer buf_;
};

// Raw-socket helpers of the loopback figures (TcpEcho, PollingRestClient).
inline void NoDelay(int fd) {
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}
inline bool ReadAll(int fd, char* p, size_t n) {
  while (n > 0) {
    ssize_t got = ::read(fd, p, n);
    if (got <= 0) return false;
    p += got;
    n -= size_t(got);
  }
  return true;
}
inline bool WriteAll(int fd, const char* p, size_t n) {
  while (n > 0) {
    ssize_t put = ::write(fd, p, n);
    if (put <= 0) return false;
    p += put;
    n -= size_t(put);
  }
  return true;
}

// A keep-alive HTTP/1.1 client on a raw socket that polls for the response
// (non-blocking reads in a loop) instead of sleeping: what is left of a round
// trip is the server and the kernel, not this client's wake-up. Handles only
// what the benchmark's server sends: a Content-Length body.
class PollingRestClient {
 public:
  explicit PollingRestClient(int port) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons(uint16_t(port));
    if (::connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) Die("polling client: connect");
    NoDelay(fd_);
  }
  ~PollingRestClient() { ::close(fd_); }
  // The response's status; REQUIRES: the server answers with Content-Length.
  // `server_timing`, when given, gets its Server-Timing header.
  int Post(const std::string& target, const std::string& body, std::string* server_timing = nullptr) {
    std::string req = "POST " + target + " HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                      "Content-Type: application/json\r\nContent-Length: " +
                      std::to_string(body.size()) + "\r\n\r\n" + body;
    if (!WriteAll(fd_, req.data(), req.size())) Die("polling client: send");
    std::string in;
    char buf[16384];
    size_t need = std::string::npos;
    while (need == std::string::npos || in.size() < need) {
      ssize_t n = ::recv(fd_, buf, sizeof buf, MSG_DONTWAIT);
      if (n == 0) Die("polling client: closed");
      if (n < 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK) continue;
        Die("polling client: recv");
      }
      in.append(buf, size_t(n));
      size_t head = in.find("\r\n\r\n");
      if (need == std::string::npos && head != std::string::npos) {
        std::string h = in.substr(0, head);
        for (char& c : h) c = char(std::tolower(static_cast<unsigned char>(c)));
        size_t cl = h.find("content-length:");
        if (cl == std::string::npos) Die("polling client: no content-length");
        need = head + 4 + size_t(std::atoll(h.c_str() + cl + 15));
        size_t st = h.find("\r\nserver-timing:");
        if (server_timing != nullptr && st != std::string::npos) {
          size_t from = st + 16, to = h.find("\r\n", from);
          *server_timing = in.substr(from, (to == std::string::npos ? head : to) - from);
        }
      }
    }
    return std::atoi(in.c_str() + 9);  // "HTTP/1.1 200"
  }

 private:
  int fd_ = -1;
};

// The floor under any request over loopback TCP: a blocking client writes
// `request_bytes` and reads `response_bytes` back from a thread that does
// nothing else (no HTTP, no handler), both ends TCP_NODELAY. What the client,
// the kernel and one wake-up on each side cost; not the server's own.
class TcpEcho {
 public:
  TcpEcho(size_t request_bytes, size_t response_bytes)
      : request_(request_bytes, 'q'), response_(response_bytes, 'r') {
    int listener = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    if (::bind(listener, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
        ::listen(listener, 1) != 0 ||
        ::getsockname(listener, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
      Die("echo: cannot listen");
    }
    server_ = std::thread([this, listener] {
      int c = ::accept(listener, nullptr, nullptr);
      ::close(listener);
      NoDelay(c);
      std::string buf(request_.size(), 0);
      while (ReadAll(c, buf.data(), buf.size()) && WriteAll(c, response_.data(), response_.size())) {
      }
      ::close(c);
    });
    client_ = ::socket(AF_INET, SOCK_STREAM, 0);
    if (::connect(client_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) Die("echo: cannot connect");
    NoDelay(client_);
    reply_.resize(response_.size());
  }
  ~TcpEcho() {
    ::shutdown(client_, SHUT_RDWR);
    ::close(client_);
    server_.join();
  }
  void RoundTrip() {
    if (!WriteAll(client_, request_.data(), request_.size()) ||
        !ReadAll(client_, reply_.data(), reply_.size())) {
      Die("echo: round trip failed");
    }
  }

 private:
  std::string request_, response_, reply_;
  std::thread server_;
  int client_ = -1;
};

}  // namespace flowstate::bench

#endif  // FLOWSTATE_BENCH_SERVICE_CLIENTS_H_

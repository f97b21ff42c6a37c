// PRIVATE to the REST frontend's tests (http_server_test.cc,
// frontend_limits_test.cc): a blocking HTTP/1.1 client over one TCP
// connection whose every read has a deadline, so that a server that never
// answers fails the test instead of hanging it.
#ifndef FLOWSTATE_TESTS_SERVER_RAW_HTTP_CLIENT_H_
#define FLOWSTATE_TESTS_SERVER_RAW_HTTP_CLIENT_H_

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cctype>
#include <chrono>
#include <map>
#include <optional>
#include <string>

namespace flowstate::http_test {

using std::chrono::milliseconds;

struct Response {
  int status = 0;
  std::map<std::string, std::string> headers;  // names lower-case
  std::string body;
  std::string header(const std::string& name) const {
    auto it = headers.find(name);
    return it == headers.end() ? "" : it->second;
  }
};

// A blocking HTTP/1.1 client over one TCP connection; every read has a
// deadline, so a server that never answers fails the test instead of
// hanging it.
class RawClient {
  using Clock = std::chrono::steady_clock;

 public:
  explicit RawClient(int port) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    connected_ = ::connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0;
    int one = 1;
    ::setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    timeval send_timeout{30, 0};  // a send that the server never drains fails
    ::setsockopt(fd_, SOL_SOCKET, SO_SNDTIMEO, &send_timeout, sizeof(send_timeout));
  }
  ~RawClient() { ::close(fd_); }
  bool connected() const { return connected_; }

  bool Send(const std::string& data) {
    size_t off = 0;
    while (off < data.size()) {
      ssize_t n = ::send(fd_, data.data() + off, data.size() - off, MSG_NOSIGNAL);
      if (n <= 0) return false;
      off += size_t(n);
    }
    return true;
  }

  // Reads until `pred(buffer_)` or the deadline; false on timeout or close.
  template <typename Pred>
  bool ReadUntil(Pred pred, milliseconds timeout) {
    auto deadline = Clock::now() + timeout;
    while (!pred()) {
      int left = int(std::chrono::duration_cast<milliseconds>(deadline - Clock::now()).count());
      if (left <= 0) return false;
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, left) <= 0) continue;
      char buf[65536];
      ssize_t n = ::recv(fd_, buf, sizeof(buf), 0);
      if (n <= 0) {
        closed_ = true;
        return pred();
      }
      buffer_.append(buf, size_t(n));
    }
    return true;
  }

  // The status line and headers of the next response.
  std::optional<Response> ReadHead(milliseconds timeout = milliseconds(10000)) {
    if (!ReadUntil([&] { return buffer_.find("\r\n\r\n") != std::string::npos; }, timeout)) {
      return std::nullopt;
    }
    size_t end = buffer_.find("\r\n\r\n");
    std::string head = buffer_.substr(0, end);
    buffer_.erase(0, end + 4);
    Response r;
    size_t line_end = head.find("\r\n");
    std::string status_line = head.substr(0, line_end);
    if (status_line.size() < 12) return std::nullopt;
    r.status = std::stoi(status_line.substr(9, 3));
    size_t pos = line_end == std::string::npos ? head.size() : line_end + 2;
    while (pos < head.size()) {
      size_t e = head.find("\r\n", pos);
      if (e == std::string::npos) e = head.size();
      std::string line = head.substr(pos, e - pos);
      size_t colon = line.find(':');
      std::string name = line.substr(0, colon);
      for (char& c : name) c = char(std::tolower(static_cast<unsigned char>(c)));
      std::string value = line.substr(colon + 1);
      while (!value.empty() && value.front() == ' ') value.erase(0, 1);
      r.headers[name] = value;
      pos = e + 2;
    }
    return r;
  }

  // One chunk of a chunked body ("" for the last one); nullopt on timeout.
  std::optional<std::string> ReadChunk(milliseconds timeout = milliseconds(10000)) {
    if (!ReadUntil([&] { return buffer_.find("\r\n") != std::string::npos; }, timeout)) {
      return std::nullopt;
    }
    size_t e = buffer_.find("\r\n");
    size_t size = std::stoul(buffer_.substr(0, e), nullptr, 16);
    if (!ReadUntil([&] { return buffer_.size() >= e + 2 + size + 2; }, timeout)) return std::nullopt;
    std::string data = buffer_.substr(e + 2, size);
    buffer_.erase(0, e + 2 + size + 2);
    return data;
  }

  // A whole response (Content-Length or chunked body).
  std::optional<Response> Read(milliseconds timeout = milliseconds(10000)) {
    std::optional<Response> r = ReadHead(timeout);
    if (!r) return std::nullopt;
    if (r->header("transfer-encoding") == "chunked") {
      for (;;) {
        std::optional<std::string> c = ReadChunk(timeout);
        if (!c) return std::nullopt;
        if (c->empty()) break;
        r->body += *c;
      }
      return r;
    }
    size_t len = r->headers.count("content-length") ? std::stoul(r->header("content-length")) : 0;
    if (!ReadUntil([&] { return buffer_.size() >= len; }, timeout)) return std::nullopt;
    r->body = buffer_.substr(0, len);
    buffer_.erase(0, len);
    return r;
  }

  // True when the server closes the connection within `timeout`.
  bool WaitClosed(milliseconds timeout) {
    ReadUntil([&] { return closed_; }, timeout);
    return closed_;
  }

 private:
  int fd_ = -1;
  bool connected_ = false;
  bool closed_ = false;
  std::string buffer_;
};

inline std::string Request(const std::string& method, const std::string& target, const std::string& body = "",
                    const std::string& extra_headers = "") {
  std::string r = method + " " + target + " HTTP/1.1\r\nHost: test\r\n" + extra_headers;
  if (!body.empty() || method == "POST") r += "Content-Length: " + std::to_string(body.size()) + "\r\n";
  return r + "\r\n" + body;
}

}  // namespace flowstate::http_test

#endif  // FLOWSTATE_TESTS_SERVER_RAW_HTTP_CLIENT_H_

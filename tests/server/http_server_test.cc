// The REST frontend's sockets (server/rest/http_server.h), spoken to over raw TCP
// by a minimal HTTP/1.1 client: keep-alive, pipelining, the body limit,
// timeouts, server-sent events of a training job, and Stop().
#include "server/rest/http_server.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <random>
#include <thread>

#include "api/json_codec.h"
#include "api/views_json.h"
#include "server/metrics.h"
#include "server/server_timing.h"
#include "server/service.h"
#include "tests/server/raw_http_client.h"
#include "tests/server/server_test_util.h"

namespace flowstate {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

DevicePool* Pool() { return server_test::TestPool(1); }

using http_test::RawClient;
using http_test::Request;
using http_test::Response;

class HttpServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = server_test::FreshTestDir("flowstate_http_server");
    server_test::WritePointsCsv(dir_ / "points.csv", 64, 7,
                                [](double a, double b) { return a - b; });
    ServiceOptions so;
    so.devices = Pool();
    so.data_root = dir_.string();
    so.jobs.max_step_events_per_second = 1000;
    service_ = std::make_unique<Service>(so);
    options_.address = "127.0.0.1:0";
    options_.threads = 2;
  }
  void TearDown() override {
    if (server_) server_->Stop();
    server_.reset();
    service_.reset();
    std::filesystem::remove_all(dir_);
  }

  void StartServer() {
    StatusOr<std::unique_ptr<HttpServer>> s = HttpServer::Start(service_.get(), &metrics_, options_);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    server_ = std::move(s).value();
    ASSERT_GT(server_->port(), 0);
  }

  std::filesystem::path dir_;
  Metrics metrics_;
  std::unique_ptr<Service> service_;
  HttpServerOptions options_;
  std::unique_ptr<HttpServer> server_;
};

TEST_F(HttpServerTest, KeepAliveServesTwoRequestsOnOneConnection) {
  StartServer();
  RawClient c(server_->port());
  ASSERT_TRUE(c.connected());
  ASSERT_TRUE(c.Send(Request("GET", "/healthz")));
  std::optional<Response> r = c.Read();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->header("content-type"), "application/json");
  EXPECT_EQ(r->body, R"({"status":"ok"})");
  ASSERT_TRUE(c.Send(Request("GET", "/v1/devices")));
  r = c.Read();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_TRUE(DeviceInfoListFromJson(r->body).ok()) << r->body;
  // Errors keep the connection too.
  ASSERT_TRUE(c.Send(Request("DELETE", "/v1/jobs")));
  r = c.Read();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 405);
  EXPECT_EQ(r->header("allow"), "GET, POST");
  EXPECT_EQ(api::StatusFromJson(r->body).code(), Code::kUnimplemented);
  ASSERT_TRUE(c.Send(Request("GET", "/metrics")));
  r = c.Read();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->header("content-type"), "text/plain; version=0.0.4");
  EXPECT_NE(r->body.find("route=\"/healthz\""), std::string::npos);
  EXPECT_FALSE(c.WaitClosed(milliseconds(100)));
}

TEST_F(HttpServerTest, ConnectionCloseAndHttp10CloseAfterTheResponse) {
  StartServer();
  RawClient c(server_->port());
  ASSERT_TRUE(c.Send(Request("GET", "/healthz", "", "Connection: close\r\n")));
  std::optional<Response> r = c.Read();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_TRUE(c.WaitClosed(milliseconds(3000)));
  RawClient c10(server_->port());
  ASSERT_TRUE(c10.Send("GET /readyz HTTP/1.0\r\n\r\n"));
  r = c10.Read();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->body, R"({"status":"ready"})");
  EXPECT_TRUE(c10.WaitClosed(milliseconds(3000)));
}

TEST_F(HttpServerTest, PipelinedRequestsAreAnsweredInOrder) {
  options_.max_pipelined_requests = 2;  // fewer than we send: reading pauses, nothing is lost
  StartServer();
  RawClient c(server_->port());
  const char* kGraph = R"({"graph": {"nodes": [
      {"name": "x", "op": "Placeholder", "attrs": {"dtype": "float32"}},
      {"name": "y", "op": "Identity", "inputs": ["x"]}]}})";
  std::string all = Request("GET", "/healthz") + Request("POST", "/v1/sessions", kGraph) +
                    Request("GET", "/readyz") + Request("GET", "/v1/nothing") +
                    Request("POST", "/v1/sessions", "{") + Request("GET", "/v1/jobs");
  ASSERT_TRUE(c.Send(all));
  std::vector<int> statuses;
  std::vector<std::string> bodies;
  for (int i = 0; i < 6; ++i) {
    std::optional<Response> r = c.Read();
    ASSERT_TRUE(r) << "response " << i;
    statuses.push_back(r->status);
    bodies.push_back(r->body);
  }
  EXPECT_EQ(statuses, (std::vector<int>{200, 201, 200, 404, 400, 200}));
  EXPECT_EQ(bodies[0], R"({"status":"ok"})");
  EXPECT_EQ(bodies[1].rfind(R"({"session_id":"sess-)", 0), 0u) << bodies[1];
  EXPECT_EQ(bodies[2], R"({"status":"ready"})");
  EXPECT_EQ(bodies[5], R"({"jobs":[]})");
}

// Steps (session runs) may run on the I/O thread once the session's last
// run was quick (InlinePolicy): pipelined and concurrent runs still get
// their own answers, in order.
TEST_F(HttpServerTest, PipelinedAndConcurrentRunsGetTheirOwnAnswersInOrder) {
  StartServer();
  std::string id;
  {
    RawClient c(server_->port());
    ASSERT_TRUE(c.Send(Request("POST", "/v1/sessions", R"({"graph": {"nodes": [
        {"name": "x", "op": "Placeholder", "attrs": {"dtype": "float32"}},
        {"name": "two", "op": "Const", "attrs": {"dtype": "float32", "value": 2.0}},
        {"name": "y", "op": "Mul", "inputs": ["x", "two"]}]}})")));
    std::optional<Response> r = c.Read();
    ASSERT_TRUE(r);
    ASSERT_EQ(r->status, 201) << r->body;
    id = r->body.substr(r->body.find("sess-"));
    id = id.substr(0, id.find('"'));
  }
  constexpr int kRuns = 40;
  std::vector<std::thread> clients;
  std::atomic<int> wrong{0};
  for (int t = 0; t < 3; ++t) {
    clients.emplace_back([&, t] {
      RawClient c(server_->port());
      std::string all;
      for (int i = 0; i < kRuns; ++i) {
        all += Request("POST", "/v1/sessions/" + id + "/run",
                       R"({"feeds": {"x": [)" + std::to_string(t * 100 + i) +
                           R"(.5]}, "fetches": ["y"]})");
      }
      if (!c.Send(all)) {
        wrong += kRuns;
        return;
      }
      for (int i = 0; i < kRuns; ++i) {
        std::optional<Response> r = c.Read();
        if (!r || r->status != 200) {
          ++wrong;
          continue;
        }
        StatusOr<api::NamedTensors> out = api::ParseRunOutputsJson(r->body);
        if (!out.ok() || out->size() != 1 ||
            (*out)[0].second.data<float>()[0] != 2 * (float(t * 100 + i) + 0.5f)) {
          ++wrong;
        }
      }
    });
  }
  for (auto& th : clients) th.join();
  EXPECT_EQ(wrong.load(), 0);
}

TEST(ServerTiming, MillisecondsToTheMicrosecondInTheOrderGiven) {
  EXPECT_EQ(ServerTimingHeader({}), "");
  EXPECT_EQ(ServerTimingHeader({{"step", 0.0000924}, {"handler", 0.0001036}, {"total", 1.5}}),
            "step;dur=0.092, handler;dur=0.104, total;dur=1500.000");
  EXPECT_EQ(ServerTimingHeader({{"read", -0.001}}), "read;dur=0.000");  // clocks never run back
}

// Every response says where the server's time went: a step's engine time
// within its handler's within the request's total (Server-Timing).
TEST_F(HttpServerTest, ServerTimingSaysWhereTheServersTimeWent) {
  StartServer();
  RawClient c(server_->port());
  ASSERT_TRUE(c.Send(Request("POST", "/v1/sessions", R"({"graph": {"nodes": [
      {"name": "x", "op": "Placeholder", "attrs": {"dtype": "float32"}},
      {"name": "y", "op": "Square", "inputs": ["x"]}]}})")));
  std::optional<Response> r = c.Read();
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 201) << r->body;
  std::map<std::string, double> t = server_test::ParseServerTiming(r->header("server-timing"));
  EXPECT_EQ(t.count("step"), 0u) << r->header("server-timing");  // not a step
  ASSERT_EQ(t.count("handler"), 1u) << r->header("server-timing");
  ASSERT_EQ(t.count("total"), 1u);
  EXPECT_LE(t["handler"], t["total"]);
  std::string id = r->body.substr(r->body.find("sess-"));
  id = id.substr(0, id.find('"'));

  for (int i = 0; i < 3; ++i) {  // the first on the pool, the others inline
    ASSERT_TRUE(c.Send(Request("POST", "/v1/sessions/" + id + "/run",
                               R"({"feeds": {"x": 3.0}, "fetches": ["y"]})")));
    r = c.Read();
    ASSERT_TRUE(r);
    ASSERT_EQ(r->status, 200) << r->body;
    EXPECT_NE(r->body.find("9"), std::string::npos) << r->body;
    const std::string header = r->header("server-timing");
    EXPECT_EQ(header.rfind("read;dur=", 0), 0u) << header;  // in the order measured
    EXPECT_NE(header.find("step;dur="), std::string::npos) << header;
    t = server_test::ParseServerTiming(header);
    ASSERT_EQ(t.size(), 4u) << header;
    EXPECT_GE(t["step"], 0.0);
    EXPECT_LE(t["read"] + t["handler"], t["total"]) << header;
    EXPECT_LE(t["step"], t["handler"]) << header;
    EXPECT_LE(t["handler"], t["total"]) << header;
    EXPECT_LT(t["total"], 10000.0) << header;  // milliseconds, not microseconds
  }
  // An error has no step, but its handler and total.
  ASSERT_TRUE(c.Send(Request("POST", "/v1/sessions/" + id + "/run", R"({"feeds": 1})")));
  r = c.Read();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400);
  t = server_test::ParseServerTiming(r->header("server-timing"));
  EXPECT_EQ(t.count("step"), 0u);
  EXPECT_EQ(t.count("total"), 1u);
}

TEST_F(HttpServerTest, ServerTimingCanBeTurnedOff) {
  options_.server_timing = false;
  StartServer();
  RawClient c(server_->port());
  ASSERT_TRUE(c.Send(Request("GET", "/healthz")));
  std::optional<Response> r = c.Read();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->headers.count("server-timing"), 0u);
}

TEST_F(HttpServerTest, OversizedBodyIs413ThenClose) {
  options_.body_limit_bytes = 1024;
  StartServer();
  RawClient c(server_->port());
  std::string body = R"({"graph": {"nodes": []}, "pad": ")" + std::string(4096, 'x') + "\"}";
  ASSERT_TRUE(c.Send(Request("POST", "/v1/sessions", body)));
  std::optional<Response> r = c.Read();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 413);
  EXPECT_EQ(r->header("connection"), "close");
  Status s = api::StatusFromJson(r->body);
  EXPECT_EQ(s.code(), Code::kResourceExhausted) << r->body;
  EXPECT_NE(s.message().find("1024"), std::string::npos);
  EXPECT_TRUE(c.WaitClosed(milliseconds(5000)));
  EXPECT_EQ(service_->num_sessions(), 0);

  // A body just under the limit is read (and judged by the route).
  RawClient ok(server_->port());
  ASSERT_TRUE(ok.Send(Request("POST", "/v1/sessions", R"({"graph": {"nodes": []}})")));
  r = ok.Read();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 201) << r->body;
}

// A body of 4 MiB or more is read straight into its string in large reads
// (Connection::ReadLargeBody): it arrives whole however it is split, a
// request pipelined after it is still served, and a client that stops
// mid-body is dropped without an answer while the server goes on.
TEST_F(HttpServerTest, ALargeBodyArrivesWholeInPiecesAndTheRequestAfterItIsServed) {
  StartServer();
  RawClient c(server_->port());
  ASSERT_TRUE(c.Send(Request("POST", "/v1/sessions", R"({"graph": {"nodes": [
      {"name": "x", "op": "Placeholder", "attrs": {"dtype": "float32"}},
      {"name": "y", "op": "Identity", "inputs": ["x"]}]}})")));
  std::optional<Response> r = c.Read();
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 201) << r->body;
  // {"session_id":"sess-..."}
  const size_t quote = r->body.find("sess-");
  ASSERT_NE(quote, std::string::npos) << r->body;
  const std::string id = r->body.substr(quote, r->body.find('"', quote) - quote);
  const int64_t n = int64_t{3} << 19;  // 1.5 M floats: 6 MiB
  std::vector<float> values(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) values[size_t(i)] = float(i % 1000) * 0.5f;
  const std::string json = R"({"feeds": {"x": {"dtype": "float32", "shape": [)" +
                           std::to_string(n) + R"(], "data_offsets": [0, )" +
                           std::to_string(n * 4) + R"(]}}, "fetches": ["y"], "encoding": "binary"})";
  std::string body(8, '\0');
  for (int i = 0; i < 8; ++i) body[size_t(i)] = char((uint64_t(json.size()) >> (8 * i)) & 0xff);
  body += json;
  body.append(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(float));
  const std::string request = Request("POST", "/v1/sessions/" + id + "/run", body,
                                      "Content-Type: application/x-flowstate-tensors\r\n");
  // The header and a third of the body, a pause, the rest with a request after it.
  const size_t split = request.size() - body.size() + body.size() / 3;
  ASSERT_TRUE(c.Send(request.substr(0, split)));
  std::this_thread::sleep_for(milliseconds(50));
  ASSERT_TRUE(c.Send(request.substr(split) + Request("GET", "/healthz")));
  r = c.Read(milliseconds(30000));
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body.substr(0, 300);
  EXPECT_EQ(r->header("content-type"), "application/x-flowstate-tensors");
  StatusOr<api::NamedTensors> out = api::ParseRunOutputsBinary(r->body, size_t{64} << 20);
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  ASSERT_EQ(out->size(), 1u);
  ASSERT_EQ((*out)[0].second.num_elements(), n);
  EXPECT_EQ(std::memcmp((*out)[0].second.raw_data(), values.data(), values.size() * sizeof(float)), 0);
  r = c.Read();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->body, R"({"status":"ok"})");

  // Half a large body, then the client goes away: no answer, the server serves on.
  {
    RawClient quitter(server_->port());
    ASSERT_TRUE(quitter.Send(request.substr(0, request.size() / 2)));
  }
  RawClient after(server_->port());
  ASSERT_TRUE(after.Send(Request("GET", "/healthz")));
  r = after.Read();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
}

TEST_F(HttpServerTest, ExpectContinueIsHonoured) {
  StartServer();
  RawClient c(server_->port());
  std::string body = R"({"graph": {"nodes": []}})";
  ASSERT_TRUE(c.Send("POST /v1/sessions HTTP/1.1\r\nHost: t\r\nExpect: 100-continue\r\nContent-Length: " +
                     std::to_string(body.size()) + "\r\n\r\n"));
  std::optional<Response> cont = c.ReadHead(milliseconds(3000));
  ASSERT_TRUE(cont);
  EXPECT_EQ(cont->status, 100);
  ASSERT_TRUE(c.Send(body));
  std::optional<Response> r = c.Read();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 201) << r->body;
}

TEST_F(HttpServerTest, ReadTimeoutClosesASilentConnection) {
  options_.read_timeout_seconds = 0.3;
  StartServer();
  auto t0 = Clock::now();
  RawClient silent(server_->port());
  ASSERT_TRUE(silent.connected());
  EXPECT_TRUE(silent.WaitClosed(milliseconds(5000)));
  EXPECT_GE(Clock::now() - t0, milliseconds(250));
  // Half a request, then silence: closed too.
  RawClient half(server_->port());
  ASSERT_TRUE(half.Send("GET /healthz HTTP/1.1\r\nHost: t\r\n"));
  EXPECT_TRUE(half.WaitClosed(milliseconds(5000)));
  // The server still serves.
  RawClient c(server_->port());
  ASSERT_TRUE(c.Send(Request("GET", "/healthz")));
  std::optional<Response> r = c.Read();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
}

TEST_F(HttpServerTest, IdleTimeoutClosesAKeptAliveConnection) {
  options_.idle_timeout_seconds = 0.3;
  StartServer();
  RawClient c(server_->port());
  // From before the request: the server's idle time starts once it has
  // answered, which is after this, but may be well before the client has
  // read the answer (ThreadSanitizer on two loaded cores: 180 ms from the
  // read to the close).
  auto t0 = Clock::now();
  ASSERT_TRUE(c.Send(Request("GET", "/healthz")));
  ASSERT_TRUE(c.Read());
  EXPECT_TRUE(c.WaitClosed(milliseconds(5000)));
  EXPECT_GE(Clock::now() - t0, milliseconds(250));
}

TEST_F(HttpServerTest, AuthIsEnforcedOverTheWire) {
  options_.tokens = {"tok"};
  StartServer();
  RawClient c(server_->port());
  ASSERT_TRUE(c.Send(Request("GET", "/v1/jobs")));
  std::optional<Response> r = c.Read();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 401);
  EXPECT_EQ(r->header("www-authenticate"), R"(Bearer realm="flowstate")");
  ASSERT_TRUE(c.Send(Request("GET", "/v1/jobs", "", "Authorization: Bearer tok\r\n")));
  r = c.Read();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  ASSERT_TRUE(c.Send(Request("GET", "/healthz")));
  r = c.Read();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
}

// Reads "event: KIND\ndata: JSON\n\n" pieces (and ": keep-alive" comments)
// from the chunks of an event stream until its last chunk.
struct Event {
  std::string kind;
  JobInfo job;
};

bool ReadEvents(RawClient& c, std::vector<Event>* events) {
  std::string text;
  for (;;) {
    std::optional<std::string> chunk = c.ReadChunk(milliseconds(30000));
    if (!chunk) return false;
    if (chunk->empty()) break;
    text += *chunk;
    size_t end;
    while ((end = text.find("\n\n")) != std::string::npos) {
      std::string ev = text.substr(0, end);
      text.erase(0, end + 2);
      if (ev[0] == ':') continue;
      size_t nl = ev.find('\n');
      EXPECT_EQ(ev.rfind("event: ", 0), 0u) << ev;
      EXPECT_EQ(ev.compare(nl + 1, 6, "data: "), 0) << ev;
      StatusOr<JobInfo> info = JobInfoFromJson(ev.substr(nl + 7));
      EXPECT_TRUE(info.ok()) << ev;
      if (info.ok()) events->push_back({ev.substr(7, nl - 7), *info});
    }
  }
  EXPECT_TRUE(text.empty()) << text;
  return true;
}

TEST_F(HttpServerTest, EventsStreamATrainingJobUntilItSucceeds) {
  StartServer();
  RawClient c(server_->port());
  ASSERT_TRUE(c.Send(Request("POST", "/v1/jobs", server_test::JobJson(20, "sse"))));
  std::optional<Response> r = c.Read();
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 201) << r->body;
  std::string id = JobInfoFromJson(r->body)->id;
  // Paused while we subscribe, so that the stream sees its steps.
  ASSERT_TRUE(c.Send(Request("POST", "/v1/jobs/" + id + "/pause")));
  r = c.Read();
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  ASSERT_TRUE(c.Send(Request("GET", "/v1/jobs/" + id + "/events")));
  r = c.ReadHead();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->header("content-type"), "text/event-stream");
  EXPECT_EQ(r->header("transfer-encoding"), "chunked");
  EXPECT_EQ(r->header("cache-control"), "no-cache");
  RawClient other(server_->port());  // the stream blocks nobody else
  ASSERT_TRUE(other.Send(Request("POST", "/v1/jobs/" + id + "/resume")));
  std::optional<Response> resumed = other.Read();
  ASSERT_TRUE(resumed);
  EXPECT_EQ(resumed->status, 200) << resumed->body;

  std::vector<Event> events;
  ASSERT_TRUE(ReadEvents(c, &events));
  ASSERT_GE(events.size(), 3u);
  EXPECT_EQ(events.front().kind, "state");
  int steps = 0;
  for (const Event& e : events) steps += e.kind == "step";
  EXPECT_GE(steps, 10);  // epoch ends at least (a few may pass before the pause)
  EXPECT_EQ(events.back().kind, "state");
  EXPECT_EQ(events.back().job.state, JobState::kSucceeded);
  EXPECT_EQ(events.back().job.step, 80);
  // The stream ended; the connection goes on.
  ASSERT_TRUE(c.Send(Request("GET", "/v1/jobs/" + id)));
  r = c.Read();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(JobInfoFromJson(r->body)->state, JobState::kSucceeded);
}

TEST_F(HttpServerTest, StopEndsOpenEventStreamsPromptly) {
  StartServer();
  RawClient c(server_->port());
  ASSERT_TRUE(c.Send(Request("POST", "/v1/jobs", server_test::JobJson(100000, "sse"))));
  std::optional<Response> r = c.Read();
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 201);
  std::string id = JobInfoFromJson(r->body)->id;
  std::vector<std::unique_ptr<RawClient>> streams;
  for (int i = 0; i < 3; ++i) {
    streams.push_back(std::make_unique<RawClient>(server_->port()));
    ASSERT_TRUE(streams.back()->Send(Request("GET", "/v1/jobs/" + id + "/events")));
    r = streams.back()->ReadHead();
    ASSERT_TRUE(r);
    ASSERT_EQ(r->status, 200);
    ASSERT_TRUE(streams.back()->ReadChunk());  // the first state event
  }
  RawClient idle(server_->port());  // and a connection between requests
  auto t0 = Clock::now();
  server_->Stop();
  EXPECT_LT(Clock::now() - t0, milliseconds(2500));
  for (auto& s : streams) EXPECT_TRUE(s->WaitClosed(milliseconds(2000)));
  EXPECT_TRUE(idle.WaitClosed(milliseconds(2000)));
  server_->Stop();  // idempotent
  RawClient late(server_->port());
  EXPECT_FALSE(late.connected());
  service_->jobs().Cancel(id).CheckOk();
}

TEST_F(HttpServerTest, BindFailureIsUnavailableNamingTheAddress) {
  StartServer();
  HttpServerOptions o = options_;
  o.address = "127.0.0.1:" + std::to_string(server_->port());
  // SO_REUSEADDR does not let two sockets listen on one port.
  StatusOr<std::unique_ptr<HttpServer>> second = HttpServer::Start(service_.get(), &metrics_, o);
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), Code::kUnavailable);
  EXPECT_NE(second.status().message().find(o.address), std::string::npos);
  o.address = "no-port";
  EXPECT_EQ(HttpServer::Start(service_.get(), &metrics_, o).status().code(), Code::kInvalidArgument);
}

}  // namespace
}  // namespace flowstate

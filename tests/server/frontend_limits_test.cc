// The frontends under a hostile or careless client, against real REST and gRPC servers over one Service: bodies are
// not buffered before auth, connections and event streams are capped, idle
// event streams cost no threads and no wake-ups, both frontends answer every
// Authorization form alike, and the session cap is a clear refusal.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <dirent.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "api/flowstate.grpc.pb.h"
#include "api/json_codec.h"
#include "server/grpc/grpc_server.h"
#include "server/rest/http_server.h"
#include "server/metrics.h"
#include "server/service.h"
#include "tests/server/raw_http_client.h"
#include "tests/server/server_test_util.h"

namespace flowstate {
namespace {

namespace pb = ::flowstate::v1;
using Clock = std::chrono::steady_clock;
using http_test::RawClient;
using http_test::Request;
using http_test::Response;
using std::chrono::milliseconds;

// A field of /proc/self/status ("VmRSS", "Threads"), as its first number.
int64_t ProcStatus(const std::string& file, const std::string& field) {
  std::ifstream in(file);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(field + ":", 0) == 0) return std::stoll(line.substr(field.size() + 1));
  }
  return -1;
}

int64_t ResidentBytes() { return ProcStatus("/proc/self/status", "VmRSS") * 1024; }
int64_t Threads() { return ProcStatus("/proc/self/status", "Threads"); }

// Context switches of every thread of this process so far: each time one
// went to sleep or was put off the CPU -- a count of wake-ups.
int64_t ContextSwitches() {
  int64_t n = 0;
  DIR* d = ::opendir("/proc/self/task");
  if (d == nullptr) return -1;
  while (dirent* e = ::readdir(d)) {
    if (e->d_name[0] == '.') continue;
    std::string f = std::string("/proc/self/task/") + e->d_name + "/status";
    int64_t v = ProcStatus(f, "voluntary_ctxt_switches");
    int64_t nv = ProcStatus(f, "nonvoluntary_ctxt_switches");
    if (v > 0) n += v;
    if (nv > 0) n += nv;
  }
  ::closedir(d);
  return n;
}

class FrontendLimitsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = server_test::FreshTestDir("flowstate_frontend_limits");
    server_test::WritePointsCsv(dir_ / "points.csv", 64, 7, [](double a, double b) { return a - b; });
    service_options_.devices = server_test::TestPool(1);
    service_options_.data_root = dir_.string();
    service_options_.jobs.max_step_events_per_second = 1000;
    http_options_.address = "127.0.0.1:0";
    grpc_options_.address = "127.0.0.1:0";
  }
  void TearDown() override {
    if (http_) http_->Stop();
    if (grpc_) grpc_->Stop();
    http_.reset();
    grpc_.reset();
    if (service_) service_->Shutdown();
    service_.reset();
    std::filesystem::remove_all(dir_);
  }

  // Both servers over one Service, with `tokens` (none: no auth).
  void Start(std::vector<std::string> tokens = {}) {
    service_ = std::make_unique<Service>(service_options_);
    http_options_.tokens = tokens;
    grpc_options_.tokens = tokens;
    StatusOr<std::unique_ptr<HttpServer>> h = HttpServer::Start(service_.get(), &metrics_, http_options_);
    ASSERT_TRUE(h.ok()) << h.status().ToString();
    http_ = std::move(h).value();
    StatusOr<std::unique_ptr<GrpcServer>> g = GrpcServer::Start(service_.get(), &metrics_, grpc_options_);
    ASSERT_TRUE(g.ok()) << g.status().ToString();
    grpc_ = std::move(g).value();
    channel_ = grpc::CreateChannel("127.0.0.1:" + std::to_string(grpc_->port()),
                                   grpc::InsecureChannelCredentials());
    jobs_ = pb::Jobs::NewStub(channel_);
    sessions_ = pb::Sessions::NewStub(channel_);
  }

  static void Deadline(grpc::ClientContext* ctx, int seconds = 30) {
    ctx->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(seconds));
  }

  // One request on a new connection.
  std::optional<Response> Get(const std::string& target, const std::string& headers = "") {
    RawClient c(http_->port());
    if (!c.Send(Request("GET", target, "", headers))) return std::nullopt;
    return c.Read();
  }

  // A job that emits no more events: submitted, then paused.
  std::string PausedJob() {
    StatusOr<JobInfo> job = service_->jobs().Submit(server_test::JobJson(100000, "idle"));
    EXPECT_TRUE(job.ok()) << job.status().ToString();
    if (!job.ok()) return "";
    EXPECT_TRUE(service_->jobs().Pause(job->id).ok());
    auto deadline = Clock::now() + std::chrono::seconds(30);
    while (service_->jobs().Get(job->id)->state != JobState::kPaused && Clock::now() < deadline) {
      std::this_thread::sleep_for(milliseconds(5));
    }
    EXPECT_EQ(service_->jobs().Get(job->id)->state, JobState::kPaused);
    return job->id;
  }

  // An event stream over REST: its head and first event are read.
  std::unique_ptr<RawClient> OpenRestStream(const std::string& job, int* status) {
    auto c = std::make_unique<RawClient>(http_->port());
    *status = 0;
    if (!c->Send(Request("GET", "/v1/jobs/" + job + "/events"))) return c;
    std::optional<Response> head = c->ReadHead();
    if (!head) return c;
    *status = head->status;
    if (head->status == 200 && !c->ReadChunk()) *status = -1;
    return c;
  }

  // A Watch over gRPC whose first event was read.
  struct Watch {
    std::unique_ptr<grpc::ClientContext> ctx = std::make_unique<grpc::ClientContext>();
    std::unique_ptr<grpc::ClientReader<pb::JobEvent>> reader;
    ~Watch() {
      ctx->TryCancel();
      if (reader) reader->Finish().ok();
    }
  };
  std::unique_ptr<Watch> OpenWatch(const std::string& job, grpc::Status* status) {
    auto w = std::make_unique<Watch>();
    Deadline(w->ctx.get(), 120);
    pb::WatchJobRequest req;
    req.set_job_id(job);
    w->reader = jobs_->Watch(w->ctx.get(), req);
    pb::JobEvent e;
    if (w->reader->Read(&e)) {
      *status = grpc::Status::OK;
    } else {
      *status = w->reader->Finish();
      w->reader.reset();
    }
    return w;
  }

  std::filesystem::path dir_;
  ServiceOptions service_options_;
  HttpServerOptions http_options_;
  GrpcServerOptions grpc_options_;
  Metrics metrics_;
  std::unique_ptr<Service> service_;
  std::unique_ptr<HttpServer> http_;
  std::unique_ptr<GrpcServer> grpc_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<pb::Jobs::Stub> jobs_;
  std::unique_ptr<pb::Sessions::Stub> sessions_;
};

// --- Finding 11: one Authorization rule for both frontends.

TEST_F(FrontendLimitsTest, EveryAuthorizationFormGetsTheSameAnswerOverRestAndGrpc) {
  Start({"s3cret"});
  struct Case {
    std::vector<std::string> values;  // one Authorization header (metadata value) each
    bool ok;
  };
  // No tabs: gRPC cannot carry them in metadata.
  const Case cases[] = {
      {{}, false},
      {{"Bearer s3cret"}, true},
      {{"bearer s3cret"}, true},
      {{"BEARER s3cret"}, true},
      {{"Bearer   s3cret"}, true},  // extra spaces: REST took them, gRPC did not
      {{"Bearer s3cret "}, true},
      {{"Bearer wrong", "Bearer s3cret"}, false},  // two, one right: gRPC took it, REST did not
      {{"Bearer s3cret", "Bearer wrong"}, false},
      {{"Bearer s3cret", "Bearer s3cret"}, false},
      {{"Bearer s3cret extra"}, false},
      {{"Bearer s3cret,x"}, false},
      {{"Bearer wrong"}, false},
      {{"Bearer s3cre"}, false},
      {{"Bearer"}, false},
      {{"Basic czNjcmV0"}, false},
      {{"s3cret"}, false},
  };
  for (const Case& c : cases) {
    std::string shown, headers;
    for (const std::string& v : c.values) {
      shown += "[" + v + "]";
      headers += "Authorization: " + v + "\r\n";
    }
    std::optional<Response> rest = Get("/v1/jobs", headers);
    ASSERT_TRUE(rest) << shown;
    EXPECT_EQ(rest->status, c.ok ? 200 : 401) << shown << " " << rest->body;

    grpc::ClientContext ctx;
    Deadline(&ctx);
    for (const std::string& v : c.values) ctx.AddMetadata("authorization", v);
    pb::ListJobsResponse resp;
    grpc::Status g = jobs_->List(&ctx, pb::ListJobsRequest(), &resp);
    EXPECT_EQ(g.error_code(), c.ok ? grpc::StatusCode::OK : grpc::StatusCode::UNAUTHENTICATED)
        << shown << " " << g.error_message();
    if (!c.ok && rest->status == 401) {  // the same message over both
      EXPECT_EQ(api::StatusFromJson(rest->body).message(), g.error_message()) << shown;
    }
  }
}

// --- Finding 4: no body is buffered before auth; connections are capped.

TEST_F(FrontendLimitsTest, BigUnauthenticatedBodiesAreNotBuffered) {
  Start({"s3cret"});
  constexpr int kClients = 16;
  constexpr size_t kBody = size_t{60} << 20;
  const std::string piece(size_t{1} << 20, 'x');  // shared by every client
  const int64_t rss_before = ResidentBytes();
  std::atomic<int> refused{0}, other{0};
  std::vector<std::thread> clients;
  for (int i = 0; i < kClients; ++i) {
    clients.emplace_back([&] {
      RawClient c(http_->port());
      std::string head = "POST /v1/jobs HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n"
                         "Content-Length: " + std::to_string(kBody) + "\r\n\r\n";
      if (!c.Send(head)) return;
      for (size_t sent = 0; sent < kBody; sent += piece.size()) {
        if (!c.Send(piece)) break;  // the server closed the connection: fine
      }
      // The answer, if the connection was not reset before it could be read.
      if (std::optional<Response> r = c.ReadHead(milliseconds(5000))) {
        (r->status == 401 ? refused : other)++;
      }
    });
  }
  for (std::thread& t : clients) t.join();
  const int64_t growth = ResidentBytes() - rss_before;
  // Buffered, the bodies would be 960 MiB. (Under AddressSanitizer freed
  // memory waits in its quarantine and the budget is 128 MiB.)
#if defined(__SANITIZE_ADDRESS__)
  constexpr int64_t kBudget = int64_t{128} << 20;
#else
  constexpr int64_t kBudget = int64_t{64} << 20;
#endif
  EXPECT_LT(growth, kBudget) << "resident memory grew by " << (growth >> 20) << " MiB";
  EXPECT_EQ(other.load(), 0);
  EXPECT_GT(refused.load(), 0);
  // The server still serves.
  std::optional<Response> r = Get("/healthz");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
}

TEST_F(FrontendLimitsTest, ARequestRefusedOnItsHeaderIsAnsweredWithoutItsBody) {
  http_options_.unauthenticated_body_limit_bytes = 1024;
  Start({"s3cret"});
  // A declared 10 MiB body, none of it sent: 401 at once, then close.
  RawClient big(http_->port());
  ASSERT_TRUE(big.Send("POST /v1/jobs HTTP/1.1\r\nHost: t\r\nContent-Length: 10485760\r\n\r\n"));
  std::optional<Response> r = big.Read(milliseconds(5000));
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 401);
  EXPECT_EQ(r->header("connection"), "close");
  EXPECT_EQ(r->header("www-authenticate"), R"(Bearer realm="flowstate")");
  // The same for a path with no route and a method a route lacks.
  RawClient unknown(http_->port());
  ASSERT_TRUE(unknown.Send("POST /nowhere HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer s3cret\r\n"
                           "Content-Length: 10485760\r\n\r\n"));
  r = unknown.Read(milliseconds(5000));
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 404);
  RawClient method(http_->port());
  ASSERT_TRUE(method.Send("PUT /v1/jobs HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer s3cret\r\n"
                          "Transfer-Encoding: chunked\r\n\r\n"));
  r = method.Read(milliseconds(5000));
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 405);
  // A small body is read and dropped: the connection goes on.
  RawClient small(http_->port());
  ASSERT_TRUE(small.Send(Request("POST", "/v1/jobs", std::string(100, 'x'))));
  r = small.Read();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 401);
  EXPECT_NE(r->header("connection"), "close");
  ASSERT_TRUE(small.Send(Request("GET", "/v1/jobs", "", "Authorization: Bearer s3cret\r\n")));
  r = small.Read();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  // An open route takes no more than the unauthenticated limit without a
  // token; with one, the body limit.
  RawClient open(http_->port());
  ASSERT_TRUE(open.Send(Request("GET", "/healthz", std::string(2048, 'x'))));
  r = open.Read();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 413);
  EXPECT_NE(api::StatusFromJson(r->body).message().find("http.unauthenticated_body_limit_bytes"),
            std::string::npos)
      << r->body;
  RawClient authed(http_->port());
  ASSERT_TRUE(authed.Send(
      Request("GET", "/healthz", std::string(2048, 'x'), "Authorization: Bearer s3cret\r\n")));
  r = authed.Read();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  // An authenticated body is read whole and judged by its route.
  RawClient job(http_->port());
  ASSERT_TRUE(job.Send(Request("POST", "/v1/jobs", "{\"name\": " + std::string(4096, ' ') + "1}",
                               "Authorization: Bearer s3cret\r\n")));
  r = job.Read();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400) << r->body;
}

TEST_F(FrontendLimitsTest, ConnectionsOverTheCapAre503AndCounted) {
  http_options_.max_connections = 3;
  Start();
  std::vector<std::unique_ptr<RawClient>> held;
  for (int i = 0; i < 3; ++i) {
    held.push_back(std::make_unique<RawClient>(http_->port()));
    ASSERT_TRUE(held.back()->Send(Request("GET", "/healthz")));
    ASSERT_TRUE(held.back()->Read());  // served, kept alive
  }
  RawClient over(http_->port());
  ASSERT_TRUE(over.connected());
  std::optional<Response> r = over.Read(milliseconds(5000));
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 503);
  EXPECT_EQ(r->header("retry-after"), "1");
  Status s = api::StatusFromJson(r->body);
  EXPECT_EQ(s.code(), Code::kUnavailable);
  EXPECT_NE(s.message().find("http.max_connections"), std::string::npos) << s.message();
  EXPECT_TRUE(over.WaitClosed(milliseconds(5000)));
  std::string text = metrics_.Render();
  EXPECT_NE(text.find("flowstate_http_connections_refused_total 1"), std::string::npos) << text;
  EXPECT_NE(text.find("flowstate_http_connections 3"), std::string::npos);
  // One closes: a new connection is served again.
  held.pop_back();
  auto deadline = Clock::now() + std::chrono::seconds(10);
  bool served = false;
  while (!served && Clock::now() < deadline) {
    std::optional<Response> again = Get("/healthz");
    served = again && again->status == 200;
    if (!served) std::this_thread::sleep_for(milliseconds(20));
  }
  EXPECT_TRUE(served);
}

// --- Finding 9: idle event streams cost nothing; they are capped.

TEST_F(FrontendLimitsTest, IdleEventStreamsHoldNoThreadsAndCauseNoWakeUps) {
  constexpr int kRest = 200, kGrpc = 50;
  Start();
  const std::string job = PausedJob();
  ASSERT_FALSE(job.empty());
  const int64_t threads_before = Threads();
  std::vector<std::unique_ptr<RawClient>> rest;
  for (int i = 0; i < kRest; ++i) {
    int status = 0;
    rest.push_back(OpenRestStream(job, &status));
    ASSERT_EQ(status, 200) << "stream " << i;
  }
  std::vector<std::unique_ptr<Watch>> watches;
  for (int i = 0; i < kGrpc; ++i) {
    grpc::Status status;
    watches.push_back(OpenWatch(job, &status));
    ASSERT_TRUE(status.ok()) << "watch " << i << ": " << status.error_message();
  }
  EXPECT_EQ(service_->num_event_streams(), kRest + kGrpc);
  // A Watch held a gRPC thread each.
  EXPECT_LT(Threads() - threads_before, kGrpc / 2)
      << "threads: " << threads_before << " -> " << Threads();
  // Idle for a second: REST streams polled every 25 ms (8000 wake-ups a
  // second for 200), Watches every 100 ms.
  std::this_thread::sleep_for(milliseconds(200));
  const int64_t switches_before = ContextSwitches();
  std::this_thread::sleep_for(milliseconds(1000));
  const int64_t switches = ContextSwitches() - switches_before;
  EXPECT_LT(switches, 1500) << "context switches in 1 s with " << kRest + kGrpc << " idle streams";
  // Everything else still serves.
  std::optional<Response> health = Get("/healthz");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200);
  // A step on the job reaches every stream.
  ASSERT_TRUE(service_->jobs().Resume(job).ok());
  for (int i = 0; i < kRest; ++i) ASSERT_TRUE(rest[i]->ReadChunk()) << "stream " << i;
  for (int i = 0; i < kGrpc; ++i) {
    pb::JobEvent e;
    ASSERT_TRUE(watches[i]->reader->Read(&e)) << "watch " << i;
  }
  ASSERT_TRUE(service_->jobs().Cancel(job).ok());
}

TEST_F(FrontendLimitsTest, EventStreamsOverTheCapAreRefusedOverRestAndGrpc) {
  service_options_.max_event_streams = 3;
  Start();
  const std::string job = PausedJob();
  int status = 0;
  std::unique_ptr<RawClient> a = OpenRestStream(job, &status);
  ASSERT_EQ(status, 200);
  std::unique_ptr<RawClient> b = OpenRestStream(job, &status);
  ASSERT_EQ(status, 200);
  grpc::Status gs;
  std::unique_ptr<Watch> w = OpenWatch(job, &gs);
  ASSERT_TRUE(gs.ok()) << gs.error_message();
  // Full: REST 503, gRPC RESOURCE_EXHAUSTED, both naming the setting.
  RawClient over(http_->port());
  ASSERT_TRUE(over.Send(Request("GET", "/v1/jobs/" + job + "/events")));
  std::optional<Response> r = over.Read();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 503);
  EXPECT_EQ(r->header("retry-after"), "1");
  Status s = api::StatusFromJson(r->body);
  EXPECT_EQ(s.code(), Code::kResourceExhausted);
  EXPECT_NE(s.message().find("limits.max_event_streams"), std::string::npos) << s.message();
  std::unique_ptr<Watch> w2 = OpenWatch(job, &gs);
  EXPECT_EQ(gs.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_EQ(gs.error_message(), s.message());
  // One ends (a Watch's cancel reaches the server at once; a REST client
  // that goes away is noticed at the stream's next write): a slot is free.
  w.reset();
  auto deadline = Clock::now() + std::chrono::seconds(30);
  std::unique_ptr<RawClient> c;
  do {
    c = OpenRestStream(job, &status);
    if (status != 200) std::this_thread::sleep_for(milliseconds(20));
  } while (status != 200 && Clock::now() < deadline);
  EXPECT_EQ(status, 200);
  ASSERT_TRUE(service_->jobs().Cancel(job).ok());
}

// --- The session cap, over both frontends.

TEST_F(FrontendLimitsTest, SessionsOverTheCapAreAClearRefusalOverRestAndGrpc) {
  service_options_.max_sessions = 2;
  Start();
  const std::string graph = R"({"nodes": [{"name": "c", "op": "Const", "attrs": {"dtype": "float32", "value": 1.0}}]})";
  for (int i = 0; i < 2; ++i) {
    RawClient c(http_->port());
    ASSERT_TRUE(c.Send(Request("POST", "/v1/sessions", "{\"graph\": " + graph + "}")));
    std::optional<Response> r = c.Read();
    ASSERT_TRUE(r);
    ASSERT_EQ(r->status, 201) << r->body;
  }
  RawClient c(http_->port());
  ASSERT_TRUE(c.Send(Request("POST", "/v1/sessions", "{\"graph\": " + graph + "}")));
  std::optional<Response> r = c.Read();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 429);
  Status s = api::StatusFromJson(r->body);
  EXPECT_EQ(s.code(), Code::kResourceExhausted);
  EXPECT_NE(s.message().find("sessions.max_sessions"), std::string::npos) << s.message();

  grpc::ClientContext ctx;
  Deadline(&ctx);
  pb::CreateSessionRequest req;
  req.set_graph_json(graph);
  pb::CreateSessionResponse resp;
  grpc::Status g = sessions_->Create(&ctx, req, &resp);
  EXPECT_EQ(g.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_EQ(g.error_message(), s.message());
  EXPECT_EQ(service_->num_sessions(), 2);
}

}  // namespace
}  // namespace flowstate

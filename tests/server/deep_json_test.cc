// Issue 11, finding 1: a deeply nested JSON body (60,000 levels, ~120 KiB)
// used to overflow a server thread's stack. Real REST and gRPC servers over
// one Service get such bodies on every route that reads client JSON and
// must answer 400 / INVALID_ARGUMENT naming limits.max_json_depth, and go on
// answering afterwards. Also the process-wide limit itself: set, refused out
// of range, applied to the job-spec parser.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <optional>
#include <string>

#include "api/json_codec.h"
#include "server/rest/http_server.h"
#include "api/job_spec.h"
#include "tests/server/grpc_test_fixture.h"

namespace flowstate {
namespace {

using grpc_test::GrpcServerTest;
namespace pb = ::flowstate::v1;

constexpr int kDeep = 60000;

std::string Nested(int depth, const std::string& inner = "") {
  return std::string(size_t(depth), '[') + inner + std::string(size_t(depth), ']');
}

// The process-wide limit for one test, restored after it.
class ScopedJsonDepth {
 public:
  explicit ScopedJsonDepth(int depth) : saved_(api::MaxJsonDepth()) {
    EXPECT_TRUE(api::SetMaxJsonDepth(depth).ok());
  }
  ~ScopedJsonDepth() { (void)api::SetMaxJsonDepth(saved_); }

 private:
  int saved_;
};

struct HttpResult {
  int status = 0;
  std::string body;
};

// One HTTP/1.1 request on a fresh connection (Connection: close), read to
// the end; every socket call has a 30 s timeout, so a dead server fails the
// test instead of hanging it. nullopt when the server does not answer.
std::optional<HttpResult> Http(int port, const std::string& method, const std::string& target,
                               const std::string& body = "") {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return std::nullopt;
  timeval tv{30, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(uint16_t(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  std::string raw;
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0) {
    std::string req = method + " " + target + " HTTP/1.1\r\nHost: test\r\nConnection: close\r\n" +
                      "Content-Type: application/json\r\nContent-Length: " +
                      std::to_string(body.size()) + "\r\n\r\n" + body;
    bool sent = true;
    for (size_t off = 0; off < req.size();) {
      ssize_t n = ::send(fd, req.data() + off, req.size() - off, MSG_NOSIGNAL);
      if (n <= 0) {
        sent = false;
        break;
      }
      off += size_t(n);
    }
    char buf[65536];
    for (ssize_t n; sent && (n = ::recv(fd, buf, sizeof buf, 0)) > 0;) raw.append(buf, size_t(n));
  }
  ::close(fd);
  size_t head_end = raw.find("\r\n\r\n");
  if (raw.size() < 12 || head_end == std::string::npos) return std::nullopt;
  return HttpResult{std::stoi(raw.substr(9, 3)), raw.substr(head_end + 4)};
}

// The 400 that every deep body must get, with the limit and its key named.
void ExpectRefused(const std::optional<HttpResult>& r, const std::string& what) {
  ASSERT_TRUE(r.has_value()) << what << ": no answer (did the server crash?)";
  EXPECT_EQ(r->status, 400) << what << ": " << r->body;
  Status s = api::StatusFromJson(r->body);
  EXPECT_EQ(s.code(), Code::kInvalidArgument) << what << ": " << r->body;
  EXPECT_NE(s.message().find("nesting deeper than 100 levels"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("limits.max_json_depth"), std::string::npos) << s.message();
}

void ExpectRefused(const grpc::Status& s, const std::string& what) {
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << what << ": " << s.error_message();
  EXPECT_NE(s.error_message().find("nesting deeper than 100 levels"), std::string::npos)
      << what << ": " << s.error_message();
}

// GrpcServerTest's gRPC server, plus a REST server over the same Service.
class DeepJsonTest : public GrpcServerTest {
 protected:
  void SetUp() override {
    GrpcServerTest::SetUp();
    HttpServerOptions ho;
    ho.address = "127.0.0.1:0";
    ho.threads = 2;
    StatusOr<std::unique_ptr<HttpServer>> h = HttpServer::Start(service_.get(), &metrics_, ho);
    ASSERT_TRUE(h.ok()) << h.status().ToString();
    http_ = std::move(h).value();
  }
  void TearDown() override {
    if (http_) http_->Stop();
    http_.reset();
    GrpcServerTest::TearDown();
  }

  void ExpectStillServing() {
    std::optional<HttpResult> h = Http(http_->port(), "GET", "/healthz");
    ASSERT_TRUE(h.has_value());
    EXPECT_EQ(h->status, 200);
    grpc::ClientContext ctx;
    Deadline(&ctx);
    pb::ListDevicesResponse devices;
    EXPECT_TRUE(devices_->List(&ctx, pb::ListDevicesRequest(), &devices).ok());
  }

  std::unique_ptr<HttpServer> http_;
};

TEST_F(DeepJsonTest, DeeplyNestedBodiesAre400OnEveryRouteAndTheServerStaysUp) {
  const std::string session = CreateSession(grpc_test::kDoubleGraph);
  ASSERT_FALSE(session.empty());
  const pb::Job job = Submit(grpc_test::CsvJob(1, 2));
  ASSERT_FALSE(job.job_id().empty());

  // The report's reproduction, and the same depth in every other body.
  ExpectRefused(Http(http_->port(), "POST", "/v1/jobs", "{\"graph\":" + Nested(kDeep) + "}"),
                "POST /v1/jobs");
  std::string deep_object;
  for (int i = 0; i < kDeep; ++i) deep_object += "{\"a\":";
  deep_object += "1" + std::string(kDeep, '}');
  ExpectRefused(Http(http_->port(), "POST", "/v1/jobs", deep_object), "POST /v1/jobs (objects)");
  ExpectRefused(Http(http_->port(), "POST", "/v1/sessions/" + session + "/run",
                     "{\"feeds\": {\"x\": " + Nested(kDeep, "1") + "}, \"fetches\": [\"y\"]}"),
                "POST /v1/sessions/{id}/run");
  ExpectRefused(Http(http_->port(), "POST", "/v1/jobs/" + job.job_id() + "/predict",
                     "{\"inputs\": {\"x\": " + Nested(kDeep, "1") + "}, \"fetches\": [\"loss\"]}"),
                "POST /v1/jobs/{id}/predict");
  ExpectRefused(Http(http_->port(), "POST", "/v1/sessions", "{\"graph\": " + Nested(kDeep) + "}"),
                "POST /v1/sessions");
  ExpectStillServing();

  {
    grpc::ClientContext ctx;
    Deadline(&ctx);
    pb::SubmitJobRequest req;
    req.set_job_json("{\"graph\":" + Nested(kDeep) + "}");
    pb::Job out;
    ExpectRefused(jobs_->Submit(&ctx, req, &out), "Jobs/Submit");
  }
  {
    grpc::ClientContext ctx;
    Deadline(&ctx);
    pb::CreateSessionRequest req;
    req.set_graph_json(Nested(kDeep));
    pb::CreateSessionResponse out;
    ExpectRefused(sessions_->Create(&ctx, req, &out), "Sessions/Create");
  }
  ExpectStillServing();
  // Nothing was stored: the one job submitted above is the only one.
  EXPECT_EQ(service_->jobs().List().size(), 1u);
}

TEST_F(DeepJsonTest, TheLimitIsSettableAndNamedInTheError) {
  ScopedJsonDepth limit(8);
  // 8 levels pass the depth check (and then fail as the job they are not).
  std::optional<HttpResult> r =
      Http(http_->port(), "POST", "/v1/jobs", "{\"graph\":" + Nested(7) + "}");
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->status, 400);
  EXPECT_EQ(api::StatusFromJson(r->body).message().find("nesting"), std::string::npos) << r->body;
  r = Http(http_->port(), "POST", "/v1/jobs", "{\"graph\":" + Nested(8) + "}");
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->status, 400);
  EXPECT_EQ(api::StatusFromJson(r->body).message(),
            "JSON nesting deeper than 8 levels (at byte 16); the limit is limits.max_json_depth");
}

TEST(JsonDepthLimit, OutOfRangeLimitsAreRefusedAndTheOldOneKept) {
  const int before = api::MaxJsonDepth();
  EXPECT_EQ(before, api::kDefaultMaxJsonDepth);
  EXPECT_EQ(api::SetMaxJsonDepth(0).code(), Code::kInvalidArgument);
  EXPECT_EQ(api::SetMaxJsonDepth(api::kMaxJsonDepthCeiling + 1).code(), Code::kInvalidArgument);
  EXPECT_EQ(api::MaxJsonDepth(), before);
}

TEST(JsonDepthLimit, TheJobSpecParserChecksBeforeParsing) {
  StatusOr<JobSpec> j = ParseJobSpec("{\"graph\":" + Nested(kDeep) + "}");
  ASSERT_FALSE(j.ok());
  EXPECT_EQ(j.status().code(), Code::kInvalidArgument);
  EXPECT_EQ(j.status().message(),
            "JSON nesting deeper than 100 levels (at byte 108); the limit is limits.max_json_depth");
  // The limit counts brackets, not what is inside strings.
  j = ParseJobSpec("{\"name\": \"" + Nested(kDeep) + "\"}");
  ASSERT_FALSE(j.ok());
  EXPECT_EQ(j.status().message().find("nesting"), std::string::npos) << j.status().message();
}

}  // namespace
}  // namespace flowstate

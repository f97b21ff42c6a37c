// PRIVATE to the REST routes' tests (http_routes_test.cc,
// http_routes_jobs_test.cc): a Service over a temporary data root holding
// points.csv, and Do() calling HandleRequest directly (no sockets). One
// fixture object per test.
#ifndef FLOWSTATE_TESTS_SERVER_HTTP_ROUTES_FIXTURE_H_
#define FLOWSTATE_TESTS_SERVER_HTTP_ROUTES_FIXTURE_H_

#include "server/rest/http_routes.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <random>
#include <thread>

#include "api/json_codec.h"
#include "api/views_json.h"
#include "server/metrics.h"
#include "server/service.h"
#include "tests/server/server_test_util.h"

namespace flowstate {
namespace http_routes_test {


using Json = nlohmann::ordered_json;

inline DevicePool* Pool() { return server_test::TestPool(1); }

inline constexpr const char* kGraph = R"({"graph": {"nodes": [
    {"name": "x", "op": "Placeholder", "attrs": {"dtype": "float32", "shape": [-1]}},
    {"name": "two", "op": "Const", "attrs": {"dtype": "float32", "value": 2.0}},
    {"name": "y", "op": "Mul", "inputs": ["x", "two"]}]}})";

inline constexpr const char* kRun = R"({"feeds": {"x": [1.0, 2.0, 3.0]}, "fetches": ["y"]})";

using server_test::JobJson;

class HttpRoutesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = server_test::FreshTestDir("flowstate_http_routes");
    server_test::WritePointsCsv(dir_ / "points.csv", 64, 3,
                                [](double a, double b) { return 2 * a - 3 * b; });
    ServiceOptions so;
    so.devices = Pool();
    so.data_root = dir_.string();
    so.max_sessions = 4;
    so.jobs.max_step_events_per_second = 1000;
    service_ = std::make_unique<Service>(so);
    ctx_.service = service_.get();
    ctx_.metrics = &metrics_;
    ctx_.options.max_tensor_bytes = 1024;
  }
  void TearDown() override {
    service_.reset();
    std::filesystem::remove_all(dir_);
  }

  HttpResponse Do(const std::string& method, const std::string& target, const std::string& body = "",
                  const std::string& authorization = "") {
    HttpRequest r;
    r.method = method;
    r.target = target;
    r.body = body;
    if (!authorization.empty()) r.headers.emplace("authorization", authorization);
    return HandleRequest(r, ctx_);
  }

  std::string CreateSession() {
    HttpResponse r = Do("POST", "/v1/sessions", kGraph);
    EXPECT_EQ(r.status, 201) << r.body;
    return Json::parse(r.body).value("session_id", "");
  }

  // Waits until the job is in `state` (or any terminal state when kSucceeded).
  JobInfo WaitFor(const std::string& id, JobState state) {
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    JobInfo info;
    while (std::chrono::steady_clock::now() < deadline) {
      HttpResponse r = Do("GET", "/v1/jobs/" + id);
      EXPECT_EQ(r.status, 200) << r.body;
      StatusOr<JobInfo> j = JobInfoFromJson(r.body);
      EXPECT_TRUE(j.ok()) << j.status().ToString();
      if (!j.ok()) break;
      info = *j;
      if (info.state == state || (state == JobState::kSucceeded && IsTerminal(info.state))) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    EXPECT_EQ(JobStateName(info.state), JobStateName(state)) << info.error;
    return info;
  }

  std::filesystem::path dir_;
  Metrics metrics_;
  std::unique_ptr<Service> service_;
  RouteContext ctx_;
};

// The error body of a response: its code, message and node.
inline Status ErrorOf(const HttpResponse& r) { return api::StatusFromJson(r.body); }

inline std::string Header(const HttpResponse& r, const std::string& name) {
  for (const auto& [k, v] : r.headers) {
    if (k == name) return v;
  }
  return "";
}

inline std::vector<std::string> Keys(const Json& o) {
  std::vector<std::string> keys;
  for (auto it = o.begin(); it != o.end(); ++it) keys.push_back(it.key());
  return keys;
}


}  // namespace http_routes_test
}  // namespace flowstate

#endif  // FLOWSTATE_TESTS_SERVER_HTTP_ROUTES_FIXTURE_H_

// History and step traces over REST (server/rest/http_routes.h): GET
// /v1/jobs/{id}/history, /traces and /traces/{step}, "trace": true on a
// session run, and the "trace" field of a job with its errors.
#include <gtest/gtest.h>

#include <map>

#include "api/job_spec.h"
#include "tests/server/http_routes_fixture.h"

namespace flowstate {
namespace http_routes_test {
namespace {

// A job with a "trace" (JobJson's last field is "seed": 1).
std::string TracedJob(int epochs, const std::string& trace) {
  std::string j = JobJson(epochs);
  j.insert(j.rfind('}'), ", \"trace\": " + trace);
  return j;
}

TEST_F(HttpRoutesTest, ATracedSessionRunHasAnEventPerOpNestedInTheStep) {
  std::string id = CreateSession();
  HttpResponse plain = Do("POST", "/v1/sessions/" + id + "/run", kRun);
  ASSERT_EQ(plain.status, 200) << plain.body;
  EXPECT_FALSE(Json::parse(plain.body).contains("trace")) << "no trace unless asked";

  HttpResponse r = Do("POST", "/v1/sessions/" + id + "/run",
                      R"({"feeds": {"x": [1.0, 2.0, 3.0]}, "fetches": ["y"], "trace": true})");
  ASSERT_EQ(r.status, 200) << r.body;
  Json body = Json::parse(r.body);
  EXPECT_EQ(body["outputs"]["y"]["data"], Json::parse("[2.0, 4.0, 6.0]"));
  const Json& trace = body["trace"];
  EXPECT_EQ(trace["displayTimeUnit"], "ms");
  const double wall = trace["otherData"]["wall_us"].get<double>();
  EXPECT_GT(wall, 0);
  std::map<std::string, Json> ops;  // by node
  std::map<int, std::string> process_names;
  for (const Json& e : trace["traceEvents"]) {
    if (e["ph"] == "M") {
      if (e["name"] == "process_name") process_names[e["pid"].get<int>()] = e["args"]["name"];
      continue;
    }
    ASSERT_EQ(e["ph"], "X") << e.dump();
    if (e["cat"] == "step") {
      EXPECT_DOUBLE_EQ(e["dur"].get<double>(), wall);
      continue;
    }
    EXPECT_TRUE(ops.emplace(e["name"].get<std::string>(), e).second) << "one event per op: " << e.dump();
    EXPECT_GE(e["ts"].get<double>(), 0) << e.dump();
    EXPECT_GE(e["dur"].get<double>(), 0) << e.dump();
    EXPECT_LE(e["ts"].get<double>() + e["dur"].get<double>(), wall + 1e-3) << e.dump();
    EXPECT_EQ(e["args"]["node"], e["name"]);
    EXPECT_TRUE(e["args"].contains("bytes"));
    EXPECT_GT(e["tid"].get<int64_t>(), 0);
  }
  // The graph's nodes and the runtime's argument and result.
  ASSERT_EQ(ops.count("y"), 1u) << r.body;
  EXPECT_EQ(ops.at("y")["cat"], "Mul");
  EXPECT_EQ(ops.at("y")["args"]["output_bytes"], 12);
  EXPECT_EQ(ops.count("two"), 1u);
  EXPECT_GE(ops.size(), 4u) << "x's _Arg and y's _Retval too";
  ASSERT_EQ(process_names.count(ops.at("y")["pid"].get<int>()), 1u);
  EXPECT_NE(process_names.at(ops.at("y")["pid"].get<int>()).find("CPU:0"), std::string::npos);

  HttpResponse bad = Do("POST", "/v1/sessions/" + id + "/run", R"({"fetches": ["y"], "trace": "yes"})");
  EXPECT_EQ(bad.status, 400);
  EXPECT_NE(ErrorOf(bad).message().find("trace"), std::string::npos) << bad.body;
}

TEST_F(HttpRoutesTest, AJobTracesExactlyTheAskedStepsAndHasAHistory) {
  HttpResponse sub = Do("POST", "/v1/jobs", TracedJob(2, R"({"steps": [5, 2]})"));
  ASSERT_EQ(sub.status, 201) << sub.body;
  std::string id = Json::parse(sub.body)["job_id"];
  JobInfo done = WaitFor(id, JobState::kSucceeded);
  ASSERT_EQ(done.step, 8);  // 64 rows in batches of 16, 2 epochs

  HttpResponse h = Do("GET", "/v1/jobs/" + id + "/history");
  ASSERT_EQ(h.status, 200) << h.body;
  Json history = Json::parse(h.body);
  EXPECT_EQ(Keys(history), (std::vector<std::string>{"job_id", "steps", "evals", "downsampled"}));
  EXPECT_EQ(history["job_id"], id);
  ASSERT_EQ(history["steps"].size(), 8u);
  EXPECT_EQ(Keys(history["steps"][0]),
            (std::vector<std::string>{"step", "epoch", "loss", "examples_per_sec", "time"}));
  EXPECT_EQ(history["steps"][7]["step"], 8);
  EXPECT_EQ(history["steps"][7]["epoch"], 1);
  EXPECT_EQ(history["downsampled"], false);
  EXPECT_TRUE(history["evals"].empty()) << "the job has no eval section";
  StatusOr<JobHistory> parsed = JobHistoryFromJson(h.body);
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  EXPECT_EQ(parsed->steps.size(), 8u);

  HttpResponse list = Do("GET", "/v1/jobs/" + id + "/traces");
  ASSERT_EQ(list.status, 200) << list.body;
  EXPECT_EQ(Json::parse(list.body)["steps"], Json::parse("[2, 5]"));
  HttpResponse t = Do("GET", "/v1/jobs/" + id + "/traces/5");
  ASSERT_EQ(t.status, 200) << t.body;
  Json trace = Json::parse(t.body);
  EXPECT_EQ(trace["otherData"]["step"], 5);
  bool matmul = false;
  for (const Json& e : trace["traceEvents"]) matmul |= e["ph"] == "X" && e["cat"] == "MatMul";
  EXPECT_TRUE(matmul) << t.body.substr(0, 400);

  HttpResponse untraced = Do("GET", "/v1/jobs/" + id + "/traces/3");
  EXPECT_EQ(untraced.status, 404);
  EXPECT_NE(ErrorOf(untraced).message().find("step 3"), std::string::npos) << untraced.body;
  HttpResponse bad_step = Do("GET", "/v1/jobs/" + id + "/traces/x1");
  EXPECT_EQ(bad_step.status, 400);
  EXPECT_NE(ErrorOf(bad_step).message().find("step"), std::string::npos) << bad_step.body;
  EXPECT_EQ(Do("GET", "/v1/jobs/job-404/history").status, 404);
  EXPECT_EQ(Do("GET", "/v1/jobs/job-404/traces").status, 404);
  EXPECT_EQ(Do("GET", "/v1/jobs/job-404/traces/1").status, 404);
  EXPECT_EQ(Do("POST", "/v1/jobs/" + id + "/history").status, 405);

  // The document as submitted, for the console's configuration panel.
  HttpResponse spec = Do("GET", "/v1/jobs/" + id + "/spec");
  ASSERT_EQ(spec.status, 200) << spec.body;
  EXPECT_EQ(Json::parse(spec.body), Json::parse(TracedJob(2, R"({"steps": [5, 2]})")));
  EXPECT_EQ(Do("GET", "/v1/jobs/job-404/spec").status, 404);
}

TEST_F(HttpRoutesTest, BadTraceSpecsAreRefusedNamingTheField) {
  const std::map<std::string, std::string> cases = {
      {"true", "trace"},
      {R"({})", "trace.steps"},
      {R"({"steps": []})", "trace.steps"},
      {R"({"steps": [0]})", "trace.steps[0]"},
      {R"({"steps": [3, 1.5]})", "trace.steps[1]"},
      {R"({"steps": [4, 4]})", "trace.steps[1]"},
      {R"({"steps": [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17]})", "trace.steps"},
      {R"({"steps": [1], "every": 2})", "trace.every"},
  };
  for (const auto& [spec, field] : cases) {
    HttpResponse r = Do("POST", "/v1/jobs", TracedJob(1, spec));
    EXPECT_EQ(r.status, 400) << spec << ": " << r.body;
    EXPECT_EQ(ErrorOf(r).message().rfind(field + ":", 0), 0u) << spec << ": " << r.body;
  }
  EXPECT_EQ(Json::parse(Do("GET", "/v1/jobs").body)["jobs"].size(), 0u) << "nothing was created";
}

}  // namespace
}  // namespace http_routes_test
}  // namespace flowstate

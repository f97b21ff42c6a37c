// The REST routes of jobs, called directly (see http_routes_test.cc):
// submit, get, pause/resume/cancel, predict bodies, event streams.
#include "tests/server/http_routes_fixture.h"

namespace flowstate {
namespace http_routes_test {
namespace {

// --- Jobs.

TEST_F(HttpRoutesTest, JobLifecycleAndBodies) {
  HttpResponse r = Do("POST", "/v1/jobs", JobJson(2));
  ASSERT_EQ(r.status, 201) << r.body;
  Json job = Json::parse(r.body);
  EXPECT_EQ(Keys(job), (std::vector<std::string>{"job_id", "name", "state", "epoch", "epochs", "step",
                                                 "total_steps", "loss", "examples_per_sec", "metrics",
                                                 "error", "created", "started", "finished",
                                                 "checkpoint", "checkpoint_failures",
                                                 "checkpoint_error", "resumed_from_step", "skipped_steps",
                                                 "eta_seconds", "replicas", "replicas_alive", "restarts",
                                                 "placement"}));
  EXPECT_EQ(job["job_id"], "job-1");
  EXPECT_EQ(job["name"], "line");
  EXPECT_EQ(job["state"], "QUEUED");
  EXPECT_EQ(job["epochs"], 2);
  EXPECT_EQ(job["step"], 0);
  EXPECT_TRUE(job["metrics"].is_object());
  EXPECT_EQ(job["error"], "");
  EXPECT_TRUE(job["finished"].is_null());
  // RFC 3339 UTC with milliseconds: 2026-12-02T17:03:11.204Z
  std::string created = job["created"];
  ASSERT_EQ(created.size(), 24u) << created;
  EXPECT_EQ(created[10], 'T');
  EXPECT_EQ(created[19], '.');
  EXPECT_EQ(created.back(), 'Z');
  EXPECT_EQ(Header(r, "Location"), "/v1/jobs/job-1");

  JobInfo done = WaitFor("job-1", JobState::kSucceeded);
  EXPECT_EQ(done.step, 8);
  EXPECT_EQ(done.total_steps, 8);
  EXPECT_EQ(done.epoch, 1);
  EXPECT_GT(done.finished, 0);
  EXPECT_GE(done.finished, done.started);

  r = Do("GET", "/v1/jobs");
  ASSERT_EQ(r.status, 200);
  StatusOr<std::vector<JobInfo>> list = JobInfoListFromJson(r.body);
  ASSERT_TRUE(list.ok()) << list.status().ToString();
  ASSERT_EQ(list->size(), 1u);
  EXPECT_EQ((*list)[0].id, "job-1");
  EXPECT_EQ(Keys(Json::parse(r.body)), std::vector<std::string>{"jobs"});

  // Predictions with the trained variables.
  r = Do("POST", "/v1/jobs/job-1/predict",
         R"({"inputs": {"x": {"dtype": "float32", "shape": [2, 2], "data": [1, 0, 0, 1]}},
             "fetches": ["pred"], "encoding": "data"})");
  ASSERT_EQ(r.status, 200) << r.body;
  Json pred = Json::parse(r.body);
  ASSERT_EQ(Keys(pred), std::vector<std::string>{"outputs"});
  EXPECT_EQ(pred["outputs"]["pred"]["shape"], Json::parse("[2]"));
  // Its timings: the engine's step within the handler (Server-Timing).
  ASSERT_EQ(r.timings.size(), 2u);
  EXPECT_STREQ(r.timings[0].first, "step");
  EXPECT_STREQ(r.timings[1].first, "handler");
  EXPECT_GT(r.timings[0].second, 0.0);
  EXPECT_LE(r.timings[0].second, r.timings[1].second);
  r = Do("POST", "/v1/jobs/job-1/predict",
         R"({"inputs": {"x": [[1.0, 0.0]]}, "fetches": ["pred"], "encoding": "nested"})");
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_TRUE(Json::parse(r.body)["outputs"]["pred"].is_array());
  // Whole numbers (raw pixels, say) are read as the float32 the job's input
  // placeholder expects.
  HttpResponse whole = Do("POST", "/v1/jobs/job-1/predict",
                          R"({"inputs": {"x": [[1, 0]]}, "fetches": ["pred"], "encoding": "nested"})");
  ASSERT_EQ(whole.status, 200) << whole.body;
  EXPECT_EQ(Json::parse(whole.body), Json::parse(r.body));

  // A finished job can be neither cancelled, paused nor resumed.
  for (const char* action : {"cancel", "pause", "resume"}) {
    r = Do("POST", std::string("/v1/jobs/job-1/") + action);
    EXPECT_EQ(r.status, 400) << action;
    EXPECT_EQ(ErrorOf(r).code(), Code::kFailedPrecondition) << action;
  }
}

TEST_F(HttpRoutesTest, PauseResumeCancel) {
  HttpResponse r = Do("POST", "/v1/jobs", JobJson(100000, "long"));
  ASSERT_EQ(r.status, 201) << r.body;
  std::string id = Json::parse(r.body)["job_id"];
  r = Do("POST", "/v1/jobs/" + id + "/pause");
  ASSERT_EQ(r.status, 200) << r.body;
  StatusOr<JobInfo> after = JobInfoFromJson(r.body);  // the job after the call
  ASSERT_TRUE(after.ok()) << after.status().ToString();
  EXPECT_EQ(after->id, id);
  WaitFor(id, JobState::kPaused);
  r = Do("POST", "/v1/jobs/" + id + "/pause");
  EXPECT_EQ(r.status, 400) << r.body;  // already paused
  r = Do("POST", "/v1/jobs/" + id + "/resume");
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_NE(JobInfoFromJson(r.body)->state, JobState::kPaused);
  r = Do("POST", "/v1/jobs/" + id + "/resume");
  EXPECT_EQ(r.status, 400) << r.body;  // not paused
  r = Do("POST", "/v1/jobs/" + id + "/cancel");
  ASSERT_EQ(r.status, 200) << r.body;
  WaitFor(id, JobState::kCancelled);
}

TEST_F(HttpRoutesTest, RejectedJobSubmissionCreatesNothing) {
  struct Case {
    std::string body;
    int status;
    const char* message_start;
  } cases[] = {
      {"{", 400, ""},
      {"[]", 400, ""},
      {R"({"name": "x"})", 400, ""},  // no graph, loss, input
      {JobJson(1).replace(1, 0, R"("colour": "red",)"), 400, "colour"},
      {R"({"name": 3})", 400, "name"},
      {JobJson(1).replace(JobJson(1).find("\"sgd\""), 5, "\"sdg\""), 400, "optimizer.type"},
      // Outside the data root: refused (403) before anything is read.
      {JobJson(1).replace(JobJson(1).find("points.csv"), 10, "../../etc/passwd"), 403, ""},
  };
  for (const Case& c : cases) {
    HttpResponse r = Do("POST", "/v1/jobs", c.body);
    EXPECT_EQ(r.status, c.status) << c.body << " -> " << r.body;
    Status s = ErrorOf(r);
    EXPECT_FALSE(s.ok()) << r.body;
    EXPECT_EQ(s.message().rfind(c.message_start, 0), 0u) << s.message();
  }
  EXPECT_EQ(Do("GET", "/v1/jobs").body, R"({"jobs":[]})");
  EXPECT_TRUE(service_->jobs().List().empty());
}

TEST_F(HttpRoutesTest, UnknownJobsAre404) {
  for (const auto& [method, suffix] : std::vector<std::pair<std::string, std::string>>{
           {"GET", ""}, {"GET", "/events"}, {"POST", "/cancel"}, {"POST", "/pause"},
           {"POST", "/resume"}, {"POST", "/predict"}}) {
    std::string body = suffix == "/predict" ? R"({"fetches": ["pred"]})" : "";
    HttpResponse r = Do(method, "/v1/jobs/job-77" + suffix, body);
    EXPECT_EQ(r.status, 404) << suffix << " -> " << r.body;
    EXPECT_EQ(ErrorOf(r).code(), Code::kNotFound);
    EXPECT_EQ(r.stream, nullptr);
  }
}

TEST_F(HttpRoutesTest, BadPredictBodies) {
  ASSERT_EQ(Do("POST", "/v1/jobs", JobJson(1)).status, 201);
  WaitFor("job-1", JobState::kSucceeded);
  const std::string predict = "/v1/jobs/job-1/predict";
  struct Case {
    std::string body;
    int status;
    const char* message_start;
  } cases[] = {
      {"", 400, "the request has no body"},
      {"{", 400, "malformed JSON"},
      {R"({"inputs": {"x": [[1.0, 0.0]]}})", 400, "fetches: missing"},
      {R"({"inputs": {"x": [[1.0, 0.0]]}, "fetches": ["pred"], "outputs": 1})", 400, "outputs: unknown field"},
      {R"({"inputs": [1], "fetches": ["pred"]})", 400, "inputs: expected an object"},
      {R"({"inputs": {"x": [[1.0], [2.0, 3.0]]}, "fetches": ["pred"]})", 400, "inputs.x"},
      {R"({"inputs": {"x:0": "abc", "^y": 1}, "fetches": ["pred"]})", 400, "inputs[\"x:0\"]"},
      {R"({"inputs": {"^y": 1}, "fetches": ["pred"]})", 400, "inputs[\"^y\"]: bad name"},
      {R"({"inputs": {"x": [[1.0, 0.0]]}, "fetches": "pred"})", 400, "fetches: expected a list"},
      {R"({"inputs": {"x": [[1.0, 0.0]]}, "fetches": ["pred", 2]})", 400, "fetches[1]: expected a string"},
      {R"({"inputs": {"x": [[1.0, 0.0]]}, "fetches": ["pred"], "encoding": 1})", 400, "encoding: "},
      {R"({"inputs": {"x": [[1.0, 0.0]]}, "fetches": ["pred"], "encoding": "hex"})", 400, "encoding: unknown"},
      {R"({"inputs": {"x": [[1.0, 1e999]]}, "fetches": ["pred"]})", 400, "malformed JSON: number overflow"},
  };
  for (const Case& c : cases) {
    HttpResponse r = Do("POST", predict, c.body);
    EXPECT_EQ(r.status, c.status) << c.body << " -> " << r.body;
    EXPECT_EQ(ErrorOf(r).message().rfind(c.message_start, 0), 0u) << c.body << " -> " << r.body;
  }
  std::string big = R"({"inputs": {"x": {"dtype": "float32", "shape": [150, 2], "b64": ")" +
                    std::string(1600, 'A') + R"("}}, "fetches": ["pred"]})";
  HttpResponse r = Do("POST", predict, big);
  EXPECT_EQ(r.status, 413) << r.body;
  EXPECT_EQ(ErrorOf(r).code(), Code::kResourceExhausted);
}

TEST_F(HttpRoutesTest, EventsStreamStateAndStepsUntilTerminal) {
  ASSERT_EQ(Do("POST", "/v1/jobs", JobJson(3)).status, 201);
  ASSERT_EQ(Do("POST", "/v1/jobs/job-1/pause").status, 200);
  WaitFor("job-1", JobState::kPaused);
  HttpResponse r = Do("GET", "/v1/jobs/job-1/events");
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.content_type, "text/event-stream");
  EXPECT_EQ(Header(r, "Cache-Control"), "no-cache");
  ASSERT_NE(r.stream, nullptr);
  ASSERT_EQ(Do("POST", "/v1/jobs/job-1/resume").status, 200);

  std::vector<std::pair<std::string, JobInfo>> events;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  std::string chunk;
  EventSource::Pull pull;
  while ((pull = r.stream->Next(std::chrono::milliseconds(100), &chunk)) != EventSource::Pull::kEnd) {
    ASSERT_LT(std::chrono::steady_clock::now(), deadline);
    if (pull != EventSource::Pull::kData) continue;
    // "event: KIND\ndata: {job}\n\n"
    ASSERT_EQ(chunk.rfind("event: ", 0), 0u) << chunk;
    ASSERT_TRUE(chunk.ends_with("\n\n")) << chunk;
    size_t nl = chunk.find('\n');
    std::string kind = chunk.substr(7, nl - 7);
    ASSERT_EQ(chunk.compare(nl + 1, 6, "data: "), 0) << chunk;
    std::string data = chunk.substr(nl + 7, chunk.size() - nl - 9);
    ASSERT_EQ(data.find('\n'), std::string::npos);
    StatusOr<JobInfo> info = JobInfoFromJson(data);
    ASSERT_TRUE(info.ok()) << info.status().ToString() << ": " << data;
    events.emplace_back(kind, *info);
  }
  ASSERT_GE(events.size(), 3u);
  EXPECT_EQ(events.front().first, "state");  // the job as it is
  EXPECT_EQ(events.front().second.state, JobState::kPaused);
  int steps = 0;
  for (const auto& [kind, info] : events) steps += kind == "step";
  EXPECT_GE(steps, 3);  // at least every epoch end
  EXPECT_EQ(events.back().first, "state");
  EXPECT_EQ(events.back().second.state, JobState::kSucceeded);
  EXPECT_EQ(events.back().second.step, 12);
  EXPECT_EQ(r.stream->Next(std::chrono::milliseconds(0), &chunk), EventSource::Pull::kEnd);

  // Watching a finished job: one state event, then the end.
  r = Do("GET", "/v1/jobs/job-1/events");
  ASSERT_NE(r.stream, nullptr);
  ASSERT_EQ(r.stream->Next(std::chrono::milliseconds(100), &chunk), EventSource::Pull::kData);
  EXPECT_EQ(chunk.rfind("event: state\ndata: {\"job_id\":\"job-1\"", 0), 0u) << chunk;
  EXPECT_EQ(r.stream->Next(std::chrono::milliseconds(100), &chunk), EventSource::Pull::kEnd);
}

TEST_F(HttpRoutesTest, EventsSendKeepAlivesAndEndOnClose) {
  ctx_.options.keep_alive_interval = std::chrono::milliseconds(50);
  ASSERT_EQ(Do("POST", "/v1/jobs", JobJson(100000)).status, 201);
  ASSERT_EQ(Do("POST", "/v1/jobs/job-1/pause").status, 200);
  WaitFor("job-1", JobState::kPaused);
  HttpResponse r = Do("GET", "/v1/jobs/job-1/events");
  ASSERT_NE(r.stream, nullptr);
  std::string chunk;
  ASSERT_EQ(r.stream->Next(std::chrono::milliseconds(100), &chunk), EventSource::Pull::kData);
  EXPECT_EQ(chunk.rfind("event: state\n", 0), 0u);
  EXPECT_EQ(r.stream->Next(std::chrono::milliseconds(0), &chunk), EventSource::Pull::kIdle);
  auto t0 = std::chrono::steady_clock::now();
  EventSource::Pull p;
  while ((p = r.stream->Next(std::chrono::milliseconds(20), &chunk)) == EventSource::Pull::kIdle) {
    ASSERT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5));
  }
  ASSERT_EQ(p, EventSource::Pull::kData);
  EXPECT_EQ(chunk, ": keep-alive\n\n");
  EXPECT_GE(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(30));
  r.stream->Close();
  EXPECT_EQ(r.stream->Next(std::chrono::milliseconds(1000), &chunk), EventSource::Pull::kEnd);
  ASSERT_EQ(Do("POST", "/v1/jobs/job-1/cancel").status, 200);
}

// GET /v1/devices names the RUNNING jobs on each device (once
// DeviceInfo::running_jobs was never set).
TEST_F(HttpRoutesTest, DevicesListTheirRunningJobs) {
  ASSERT_EQ(Do("POST", "/v1/jobs", JobJson(100000)).status, 201);
  WaitFor("job-1", JobState::kRunning);
  Json d = Json::parse(Do("GET", "/v1/devices").body)["devices"][0];
  EXPECT_EQ(d["running_jobs"], 1) << d.dump();
  EXPECT_EQ(d["jobs"], Json::parse(R"(["job-1"])")) << d.dump();
  StatusOr<std::vector<DeviceInfo>> read = DeviceInfoListFromJson(Do("GET", "/v1/devices").body);
  ASSERT_TRUE(read.ok()) << read.status().ToString();
  EXPECT_EQ(read->front().running_jobs, 1);
  EXPECT_EQ(read->front().jobs, std::vector<std::string>{"job-1"});
  ASSERT_EQ(Do("POST", "/v1/jobs/job-1/cancel").status, 200);
  WaitFor("job-1", JobState::kCancelled);
  d = Json::parse(Do("GET", "/v1/devices").body)["devices"][0];
  EXPECT_EQ(d["running_jobs"], 0) << d.dump();
  EXPECT_TRUE(d["jobs"].empty()) << d.dump();
}

TEST_F(HttpRoutesTest, DeleteRemovesFinishedJobsOnly) {
  ASSERT_EQ(Do("POST", "/v1/jobs", JobJson(100000)).status, 201);
  WaitFor("job-1", JobState::kRunning);
  HttpResponse r = Do("DELETE", "/v1/jobs/job-1");
  EXPECT_EQ(r.status, 409) << r.body;
  EXPECT_EQ(ErrorOf(r).code(), Code::kFailedPrecondition);
  EXPECT_NE(ErrorOf(r).message().find("cancel it first"), std::string::npos) << r.body;
  EXPECT_EQ(Do("GET", "/v1/jobs/job-1").status, 200);
  r = Do("DELETE", "/v1/jobs/job-9");
  EXPECT_EQ(r.status, 404) << r.body;

  ASSERT_EQ(Do("POST", "/v1/jobs/job-1/cancel").status, 200);
  WaitFor("job-1", JobState::kCancelled);
  r = Do("DELETE", "/v1/jobs/job-1");
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(Json::parse(r.body), Json::parse(R"({"job_id": "job-1", "deleted": true})"));
  EXPECT_EQ(Do("GET", "/v1/jobs/job-1").status, 404);
  EXPECT_EQ(Do("GET", "/v1/jobs/job-1/events").status, 404);
  EXPECT_EQ(Json::parse(Do("GET", "/v1/jobs").body)["jobs"].size(), 0u);
  EXPECT_EQ(Do("DELETE", "/v1/jobs/job-1").status, 404);
}

}  // namespace
}  // namespace http_routes_test
}  // namespace flowstate

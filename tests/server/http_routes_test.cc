// The REST API as a pure function (server/rest/http_routes.h): every route over a
// real Service, its bodies exactly as server/API.md gives them, every error
// case, authentication, and that rejected requests change nothing.
#include "tests/server/http_routes_fixture.h"

namespace flowstate {
namespace http_routes_test {
namespace {

// --- Health, readiness, metrics.

TEST_F(HttpRoutesTest, HealthAndReadiness) {
  HttpResponse r = Do("GET", "/healthz");
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.content_type, "application/json");
  EXPECT_EQ(Json::parse(r.body), Json::parse(R"({"status": "ok"})"));
  r = Do("GET", "/readyz");
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(Json::parse(r.body), Json::parse(R"({"status": "ready"})"));
  service_->Shutdown();
  r = Do("GET", "/readyz");
  EXPECT_EQ(r.status, 503);
  EXPECT_EQ(ErrorOf(r).code(), Code::kUnavailable);
  EXPECT_EQ(Do("GET", "/healthz").status, 200);  // alive, not ready
}

TEST_F(HttpRoutesTest, MetricsAreTextFormatWithRouteTemplates) {
  std::string id = CreateSession();
  EXPECT_EQ(Do("POST", "/v1/sessions/" + id + "/run", kRun).status, 200);
  EXPECT_EQ(Do("GET", "/v1/jobs/job-404").status, 404);
  EXPECT_EQ(Do("GET", "/no/such/route").status, 404);
  HttpResponse r = Do("GET", "/metrics");
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.content_type, "text/plain; version=0.0.4");
  EXPECT_NE(r.body.find("flowstate_http_requests_total"), std::string::npos) << r.body;
  EXPECT_NE(r.body.find("route=\"/v1/sessions/{id}/run\""), std::string::npos);
  EXPECT_NE(r.body.find("route=\"/v1/jobs/{id}\""), std::string::npos);
  EXPECT_NE(r.body.find("route=\"unmatched\""), std::string::npos);
  // Label sets stay bounded: no raw ids.
  EXPECT_EQ(r.body.find(id), std::string::npos);
  EXPECT_EQ(r.body.find("job-404"), std::string::npos);
}

// --- Introspection.

TEST_F(HttpRoutesTest, OpsListTheRegistry) {
  HttpResponse r = Do("GET", "/v1/ops");
  ASSERT_EQ(r.status, 200);
  Json body = Json::parse(r.body);
  ASSERT_EQ(Keys(body), std::vector<std::string>{"ops"});
  const Json* matmul = nullptr;
  const Json* placeholder = nullptr;
  for (const Json& op : body["ops"]) {
    EXPECT_EQ(Keys(op), (std::vector<std::string>{"name", "doc", "stateful", "devices", "inputs",
                                                  "outputs", "attrs"}));
    if (op["name"] == "MatMul") matmul = &op;
    if (op["name"] == "Placeholder") placeholder = &op;
  }
  ASSERT_NE(matmul, nullptr);
  ASSERT_NE(placeholder, nullptr);
  EXPECT_EQ((*matmul)["stateful"], false);
  EXPECT_NE(std::find((*matmul)["devices"].begin(), (*matmul)["devices"].end(), "CPU"),
            (*matmul)["devices"].end());
  EXPECT_EQ((*matmul)["inputs"], Json::parse(R"([{"name": "a", "type": "T"}, {"name": "b", "type": "T"}])"));
  EXPECT_EQ((*matmul)["outputs"], Json::parse(R"([{"name": "product", "type": "T"}])"));
  bool saw_t = false, saw_transpose = false;
  for (const Json& a : (*matmul)["attrs"]) {
    if (a["name"] == "T") {
      saw_t = true;
      EXPECT_FALSE(a.contains("default"));  // required
      EXPECT_EQ(a["kind"], "type");
      EXPECT_FALSE(a["allowed"].empty());
    }
    if (a["name"] == "transpose_a") {
      saw_transpose = true;
      EXPECT_EQ(Keys(a), (std::vector<std::string>{"name", "kind", "default", "allowed"}));
      EXPECT_EQ(a["default"], false);  // a JSON bool, not a string
    }
  }
  EXPECT_TRUE(saw_t && saw_transpose);
  for (const Json& a : (*placeholder)["attrs"]) {
    if (a["name"] == "dtype") {
      EXPECT_FALSE(a.contains("default"));
    }
    if (a["name"] == "shape") {
      EXPECT_TRUE(a["default"].is_null()) << a.dump();  // unknown rank
    }
  }
  // The reader gives back what the service listed.
  StatusOr<std::vector<OpInfo>> ops = OpInfoListFromJson(r.body);
  ASSERT_TRUE(ops.ok()) << ops.status().ToString();
  EXPECT_EQ(ops->size(), service_->ListOps().size());
}

TEST_F(HttpRoutesTest, DevicesListThePool) {
  HttpResponse r = Do("GET", "/v1/devices");
  ASSERT_EQ(r.status, 200);
  Json body = Json::parse(r.body);
  ASSERT_EQ(Keys(body), std::vector<std::string>{"devices"});
  ASSERT_EQ(body["devices"].size(), Pool()->devices().size());
  const Json& d = body["devices"][0];
  EXPECT_EQ(Keys(d), (std::vector<std::string>{"name", "type", "description", "memory", "running_jobs", "jobs"}));
  EXPECT_EQ(Keys(d["memory"]),
            (std::vector<std::string>{"bytes_in_use", "peak_bytes_in_use", "bytes_limit",
                                      "bytes_cached"}));
  EXPECT_GE(d["memory"]["bytes_cached"].get<int64_t>(), 0);
  EXPECT_EQ(d["type"], "CPU");
  EXPECT_EQ(d["name"], Pool()->devices()[0]->name());
  StatusOr<std::vector<DeviceInfo>> devices = DeviceInfoListFromJson(r.body);
  ASSERT_TRUE(devices.ok()) << devices.status().ToString();
  EXPECT_EQ((*devices)[0].name, Pool()->devices()[0]->name());
}

// --- Sessions.

// Issue 11, finding 6: this 435-byte body made a session hold 2 GiB.
TEST_F(HttpRoutesTest, AGraphAskingForAHugeTensorIsRefusedBeforeAnyAllocation) {
  const std::string body = R"({"graph": {"nodes": [
    {"name": "dims", "op": "Const", "attrs": {"dtype": "int32", "value": [536870912]}},
    {"name": "one", "op": "Const", "attrs": {"dtype": "float32", "value": 1.0}},
    {"name": "fill", "op": "Fill", "inputs": ["dims", "one"]},
    {"name": "v", "op": "Variable", "attrs": {"dtype": "float32", "shape": [536870912]}},
    {"name": "assign", "op": "Assign", "inputs": ["v", "fill"]}]}})";
  HttpResponse r = Do("POST", "/v1/sessions", body);
  ASSERT_EQ(r.status, 400) << r.body;
  Status e = ErrorOf(r);
  EXPECT_EQ(e.code(), Code::kInvalidArgument);
  EXPECT_TRUE(e.node() == "v" || e.node() == "fill") << e.ToString();
  EXPECT_NE(e.message().find("[536870912]"), std::string::npos) << e.ToString();
  EXPECT_NE(e.message().find("2147483648 bytes"), std::string::npos) << e.ToString();
  EXPECT_NE(e.message().find("limits.max_shape_bytes"), std::string::npos) << e.ToString();
  // Nothing was allocated or kept, and the server goes on.
  Json devices = Json::parse(Do("GET", "/v1/devices").body);
  EXPECT_EQ(devices["devices"][0]["memory"]["bytes_in_use"].get<int64_t>(), 0);
  EXPECT_EQ(service_->num_sessions(), 0);
  EXPECT_EQ(Do("GET", "/healthz").status, 200);
}

TEST_F(HttpRoutesTest, DeviceMemoryInUseCountsAHeldVariable) {
  const std::string graph = R"({"graph": {"nodes": [
    {"name": "dims", "op": "Const", "attrs": {"dtype": "int32", "value": [1048576]}},
    {"name": "one", "op": "Const", "attrs": {"dtype": "float32", "value": 1.0}},
    {"name": "fill", "op": "Fill", "inputs": ["dims", "one"]},
    {"name": "v", "op": "Variable", "attrs": {"dtype": "float32", "shape": [1048576]}},
    {"name": "assign", "op": "Assign", "inputs": ["v", "fill"]}]}})";
  HttpResponse r = Do("POST", "/v1/sessions", graph);
  ASSERT_EQ(r.status, 201) << r.body;
  std::string id = Json::parse(r.body)["session_id"];
  ASSERT_EQ(Do("POST", "/v1/sessions/" + id + "/run", R"({"targets": ["assign"]})").status, 200);
  auto in_use = [&] {
    return Json::parse(Do("GET", "/v1/devices").body)["devices"][0]["memory"]["bytes_in_use"].get<int64_t>();
  };
  EXPECT_GE(in_use(), int64_t(4) << 20) << "the variable's 4 MiB are on the device";
  ASSERT_EQ(Do("DELETE", "/v1/sessions/" + id).status, 200);
  EXPECT_EQ(in_use(), 0) << "and given back with its session";
}

TEST_F(HttpRoutesTest, SessionLifecycle) {
  HttpResponse r = Do("POST", "/v1/sessions", kGraph);
  ASSERT_EQ(r.status, 201) << r.body;
  Json created = Json::parse(r.body);
  ASSERT_EQ(Keys(created), std::vector<std::string>{"session_id"});
  std::string id = created["session_id"];
  EXPECT_EQ(id.rfind("sess-", 0), 0u);
  EXPECT_EQ(Header(r, "Location"), "/v1/sessions/" + id);

  r = Do("POST", "/v1/sessions/" + id + "/run", kRun);
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(Json::parse(r.body),
            Json::parse(R"({"outputs": {"y": {"dtype": "float32", "shape": [3], "data": [2.0, 4.0, 6.0]}}})"));
  r = Do("POST", "/v1/sessions/" + id + "/run",
         R"({"feeds": {"x": [1.0]}, "fetches": ["y"], "encoding": "nested"})");
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(Json::parse(r.body), Json::parse(R"({"outputs": {"y": [2.0]}})"));
  // Whole numbers in a nested array are read as the float32 the
  // placeholder expects (its dtype is the graph's), not inferred as int32.
  r = Do("POST", "/v1/sessions/" + id + "/run",
         R"({"feeds": {"x": [1, 2]}, "fetches": ["y"], "encoding": "nested"})");
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(Json::parse(r.body), Json::parse(R"({"outputs": {"y": [2.0, 4.0]}})"));
  r = Do("POST", "/v1/sessions/" + id + "/run",
         R"({"feeds": {"x": [1.0]}, "fetches": ["y"], "encoding": "b64"})");
  ASSERT_EQ(r.status, 200) << r.body;
  StatusOr<api::NamedTensors> out = api::ParseRunOutputsJson(r.body);
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  EXPECT_EQ((*out)[0].second.data<float>()[0], 2.0f);

  r = Do("POST", "/v1/sessions/" + id + "/extend", R"({"graph": {"nodes": [
      {"name": "z", "op": "Add", "inputs": ["y", "two"]}]}})");
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.body, "{}");
  r = Do("POST", "/v1/sessions/" + id + "/run", R"({"feeds": {"x": [1.0]}, "fetches": ["z", "y"]})");
  ASSERT_EQ(r.status, 200) << r.body;
  Json outputs = Json::parse(r.body)["outputs"];
  EXPECT_EQ(Keys(outputs), (std::vector<std::string>{"z", "y"}));  // in the order of the fetches
  EXPECT_EQ(outputs["z"]["data"], Json::parse("[4.0]"));

  r = Do("DELETE", "/v1/sessions/" + id);
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.body, "{}");
  EXPECT_EQ(service_->num_sessions(), 0);
  r = Do("POST", "/v1/sessions/" + id + "/run", kRun);
  EXPECT_EQ(r.status, 404);
  EXPECT_EQ(ErrorOf(r).code(), Code::kNotFound);
}

TEST_F(HttpRoutesTest, BadSessionBodiesAre400NamingTheField) {
  struct Case {
    const char* body;
    const char* message_start;  // of the error message
    const char* node;
  } cases[] = {
      {"", "the request has no body", ""},
      {"{", "malformed JSON", ""},
      {"[1]", "expected a session (an object), got an array", ""},
      {"{}", "graph: missing", ""},
      {R"({"graph": {"nodes": []}, "grpah": 1})", "grpah: unknown field", ""},
      {R"({"graph": [1]})", "graph: ", ""},
      {R"({"graph": {"nodes": [{"name": "x", "op": "Placeholder", "attrs": {"dtype": 3}}]}})",
       "graph.nodes[0].attrs.dtype: ", "x"},
      {R"({"graph": {"nodes": [{"name": "x", "op": "NoSuchOp"}]}})", "graph.nodes[0]", "x"},
      {R"({"graph": {"nodes": [{"name": "x", "op": "Placeholder", "attrs": {"dtype": "float32"}},
                               {"name": "c", "op": "Const", "attrs": {"value": 1e999}}]}})",
       "malformed JSON: number overflow", ""},
      {R"({"graph": {"nodes": [{"name": "x", "op": "Placeholder", "colour": "red"}]}})",
       "graph.nodes[0].colour: unknown field", "x"},
  };
  for (const Case& c : cases) {
    HttpResponse r = Do("POST", "/v1/sessions", c.body);
    EXPECT_EQ(r.status, 400) << c.body << " -> " << r.body;
    Status s = ErrorOf(r);
    EXPECT_EQ(s.code(), Code::kInvalidArgument) << r.body;
    EXPECT_EQ(s.message().rfind(c.message_start, 0), 0u) << c.body << " -> " << s.message();
    if (*c.node) {
      EXPECT_EQ(s.node(), c.node) << r.body;
    }
  }
  // A graph the codec reads but Graph::Create refuses: dangling input.
  HttpResponse r = Do("POST", "/v1/sessions", R"({"graph": {"nodes": [
      {"name": "y", "op": "Identity", "inputs": ["nowhere"]}]}})");
  EXPECT_EQ(r.status, 400) << r.body;
  EXPECT_EQ(ErrorOf(r).node(), "y") << r.body;
  EXPECT_EQ(service_->num_sessions(), 0);  // nothing was created
}

TEST_F(HttpRoutesTest, SessionQuotaIs429) {
  for (int i = 0; i < 4; ++i) CreateSession();
  HttpResponse r = Do("POST", "/v1/sessions", kGraph);
  EXPECT_EQ(r.status, 429) << r.body;
  EXPECT_EQ(ErrorOf(r).code(), Code::kResourceExhausted);
  EXPECT_EQ(service_->num_sessions(), 4);
}

TEST_F(HttpRoutesTest, BadRunsAndUnknownSessions) {
  std::string id = CreateSession();
  const std::string run = "/v1/sessions/" + id + "/run";
  struct Case {
    std::string body;
    int status;
    const char* message_start;
  } cases[] = {
      {"{", 400, "malformed JSON"},
      {"", 400, "the request has no body; expected a run request"},
      {" \n", 400, "the request has no body; expected a run request"},
      {R"({"feeds": {"x": [1.0]}, "fetches": ["y"], "fetch": []})", 400, "fetch: unknown field"},
      {R"({"feeds": {"x": "abc"}, "fetches": ["y"]})", 400, "feeds.x"},
      {R"({"feeds": {"x": [1.0]}, "fetches": "y"})", 400, "fetches: "},
      {R"({"feeds": {"x": [1.0]}, "fetches": [3]})", 400, "fetches[0]: "},
      {R"({"feeds": {"x": [1.0]}, "fetches": ["y"], "encoding": "hex"})", 400, "encoding: "},
      // An object's own dtype is kept: int32 for a float32 placeholder.
      {R"({"feeds": {"x": {"dtype": "int32", "shape": [2], "data": [1, 2]}}, "fetches": ["y"]})", 400,
       "feed 'x' has dtype int32 but the graph expects float32"},
      // A nested array takes the placeholder's dtype: 1.5 does not fit int32,
      // but x is float32; a string fits nothing.
      {R"({"feeds": {"x": [1, "two"]}, "fetches": ["y"]})", 400, "feeds.x"},
      {R"({"fetches": ["y"]})", 400, ""},                            // x not fed
      {R"({"feeds": {"x": [1.0]}, "fetches": ["nope"]})", 404, ""},
  };
  for (const Case& c : cases) {
    HttpResponse r = Do("POST", run, c.body);
    EXPECT_EQ(r.status, c.status) << c.body << " -> " << r.body;
    EXPECT_EQ(ErrorOf(r).message().rfind(c.message_start, 0), 0u) << c.body << " -> " << r.body;
  }
  // Over max_tensor_bytes (1024): 300 floats.
  std::string big = R"({"feeds": {"x": {"dtype": "float32", "shape": [300], "data": [)";
  for (int i = 0; i < 300; ++i) big += (i ? ",1" : "1");
  big += R"(]}}, "fetches": ["y"]})";
  HttpResponse r = Do("POST", run, big);
  EXPECT_EQ(r.status, 413) << r.body;
  EXPECT_EQ(ErrorOf(r).code(), Code::kResourceExhausted);
  // The same through a tensor attr of extend.
  std::string big_const = R"({"graph": {"nodes": [{"name": "c", "op": "Const", "attrs": {"dtype": "float32", "value": [)";
  for (int i = 0; i < 300; ++i) big_const += (i ? ",1.0" : "1.0");
  big_const += "]}}]}}";
  EXPECT_EQ(Do("POST", "/v1/sessions/" + id + "/extend", big_const).status, 413);

  for (const auto& [method, target] : std::vector<std::pair<std::string, std::string>>{
           {"POST", "/v1/sessions/sess-0-nope/run"},
           {"POST", "/v1/sessions/sess-0-nope/extend"},
           {"DELETE", "/v1/sessions/sess-0-nope"}}) {
    std::string body = target.ends_with("run") ? kRun : target.ends_with("extend") ? kGraph : "";
    HttpResponse nf = Do(method, target, body);
    EXPECT_EQ(nf.status, 404) << method << " " << target << " -> " << nf.body;
    EXPECT_EQ(ErrorOf(nf).code(), Code::kNotFound);
  }
}

TEST_F(HttpRoutesTest, RejectedExtendLeavesTheGraphAsItWas) {
  std::string id = CreateSession();
  const std::string extend = "/v1/sessions/" + id + "/extend";
  // A good node followed by a bad one (dangling input): neither is added.
  HttpResponse r = Do("POST", extend, R"({"graph": {"nodes": [
      {"name": "good", "op": "Identity", "inputs": ["y"]},
      {"name": "bad", "op": "Identity", "inputs": ["nowhere"]}]}})");
  EXPECT_EQ(r.status, 400) << r.body;
  EXPECT_EQ(ErrorOf(r).node(), "bad");
  // A node that clashes with an existing name.
  r = Do("POST", extend, R"({"graph": {"nodes": [{"name": "y", "op": "Identity", "inputs": ["x"]}]}})");
  EXPECT_EQ(r.status, 400) << r.body;
  // A codec error after a good node.
  r = Do("POST", extend, R"({"graph": {"nodes": [
      {"name": "good", "op": "Identity", "inputs": ["y"]}, {"name": "b2", "op": 7}]}})");
  EXPECT_EQ(r.status, 400) << r.body;
  EXPECT_EQ(ErrorOf(r).message().rfind("graph.nodes[1].op", 0), 0u) << r.body;

  r = Do("POST", "/v1/sessions/" + id + "/run", kRun);
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(Json::parse(r.body)["outputs"]["y"]["data"], Json::parse("[2.0, 4.0, 6.0]"));
  r = Do("POST", "/v1/sessions/" + id + "/run", R"({"feeds": {"x": [1.0]}, "fetches": ["good"]})");
  EXPECT_EQ(r.status, 404) << r.body;  // "good" was never added
  ASSERT_EQ(service_->num_sessions(), 1);
}

// --- Routing.

TEST_F(HttpRoutesTest, WrongMethodIs405WithAllow) {
  struct Case {
    const char* method;
    const char* target;
    const char* allow;
  } cases[] = {
      {"POST", "/healthz", "GET"},
      {"DELETE", "/metrics", "GET"},
      {"POST", "/v1/ops", "GET"},
      {"PUT", "/v1/devices", "GET"},
      {"GET", "/v1/sessions", "POST"},
      {"GET", "/v1/sessions/s1", "DELETE"},
      {"GET", "/v1/sessions/s1/run", "POST"},
      {"PUT", "/v1/sessions/s1/extend", "POST"},
      {"DELETE", "/v1/jobs", "GET, POST"},
      {"PUT", "/v1/jobs/job-1", "GET, DELETE"},
      {"POST", "/v1/jobs/job-1/events", "GET"},
      {"GET", "/v1/jobs/job-1/cancel", "POST"},
      {"GET", "/v1/jobs/job-1/pause", "POST"},
      {"GET", "/v1/jobs/job-1/resume", "POST"},
      {"GET", "/v1/jobs/job-1/predict", "POST"},
      {"DELETE", "/v1/jobs/job-1/checkpoints", "GET, POST"},
  };
  for (const Case& c : cases) {
    HttpResponse r = Do(c.method, c.target);
    EXPECT_EQ(r.status, 405) << c.method << " " << c.target;
    EXPECT_EQ(Header(r, "Allow"), c.allow) << c.method << " " << c.target;
    EXPECT_FALSE(ErrorOf(r).ok());
  }
}

TEST_F(HttpRoutesTest, UnknownRoutesAre404) {
  for (const char* target : {"/v1", "/v2/jobs", "/v1/job", "/v1/jobs/job-1/steps",
                             "/v1/sessions/s/run/again", "/healthz/x"}) {
    HttpResponse r = Do("GET", target);
    EXPECT_EQ(r.status, 404) << target;
    EXPECT_EQ(ErrorOf(r).code(), Code::kNotFound) << target;
  }
  // Queries and one trailing slash are ignored.
  EXPECT_EQ(Do("GET", "/healthz?verbose=1").status, 200);
  EXPECT_EQ(Do("GET", "/v1/jobs/").status, 200);
}

TEST_F(HttpRoutesTest, CheckpointsAre501WithoutAStore) {
  for (const char* method : {"GET", "POST"}) {
    HttpResponse r = Do(method, "/v1/jobs/job-1/checkpoints");
    EXPECT_EQ(r.status, 501) << r.body;
    EXPECT_EQ(ErrorOf(r).code(), Code::kUnimplemented);
  }
}

// --- Authentication.

TEST_F(HttpRoutesTest, BearerTokensGuardEveryV1Route) {
  std::string id = CreateSession();
  ctx_.options.tokens = {"s3cret", "other-token"};
  const std::vector<std::pair<std::string, std::string>> routes = {
      {"GET", "/v1/ops"},
      {"GET", "/v1/devices"},
      {"GET", "/v1/cluster"},
      {"POST", "/v1/sessions"},
      {"POST", "/v1/sessions/" + id + "/extend"},
      {"POST", "/v1/sessions/" + id + "/run"},
      {"DELETE", "/v1/sessions/" + id},
      {"POST", "/v1/jobs"},
      {"GET", "/v1/jobs"},
      {"GET", "/v1/jobs/job-1"},
      {"GET", "/v1/jobs/job-1/events"},
      {"POST", "/v1/jobs/job-1/cancel"},
      {"POST", "/v1/jobs/job-1/pause"},
      {"POST", "/v1/jobs/job-1/resume"},
      {"POST", "/v1/jobs/job-1/predict"},
      {"GET", "/v1/jobs/job-1/checkpoints"},
      {"POST", "/v1/jobs/job-1/checkpoints"},
      {"GET", "/v1/no-such-route"},
  };
  for (const auto& [method, target] : routes) {
    for (const char* auth : {"", "Bearer wrong", "Bearer s3cre", "Basic czNjcmV0", "Bearer "}) {
      HttpResponse r = Do(method, target, "", auth);
      EXPECT_EQ(r.status, 401) << method << " " << target << " [" << auth << "]";
      EXPECT_EQ(ErrorOf(r).code(), Code::kUnauthenticated);
      EXPECT_EQ(Header(r, "WWW-Authenticate").rfind("Bearer", 0), 0u);
      EXPECT_EQ(r.stream, nullptr);
    }
  }
  EXPECT_EQ(Header(Do("GET", "/v1/ops", "", "Bearer wrong"), "WWW-Authenticate"),
            R"(Bearer realm="flowstate", error="invalid_token")");
  // Nothing happened while unauthenticated.
  EXPECT_EQ(service_->num_sessions(), 1);
  EXPECT_TRUE(service_->jobs().List().empty());

  // With a token every route does its work (the statuses are the routes' own).
  EXPECT_EQ(Do("GET", "/v1/ops", "", "Bearer s3cret").status, 200);
  EXPECT_EQ(Do("GET", "/v1/devices", "", "bearer other-token").status, 200);
  EXPECT_EQ(Do("POST", "/v1/sessions/" + id + "/run", kRun, "Bearer s3cret").status, 200);
  EXPECT_EQ(Do("POST", "/v1/sessions/" + id + "/extend",
               R"({"graph": {"nodes": [{"name": "z", "op": "Identity", "inputs": ["y"]}]}})",
               "Bearer s3cret").status, 200);
  EXPECT_EQ(Do("DELETE", "/v1/sessions/" + id, "", "Bearer s3cret").status, 200);
  EXPECT_EQ(Do("POST", "/v1/jobs", JobJson(1), "Bearer s3cret").status, 201);
  EXPECT_EQ(Do("GET", "/v1/jobs", "", "Bearer s3cret").status, 200);
  EXPECT_EQ(Do("GET", "/v1/jobs/job-1", "", "Bearer s3cret").status, 200);
  HttpResponse events = Do("GET", "/v1/jobs/job-1/events", "", "Bearer s3cret");
  EXPECT_EQ(events.status, 200);
  EXPECT_NE(events.stream, nullptr);
  EXPECT_NE(Do("POST", "/v1/jobs/job-1/pause", "", "Bearer s3cret").status, 401);
  EXPECT_NE(Do("POST", "/v1/jobs/job-1/resume", "", "Bearer s3cret").status, 401);
  EXPECT_NE(Do("POST", "/v1/jobs/job-1/cancel", "", "Bearer s3cret").status, 401);
  EXPECT_NE(Do("POST", "/v1/jobs/job-1/predict", R"({"fetches": ["pred"]})", "Bearer s3cret").status, 401);
  EXPECT_EQ(Do("GET", "/v1/jobs/job-1/checkpoints", "", "Bearer s3cret").status, 501);
  EXPECT_EQ(Do("GET", "/v1/no-such-route", "", "Bearer s3cret").status, 404);

  // The open routes need no token.
  EXPECT_EQ(Do("GET", "/healthz").status, 200);
  EXPECT_EQ(Do("GET", "/readyz").status, 200);
  HttpResponse metrics = Do("GET", "/metrics");
  EXPECT_EQ(metrics.status, 200);
  EXPECT_NE(metrics.body.find("code=\"401\""), std::string::npos);
  // ...unless the configuration closes them; templates may open routes too.
  ctx_.options.open_routes = {"/healthz", "/v1/jobs/{id}"};
  EXPECT_EQ(Do("GET", "/metrics").status, 401);
  EXPECT_EQ(Do("GET", "/v1/jobs/job-1").status, 200);
  EXPECT_EQ(Do("GET", "/v1/jobs").status, 401);
}

TEST(HttpJsonViewsTest, JobRoundTripsAndReadsAsApiMdSays) {
  JobInfo j;
  j.id = "job-3";
  j.name = "fashion-mlp";
  j.state = JobState::kRunning;
  j.epoch = 1;
  j.epochs = 3;
  j.step = 612;
  j.total_steps = 1407;
  j.loss = 0.3712;
  j.examples_per_sec = 15234.5;
  j.metrics = {{"accuracy", 0.871}, {"loss", 0.362}};
  ASSERT_TRUE(ParseRfc3339("2026-12-02T17:03:11.204Z").ok());
  j.created = *ParseRfc3339("2026-12-02T17:03:11.204Z");
  j.started = *ParseRfc3339("2026-12-02T17:03:11.420Z");
  j.replicas = 3;
  j.replicas_alive = 2;
  j.restarts = 1;
  j.placement = {{"/job:worker/task:0", true}, {"/job:worker/task:1", true}, {"/job:worker/task:2", false}};
  EXPECT_EQ(JobInfoToJson(j),
            R"({"job_id":"job-3","name":"fashion-mlp","state":"RUNNING","epoch":1,"epochs":3,)"
            R"("step":612,"total_steps":1407,"loss":0.3712,"examples_per_sec":15234.5,)"
            R"("metrics":{"accuracy":0.871,"loss":0.362},"error":"",)"
            R"("created":"2026-12-02T17:03:11.204Z","started":"2026-12-02T17:03:11.420Z",)"
            R"("finished":null,"checkpoint":null,"checkpoint_failures":0,"checkpoint_error":"",)"
            R"("resumed_from_step":null,"skipped_steps":0,"eta_seconds":null,)"
            R"("replicas":3,"replicas_alive":2,"restarts":1,"placement":[)"
            R"({"device":"/job:worker/task:0","alive":true},{"device":"/job:worker/task:1","alive":true},)"
            R"({"device":"/job:worker/task:2","alive":false}]})");
  StatusOr<JobInfo> back = JobInfoFromJson(JobInfoToJson(j));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->id, j.id);
  EXPECT_EQ(back->state, j.state);
  EXPECT_EQ(back->step, j.step);
  EXPECT_EQ(back->loss, j.loss);
  EXPECT_EQ(back->metrics, j.metrics);
  EXPECT_NEAR(back->created, j.created, 1e-3);
  EXPECT_EQ(back->finished, 0);
  EXPECT_EQ(back->replicas, 3);
  EXPECT_EQ(back->replicas_alive, 2);
  EXPECT_EQ(back->restarts, 1);
  ASSERT_EQ(back->placement.size(), 3u);
  EXPECT_EQ(back->placement[1].device, "/job:worker/task:1");
  EXPECT_TRUE(back->placement[1].alive);
  EXPECT_FALSE(back->placement[2].alive);
  EXPECT_EQ(JobInfoFromJson(R"({"placement": [{"device": 3}]})").status().message(),
            "placement[0].device: expected a string, got 3");

  j.loss = std::numeric_limits<double>::quiet_NaN();
  j.metrics = {{"loss", std::numeric_limits<double>::infinity()}};
  std::string text = JobInfoToJson(j);
  EXPECT_NE(text.find(R"("loss":"NaN")"), std::string::npos) << text;
  EXPECT_NE(text.find(R"("metrics":{"loss":"Infinity"})"), std::string::npos) << text;
  back = JobInfoFromJson(text);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_TRUE(std::isnan(back->loss));

  EXPECT_EQ(JobInfoFromJson(R"({"step": "x"})").status().message(), "step: expected an integer, got \"x\"");
  EXPECT_EQ(JobInfoFromJson(R"({"state": "SLEEPING"})").status().code(), Code::kInvalidArgument);
  EXPECT_EQ(JobInfoFromJson(R"({"created": "yesterday"})").status().code(), Code::kInvalidArgument);
  EXPECT_EQ(JobInfoListFromJson(R"({"jobs": [{"step": 1}, {"step": true}]})").status().message(),
            "jobs[1].step: expected an integer, got true");
  EXPECT_TRUE(JobInfoFromJson(R"({"job_id": "job-1", "future_field": [1]})").ok());
  EXPECT_EQ(FormatRfc3339(0.0005), "1970-01-01T00:00:00.001Z");
  EXPECT_EQ(FormatRfc3339(86400.9996), "1970-01-02T00:00:01.000Z");
}

}  // namespace
}  // namespace http_routes_test
}  // namespace flowstate

// The gRPC frontend end to end: a GrpcServer on 127.0.0.1:0 over a real
// Service, driven through the generated C++ stubs; results are compared
// with calling the Service directly with the same inputs. Sessions,
// devices, ops, health, reflection, auth and limits here; jobs in
// grpc_jobs_test.cc.
#include "tests/server/grpc_test_fixture.h"

#include <map>
#include <string>

namespace flowstate {
namespace grpc_test {
namespace {

// --- Sessions.

TEST_F(GrpcServerTest, GrpcSessionsCreateExtendRunClose) {
  std::string id = CreateSession(kDoubleGraph);
  ASSERT_FALSE(id.empty());
  EXPECT_EQ(id.rfind("sess-", 0), 0u) << id;

  pb::RunSessionRequest run;
  run.set_session_id(id);
  (*run.mutable_feeds())["x"] = FloatTensor({1, 2, 3}, {3});
  run.add_fetches("y");
  pb::RunSessionResponse out;
  grpc::Status s = Run(run, &out);
  ASSERT_TRUE(s.ok()) << s.error_message();
  ASSERT_EQ(out.outputs().count("y"), 1u);
  EXPECT_EQ(Floats(out.outputs().at("y")), (std::vector<float>{2, 4, 6}));
  EXPECT_EQ(out.outputs().at("y").shape_size(), 1);

  // Extend with a structured graph this time.
  {
    grpc::ClientContext ctx;
    Deadline(&ctx);
    pb::ExtendSessionRequest ext;
    ext.set_session_id(id);
    pb::NodeDef* z = ext.mutable_graph()->add_nodes();
    z->set_name("z");
    z->set_op("Add");
    z->add_inputs("y");
    z->add_inputs("y");
    pb::ExtendSessionResponse resp;
    s = sessions_->Extend(&ctx, ext, &resp);
    ASSERT_TRUE(s.ok()) << s.error_message();
  }
  run.clear_fetches();
  run.add_fetches("z");
  run.add_fetches("y:0");
  s = Run(run, &out);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(Floats(out.outputs().at("z")), (std::vector<float>{4, 8, 12}));
  EXPECT_EQ(Floats(out.outputs().at("y:0")), (std::vector<float>{2, 4, 6}));

  grpc::ClientContext ctx;
  Deadline(&ctx);
  pb::CloseSessionRequest close;
  close.set_session_id(id);
  pb::CloseSessionResponse closed;
  ASSERT_TRUE(sessions_->Close(&ctx, close, &closed).ok());
  EXPECT_EQ(service_->num_sessions(), 0);

  grpc::ClientContext again;
  Deadline(&again);
  s = sessions_->Close(&again, close, &closed);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(s.error_message(), "no session '" + id + "'");
  s = Run(run, &out);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND);
}

std::string TrailingTiming(const grpc::ClientContext& ctx) {
  auto it = ctx.GetServerTrailingMetadata().find("server-timing");
  if (it == ctx.GetServerTrailingMetadata().end()) return "";
  return std::string(it->second.data(), it->second.size());
}

// Run says where the server's time went, as the REST frontend's
// Server-Timing header does: the step within the handler within the total.
TEST_F(GrpcServerTest, GrpcRunAnswersWithServerTiming) {
  std::string id = CreateSession(kDoubleGraph);
  pb::RunSessionRequest run;
  run.set_session_id(id);
  (*run.mutable_feeds())["x"] = FloatTensor({1, 2, 3}, {3});
  run.add_fetches("y");
  for (int i = 0; i < 3; ++i) {  // the first on the pool, the others inline
    grpc::ClientContext ctx;
    Deadline(&ctx);
    pb::RunSessionResponse out;
    ASSERT_TRUE(sessions_->Run(&ctx, run, &out).ok());
    const std::string value = TrailingTiming(ctx);
    EXPECT_EQ(value.rfind("step;dur=", 0), 0u) << value;
    std::map<std::string, double> t = server_test::ParseServerTiming(value);
    ASSERT_EQ(t.size(), 3u) << value;
    EXPECT_LE(t["step"], t["handler"]) << value;
    EXPECT_LE(t["handler"], t["total"]) << value;
    EXPECT_LT(t["total"], 10000.0) << value;  // milliseconds
  }
  // A call refused before the engine has no step.
  run.set_session_id("sess-none");
  grpc::ClientContext ctx;
  Deadline(&ctx);
  pb::RunSessionResponse out;
  EXPECT_EQ(sessions_->Run(&ctx, run, &out).error_code(), grpc::StatusCode::NOT_FOUND);
  std::map<std::string, double> t = server_test::ParseServerTiming(TrailingTiming(ctx));
  EXPECT_EQ(t.count("handler"), 1u) << TrailingTiming(ctx);
  EXPECT_EQ(t.count("total"), 1u);
}

TEST_F(GrpcServerTest, GrpcServerTimingCanBeTurnedOff) {
  server_->Stop();
  GrpcServerOptions o = options_;
  o.server_timing = false;
  StartServer(o);
  std::string id = CreateSession(kDoubleGraph);
  pb::RunSessionRequest run;
  run.set_session_id(id);
  (*run.mutable_feeds())["x"] = FloatTensor({1}, {1});
  run.add_fetches("y");
  grpc::ClientContext ctx;
  Deadline(&ctx);
  pb::RunSessionResponse out;
  ASSERT_TRUE(sessions_->Run(&ctx, run, &out).ok());
  EXPECT_EQ(TrailingTiming(ctx), "");
}

TEST_F(GrpcServerTest, GrpcSessionErrorsNameTheFieldOrNode) {
  {  // An unknown op: the codec's message, and the node.
    grpc::ClientContext ctx;
    Deadline(&ctx);
    pb::CreateSessionRequest req;
    req.set_graph_json(R"({"nodes": [{"name": "n", "op": "Nope"}]})");
    pb::CreateSessionResponse resp;
    grpc::Status s = sessions_->Create(&ctx, req, &resp);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_EQ(s.error_message(), "graph.nodes[0].op: unknown op 'Nope' [node: n]");
    EXPECT_EQ(NodeOf(ctx), "n");
  }
  {  // A dangling input in a structured graph: Graph::Create's error.
    grpc::ClientContext ctx;
    Deadline(&ctx);
    pb::CreateSessionRequest req;
    pb::NodeDef* n = req.mutable_graph()->add_nodes();
    n->set_name("lonely");
    n->set_op("Identity");
    n->add_inputs("ghost");
    pb::CreateSessionResponse resp;
    grpc::Status s = sessions_->Create(&ctx, req, &resp);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << s.error_message();
    EXPECT_NE(s.error_message().find("ghost"), std::string::npos) << s.error_message();
    EXPECT_EQ(NodeOf(ctx), "lonely");
  }
  {  // No graph at all.
    grpc::ClientContext ctx;
    Deadline(&ctx);
    pb::CreateSessionResponse resp;
    grpc::Status s = sessions_->Create(&ctx, pb::CreateSessionRequest(), &resp);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_EQ(s.error_message().rfind("graph: missing", 0), 0u) << s.error_message();
  }

  std::string id = CreateSession(kDoubleGraph);
  pb::RunSessionRequest run;
  run.set_session_id(id);
  run.add_fetches("y");
  pb::RunSessionResponse out;
  // A bad dtype.
  (*run.mutable_feeds())["x"] = FloatTensor({1}, {1});
  (*run.mutable_feeds())["x"].set_dtype("float33");
  grpc::Status s = Run(run, &out);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(s.error_message().rfind("feeds.x.dtype: unknown dtype 'float33'", 0), 0u)
      << s.error_message();
  // Content that does not fit the shape.
  (*run.mutable_feeds())["x"] = FloatTensor({1, 2}, {2});
  (*run.mutable_feeds())["x"].set_content("abc");
  s = Run(run, &out);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(s.error_message(), "feeds.x.content: has 3 bytes, but a float32[2] tensor has 8");
  // Over the tensor limit.
  (*run.mutable_feeds())["x"] = FloatTensor(std::vector<float>(20000, 1.0f), {20000});
  s = Run(run, &out);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << s.error_message();
  // A missing feed: the session's error.
  run.clear_feeds();
  s = Run(run, &out);
  EXPECT_NE(s.error_code(), grpc::StatusCode::OK);
  // A control input as a fetch.
  run.clear_fetches();
  run.add_fetches("^y");
  s = Run(run, &out);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(s.error_message().rfind("fetches[0]: '^y' is a control input", 0), 0u)
      << s.error_message();
  // A wrong dtype for the Placeholder.
  run.clear_fetches();
  run.add_fetches("y");
  pb::Tensor ints;
  proto_convert::TensorToProto(Tensor::FromVector<int32_t>({1, 2}), &ints);
  (*run.mutable_feeds())["x"] = ints;
  s = Run(run, &out);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << s.error_message();
}

// The same inputs through gRPC and straight into the Service give the same
// results and the same errors.
TEST_F(GrpcServerTest, GrpcParityWithTheServiceForSessions) {
  const std::vector<float> xs = {0.5f, -1.25f, 3e-3f, 7};
  std::string grpc_id = CreateSession(kDoubleGraph);
  pb::RunSessionRequest run;
  run.set_session_id(grpc_id);
  (*run.mutable_feeds())["x"] = FloatTensor(xs, {4});
  run.add_fetches("y");
  pb::RunSessionResponse out;
  ASSERT_TRUE(Run(run, &out).ok());

  StatusOr<GraphDef> graph = api::ParseGraphJson(kDoubleGraph, "graph");
  ASSERT_TRUE(graph.ok());
  StatusOr<std::string> direct_id = service_->CreateSession(*graph);
  ASSERT_TRUE(direct_id.ok());
  SessionRunRequest direct_run;
  direct_run.feeds = {{"x", Tensor::FromVector<float>(xs, TensorShape({4}))}};
  direct_run.fetches = {"y"};
  auto direct = service_->RunSession(*direct_id, direct_run);
  ASSERT_TRUE(direct.ok()) << direct.status().ToString();
  ASSERT_EQ(direct->size(), 1u);
  EXPECT_TRUE(TensorsEqual((*direct)[0].second, FromProto(out.outputs().at("y"))));

  // Errors: a missing feed, an unknown fetch, a bad graph.
  auto same_error = [&](const grpc::Status& g, const Status& d) {
    ASSERT_FALSE(d.ok());
    Status back = proto_convert::FromGrpcStatus(g);
    EXPECT_EQ(back.code(), d.code()) << g.error_message() << " vs " << d.ToString();
    EXPECT_EQ(back.message(), d.message());
    EXPECT_EQ(back.node(), d.node());
  };
  run.clear_feeds();
  direct_run.feeds.clear();
  same_error(Run(run, &out), service_->RunSession(*direct_id, direct_run).status());
  run.clear_fetches();
  run.add_fetches("nowhere:3");
  direct_run.fetches = {"nowhere:3"};
  same_error(Run(run, &out), service_->RunSession(*direct_id, direct_run).status());

  const char* bad_graph = R"({"nodes": [
    {"name": "a", "op": "Placeholder", "attrs": {"dtype": "float32"}},
    {"name": "b", "op": "MatMul", "inputs": ["a", "a"], "attrs": {"transpose_a": 3}}]})";
  grpc::ClientContext ctx;
  Deadline(&ctx);
  pb::CreateSessionRequest req;
  req.set_graph_json(bad_graph);
  pb::CreateSessionResponse resp;
  grpc::Status g = sessions_->Create(&ctx, req, &resp);
  StatusOr<GraphDef> parsed = api::ParseGraphJson(bad_graph, "graph");
  same_error(g, parsed.status());
  EXPECT_EQ(g.error_code(), grpc::StatusCode::INVALID_ARGUMENT);

  const char* cyclic = R"({"nodes": [
    {"name": "a", "op": "Identity", "inputs": ["b"]},
    {"name": "b", "op": "Identity", "inputs": ["a"]}]})";
  grpc::ClientContext ctx2;
  Deadline(&ctx2);
  req.set_graph_json(cyclic);
  g = sessions_->Create(&ctx2, req, &resp);
  StatusOr<GraphDef> cyclic_graph = api::ParseGraphJson(cyclic, "graph");
  ASSERT_TRUE(cyclic_graph.ok());
  same_error(g, service_->CreateSession(*cyclic_graph).status());
}

// Run and Predict are callback methods that run a quick step on gRPC's
// thread and a slow one on the handler pool (InlinePolicy): either way,
// concurrent calls get their own answers.
TEST_F(GrpcServerTest, GrpcConcurrentRunsGetTheirOwnAnswers) {
  const std::string quick = CreateSession(kDoubleGraph);
  // Eight chained 128x128 MatMuls: sometimes over the inline threshold on
  // a loaded machine, so that both paths are taken.
  std::string chain = R"({"nodes": [
    {"name": "m0", "op": "Placeholder", "attrs": {"dtype": "float32", "shape": [128, 128]}})";
  for (int i = 1; i <= 8; ++i) {
    chain += R"(, {"name": "m)" + std::to_string(i) + R"(", "op": "MatMul", "inputs": ["m)" +
             std::to_string(i - 1) + R"(", "m0"]})";
  }
  chain += "]}";
  const std::string slow = CreateSession(chain);
  ASSERT_FALSE(quick.empty());
  ASSERT_FALSE(slow.empty());
  std::vector<float> eye(128 * 128, 0.0f);
  for (int i = 0; i < 128; ++i) eye[size_t(i) * 128 + size_t(i)] = 1.0f;

  std::atomic<int> wrong{0}, failed{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 60; ++i) {
        pb::RunSessionRequest run;
        pb::RunSessionResponse out;
        if ((i + t) % 5 == 0) {
          run.set_session_id(slow);
          (*run.mutable_feeds())["m0"] = FloatTensor(eye, {128, 128});
          run.add_fetches("m8");
          grpc::Status s = Run(run, &out);
          if (!s.ok()) {
            ++failed;
            continue;
          }
          if (Floats(out.outputs().at("m8")) != eye) ++wrong;  // I^9 = I
        } else {
          const float x = float(t * 1000 + i);
          run.set_session_id(quick);
          (*run.mutable_feeds())["x"] = FloatTensor({x, -x}, {2});
          run.add_fetches("y");
          grpc::Status s = Run(run, &out);
          if (!s.ok()) {
            ++failed;
            continue;
          }
          if (Floats(out.outputs().at("y")) != std::vector<float>{2 * x, -2 * x}) ++wrong;
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(failed.load(), 0);
  EXPECT_EQ(wrong.load(), 0);
  std::string text = metrics_.Render();
  EXPECT_NE(text.find("method=\"flowstate.v1.Sessions/Run\"} 240"), std::string::npos)
      << text.substr(0, 3000);
}

// Stop() with runs in flight returns; every call ends OK or as the
// server's going away, none hangs.
TEST_F(GrpcServerTest, GrpcStopWithRunsInFlightEndsEveryCall) {
  const std::string id = CreateSession(kDoubleGraph);
  std::atomic<bool> stop{false};
  std::atomic<int> ok{0}, bad{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 3; ++t) {
    threads.emplace_back([&] {
      while (!stop.load()) {
        pb::RunSessionRequest run;
        run.set_session_id(id);
        (*run.mutable_feeds())["x"] = FloatTensor({1}, {1});
        run.add_fetches("y");
        pb::RunSessionResponse out;
        grpc::ClientContext ctx;
        Deadline(&ctx, seconds(20));
        grpc::Status s = sessions_->Run(&ctx, run, &out);
        if (s.ok()) {
          ++ok;
        } else if (s.error_code() == grpc::StatusCode::UNAVAILABLE ||
                   s.error_code() == grpc::StatusCode::CANCELLED) {
          std::this_thread::sleep_for(milliseconds(5));
        } else {
          ++bad;
        }
      }
    });
  }
  std::this_thread::sleep_for(milliseconds(200));
  auto t0 = std::chrono::steady_clock::now();
  server_->Stop();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, seconds(10));
  std::this_thread::sleep_for(milliseconds(50));
  stop = true;
  for (auto& th : threads) th.join();
  EXPECT_GT(ok.load(), 0);
  EXPECT_EQ(bad.load(), 0);
}

// --- Devices, ops, health, reflection.

TEST_F(GrpcServerTest, GrpcDevicesAndOps) {
  grpc::ClientContext ctx;
  Deadline(&ctx);
  pb::ListDevicesResponse devices;
  ASSERT_TRUE(devices_->List(&ctx, pb::ListDevicesRequest(), &devices).ok());
  std::vector<DeviceInfo> direct = service_->ListDevices();
  ASSERT_EQ(devices.devices_size(), int(direct.size()));
  ASSERT_GE(devices.devices_size(), 1);
  EXPECT_EQ(devices.devices(0).name(), direct[0].name);
  EXPECT_EQ(devices.devices(0).type(), "CPU");
  EXPECT_TRUE(devices.devices(0).has_memory());

  grpc::ClientContext ctx2;
  Deadline(&ctx2);
  pb::ListOpsResponse ops;
  ASSERT_TRUE(ops_->List(&ctx2, pb::ListOpsRequest(), &ops).ok());
  std::vector<OpInfo> direct_ops = service_->ListOps();
  ASSERT_EQ(ops.ops_size(), int(direct_ops.size()));
  bool found = false;
  for (int i = 0; i < ops.ops_size(); ++i) {
    pb::Op expected;
    proto_convert::OpToProto(direct_ops[size_t(i)], &expected);
    EXPECT_EQ(ops.ops(i).SerializeAsString(), expected.SerializeAsString()) << expected.name();
    if (ops.ops(i).name() != "MatMul") continue;
    found = true;
    EXPECT_EQ(ops.ops(i).inputs_size(), 2);
    EXPECT_NE(std::find(ops.ops(i).devices().begin(), ops.ops(i).devices().end(), "CPU"),
              ops.ops(i).devices().end());
  }
  EXPECT_TRUE(found);
}

// A unary call by name with raw bytes (for the services whose messages are
// not compiled into this test).
grpc::Status RawUnary(const std::shared_ptr<grpc::Channel>& channel, const std::string& method,
                      const std::string& request, std::string* response,
                      const std::string& token = "") {
  grpc::GenericStub stub(channel);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + seconds(10));
  if (!token.empty()) ctx.AddMetadata("authorization", "Bearer " + token);
  grpc::Slice slice(request);
  grpc::ByteBuffer req(&slice, 1);
  grpc::ByteBuffer resp;
  std::promise<grpc::Status> done;
  stub.UnaryCall(&ctx, method, grpc::StubOptions(), &req, &resp,
                 [&](grpc::Status s) { done.set_value(std::move(s)); });
  grpc::Status s = done.get_future().get();
  std::vector<grpc::Slice> slices;
  if (s.ok() && resp.Dump(&slices).ok()) {
    response->clear();
    for (const grpc::Slice& sl : slices) {
      response->append(reinterpret_cast<const char*>(sl.begin()), sl.size());
    }
  }
  return s;
}

// grpc.health.v1.HealthCheckResponse.status (field 1): 1 is SERVING.
int HealthStatus(const std::string& bytes) {
  google::protobuf::UnknownFieldSet fields;
  if (!fields.ParseFromString(bytes)) return -1;
  for (int i = 0; i < fields.field_count(); ++i) {
    if (fields.field(i).number() == 1) return int(fields.field(i).varint());
  }
  return 0;  // the default, UNKNOWN
}

TEST_F(GrpcServerTest, GrpcHealthServiceServes) {
  std::string resp;
  grpc::Status s = RawUnary(channel_, "/grpc.health.v1.Health/Check", "", &resp);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(HealthStatus(resp), 1);
}

TEST_F(GrpcServerTest, GrpcReflectionListsTheServices) {
  grpc::GenericStub stub(channel_);
  grpc::CompletionQueue cq;
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + seconds(10));
  auto call =
      stub.PrepareCall(&ctx, "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo", &cq);
  ASSERT_NE(call, nullptr);
  void* tag = nullptr;
  bool ok = false;
  auto step = [&](intptr_t want) {
    EXPECT_TRUE(cq.Next(&tag, &ok));
    EXPECT_EQ(reinterpret_cast<intptr_t>(tag), want);
    return ok;
  };
  call->StartCall(reinterpret_cast<void*>(1));
  ASSERT_TRUE(step(1));
  // ServerReflectionRequest{list_services (field 7): ""}.
  std::string request("\x3a\x00", 2);
  grpc::Slice slice(request);
  grpc::ByteBuffer req(&slice, 1);
  call->Write(req, reinterpret_cast<void*>(2));
  ASSERT_TRUE(step(2));
  call->WritesDone(reinterpret_cast<void*>(3));
  ASSERT_TRUE(step(3));
  std::string response;
  for (;;) {
    grpc::ByteBuffer resp;
    call->Read(&resp, reinterpret_cast<void*>(4));
    if (!step(4)) break;
    std::vector<grpc::Slice> slices;
    ASSERT_TRUE(resp.Dump(&slices).ok());
    for (const grpc::Slice& sl : slices) {
      response.append(reinterpret_cast<const char*>(sl.begin()), sl.size());
    }
  }
  grpc::Status status;
  call->Finish(&status, reinterpret_cast<void*>(5));
  ASSERT_TRUE(step(5));
  ASSERT_TRUE(status.ok()) << status.error_message();

  // ServerReflectionResponse.list_services_response (6) .service (1) .name (1).
  std::set<std::string> names;
  google::protobuf::UnknownFieldSet top;
  ASSERT_TRUE(top.ParseFromString(response));
  for (int i = 0; i < top.field_count(); ++i) {
    if (top.field(i).number() != 6) continue;
    google::protobuf::UnknownFieldSet list;
    ASSERT_TRUE(list.ParseFromString(top.field(i).length_delimited()));
    for (int j = 0; j < list.field_count(); ++j) {
      google::protobuf::UnknownFieldSet service;
      ASSERT_TRUE(service.ParseFromString(list.field(j).length_delimited()));
      for (int k = 0; k < service.field_count(); ++k) {
        if (service.field(k).number() == 1) names.insert(service.field(k).length_delimited());
      }
    }
  }
  for (const char* want : {"flowstate.v1.Sessions", "flowstate.v1.Jobs", "flowstate.v1.Devices",
                           "flowstate.v1.Cluster", "flowstate.v1.Ops", "grpc.health.v1.Health"}) {
    EXPECT_EQ(names.count(want), 1u) << want;
  }
  cq.Shutdown();
  while (cq.Next(&tag, &ok)) {
  }
}

// --- Auth, limits, ports, metrics.

TEST_F(GrpcServerTest, GrpcTokensAreRequiredExceptForHealth) {
  server_->Stop();
  GrpcServerOptions o = options_;
  o.tokens = {"s3cret", "other"};
  StartServer(o);

  auto list = [&](const std::string& authorization) {
    grpc::ClientContext ctx;
    Deadline(&ctx);
    if (!authorization.empty()) ctx.AddMetadata("authorization", authorization);
    pb::ListDevicesResponse resp;
    return devices_->List(&ctx, pb::ListDevicesRequest(), &resp);
  };
  grpc::Status s = list("");
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_NE(s.error_message().find("authorization: Bearer"), std::string::npos);
  EXPECT_EQ(list("Bearer wrong").error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(list("Basic s3cret").error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(list("Bearer s3cre").error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_TRUE(list("Bearer s3cret").ok());
  EXPECT_TRUE(list("Bearer other").ok());

  // Every method, streaming included.
  {
    grpc::ClientContext ctx;
    Deadline(&ctx);
    pb::GetClusterResponse resp;
    EXPECT_EQ(pb::Cluster::NewStub(channel_)->Get(&ctx, pb::GetClusterRequest(), &resp).error_code(),
              grpc::StatusCode::UNAUTHENTICATED);
  }
  {
    grpc::ClientContext ctx;
    Deadline(&ctx);
    pb::CreateSessionRequest req;
    req.set_graph_json(kDoubleGraph);
    pb::CreateSessionResponse resp;
    EXPECT_EQ(sessions_->Create(&ctx, req, &resp).error_code(),
              grpc::StatusCode::UNAUTHENTICATED);
    EXPECT_EQ(service_->num_sessions(), 0);
  }
  {
    grpc::ClientContext ctx;
    Deadline(&ctx);
    pb::WatchJobRequest req;
    req.set_job_id("job-1");
    auto reader = jobs_->Watch(&ctx, req);
    pb::JobEvent e;
    EXPECT_FALSE(reader->Read(&e));
    EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::UNAUTHENTICATED);
  }
  {
    grpc::ClientContext ctx;
    Deadline(&ctx);
    pb::SubmitJobRequest req;
    req.set_job_json(CsvJob(1));
    pb::Job job;
    EXPECT_EQ(jobs_->Submit(&ctx, req, &job).error_code(), grpc::StatusCode::UNAUTHENTICATED);
    EXPECT_TRUE(service_->jobs().List().empty());
  }

  std::string resp;
  s = RawUnary(channel_, "/grpc.health.v1.Health/Check", "", &resp);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(HealthStatus(resp), 1);
}

TEST_F(GrpcServerTest, GrpcMaxMessageSizeIsEnforced) {
  server_->Stop();
  GrpcServerOptions o = options_;
  o.max_message_bytes = 1024;
  StartServer(o);
  std::string id = CreateSession(kDoubleGraph);
  pb::RunSessionRequest run;
  run.set_session_id(id);
  (*run.mutable_feeds())["x"] = FloatTensor(std::vector<float>(1000, 1.0f), {1000});
  run.add_fetches("y");
  pb::RunSessionResponse out;
  EXPECT_EQ(Run(run, &out).error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  (*run.mutable_feeds())["x"] = FloatTensor({1, 2}, {2});
  EXPECT_TRUE(Run(run, &out).ok());
}

TEST_F(GrpcServerTest, GrpcPortZeroBindsAFreePortAndATakenPortFails) {
  int port = server_->port();
  EXPECT_GT(port, 0);
  GrpcServerOptions o = options_;
  o.address = "127.0.0.1:" + std::to_string(port);
  StatusOr<std::unique_ptr<GrpcServer>> second = GrpcServer::Start(service_.get(), nullptr, o);
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), Code::kUnavailable);
  EXPECT_NE(second.status().message().find(o.address), std::string::npos);
  EXPECT_FALSE(GrpcServer::Start(nullptr, nullptr, options_).ok());
}

TEST_F(GrpcServerTest, GrpcCallsAreCountedByMethodAndCode) {
  grpc::ClientContext ctx;
  Deadline(&ctx);
  pb::GetJobRequest req;
  req.set_job_id("job-404");
  pb::Job job;
  EXPECT_EQ(jobs_->Get(&ctx, req, &job).error_code(), grpc::StatusCode::NOT_FOUND);
  CreateSession(kDoubleGraph);
  std::string text = metrics_.Render();
  EXPECT_NE(text.find("method=\"flowstate.v1.Jobs/Get\""), std::string::npos) << text;
  EXPECT_NE(text.find("code=\"NOT_FOUND\""), std::string::npos);
  EXPECT_NE(text.find("method=\"flowstate.v1.Sessions/Create\""), std::string::npos);
}

// The polling engine is gRPC's environment variable; one the user set wins.
TEST(GrpcPollStrategy, OnlyKnownEnginesAndTheEnvironmentWins) {
  Status bad = SetGrpcPollStrategy("epollex");
  EXPECT_EQ(bad.code(), Code::kInvalidArgument);
  EXPECT_NE(bad.message().find("'epollex'"), std::string::npos) << bad.ToString();
  EXPECT_TRUE(SetGrpcPollStrategy("").ok());
  const char* before = std::getenv("GRPC_POLL_STRATEGY");
  const std::string saved = before ? before : "";
  ::setenv("GRPC_POLL_STRATEGY", "epoll1", 1);
  EXPECT_TRUE(SetGrpcPollStrategy("poll").ok());
  EXPECT_STREQ(std::getenv("GRPC_POLL_STRATEGY"), "epoll1");
  if (before) {
    ::setenv("GRPC_POLL_STRATEGY", saved.c_str(), 1);
  } else {
    ::unsetenv("GRPC_POLL_STRATEGY");
  }
}

}  // namespace
}  // namespace grpc_test
}  // namespace flowstate

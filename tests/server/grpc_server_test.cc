// The gRPC frontend end to end: a GrpcServer on 127.0.0.1:0 over a real
// Service, driven through the generated C++ stubs; results are compared
// with calling the Service directly with the same inputs.
#include "server/grpc_server.h"

#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <google/protobuf/unknown_field_set.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <future>
#include <random>
#include <set>
#include <thread>

#include "api/flowstate.grpc.pb.h"
#include "api/json_codec.h"
#include "server/grpc_convert.h"
#include "server/metrics.h"
#include "server/service.h"

namespace flowstate {
namespace {

namespace pb = ::flowstate::v1;
using std::chrono::milliseconds;
using std::chrono::seconds;

DevicePool* Pool() {
  static DevicePool* p = [] {
    DevicePoolOptions o;
    o.intra_op_threads = 1;
    return DevicePool::Create(o).value().release();
  }();
  return p;
}

// A linear-regression job over a CSV file in the data root: 256 rows,
// batch 16, so 16 steps per epoch.
std::string CsvJob(int epochs, int max_steps = 0) {
  return R"({
    "name": "line",
    "graph": {"nodes": [
      {"name": "x", "op": "Placeholder", "attrs": {"dtype": "float32", "shape": [-1, 2]}},
      {"name": "y", "op": "Placeholder", "attrs": {"dtype": "float32", "shape": [-1]}},
      {"name": "w", "op": "Variable", "attrs": {"dtype": "float32", "shape": [2, 1], "init": "glorot_uniform"}},
      {"name": "b", "op": "Variable", "attrs": {"dtype": "float32", "shape": [1], "init": "zeros"}},
      {"name": "p", "op": "MatMul", "inputs": ["x", "w"]},
      {"name": "pb", "op": "BiasAdd", "inputs": ["p", "b"]},
      {"name": "flat", "op": "Const", "attrs": {"dtype": "int32", "value": [-1]}},
      {"name": "pred", "op": "Reshape", "inputs": ["pb", "flat"]},
      {"name": "sq", "op": "SquaredDifference", "inputs": ["pred", "y"]},
      {"name": "axes", "op": "Const", "attrs": {"dtype": "int32", "value": []}},
      {"name": "loss", "op": "Mean", "inputs": ["sq", "axes"]}
    ]},
    "loss": "loss",
    "optimizer": {"type": "sgd", "learning_rate": 0.1},
    "input": {"format": "csv", "files": {"x": "points.csv", "y": "points.csv"},
              "columns": {"x": ["a", "b"], "y": ["target"]}, "batch_size": 16,
              "epochs": )" + std::to_string(epochs) + R"(},)" +
         (max_steps > 0 ? R"("max_steps": )" + std::to_string(max_steps) + "," : "") +
         R"("seed": 5})";
}

// y = 2 x (one float32 input); z = y + y is added by Extend.
constexpr const char* kDoubleGraph = R"({"nodes": [
  {"name": "x", "op": "Placeholder", "attrs": {"dtype": "float32", "shape": [-1]}},
  {"name": "two", "op": "Const", "attrs": {"dtype": "float32", "value": 2.0}},
  {"name": "y", "op": "Mul", "inputs": ["x", "two"]}
]})";

pb::Tensor FloatTensor(const std::vector<float>& v, std::vector<int64_t> shape) {
  pb::Tensor t;
  grpc_convert::TensorToProto(Tensor::FromVector<float>(v, TensorShape(shape)), &t);
  return t;
}

std::vector<float> Floats(const pb::Tensor& t) {
  EXPECT_EQ(t.dtype(), "float32");
  std::vector<float> v(t.content().size() / sizeof(float));
  if (!v.empty()) std::memcpy(v.data(), t.content().data(), v.size() * sizeof(float));
  return v;
}

Tensor FromProto(const pb::Tensor& t) {
  StatusOr<Tensor> r = grpc_convert::TensorFromProto(t, "t", size_t{1} << 30);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return r.ok() ? *r : Tensor();
}

// The trailing "flowstate-node" metadata of a finished call.
std::string NodeOf(const grpc::ClientContext& ctx) {
  auto it = ctx.GetServerTrailingMetadata().find("flowstate-node");
  if (it == ctx.GetServerTrailingMetadata().end()) return "";
  return std::string(it->second.data(), it->second.size());
}

class GrpcServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("flowstate_grpc_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(dir_);
    std::ofstream f(dir_ / "points.csv");
    f << "a,b,target\n";
    std::mt19937 rng(3);
    std::uniform_real_distribution<double> u(-1, 1);
    for (int i = 0; i < 256; ++i) {
      double a = u(rng), b = u(rng);
      f << a << "," << b << "," << (2 * a - 3 * b + 0.5) << "\n";
    }
    f.close();

    ServiceOptions so;
    so.devices = Pool();
    so.data_root = dir_.string();
    so.max_tensor_bytes = 1 << 16;
    so.jobs.max_running = 2;
    so.jobs.workers = 1;
    so.jobs.max_step_events_per_second = 1000;
    service_ = std::make_unique<Service>(so);
    // The same as the service, for the parity checks: bigger feeds are
    // refused by the codec (as the REST codec refuses them).
    options_.max_tensor_bytes = 1 << 16;
    StartServer(options_);
  }

  void TearDown() override {
    if (server_) server_->Stop();
    server_.reset();
    service_->Shutdown();
    service_.reset();
    std::filesystem::remove_all(dir_);
  }

  void StartServer(GrpcServerOptions options) {
    options.address = "127.0.0.1:0";
    StatusOr<std::unique_ptr<GrpcServer>> s = GrpcServer::Start(service_.get(), &metrics_, options);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    server_ = std::move(s).value();
    ASSERT_GT(server_->port(), 0);
    channel_ = grpc::CreateChannel("127.0.0.1:" + std::to_string(server_->port()),
                                   grpc::InsecureChannelCredentials());
    sessions_ = pb::Sessions::NewStub(channel_);
    jobs_ = pb::Jobs::NewStub(channel_);
    devices_ = pb::Devices::NewStub(channel_);
    ops_ = pb::Ops::NewStub(channel_);
  }

  // Every call gets a deadline, so that a broken server fails the test
  // rather than hanging it.
  static void Deadline(grpc::ClientContext* ctx, seconds s = seconds(30)) {
    ctx->set_deadline(std::chrono::system_clock::now() + s);
  }

  std::string CreateSession(const std::string& graph_json) {
    grpc::ClientContext ctx;
    Deadline(&ctx);
    pb::CreateSessionRequest req;
    req.set_graph_json(graph_json);
    pb::CreateSessionResponse resp;
    grpc::Status s = sessions_->Create(&ctx, req, &resp);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return resp.session_id();
  }

  grpc::Status Run(const pb::RunSessionRequest& req, pb::RunSessionResponse* resp) {
    grpc::ClientContext ctx;
    Deadline(&ctx);
    return sessions_->Run(&ctx, req, resp);
  }

  pb::Job Submit(const std::string& json) {
    grpc::ClientContext ctx;
    Deadline(&ctx);
    pb::SubmitJobRequest req;
    req.set_job_json(json);
    pb::Job job;
    grpc::Status s = jobs_->Submit(&ctx, req, &job);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return job;
  }

  pb::Job Get(const std::string& id) {
    grpc::ClientContext ctx;
    Deadline(&ctx);
    pb::GetJobRequest req;
    req.set_job_id(id);
    pb::Job job;
    grpc::Status s = jobs_->Get(&ctx, req, &job);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return job;
  }

  // Polls until the job is in `state` (or 30 s pass).
  pb::Job WaitFor(const std::string& id, const std::string& state) {
    auto end = std::chrono::steady_clock::now() + seconds(30);
    pb::Job job = Get(id);
    while (job.state() != state && std::chrono::steady_clock::now() < end) {
      std::this_thread::sleep_for(milliseconds(10));
      job = Get(id);
    }
    EXPECT_EQ(job.state(), state) << job.error();
    return job;
  }

  // All events of a Watch, and its final status.
  grpc::Status WatchAll(const std::string& id, std::vector<pb::JobEvent>* events) {
    grpc::ClientContext ctx;
    Deadline(&ctx, seconds(60));
    pb::WatchJobRequest req;
    req.set_job_id(id);
    auto reader = jobs_->Watch(&ctx, req);
    pb::JobEvent e;
    while (reader->Read(&e)) events->push_back(e);
    return reader->Finish();
  }

  std::filesystem::path dir_;
  Metrics metrics_;
  std::unique_ptr<Service> service_;
  GrpcServerOptions options_;
  std::unique_ptr<GrpcServer> server_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<pb::Sessions::Stub> sessions_;
  std::unique_ptr<pb::Jobs::Stub> jobs_;
  std::unique_ptr<pb::Devices::Stub> devices_;
  std::unique_ptr<pb::Ops::Stub> ops_;
};

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
  grpc_convert::TensorToProto(Tensor::FromVector<int32_t>({1, 2}), &ints);
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
    Status back = grpc_convert::FromGrpcStatus(g);
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

// --- Jobs.

TEST_F(GrpcServerTest, GrpcJobsSubmitWatchGetListPredict) {
  pb::Job job = Submit(CsvJob(2));
  ASSERT_FALSE(job.job_id().empty());
  EXPECT_EQ(job.name(), "line");
  EXPECT_EQ(job.state(), "QUEUED");
  EXPECT_TRUE(job.has_created());
  EXPECT_FALSE(job.has_finished());

  std::vector<pb::JobEvent> events;
  grpc::Status s = WatchAll(job.job_id(), &events);
  ASSERT_TRUE(s.ok()) << s.error_message();
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(events.front().kind(), "state");
  EXPECT_EQ(events.back().kind(), "state");
  EXPECT_EQ(events.back().job().state(), "SUCCEEDED") << events.back().job().error();
  EXPECT_TRUE(events.back().has_time());
  bool saw_step = false;
  for (const pb::JobEvent& e : events) {
    EXPECT_TRUE(e.kind() == "state" || e.kind() == "step" || e.kind() == "eval") << e.kind();
    saw_step |= e.kind() == "step";
  }
  EXPECT_TRUE(saw_step);

  pb::Job done = Get(job.job_id());
  EXPECT_EQ(done.state(), "SUCCEEDED");
  EXPECT_EQ(done.step(), 32);
  EXPECT_EQ(done.total_steps(), 32);
  EXPECT_TRUE(done.has_started());
  EXPECT_TRUE(done.has_finished());
  // The same job as the service reports it.
  pb::Job direct;
  grpc_convert::JobToProto(*service_->jobs().Get(job.job_id()), &direct);
  EXPECT_EQ(done.SerializeAsString(), direct.SerializeAsString());

  // Watching a finished job: its state, then the end.
  events.clear();
  ASSERT_TRUE(WatchAll(job.job_id(), &events).ok());
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].job().state(), "SUCCEEDED");

  {
    grpc::ClientContext ctx;
    Deadline(&ctx);
    pb::ListJobsResponse list;
    ASSERT_TRUE(jobs_->List(&ctx, pb::ListJobsRequest(), &list).ok());
    ASSERT_EQ(list.jobs_size(), 1);
    EXPECT_EQ(list.jobs(0).job_id(), job.job_id());
  }

  // Predict with the trained variables, against the service directly.
  pb::PredictRequest predict;
  predict.set_job_id(job.job_id());
  (*predict.mutable_inputs())["x"] = FloatTensor({1, 0, 0, 1}, {2, 2});
  predict.add_fetches("pred");
  pb::PredictResponse predicted;
  {
    grpc::ClientContext ctx;
    Deadline(&ctx);
    s = jobs_->Predict(&ctx, predict, &predicted);
    ASSERT_TRUE(s.ok()) << s.error_message();
  }
  ASSERT_EQ(predicted.outputs().count("pred"), 1u);
  std::vector<float> p = Floats(predicted.outputs().at("pred"));
  ASSERT_EQ(p.size(), 2u);
  EXPECT_NEAR(p[0], 2.5, 0.5);   // 2 * 1 + 0.5
  EXPECT_NEAR(p[1], -2.5, 0.5);  // -3 * 1 + 0.5
  std::vector<Tensor> direct_out;
  ASSERT_TRUE(service_->jobs()
                  .Predict(job.job_id(),
                           {{"x", Tensor::FromVector<float>({1, 0, 0, 1}, TensorShape({2, 2}))}},
                           {"pred"}, &direct_out)
                  .ok());
  EXPECT_TRUE(TensorsEqual(direct_out[0], FromProto(predicted.outputs().at("pred"))));

  // Errors.
  grpc::ClientContext ctx;
  Deadline(&ctx);
  predict.set_job_id("job-999");
  s = jobs_->Predict(&ctx, predict, &predicted);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(s.error_message(), "no job 'job-999'");
  events.clear();
  s = WatchAll("job-999", &events);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_TRUE(events.empty());
}

TEST_F(GrpcServerTest, GrpcParityWithTheServiceForJobSubmission) {
  // A bad job: the same error either way (the same parser).
  const std::string bad = R"({"graph": {"nodes": []}, "loss": "loss",
                              "optimizer": {"type": "sgd", "learning_rate": -1}})";
  grpc::ClientContext ctx;
  Deadline(&ctx);
  pb::SubmitJobRequest req;
  req.set_job_json(bad);
  pb::Job job;
  grpc::Status g = jobs_->Submit(&ctx, req, &job);
  StatusOr<JobInfo> d = service_->jobs().Submit(bad);
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(g.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  Status back = grpc_convert::FromGrpcStatus(g);
  EXPECT_EQ(back.code(), d.status().code());
  EXPECT_EQ(back.message(), d.status().message());
  EXPECT_EQ(back.node(), d.status().node());

  // A bad path: outside the data root.
  std::string escape = CsvJob(1);
  escape.replace(escape.find("\"points.csv\""), 12, "\"../../etc/passwd\"");
  grpc::ClientContext ctx2;
  Deadline(&ctx2);
  req.set_job_json(escape);
  g = jobs_->Submit(&ctx2, req, &job);
  d = service_->jobs().Submit(escape);
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(grpc_convert::FromGrpcStatus(g).message(), d.status().message());
  EXPECT_EQ(int(g.error_code()), int(d.status().code()));

  // A good one: the same job (but its id and times).
  pb::Job via_grpc = Submit(CsvJob(1, 4));
  StatusOr<JobInfo> direct = service_->jobs().Submit(CsvJob(1, 4));
  ASSERT_TRUE(direct.ok()) << direct.status().ToString();
  pb::Job via_service;
  grpc_convert::JobToProto(*direct, &via_service);
  for (pb::Job* j : {&via_grpc, &via_service}) {
    j->clear_job_id();
    j->clear_created();
  }
  EXPECT_EQ(via_grpc.DebugString(), via_service.DebugString());
}

TEST_F(GrpcServerTest, GrpcJobsPauseResumeCancel) {
  pb::Job job = Submit(CsvJob(100000));
  WaitFor(job.job_id(), "RUNNING");

  auto lifecycle = [&](const char* what, pb::Job* out) {
    grpc::ClientContext ctx;
    Deadline(&ctx);
    std::string id = job.job_id();
    if (std::string(what) == "pause") {
      pb::PauseJobRequest r;
      r.set_job_id(id);
      return jobs_->Pause(&ctx, r, out);
    }
    if (std::string(what) == "resume") {
      pb::ResumeJobRequest r;
      r.set_job_id(id);
      return jobs_->Resume(&ctx, r, out);
    }
    pb::CancelJobRequest r;
    r.set_job_id(id);
    return jobs_->Cancel(&ctx, r, out);
  };

  pb::Job after;
  grpc::Status s = lifecycle("pause", &after);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(after.job_id(), job.job_id());
  EXPECT_TRUE(after.state() == "RUNNING" || after.state() == "PAUSED") << after.state();
  pb::Job paused = WaitFor(job.job_id(), "PAUSED");
  std::this_thread::sleep_for(milliseconds(50));
  EXPECT_EQ(Get(job.job_id()).step(), paused.step());  // no steps while paused

  s = lifecycle("pause", &after);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_NE(s.error_message().find("only queued or running jobs can be paused"), std::string::npos);

  s = lifecycle("resume", &after);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_TRUE(after.state() == "QUEUED" || after.state() == "RUNNING") << after.state();
  pb::Job resumed = WaitFor(job.job_id(), "RUNNING");
  (void)resumed;

  s = lifecycle("cancel", &after);
  ASSERT_TRUE(s.ok()) << s.error_message();
  pb::Job cancelled = WaitFor(job.job_id(), "CANCELLED");
  EXPECT_TRUE(cancelled.has_finished());

  s = lifecycle("cancel", &after);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_EQ(s.error_message(), "job '" + job.job_id() + "' is already CANCELLED");
  s = lifecycle("resume", &after);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
}

TEST_F(GrpcServerTest, GrpcWatchEndsWhenTheClientCancels) {
  pb::Job job = Submit(CsvJob(100000));
  grpc::ClientContext ctx;
  Deadline(&ctx);
  pb::WatchJobRequest req;
  req.set_job_id(job.job_id());
  auto reader = jobs_->Watch(&ctx, req);
  pb::JobEvent e;
  ASSERT_TRUE(reader->Read(&e));
  EXPECT_EQ(e.kind(), "state");
  auto start = std::chrono::steady_clock::now();
  ctx.TryCancel();
  while (reader->Read(&e)) {
  }
  grpc::Status s = reader->Finish();
  EXPECT_EQ(s.error_code(), grpc::StatusCode::CANCELLED);
  EXPECT_LT(std::chrono::steady_clock::now() - start, seconds(2));
  // The server noticed too: the call was recorded with its code.
  auto end = std::chrono::steady_clock::now() + seconds(5);
  while (metrics_.Render().find("method=\"flowstate.v1.Jobs/Watch\"") == std::string::npos &&
         std::chrono::steady_clock::now() < end) {
    std::this_thread::sleep_for(milliseconds(20));
  }
  EXPECT_NE(metrics_.Render().find("method=\"flowstate.v1.Jobs/Watch\""), std::string::npos);

  grpc::ClientContext c2;
  Deadline(&c2);
  pb::CancelJobRequest cancel;
  cancel.set_job_id(job.job_id());
  pb::Job out;
  EXPECT_TRUE(jobs_->Cancel(&c2, cancel, &out).ok());
}

TEST_F(GrpcServerTest, GrpcStopEndsOpenWatchesPromptly) {
  pb::Job job = Submit(CsvJob(100000));
  std::promise<grpc::Status> result;
  std::atomic<int> read{0};
  std::thread watcher([&] {
    grpc::ClientContext ctx;
    Deadline(&ctx);
    pb::WatchJobRequest req;
    req.set_job_id(job.job_id());
    auto reader = jobs_->Watch(&ctx, req);
    pb::JobEvent e;
    while (reader->Read(&e)) read++;
    result.set_value(reader->Finish());
  });
  auto end = std::chrono::steady_clock::now() + seconds(10);
  while (read == 0 && std::chrono::steady_clock::now() < end) {
    std::this_thread::sleep_for(milliseconds(10));
  }
  ASSERT_GT(read.load(), 0);
  auto start = std::chrono::steady_clock::now();
  server_->Stop();
  server_->Stop();  // idempotent
  EXPECT_LT(std::chrono::steady_clock::now() - start, seconds(2));
  std::future<grpc::Status> f = result.get_future();
  ASSERT_EQ(f.wait_for(seconds(5)), std::future_status::ready);
  EXPECT_EQ(f.get().error_code(), grpc::StatusCode::UNAVAILABLE);
  watcher.join();
  ASSERT_TRUE(service_->jobs().Cancel(job.job_id()).ok());
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
    grpc_convert::OpToProto(direct_ops[size_t(i)], &expected);
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
                           "flowstate.v1.Ops", "grpc.health.v1.Health"}) {
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

}  // namespace
}  // namespace flowstate

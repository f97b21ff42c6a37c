// PRIVATE to the gRPC frontend's tests (grpc_server_test.cc,
// grpc_jobs_test.cc): a GrpcServer on 127.0.0.1:0 over a real Service in a
// temporary data root holding points.csv, the generated stubs, and helpers
// that call them with a deadline. One fixture object per test.
#ifndef FLOWSTATE_TESTS_SERVER_GRPC_TEST_FIXTURE_H_
#define FLOWSTATE_TESTS_SERVER_GRPC_TEST_FIXTURE_H_

#include "server/grpc/grpc_server.h"

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
#include "api/proto_convert.h"
#include "server/metrics.h"
#include "server/service.h"
#include "tests/server/server_test_util.h"

namespace flowstate {
namespace grpc_test {

namespace pb = ::flowstate::v1;
using std::chrono::milliseconds;
using std::chrono::seconds;

inline DevicePool* Pool() { return server_test::TestPool(1); }

// A linear-regression job over a CSV file in the data root: 256 rows,
// batch 16, so 16 steps per epoch.
inline std::string CsvJob(int epochs, int max_steps = 0) {
  return R"({
    "name": "line",
    "graph": )" + server_test::LinearGraphJson(true) + R"(,
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

inline pb::Tensor FloatTensor(const std::vector<float>& v, std::vector<int64_t> shape) {
  pb::Tensor t;
  proto_convert::TensorToProto(Tensor::FromVector<float>(v, TensorShape(shape)), &t);
  return t;
}

inline std::vector<float> Floats(const pb::Tensor& t) {
  EXPECT_EQ(t.dtype(), "float32");
  std::vector<float> v(t.content().size() / sizeof(float));
  if (!v.empty()) std::memcpy(v.data(), t.content().data(), v.size() * sizeof(float));
  return v;
}

inline Tensor FromProto(const pb::Tensor& t) {
  StatusOr<Tensor> r = proto_convert::TensorFromProto(t, "t", size_t{1} << 30);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return r.ok() ? *r : Tensor();
}

// The trailing "flowstate-node" metadata of a finished call.
inline std::string NodeOf(const grpc::ClientContext& ctx) {
  auto it = ctx.GetServerTrailingMetadata().find("flowstate-node");
  if (it == ctx.GetServerTrailingMetadata().end()) return "";
  return std::string(it->second.data(), it->second.size());
}

class GrpcServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = server_test::FreshTestDir("flowstate_grpc");
    server_test::WritePointsCsv(dir_ / "points.csv", 256, 3,
                                [](double a, double b) { return 2 * a - 3 * b + 0.5; });

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
  // `history`: replay the job's notable events first (a job that fails
  // before the stream subscribes still shows its "nan" event).
  grpc::Status WatchAll(const std::string& id, std::vector<pb::JobEvent>* events,
                        bool history = false) {
    grpc::ClientContext ctx;
    Deadline(&ctx, seconds(60));
    pb::WatchJobRequest req;
    req.set_job_id(id);
    req.set_history(history);
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

}  // namespace grpc_test
}  // namespace flowstate

#endif  // FLOWSTATE_TESTS_SERVER_GRPC_TEST_FIXTURE_H_

// The service over a store, as clients see it: a corrupt
// checkpoint upload is a 400 saying what is wrong and naming no server path
// (REST and gRPC alike); Save/Restore work in API sessions and what one
// session saves another restores; dataset files are opened beneath the data
// root (a link to /etc/passwd is refused at submission, a link inside the
// root works) and a job's CSV error never quotes the file.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "api/flowstate.grpc.pb.h"
#include "api/json_codec.h"
#include "checkpoints/store.h"
#include "graph/op_builders.h"
#include "graph/scope.h"
#include "api/proto_convert.h"
#include "server/grpc/grpc_server.h"
#include "server/rest/http_routes.h"
#include "server/metrics.h"
#include "server/service.h"
#include "tests/server/server_test_util.h"
#include "tests/server/store_service_fixture.h"

namespace flowstate {
namespace {

namespace pb = ::flowstate::v1;
using Json = nlohmann::json;

class StoreServiceTest : public server_test::StoreServiceFixture {
 protected:
  StoreServiceTest() : StoreServiceFixture("flowstate_store_service") {}

  JobInfo WaitFinished(const std::string& id) {
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    JobInfo info;
    while (std::chrono::steady_clock::now() < deadline) {
      info = service_->jobs().Get(id).value();
      if (IsTerminal(info.state)) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return info;
  }
};

// --- Finding 8: a corrupt upload is the client's error.

std::string ExportBytes(const std::filesystem::path& dir) {
  checkpoints::Snapshot s;
  s.step = 12;
  s.tensors.push_back({"w", Tensor::FromVector<float>({1, 2, 3, 4})});
  s.tensors.push_back({"global_step", Tensor::Scalar<int64_t>(12)});
  const std::string path = (dir / "good.fsck").string();
  EXPECT_TRUE(checkpoints::ExportSnapshot(s, path).ok());
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

TEST_F(StoreServiceTest, CorruptCheckpointUploadIs400SayingWhatWithoutServerPaths) {
  const std::string good = ExportBytes(dir_);
  std::string flipped = good;
  const size_t at = flipped.find("global_step");
  ASSERT_NE(at, std::string::npos);
  flipped[at - 20] ^= 0x10;  // inside w's data (w sorts... is written first)
  struct Case {
    std::string bytes, says;
  } cases[] = {
      {"garbage, not a checkpoint", "bad magic"},
      {flipped, "tensor 'w' fails its checksum"},
      {good.substr(0, good.size() - 30), "truncated at byte " + std::to_string(good.size() - 30)},
      {good.substr(0, 20), "truncated at byte 20"},
  };
  for (const Case& c : cases) {
    HttpResponse r = Rest("POST", "/v1/checkpoints/import", c.bytes);
    EXPECT_EQ(r.status, 400) << r.body;
    Status rest = api::StatusFromJson(r.body);
    EXPECT_EQ(rest.code(), Code::kInvalidArgument) << r.body;
    EXPECT_NE(rest.message().find(c.says), std::string::npos) << r.body;
    EXPECT_NE(rest.message().find("the uploaded checkpoint"), std::string::npos) << r.body;
    EXPECT_EQ(r.body.find("/tmp"), std::string::npos) << "a server path: " << r.body;
    EXPECT_EQ(r.body.find("flowstate-http"), std::string::npos) << r.body;

    grpc::ClientContext ctx;
    Deadline(&ctx);
    pb::ImportCheckpointRequest req;
    req.set_data(c.bytes);
    pb::CheckpointJobResponse resp;
    grpc::Status g = jobs_->ImportCheckpoint(&ctx, req, &resp);
    EXPECT_EQ(g.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << g.error_message();
    EXPECT_EQ(proto_convert::FromGrpcStatus(g).message(), rest.message());
  }
  // Nothing was stored; a good upload still works.
  EXPECT_EQ(Rest("GET", "/v1/jobs/import-1/checkpoints").status, 404);
  HttpResponse ok = Rest("POST", "/v1/checkpoints/import", good);
  ASSERT_EQ(ok.status, 201) << ok.body;
  EXPECT_EQ(Json::parse(ok.body)["step"], 12);
}

// --- Finding 10: Save/Restore in API sessions.

std::string SaveGraph() {
  Scope root;
  Output v = ops::Variable(root.WithOpName("v"), TensorShape({3}), DataType::kFloat32);
  ops::Assign(root.WithOpName("init"), v,
              ops::Const(root.WithOpName("val"), Tensor::FromVector<float>({1.5f, -2, 7})));
  ops::Save(root.WithOpName("save"), "shared/model", {"v"}, {v});
  return R"({"graph": )" + api::GraphToJson(root.graph_def()) + "}";
}

std::string RestoreGraph() {
  Scope root;
  Output v = ops::Variable(root.WithOpName("v"), TensorShape({3}), DataType::kFloat32);
  ops::Assign(root.WithOpName("restore_v"), v,
              ops::Restore(root.WithOpName("restored"), "shared/model", "v", DataType::kFloat32));
  ops::Identity(root.WithOpName("read"), v);
  ops::Restore(root.WithOpName("missing"), "shared/none", "v", DataType::kFloat32);
  return R"({"graph": )" + api::GraphToJson(root.graph_def()) + "}";
}

TEST_F(StoreServiceTest, SaveInOneSessionRestoreInAnotherOverRest) {
  HttpResponse a = Rest("POST", "/v1/sessions", SaveGraph());
  ASSERT_EQ(a.status, 201) << a.body;
  const std::string sa = Json::parse(a.body)["session_id"];
  HttpResponse r = Rest("POST", "/v1/sessions/" + sa + "/run", R"({"targets": ["init"]})");
  ASSERT_EQ(r.status, 200) << r.body;
  r = Rest("POST", "/v1/sessions/" + sa + "/run", R"({"targets": ["save"]})");
  ASSERT_EQ(r.status, 200) << r.body;
  ASSERT_EQ(Rest("DELETE", "/v1/sessions/" + sa).status, 200);

  auto restore_in_new_session = [&] {
    HttpResponse b = Rest("POST", "/v1/sessions", RestoreGraph());
    EXPECT_EQ(b.status, 201) << b.body;
    const std::string sb = Json::parse(b.body)["session_id"];
    HttpResponse rr = Rest("POST", "/v1/sessions/" + sb + "/run", R"({"targets": ["restore_v"]})");
    EXPECT_EQ(rr.status, 200) << rr.body;
    rr = Rest("POST", "/v1/sessions/" + sb + "/run", R"({"fetches": ["read"], "encoding": "data"})");
    EXPECT_EQ(rr.status, 200) << rr.body;
    Json out = Json::parse(rr.body)["outputs"]["read"];
    EXPECT_EQ(out["data"], Json::parse("[1.5, -2.0, 7.0]")) << rr.body;
    // A prefix never saved: NOT_FOUND naming it.
    rr = Rest("POST", "/v1/sessions/" + sb + "/run", R"({"fetches": ["missing"]})");
    EXPECT_EQ(rr.status, 404) << rr.body;
    EXPECT_NE(rr.body.find("shared/none"), std::string::npos) << rr.body;
  };
  restore_in_new_session();
  // After a restart of the service (the store stays): still there.
  Stop();
  Start();
  restore_in_new_session();
}

// --- Finding 5: the data root holds, through a real job.

TEST_F(StoreServiceTest, JobThroughALinkOutOfTheDataRootIsRefusedAtSubmission) {
  ASSERT_EQ(::symlink("/etc/passwd", (dir_ / "data" / "users.csv").c_str()), 0);
  std::string job = server_test::JobJson(1);
  job.replace(job.find("points.csv"), 10, "users.csv");
  HttpResponse r = Rest("POST", "/v1/jobs", job);
  EXPECT_EQ(r.status, 403) << r.body;
  Status s = api::StatusFromJson(r.body);
  EXPECT_EQ(s.code(), Code::kPermissionDenied);
  EXPECT_NE(s.message().find("input.files.x"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("'users.csv'"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("outside the data root"), std::string::npos) << s.message();
  EXPECT_EQ(s.message().find("root:"), std::string::npos) << s.message();

  grpc::ClientContext ctx;
  Deadline(&ctx);
  pb::SubmitJobRequest req;
  req.set_job_json(job);
  pb::Job resp;
  grpc::Status g = jobs_->Submit(&ctx, req, &resp);
  EXPECT_EQ(g.error_code(), grpc::StatusCode::PERMISSION_DENIED) << g.error_message();
  EXPECT_TRUE(service_->jobs().List().empty());
}

TEST_F(StoreServiceTest, JobThroughALinkInsideTheRootRunsAndCsvErrorsDoNotQuoteTheFile) {
  ASSERT_EQ(::symlink("points.csv", (dir_ / "data" / "alias.csv").c_str()), 0);
  std::string job = server_test::JobJson(1);
  job.replace(job.find("points.csv"), 10, "alias.csv");
  HttpResponse r = Rest("POST", "/v1/jobs", job);
  ASSERT_EQ(r.status, 201) << r.body;
  JobInfo done = WaitFinished(Json::parse(r.body)["job_id"]);
  EXPECT_EQ(done.state, JobState::kSucceeded) << done.error;

  std::ofstream(dir_ / "data" / "bad.csv") << "a,b\n1,2\n3,s3cr3t-value\n";
  job = server_test::JobJson(1);
  job.replace(job.find("points.csv"), 10, "bad.csv");
  r = Rest("POST", "/v1/jobs", job);
  ASSERT_EQ(r.status, 201) << r.body;
  JobInfo failed = WaitFinished(Json::parse(r.body)["job_id"]);
  EXPECT_EQ(failed.state, JobState::kFailed);
  EXPECT_NE(failed.error.find("bad.csv:3:2: the cell is not a valid float32 value"), std::string::npos)
      << failed.error;
  EXPECT_EQ(failed.error.find("s3cr3t"), std::string::npos) << failed.error;
  EXPECT_EQ(failed.error.find(dir_.string()), std::string::npos) << "a server path: " << failed.error;
}

}  // namespace
}  // namespace flowstate

// The checkpoint calls of the gRPC frontend against a service with a store,
// and their parity with the REST routes (same steps, same bytes).
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <thread>

#include "api/flowstate.grpc.pb.h"
#include "checkpoints/store.h"
#include "server/grpc/grpc_server.h"
#include "server/rest/http_routes.h"
#include "server/metrics.h"
#include "server/service.h"
#include "tests/server/server_test_util.h"
#include "tests/server/store_service_fixture.h"

namespace flowstate {
namespace {

namespace pb = ::flowstate::v1;

class GrpcCheckpointsTest : public server_test::StoreServiceFixture {
 protected:
  GrpcCheckpointsTest() : StoreServiceFixture("flowstate_grpc_ckpt") {}
};

const std::string kJob = R"({
  "graph": )" + server_test::LinearGraphJson(false) + R"(,
  "loss": "loss",
  "optimizer": {"type": "sgd", "learning_rate": 0.1},
  "input": {"format": "csv", "files": {"x": "points.csv", "y": "points.csv"},
            "columns": {"x": ["a", "b"], "y": ["target"]}, "batch_size": 16, "epochs": 2},
  "checkpoint": {"every_steps": 3, "keep": 2}
})";

TEST_F(GrpcCheckpointsTest, ListTakeExportImportAndWatchHistory) {
  pb::Job job;
  {
    grpc::ClientContext ctx;
    Deadline(&ctx);
    pb::SubmitJobRequest req;
    req.set_job_json(kJob);
    ASSERT_TRUE(jobs_->Submit(&ctx, req, &job).ok());
  }
  const std::string id = job.job_id();
  for (int i = 0; i < 3000 && job.state() != "SUCCEEDED"; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    grpc::ClientContext ctx;
    Deadline(&ctx);
    pb::GetJobRequest req;
    req.set_job_id(id);
    ASSERT_TRUE(jobs_->Get(&ctx, req, &job).ok());
  }
  ASSERT_EQ(job.state(), "SUCCEEDED") << job.error();
  ASSERT_TRUE(job.has_checkpoint());
  EXPECT_EQ(job.checkpoint().step(), 8);
  EXPECT_GT(job.checkpoint().bytes(), 0);
  EXPECT_FALSE(job.has_resumed_from_step());

  pb::ListCheckpointsResponse list;
  {
    grpc::ClientContext ctx;
    Deadline(&ctx);
    pb::ListCheckpointsRequest req;
    req.set_job_id(id);
    ASSERT_TRUE(jobs_->ListCheckpoints(&ctx, req, &list).ok());
  }
  ASSERT_EQ(list.checkpoints_size(), 2);
  EXPECT_EQ(list.checkpoints(1).step(), 8);
  // Parity: REST lists the same steps and sizes.
  HttpResponse rest = Rest("GET", "/v1/jobs/" + id + "/checkpoints");
  ASSERT_EQ(rest.status, 200) << rest.body;
  nlohmann::json rl = nlohmann::json::parse(rest.body);
  ASSERT_EQ(rl["checkpoints"].size(), 2u);
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(rl["checkpoints"][i]["step"].get<int64_t>(), list.checkpoints(i).step());
    EXPECT_EQ(rl["checkpoints"][i]["bytes"].get<int64_t>(), list.checkpoints(i).bytes());
    EXPECT_EQ(rl["checkpoints"][i]["tensors"].get<int64_t>(), list.checkpoints(i).tensors());
  }

  {
    grpc::ClientContext ctx;
    Deadline(&ctx);
    pb::CheckpointJobRequest req;
    req.set_job_id(id);
    pb::CheckpointJobResponse resp;
    ASSERT_TRUE(jobs_->Checkpoint(&ctx, req, &resp).ok());
    EXPECT_EQ(resp.step(), 8);
    EXPECT_TRUE(resp.written()) << "an idle job's checkpoint is written before the reply";
  }
  HttpResponse taken = Rest("POST", "/v1/jobs/" + id + "/checkpoints");
  EXPECT_EQ(taken.status, 201) << taken.body;
  EXPECT_EQ(nlohmann::json::parse(taken.body)["step"].get<int64_t>(), 8);

  pb::ExportCheckpointResponse exported;
  {
    grpc::ClientContext ctx;
    Deadline(&ctx);
    pb::ExportCheckpointRequest req;
    req.set_job_id(id);
    ASSERT_TRUE(jobs_->ExportCheckpoint(&ctx, req, &exported).ok());
  }
  EXPECT_EQ(exported.step(), 8);
  EXPECT_EQ(exported.data().rfind("FSCK", 0), 0u);
  HttpResponse rest_export = Rest("GET", "/v1/jobs/" + id + "/checkpoints/export?step=8");
  ASSERT_EQ(rest_export.status, 200);
  EXPECT_EQ(rest_export.content_type, "application/octet-stream");
  EXPECT_EQ(rest_export.body, exported.data()) << "the same portable bytes over both frontends";
  EXPECT_EQ(Rest("GET", "/v1/jobs/" + id + "/checkpoints/export?step=x").status, 400);
  // NumPy: an .npz archive over both frontends, named for what it is; a bad
  // format is 400 naming the parameter; import refuses an .npz.
  HttpResponse npz = Rest("GET", "/v1/jobs/" + id + "/checkpoints/export?step=8&format=npz");
  ASSERT_EQ(npz.status, 200) << npz.body;
  EXPECT_EQ(npz.content_type, "application/octet-stream");
  EXPECT_EQ(npz.body.rfind(std::string("PK\x03\x04", 4), 0), 0u);
  bool named = false;
  for (const auto& [k, v] : npz.headers) {
    if (k == "Content-Disposition") named = v == "attachment; filename=\"" + id + "-8.npz\"";
  }
  EXPECT_TRUE(named) << "Content-Disposition names <job>-<step>.npz";
  HttpResponse bad_format = Rest("GET", "/v1/jobs/" + id + "/checkpoints/export?format=zip");
  EXPECT_EQ(bad_format.status, 400);
  EXPECT_EQ(nlohmann::json::parse(bad_format.body)["error"]["message"].get<std::string>().rfind("format: ", 0), 0u)
      << bad_format.body;
  {
    grpc::ClientContext ctx;
    Deadline(&ctx);
    pb::ExportCheckpointRequest req;
    req.set_job_id(id);
    req.set_format("npz");
    pb::ExportCheckpointResponse resp;
    ASSERT_TRUE(jobs_->ExportCheckpoint(&ctx, req, &resp).ok());
    EXPECT_EQ(resp.step(), 8);
    EXPECT_EQ(resp.data().size(), npz.body.size()) << "the same archive over both frontends";
    req.set_format("zip");
    grpc::ClientContext ctx2;
    Deadline(&ctx2);
    EXPECT_EQ(jobs_->ExportCheckpoint(&ctx2, req, &resp).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  }
  HttpResponse npz_import = Rest("POST", "/v1/checkpoints/import", npz.body);
  EXPECT_EQ(npz_import.status, 400);
  EXPECT_NE(npz_import.body.find(".npz"), std::string::npos) << npz_import.body;
  EXPECT_EQ(Rest("GET", "/v1/jobs/" + id + "/checkpoints/export?step=5").status, 404);
  {
    grpc::ClientContext ctx;
    Deadline(&ctx);
    pb::ExportCheckpointRequest req;
    req.set_job_id(id);
    req.set_step(5);
    pb::ExportCheckpointResponse resp;
    EXPECT_EQ(jobs_->ExportCheckpoint(&ctx, req, &resp).error_code(), grpc::StatusCode::NOT_FOUND);
  }

  {
    grpc::ClientContext ctx;
    Deadline(&ctx);
    pb::ImportCheckpointRequest req;
    req.set_data(exported.data());
    pb::CheckpointJobResponse resp;
    ASSERT_TRUE(jobs_->ImportCheckpoint(&ctx, req, &resp).ok());
    EXPECT_EQ(resp.job_id(), "import-1");
    EXPECT_EQ(resp.step(), 8);
  }
  HttpResponse imported = Rest("POST", "/v1/checkpoints/import", rest_export.body);
  ASSERT_EQ(imported.status, 201) << imported.body;
  EXPECT_EQ(nlohmann::json::parse(imported.body)["job_id"], "import-2");
  EXPECT_EQ(Rest("POST", "/v1/checkpoints/import", "garbage").status, 400);

  // Watch with history: the checkpoint events (with messages), then the end.
  grpc::ClientContext wctx;
  Deadline(&wctx);
  pb::WatchJobRequest wreq;
  wreq.set_job_id(id);
  wreq.set_history(true);
  auto reader = jobs_->Watch(&wctx, wreq);
  pb::JobEvent e;
  int checkpoints = 0;
  while (reader->Read(&e)) {
    if (e.kind() == "checkpoint") {
      ++checkpoints;
      EXPECT_NE(e.message().find("written"), std::string::npos) << e.message();
    }
  }
  EXPECT_TRUE(reader->Finish().ok());
  // Policy ones and the final one; asking a finished job for a checkpoint
  // returns its final one, written when it finished.
  EXPECT_GE(checkpoints, 2);
}

}  // namespace
}  // namespace flowstate

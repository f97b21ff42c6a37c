// History and step traces over gRPC (api/flowstate.proto): Jobs/History,
// Jobs/GetTrace and Sessions/Run with trace, the same views as REST.
#include <nlohmann/json.hpp>

#include "api/views_json.h"
#include "tests/server/grpc_test_fixture.h"

namespace flowstate {
namespace grpc_test {
namespace {

TEST_F(GrpcServerTest, GrpcHistoryTracesAndATracedRun) {
  std::string job_json = CsvJob(2);
  job_json.insert(job_json.rfind('}'), R"(, "trace": {"steps": [3]})");
  pb::Job job = Submit(job_json);
  ASSERT_FALSE(job.job_id().empty());
  pb::Job done = WaitFor(job.job_id(), "SUCCEEDED");

  grpc::ClientContext ctx;
  Deadline(&ctx);
  pb::JobHistoryRequest hreq;
  hreq.set_job_id(job.job_id());
  pb::JobHistory history;
  grpc::Status s = jobs_->History(&ctx, hreq, &history);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(history.job_id(), job.job_id());
  ASSERT_EQ(history.steps_size(), done.step());
  EXPECT_EQ(history.steps(done.step() - 1).step(), done.step());
  // The same view as REST's.
  JobHistory view = service_->jobs().History(job.job_id()).value();
  EXPECT_DOUBLE_EQ(history.steps(0).loss(), view.steps[0].loss);
  EXPECT_DOUBLE_EQ(history.steps(0).time(), view.steps[0].time);

  // The document as submitted (Jobs/GetSpec, GET /v1/jobs/{id}/spec).
  grpc::ClientContext sctx;
  Deadline(&sctx);
  pb::JobSpecRequest sreq;
  sreq.set_job_id(job.job_id());
  pb::JobSpecDocument spec;
  s = jobs_->GetSpec(&sctx, sreq, &spec);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(spec.json(), job_json);

  grpc::ClientContext tctx;
  Deadline(&tctx);
  pb::JobTraceRequest treq;
  treq.set_job_id(job.job_id());
  treq.set_step(3);
  pb::JobTrace trace;
  s = jobs_->GetTrace(&tctx, treq, &trace);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(trace.traced_steps_size(), 1);
  EXPECT_EQ(trace.trace_json(), service_->jobs().Trace(job.job_id(), 3).value());
  EXPECT_EQ(nlohmann::json::parse(trace.trace_json())["otherData"]["step"], 3);

  grpc::ClientContext mctx;
  Deadline(&mctx);
  treq.set_step(4);
  s = jobs_->GetTrace(&mctx, treq, &trace);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_NE(s.error_message().find("step 4"), std::string::npos) << s.error_message();

  std::string session = CreateSession(R"({"nodes": [
      {"name": "a", "op": "Const", "attrs": {"dtype": "float32", "value": 2.0}},
      {"name": "b", "op": "Square", "inputs": ["a"]}]})");
  pb::RunSessionRequest run;
  run.set_session_id(session);
  run.add_fetches("b");
  pb::RunSessionResponse out;
  ASSERT_TRUE(Run(run, &out).ok());
  EXPECT_TRUE(out.trace_json().empty()) << "no trace unless asked";
  run.set_trace(true);
  ASSERT_TRUE(Run(run, &out).ok());
  nlohmann::json t = nlohmann::json::parse(out.trace_json());
  bool square = false;
  for (const auto& e : t["traceEvents"]) square |= e["name"] == "b" && e["cat"] == "Square";
  EXPECT_TRUE(square) << out.trace_json().substr(0, 300);
}

}  // namespace
}  // namespace grpc_test
}  // namespace flowstate

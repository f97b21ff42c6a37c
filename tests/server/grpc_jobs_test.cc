// The gRPC frontend's Jobs service end to end (see grpc_server_test.cc):
// submit, watch, get, list, predict, pause/resume/cancel, and parity with
// the Service for submissions.
#include "tests/server/grpc_test_fixture.h"

namespace flowstate {
namespace grpc_test {
namespace {

// --- Jobs.

TEST_F(GrpcServerTest, GrpcJobsSubmitWatchGetListPredict) {
  pb::Job job = Submit(CsvJob(2));
  ASSERT_FALSE(job.job_id().empty());
  EXPECT_EQ(job.name(), "line");
  EXPECT_EQ(job.state(), "QUEUED");
  EXPECT_TRUE(job.has_created());
  EXPECT_FALSE(job.has_finished());

  // Step events are live only (a watch's history holds state changes): so
  // that the watch sees steps however fast the machine runs them, the job
  // is paused before the watch opens and resumed once the watch reports it
  // PAUSED.
  ASSERT_TRUE(service_->jobs().Pause(job.job_id()).ok());
  std::vector<pb::JobEvent> events;
  grpc::Status s;
  {
    grpc::ClientContext ctx;
    Deadline(&ctx, seconds(60));
    pb::WatchJobRequest req;
    req.set_job_id(job.job_id());
    auto reader = jobs_->Watch(&ctx, req);
    pb::JobEvent e;
    bool resumed = false;
    while (reader->Read(&e)) {
      events.push_back(e);
      if (!resumed && e.kind() == "state" && e.job().state() == "PAUSED") {
        ASSERT_TRUE(service_->jobs().Resume(job.job_id()).ok());
        resumed = true;
      }
    }
    s = reader->Finish();
    EXPECT_TRUE(resumed);
  }
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
  proto_convert::JobToProto(*service_->jobs().Get(job.job_id()), &direct);
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
  Status back = proto_convert::FromGrpcStatus(g);
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
  EXPECT_EQ(proto_convert::FromGrpcStatus(g).message(), d.status().message());
  EXPECT_EQ(int(g.error_code()), int(d.status().code()));

  // A good one: the same job (but its id and times).
  pb::Job via_grpc = Submit(CsvJob(1, 4));
  StatusOr<JobInfo> direct = service_->jobs().Submit(CsvJob(1, 4));
  ASSERT_TRUE(direct.ok()) << direct.status().ToString();
  pb::Job via_service;
  proto_convert::JobToProto(*direct, &via_service);
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

}  // namespace
TEST_F(GrpcServerTest, GrpcDeleteRemovesFinishedJobsOnly) {
  pb::Job job = Submit(CsvJob(100000));
  WaitFor(job.job_id(), "RUNNING");
  auto del = [&](const std::string& id, pb::DeleteJobResponse* out) {
    grpc::ClientContext ctx;
    Deadline(&ctx);
    pb::DeleteJobRequest r;
    r.set_job_id(id);
    return jobs_->Delete(&ctx, r, out);
  };
  pb::DeleteJobResponse resp;
  grpc::Status s = del(job.job_id(), &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_NE(s.error_message().find("cancel it first"), std::string::npos) << s.error_message();
  EXPECT_EQ(del("job-77", &resp).error_code(), grpc::StatusCode::NOT_FOUND);

  {
    grpc::ClientContext ctx;
    Deadline(&ctx);
    pb::CancelJobRequest r;
    r.set_job_id(job.job_id());
    pb::Job after;
    ASSERT_TRUE(jobs_->Cancel(&ctx, r, &after).ok());
  }
  WaitFor(job.job_id(), "CANCELLED");
  s = del(job.job_id(), &resp);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(resp.job_id(), job.job_id());
  grpc::ClientContext ctx;
  Deadline(&ctx);
  pb::GetJobRequest get;
  get.set_job_id(job.job_id());
  pb::Job gone;
  EXPECT_EQ(jobs_->Get(&ctx, get, &gone).error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(del(job.job_id(), &resp).error_code(), grpc::StatusCode::NOT_FOUND);
}

TEST_F(GrpcServerTest, GrpcWatchReportsANaNStepAndTheJobFails) {
  std::string json = CsvJob(50);
  const std::string lr = "\"learning_rate\": 0.1";
  json.replace(json.find(lr), lr.size(), "\"learning_rate\": 1e18");
  pb::Job job = Submit(json);
  std::vector<pb::JobEvent> events;
  // With history: the job may fail before the stream subscribes.
  ASSERT_TRUE(WatchAll(job.job_id(), &events, /*history=*/true).ok());
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(events.back().job().state(), "FAILED");
  const std::string& error = events.back().job().error();
  EXPECT_EQ(error.rfind("step ", 0), 0u) << error;
  int nan_events = 0;
  for (const pb::JobEvent& e : events) {
    if (e.kind() != "nan") continue;
    ++nan_events;
    EXPECT_EQ(e.message(), error);
  }
  EXPECT_EQ(nan_events, 1);
}

}  // namespace grpc_test
}  // namespace flowstate

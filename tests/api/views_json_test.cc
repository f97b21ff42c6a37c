// The one view of a job (api/views.h) in its JSON forms: the REST job, an
// event's data line, and the stored record.
#include "api/views_json.h"

#include <gtest/gtest.h>

#include <cmath>

namespace flowstate {
namespace {

JobInfo SomeJob() {
  JobInfo j;
  j.id = "job-3";
  j.name = "fashion-mlp";
  j.state = JobState::kRunning;
  j.epoch = 1;
  j.epochs = 3;
  j.step = 612;
  j.total_steps = 1407;
  j.loss = 0.37;
  j.metrics = {{"accuracy", 0.871}};
  j.created = 1796310191.25;
  j.started = 1796310192.5;
  j.checkpoint_step = 600;
  j.checkpoint_time = 1796310199.75;
  j.checkpoint_bytes = 1620000;
  j.checkpoint_failures = 1;
  j.checkpoint_error = "disk full";
  j.skipped_steps = 2;
  j.eta_seconds = 12.5;
  return j;
}

TEST(JobView, RestJsonRoundTripsWithTheEta) {
  JobInfo j = SomeJob();
  StatusOr<JobInfo> back = JobInfoFromJson(JobInfoToJson(j));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->step, 612);
  EXPECT_EQ(back->eta_seconds, 12.5);
  j.eta_seconds = -1;  // unknown: null, read back as -1
  std::string text = JobInfoToJson(j);
  EXPECT_NE(text.find("\"eta_seconds\":null"), std::string::npos) << text;
  EXPECT_EQ(JobInfoFromJson(text)->eta_seconds, -1);
}

TEST(JobView, EventDataCarriesTheMessage) {
  JobEvent e;
  e.kind = JobEvent::Kind::kCheckpoint;
  e.info = SomeJob();
  e.message = "checkpoint at step 600 written";
  StatusOr<JobEvent> back = JobEventDataFromJson(JobEventDataToJson(e));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->message, e.message);
  EXPECT_EQ(back->info.id, "job-3");
  EXPECT_EQ(back->info.checkpoint_step, 600);
}

TEST(JobView, RecordRoundTrips) {
  JobRecord r;
  r.info = SomeJob();
  r.info.loss = std::nan("");  // stored as 0
  r.train_seconds = 30.5;
  r.examples = 39168;
  JobEvent e;
  e.kind = JobEvent::Kind::kResume;
  e.info = r.info;
  e.info.state = JobState::kQueued;
  e.info.step = 500;
  e.time = 1796310195.5;
  e.message = "resumed from step 500";
  r.history.push_back(e);
  StatusOr<JobRecord> back = JobRecordFromJson(JobRecordToJson(r));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->info.id, "job-3");
  EXPECT_EQ(back->info.state, JobState::kRunning);
  EXPECT_EQ(back->info.loss, 0);
  EXPECT_EQ(back->info.created, 1796310191.25);
  EXPECT_EQ(back->info.checkpoint_step, 600);
  EXPECT_EQ(back->info.checkpoint_failures, 1);
  EXPECT_EQ(back->info.checkpoint_error, "disk full");
  EXPECT_EQ(back->info.skipped_steps, 2);
  EXPECT_EQ(back->info.metrics.at("accuracy"), 0.871);
  EXPECT_EQ(back->train_seconds, 30.5);
  EXPECT_EQ(back->examples, 39168);
  ASSERT_EQ(back->history.size(), 1u);
  EXPECT_EQ(back->history[0].kind, JobEvent::Kind::kResume);
  EXPECT_EQ(back->history[0].info.state, JobState::kQueued);
  EXPECT_EQ(back->history[0].info.step, 500);
  EXPECT_EQ(back->history[0].message, "resumed from step 500");
}

// A record as the server wrote it before histories were stored (and
// without the fields added later) still reads; unknown history entries are skipped.
TEST(JobView, RecordsOfEarlierVersionsRead) {
  StatusOr<JobRecord> r = JobRecordFromJson(
      R"({"id":"job-1","state":"SUCCEEDED","error":"","epoch":2,"step":1407,"total_steps":1407,)"
      R"("loss":0.25,"train_seconds":3.5,"examples":90000,"metrics":{"accuracy":0.88},)"
      R"("created":1796310191.0,"started":1796310192.0,"finished":1796310200.0,)"
      R"("checkpoint":{"step":1407,"time":1796310200.0,"bytes":1000},)"
      R"("history":[{"kind":"state","time":1.0,"message":"","state":"RUNNING","step":0,"epoch":0},)"
      R"({"kind":"bogus","state":"RUNNING"}]})");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->info.state, JobState::kSucceeded);
  EXPECT_EQ(r->info.checkpoint_step, 1407);
  EXPECT_EQ(r->info.checkpoint_failures, 0);
  EXPECT_EQ(r->info.resumed_from_step, -1);
  EXPECT_EQ(r->history.size(), 1u);
}

// Issue 31: each stored event keeps the job's values of its own moment --
// not the record's current loss, metrics and error -- and reads back as the
// live stream's data line showed it; a pending pause or cancel is kept.
TEST(JobView, RecordHistoryKeepsEachEventsOwnValues) {
  JobRecord r;
  r.info = SomeJob();
  r.info.state = JobState::kFailed;
  r.info.error = "step 700: INTERNAL: boom";
  r.info.metrics = {{"accuracy", 0.9}};
  r.info.loss = 0.11;
  r.pending_action = "pause";
  JobEvent early;
  early.kind = JobEvent::Kind::kState;
  early.info = SomeJob();
  early.info.step = 0;
  early.info.loss = 0;
  early.info.metrics.clear();
  early.info.checkpoint_step = -1;
  early.info.examples_per_sec = 0;
  early.time = 1796310192.5;
  JobEvent eval = early;
  eval.kind = JobEvent::Kind::kEval;
  eval.info.step = 469;
  eval.info.loss = 0.42;
  eval.info.examples_per_sec = 5120.5;
  eval.info.metrics = {{"accuracy", 0.81}};
  eval.info.checkpoint_step = 460;
  eval.time = 1796310195.25;
  r.history = {early, eval};
  StatusOr<JobRecord> back = JobRecordFromJson(JobRecordToJson(r));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->pending_action, "pause");
  ASSERT_EQ(back->history.size(), 2u);
  const JobInfo& a = back->history[0].info;
  EXPECT_EQ(a.step, 0);
  EXPECT_EQ(a.loss, 0);
  EXPECT_TRUE(a.metrics.empty()) << "not the record's final metrics";
  EXPECT_EQ(a.error, "") << "not the error that came later";
  EXPECT_EQ(a.checkpoint_step, -1);
  const JobInfo& b = back->history[1].info;
  EXPECT_EQ(b.step, 469);
  EXPECT_EQ(b.loss, 0.42);
  EXPECT_EQ(b.examples_per_sec, 5120.5);
  EXPECT_EQ(b.metrics.at("accuracy"), 0.81);
  EXPECT_EQ(b.checkpoint_step, 460);
  EXPECT_EQ(b.error, "");
  // The replayed data lines are the ones the live stream sent.
  for (size_t i = 0; i < r.history.size(); ++i) {
    EXPECT_EQ(JobEventDataToJson(back->history[i]), JobEventDataToJson(r.history[i])) << i;
  }
}

// An event's data line says when it happened (as gRPC's JobEvent.time).
TEST(JobView, EventDataCarriesItsTime) {
  JobEvent e;
  e.kind = JobEvent::Kind::kEval;
  e.info = SomeJob();
  e.time = 1796310195.25;
  std::string text = JobEventDataToJson(e);
  EXPECT_NE(text.find("\"time\":\""), std::string::npos) << text;
  StatusOr<JobEvent> back = JobEventDataFromJson(text);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_NEAR(back->time, e.time, 1e-3);
}

// Entries stored before events kept their own values show none of the
// record's later values (rather than wrong ones).
TEST(JobView, OlderHistoryEntriesShowNoLaterValues) {
  StatusOr<JobRecord> r = JobRecordFromJson(
      R"({"id":"job-1","state":"FAILED","error":"step 9: boom","step":9,"loss":0.25,)"
      R"("metrics":{"accuracy":0.88},"created":1796310191.0,)"
      R"("history":[{"kind":"state","time":1.0,"message":"","state":"RUNNING","step":0,"epoch":0}]})");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->history.size(), 1u);
  const JobInfo& e = r->history[0].info;
  EXPECT_EQ(e.id, "job-1");
  EXPECT_EQ(e.state, JobState::kRunning);
  EXPECT_EQ(e.step, 0);
  EXPECT_EQ(e.loss, 0);
  EXPECT_TRUE(e.metrics.empty());
  EXPECT_EQ(e.error, "");
  EXPECT_EQ(e.created, 1796310191.0);
}

TEST(JobView, BadRecordsAreErrorsNamingTheField) {
  StatusOr<JobRecord> r = JobRecordFromJson(R"({"id":"job-1","state":"DANCING"})");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("state"), std::string::npos) << r.status().ToString();
  r = JobRecordFromJson(R"({"id":"job-1","state":"QUEUED","step":"ten"})");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("step"), std::string::npos) << r.status().ToString();
  EXPECT_FALSE(JobRecordFromJson("not json").ok());
}

}  // namespace
}  // namespace flowstate

// Queues through the JSON graph form over REST, as the README shows them:
// one step enqueues, another dequeues; a dequeue from a closed, empty queue
// is a 400 with code OUT_OF_RANGE naming the node; deleting a session
// releases a step that waits on its queue.
#include <chrono>
#include <future>
#include <thread>

#include "tests/server/http_routes_fixture.h"

namespace flowstate {
namespace http_routes_test {
namespace {

constexpr const char* kQueueGraph = R"({"graph": {"nodes": [
    {"name": "q", "op": "FIFOQueue",
     "attrs": {"component_types": ["float32", "int32"], "shapes": [[2], []], "capacity": 8}},
    {"name": "x", "op": "Placeholder", "attrs": {"dtype": "float32", "shape": [-1, 2]}},
    {"name": "y", "op": "Placeholder", "attrs": {"dtype": "int32", "shape": [-1]}},
    {"name": "enqueue", "op": "QueueEnqueueMany", "inputs": ["q", "x", "y"]},
    {"name": "n", "op": "Const", "attrs": {"dtype": "int32", "value": 2}},
    {"name": "batch", "op": "QueueDequeueMany", "inputs": ["q", "n"],
     "attrs": {"component_types": ["float32", "int32"]}},
    {"name": "size", "op": "QueueSize", "inputs": ["q"]},
    {"name": "close", "op": "QueueClose", "inputs": ["q"]}]}})";

TEST_F(HttpRoutesTest, QueueStepsEnqueueAndDequeueThroughJson) {
  HttpResponse r = Do("POST", "/v1/sessions", kQueueGraph);
  ASSERT_EQ(r.status, 201) << r.body;
  const std::string run = "/v1/sessions/" + std::string(Json::parse(r.body)["session_id"]) + "/run";
  r = Do("POST", run,
         R"({"feeds": {"x": [[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]], "y": [7, 8, 9]}, "targets": ["enqueue"]})");
  ASSERT_EQ(r.status, 200) << r.body;
  r = Do("POST", run, R"({"fetches": ["batch:0", "batch:1", "size"], "encoding": "nested"})");
  ASSERT_EQ(r.status, 200) << r.body;
  Json out = Json::parse(r.body)["outputs"];
  EXPECT_EQ(out["batch:0"], Json::parse("[[1.0, 2.0], [3.0, 4.0]]")) << r.body;
  EXPECT_EQ(out["batch:1"], Json::parse("[7, 8]")) << r.body;
  // Fetched in the same step as the dequeue but not ordered after it.
  EXPECT_TRUE(out["size"] == 1 || out["size"] == 3) << r.body;

  ASSERT_EQ(Do("POST", run, R"({"targets": ["close"]})").status, 200);
  r = Do("POST", run, R"({"fetches": ["batch:0"]})");  // one element left, two asked
  EXPECT_EQ(r.status, 400) << r.body;
  Status s = ErrorOf(r);
  EXPECT_EQ(s.code(), Code::kOutOfRange) << r.body;
  EXPECT_EQ(s.node(), "batch") << r.body;
  EXPECT_NE(s.message().find("FIFOQueue 'q' (float32[2], int32[]) is closed"), std::string::npos) << r.body;
  r = Do("POST", run,
         R"({"feeds": {"x": [[1.0, 2.0]], "y": [1]}, "targets": ["enqueue"]})");
  EXPECT_EQ(ErrorOf(r).code(), Code::kCancelled) << r.body;
}

TEST_F(HttpRoutesTest, BadQueueInputIsA400NamingTheNode) {
  HttpResponse r = Do("POST", "/v1/sessions", R"({"graph": {"nodes": [
      {"name": "q", "op": "FIFOQueue", "attrs": {"component_types": ["float32"], "capacity": 0}}]}})");
  EXPECT_EQ(r.status, 400) << r.body;
  EXPECT_EQ(ErrorOf(r).node(), "q") << r.body;
  EXPECT_NE(ErrorOf(r).message().find("capacity"), std::string::npos) << r.body;

  r = Do("POST", "/v1/sessions", kQueueGraph);
  ASSERT_EQ(r.status, 201) << r.body;
  const std::string run = "/v1/sessions/" + std::string(Json::parse(r.body)["session_id"]) + "/run";
  r = Do("POST", run, R"({"feeds": {"x": [[1.0, 2.0]], "y": [1, 2]}, "targets": ["enqueue"]})");
  EXPECT_EQ(r.status, 400) << r.body;
  EXPECT_EQ(ErrorOf(r).node(), "enqueue") << r.body;
  EXPECT_NE(ErrorOf(r).message().find("has 2 element(s) in dimension 0 but component 0 has 1"), std::string::npos) << r.body;
}

TEST_F(HttpRoutesTest, TimeoutMsEndsAWaitingDequeueWith504) {
  HttpResponse r = Do("POST", "/v1/sessions", kQueueGraph);
  ASSERT_EQ(r.status, 201) << r.body;
  const std::string run = "/v1/sessions/" + std::string(Json::parse(r.body)["session_id"]) + "/run";
  const auto t0 = std::chrono::steady_clock::now();
  r = Do("POST", run, R"({"fetches": ["batch:0"], "timeout_ms": 100})");
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(10));
  EXPECT_EQ(r.status, 504) << r.body;
  EXPECT_EQ(ErrorOf(r).code(), Code::kDeadlineExceeded) << r.body;
  EXPECT_NE(ErrorOf(r).message().find("deadline of 100 ms"), std::string::npos) << r.body;
  r = Do("POST", run, R"({"fetches": ["size"], "timeout_ms": -1})");
  EXPECT_EQ(r.status, 400) << r.body;
  EXPECT_NE(ErrorOf(r).message().find("timeout_ms"), std::string::npos) << r.body;
  r = Do("POST", run, R"({"fetches": ["size"], "timeout_ms": 10000})");
  EXPECT_EQ(r.status, 200) << r.body;
}

TEST_F(HttpRoutesTest, DeletingASessionReleasesAStepWaitingOnItsQueue) {
  HttpResponse r = Do("POST", "/v1/sessions", kQueueGraph);
  ASSERT_EQ(r.status, 201) << r.body;
  const std::string id = Json::parse(r.body)["session_id"];
  auto waiting = std::async(std::launch::async, [&] {
    return Do("POST", "/v1/sessions/" + id + "/run", R"({"fetches": ["batch:0"]})");
  });
  EXPECT_EQ(waiting.wait_for(std::chrono::milliseconds(200)), std::future_status::timeout)
      << "the queue is empty: the dequeue waits";
  EXPECT_EQ(Do("DELETE", "/v1/sessions/" + id).status, 200);
  ASSERT_EQ(waiting.wait_for(std::chrono::seconds(10)), std::future_status::ready);
  r = waiting.get();
  EXPECT_EQ(ErrorOf(r).code(), Code::kCancelled) << r.body;
  EXPECT_EQ(r.status, 499) << r.body;
}

TEST_F(HttpRoutesTest, ATaggedStepIsCancelledByItsTagAndTheSessionGoesOn) {
  HttpResponse r = Do("POST", "/v1/sessions", kQueueGraph);
  ASSERT_EQ(r.status, 201) << r.body;
  const std::string id = Json::parse(r.body)["session_id"];
  const std::string run = "/v1/sessions/" + id + "/run";
  auto waiting = std::async(std::launch::async, [&] {
    return Do("POST", run, R"({"fetches": ["batch:0"], "step_tag": "t1"})");
  });
  // Until the step has begun, a cancel finds nothing to end: retry it.
  bool cancelled = false;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!cancelled && std::chrono::steady_clock::now() < deadline) {
    HttpResponse c = Do("POST", "/v1/sessions/" + id + "/cancel", R"({"step_tag": "t1"})");
    ASSERT_EQ(c.status, 200) << c.body;
    cancelled = Json::parse(c.body)["cancelled"].get<bool>();
    if (!cancelled) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_TRUE(cancelled);
  ASSERT_EQ(waiting.wait_for(std::chrono::seconds(10)), std::future_status::ready);
  r = waiting.get();
  EXPECT_EQ(r.status, 499) << r.body;
  EXPECT_NE(ErrorOf(r).message().find("cancelled by its caller"), std::string::npos) << r.body;
  // Nothing runs under that tag now; the session still runs steps.
  r = Do("POST", "/v1/sessions/" + id + "/cancel", R"({"step_tag": "t1"})");
  EXPECT_EQ(Json::parse(r.body)["cancelled"], false) << r.body;
  r = Do("POST", run, R"({"fetches": ["size"], "step_tag": "t1"})");
  EXPECT_EQ(r.status, 200) << r.body;
  // Bad requests.
  EXPECT_EQ(Do("POST", "/v1/sessions/" + id + "/cancel", R"({"step_tag": ""})").status, 400);
  EXPECT_EQ(Do("POST", "/v1/sessions/" + id + "/cancel", R"({"tag": "t1"})").status, 400);
  EXPECT_EQ(Do("POST", "/v1/sessions/sess-404/cancel", R"({"step_tag": "t1"})").status, 404);
  r = Do("POST", run, R"({"fetches": ["size"], "step_tag": ")" + std::string(129, 'x') + R"("})");
  EXPECT_EQ(r.status, 400) << r.body;
}

TEST_F(HttpRoutesTest, TwoRunningStepsMayNotShareATag) {
  HttpResponse r = Do("POST", "/v1/sessions", kQueueGraph);
  ASSERT_EQ(r.status, 201) << r.body;
  const std::string id = Json::parse(r.body)["session_id"];
  const std::string run = "/v1/sessions/" + id + "/run";
  auto dequeue = [&] {
    return std::async(std::launch::async, [&] {
      return Do("POST", run, R"({"fetches": ["batch:0"], "step_tag": "same"})");
    });
  };
  // A dequeue on the empty queue waits under the tag; a step that does not
  // wait (size) under the same tag is refused while it does. Either may
  // hold the tag first: a dequeue refused because a size held it is
  // started again.
  std::future<HttpResponse> waiting = dequeue();
  bool refused = false;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (!refused && std::chrono::steady_clock::now() < deadline) {
    if (waiting.wait_for(std::chrono::seconds(0)) == std::future_status::ready) {
      HttpResponse lost = waiting.get();
      ASSERT_EQ(lost.status, 409) << lost.body;
      waiting = dequeue();
    }
    r = Do("POST", run, R"({"fetches": ["size"], "step_tag": "same"})");
    refused = r.status == 409;
    if (!refused) {
      ASSERT_EQ(r.status, 200) << r.body;
    }
  }
  EXPECT_TRUE(refused);
  EXPECT_NE(ErrorOf(r).message().find("step_tag"), std::string::npos) << r.body;
  EXPECT_EQ(Do("DELETE", "/v1/sessions/" + id).status, 200);
  ASSERT_EQ(waiting.wait_for(std::chrono::seconds(10)), std::future_status::ready);
}

}  // namespace
}  // namespace http_routes_test
}  // namespace flowstate

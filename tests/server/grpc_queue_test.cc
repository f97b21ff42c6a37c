// Queues over gRPC: a run's timeout_ms ends a dequeue waiting on an empty
// queue with DEADLINE_EXCEEDED, and a dequeue from a closed, empty queue is
// OUT_OF_RANGE naming the node — the same as over REST.
#include "tests/server/grpc_test_fixture.h"

#include <chrono>
#include <string>

namespace flowstate {
namespace grpc_test {
namespace {

constexpr const char* kQueueGraph = R"({"nodes": [
    {"name": "q", "op": "FIFOQueue", "attrs": {"component_types": ["float32"], "shapes": [[]]}},
    {"name": "x", "op": "Placeholder", "attrs": {"dtype": "float32", "shape": []}},
    {"name": "enqueue", "op": "QueueEnqueue", "inputs": ["q", "x"]},
    {"name": "dequeue", "op": "QueueDequeue", "inputs": ["q"],
     "attrs": {"component_types": ["float32"]}},
    {"name": "close", "op": "QueueClose", "inputs": ["q"]}]})";

TEST_F(GrpcServerTest, GrpcQueueDeadlineAndOutOfRange) {
  const std::string id = CreateSession(kQueueGraph);
  ASSERT_FALSE(id.empty());
  pb::RunSessionRequest dequeue;
  dequeue.set_session_id(id);
  dequeue.add_fetches("dequeue");
  dequeue.set_timeout_ms(100);
  pb::RunSessionResponse out;
  const auto t0 = std::chrono::steady_clock::now();
  grpc::Status s = Run(dequeue, &out);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(10));
  EXPECT_EQ(s.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED) << s.error_message();

  pb::RunSessionRequest bad = dequeue;
  bad.set_timeout_ms(-1);
  EXPECT_EQ(Run(bad, &out).error_code(), grpc::StatusCode::INVALID_ARGUMENT);

  pb::RunSessionRequest enqueue;
  enqueue.set_session_id(id);
  (*enqueue.mutable_feeds())["x"] = FloatTensor({2.5f}, {});
  enqueue.add_targets("enqueue");
  ASSERT_TRUE(Run(enqueue, &out).ok());
  pb::RunSessionRequest close;
  close.set_session_id(id);
  close.add_targets("close");
  ASSERT_TRUE(Run(close, &out).ok());
  s = Run(dequeue, &out);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(Floats(out.outputs().at("dequeue")), (std::vector<float>{2.5f}));
  s = Run(dequeue, &out);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::OUT_OF_RANGE) << s.error_message();
  EXPECT_NE(s.error_message().find("FIFOQueue 'q'"), std::string::npos) << s.error_message();
  EXPECT_NE(s.error_message().find("[node: dequeue]"), std::string::npos) << s.error_message();
}

}  // namespace
}  // namespace grpc_test
}  // namespace flowstate

// Worker sessions whose master went away are dropped: the master's task
// restarted (a new incarnation in the heartbeats), or it has been
// unreachable for longer than WorkerServiceOptions::orphan_session_seconds.
// Sessions are registered over the Worker service as a master in another
// process would, so that no master Session closes them first.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <thread>

#include "api/worker.grpc.pb.h"
#include "tests/distributed/local_cluster.h"

namespace flowstate {
namespace {

namespace wpb = ::flowstate::worker::v1;
using testing::LocalCluster;

constexpr const char* kT1 = "/job:worker/replica:0/task:1/device:CPU:0";

// Registers an empty partition on task 1 for `session`, as the master
// `master_task` of incarnation `incarnation` would.
void Register(wpb::Worker::Stub* stub, const std::string& session, const std::string& master_task,
              uint64_t incarnation) {
  ::grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  wpb::RegisterGraphRequest req;
  wpb::RegisterGraphResponse resp;
  req.set_session_handle(session);
  req.set_device(kT1);
  req.set_master_task(master_task);
  req.set_master_incarnation(incarnation);
  ::grpc::Status s = stub->RegisterGraph(&ctx, req, &resp);
  ASSERT_TRUE(s.ok()) << s.error_message();
  ASSERT_EQ(resp.status().code(), 0) << resp.status().message();
}

TEST(OrphanSessions, DroppedWhenTheMasterRestartsOrStaysUnreachable) {
  LocalCluster cluster(3, 1, /*orphan_session_seconds=*/1.0);
  WorkerService* w1 = cluster.task(1).service.get();
  Cluster* c1 = cluster.task(1).cluster.get();
  const uint64_t inc0 = cluster.task(0).cluster->local_incarnation();
  const uint64_t inc2 = cluster.task(2).cluster->local_incarnation();
  auto stub = wpb::Worker::NewStub(
      ::grpc::CreateChannel(cluster.Address(1), ::grpc::InsecureChannelCredentials()));
  Register(stub.get(), "live", "/job:worker/task:0", inc0);
  Register(stub.get(), "restarted", "/job:worker/task:0", inc0 ^ 0x5a5a);
  Register(stub.get(), "unreachable", "/job:worker/task:2", inc2);
  Register(stub.get(), "unknown-master", "", 0);
  ASSERT_EQ(w1->num_sessions(), 4);

  // Task 1 knows task 0's incarnation: the session of the other one goes.
  c1->HeartbeatNow();
  EXPECT_EQ(w1->ReclaimOrphanSessions(), 1);
  EXPECT_EQ(w1->num_sessions(), 3);

  // Task 2 goes away: its session is dropped about a second after the
  // heartbeats find it unreachable, by the background sweep.
  cluster.Stop(2);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(15);
  while (w1->num_sessions() > 2 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_EQ(w1->num_sessions(), 2) << "the unreachable master's session was not dropped in 15 s";

  // The live master's session and one whose master is not known stay.
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  EXPECT_EQ(w1->ReclaimOrphanSessions(), 0);
  EXPECT_EQ(w1->num_sessions(), 2);
}

}  // namespace
}  // namespace flowstate

// The MASTER_* cluster registry: ranks that join task 0's registry over gRPC
// learn one complete spec; a world that does not assemble fails within its
// deadline naming the missing ranks; bad joins are refused.
#include "distributed/registry.h"

#include <gtest/gtest.h>
#include <grpcpp/grpcpp.h>

#include <atomic>
#include <chrono>
#include <future>
#include <thread>

namespace flowstate {
namespace {

using std::chrono::milliseconds;

// Task 0's side: a registry served on a free loopback port.
struct RegistryServer {
  explicit RegistryServer(int world) : registry(world) {
    ::grpc::ServerBuilder b;
    b.AddListeningPort("127.0.0.1:0", ::grpc::InsecureServerCredentials(), &port);
    b.RegisterService(registry.service());
    server = b.BuildAndStart();
  }
  ~RegistryServer() { server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2)); }
  std::string address() const { return "127.0.0.1:" + std::to_string(port); }
  ClusterRegistry registry;
  int port = 0;
  std::unique_ptr<::grpc::Server> server;
};

ClusterSpec Partial(const std::string& master, int world, int rank) {
  ClusterSpec s;
  s.jobs["worker"].assign(size_t(world), "");
  s.jobs["worker"][0] = master;
  s.self = {"worker", rank};
  s.registry = master;
  return s;
}

TEST(Registry, EveryRankLearnsTheSameCluster) {
  RegistryServer r(3);
  ASSERT_NE(r.port, 0);
  std::vector<std::future<StatusOr<ClusterSpec>>> joins;
  for (int rank = 2; rank >= 0; --rank) {
    joins.push_back(std::async(std::launch::async, [&, rank] {
      return JoinCluster(Partial(r.address(), 3, rank), "10.0.0." + std::to_string(rank) + ":7000",
                         &r.registry, milliseconds(10000), milliseconds(20));
    }));
  }
  for (auto& f : joins) {
    ASSERT_EQ(f.wait_for(std::chrono::seconds(15)), std::future_status::ready);
    StatusOr<ClusterSpec> s = f.get();
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    EXPECT_TRUE(s->complete());
    EXPECT_TRUE(s->registry.empty());
    EXPECT_EQ(s->jobs.at("worker"),
              (std::vector<std::string>{r.address(), "10.0.0.1:7000", "10.0.0.2:7000"}));
  }
}

TEST(Registry, MissingRanksAreNamedAtTheDeadline) {
  RegistryServer r(4);
  auto start = std::chrono::steady_clock::now();
  std::future<StatusOr<ClusterSpec>> one = std::async(std::launch::async, [&] {
    return JoinCluster(Partial(r.address(), 4, 1), "h1:1", nullptr, milliseconds(600), milliseconds(20));
  });
  StatusOr<ClusterSpec> zero = JoinCluster(Partial(r.address(), 4, 0), "", &r.registry, milliseconds(600), milliseconds(20));
  ASSERT_FALSE(zero.ok());
  EXPECT_EQ(zero.status().code(), Code::kDeadlineExceeded);
  EXPECT_NE(zero.status().message().find("2 of WORLD_SIZE=4 rank(s) did not join"), std::string::npos)
      << zero.status().ToString();
  EXPECT_NE(zero.status().message().find("missing rank(s): 2, 3"), std::string::npos) << zero.status().ToString();
  ASSERT_EQ(one.wait_for(std::chrono::seconds(10)), std::future_status::ready);
  StatusOr<ClusterSpec> s1 = one.get();
  ASSERT_FALSE(s1.ok());
  EXPECT_EQ(s1.status().code(), Code::kDeadlineExceeded);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
}

TEST(Registry, UnreachableRegistryFailsWithinTheDeadline) {
  int port = 0;
  {  // a port that was free a moment ago, with nobody listening now
    RegistryServer gone(2);
    port = gone.port;
  }
  const std::string master = "127.0.0.1:" + std::to_string(port);
  auto start = std::chrono::steady_clock::now();
  StatusOr<ClusterSpec> s = JoinCluster(Partial(master, 2, 1), "h1:1", nullptr, milliseconds(500), milliseconds(20));
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), Code::kDeadlineExceeded);
  EXPECT_NE(s.status().message().find("could not be reached"), std::string::npos) << s.status().ToString();
  EXPECT_NE(s.status().message().find(master), std::string::npos) << s.status().ToString();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(4));
}

TEST(Registry, BadJoinsAreRefused) {
  RegistryServer r(2);
  ASSERT_TRUE(r.registry.Join(2, 0, r.address()).ok());
  StatusOr<ClusterRegistry::Members> m = r.registry.Join(3, 1, "h:1");
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("WORLD_SIZE: rank 1 says 3, task 0's registry has 2"), std::string::npos);
  m = r.registry.Join(2, 2, "h:1");
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("RANK: 2 is out of range"), std::string::npos);
  m = r.registry.Join(2, 1, "h");
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("address: address 'h' has no port"), std::string::npos);
  // The same address as rank 0, over gRPC: refused at once, not at the deadline.
  auto start = std::chrono::steady_clock::now();
  StatusOr<ClusterSpec> s = JoinCluster(Partial(r.address(), 2, 1), r.address(), nullptr, milliseconds(5000));
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), Code::kInvalidArgument);
  EXPECT_NE(s.status().message().find("which rank 0 already has"), std::string::npos) << s.status().ToString();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(3));
  // A rank that joins again (restarted elsewhere) replaces its address.
  ASSERT_TRUE(r.registry.Join(2, 1, "h:1").ok());
  ASSERT_TRUE(r.registry.Join(2, 1, "h:2").ok());
  EXPECT_EQ(r.registry.members().addresses[1], "h:2");
  EXPECT_TRUE(r.registry.members().complete);
}

TEST(Registry, CancelEndsTheWait) {
  RegistryServer r(2);
  std::atomic<bool> cancel{false};
  std::future<StatusOr<ClusterSpec>> zero = std::async(std::launch::async, [&] {
    return JoinCluster(Partial(r.address(), 2, 0), "", &r.registry, milliseconds(30000), milliseconds(20), &cancel);
  });
  std::this_thread::sleep_for(milliseconds(100));
  cancel = true;
  ASSERT_EQ(zero.wait_for(std::chrono::seconds(5)), std::future_status::ready);
  StatusOr<ClusterSpec> s = zero.get();
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), Code::kCancelled) << s.status().ToString();
}

TEST(Registry, AdvertisedHost) {
  static const char* (*no_env)(const char*) = [](const char*) -> const char* { return nullptr; };
  static const char* (*pod_env)(const char*) = [](const char* n) -> const char* {
    return std::string(n) == "POD_IP" ? "10.1.2.3" : nullptr;
  };
  EXPECT_EQ(AdvertisedHost("given", "10.0.0.1", pod_env), "given");
  EXPECT_EQ(AdvertisedHost("", "10.0.0.1", pod_env), "10.1.2.3");
  EXPECT_EQ(AdvertisedHost("", "10.0.0.1", no_env), "10.0.0.1");
  std::string h = AdvertisedHost("", "0.0.0.0", no_env);
  EXPECT_FALSE(h.empty());
  EXPECT_NE(h, "0.0.0.0");
  EXPECT_NE(AdvertisedHost("", "[::]", no_env), "[::]");
}

}  // namespace
}  // namespace flowstate

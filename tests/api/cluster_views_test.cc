// The cluster view's JSON (GET /v1/cluster) and incarnations: written as
// server/API.md gives them, read back, and bad fields named.
#include <gtest/gtest.h>

#include "api/views_json.h"

namespace flowstate {
namespace {

TEST(ClusterViews, RoundTrip) {
  ClusterInfo c;
  TaskInfo t;
  t.job = "ps";
  t.index = 2;
  t.address = "[::1]:7";
  t.state = TaskState::kUnreachable;
  t.incarnation = 0xabcdef0123456789ULL;
  t.last_heartbeat = 1764781391.25;
  t.error = "deadline";
  DeviceInfo d;
  d.name = "/job:ps/replica:0/task:2/device:CPU:0";
  d.type = "CPU";
  t.devices.push_back(d);
  c.tasks.push_back(t);
  TaskInfo never;
  never.job = "worker";
  c.tasks.push_back(never);
  const std::string json = ClusterInfoToJson(c, 1764781393.0);
  EXPECT_NE(json.find(R"("name":"/job:ps/replica:0/task:2")"), std::string::npos) << json;
  EXPECT_NE(json.find(R"("incarnation":"abcdef0123456789")"), std::string::npos) << json;
  EXPECT_NE(json.find(R"("heartbeat_age_seconds":1.75)"), std::string::npos) << json;
  EXPECT_NE(json.find(R"("last_heartbeat":"2025-12-03T17:03:11.250Z")"), std::string::npos) << json;
  EXPECT_NE(json.find(R"("incarnation":null,"last_heartbeat":null,"heartbeat_age_seconds":null)"), std::string::npos)
      << json;
  StatusOr<ClusterInfo> back = ClusterInfoFromJson(json);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  ASSERT_EQ(back->tasks.size(), 2u);
  EXPECT_EQ(back->tasks[0].job, "ps");
  EXPECT_EQ(back->tasks[0].index, 2);
  EXPECT_EQ(back->tasks[0].address, "[::1]:7");
  EXPECT_EQ(back->tasks[0].state, TaskState::kUnreachable);
  EXPECT_EQ(back->tasks[0].incarnation, 0xabcdef0123456789ULL);
  EXPECT_DOUBLE_EQ(back->tasks[0].last_heartbeat, 1764781391.25);
  EXPECT_EQ(back->tasks[0].devices.size(), 1u);
  EXPECT_EQ(back->tasks[1].incarnation, 0u);
  EXPECT_EQ(back->tasks[1].last_heartbeat, 0);
}

TEST(ClusterViews, BadFieldsAreNamed) {
  StatusOr<ClusterInfo> c = ClusterInfoFromJson(R"({"tasks": [{"job": "w", "state": "DOWN"}]})");
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("tasks[0].state: unknown task state 'DOWN'"), std::string::npos)
      << c.status().ToString();
  c = ClusterInfoFromJson(R"({"tasks": [{"job": "w", "incarnation": "xyz"}]})");
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("tasks[0].incarnation"), std::string::npos) << c.status().ToString();
  c = ClusterInfoFromJson(R"({"tasks": [{"job": "w", "devices": [{"name": 3}]}]})");
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("tasks[0].devices[0].name"), std::string::npos) << c.status().ToString();
}

TEST(ClusterViews, Incarnation) {
  EXPECT_EQ(FormatIncarnation(1), "0000000000000001");
  EXPECT_EQ(*ParseIncarnation("00000000000000Ff"), 255u);
  EXPECT_FALSE(ParseIncarnation("ff").ok());
  EXPECT_FALSE(ParseIncarnation("000000000000000g").ok());
  EXPECT_EQ(TaskStateName(TaskState::kUp), "UP");
  EXPECT_EQ(*TaskStateFromName("UNREACHABLE"), TaskState::kUnreachable);
}

}  // namespace
}  // namespace flowstate

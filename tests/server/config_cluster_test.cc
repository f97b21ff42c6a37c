// config/: the cluster keys (`cluster`, `task`, `cluster_options`) from the
// file, the environment and flags, and their type and range checks.
#include "config/config.h"

#include <gtest/gtest.h>

#include <map>
#include <string>

namespace flowstate::config {
namespace {

auto Env(std::map<std::string, std::string> vars) {
  return [vars = std::move(vars)](const char* name) -> const char* {
    auto it = vars.find(name);
    return it == vars.end() ? nullptr : it->second.c_str();
  };
}

std::string Error(const std::string& json) {
  ServerConfig c;
  StatusOr<std::string> r = ParseConfigJson(json, &c);
  return r.ok() ? "" : r.status().message();
}

TEST(ConfigCluster, NoClusterByDefault) {
  ServerConfig c = DefaultConfig();
  EXPECT_TRUE(c.cluster.empty());
  EXPECT_EQ(c.task.type, "");
  EXPECT_EQ(c.task.index, -1);  // not set
  EXPECT_EQ(c.cluster_options.heartbeat_interval_seconds, 1);
  EXPECT_EQ(c.cluster_options.heartbeat_deadline_seconds, 5);
  EXPECT_EQ(c.cluster_options.step_deadline_seconds, 0);
  EXPECT_EQ(c.cluster_options.join_timeout_seconds, 120);
  EXPECT_EQ(c.cluster_options.orphan_session_seconds, 60);
  EXPECT_EQ(c.cluster_options.advertise_host, "");
}

TEST(ConfigCluster, FromTheFile) {
  ServerConfig c;
  StatusOr<std::string> r = ParseConfigJson(
      R"({"cluster": {"worker": ["10.0.0.1:50051", "10.0.0.2:50051"], "ps": ["10.0.0.3:50051"]},
          "task": {"type": "worker", "index": 1},
          "cluster_options": {"heartbeat_interval_seconds": 0.5, "heartbeat_deadline_seconds": 3}})",
      &c);
  ASSERT_TRUE(r.ok()) << r.status().message();
  ASSERT_EQ(c.cluster.size(), 2u);
  EXPECT_EQ(c.cluster.at("worker")[1], "10.0.0.2:50051");
  EXPECT_EQ(c.task.type, "worker");
  EXPECT_EQ(c.task.index, 1);
  EXPECT_EQ(c.cluster_options.heartbeat_interval_seconds, 0.5);
  EXPECT_NE(r->find("\"10.0.0.3:50051\""), std::string::npos);  // the merged JSON shows it
}

TEST(ConfigCluster, WrongTypesNameTheKey) {
  EXPECT_EQ(Error(R"({"cluster": ["h:1"]})"),
            "cluster: expected an object {\"<job>\": [\"host:port\", ...]}, got a list");
  EXPECT_EQ(Error(R"({"cluster": {"worker": "h:1"}})"),
            "cluster.worker: expected a list of \"host:port\" strings, got a string");
  EXPECT_EQ(Error(R"({"cluster": {"worker": ["h:1", 2]}})"),
            "cluster.worker[1]: expected a \"host:port\" string, got an integer");
  EXPECT_EQ(Error(R"({"task": {"index": "1"}})"), "task.index: expected an integer, got a string");
  EXPECT_EQ(Error(R"({"task": {"job": "worker"}})"), "task.job: unknown key");
  EXPECT_EQ(Error(R"({"cluster_options": {"heartbeat_interval_seconds": 0}})"),
            "cluster_options.heartbeat_interval_seconds: must be > 0");
  EXPECT_NE(Error(R"({"cluster_options": {"heartbeat_deadline_seconds": 1}})")
                .find("cluster_options.heartbeat_deadline_seconds: must be > cluster_options.heartbeat_interval_seconds"),
            std::string::npos);
  EXPECT_EQ(Error(R"({"cluster_options": {"step_deadline_seconds": -1}})"),
            "cluster_options.step_deadline_seconds: must be >= 0 (0: no limit)");
  EXPECT_EQ(Error(R"({"cluster_options": {"join_timeout_seconds": 0}})"),
            "cluster_options.join_timeout_seconds: must be > 0");
  EXPECT_EQ(Error(R"({"cluster_options": {"orphan_session_seconds": -1}})"),
            "cluster_options.orphan_session_seconds: must be >= 0");
  EXPECT_NE(Error(R"({"cluster_options": {"advertise_host": "h:1"}})").find("cluster_options.advertise_host"),
            std::string::npos);
  EXPECT_EQ(Error(R"({"cluster_options": {"heartbeat": 1}})"), "cluster_options.heartbeat: unknown key");
}

TEST(ConfigCluster, EnvironmentThenFlags) {
  ServerConfig c;
  StatusOr<std::string> r = LoadServerConfig(
      {}, Env({{"FLOWSTATE_CLUSTER", R"({"worker": ["a:1", "b:1"]})"}, {"FLOWSTATE_TASK_TYPE", "worker"},
               {"FLOWSTATE_TASK_INDEX", "1"}, {"FLOWSTATE_CLUSTER_OPTIONS_HEARTBEAT_DEADLINE_SECONDS", "9"}}),
      &c);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(c.cluster.at("worker"), (std::vector<std::string>{"a:1", "b:1"}));
  EXPECT_EQ(c.task.type, "worker");
  EXPECT_EQ(c.task.index, 1);
  EXPECT_EQ(c.cluster_options.heartbeat_deadline_seconds, 9);
  // Flags over the environment.
  r = LoadServerConfig({"--cluster", R"({"w": ["c:1"]})", "--task", "w:0"},
                       Env({{"FLOWSTATE_CLUSTER", R"({"worker": ["a:1"]})"}, {"FLOWSTATE_TASK_TYPE", "worker"}}), &c);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(c.cluster.size(), 1u);
  EXPECT_EQ(c.cluster.at("w")[0], "c:1");
  EXPECT_EQ(c.task.type, "w");
  EXPECT_EQ(c.task.index, 0);
  r = LoadServerConfig({"--set", R"(cluster={"x": ["d:1"]})"}, Env({}), &c);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(c.cluster.at("x")[0], "d:1");
}

TEST(ConfigCluster, BadEnvironmentAndFlagsNameTheSource) {
  ServerConfig c;
  StatusOr<std::string> r = LoadServerConfig({}, Env({{"FLOWSTATE_CLUSTER", "{worker"}}), &c);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("FLOWSTATE_CLUSTER: not valid JSON"), std::string::npos);
  r = LoadServerConfig({}, Env({{"FLOWSTATE_CLUSTER", R"({"w": [1]})"}}), &c);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(), "FLOWSTATE_CLUSTER.w[0]: expected a \"host:port\" string, got an integer");
  r = LoadServerConfig({"--task", "worker"}, Env({}), &c);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(), "--task worker: expected TYPE:INDEX (worker:1)");
  r = LoadServerConfig({"--task", "worker:one"}, Env({}), &c);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(), "--task: 'task.index' expects an integer, got 'one'");
  r = LoadServerConfig({"--task", "worker:-1"}, Env({}), &c);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(), "--task worker:-1: the index must be >= 0");
  r = LoadServerConfig({}, Env({{"FLOWSTATE_TASK_INDEX", "-2"}}), &c);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(), "task.index: must be >= 0 (-1: not set)");
  r = LoadServerConfig({"--cluster"}, Env({}), &c);
  ASSERT_FALSE(r.ok());
  r = LoadServerConfig({}, Env({{"FLOWSTATE_TASK_INDEX", "x"}}), &c);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(), "FLOWSTATE_TASK_INDEX: 'task.index' expects an integer, got 'x'");
}

}  // namespace
}  // namespace flowstate::config

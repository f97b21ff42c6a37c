// The cluster spec: TF_CONFIG / config JSON, the MASTER_* environment, and
// every bad input the spec refuses, each naming its field.
#include "distributed/cluster_spec.h"

#include <gtest/gtest.h>

#include <map>
#include <string>

namespace flowstate {
namespace {

// The environment ClusterSpecFromEnvironment sees (its getenv is a plain
// function pointer, so the table is a global).
std::map<std::string, std::string>* g_env = nullptr;
const char* FakeGetenv(const char* name) {
  auto it = g_env->find(name);
  return it == g_env->end() ? nullptr : it->second.c_str();
}

StatusOr<ClusterSpec> FromEnv(std::map<std::string, std::string> env) {
  g_env = &env;
  StatusOr<ClusterSpec> s = ClusterSpecFromEnvironment(FakeGetenv);
  g_env = nullptr;
  return s;
}

// The error of parsing `json` (config form, no field prefix); "" when it parsed.
std::string ParseError(const std::string& json, std::string_view field = "") {
  StatusOr<ClusterSpec> s = ParseClusterSpecJson(json, field);
  if (s.ok()) return "";
  EXPECT_EQ(s.status().code(), Code::kInvalidArgument) << s.status().ToString();
  return s.status().message();
}

TEST(ClusterSpec, ParsesJobsAndTask) {
  StatusOr<ClusterSpec> s = ParseClusterSpecJson(
      R"({"cluster": {"worker": ["10.0.0.1:50051", "10.0.0.2:50051"], "ps": ["ps0:2222"]},
          "task": {"type": "worker", "index": 1}, "environment": "cloud"})",
      "TF_CONFIG");
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(s->num_tasks(), 3);
  EXPECT_EQ(s->self, (TaskId{"worker", 1}));
  EXPECT_TRUE(s->complete());
  EXPECT_TRUE(s->registry.empty());
  std::vector<TaskId> tasks = s->tasks();
  ASSERT_EQ(tasks.size(), 3u);
  EXPECT_EQ(tasks[0], (TaskId{"ps", 0}));
  EXPECT_EQ(tasks[2], (TaskId{"worker", 1}));
  EXPECT_EQ(*s->address(TaskId{"worker", 1}), "10.0.0.2:50051");
  EXPECT_EQ(s->address(TaskId{"worker", 2}).status().code(), Code::kNotFound);
  EXPECT_EQ(TaskId({"worker", 1}).DeviceNamePrefix(), "/job:worker/task:1");
}

TEST(ClusterSpec, NoClusterIsEmpty) {
  for (const char* j : {"{}", R"({"cluster": {}})", R"({"cluster": null})", R"({"environment": "x"})"}) {
    StatusOr<ClusterSpec> s = ParseClusterSpecJson(j, "TF_CONFIG");
    ASSERT_TRUE(s.ok()) << j << ": " << s.status().ToString();
    EXPECT_TRUE(s->empty()) << j;
  }
  EXPECT_NE(ParseError(R"({"task": {"type": "worker", "index": 0}})").find("task: task 'worker' is given but there is no cluster"),
            std::string::npos);
}

TEST(ClusterSpec, IPv6AndHostNames) {
  StatusOr<ClusterSpec> s = ParseClusterSpecJson(
      R"({"cluster": {"w": ["[::1]:1", "[fe80::2]:65535", "host-1.example.com:80", "a_b:9"]},
          "task": {"type": "w", "index": 3}})", "");
  ASSERT_TRUE(s.ok()) << s.status().ToString();
}

TEST(ClusterSpec, DuplicateAddressNamesBothFields) {
  std::string e = ParseError(R"({"cluster": {"worker": ["h:1", "h:2", "h:1"]}, "task": {"type": "worker", "index": 0}})");
  EXPECT_NE(e.find("cluster.worker[2]: duplicate address 'h:1'"), std::string::npos) << e;
  EXPECT_NE(e.find("cluster.worker[0]"), std::string::npos) << e;
  // Across jobs, and spelled differently.
  for (const char* j : {R"({"cluster": {"ps": ["Host:7"], "worker": ["host.:07"]}, "task": {"type": "ps", "index": 0}})",
                        R"({"cluster": {"w": ["localhost:5", "127.0.0.1:5"]}, "task": {"type": "w", "index": 0}})",
                        R"({"cluster": {"w": ["[::1]:5", "localhost:5"]}, "task": {"type": "w", "index": 0}})",
                        R"({"cluster": {"w": ["[fe80::0:1]:5", "[FE80::1]:5"]}, "task": {"type": "w", "index": 0}})"}) {
    e = ParseError(j);
    EXPECT_NE(e.find("duplicate address"), std::string::npos) << j << ": " << e;
  }
  EXPECT_EQ(ParseError(R"({"cluster": {"w": ["h:1", "h:2", "g:1"]}, "task": {"type": "w", "index": 0}})"), "");
}

TEST(ClusterSpec, MalformedAddressNamesTheField) {
  const std::pair<const char*, const char*> cases[] = {
      {"h", "has no port"},
      {"h:", "has an empty port"},
      {":50051", "has an empty host"},
      {"h:0", "port out of range"},
      {"h:65536", "port out of range"},
      {"h:123456", "port out of range"},
      {"h:-1", "not a number"},
      {"h:8o", "not a number"},
      {"my host:1", "contains a space"},
      {" h:1", "contains a space"},
      {"h:1 ", "contains a space"},
      {"", "is empty"},
      {"::1:5", "more than one ':'"},
      {"[::1:5", "'[' without ']'"},
      {"[zz]:5", "malformed IPv6"},
      {"[::1]", "has no port"},
      {"h/x:5", "character other than"},
      {"0.0.0.0:5", "wildcard"},
      {"[::]:5", "wildcard"},
  };
  for (const auto& [addr, why] : cases) {
    std::string j = std::string(R"({"cluster": {"worker": ["ok:1", ")") + addr +
                    R"("]}, "task": {"type": "worker", "index": 0}})";
    std::string e = ParseError(j, "TF_CONFIG");
    EXPECT_NE(e.find("TF_CONFIG.cluster.worker[1]: address '" + std::string(addr) + "'"), std::string::npos)
        << addr << ": " << e;
    EXPECT_NE(e.find(why), std::string::npos) << addr << ": " << e;
  }
  EXPECT_NE(ParseError(R"({"cluster": {"worker": ["ok:1", 5]}, "task": {"type": "worker", "index": 0}})")
                .find("cluster.worker[1]: expected a \"host:port\" string, got an integer"),
            std::string::npos);
}

TEST(ClusterSpec, JobsMustBeNamedListsWithTasks) {
  EXPECT_NE(ParseError(R"({"cluster": {"worker": []}, "task": {"type": "worker", "index": 0}})")
                .find("cluster.worker: job 'worker' has no tasks"),
            std::string::npos);
  EXPECT_NE(ParseError(R"({"cluster": {"": ["h:1"]}, "task": {"type": "x", "index": 0}})").find("cluster.: job name ''"),
            std::string::npos);
  EXPECT_NE(ParseError(R"({"cluster": {"a/b": ["h:1"]}, "task": {"type": "a/b", "index": 0}})").find("cluster.a/b: job name"),
            std::string::npos);
  EXPECT_NE(ParseError(R"({"cluster": {"worker": "h:1"}, "task": {"type": "worker", "index": 0}})")
                .find("cluster.worker: expected a list"),
            std::string::npos);
  EXPECT_NE(ParseError(R"({"cluster": ["h:1"]})").find("cluster: expected an object of jobs"), std::string::npos);
  EXPECT_NE(ParseError(R"([1])").find("expected an object"), std::string::npos);
  EXPECT_NE(ParseError(R"({"cluster": )", "TF_CONFIG").find("TF_CONFIG: not valid JSON"), std::string::npos);
}

TEST(ClusterSpec, TaskMustNameAJobAndAnIndexInRange) {
  const std::string c = R"({"cluster": {"worker": ["a:1", "b:1", "c:1"], "ps": ["d:1"]}, )";
  std::string e = ParseError(c + R"("task": {"type": "worker", "index": 3}})");
  EXPECT_NE(e.find("task.index: 3 is out of range: job 'worker' has 3 task(s), indices 0..2"), std::string::npos) << e;
  e = ParseError(c + R"("task": {"type": "worker", "index": -1}})");
  EXPECT_NE(e.find("task.index: -1 is negative"), std::string::npos) << e;
  e = ParseError(c + R"("task": {"type": "chief", "index": 0}})", "TF_CONFIG");
  EXPECT_NE(e.find("TF_CONFIG.task.type: 'chief' is not a job of the cluster (jobs: ps, worker)"), std::string::npos) << e;
  e = ParseError(c + R"("task": {"index": 0}})");
  EXPECT_NE(e.find("task.type: required"), std::string::npos) << e;
  e = ParseError(c + R"("task": {"type": "worker"}})");
  EXPECT_NE(e.find("task.index: required"), std::string::npos) << e;
  e = ParseError(c + R"("task": {"type": "worker", "index": "1"}})");
  EXPECT_NE(e.find("task.index: expected an integer, got a string"), std::string::npos) << e;
  e = ParseError(c + R"("task": {"type": "worker", "index": 1.5}})");
  EXPECT_NE(e.find("task.index: expected an integer"), std::string::npos) << e;
  e = ParseError(c + R"("task": {"type": "worker", "index": 0, "idx": 1}})");
  EXPECT_NE(e.find("task.idx: unknown key"), std::string::npos) << e;
  e = ParseError(c + R"("task": "worker"})");
  EXPECT_NE(e.find("task: expected an object"), std::string::npos) << e;
  e = ParseError(R"({"cluster": {"worker": ["a:1"]}})");
  EXPECT_NE(e.find("task.type: required with a cluster"), std::string::npos) << e;
}

TEST(ClusterSpec, ValidateBuiltSpec) {
  ClusterSpec s;
  s.jobs["worker"] = {"a:1", "a:1"};
  s.self = {"worker", 0};
  Status st = ValidateClusterSpec(s, "cluster", "task");
  EXPECT_NE(st.message().find("cluster.worker[1]: duplicate address"), std::string::npos) << st.ToString();
  s.jobs["worker"] = {"a:1", ""};
  st = ValidateClusterSpec(s, "cluster", "task");
  EXPECT_NE(st.message().find("cluster.worker[1]: address '' is empty"), std::string::npos) << st.ToString();
  s.registry = "a:1";  // addresses learnt later may be empty
  EXPECT_TRUE(ValidateClusterSpec(s, "cluster", "task").ok());
  EXPECT_FALSE(s.complete());
  EXPECT_TRUE(ValidateClusterSpec(ClusterSpec{}, "cluster", "task").ok());
}

TEST(ClusterSpec, CanonicalAddress) {
  EXPECT_EQ(CanonicalTaskAddress("LocalHost:0080"), "loopback:80");
  EXPECT_EQ(CanonicalTaskAddress("[::1]:80"), "loopback:80");
  EXPECT_EQ(CanonicalTaskAddress("[0:0::0:2]:80"), "::2:80");
  EXPECT_EQ(CanonicalTaskAddress("Example.COM.:1"), "example.com:1");
  EXPECT_TRUE(CheckTaskAddress("h:65535", "f").ok());
}

// The host a task's listeners (a replica's all-reduce transport) bind.
TEST(ClusterSpec, AddressHost) {
  EXPECT_EQ(TaskAddressHost("10.0.0.2:2222"), "10.0.0.2");
  EXPECT_EQ(TaskAddressHost("[::1]:2222"), "::1");
  EXPECT_EQ(TaskAddressHost("worker-1.svc:50051"), "worker-1.svc");
  EXPECT_EQ(TaskAddressHost("no-port"), "");
}

TEST(ClusterSpecEnv, NothingSetIsEmpty) {
  StatusOr<ClusterSpec> s = FromEnv({});
  ASSERT_TRUE(s.ok());
  EXPECT_TRUE(s->empty());
  s = FromEnv({{"TF_CONFIG", ""}, {"RANK", ""}});  // empty counts as unset
  ASSERT_TRUE(s.ok());
  EXPECT_TRUE(s->empty());
}

TEST(ClusterSpecEnv, TfConfigWinsOverMaster) {
  StatusOr<ClusterSpec> s = FromEnv({{"TF_CONFIG", R"({"cluster": {"chief": ["c:1"], "worker": ["w:1"]},
                                                      "task": {"type": "chief", "index": 0}})"},
                                     {"MASTER_ADDR", "m"}, {"MASTER_PORT", "1"}, {"WORLD_SIZE", "2"}, {"RANK", "1"}});
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(s->self, (TaskId{"chief", 0}));
  EXPECT_TRUE(s->registry.empty());
  s = FromEnv({{"TF_CONFIG", R"({"cluster": {"worker": ["w:1"]}, "task": {"type": "worker", "index": 1}})"}});
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("TF_CONFIG.task.index: 1 is out of range"), std::string::npos)
      << s.status().ToString();
}

TEST(ClusterSpecEnv, MasterVariables) {
  StatusOr<ClusterSpec> s =
      FromEnv({{"MASTER_ADDR", "trainer-0.trainer"}, {"MASTER_PORT", "29500"}, {"WORLD_SIZE", "4"}, {"RANK", "2"}});
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(s->self, (TaskId{"worker", 2}));
  ASSERT_EQ(s->jobs.at("worker").size(), 4u);
  EXPECT_EQ(s->jobs.at("worker")[0], "trainer-0.trainer:29500");
  EXPECT_EQ(s->jobs.at("worker")[1], "");
  EXPECT_EQ(s->registry, "trainer-0.trainer:29500");
  EXPECT_FALSE(s->complete());
  // One task: nothing to learn.
  s = FromEnv({{"MASTER_ADDR", "::1"}, {"MASTER_PORT", "5"}, {"WORLD_SIZE", "1"}, {"RANK", "0"}});
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(s->jobs.at("worker")[0], "[::1]:5");
  EXPECT_TRUE(s->registry.empty());
  EXPECT_TRUE(s->complete());
}

TEST(ClusterSpecEnv, BadMasterVariablesNameTheVariable) {
  const std::map<std::string, std::string> ok = {
      {"MASTER_ADDR", "m"}, {"MASTER_PORT", "29500"}, {"WORLD_SIZE", "4"}, {"RANK", "1"}};
  const std::tuple<const char*, const char*, const char*> cases[] = {
      {"WORLD_SIZE", "four", "WORLD_SIZE: 'four' is not an integer"},
      {"WORLD_SIZE", "4 ", "WORLD_SIZE: '4 ' is not an integer"},
      {"WORLD_SIZE", "0", "WORLD_SIZE: 0 is out of range"},
      {"RANK", "1.0", "RANK: '1.0' is not an integer"},
      {"RANK", "4", "RANK: 4 is out of range: WORLD_SIZE is 4, ranks 0..3"},
      {"RANK", "-1", "RANK: -1 is negative"},
      {"MASTER_PORT", "0", "MASTER_PORT: '0' is not a port"},
      {"MASTER_PORT", "http", "MASTER_PORT: 'http' is not a port"},
      {"MASTER_ADDR", "a b", "MASTER_ADDR: address 'a b:29500' contains a space"},
      {"MASTER_ADDR", "0.0.0.0", "MASTER_ADDR: address '0.0.0.0:29500' has a wildcard host"},
  };
  for (const auto& [var, value, want] : cases) {
    std::map<std::string, std::string> env = ok;
    env[var] = value;
    StatusOr<ClusterSpec> s = FromEnv(env);
    ASSERT_FALSE(s.ok()) << var << "=" << value;
    EXPECT_EQ(s.status().code(), Code::kInvalidArgument);
    EXPECT_NE(s.status().message().find(want), std::string::npos) << s.status().ToString();
  }
  std::map<std::string, std::string> env = ok;
  env.erase("WORLD_SIZE");
  env.erase("MASTER_PORT");
  StatusOr<ClusterSpec> s = FromEnv(env);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("MASTER_PORT, WORLD_SIZE: not set"), std::string::npos) << s.status().ToString();
}

}  // namespace
}  // namespace flowstate

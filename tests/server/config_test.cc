// config/: the embedded default, and a file, environment variables and
// flags over it, each bad key or value an error naming it.
#include "config/config.h"

#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

namespace flowstate::config {
namespace {

// A getenv over a fixed map.
auto Env(std::map<std::string, std::string> vars) {
  return [vars = std::move(vars)](const char* name) -> const char* {
    auto it = vars.find(name);
    return it == vars.end() ? nullptr : it->second.c_str();
  };
}

TEST(Config, TheEmbeddedDefaultLoadsWithItsDocumentedValues) {
  ServerConfig c;
  StatusOr<std::string> r = LoadServerConfig({}, Env({}), &c);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(c.http.address, "127.0.0.1:8080");
  EXPECT_EQ(c.grpc.address, "127.0.0.1:50051");
  EXPECT_EQ(c.data_dir, "./var/flowstate");
  EXPECT_EQ(c.http.threads, 2);
  EXPECT_EQ(c.http.spin_us, 100);
  EXPECT_TRUE(c.http.server_timing);
  EXPECT_EQ(c.grpc.poll_strategy, "poll");
  EXPECT_TRUE(c.grpc.server_timing);
  EXPECT_TRUE(c.auth.tokens.empty());
  // DefaultConfig() is the same tree.
  ServerConfig d = DefaultConfig();
  EXPECT_EQ(d.http.address, c.http.address);
  EXPECT_EQ(d.grpc.poll_strategy, c.grpc.poll_strategy);
  EXPECT_NE(r->find("\"poll_strategy\""), std::string::npos);
}

TEST(Config, AnUnknownKeyOrAWrongTypeIsAnErrorNamingIt) {
  ServerConfig c;
  StatusOr<std::string> r = ParseConfigJson(R"({"jobs": {"max_runing": 3}})", &c);
  EXPECT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(), "jobs.max_runing: unknown key");
  r = ParseConfigJson(R"({"http": {"server_timing": "yes"}})", &c);
  EXPECT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(), "http.server_timing: expected a bool, got a string");
  r = ParseConfigJson(R"({"http": {"spin_us": 1.5}})", &c);
  EXPECT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(), "http.spin_us: expected an integer, got a number");
  r = ParseConfigJson(R"({"grpc": {"poll_strategy": "epollex"}})", &c);
  EXPECT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("grpc.poll_strategy"), std::string::npos) << r.status().message();
  r = ParseConfigJson(R"({"http": {"spin_us": -1}})", &c);
  EXPECT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(), "http.spin_us: must be in [0, 100000]");
  r = ParseConfigJson("{not json", &c);
  EXPECT_FALSE(r.ok());
}

TEST(Config, TheJsonNestingLimitDefaultsTo100AndIsRangeChecked) {
  ServerConfig c;
  ASSERT_TRUE(LoadServerConfig({}, Env({}), &c).ok());
  EXPECT_EQ(c.limits.max_json_depth, 100);
  StatusOr<std::string> r = LoadServerConfig({"--set", "limits.max_json_depth=32"}, Env({}), &c);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(c.limits.max_json_depth, 32);
  r = LoadServerConfig({}, Env({{"FLOWSTATE_LIMITS_MAX_JSON_DEPTH", "500"}}), &c);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(c.limits.max_json_depth, 500);
  for (const char* bad : {R"({"limits": {"max_json_depth": 0}})",
                          R"({"limits": {"max_json_depth": 10001}})",
                          R"({"limits": {"max_json_depth": 1e12}})"}) {
    r = ParseConfigJson(bad, &c);
    EXPECT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.status().message(), "limits.max_json_depth: must be in [1, 10000]") << bad;
  }
}

TEST(Config, FileThenEnvironmentThenFlags) {
  std::filesystem::path file =
      std::filesystem::temp_directory_path() / ("flowstate_config_test_" + std::to_string(::getpid()) + ".json");
  {
    std::ofstream out(file);
    out << R"({"http": {"address": "0.0.0.0:9000", "spin_us": 5}, "grpc": {"poll_strategy": ""}})";
  }
  ServerConfig c;
  StatusOr<std::string> r = LoadServerConfig({"--config", file.string(), "--grpc", "127.0.0.1:7000"},
                                  Env({{"FLOWSTATE_HTTP_SPIN_US", "7"},
                                       {"FLOWSTATE_HTTP_SERVER_TIMING", "false"},
                                       {"FLOWSTATE_GRPC_ADDRESS", "127.0.0.1:6000"}}),
                                  &c);
  std::filesystem::remove(file);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(c.http.address, "0.0.0.0:9000");  // the file
  EXPECT_EQ(c.http.spin_us, 7);               // the environment over the file
  EXPECT_FALSE(c.http.server_timing);
  EXPECT_EQ(c.grpc.address, "127.0.0.1:7000");  // the flag over the environment
  EXPECT_EQ(c.grpc.poll_strategy, "");

  r = LoadServerConfig({"--set", "http.server_timing=maybe"}, Env({}), &c);
  EXPECT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(), "--set: 'http.server_timing' expects true or false, got 'maybe'");
  r = LoadServerConfig({}, Env({{"FLOWSTATE_GRPC_POLL_STRATEGY", "select"}}), &c);
  EXPECT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("grpc.poll_strategy"), std::string::npos) << r.status().message();
  r = LoadServerConfig({"--verbose"}, Env({}), &c);
  EXPECT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(), "unknown flag --verbose");
  r = LoadServerConfig({"--config", "/nonexistent/flowstate.json"}, Env({}), &c);
  EXPECT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("/nonexistent/flowstate.json"), std::string::npos) << r.status().message();
}

// Issue 11: finished-job retention, device memory and static tensor sizes.
TEST(Config, JobRetentionAndMemoryLimitsHaveSafeDefaults) {
  ServerConfig c = DefaultConfig();
  EXPECT_EQ(c.jobs.retention_max_finished, 100);
  EXPECT_EQ(c.jobs.retention_seconds, 0);
  EXPECT_DOUBLE_EQ(c.devices.memory_limit_fraction, 0.8);
  EXPECT_EQ(c.devices.memory_limit_bytes, 0);
  EXPECT_EQ(c.devices.huge_pages_min_bytes, int64_t{64} << 20);
  EXPECT_EQ(c.limits.max_shape_bytes, int64_t(1) << 30);
  StatusOr<std::string> r = LoadServerConfig({"--set", "jobs.retention_seconds=86400", "--set", "devices.memory_limit_fraction=0.5"},
                                  Env({{"FLOWSTATE_LIMITS_MAX_SHAPE_BYTES", "1048576"}}), &c);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(c.jobs.retention_seconds, 86400);
  EXPECT_DOUBLE_EQ(c.devices.memory_limit_fraction, 0.5);
  EXPECT_EQ(c.limits.max_shape_bytes, 1048576);
  for (const auto& [json, error] : std::vector<std::pair<std::string, std::string>>{
           {R"({"jobs": {"retention_max_finished": -1}})", "jobs.retention_max_finished: must be >= 0 (0: no limit)"},
           {R"({"jobs": {"retention_seconds": -5}})", "jobs.retention_seconds: must be >= 0 (0: forever)"},
           {R"({"devices": {"memory_limit_fraction": 1.5}})", "devices.memory_limit_fraction: must be in (0, 1]"},
           {R"({"devices": {"memory_limit_bytes": -1}})", "devices.memory_limit_bytes: must be >= 0 (0: use the fraction)"},
           {R"({"devices": {"huge_pages_min_bytes": -1}})", "devices.huge_pages_min_bytes: must be >= 0 (0: no huge pages)"},
           {R"({"limits": {"max_shape_bytes": 0}})", "limits.max_shape_bytes: must be >= 1"}}) {
    r = ParseConfigJson(json, &c);
    EXPECT_FALSE(r.ok()) << json;
    EXPECT_EQ(r.status().message(), error) << json;
  }
}

}  // namespace
}  // namespace flowstate::config

namespace flowstate::config {
namespace {

TEST(Config, TheFrontendLimitsHaveSafeDefaultsAndAreChecked) {
  ServerConfig c = DefaultConfig();
  EXPECT_EQ(c.http.unauthenticated_body_limit_bytes, 65536);
  EXPECT_EQ(c.http.max_connections, 4096);
  EXPECT_EQ(c.grpc.max_concurrent_streams, 128);
  EXPECT_EQ(c.grpc.memory_limit_bytes, int64_t{256} << 20);
  EXPECT_EQ(c.limits.max_event_streams, 1024);
  StatusOr<std::string> r = ParseConfigJson(R"({"http": {"max_connections": 0}})", &c);
  EXPECT_EQ(r.status().message(), "http.max_connections: must be >= 1");
  r = ParseConfigJson(R"({"http": {"unauthenticated_body_limit_bytes": -1}})", &c);
  EXPECT_EQ(r.status().message(), "http.unauthenticated_body_limit_bytes: must be >= 0");
  r = ParseConfigJson(R"({"grpc": {"max_concurrent_streams": 0}})", &c);
  EXPECT_EQ(r.status().message(), "grpc.max_concurrent_streams: must be >= 1");
  r = ParseConfigJson(R"({"grpc": {"memory_limit_bytes": 1024}})", &c);
  EXPECT_EQ(r.status().message(), "grpc.memory_limit_bytes: must be 0 (none) or >= grpc.max_message_bytes");
  r = ParseConfigJson(R"({"limits": {"max_event_streams": 0}})", &c);
  EXPECT_EQ(r.status().message(), "limits.max_event_streams: must be >= 1");
  r = ParseConfigJson(R"({"grpc": {"memory_limit_bytes": 0}, "limits": {"max_event_streams": 5}})", &c);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(c.grpc.memory_limit_bytes, 0);
  EXPECT_EQ(c.limits.max_event_streams, 5);
}

}  // namespace
}  // namespace flowstate::config

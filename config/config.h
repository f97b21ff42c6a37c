// ServerConfig: everything `flowstate serve` can be told, and where it is
// told from. Later sources override earlier ones, key by key:
//
//   1. the embedded default, config/flowstate.json (compiled in);
//   2. a JSON file: --config FILE, or FLOWSTATE_CONFIG;
//   3. environment variables FLOWSTATE_<SECTION>_<KEY> for every key of the
//      default (FLOWSTATE_HTTP_ADDRESS, FLOWSTATE_JOBS_MAX_RUNNING,
//      FLOWSTATE_DATA_DIR; lists are comma-separated: FLOWSTATE_AUTH_TOKENS);
//   4. flags: --http ADDR, --grpc ADDR, --data-dir DIR, --data-root DIR, and
//      --set section.key=VALUE for any key.
//
// The cluster (`cluster`, `task`): `cluster` is the one key whose members
// the default does not list: {"<job>": ["host:port", ...], ...}, from the
// file, FLOWSTATE_CLUSTER (that JSON object) or --cluster JSON; `task` is
// {"type", "index"} (FLOWSTATE_TASK_TYPE, FLOWSTATE_TASK_INDEX, --task
// TYPE:INDEX). Here only their JSON types are checked; what makes a cluster
// valid (addresses, duplicates, the task in range) is checked by
// distributed/cluster_spec.h where `flowstate serve` builds the spec, which
// also falls back to TF_CONFIG and MASTER_* when `cluster` is empty.
//
// A key the default does not have is an error naming it (a typo must not be
// ignored), as is a value of the wrong JSON type. config/ depends on nothing
// of Flowstate's (DESIGN.md), so errors are plain strings.
//
// Value types; thread-compatible.
#ifndef FLOWSTATE_CONFIG_CONFIG_H_
#define FLOWSTATE_CONFIG_CONFIG_H_

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "graph/status.h"

namespace flowstate::config {

struct ServerConfig {
  struct Http {
    std::string address;
    int threads = 2;
    int64_t body_limit_bytes = 0;
    int64_t unauthenticated_body_limit_bytes = 65536;
    int max_connections = 4096;
    double read_timeout_seconds = 30;
    double idle_timeout_seconds = 60;
    int max_pipelined_requests = 16;
    int64_t inline_below_us = 500;
    int64_t spin_us = 100;
    bool server_timing = true;  // send Server-Timing headers
  } http;
  struct Grpc {
    std::string address;
    int64_t max_message_bytes = 0;
    int max_concurrent_streams = 128;  // per connection (HTTP/2 SETTINGS)
    int64_t memory_limit_bytes = 268435456;  // gRPC's ResourceQuota; 0: none
    int handler_threads = 2;
    int64_t inline_below_us = 500;
    int64_t spin_us = 100;
    std::string poll_strategy = "poll";  // SetGrpcPollStrategy (server/grpc/grpc_server.h)
    bool server_timing = true;           // "server-timing" trailing metadata
  } grpc;
  std::string data_dir;
  std::string data_root;
  struct Devices {
    int cpu_devices = 1;
    int intra_op_threads = 0;
    // The memory all CPU devices' tensors may hold together: this share of
    // physical memory, unless memory_limit_bytes (> 0) sets it in bytes.
    double memory_limit_fraction = 0.8;
    int64_t memory_limit_bytes = 0;
    // Host blocks of this size and more are advised as transparent huge
    // pages (graph/allocator.h, SetHostHugePageMinBytes); 0: none.
    int64_t huge_pages_min_bytes = int64_t{64} << 20;
  } devices;
  struct Jobs {
    int max_running = 2;
    int workers = 1;
    int inter_op_threads = 1;
    double max_step_events_per_second = 10;
    int retention_max_finished = 100;  // finished jobs kept; 0: all
    int64_t retention_seconds = 0;     // finished longer ago: deleted; 0: never
  } jobs;
  struct Sessions {
    double idle_timeout_seconds = 600;
    int max_sessions = 64;
    // The longest a session step (or a prediction) may run, whatever its
    // own timeout_ms: past it the step ends DEADLINE_EXCEEDED. 0: no bound.
    int64_t max_step_ms = 600000;
  } sessions;
  struct Server {
    // After SIGTERM, how long the server waits for steps to end and jobs
    // to stop (and be checkpointed) before it exits anyway, its stores
    // closed. A second SIGTERM or SIGINT forces the exit at once.
    double shutdown_timeout_s = 30;
  } server;
  struct Limits {
    int64_t max_tensor_bytes = 0;
    int max_event_streams = 1024;  // REST event streams and gRPC Watch calls together
    // The most bytes one tensor of a graph may have when its shape is known
    // before it runs (Variable, Fill, Zeros, ...): refused when validated.
    int64_t max_shape_bytes = 0;
    // Arrays/objects nested deeper in any client JSON are refused (400).
    int max_json_depth = 100;
    // Uploaded ONNX models (POST /v1/models): the largest, and how many
    // the server keeps.
    int64_t max_model_bytes = int64_t{64} << 20;
    int max_models = 100;
    int64_t max_dataset_bytes = int64_t{4} << 30;  // uploaded datasets (POST /v1/datasets)
    int max_datasets = 100;
  } limits;
  struct Auth {
    std::vector<std::string> tokens;  // empty: no authentication
    std::vector<std::string> open_routes;
  } auth;
  struct Log {
    bool requests = false;
  } log;
  // Job name -> its tasks' gRPC addresses, by index; empty: no cluster in
  // the configuration (TF_CONFIG or MASTER_* may still give one).
  std::map<std::string, std::vector<std::string>> cluster;
  struct Task {
    std::string type;    // "": not set here
    int64_t index = -1;  // -1: not set here; range-checked against the cluster, not here
  } task;
  struct ClusterOptions {
    // How often each task tells the others it is up, and how long without a
    // word before a task is reported UNREACHABLE (and its steps fail).
    double heartbeat_interval_seconds = 1;
    double heartbeat_deadline_seconds = 5;
    // The longest one step across tasks may run before it is aborted
    // everywhere with DEADLINE_EXCEEDED; 0: no limit.
    double step_deadline_seconds = 0;
    // MASTER_* clusters: how long a task waits for all WORLD_SIZE ranks to
    // join task 0's registry before it gives up (exit 1).
    double join_timeout_seconds = 120;
    // A master session's state on this task (its variables, kernels) is
    // dropped once the master's task restarted, or has been unreachable this
    // long; 0: only when the master closes it.
    double orphan_session_seconds = 60;
    // The host other tasks reach this one at (MASTER_* clusters); "":
    // $POD_IP, else the gRPC address's host unless a wildcard, else the
    // hostname (distributed/registry.h, AdvertisedHost).
    std::string advertise_host;
  } cluster_options;
};

// The embedded default configuration, as JSON text and parsed.
std::string_view DefaultConfigJson();
ServerConfig DefaultConfig();

// Merges every source into *config (starting from DefaultConfig()) and
// returns the merged configuration as JSON text; INVALID_ARGUMENT naming
// the key, flag or file otherwise ("jobs.max_runing: unknown key").
// `getenv` looks up environment variables (std::getenv in production).
// `args` are the flags after "serve"; unknown flags are errors.
StatusOr<std::string> LoadServerConfig(const std::vector<std::string>& args,
                            const std::function<const char*(const char*)>& getenv,
                            ServerConfig* config);

// The same for a JSON text alone on top of the default (for tests and
// --config parsing).
StatusOr<std::string> ParseConfigJson(std::string_view json, ServerConfig* config);

}  // namespace flowstate::config

#endif  // FLOWSTATE_CONFIG_CONFIG_H_

// ClusterSpec: the tasks of a Flowstate cluster and which one this process
// is — TensorFlow's cluster convention: named jobs ("worker", "ps", ...),
// each a list of task addresses ("host:port" of the task's gRPC port), and
// this process's (job, index).
//
// Read from the server configuration (`cluster` and `task`), from
// `TF_CONFIG` (the same JSON: {"cluster": {...}, "task": {"type", "index"}}),
// or from the variables that PyTorch-style launchers and Kubernetes training
// operators set (MASTER_ADDR, MASTER_PORT, WORLD_SIZE, RANK). Parsing checks
// everything a cluster needs before anything starts: every address is
// "host:port" with a port in 1..65535, no address appears twice, the task's
// job exists and its index is in range; errors name the field.
//
// A value type; no synchronization of its own.
#ifndef FLOWSTATE_DISTRIBUTED_CLUSTER_SPEC_H_
#define FLOWSTATE_DISTRIBUTED_CLUSTER_SPEC_H_

#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "graph/status.h"

namespace flowstate {

struct TaskId {
  std::string job;  // "worker"
  int index = 0;
  // "/job:worker/task:1": the prefix of this task's device names.
  std::string DeviceNamePrefix() const;
  bool operator==(const TaskId&) const = default;
  auto operator<=>(const TaskId&) const = default;
};

struct ClusterSpec {
  // Job name -> the addresses of its tasks, by task index.
  std::map<std::string, std::vector<std::string>> jobs;
  TaskId self;

  // True when no cluster was configured (a single process, job "localhost").
  bool empty() const { return jobs.empty(); }
  int num_tasks() const;
  // Every task, ordered by job name then index.
  std::vector<TaskId> tasks() const;
  // The address of a task; NOT_FOUND naming it when it is not in the spec.
  StatusOr<std::string> address(const TaskId& task) const;
};

// {"cluster": {"worker": ["h:p", ...], ...}, "task": {"type": "worker",
// "index": 1}}: TF_CONFIG's form and the server configuration's. `field`
// prefixes the names in errors ("TF_CONFIG", "cluster"). INVALID_ARGUMENT
// naming the field for anything malformed or inconsistent.
StatusOr<ClusterSpec> ParseClusterSpecJson(std::string_view json, std::string_view field);

// From the environment, in this order: TF_CONFIG; else MASTER_ADDR,
// MASTER_PORT, WORLD_SIZE and RANK (job "worker" of WORLD_SIZE tasks, this
// one RANK; how the other tasks' addresses are learnt is the
// implementation's documented rule); else an empty spec. `getenv` is
// injectable for tests (null: std::getenv).
StatusOr<ClusterSpec> ClusterSpecFromEnvironment(const char* (*getenv)(const char*) = nullptr);

}  // namespace flowstate

#endif  // FLOWSTATE_DISTRIBUTED_CLUSTER_SPEC_H_

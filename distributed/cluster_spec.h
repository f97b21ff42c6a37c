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
// "host:port" (or "[v6]:port") with a port in 1..65535, no address appears
// twice (also not spelled twice: "LOCALHOST:05000" is "127.0.0.1:5000"), a
// job has a name ([A-Za-z][A-Za-z0-9_-]*) and at least one task, the task's
// job exists and its index is in range; errors name the field
// ("cluster.worker[2]", "task.index", "TF_CONFIG.task.type", "RANK").
//
// MASTER_* rule: the cluster is job "worker" of WORLD_SIZE tasks and this
// process is task RANK. Task 0's address is MASTER_ADDR:MASTER_PORT (task 0
// serves its gRPC port there); the others' are not in the environment:
// every task registers the address it advertises with task 0's registry at
// MASTER_ADDR:MASTER_PORT and learns the whole list from it, as torchrun's
// c10d rendezvous does (distributed/registry.h, JoinCluster). Until then the
// spec has `registry` set and empty addresses for the tasks not yet known.
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
  // Job name -> the addresses of its tasks, by task index. An address is ""
  // only while it is still to be learnt from the registry (below).
  std::map<std::string, std::vector<std::string>> jobs;
  TaskId self;
  // "host:port" of task 0's registry when the tasks' addresses are learnt at
  // startup (MASTER_* environment); "" when every address is given.
  std::string registry;

  // True when no cluster was configured (a single process, job "localhost").
  bool empty() const { return jobs.empty(); }
  // Every address is known (no registry left to ask).
  bool complete() const;
  int num_tasks() const;
  // Every task, ordered by job name then index.
  std::vector<TaskId> tasks() const;
  // The address of a task; NOT_FOUND naming it when it is not in the spec.
  StatusOr<std::string> address(const TaskId& task) const;
};

// {"cluster": {"worker": ["h:p", ...], ...}, "task": {"type": "worker",
// "index": 1}}: TF_CONFIG's form and the server configuration's. `field`
// prefixes the names in errors ("TF_CONFIG" gives "TF_CONFIG.cluster.worker[1]";
// "" gives "cluster.worker[1]"). Other top-level keys (TF_CONFIG's
// "environment", "rpc_layer") are ignored. No "cluster", or an empty one,
// is the empty spec (a "task" then is an error: a task of no cluster). With
// a cluster, "task" is required ({"type", "index"}, both required).
// INVALID_ARGUMENT naming the field for anything malformed or inconsistent.
StatusOr<ClusterSpec> ParseClusterSpecJson(std::string_view json, std::string_view field);

// The checks ParseClusterSpecJson makes, on a spec built otherwise (the
// server configuration's typed `cluster` and `task`): `cluster_field` and
// `task_field` name the two in errors ("cluster", "task"). Empty addresses
// are allowed only when spec.registry is set. OK for the empty spec.
Status ValidateClusterSpec(const ClusterSpec& spec, std::string_view cluster_field,
                           std::string_view task_field);

// One address: "host:port" or "[v6]:port", no spaces, a non-empty host that
// another task can reach (not 0.0.0.0 or ::), a port in 1..65535.
// INVALID_ARGUMENT naming `field` otherwise.
Status CheckTaskAddress(std::string_view address, std::string_view field);
// The host of an address, without brackets ("::1" of "[::1]:2222"); "" when
// the address is malformed.
std::string TaskAddressHost(std::string_view address);
// The form two spellings of one host:port share (lower case, the port as a
// number, IP literals in canonical form, localhost/127.0.0.1/[::1] as one),
// for duplicate checks. REQUIRES: CheckTaskAddress passed.
std::string CanonicalTaskAddress(std::string_view address);

// From the environment, in this order: TF_CONFIG; else MASTER_ADDR,
// MASTER_PORT, WORLD_SIZE and RANK (all four, or none; see the MASTER_*
// rule above); else an empty spec. `getenv` is injectable for tests (null:
// std::getenv). INVALID_ARGUMENT naming the variable for a malformed value
// (WORLD_SIZE or RANK not an integer, RANK >= WORLD_SIZE, ...).
StatusOr<ClusterSpec> ClusterSpecFromEnvironment(const char* (*getenv)(const char*) = nullptr);

}  // namespace flowstate

#endif  // FLOWSTATE_DISTRIBUTED_CLUSTER_SPEC_H_

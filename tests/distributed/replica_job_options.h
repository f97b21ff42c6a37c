// What the tests of replicas across tasks share: the options of a
// TrainingJob whose replicas run on the tasks of a LocalCluster (task 0 its
// master), and a small embedding model with a partitioned table and its
// data.
#ifndef FLOWSTATE_TESTS_DISTRIBUTED_REPLICA_JOB_OPTIONS_H_
#define FLOWSTATE_TESTS_DISTRIBUTED_REPLICA_JOB_OPTIONS_H_

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>

#include "jobs/training_job.h"
#include "tests/distributed/local_cluster.h"

namespace flowstate::testing {

// The replicas meet in the collective store at `store_address` under
// `prefix`; files are read beneath `data_root`. A collective call that
// waits 30 s fails: a hang becomes a failure.
inline TrainingJobOptions ReplicasAcross(LocalCluster& cluster, const std::string& store_address,
                                         const std::string& prefix, const std::string& data_root) {
  TrainingJobOptions o;
  o.devices = cluster.task(0).pool.get();
  o.remote = cluster.task(0).cluster.get();
  o.collective_store = store_address;
  o.collective_prefix = prefix;
  o.data_root = data_root;
  o.allreduce_timeout = std::chrono::seconds(30);
  return o;
}

// ids.csv in `dir`: 90 rows of (id, target), id in [0, 30), the target a
// function of it (batches of 8 leave an epoch's last step short).
inline void WriteIdsCsv(const std::filesystem::path& dir) {
  std::ofstream f(dir / "ids.csv");
  f << "id,target\n";
  for (int i = 0; i < 90; ++i) f << (i * 7) % 30 << "," << std::sin(0.3 * ((i * 7) % 30)) << "\n";
}

// The graph (a JSON object) of a table "T" of 30 rows in 3 parts (by
// `strategy`) looked up by placeholder "ids" ("emb"), a 4-vector "w" on top,
// the squared error against "y" as "loss"; `extra_nodes` (", {...}, ...")
// are appended.
inline std::string EmbeddingGraphJson(const std::string& strategy = "mod",
                                      const std::string& extra_nodes = "") {
  return R"({"nodes": [
    {"name": "ids", "op": "Placeholder", "attrs": {"dtype": "int32", "shape": [-1]}},
    {"name": "y", "op": "Placeholder", "attrs": {"dtype": "float32", "shape": [-1]}},
    {"name": "T", "op": "Variable", "attrs": {"dtype": "float32", "shape": [30, 4],
      "init": "uniform", "partitions": 3, "partition_strategy": ")" + strategy + R"("}},
    {"name": "w", "op": "Variable", "attrs": {"dtype": "float32", "shape": [4], "init": "uniform"}},
    {"name": "emb", "op": "Gather", "inputs": ["T", "ids"]},
    {"name": "weighted", "op": "Mul", "inputs": ["emb", "w"]},
    {"name": "row_axis", "op": "Const", "attrs": {"dtype": "int32", "value": 1}},
    {"name": "pred", "op": "Sum", "inputs": ["weighted", "row_axis"]},
    {"name": "err", "op": "Sub", "inputs": ["pred", "y"]},
    {"name": "sq", "op": "Square", "inputs": ["err"]},
    {"name": "axes", "op": "Const", "attrs": {"dtype": "int32", "value": []}},
    {"name": "loss", "op": "Mean", "inputs": ["sq", "axes"]})" + extra_nodes + R"(
  ]})";
}

// The input section of a job reading ids.csv (WriteIdsCsv) for that graph.
inline std::string IdsInputJson(int epochs, bool shuffle) {
  return R"({"format": "csv", "files": {"ids": "ids.csv", "y": "ids.csv"},
             "columns": {"ids": {"columns": ["id"], "dtype": "int32"}, "y": ["target"]},
             "header": true, "batch_size": 8, "epochs": )" + std::to_string(epochs) +
         R"(, "shuffle": )" + (shuffle ? "true" : "false") + "}";
}

}  // namespace flowstate::testing

#endif  // FLOWSTATE_TESTS_DISTRIBUTED_REPLICA_JOB_OPTIONS_H_

// The options of a TrainingJob whose replicas run on the tasks of a
// LocalCluster (task 0 its master), for the tests of replicas across tasks.
#ifndef FLOWSTATE_TESTS_DISTRIBUTED_REPLICA_JOB_OPTIONS_H_
#define FLOWSTATE_TESTS_DISTRIBUTED_REPLICA_JOB_OPTIONS_H_

#include <chrono>
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

}  // namespace flowstate::testing

#endif  // FLOWSTATE_TESTS_DISTRIBUTED_REPLICA_JOB_OPTIONS_H_

// One task of a test cluster in its own process (test-only):
//
//   test_task_main --index I [--port P] [--cluster ADDR0,ADDR1,...]
//
// Creates a DevicePool named /job:worker/task:I, serves the Worker service
// on 127.0.0.1:P (0 or absent: a free port) and prints "PORT <port>" on
// stdout. The cluster's addresses (job "worker", by index) come from
// --cluster or, when absent, as one line on stdin (so that a test can start
// every task on a free port first). Runs until stdin closes or it is killed;
// it also dies with its parent (PR_SET_PDEATHSIG), so a crashed test leaves
// no task behind.
#include <sys/prctl.h>

#include <csignal>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <sstream>
#include <string>

#include "devices/device_pool.h"
#include "distributed/cluster.h"
#include "distributed/worker_service.h"
#include "tests/distributed/test_ops.h"

int main(int argc, char** argv) {
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  int index = -1, port = 0;
  std::string cluster_line;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string flag = argv[i];
    if (flag == "--index") index = std::atoi(argv[i + 1]);
    else if (flag == "--port") port = std::atoi(argv[i + 1]);
    else if (flag == "--cluster") cluster_line = argv[i + 1];
  }
  if (index < 0) {
    std::fprintf(stderr, "usage: test_task_main --index I [--port P] [--cluster A,B,...]\n");
    return 2;
  }
  flowstate::testing::RegisterDistributedTestOps();
  flowstate::DevicePoolOptions po;
  po.job = "worker";
  po.task = index;
  po.num_cpu_devices = 1;
  po.intra_op_threads = 1;
  auto pool = flowstate::DevicePool::Create(po).value();
  flowstate::WorkerServiceOptions wo;
  wo.inter_op_threads = 2;
  flowstate::WorkerService service(nullptr, wo);
  auto selected = service.Start("127.0.0.1", port);
  if (!selected.ok()) {
    std::fprintf(stderr, "%s\n", selected.status().ToString().c_str());
    return 1;
  }
  std::printf("PORT %d\n", *selected);
  std::fflush(stdout);
  if (cluster_line.empty() && !std::getline(std::cin, cluster_line)) return 1;
  flowstate::ClusterOptions co;
  std::stringstream ss(cluster_line);
  for (std::string a; std::getline(ss, a, ',');) co.spec.jobs["worker"].push_back(a);
  co.spec.self = flowstate::TaskId{"worker", index};
  co.devices = pool.get();
  co.heartbeat_interval_s = 0.5;
  co.heartbeat_deadline_s = 1.0;
  co.rpc_timeout_s = 5;
  co.step_timeout_s = 60;
  auto cluster = flowstate::Cluster::Create(co);
  if (!cluster.ok()) {
    std::fprintf(stderr, "%s\n", cluster.status().ToString().c_str());
    return 1;
  }
  service.Attach(cluster->get());
  // Until the test closes our stdin (or kills us).
  std::string ignored;
  while (std::getline(std::cin, ignored)) {
  }
  service.Shutdown();
  return 0;
}

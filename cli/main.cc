// The `flowstate` binary: subcommands train, serve, worker, checkpoints, and the
// client commands jobs, run and cluster.
#include <cstdio>
#include <cstring>
#include <string>

#include "cli/commands.h"

namespace {

constexpr const char* kUsage =
    "usage: flowstate <command> [args]\n"
    "commands:\n"
    "  serve            run the training service (flowstate serve --help)\n"
    "  worker           run a task of a cluster that only computes (flowstate worker --help)\n"
    "  train JOB.json   run a training job in-process (flowstate train --help)\n"
    "  checkpoints      list, export, import checkpoints of a data directory\n"
    "  jobs             submit, list, get, watch, cancel, plot jobs of a server (flowstate jobs --help)\n"
    "  run GRAPH.json   run a graph once on a server (flowstate run --help)\n"
    "  cluster          the tasks of a server's cluster (flowstate cluster --help)\n"
    "  models           upload, list and delete ONNX models; export a job's trained one\n"
    "                   (flowstate models --help)\n";

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fputs(kUsage, stderr);
    return 2;
  }
  std::string cmd = argv[1];
  if (cmd == "train") return flowstate::TrainCommand(argc - 2, argv + 2);
  if (cmd == "serve") return flowstate::ServeCommand(argc - 2, argv + 2);
  if (cmd == "worker") return flowstate::WorkerCommand(argc - 2, argv + 2);
  if (cmd == "checkpoints") return flowstate::CheckpointsCommand(argc - 2, argv + 2);
  if (cmd == "jobs") return flowstate::JobsCommand(argc - 2, argv + 2);
  if (cmd == "run") return flowstate::RunCommand(argc - 2, argv + 2);
  if (cmd == "cluster") return flowstate::ClusterCommand(argc - 2, argv + 2);
  if (cmd == "models") return flowstate::ModelsCommand(argc - 2, argv + 2);
  if (cmd == "-h" || cmd == "--help" || cmd == "help") {
    std::fputs(kUsage, stdout);
    return 0;
  }
  std::fprintf(stderr, "flowstate: unknown command '%s'\n%s", cmd.c_str(), kUsage);
  return 2;
}

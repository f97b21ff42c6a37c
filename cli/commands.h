// The subcommands of the `flowstate` binary. Each returns the process exit
// code: 0 success, 1 a runtime failure, 2 bad usage or a bad job file.
#ifndef FLOWSTATE_CLI_COMMANDS_H_
#define FLOWSTATE_CLI_COMMANDS_H_

namespace flowstate {

// flowstate train JOB.json [--metrics-out FILE] [--threads N] [--data-root DIR] [--plot FILE]
int TrainCommand(int argc, char** argv);

// flowstate serve [--config FILE] [--http ADDR] [--grpc ADDR] [--data-dir DIR] ...
int ServeCommand(int argc, char** argv);

// flowstate worker [--config FILE] [--grpc ADDR] [--cluster JSON] [--task TYPE:INDEX] ...
// (`serve` for a host that only computes: the gRPC port alone)
int WorkerCommand(int argc, char** argv);

// flowstate checkpoints list JOB | export JOB STEP FILE | import FILE [--data-dir DIR]
int CheckpointsCommand(int argc, char** argv);

// flowstate jobs submit FILE | list | get ID | watch ID | cancel ID | plot ID --out FILE
//                [--server URL] [--token T]
int JobsCommand(int argc, char** argv);

// flowstate models upload FILE.onnx | list | get ID | delete ID | export JOB --out FILE
//                  [--server URL] [--token T]
int ModelsCommand(int argc, char** argv);

// flowstate cluster [--json] [--server URL] [--token T]: GET /v1/cluster
int ClusterCommand(int argc, char** argv);

// flowstate run GRAPH.json --feed NAME=JSON --fetch NAME ... [--server URL] [--token T]
int RunCommand(int argc, char** argv);

}  // namespace flowstate

#endif  // FLOWSTATE_CLI_COMMANDS_H_

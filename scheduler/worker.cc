#include "scheduler/worker.h"

#include "scheduler/wait.h"

namespace flowstate {

Status Worker::RunGraphSync(RegisteredGraph* graph, const RunGraphArgs& args) {
  return RunAndWait([&](StatusCallback done) { RunGraph(graph, args, std::move(done)); });
}

}  // namespace flowstate

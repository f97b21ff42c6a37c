#include "scheduler/worker.h"

#include <condition_variable>
#include <mutex>

namespace flowstate {

Status Worker::RunGraphSync(RegisteredGraph* graph, const RunGraphArgs& args) {
  // `done` touches the waiter only under the mutex, so it cannot vanish
  // under it.
  std::mutex mu;
  std::condition_variable cv;
  bool finished = false;
  Status status;
  RunGraph(graph, args, [&](const Status& s) {
    std::lock_guard<std::mutex> l(mu);
    status = s;
    finished = true;
    cv.notify_one();
  });
  std::unique_lock<std::mutex> l(mu);
  cv.wait(l, [&] { return finished; });
  return status;
}

}  // namespace flowstate

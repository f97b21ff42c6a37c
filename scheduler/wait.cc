#include "scheduler/wait.h"

#include <condition_variable>
#include <mutex>

namespace flowstate {

Status RunAndWait(const std::function<void(std::function<void(const Status&)> done)>& start) {
  // `done` touches the waiter only under its mutex, so the waiter cannot
  // vanish under it; it captures one pointer, so it needs no allocation.
  struct Waiter {
    std::mutex mu;
    std::condition_variable cv;
    bool finished = false;
    Status status;
  } w;
  start([&w](const Status& s) {
    std::lock_guard<std::mutex> l(w.mu);
    w.status = s;
    w.finished = true;
    w.cv.notify_one();
  });
  std::unique_lock<std::mutex> l(w.mu);
  w.cv.wait(l, [&] { return w.finished; });
  return w.status;
}

}  // namespace flowstate

#include "scheduler/wait.h"
#include "graph/mutex.h"


namespace flowstate {

Status RunAndWait(const std::function<void(std::function<void(const Status&)> done)>& start) {
  // `done` touches the waiter only under its mutex, so the waiter cannot
  // vanish under it; it captures one pointer, so it needs no allocation.
  struct Waiter {
    Mutex mu;
    CondVar cv;
    bool finished = false;
    Status status;
  } w;
  start([&w](const Status& s) {
    MutexLock l(w.mu);
    w.status = s;
    w.finished = true;
    w.cv.NotifyOne();
  });
  MutexLock l(w.mu);
  while (!w.finished) w.cv.Wait(w.mu);
  return w.status;
}

}  // namespace flowstate

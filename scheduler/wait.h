// RunAndWait: the blocking form of an asynchronous call that reports once
// through a status callback (Executor::Run, Worker::RunGraphSync). A free
// function; thread-safe; the callback may run on any thread, before or
// after `start` returns.
#ifndef FLOWSTATE_SCHEDULER_WAIT_H_
#define FLOWSTATE_SCHEDULER_WAIT_H_

#include <functional>

#include "graph/status.h"

namespace flowstate {

// Calls start(done), waits until `done` has been called (exactly once), and
// returns the status it got.
Status RunAndWait(const std::function<void(std::function<void(const Status&)> done)>& start);

}  // namespace flowstate

#endif  // FLOWSTATE_SCHEDULER_WAIT_H_

// Rendezvous: where a step's Send and Recv nodes meet. Each cross-device
// edge of a partitioned graph becomes a _Send on the producer's device and a
// _Recv on the consumer's, sharing a key; the first to arrive waits for the
// other. One Rendezvous serves one step (so the step is part of the key);
// this in-process one is a table, the cross-task one (later) speaks gRPC.
//
// Thread-safe. Receivers never block a thread: RecvAsync calls `done` when
// the value arrives (possibly on the sender's thread) or when the step is
// aborted.
#ifndef FLOWSTATE_SCHEDULER_RENDEZVOUS_H_
#define FLOWSTATE_SCHEDULER_RENDEZVOUS_H_

#include <functional>
#include <mutex>
#include <string>
#include <unordered_map>

#include "graph/status.h"
#include "graph/tensor.h"

namespace flowstate {

class Rendezvous {
 public:
  using DoneCallback = std::function<void(const Status&, const Tensor&)>;

  Rendezvous() = default;
  ~Rendezvous();

  // ALREADY_EXISTS if the key was sent before; the abort status after
  // StartAbort().
  Status Send(const std::string& key, const Tensor& value);
  void RecvAsync(const std::string& key, DoneCallback done);
  // Fails every pending and future Recv (and Send) with `status`.
  void StartAbort(const Status& status);

 private:
  struct Item {
    bool has_value = false;
    Tensor value;
    DoneCallback waiter;
  };
  std::mutex mu_;
  Status aborted_;  // GUARDED_BY(mu_)
  std::unordered_map<std::string, Item> table_;  // GUARDED_BY(mu_)
};

}  // namespace flowstate

#endif  // FLOWSTATE_SCHEDULER_RENDEZVOUS_H_

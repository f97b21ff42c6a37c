// The collective store: the rendezvous of collective groups (api/worker.proto,
// service CollectiveStore: Set (or set if absent), Get, Wait, Add,
// DropPrefix), through which the ranks of a Gloo group publish their
// transport addresses and their failure records
// (distributed/gloo_collective.h), and the replicas of a job with backup
// replicas race for each step's places and settle its outcome
// (store_step_race.h).
//
// CollectiveStoreService is the server side. It holds keys per prefix (one
// prefix per membership of a job) in memory, bounded: at most
// `max_prefixes` prefixes, and per prefix `max_keys` keys and `max_bytes`
// bytes of keys and values; a Set beyond fails RESOURCE_EXHAUSTED naming the
// prefix and the cap, and changes nothing. A membership that ends drops its
// prefix (DropPrefix, also over gRPC), which fails that prefix's pending
// Waits ABORTED. A Wait holds no thread: it is answered when its last key is
// set, or at its timeout with DEADLINE_EXCEEDED naming the missing keys. It
// is served on a server of the caller's (RegisterOn: the master task's gRPC
// server hosts it) or on its own port (Start).
//
// CollectiveStoreClient is the client side: plain calls with deadlines, the
// store's errors as Status (UNAVAILABLE when the store cannot be reached by
// the deadline).
//
// Both are thread-safe. The service's Shutdown() (also run by the
// destructor) answers pending Waits UNAVAILABLE and stops its own server; a
// server of the caller's must be shut down by the caller before the service
// is destroyed.
#ifndef FLOWSTATE_DISTRIBUTED_COLLECTIVE_STORE_H_
#define FLOWSTATE_DISTRIBUTED_COLLECTIVE_STORE_H_

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "graph/status.h"

namespace grpc {
class ServerBuilder;
}

namespace flowstate {

struct CollectiveStoreOptions {
  int max_prefixes = 1024;              // prefixes held at once
  int max_keys = 4096;                  // keys per prefix
  int64_t max_bytes = 16 << 20;         // bytes of keys and values per prefix
  int max_waits = 4096;                 // pending Waits, all prefixes together
};

class CollectiveStoreService {
 public:
  explicit CollectiveStoreService(const CollectiveStoreOptions& options = {});
  ~CollectiveStoreService();
  CollectiveStoreService(const CollectiveStoreService&) = delete;
  CollectiveStoreService& operator=(const CollectiveStoreService&) = delete;

  // Adds the service to `builder` (before BuildAndStart).
  void RegisterOn(::grpc::ServerBuilder* builder);
  // Serves on its own server at host:port (0: a free port); returns the port.
  StatusOr<int> Start(const std::string& host, int port);
  // See above. Idempotent.
  void Shutdown();

  // Forgets `prefix` and every prefix under it ("prefix/..."); their pending
  // Waits fail ABORTED. Returns how many prefixes were dropped.
  int DropPrefix(const std::string& prefix);

  // What the store holds now (for tests and metrics).
  int num_prefixes() const;
  int num_keys(const std::string& prefix) const;
  int64_t num_bytes(const std::string& prefix) const;

  class Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

class CollectiveStoreClient {
 public:
  using Deadline = std::chrono::steady_clock::time_point;

  // A client of the store at `address` ("host:port"). Connects lazily; calls
  // wait for the connection until their deadline.
  static std::shared_ptr<CollectiveStoreClient> Connect(const std::string& address);
  ~CollectiveStoreClient();

  const std::string& address() const;

  Status Set(const std::string& prefix, const std::string& key, const std::string& value,
             Deadline deadline);
  // Sets the key unless it is set already: the first writer wins. Answers
  // the value the key holds (the first writer's) and whether this call set
  // it.
  struct Claim {
    std::string value;
    bool set = false;
  };
  StatusOr<Claim> SetIfAbsent(const std::string& prefix, const std::string& key,
                              const std::string& value, Deadline deadline);
  // NOT_FOUND unless the key is set.
  StatusOr<std::string> Get(const std::string& prefix, const std::string& key, Deadline deadline);
  // OK once every key is set; DEADLINE_EXCEEDED at `deadline`, with the keys
  // still missing in *missing (when not null).
  Status Wait(const std::string& prefix, const std::vector<std::string>& keys, Deadline deadline,
              std::vector<std::string>* missing = nullptr);
  // Adds `delta` to the key's integer value (unset: 0) atomically; returns
  // the sum. INVALID_ARGUMENT when the key holds something else.
  StatusOr<int64_t> Add(const std::string& prefix, const std::string& key, int64_t delta,
                        Deadline deadline);
  Status DropPrefix(const std::string& prefix, Deadline deadline);

  class Impl;

 private:
  explicit CollectiveStoreClient(std::unique_ptr<Impl> impl);
  StatusOr<Claim> SetKey(const std::string& prefix, const std::string& key,
                         const std::string& value, bool if_absent, Deadline deadline);
  std::unique_ptr<Impl> impl_;
};

}  // namespace flowstate

#endif  // FLOWSTATE_DISTRIBUTED_COLLECTIVE_STORE_H_

// The cluster registry of MASTER_*-started clusters (distributed/cluster_spec.h,
// "MASTER_* rule"; api/registry.proto): task 0 keeps a ClusterRegistry and
// serves it on its gRPC port at MASTER_ADDR:MASTER_PORT; every task, task 0
// included, calls JoinCluster, which registers the address the task
// advertises and waits, within a deadline, until all WORLD_SIZE ranks have
// joined, so that every task ends up with the same complete ClusterSpec.
//
// A rank that joins again (a restarted pod) replaces its address; an address
// that another rank already has is refused. gRPC types stay in registry.cc:
// service() hands out the grpc::Service to register on a ServerBuilder.
//
// Thread safety: ClusterRegistry is thread-safe; JoinCluster blocks the
// calling thread until the world assembles or the deadline passes.
#ifndef FLOWSTATE_DISTRIBUTED_REGISTRY_H_
#define FLOWSTATE_DISTRIBUTED_REGISTRY_H_

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "distributed/cluster_spec.h"
#include "graph/status.h"

namespace grpc {
class Service;
}  // namespace grpc

namespace flowstate {

class ClusterRegistry {
 public:
  struct Members {
    std::vector<std::string> addresses;  // by rank; "" until the rank joins
    bool complete = false;
  };

  // REQUIRES: world_size >= 1.
  explicit ClusterRegistry(int world_size);
  ~ClusterRegistry();
  ClusterRegistry(const ClusterRegistry&) = delete;
  ClusterRegistry& operator=(const ClusterRegistry&) = delete;

  // Records rank's address and answers with what is known. INVALID_ARGUMENT
  // naming the field for a different world size ("WORLD_SIZE"), a rank out of
  // range ("RANK"), a malformed address or one another rank has ("address").
  StatusOr<Members> Join(int world_size, int rank, const std::string& address);
  Members members() const;

  // The gRPC service (flowstate.registry.v1.Registry) over this registry, to
  // pass to ServerBuilder::RegisterService. Owned here: the registry must
  // outlive the server it is registered on.
  grpc::Service* service();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Completes `partial` (partial.registry set, self = worker:RANK): joins with
// `advertise` as this task's address (task 0 joins `local` with its own
// address, MASTER_ADDR:MASTER_PORT; the others call Registry/Join at
// partial.registry), then asks again every `poll` until every rank has
// joined. DEADLINE_EXCEEDED after `timeout`, naming the ranks that did not
// join (or that task 0's registry could not be reached, with gRPC's error);
// INVALID_ARGUMENT as the registry answers it. The result passes
// ValidateClusterSpec. A spec without a registry is returned as it is.
// `cancel` (may be null), once true, ends the wait with CANCELLED within
// about one `poll` (a process told to stop while it waits).
StatusOr<ClusterSpec> JoinCluster(const ClusterSpec& partial, const std::string& advertise,
                                  ClusterRegistry* local, std::chrono::milliseconds timeout,
                                  std::chrono::milliseconds poll = std::chrono::milliseconds(100),
                                  const std::atomic<bool>* cancel = nullptr);

// The host this task advertises to the others: `configured` when set
// (cluster_options.advertise_host), else $POD_IP (Kubernetes' downward API),
// else `listen_host` (the gRPC address's host) unless it is a wildcard
// ("", 0.0.0.0, [::]), else the machine's hostname. `getenv` as in
// ClusterSpecFromEnvironment (null: std::getenv).
std::string AdvertisedHost(const std::string& configured, const std::string& listen_host,
                           const char* (*getenv)(const char*) = nullptr);

}  // namespace flowstate

#endif  // FLOWSTATE_DISTRIBUTED_REGISTRY_H_

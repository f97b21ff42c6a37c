// GlooStore: Gloo's rendezvous Store (set, get, wait) over the collective
// store's gRPC client (distributed/collective_store.h), scoped to one prefix.
// For programs that drive Gloo directly (bench/allreduce_bench's bare Gloo
// reference, Gloo's own connectFullMesh); GlooCollective uses the client
// itself.
//
// The one header of distributed/ with a Gloo type: include it only from .cc
// files. Errors are thrown as gloo::IoException, as Gloo's stores do. get()
// waits for the key; every call is bounded by `timeout` (wait's own timeout
// argument is honoured, unlike the base class). Thread-safe.
#ifndef FLOWSTATE_DISTRIBUTED_GLOO_STORE_INTERNAL_H_
#define FLOWSTATE_DISTRIBUTED_GLOO_STORE_INTERNAL_H_

#include <gloo/rendezvous/store.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

namespace flowstate {

class CollectiveStoreClient;

class GlooStore final : public ::gloo::rendezvous::Store {
 public:
  GlooStore(std::shared_ptr<CollectiveStoreClient> client, std::string prefix,
            std::chrono::milliseconds timeout = std::chrono::seconds(30));

  void set(const std::string& key, const std::vector<char>& data) override;
  std::vector<char> get(const std::string& key) override;
  void wait(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) override;

 private:
  std::shared_ptr<CollectiveStoreClient> client_;
  const std::string prefix_;
  const std::chrono::milliseconds timeout_;
};

}  // namespace flowstate

#endif  // FLOWSTATE_DISTRIBUTED_GLOO_STORE_INTERNAL_H_

// NewGlooStore: Gloo's rendezvous Store (set, get, wait) over the collective
// store's gRPC client (distributed/collective_store.h), scoped to one
// prefix. For programs that drive Gloo directly (bench/allreduce_bench's
// bare Gloo reference, Gloo's own connectFullMesh); GlooCollective uses the
// client itself.
//
// Gloo's Store is only declared here; a caller that uses it includes
// <gloo/rendezvous/store.h> in its .cc file. Errors are thrown as
// gloo::IoException, as Gloo's stores do. get() waits for the key; every
// call is bounded by `timeout` (wait's own timeout argument is honoured,
// unlike the base class). The store shares `client` and is thread-safe.
#ifndef FLOWSTATE_DISTRIBUTED_GLOO_STORE_H_
#define FLOWSTATE_DISTRIBUTED_GLOO_STORE_H_

#include <chrono>
#include <memory>
#include <string>

namespace gloo::rendezvous {
class Store;
}  // namespace gloo::rendezvous

namespace flowstate {

class CollectiveStoreClient;

std::shared_ptr<::gloo::rendezvous::Store> NewGlooStore(
    std::shared_ptr<CollectiveStoreClient> client, std::string prefix,
    std::chrono::milliseconds timeout = std::chrono::seconds(30));

}  // namespace flowstate

#endif  // FLOWSTATE_DISTRIBUTED_GLOO_STORE_H_

// GrpcServer: the gRPC frontend — api/flowstate.proto's Sessions, Jobs (with
// the server-streaming Watch), Devices, Cluster and Ops services over the same
// Service as the REST frontend, plus the standard health service and server
// reflection, and bearer-token auth (UNAUTHENTICATED without it; the rule
// of server/auth.h, the REST frontend's too). Jobs/Watch holds no thread
// while it waits for events.
//
// Thread safety: Start/Stop from one thread; gRPC serves from its threads.
#ifndef FLOWSTATE_SERVER_GRPC_GRPC_SERVER_H_
#define FLOWSTATE_SERVER_GRPC_GRPC_SERVER_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "graph/status.h"

namespace grpc {
class ServerBuilder;
}  // namespace grpc

namespace flowstate {

class Service;
class Metrics;

struct GrpcServerOptions {
  std::string address = "127.0.0.1:50051";  // port 0: pick a free one
  // Messages both ways; a bigger one is RESOURCE_EXHAUSTED before any
  // handler runs.
  int64_t max_message_bytes = int64_t{64} << 20;
  // Calls at once on one connection (HTTP/2 SETTINGS_MAX_CONCURRENT_STREAMS).
  int max_concurrent_streams = 128;
  // gRPC's memory quota (grpc::ResourceQuota) for what its transport holds,
  // messages being received included -- which it reads whole before any
  // handler checks the token. Under its pressure new calls are refused with
  // RESOURCE_EXHAUSTED; a soft bound. 0: none.
  int64_t memory_limit_bytes = int64_t{256} << 20;
  std::vector<std::string> tokens;  // empty: no authentication
  int64_t max_tensor_bytes = int64_t{64} << 20;
  // Session runs and predicts are served from a completion queue by one
  // thread: a call runs on it when its step cannot wait or run unbounded
  // (no queue, Recv, collective or loop) and the last call for the same
  // session or job took less than inline_below_us (0: never), else on a
  // thread of its own (server/step_threads.h), so that no step -- a
  // blocked dequeue, a long loop -- holds up another call. handler_threads
  // of those threads are kept when idle.
  int handler_threads = 2;
  int64_t inline_below_us = 500;
  // The thread serving Run and Predict polls this long after each call
  // before it sleeps. 0: never spin.
  int64_t spin_us = 100;
  // Run and Predict answer with "server-timing" trailing metadata, in the
  // Server-Timing format (server_timing.h): "step" (the engine's part, once
  // the call reached it), "handler" (the method's work), "total" (from the
  // call's arrival on the completion queue to its answer).
  bool server_timing = true;
  // false (`flowstate worker`, a host that only computes): of the public
  // services only the introspection ones, Devices and Cluster, plus health,
  // reflection and what builder_hooks add; no Sessions, Jobs or Ops.
  bool public_api = true;
  // More addresses to listen on, each refused like `address` when it cannot
  // be bound (task 0 of a MASTER_* cluster also listens on MASTER_PORT).
  std::vector<std::string> extra_addresses;
  // Run on the builder before the server starts: how the distributed
  // runtime puts its services (the cluster registry, the worker service) on
  // this server's port. The services must outlive the server.
  std::vector<std::function<void(::grpc::ServerBuilder&)>> builder_hooks;
};

// Chooses gRPC's polling engine for this process ("poll", "epoll1"; ""
// leaves gRPC's default, epoll1), by setting GRPC_POLL_STRATEGY unless the
// environment already sets it. It takes effect only before the process first
// uses gRPC; call it early, while no other thread may read the environment.
// INVALID_ARGUMENT naming the value for any other strategy.
//
// Why "poll" is the server's default: under epoll1 any thread of the
// process may be the one that waits in epoll for every socket, and with the
// sync services' threads asleep in it, the thread that spins for Run and
// Predict (spin_us) never sees a request first -- each call waits for a
// sleeping thread to wake. Under poll, each completion queue polls its own
// sockets, so the spinning thread picks the call up itself.
Status SetGrpcPollStrategy(const std::string& strategy);

class GrpcServer {
 public:
  // REQUIRES: SIGINT/SIGTERM are blocked in the calling thread (so gRPC's
  // threads inherit the mask and the process's signal waiter gets them).
  static StatusOr<std::unique_ptr<GrpcServer>> Start(Service* service, Metrics* metrics,
                                                     const GrpcServerOptions& options);
  virtual ~GrpcServer() = default;
  virtual int port() const = 0;
  // Ends streams (Watch) and shuts the server down. Idempotent.
  virtual void Stop() = 0;
};

}  // namespace flowstate

#endif  // FLOWSTATE_SERVER_GRPC_GRPC_SERVER_H_

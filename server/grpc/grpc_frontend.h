// PRIVATE to the gRPC frontend (grpc_server.cc, grpc_watch.cc,
// grpc_catalog.cc): what its services share (Frontend: the Service, the
// options, authentication, the open Watch streams, where steps run), the
// Watch machinery (WatchPump, StartWatch; see grpc_server.cc's top comment)
// and the catalog services' constructor.
//
// Thread safety: Frontend's methods may be called from any gRPC thread.
#ifndef FLOWSTATE_SERVER_GRPC_GRPC_FRONTEND_H_
#define FLOWSTATE_SERVER_GRPC_GRPC_FRONTEND_H_

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <deque>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "api/flowstate.grpc.pb.h"
#include "server/auth.h"
#include "api/proto_convert.h"
#include "server/grpc/grpc_server.h"
#include "server/inline_policy.h"
#include "server/step_threads.h"
#include "server/metrics.h"
#include "server/service.h"
#include "graph/mutex.h"

namespace flowstate::grpc_internal {

namespace pb = ::flowstate::v1;
using proto_convert::GraphOptions;
using ::grpc::ServerContextBase;

// Trailing metadata naming the node an error is about (it is also in the
// message, as " [node: NAME]").
constexpr const char* kNodeMetadata = "flowstate-node";

// Milliseconds from now until a call's `deadline` (rounded up, so that a
// deadline not yet passed leaves at least 1); nullopt for no deadline
// (gRPC's time_point::max()).
inline std::optional<int64_t> MillisecondsUntil(std::chrono::system_clock::time_point deadline) {
  if (deadline == std::chrono::system_clock::time_point::max()) return std::nullopt;
  const auto left = deadline - std::chrono::system_clock::now();
  if (left <= std::chrono::system_clock::duration::zero()) return 0;
  return std::chrono::ceil<std::chrono::milliseconds>(left).count();
}

inline double SecondsSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

class WatchCall;

class WatchCall;

// The thread that serves every Watch call's stream (see grpc_server.cc's top
// comment): Wake() queues a call (cheap: it runs in the stream's waker, under
// the job manager's lock); the thread runs the call's Pump().
class WatchPump {
 public:
  WatchPump() : thread_([this] { Loop(); }) {}
  ~WatchPump() { Stop(); }
  void Wake(std::weak_ptr<WatchCall> call) {
    MutexLock l(mu_);
    if (stopped_) return;
    queue_.push_back(std::move(call));
    cv_.NotifyOne();
  }
  // Runs what is queued, then ends the thread. Idempotent.
  void Stop() {
    {
      MutexLock l(mu_);
      stopped_ = true;
      cv_.NotifyOne();
    }
    if (thread_.joinable() && thread_.get_id() != std::this_thread::get_id()) thread_.join();
  }

 private:
  void Loop();

  Mutex mu_;
  CondVar cv_;
  std::deque<std::weak_ptr<WatchCall>> queue_ ABSL_GUARDED_BY(mu_);
  bool stopped_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;                          // last: starts once the rest is built
};

// What every service shares: the Service, the options, the open Watch
// streams (closed by Stop()), and where steps run (Dispatch).

class Frontend {
 public:
  Frontend(Service* service, Metrics* metrics, const GrpcServerOptions& options)
      : watch_pump_(std::make_shared<WatchPump>()),
        service_(service),
        metrics_(metrics),
        options_(options),
        inline_policy_(InlinePolicy::Options{std::chrono::microseconds(options.inline_below_us),
                                             /*max_inline=*/1}),
        step_threads_(StepThreads::Options{.keep_idle = std::max(1, options.handler_threads)}) {
    graph_options_.max_tensor_bytes = size_t(std::max<int64_t>(0, options.max_tensor_bytes));
  }

  Service& service() { return *service_; }
  const GraphOptions& graph_options() const { return graph_options_; }
  bool server_timing() const { return options_.server_timing; }
  size_t max_tensor_bytes() const { return graph_options_.max_tensor_bytes; }

  // Runs `fn` (returning a Status) as the body of `method`: authenticates,
  // maps the status onto gRPC's, records the call.
  template <typename Fn>
  ::grpc::Status Handle(ServerContextBase* ctx, const char* method, Fn&& fn) {
    auto start = std::chrono::steady_clock::now();
    Status s = Authenticate(*ctx);
    if (s.ok()) s = fn();
    return Answer(ctx, method, s, start);
  }

  // The answer to a call of `method` that began at `start` and ends with
  // `s`: the node's trailing metadata, the call recorded, gRPC's status.
  ::grpc::Status Answer(ServerContextBase* ctx, const char* method, const Status& s,
                        std::chrono::steady_clock::time_point start) {
    if (!s.node().empty()) ctx->AddTrailingMetadata(kNodeMetadata, s.node());
    if (metrics_ != nullptr) {
      metrics_->ObserveGrpcRequest(method, std::string(CodeName(s.code())), SecondsSince(start));
    }
    return proto_convert::ToGrpcStatus(s);
  }

  // The request's "authorization" metadata against the tokens (server/auth.h).
  Status Authenticate(const ServerContextBase& ctx) const {
    std::vector<std::string_view> values;
    auto [begin, end] = ctx.client_metadata().equal_range("authorization");
    for (auto it = begin; it != end; ++it) values.emplace_back(it->second.data(), it->second.size());
    return CheckBearerToken(values, options_.tokens).status;
  }

  const std::shared_ptr<WatchPump>& watch_pump() const { return watch_pump_; }

  // Runs `body` (which answers the call) now on the calling thread (the
  // completion queue's, which must never block) when the step cannot wait
  // or run unbounded (`may_wait` false: Service::SessionStepMayWait) and the
  // last call of `key` was cheap (InlinePolicy), else on a step thread of
  // its own (StepThreads: a step that waits delays no other call); when
  // those are stopped, runs `refuse` instead.
  template <typename Body, typename Refuse>
  void Dispatch(std::string key, size_t request_bytes, bool may_wait, Body body, Refuse refuse) {
    if (!may_wait && inline_policy_.BeginInline(key, request_bytes)) {
      auto start = std::chrono::steady_clock::now();
      body();
      inline_policy_.Finish(key, request_bytes, std::chrono::steady_clock::now() - start,
                            /*inlined=*/true);
      return;
    }
    if (may_wait) {
      // Measured where it runs; the next of its key is judged again.
      inline_policy_.Finish(key, request_bytes, InlinePolicy::kMayWait, /*inlined=*/false);
    }
    const bool scheduled =
        step_threads_.Schedule([this, key = std::move(key), request_bytes, body]() mutable {
          auto start = std::chrono::steady_clock::now();
          body();
          inline_policy_.Finish(key, request_bytes, std::chrono::steady_clock::now() - start,
                                /*inlined=*/false);
        });
    if (!scheduled) refuse();
  }

  // Runs what the step threads still hold and ends them (after Shutdown;
  // the service has ended the steps: Service::CloseSessions).
  void StopSteps() { step_threads_.Stop(); }

  // Watch streams: registered while open so that Stop() can end them.
  bool AddStream(JobEventStream* s) {
    MutexLock l(mu_);
    if (stopping_) return false;
    streams_.insert(s);
    return true;
  }
  void RemoveStream(JobEventStream* s) {
    MutexLock l(mu_);
    streams_.erase(s);
  }
  bool stopping() const {
    MutexLock l(mu_);
    return stopping_;
  }
  void BeginStop() {
    MutexLock l(mu_);
    stopping_ = true;
    for (JobEventStream* s : streams_) s->Close();
  }

 private:
  std::shared_ptr<WatchPump> watch_pump_;  // shared with the streams' wakers
  Service* service_;
  Metrics* metrics_;
  GrpcServerOptions options_;
  GraphOptions graph_options_;
  InlinePolicy inline_policy_;
  StepThreads step_threads_;  // the calls that do not run inline
  mutable Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::set<JobEventStream*> streams_ ABSL_GUARDED_BY(mu_);
};


// The services that are thin synchronous adapters over Service's catalog
// calls (grpc_catalog.cc): `public_api` is registered only on a server with
// the public API, `always` also on a worker's (Devices, Cluster). Each holds
// `f`, which must outlive it.
struct CatalogServices {
  std::vector<std::unique_ptr<::grpc::Service>> public_api;
  std::vector<std::unique_ptr<::grpc::Service>> always;
};
CatalogServices MakeCatalogServices(Frontend* f);

// Starts serving a Jobs/Watch call (grpc_watch.cc): the reactor to return
// from the callback method.
::grpc::ServerWriteReactor<pb::JobEvent>* StartWatch(Frontend* f, ::grpc::CallbackServerContext* ctx,
                                                    const pb::WatchJobRequest& req);

}  // namespace flowstate::grpc_internal

#endif  // FLOWSTATE_SERVER_GRPC_GRPC_FRONTEND_H_

// The gRPC frontend: api/flowstate.proto's services as thin adapters over
// Service (the same calls, checks and messages as the REST frontend), plus
// the standard health service and server reflection.
//
// Threads. Most methods are synchronous (gRPC's own thread pool). The two
// that run steps, Sessions/Run and Jobs/Predict, are async methods served
// from one completion queue by one thread (AsyncUnaryCall, DrainQueue),
// which polls the queue for spin_us after each call before it sleeps: a
// call whose previous call for the same session or job was cheap runs on
// that thread (no hand-off, which on an idle machine wakes a core each
// way) when it cannot wait or run unbounded (no queue, Recv, collective or
// loop: Service::SessionStepMayWait), others on a thread of their own
// (StepThreads), so that no step holds up another call, the Close or the
// QueueClose that would end it included (Frontend::Dispatch, InlinePolicy). Both answer with "server-timing"
// trailing metadata (options.server_timing): the step, the handler and the
// total from the call's arrival on the queue. Why not synchronous like the
// rest: measured, a Run from a sync client took 204-208 µs served by gRPC's
// pool and 138-159 µs this way (50-68 µs from a polling client) on a quiet
// machine (BENCHMARKS.md, "gRPC Run/Predict as async methods").
//
// Jobs/Watch is a callback method (WatchCall, a ServerWriteReactor): it
// holds no thread while it waits (a synchronous Watch would hold one of
// gRPC's threads for as long as its stream is open). Its stream's waker queues the call on one
// thread shared by every Watch (WatchPump), which pulls what the stream has
// and starts the write; a finished write pulls the next. So an idle Watch
// costs nothing, and at most Service's max_event_streams are open at once
// (RESOURCE_EXHAUSTED above, as REST's event streams count against the same
// limit).
//
// Limits: max_message_bytes for messages both ways (gRPC refuses a bigger
// one with RESOURCE_EXHAUSTED before any handler runs), at most
// max_concurrent_streams calls at once on one connection (HTTP/2
// SETTINGS_MAX_CONCURRENT_STREAMS; a client queues more), and gRPC's memory
// quota (memory_limit_bytes). gRPC reads a unary call's whole message
// before any handler -- and so before the token is checked; the quota is
// what bounds that: under its pressure gRPC refuses new calls with
// RESOURCE_EXHAUSTED. It is a soft bound (16 parallel unauthenticated 60 MiB
// messages: about +630 MiB resident with 256 MiB, +1.1 to 1.5 GiB
// without). Authentication: server/auth.h, the rule the REST frontend
// applies too.
#include "server/grpc/grpc_server.h"

#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>
#include <grpcpp/resource_quota.h>

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <climits>
#include <deque>
#include <memory>
#include <optional>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <string_view>
#include <thread>

#include "api/flowstate.grpc.pb.h"
#include "scheduler/thread_pool.h"
#include "api/json_codec.h"
#include "api/proto_convert.h"
#include "checkpoints/npz.h"
#include "api/views_json.h"
#include "server/grpc/grpc_frontend.h"
#include "server/inline_policy.h"
#include "server/metrics.h"
#include "server/server_timing.h"
#include "server/service.h"
#include "graph/mutex.h"

namespace flowstate {
namespace {

namespace pb = ::flowstate::v1;
using ::grpc::ServerContext;
using ::grpc::ServerContextBase;
using grpc_internal::CatalogServices;
using grpc_internal::Frontend;
using grpc_internal::MakeCatalogServices;
using grpc_internal::kNodeMetadata;
using grpc_internal::MillisecondsUntil;
using grpc_internal::SecondsSince;

// How long Stop() lets calls in flight finish before cancelling them.
constexpr std::chrono::seconds kShutdownGrace{5};
// Run and Predict answer with where the server's time went (server_timing.h).
constexpr const char* kServerTimingMetadata = "server-timing";

// --- Sessions.

class SessionsService final : public pb::Sessions::WithAsyncMethod_Run<pb::Sessions::Service> {
 public:
  explicit SessionsService(Frontend* f) : f_(f) {}

  ::grpc::Status Create(ServerContext* ctx, const pb::CreateSessionRequest* req,
                        pb::CreateSessionResponse* resp) override {
    return f_->Handle(ctx, "flowstate.v1.Sessions/Create", [&]() -> Status {
      FS_ASSIGN_OR_RETURN(GraphDef graph, proto_convert::GraphFromRequest(*req, f_->graph_options()));
      FS_ASSIGN_OR_RETURN(std::string id, f_->service().CreateSession(graph));
      resp->set_session_id(id);
      return Status();
    });
  }

  ::grpc::Status Extend(ServerContext* ctx, const pb::ExtendSessionRequest* req,
                        pb::ExtendSessionResponse*) override {
    return f_->Handle(ctx, "flowstate.v1.Sessions/Extend", [&]() -> Status {
      FS_ASSIGN_OR_RETURN(GraphDef graph, proto_convert::GraphFromRequest(*req, f_->graph_options()));
      return f_->service().ExtendSession(req->session_id(), graph);
    });
  }

  // The body of Run, served from the completion queue (AsyncUnaryCall).
  // *step_seconds: the engine's part (set once the call reached it).
  bool RunMayWait(const pb::RunSessionRequest& req) {
    std::vector<std::string> feeds;
    for (const auto& [name, t] : req.feeds()) feeds.push_back(name);
    std::sort(feeds.begin(), feeds.end());  // as NamedTensorsFromProto orders them
    return f_->service().SessionStepMayWait(req.session_id(), feeds,
                                            {req.fetches().begin(), req.fetches().end()},
                                            {req.targets().begin(), req.targets().end()});
  }

  Status RunBody(const pb::RunSessionRequest& req, pb::RunSessionResponse* resp,
                 double* step_seconds, std::chrono::system_clock::time_point deadline) {
    SessionRunRequest run;
    FS_ASSIGN_OR_RETURN(run.feeds, proto_convert::NamedTensorsFromProto(req.feeds(), "feeds",
                                                                       f_->max_tensor_bytes()));
    FS_ASSIGN_OR_RETURN(run.fetches, proto_convert::TensorNamesFromProto(req.fetches(), "fetches"));
    FS_ASSIGN_OR_RETURN(run.targets, proto_convert::NodeNamesFromProto(req.targets(), "targets"));
    run.trace = req.trace();
    if (req.timeout_ms() < 0) {
      return InvalidArgument("timeout_ms: must be >= 0, got " + std::to_string(req.timeout_ms()));
    }
    run.timeout_ms = req.timeout_ms();
    if (req.step_tag().size() > 128) return InvalidArgument("step_tag: longer than 128 characters");
    run.step_tag = req.step_tag();
    // The call's gRPC deadline bounds the step as timeout_ms does.
    if (std::optional<int64_t> left = MillisecondsUntil(deadline)) {
      if (*left <= 0) return DeadlineExceeded("the call's deadline passed before the step began");
      if (run.timeout_ms == 0 || *left < run.timeout_ms) run.timeout_ms = *left;
    }
    StepTrace trace;
    const auto t0 = std::chrono::steady_clock::now();
    auto ran = f_->service().RunSession(req.session_id(), run, &trace);
    *step_seconds = SecondsSince(t0);
    FS_ASSIGN_OR_RETURN(auto outputs, std::move(ran));
    proto_convert::NamedTensorsToProto(outputs, resp->mutable_outputs());
    if (run.trace) resp->set_trace_json(StepTraceToChromeJson(trace));
    return Status();
  }

  ::grpc::Status CancelStep(ServerContext* ctx, const pb::CancelStepRequest* req,
                            pb::CancelStepResponse* resp) override {
    return f_->Handle(ctx, "flowstate.v1.Sessions/CancelStep", [&]() -> Status {
      FS_ASSIGN_OR_RETURN(bool cancelled, f_->service().CancelSessionStep(req->session_id(), req->step_tag()));
      resp->set_cancelled(cancelled);
      return Status();
    });
  }

  ::grpc::Status Close(ServerContext* ctx, const pb::CloseSessionRequest* req,
                       pb::CloseSessionResponse*) override {
    return f_->Handle(ctx, "flowstate.v1.Sessions/Close",
                      [&]() -> Status { return f_->service().CloseSession(req->session_id()); });
  }

 private:
  Frontend* f_;
};

// --- Jobs.

class JobsService final
    : public pb::Jobs::WithAsyncMethod_Predict<pb::Jobs::WithCallbackMethod_Watch<pb::Jobs::Service>> {
 public:
  explicit JobsService(Frontend* f) : f_(f) {}

  ::grpc::Status Submit(ServerContext* ctx, const pb::SubmitJobRequest* req,
                        pb::Job* resp) override {
    return f_->Handle(ctx, "flowstate.v1.Jobs/Submit", [&]() -> Status {
      FS_ASSIGN_OR_RETURN(JobInfo job, svc().SubmitJob(req->job_json()));
      proto_convert::JobToProto(job, resp);
      return Status();
    });
  }

  ::grpc::Status List(ServerContext* ctx, const pb::ListJobsRequest*,
                      pb::ListJobsResponse* resp) override {
    return f_->Handle(ctx, "flowstate.v1.Jobs/List", [&]() -> Status {
      for (const JobInfo& job : svc().ListJobs()) proto_convert::JobToProto(job, resp->add_jobs());
      return Status();
    });
  }

  ::grpc::Status Get(ServerContext* ctx, const pb::GetJobRequest* req, pb::Job* resp) override {
    return f_->Handle(ctx, "flowstate.v1.Jobs/Get",
                      [&]() -> Status { return JobAfter(Status(), req->job_id(), resp); });
  }

  ::grpc::Status Cancel(ServerContext* ctx, const pb::CancelJobRequest* req,
                        pb::Job* resp) override {
    return f_->Handle(ctx, "flowstate.v1.Jobs/Cancel", [&]() -> Status {
      return JobAfter(svc().CancelJob(req->job_id()), req->job_id(), resp);
    });
  }

  ::grpc::Status Pause(ServerContext* ctx, const pb::PauseJobRequest* req,
                       pb::Job* resp) override {
    return f_->Handle(ctx, "flowstate.v1.Jobs/Pause", [&]() -> Status {
      return JobAfter(svc().PauseJob(req->job_id()), req->job_id(), resp);
    });
  }

  ::grpc::Status Resume(ServerContext* ctx, const pb::ResumeJobRequest* req,
                        pb::Job* resp) override {
    return f_->Handle(ctx, "flowstate.v1.Jobs/Resume", [&]() -> Status {
      return JobAfter(svc().ResumeJob(req->job_id()), req->job_id(), resp);
    });
  }

  ::grpc::Status Delete(ServerContext* ctx, const pb::DeleteJobRequest* req,
                        pb::DeleteJobResponse* resp) override {
    return f_->Handle(ctx, "flowstate.v1.Jobs/Delete", [&]() -> Status {
      FS_RETURN_IF_ERROR(svc().DeleteJob(req->job_id()));
      resp->set_job_id(req->job_id());
      return Status();
    });
  }

  // The body of Predict, served from the completion queue (AsyncUnaryCall).
  // *step_seconds: the engine's part (set once the call reached it).
  bool PredictMayWait(const pb::PredictRequest& req) const {
    std::vector<std::string> inputs;
    for (const auto& [name, t] : req.inputs()) inputs.push_back(name);
    std::sort(inputs.begin(), inputs.end());  // as NamedTensorsFromProto orders them
    return f_->service().PredictMayWait(req.job_id(), inputs,
                                        {req.fetches().begin(), req.fetches().end()});
  }

  Status PredictBody(const pb::PredictRequest& req, pb::PredictResponse* resp,
                     double* step_seconds, std::chrono::system_clock::time_point deadline) {
    FS_ASSIGN_OR_RETURN(auto inputs, proto_convert::NamedTensorsFromProto(
                                         req.inputs(), "inputs", f_->max_tensor_bytes()));
    FS_ASSIGN_OR_RETURN(auto fetches, proto_convert::TensorNamesFromProto(req.fetches(), "fetches"));
    std::vector<Tensor> outputs;
    std::chrono::milliseconds timeout{0};
    if (std::optional<int64_t> left = MillisecondsUntil(deadline)) {
      if (*left <= 0) return DeadlineExceeded("the call's deadline passed before the prediction began");
      timeout = std::chrono::milliseconds(*left);
    }
    const auto t0 = std::chrono::steady_clock::now();
    Status predicted = svc().Predict(req.job_id(), inputs, fetches, &outputs, timeout);
    *step_seconds = SecondsSince(t0);
    FS_RETURN_IF_ERROR(predicted);
    proto_convert::NamedTensors named;
    for (size_t i = 0; i < outputs.size() && i < fetches.size(); ++i) {
      named.emplace_back(fetches[i], std::move(outputs[i]));
    }
    proto_convert::NamedTensorsToProto(named, resp->mutable_outputs());
    return Status();
  }

  ::grpc::ServerWriteReactor<pb::JobEvent>* Watch(::grpc::CallbackServerContext* ctx,
                                                  const pb::WatchJobRequest* req) override {
    return grpc_internal::StartWatch(f_, ctx, *req);
  }

  ::grpc::Status ListCheckpoints(ServerContext* ctx, const pb::ListCheckpointsRequest* req,
                                 pb::ListCheckpointsResponse* resp) override {
    return f_->Handle(ctx, "flowstate.v1.Jobs/ListCheckpoints", [&]() -> Status {
      FS_ASSIGN_OR_RETURN(std::vector<JobCheckpointInfo> list, svc().ListCheckpoints(req->job_id()));
      resp->set_job_id(req->job_id());
      for (const JobCheckpointInfo& c : list) proto_convert::CheckpointToProto(c, resp->add_checkpoints());
      return Status();
    });
  }

  ::grpc::Status Checkpoint(ServerContext* ctx, const pb::CheckpointJobRequest* req,
                            pb::CheckpointJobResponse* resp) override {
    return f_->Handle(ctx, "flowstate.v1.Jobs/Checkpoint", [&]() -> Status {
      FS_ASSIGN_OR_RETURN(CheckpointRequestResult r, svc().CheckpointJob(req->job_id()));
      resp->set_job_id(req->job_id());
      resp->set_step(r.step);
      resp->set_written(r.written);
      return Status();
    });
  }

  ::grpc::Status ExportCheckpoint(ServerContext* ctx, const pb::ExportCheckpointRequest* req,
                                  pb::ExportCheckpointResponse* resp) override {
    return f_->Handle(ctx, "flowstate.v1.Jobs/ExportCheckpoint", [&]() -> Status {
      checkpoints::ExportFormat format = checkpoints::ExportFormat::kFsck;
      if (!req->format().empty()) {
        FS_ASSIGN_OR_RETURN(format, checkpoints::ParseExportFormat(req->format()));
      }
      int64_t step = req->has_step() ? req->step() : -1;
      if (step < 0) {
        if (req->has_step()) return InvalidArgument("step: must be >= 0");
        FS_ASSIGN_OR_RETURN(std::vector<JobCheckpointInfo> list, svc().ListCheckpoints(req->job_id()));
        if (list.empty()) return NotFound("job '" + req->job_id() + "' has no checkpoint");
        step = list.back().step;
      }
      ScratchFile file;
      FS_RETURN_IF_ERROR(svc().ExportCheckpoint(req->job_id(), step, file.path, format));
      std::ifstream in(file.path, std::ios::binary);
      resp->mutable_data()->assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
      resp->set_step(step);
      return Status();
    });
  }

  ::grpc::Status History(ServerContext* ctx, const pb::JobHistoryRequest* req,
                         pb::JobHistory* resp) override {
    return f_->Handle(ctx, "flowstate.v1.Jobs/History", [&]() -> Status {
      FS_ASSIGN_OR_RETURN(JobHistory h, svc().JobHistoryOf(req->job_id()));
      proto_convert::JobHistoryToProto(h, resp);
      return Status();
    });
  }

  ::grpc::Status GetSpec(ServerContext* ctx, const pb::JobSpecRequest* req,
                         pb::JobSpecDocument* resp) override {
    return f_->Handle(ctx, "flowstate.v1.Jobs/GetSpec", [&]() -> Status {
      FS_ASSIGN_OR_RETURN(*resp->mutable_json(), svc().JobDocument(req->job_id()));
      resp->set_job_id(req->job_id());
      return Status();
    });
  }

  ::grpc::Status ExportOnnx(ServerContext* ctx, const pb::ExportOnnxRequest* req,
                            pb::ExportOnnxResponse* resp) override {
    return f_->Handle(ctx, "flowstate.v1.Jobs/ExportOnnx", [&]() -> Status {
      FS_ASSIGN_OR_RETURN(*resp->mutable_data(), svc().ExportJobOnnx(req->job_id()));
      return Status();
    });
  }

  ::grpc::Status GetTrace(ServerContext* ctx, const pb::JobTraceRequest* req, pb::JobTrace* resp) override {
    return f_->Handle(ctx, "flowstate.v1.Jobs/GetTrace", [&]() -> Status {
      if (req->step() < 0) return InvalidArgument("step: expected a step number (an integer >= 1), or 0 for the list");
      FS_ASSIGN_OR_RETURN(std::vector<int64_t> steps, svc().JobTracedSteps(req->job_id()));
      if (req->step() > 0) {
        FS_ASSIGN_OR_RETURN(*resp->mutable_trace_json(), svc().JobTrace(req->job_id(), req->step()));
      }
      resp->set_job_id(req->job_id());
      resp->set_step(req->step());
      for (int64_t s : steps) resp->add_traced_steps(s);
      return Status();
    });
  }

  ::grpc::Status ImportCheckpoint(ServerContext* ctx, const pb::ImportCheckpointRequest* req,
                                  pb::CheckpointJobResponse* resp) override {
    return f_->Handle(ctx, "flowstate.v1.Jobs/ImportCheckpoint", [&]() -> Status {
      ScratchFile file;
      {
        std::ofstream out(file.path, std::ios::binary);
        out.write(req->data().data(), std::streamsize(req->data().size()));
        if (!out.good()) return Internal("storing the uploaded checkpoint failed");
      }
      FS_ASSIGN_OR_RETURN(auto imported, svc().ImportCheckpoint(file.path));
      resp->set_job_id(imported.first);
      resp->set_step(imported.second);
      resp->set_written(true);
      return Status();
    });
  }

 private:
  // A scratch file for export/import, removed when it goes out of scope.
  struct ScratchFile {
    std::string path;
    ScratchFile() {
      static std::atomic<uint64_t> n{0};
      path = (std::filesystem::temp_directory_path() /
              ("flowstate-grpc-" + std::to_string(::getpid()) + "-" + std::to_string(n++) + ".fsck"))
                 .string();
    }
    ~ScratchFile() {
      std::error_code ec;
      std::filesystem::remove(path, ec);
    }
  };

  // The one door to jobs, the same as REST's (server/service.h); not
  // service(), which names the generated gRPC base class.
  flowstate::Service& svc() { return f_->service(); }

  // The job after `done` (the result of a lifecycle call) succeeded.
  Status JobAfter(const Status& done, const std::string& id, pb::Job* resp) {
    FS_RETURN_IF_ERROR(done);
    FS_ASSIGN_OR_RETURN(JobInfo job, svc().GetJob(id));
    proto_convert::JobToProto(job, resp);
    return Status();
  }

  Frontend* f_;
};

// --- Steps served from a completion queue.

// A call's tag on the completion queue.
class AsyncTag {
 public:
  virtual ~AsyncTag() = default;
  virtual void Proceed(bool ok) = 0;
};

// One unary step call (Run, Predict): asked for with `request` (the
// service's RequestX), answered by `body` inline or on the pool
// (Frontend::Dispatch), then deleted when its Finish comes back. Each call,
// when it arrives, asks for the next one.
template <typename Req, typename Resp>
class AsyncUnaryCall final : public AsyncTag {
 public:
  using Request = std::function<void(ServerContext*, Req*, ::grpc::ServerAsyncResponseWriter<Resp>*,
                                     ::grpc::ServerCompletionQueue*, void*)>;
  // Answers the call; sets *step_seconds when it reached the engine.
  // `deadline` is the call's (gRPC's deadline; time_point::max() without).
  using Body = std::function<Status(const Req&, Resp*, double* step_seconds,
                                    std::chrono::system_clock::time_point deadline)>;
  using Key = std::function<std::string(const Req&)>;
  // Whether the call's step may wait or run unbounded (Frontend::Dispatch).
  using MayWait = std::function<bool(const Req&)>;

  AsyncUnaryCall(Frontend* f, ::grpc::ServerCompletionQueue* cq, const char* method,
                 Request request, Body body, Key key, MayWait may_wait)
      : f_(f), cq_(cq), method_(method), request_(std::move(request)), body_(std::move(body)),
        key_(std::move(key)), may_wait_(std::move(may_wait)), responder_(&ctx_) {
    request_(&ctx_, &req_, &responder_, cq_, this);
  }

  void Proceed(bool ok) override {
    if (answered_ || !ok) {  // Finish done, or the server is shutting down
      delete this;
      return;
    }
    const auto arrived = std::chrono::steady_clock::now();
    new AsyncUnaryCall(f_, cq_, method_, request_, body_, key_, may_wait_);
    answered_ = true;
    f_->Dispatch(
        key_(req_), req_.ByteSizeLong(), may_wait_(req_),
        [this, arrived] {
          const auto start = std::chrono::steady_clock::now();
          double step = -1;
          ::grpc::Status s = f_->Handle(
              &ctx_, method_, [this, &step] { return body_(req_, &resp_, &step, ctx_.deadline()); });
          if (f_->server_timing()) {
            std::vector<std::pair<const char*, double>> timings;
            if (step >= 0) timings.emplace_back("step", step);
            timings.emplace_back("handler", SecondsSince(start));
            timings.emplace_back("total", SecondsSince(arrived));
            ctx_.AddTrailingMetadata(kServerTimingMetadata, ServerTimingHeader(timings));
          }
          responder_.Finish(resp_, s, this);
        },
        [this] {
          responder_.FinishWithError(
              ::grpc::Status(::grpc::StatusCode::UNAVAILABLE, "the server is stopping"), this);
        });
  }

 private:
  Frontend* f_;
  ::grpc::ServerCompletionQueue* cq_;
  const char* method_;
  Request request_;
  Body body_;
  Key key_;
  MayWait may_wait_;
  ServerContext ctx_;
  Req req_;
  Resp resp_;
  ::grpc::ServerAsyncResponseWriter<Resp> responder_;
  bool answered_ = false;
};

}  // namespace

Status SetGrpcPollStrategy(const std::string& strategy) {
  if (strategy.empty()) return Status();
  if (strategy != "poll" && strategy != "epoll1") {
    return InvalidArgument("grpc.poll_strategy: '" + strategy +
                           "' is not one of \"poll\", \"epoll1\" or \"\"");
  }
  ::setenv("GRPC_POLL_STRATEGY", strategy.c_str(), /*overwrite=*/0);
  return Status();
}

namespace {

class GrpcServerImpl final : public GrpcServer {
 public:
  GrpcServerImpl(Service* service, Metrics* metrics, const GrpcServerOptions& options)
      : frontend_(service, metrics, options),
        sessions_(&frontend_),
        jobs_(&frontend_),
        catalog_(MakeCatalogServices(&frontend_)) {}

  ~GrpcServerImpl() override { Stop(); }

  Status Start(const GrpcServerOptions& options) {
    ::grpc::EnableDefaultHealthCheckService(true);
    ::grpc::reflection::InitProtoReflectionServerBuilderPlugin();
    ::grpc::ServerBuilder builder;
    // Without this, a second server could bind the same port (SO_REUSEPORT)
    // and both would take connections.
    builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
    int max_message = int(std::clamp<int64_t>(options.max_message_bytes, 0, INT_MAX));
    builder.SetMaxReceiveMessageSize(max_message);
    builder.SetMaxSendMessageSize(max_message);
    builder.AddChannelArgument(GRPC_ARG_MAX_CONCURRENT_STREAMS,
                               std::max(1, options.max_concurrent_streams));
    if (options.memory_limit_bytes > 0) {
      quota_.Resize(size_t(options.memory_limit_bytes));
      builder.SetResourceQuota(quota_);
    }
    builder.AddListeningPort(options.address, ::grpc::InsecureServerCredentials(), &port_);
    std::vector<int> extra_ports(options.extra_addresses.size(), 0);
    for (size_t i = 0; i < options.extra_addresses.size(); ++i) {
      builder.AddListeningPort(options.extra_addresses[i], ::grpc::InsecureServerCredentials(),
                               &extra_ports[i]);
    }
    if (options.public_api) {
      builder.RegisterService(&sessions_);
      builder.RegisterService(&jobs_);
      for (const auto& s : catalog_.public_api) builder.RegisterService(s.get());
    }
    for (const auto& s : catalog_.always) builder.RegisterService(s.get());
    for (const auto& hook : options.builder_hooks) hook(builder);
    cq_ = builder.AddCompletionQueue();
    server_ = builder.BuildAndStart();
    // gRPC starts no server when one address fails; name them all then.
    std::string failed = server_ == nullptr || port_ == 0 ? "'" + options.address + "'" : "";
    for (size_t i = 0; server_ == nullptr && i < extra_ports.size(); ++i) {
      failed += " or '" + options.extra_addresses[i] + "'";
    }
    for (size_t i = 0; failed.empty() && i < extra_ports.size(); ++i) {
      if (extra_ports[i] == 0) failed = "'" + options.extra_addresses[i] + "'";
    }
    if (!failed.empty()) {
      if (server_ != nullptr) server_->Shutdown(std::chrono::system_clock::now());
      server_.reset();
      cq_->Shutdown();
      DrainQueue();
      return Unavailable("cannot listen on " + failed);
    }
    if (!options.public_api) {
      cq_thread_ = std::thread([this] { DrainQueue(); });
      if (::grpc::HealthCheckServiceInterface* health = server_->GetHealthCheckService()) {
        health->SetServingStatus(true);
      }
      return Status();
    }
    // The first call of each step method; each asks for the next.
    new AsyncUnaryCall<pb::RunSessionRequest, pb::RunSessionResponse>(
        &frontend_, cq_.get(), "flowstate.v1.Sessions/Run",
        [this](ServerContext* c, pb::RunSessionRequest* r,
               ::grpc::ServerAsyncResponseWriter<pb::RunSessionResponse>* w,
               ::grpc::ServerCompletionQueue* q, void* tag) { sessions_.RequestRun(c, r, w, q, q, tag); },
        [this](const pb::RunSessionRequest& r, pb::RunSessionResponse* out, double* step,
               std::chrono::system_clock::time_point deadline) {
          return sessions_.RunBody(r, out, step, deadline);
        },
        [](const pb::RunSessionRequest& r) { return "run " + r.session_id(); },
        [this](const pb::RunSessionRequest& r) { return sessions_.RunMayWait(r); });
    new AsyncUnaryCall<pb::PredictRequest, pb::PredictResponse>(
        &frontend_, cq_.get(), "flowstate.v1.Jobs/Predict",
        [this](ServerContext* c, pb::PredictRequest* r,
               ::grpc::ServerAsyncResponseWriter<pb::PredictResponse>* w,
               ::grpc::ServerCompletionQueue* q, void* tag) { jobs_.RequestPredict(c, r, w, q, q, tag); },
        [this](const pb::PredictRequest& r, pb::PredictResponse* out, double* step,
               std::chrono::system_clock::time_point deadline) {
          return jobs_.PredictBody(r, out, step, deadline);
        },
        [](const pb::PredictRequest& r) { return "predict " + r.job_id(); },
        [this](const pb::PredictRequest& r) { return jobs_.PredictMayWait(r); });
    spin_ = std::chrono::microseconds(std::max<int64_t>(0, options.spin_us));
    cq_thread_ = std::thread([this] { DrainQueue(); });
    if (::grpc::HealthCheckServiceInterface* health = server_->GetHealthCheckService()) {
      health->SetServingStatus(true);
    }
    return Status();
  }

  int port() const override { return port_; }

  void Stop() override {
    MutexLock l(stop_mu_);
    if (server_ == nullptr) return;
    frontend_.BeginStop();
    if (::grpc::HealthCheckServiceInterface* health = server_->GetHealthCheckService()) {
      health->SetServingStatus(false);
    }
    server_->Shutdown(std::chrono::system_clock::now() + kShutdownGrace);
    frontend_.StopSteps();  // calls on the step threads finish (and queue their tags)
    server_->Wait();
    frontend_.watch_pump()->Stop();  // every Watch is done
    cq_->Shutdown();
    if (cq_thread_.joinable()) cq_thread_.join();
    server_.reset();
  }

 private:
  // Serves the step calls' tags until the queue is shut down and empty.
  // After each tag it polls for spin_ before it blocks, so that a client's
  // next call finds the thread awake (as the REST I/O threads do).
  void DrainQueue() {
    void* tag = nullptr;
    bool ok = false;
    for (;;) {
      auto until = std::chrono::steady_clock::now() + spin_;
      ::grpc::CompletionQueue::NextStatus st = ::grpc::CompletionQueue::TIMEOUT;
      while (spin_.count() > 0 && std::chrono::steady_clock::now() < until) {
        st = cq_->AsyncNext(&tag, &ok, gpr_time_0(GPR_CLOCK_MONOTONIC));
        if (st != ::grpc::CompletionQueue::TIMEOUT) break;
      }
      if (st == ::grpc::CompletionQueue::TIMEOUT) {
        st = cq_->Next(&tag, &ok) ? ::grpc::CompletionQueue::GOT_EVENT
                                  : ::grpc::CompletionQueue::SHUTDOWN;
      }
      if (st == ::grpc::CompletionQueue::SHUTDOWN) return;
      static_cast<AsyncTag*>(tag)->Proceed(ok);
    }
  }

  Frontend frontend_;
  SessionsService sessions_;
  JobsService jobs_;
  CatalogServices catalog_;  // Devices, Cluster, Ops, Models, Datasets, Graphs
  Mutex stop_mu_;
  ::grpc::ResourceQuota quota_{"flowstate"};  // options.memory_limit_bytes
  std::unique_ptr<::grpc::Server> server_;
  std::unique_ptr<::grpc::ServerCompletionQueue> cq_;  // Run and Predict
  std::thread cq_thread_;
  std::chrono::microseconds spin_{0};
  int port_ = 0;
};

}  // namespace

StatusOr<std::unique_ptr<GrpcServer>> GrpcServer::Start(Service* service, Metrics* metrics,
                                                        const GrpcServerOptions& options) {
  if (service == nullptr) return InvalidArgument("GrpcServer needs a service");
  auto server = std::make_unique<GrpcServerImpl>(service, metrics, options);
  FS_RETURN_IF_ERROR(server->Start(options));
  return std::unique_ptr<GrpcServer>(std::move(server));
}

}  // namespace flowstate

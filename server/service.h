// Service: what Flowstate's server does, independent of how it is asked.
// The REST frontend (server/rest/: http_server, http_routes) and the gRPC
// frontend (server/grpc/: grpc_server) are thin adapters over this one
// interface, so a request over one gives the same result over the other;
// both check bearer tokens with server/auth.h and render the views of
// api/views.h. Methods take and return plain types; errors
// are Statuses whose codes the adapters map onto HTTP and gRPC codes.
//
// Sessions: a client's graph, run step by step (POST /v1/sessions...).
// Sessions idle longer than `session_idle_timeout` are closed by Reap()
// (the server calls it periodically). With a store (jobs.store), every
// session gets a TensorStore on it for the Save/Restore ops: a prefix is
// one server-wide name (scope "save/<prefix>" of the variables column
// family), so what one session saves another restores, also after a
// restart. Jobs: see JobManager.
//
// Thread safety: every method is thread-safe.
#ifndef FLOWSTATE_SERVER_SERVICE_H_
#define FLOWSTATE_SERVER_SERVICE_H_

#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "devices/device_pool.h"
#include "graph/attr_value.h"
#include "graph/gradients.h"
#include "graph/status.h"
#include "graph/tensor.h"
#include "api/views.h"
#include "jobs/job_manager.h"
#include "jobs/dataset_uploads.h"
#include "jobs/model_registry.h"
#include "graph/mutex.h"

namespace flowstate {

class CancellationManager;
class ClusterView;
class Session;
class TensorStore;
class ThreadPool;

struct ServiceOptions {
  DevicePool* devices = nullptr;  // required, not owned
  std::string data_root = "/usr/share/datasets";
  int max_sessions = 64;
  // Job event streams open at once, REST (GET /v1/jobs/{id}/events) and
  // gRPC (Jobs/Watch) together; WatchJob refuses more.
  int max_event_streams = 1024;
  // Uploaded ONNX models (jobs/model_registry.h), kept in jobs.store.
  int64_t max_model_bytes = int64_t{64} << 20;
  int max_models = 100;
  // Uploaded datasets (jobs/dataset_uploads.h), beneath data_root/uploads.
  int64_t max_dataset_bytes = int64_t{4} << 30;
  int max_datasets = 100;
  std::chrono::seconds session_idle_timeout{600};
  // The longest a session step or a prediction may run (sessions.max_step_ms):
  // a step's own timeout_ms may only shorten it. 0: no bound.
  std::chrono::milliseconds max_step{0};
  int64_t max_tensor_bytes = int64_t{64} << 20;
  // The most bytes one tensor of a session's or job's graph may have when
  // its shape is known before it runs (SessionOptions::max_shape_bytes).
  int64_t max_shape_bytes = int64_t{1} << 30;
  JobManagerOptions jobs;  // devices, data_root, max_shape_bytes are filled in from above
  // This task: its job and index in the cluster ("localhost", 0 without
  // one; `devices` are named after them) and its gRPC address.
  std::string task_job = "localhost";
  int task_index = 0;
  std::string task_address;
  // The cluster view (GET /v1/cluster, GET /v1/devices): every task of the
  // cluster as the distributed runtime sees it (state, incarnation, last
  // heartbeat, devices), called on each request from any thread. Null: no
  // cluster, the view is this process alone (task_job/task_index, UP, the
  // process incarnation). Either way the task marked is_self (or, when none
  // is, the one that is task_job/task_index) gets this process's own live
  // device view and incarnation.
  std::function<ClusterInfo()> cluster;
  // The other tasks of the cluster for the sessions this service creates
  // (SessionOptions::remote): a session created once it returns non-null
  // may place nodes on every task's devices. Called from any thread; null
  // function or null result: sessions run on this process's devices only.
  std::function<ClusterView*()> cluster_view;
};


struct SessionRunRequest {
  std::vector<std::pair<std::string, Tensor>> feeds;
  std::vector<std::string> fetches;
  std::vector<std::string> targets;
  // Record where the step's time went, op by op (RunSession's `trace`).
  // Partitions on other tasks of a cluster are not in it.
  bool trace = false;
  // The step's deadline (RunOptions::timeout); 0: none.
  int64_t timeout_ms = 0;
  // The client's name for the step, by which CancelSessionStep ends it; "":
  // none. Two running steps of one session may not share one.
  std::string step_tag;
};

class Service {
 public:
  explicit Service(const ServiceOptions& options);
  ~Service();

  // --- Sessions.
  // INVALID_ARGUMENT naming the node for a bad graph; RESOURCE_EXHAUSTED at
  // max_sessions.
  StatusOr<std::string> CreateSession(const GraphDef& graph);
  Status ExtendSession(const std::string& id, const GraphDef& nodes);
  // Outputs in the order of the fetches. With req.trace and a non-null
  // `trace`, *trace is the step's trace (also when the step failed).
  StatusOr<std::vector<std::pair<std::string, Tensor>>> RunSession(const std::string& id,
                                                                   const SessionRunRequest& req,
                                                                   StepTrace* trace = nullptr);
  // Whether the step `req` of session `id` may wait or run unbounded
  // (Session::StepMayWait): true for a session not found or a signature not
  // run yet. A frontend runs a step on a thread that must not block (an
  // I/O thread) only when this is false.
  // Feeds by name.
  bool SessionStepMayWait(const std::string& id, const std::vector<std::string>& feeds,
                          const std::vector<std::string>& fetches,
                          const std::vector<std::string>& targets);
  // Ends the running step of session `id` tagged `step_tag` (CANCELLED, "the
  // step was cancelled by its caller"): true; false when none runs (it
  // ended first, or never began). NOT_FOUND for an unknown session.
  StatusOr<bool> CancelSessionStep(const std::string& id, const std::string& step_tag);
  // Closes the session: its running steps end at once with CANCELLED ("the
  // session was closed"), then it is gone.
  Status CloseSession(const std::string& id);
  // Closes sessions idle longer than the timeout; returns how many.
  int Reap();
  int num_sessions() const;

  // --- Jobs: what the frontends (REST, gRPC) may do with them, the same
  // for both (JobManager's methods, see job_manager.h).
  StatusOr<JobInfo> SubmitJob(const std::string& job_json);
  StatusOr<JobInfo> GetJob(const std::string& id) const;
  std::vector<JobInfo> ListJobs() const;
  Status CancelJob(const std::string& id);
  Status PauseJob(const std::string& id);
  Status ResumeJob(const std::string& id);
  Status DeleteJob(const std::string& id);
  // Runs under `timeout` (0: none) within options.max_step
  // (DEADLINE_EXCEEDED past it).
  Status Predict(const std::string& id, const std::vector<std::pair<std::string, Tensor>>& inputs,
                 const std::vector<std::string>& fetches, std::vector<Tensor>* outputs,
                 std::chrono::milliseconds timeout = std::chrono::milliseconds(0));
  // SessionStepMayWait for a job's predictions.
  bool PredictMayWait(const std::string& id, const std::vector<std::string>& inputs,
                      const std::vector<std::string>& fetches) const;
  // The dtype a feed `name` of session `id`, or an input of job `id`'s
  // predictions, is expected to have (its Placeholder's); nullopt when
  // unknown. A frontend reads a request's nested arrays as that dtype
  // (api::FeedDtypes).
  std::optional<DataType> SessionFeedDtype(const std::string& id, const std::string& name);
  std::optional<DataType> JobInputDtype(const std::string& id, const std::string& name) const;
  StatusOr<JobHistory> JobHistoryOf(const std::string& id) const;
  StatusOr<std::string> JobDocument(const std::string& id) const;
  StatusOr<std::vector<int64_t>> JobTracedSteps(const std::string& id) const;
  StatusOr<std::string> JobTrace(const std::string& id, int64_t step) const;
  StatusOr<CheckpointRequestResult> CheckpointJob(const std::string& id);
  StatusOr<std::vector<JobCheckpointInfo>> ListCheckpoints(const std::string& id);
  Status ExportCheckpoint(const std::string& id, int64_t step, const std::string& path,
                          checkpoints::ExportFormat format,
                          std::vector<std::string>* converted = nullptr);
  StatusOr<std::pair<std::string, int64_t>> ImportCheckpoint(const std::string& path);

  // Uploaded ONNX models (POST /v1/models). DeleteModel refuses
  // (FAILED_PRECONDITION, naming the job) while a job names the model.
  // GET /v1/jobs/{id}/model.onnx.
  StatusOr<std::string> ExportJobOnnx(const std::string& id) { return jobs_->ExportOnnx(id); }
  StatusOr<ModelInfo> UploadModel(const std::string& bytes, const std::string& name);
  StatusOr<ModelInfo> GetModel(const std::string& id) const;
  StatusOr<std::vector<ModelInfo>> ListModels() const;
  Status DeleteModel(const std::string& id);
  // Uploaded datasets (POST /v1/datasets, gRPC Datasets/*): chunks
  // appended in order (`id` "" and offset 0 start one), the final one
  // checked and the file renamed where jobs may read it
  // (jobs/dataset_uploads.h).
  StatusOr<DatasetInfo> UploadDataset(const std::string& id, int64_t offset, std::string_view chunk,
                                      bool final) {
    return datasets_.Append(id, offset, chunk, final);
  }
  StatusOr<DatasetInfo> GetDataset(const std::string& id) const { return datasets_.Get(id); }
  std::vector<DatasetInfo> ListDatasets() const { return datasets_.List(); }
  Status DeleteDataset(const std::string& id) { return datasets_.Delete(id); }
  // The manager itself, for the process that owns the service (recovery,
  // retention, metrics) and for tests; the frontends use the calls above.
  JobManager& jobs() { return *jobs_; }
  // JobManager::Watch for a frontend's event stream, counted against
  // max_event_streams until the stream is destroyed: RESOURCE_EXHAUSTED
  // naming the limit when that many are open (the frontends answer 503 and
  // RESOURCE_EXHAUSTED), NOT_FOUND for an unknown job.
  StatusOr<std::unique_ptr<JobEventStream>> WatchJob(const std::string& id, bool history);
  int num_event_streams() const { return *open_streams_; }

  // --- Graphs a client builds itself.
  // The nodes computing the gradients of `y` with respect to `xs` of
  // `graph` (graph/gradients.h GradientsOfGraph): POST /v1/gradients,
  // gRPC Graphs/Gradients.
  StatusOr<GraphGradients> Gradients(const GraphDef& graph, const std::string& y,
                                     const std::vector<std::string>& xs, const std::string& prefix) const {
    return GradientsOfGraph(graph, y, xs, prefix.empty() ? "gradients" : prefix);
  }

  // --- Introspection.
  std::vector<OpInfo> ListOps() const;
  // The devices of every task of the cluster (this process's alone without
  // one), each name carrying its task, by task then pool order.
  std::vector<DeviceInfo> ListDevices() const;
  // This process's own devices (what its device pool holds and runs).
  std::vector<DeviceInfo> ListLocalDevices() const;
  // The tasks of the cluster (ServiceOptions::cluster).
  ClusterInfo GetCluster() const;
  // Ready to serve (the store is open, workers are running).
  bool Ready() const;

  // The first half of a shutdown: refuses new sessions and steps, and
  // closes every session, which ends its running steps at once (CANCELLED:
  // "the server is shutting down"). Jobs go on until Shutdown(). Idempotent.
  void CloseSessions();
  // CloseSessions(), then stops the job workers after their current steps
  // (each job pauses or checkpoints as its policy says). Idempotent.
  void Shutdown();

  const ServiceOptions& options() const { return options_; }

 private:
  struct SessionEntry {
    std::shared_ptr<Session> session;
    std::chrono::steady_clock::time_point last_used;
  };
  StatusOr<std::shared_ptr<Session>> FindSession(const std::string& id);

  ServiceOptions options_;
  std::unique_ptr<ThreadPool> session_pool_;
  std::unique_ptr<ModelRegistry> models_;  // null when its index could not be read
  Status models_error_;                    // why not
  DatasetUploads datasets_;
  std::unique_ptr<JobManager> jobs_;
  // Open event streams; shared with the streams, which may outlive us.
  std::shared_ptr<std::atomic<int>> open_streams_ = std::make_shared<std::atomic<int>>(0);
  std::shared_ptr<TensorStore> tensor_store_;  // on jobs.store; null without one
  mutable Mutex mu_;
  std::map<std::string, SessionEntry> sessions_ ABSL_GUARDED_BY(mu_);
  // The running steps that carry a tag, by (session id, tag); each handle
  // lives on its RunSession's stack while it is here.
  std::map<std::pair<std::string, std::string>, CancellationManager*> tagged_steps_
      ABSL_GUARDED_BY(mu_);
  int64_t next_session_ ABSL_GUARDED_BY(mu_) = 1;
  bool shut_down_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace flowstate

#endif  // FLOWSTATE_SERVER_SERVICE_H_

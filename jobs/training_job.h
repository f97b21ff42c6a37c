// TrainingJob: one training job from JobSpec to trained variables — the code
// `flowstate train` runs in-process and the server's job manager runs on its
// device pool.
//
// Create() validates the whole job (graph, loss, optimizer, data files and
// their agreement with the placeholders) and builds the training graph on
// the server side: the client's forward graph, its gradients, the
// optimizer's updates and slots, and the variables' initializers. Every
// gradient reaches the optimizer through a CheckNumerics (after the loss's),
// so a step with a NaN/Inf loss or gradient applies no update (on_nan).
// Start() loads the data and initializes the variables; then each Step() runs
// one training step, Evaluate() computes the eval metrics over the eval set.
//
// Data-parallel replicas ("replicas": N > 1): each is a Replica
// (jobs/replica.h: its session, in this process or on a task, decided once
// when they start). The job runs N replicas of
// the training graph in this process, each with its own session and
// ResourceMgr (so its own variables) on its device (devices[i] when
// "devices" lists N, else all on the first or default device), joined by an
// InProcessCollective through the graph's _AllReduce nodes
// (graph/training_graph.h, scheduler/replica_comm.h). Every replica
// starts from the same initial variables (same seed). A step takes up to N
// consecutive batches of batch_size from the one seeded pipeline, all of the
// same epoch, and replica i trains on the i-th (a replica without one joins
// with zeros): the shards are disjoint, the global batch is N x batch_size,
// and the input position (a multiple of batch_size) does not depend on N,
// so a checkpoint of N replicas resumes with any other number. With
// TrainingJobOptions::batches_per_step B > N a step takes up to B batches
// and replica i trains on batches i, i + N, ... concatenated (one replica:
// all of them): what the job manager runs when a job lost replicas, so
// that its global batch stays B x batch_size. Snapshots,
// evaluation and predictions use replica 0; a job started without its data
// (predictions only) creates no other replica. Every check_replicas_every
// steps a checksum of every replica's variables is compared with replica
// 0's; a difference fails the step (INTERNAL naming the replica and the
// variable). With backup_replicas k the first N - k replicas to finish
// their backward pass contribute (StepRace); a test-only straggler delay
// (TrainingJobOptions::test_straggler) is abandoned when the step is decided
// without it.
//
// Replicas across tasks (TrainingJobOptions::remote, devices[i] on
// /job:worker/task:i for i >= 1; replica 0 on this task): replica i's
// session runs its graph on task i through the cluster, its variables live
// in that task's worker session, and the group is a GlooCollective (the
// collective factory "gloo") meeting in options.collective_store. Each
// replica there reads its own examples beneath its task's data root (a
// _ReplicaInput node, state/replica_input.h, fed only the position of the
// step's first batch: no tensor of the data crosses from here); Start()
// has every task load its copy first, so a missing or different file
// fails the start naming the replica's task and the file. The replicas
// there drive their own steps: a chunk of K steps is two messages to each
// (a seek of its input to the chunk's first batch, then one Run of the
// train op with RunOptions::iterations K), after which each task runs its
// K steps back to back, input, forward, backward, all-reduce, update, the
// all-reduce its only synchronisation with the others; this process steps
// replica 0 through the same K steps and then collects each task's status
// and all-reduce totals. K is about kChunkSeconds of steps, never past an
// epoch's end, a replica check, a traced step or max_steps (where this
// process needs the replicas idle); until the chunk's last step
// mid_chunk() is true. A replica's error fails replica 0's collective at
// once; a NaN step ends the chunk there on every replica alike. With backup
// replicas up to `backup_replicas` replicas may still be in a chunk when it
// ends here (they were dropped from its last steps and catch up on their
// own): the next chunk goes on without waiting for them, and their next
// chunk starts when theirs ends (at most kMaxLagChunks behind); whatever
// reads or writes their variables (a replica check, a restore) or runs
// their steps from here waits for them first (JoinLaggards). Jobs with the
// test straggler, and traced steps, run every replica's step from here
// instead (one message a step). Restore() feeds the checkpoint's
// values to each replica's variables through restore nodes of its graph (a
// Placeholder and an Assign per variable, "_restore/<variable>") and the
// kernels' random states to its task (Session::ImportKernelStates). Backup replicas
// race in the same store (distributed/store_step_race.h); each remote
// replica's graph also has a _ReplicaCommStats node, fetched with its step,
// so that its own all-reduce wait is reported; init_from's values reach
// them through the restore nodes too. The job manager rebuilds such a job with the
// replicas still alive when a task is lost (jobs/job_manager.h, "Replicas
// on the tasks of a cluster").
//
// Thread safety: one thread drives a job at a time (Step, Evaluate); the
// accessors of Progress are safe from any thread.
#ifndef FLOWSTATE_JOBS_TRAINING_JOB_H_
#define FLOWSTATE_JOBS_TRAINING_JOB_H_

#include <algorithm>
#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "devices/device_pool.h"
#include "graph/attr_value.h"
#include "graph/status.h"
#include "scheduler/session.h"
#include "api/job_spec.h"
#include "graph/training_graph.h"
#include "jobs/fault_points.h"
#include "jobs/onnx_model.h"
#include "state/data_source.h"
#include "state/dataset.h"
#include "state/input_pipeline.h"
#include "graph/mutex.h"

namespace flowstate {

class Replica;  // jobs/replica.h

class ClusterView;
class ReplicaComm;
class StepRace;
class StepTraceCollector;
class ThreadPool;
class Variable;

// Builds the training graph of a parsed job (graph/training_graph.h) after
// the job-level checks: replicas, that data files feed placeholders, device
// strings. Errors name the JSON path or the node ("loss: node 'nope' is not
// in the graph").
StatusOr<TrainingGraph> BuildTrainingGraph(const JobSpec& job);

// A job's "input" or "eval" (at JSON path `path`) as the DataSource that
// loads it (state/data_source.h); INVALID_ARGUMENT for a bad column dtype.
StatusOr<DataSource> ToDataSource(const DataSpec& data, const std::string& path);

struct TrainingJobOptions {
  std::string data_root = "/usr/share/datasets";
  DevicePool* devices = nullptr;      // required
  ThreadPool* inter_op_pool = nullptr;  // null: the sessions own one
  int inter_op_threads = 1;
  // SessionOptions::max_shape_bytes of the job's training graph, checked by
  // Create (0: no limit).
  int64_t max_shape_bytes = 0;
  // Replicas: the longest one collective call may wait for the others.
  std::chrono::milliseconds allreduce_timeout{std::chrono::minutes(5)};
  // Replicas on other tasks of a cluster: the cluster (null: this process
  // only), the collective store their Gloo group meets in ("host:port"),
  // and the group's key prefix there (empty: a fresh one of this process).
  ClusterView* remote = nullptr;
  std::string collective_store;
  std::string collective_prefix;
  // Batches of batch_size a step trains on, when more than `replicas`
  // (0: replicas): replica i trains on batches i, i + replicas, ... of the
  // step, concatenated. The job manager sets it to the job's replicas when
  // it runs the job with fewer (a task was lost), so that the global batch,
  // the steps per epoch and the training run stay those of the job.
  int batches_per_step = 0;
  // A job given as "model": {"onnx": ...} names a file beneath data_root or
  // an uploaded model, read through this (empty: no uploads).
  ModelReader read_model;
  // Test hook (fault injection; no job spec reaches it): a slow replica.
  fault_points::Straggler test_straggler;
};

// One replica's part of the last step (replicas > 1).
struct ReplicaStepStats {
  double step_seconds = 0;       // its part of the step, all-reduce included
  double allreduce_seconds = 0;  // inside collective calls (waiting on the others)
  int64_t allreduce_bytes = 0;
  int64_t examples = 0;          // 0: it had no batch or was dropped
  // Backup replicas: steps whose gradients did not count, of those this
  // report covers (this step; for replicas that run chunks of steps on
  // their own tasks, the chunk that ended with it, else 0).
  int64_t dropped_steps = 0;
  double loss = 0;               // the all-reduced loss it fetched
};

struct StepResult {
  int64_t step = 0;    // steps done so far, this one included
  int64_t epoch = 0;   // the epoch the step belongs to (0-based)
  double loss = 0;
  int64_t examples = 0;
  bool epoch_end = false;  // this step finished an epoch
  bool done = false;       // no more steps: the last epoch (or max_steps) is done
  // on_nan "skip_step": the loss or a gradient was NaN/Inf and the step's
  // update was not applied (loss is NaN then); nan_message says which and
  // names the step ("step 7: the loss is NaN; the step was skipped").
  bool skipped = false;
  std::string nan_message;
  // replicas > 1: each replica's part, by replica index.
  std::vector<ReplicaStepStats> replicas;
  // A step the job traces (JobSpec::trace_steps): its Chrome trace JSON
  // (api/views_json.h StepTraceToChromeJson); empty otherwise.
  std::string trace_json;
};

// A consistent snapshot of a job, taken between steps: everything a fresh
// TrainingJob of the same spec needs to continue the same run (same data
// order, same random streams, bit for bit on one thread). Tensors share the
// variables' buffers; variables copy on write, so a later step never
// changes a snapshot. Value type.
struct JobSnapshot {
  int64_t step = 0;  // steps done when it was taken
  // Every variable of TrainingGraph::variables (model, slots, global step),
  // by node name, in that order.
  std::vector<std::pair<std::string, Tensor>> variables;
  PipelinePosition position;  // of the batch the next step trains on
  uint64_t seed = 0;          // the job's seed (the position is only valid with it)
  // Kernels' states outside the variables (random streams), by node name:
  // Session::ExportKernelStates of the training session.
  std::map<std::string, std::string> kernel_states;
};

// The non-tensor part of a snapshot (step, position, seed, kernel states) as
// the opaque metadata bytes of a checkpoint (JSON text, kernel states in
// base64), and back. Decode: INVALID_ARGUMENT when the text is not one.
std::string EncodeSnapshotMetadata(const JobSnapshot& s);
Status DecodeSnapshotMetadata(std::string_view text, JobSnapshot* s);

// Checks that `values` hold every model variable of `graph` with its dtype
// and a shape it allows (extra tensors are ignored): what `init_from` needs.
// INVALID_ARGUMENT naming the variable otherwise; `what` prefixes messages.
Status CheckInitialValues(const TrainingGraph& graph,
                          const std::vector<std::pair<std::string, Tensor>>& values,
                          const std::string& what);

class TrainingJob {
 public:
  static StatusOr<std::unique_ptr<TrainingJob>> Create(const JobSpec& spec,
                                                       const TrainingJobOptions& options);
  ~TrainingJob();

  // Loads the datasets, creates the sessions, initializes the variables.
  // Without `load_data` (serving predictions of a finished job) no data is
  // read: Step() and Evaluate() then fail, Predict() and Restore() work.
  Status Start(bool load_data = true);
  // One training step. FAILED_PRECONDITION before Start() or after done.
  // A NaN/Inf loss or gradient applies no update; with on_nan "fail" it is
  // an INVALID_ARGUMENT naming the step and the tensor (IsNanError), and
  // the job is done; with "skip_step" a StepResult with `skipped`.
  StatusOr<StepResult> Step();
  // Whether a Step() error is the on_nan "fail" one.
  bool IsNanError(const Status& s) const;
  // Each eval metric's mean over the eval set (weighted by batch size).
  StatusOr<std::map<std::string, double>> Evaluate();
  bool has_eval() const { return spec_.eval.has_value(); }
  // Runs `fetches` of the inference graph with the current variables.
  // `timeout` bounds the run (DEADLINE_EXCEEDED past it; 0: none).
  Status Predict(const std::vector<std::pair<std::string, Tensor>>& inputs,
                 const std::vector<std::string>& fetches, std::vector<Tensor>* outputs,
                 std::chrono::milliseconds timeout = std::chrono::milliseconds(0));
  // Session::StepMayWait of such a Predict (true before Start()).
  bool PredictMayWait(const std::vector<std::string>& inputs,
                      const std::vector<std::string>& fetches) const;

  // The job's state between steps. FAILED_PRECONDITION before Start();
  // must not run concurrently with Step().
  StatusOr<JobSnapshot> Snapshot();
  // Continues from `snapshot` (a snapshot of a job of the same spec):
  // replaces every variable, the step count, the input position and the
  // kernels' random states. REQUIRES: Start() done, no Step() running.
  // INVALID_ARGUMENT naming the variable for a missing one or a dtype or
  // shape that does not fit; FAILED_PRECONDITION for another seed. On error
  // the job must not be stepped further (variables may be half restored).
  Status Restore(const JobSnapshot& snapshot);
  // Model variables Start() assigns after the initializers (fine-tuning
  // from another job's checkpoint); checked with CheckInitialValues there.
  // A job of an ONNX model: the model with the variables' current values
  // (api/onnx/onnx_export.h); FAILED_PRECONDITION for a job given as
  // "graph". Between steps, as ModelValues().
  StatusOr<std::string> ExportOnnx();
  void SetInitialValues(std::vector<std::pair<std::string, Tensor>> values) {
    initial_values_ = std::move(values);
  }

  // A new, unstarted job of the same spec, options and training graph: no
  // data, no sessions, no variables (what a finished job keeps, so that it
  // can be started again without data to serve predictions).
  std::unique_ptr<TrainingJob> Unstarted() const;
  // The current values of the model's variables (TrainingGraph::
  // model_variables, no slots), sharing their buffers.
  // FAILED_PRECONDITION before Start().
  StatusOr<std::vector<std::pair<std::string, Tensor>>> ModelValues();

  const JobSpec& spec() const { return spec_; }
  // The full names of the devices of this task the job runs on: each of
  // spec().devices resolved to its first matching device of the pool (or
  // the pool's default device), then those that nodes of its graph ask for
  // (a table's parts on partition_devices). Admission counts them all.
  std::vector<std::string> DeviceNames() const;
  const TrainingGraph& graph() const { return graph_; }
  int64_t steps_per_epoch() const;
  // Total steps the job will run (epochs * steps per epoch, capped by max_steps).
  int64_t total_steps() const;
  int64_t step() const { return step_; }
  // The last step done as Step() reported it, without its loss, examples
  // and replicas: step, epoch, epoch_end, done (step 0: none yet). After
  // Restore() it describes the checkpoint's step, so that the driver knows
  // what was left after it (TrainingLoop::Resume): an evaluation due at
  // that step, or nothing but finishing when training is complete.
  StepResult LastStep() const;
  int64_t train_examples() const { return train_data_.num_examples(); }
  Session* train_session() { return train_session_.get(); }
  // Replica i's training session (0: train_session()); null before Start()
  // or out of range.
  Session* replica_session(int i);
  int num_replicas() const { return spec_.replicas; }
  // Batches of batch_size a step trains on: the global batch.
  int batches_per_step() const { return std::max(spec_.replicas, options_.batches_per_step); }
  // How many steps each replica was dropped from (backup replicas); empty
  // without.
  std::vector<int64_t> dropped_steps() const;
  // Replicas across tasks run chunks of steps on their own (see above):
  // true between the first and the last step of a chunk, when this job must
  // be stepped on before anything else (pause, cancel, a rebuild); ends a
  // step sooner only by failing.
  bool mid_chunk() const { return chunk_ != nullptr; }
  // Whether a Snapshot() now would stop the chunk (shared tables, see
  // StopChunkForRead): checkpoints wait for the chunk's end.
  bool snapshot_waits_for_chunk() const { return shared_.has_value() && chunk_ != nullptr; }
  // How far a replica on another task may lag (backup replicas), in chunks.
  static constexpr int kMaxLagChunks = 5;
  InputPipeline* pipeline() { return pipeline_.get(); }

 private:
  TrainingJob(const JobSpec& spec, const TrainingJobOptions& options, TrainingGraph graph);
  StatusOr<Dataset> Load(const DataSpec& data, const std::string& path) const;
  StatusOr<std::shared_ptr<Variable>> FindVariable(const std::string& name) const;
  // The test straggler (TrainingJobOptions::test_straggler), when replica i
  // is it: waits its delay, or (backup replicas) until the step is decided
  // without it; true when it abandons the step then.
  StatusOr<bool> TestStraggler(int i, ReplicaStepStats* stats);
  // What every session of this job (replica 0's, the evaluation's, the
  // replicas') is made with: the devices, the inter-op threads, the shape cap.
  SessionOptions SessionOptionsOfJob() const;
  Status StartReplicas();
  // True when some replica's device is on another task of the cluster.
  bool ReplicasAcrossTasks() const;
  // The host replica i's all-reduce transport listens on: its task's
  // address's host in the cluster ("" when unknown: loopback).
  std::string ReplicaHost(int i) const;
  // Replicas across tasks: the replica sessions run on their tasks; each
  // makes its Gloo participant there (a _CreateReplicaComm node).
  Status StartReplicasAcrossTasks();
  // What replicas across tasks need (before anything starts).
  Status CheckReplicasAcrossTasks() const;
  // Replicas across tasks without backup replicas: the steps up to the next
  // point where this job needs the replicas idle (an epoch's end, a replica
  // check, a traced step, max_steps), at most about kChunkSeconds of them.
  int64_t ChunkSteps() const;
  // Starts the replicas on the tasks on `steps` steps from step_position_
  // (one Run with RunOptions::iterations each, on a thread per replica).
  void StartChunk(int64_t steps);
  // Waits for them (with backup replicas, for all but the laggards; see
  // above): status[i] and stats[i] for each replica i >= 1 that ended it
  // (its all-reduce wait and bytes per step, the chunk's means).
  void FinishChunk(std::vector<Status>* status, std::vector<ReplicaStepStats>* stats);
  // Waits for the replicas still in an earlier chunk (all, or `replica`'s);
  // the first error of any.
  Status JoinLaggards(int replica = -1);
  // The replica checks of laggards whose checksums have come since: the
  // first divergence.
  Status CheckPendingReplicas();
  // Replica i's checksums after `step` against replica 0's.
  Status CompareChecksums(int64_t step, int i, const std::vector<uint64_t>& got,
                          const std::vector<uint64_t>& expected) const;
  // FNV-1a over a tensor's dtype, shape and bytes.
  static uint64_t VariableChecksum(const Tensor& t);
  // The race's steps every replica is done with: ends them in the store
  // (from race_ended_ on) and reads how often each replica was dropped.
  Status EndRaceSteps(int64_t through, std::vector<ReplicaStepStats>* stats, bool one_step);
  // Replica i's graph `g` (on another task) reads its input there: its
  // input placeholders become outputs of a _ReplicaInput node
  // (state/replica_input.h) fed the step's position (kReplicaPositionNode).
  Status AddReplicaInput(int i, GraphDef* g) const;
  // Every replica on another task loads its copy of the input now; an error
  // names the replica's task and the file.
  Status CheckReplicaInputs();
  StatusOr<StepResult> StepReplicas();
  // A step whose loss or gradients were NaN/Inf (`nan`: the CheckNumerics
  // error): with on_nan "fail" the job ends with an error naming the step;
  // with "skip_step", `r` says the step was skipped (loss NaN). The batch
  // counts as used either way.
  Status OnNanStep(const Status& nan, StepResult* r);
  // Runs replica i's part of a step on `batch` (null: it joins with zeros).
  Status RunReplica(int i, const Batch* batch, ReplicaStepStats* stats);
  // RunReplica of a replica on another task.
  Status RunRemoteReplica(int i, const Batch* batch, ReplicaStepStats* stats);
  Status CheckReplicasAgree();
  // Replica i's `variables` set from `values` (every name must be there;
  // Replica::AssignVariables), once it is done with any earlier chunk.
  Status AssignReplicaVariables(int i, const std::vector<std::string>& variables,
                                const std::map<std::string, const Tensor*>& values);
  // Restore's part for replica i >= 1: its variables from `values` (as
  // above) and the kernels' random states (wherever its kernels run).
  Status RestoreReplica(int i, const std::map<std::string, const Tensor*>& values,
                        const std::map<std::string, std::string>& kernel_states);
  // Replica i's values of graph().variables (Replica::ReadVariables), once
  // it is done with any earlier chunk.
  StatusOr<std::vector<Tensor>> ReadReplicaVariables(int i);
  // Shared tables (see above): the variables replica i holds
  // (graph().variables without the shared parts others hold); every
  // variable without shared tables.
  const std::vector<std::string>& ReplicaVariables(int i) const;
  // The variables every replica holds, which replica checks compare.
  const std::vector<std::string>& CheckedVariables() const;
  // Whether replica i holds variable v (every variable but the shared
  // parts other replicas hold).
  bool Holds(int i, const std::string& v) const;
  // Of `names`, those replica i holds, in order.
  std::vector<std::string> HeldBy(int i, const std::vector<std::string>& names) const;
  // The values of `names` (variables of graph()), each read from a replica
  // that holds it: replica 0's here, a shared part from its holder.
  // Mid-chunk (`stop_chunk`, on the job's thread) the chunk is stopped
  // first (StopChunkForRead).
  StatusOr<std::vector<std::pair<std::string, Tensor>>> ReadHeldVariables(
      const std::vector<std::string>& names, bool stop_chunk = true);
  // Shared tables, mid-chunk: the parts on the tasks are at a step's end
  // only between chunks, so a read (a shutdown's checkpoint) ends the chunk
  // by failing the group; the job's next Step() fails (it is rebuilt).
  // The job manager defers its checkpoints to a chunk's end instead
  // (snapshot_waits_for_chunk).
  Status StopChunkForRead();
  // Shared tables: copies the model's parts that replica 0 does not hold
  // into the evaluation session (its "_restore/<part>" nodes), unless they
  // are from this step already; evaluation and predictions read them there.
  // `step`: what the copies are from (Evaluate's step; 0 from Predict).
  Status SyncSharedParts(int64_t step);
  // Shared tables: the model's parts replica 0 does not hold.
  std::vector<std::string> ModelPartsElsewhere() const;
  bool Finished() const { return FinishedAfter(step_); }
  // Whether the job is over once `steps` steps are done (the input's
  // position is read as it is now).
  bool FinishedAfter(int64_t steps) const;

  JobSpec spec_;
  TrainingJobOptions options_;
  TrainingGraph graph_;
  Dataset train_data_;
  Dataset eval_data_;
  std::unique_ptr<Session> train_session_;
  std::unique_ptr<Session> eval_session_;
  std::unique_ptr<InputPipeline> pipeline_;
  // Every replica (jobs/replica.h), replica 0 on train_session_; one for a
  // job without replicas.
  std::vector<std::unique_ptr<Replica>> replicas_;
  // Shared tables (spec "partitioned_tables": "shared", replicas across
  // tasks; graph/shared_tables.h), set by Start(): each replica's graph's
  // variables and buckets, and the holder of each shared part.
  struct SharedTables {
    std::vector<std::vector<std::string>> variables;  // by replica
    std::vector<std::string> replicated;              // held by every replica
    std::map<std::string, int> holders;
    int num_buckets = 0;
    std::vector<GraphDef> graphs;  // by replica (0: train_session_'s)
  };
  std::optional<SharedTables> shared_;
  bool stopped_for_read_ = false;  // StopChunkForRead ended a chunk: no more steps
  // The step the evaluation session's copies of the shared parts are from
  // (-1: none yet); Predict may run beside Step.
  Mutex sync_mu_;
  int64_t synced_step_ ABSL_GUARDED_BY(sync_mu_) = -1;
  std::shared_ptr<StepRace> race_;
  // Backup replicas: how many steps each replica was dropped from (after
  // the last step), and the race's number of the step running now.
  std::vector<int64_t> dropped_;
  int64_t race_step_ = 0;
  // Replicas on other tasks: the totals (all-reduce seconds, bytes) that
  // each reported with its last step.
  std::vector<std::pair<double, double>> remote_totals_;
  // Replicas across tasks: the chunk of steps they run on their own now
  // (null between chunks), the last chunk's per-step means of each
  // replica's stats, and the measured time of a step (for the chunk size).
  struct RemoteChunk {
    int64_t end_step = 0;  // step_ once its last step is done
    int64_t steps = 0;
    int64_t first_race_step = 0;  // the race's number of its first step
    std::chrono::steady_clock::time_point start;
    std::vector<std::thread> threads;  // by replica (0: none)
  };
  // What the chunks' threads report, by replica: the race steps it is done
  // with, its chunks not yet ended, its first error.
  struct RemoteProgress {
    Mutex mu;
    CondVar cv;
    std::vector<int64_t> done_through ABSL_GUARDED_BY(mu);
    std::vector<int> outstanding ABSL_GUARDED_BY(mu);
    std::vector<Status> failed ABSL_GUARDED_BY(mu);
    // Checksums of each variable after a replica check's step, read by the
    // chunk's thread: step -> checksums, by replica.
    std::vector<std::map<int64_t, std::vector<uint64_t>>> sums ABSL_GUARDED_BY(mu);
  };
  // Replica checks waiting for a laggard's checksums: the step, the replica,
  // replica 0's checksums then.
  struct PendingCheck {
    int64_t step = 0;
    int replica = 0;
    std::vector<uint64_t> expected;
  };
  std::vector<PendingCheck> pending_checks_;
  std::unique_ptr<RemoteChunk> chunk_;
  std::shared_ptr<RemoteProgress> progress_;
  // Replicas whose chunk had not ended with replica 0's: the thread of their
  // latest chunk, by replica (not joinable: none).
  std::vector<std::thread> laggards_;
  int64_t race_ended_ = 0;  // the race's steps before this one are ended
  std::vector<ReplicaStepStats> chunk_means_;
  double step_seconds_ = 0;
  // During StepReplicas: the position of the step's first batch (what
  // replicas on other tasks are fed: they read their examples there), and
  // the trace the replicas record into when the step is traced (else null).
  PipelinePosition step_position_;
  StepTraceCollector* step_trace_ = nullptr;
  InputPipelineOptions pipeline_options_;
  std::vector<std::pair<std::string, Tensor>> initial_values_;
  // A job of an ONNX model: the values its variables start from (the
  // file's), assigned by every Start before initial_values_.
  std::shared_ptr<const InitialValues> model_values_;
  std::shared_ptr<const OnnxSource> onnx_source_;  // with model_values_
  int64_t step_ = 0;
  bool started_ = false;
  bool done_ = false;
};

}  // namespace flowstate

#endif  // FLOWSTATE_JOBS_TRAINING_JOB_H_

// JobSpec: a training job as a client describes it (DESIGN.md, "A training
// job"), parsed from JSON with every error naming the JSON path of the bad
// field ("optimizer.learning_rate: must be > 0").
//
// Parsing checks the form of each field; TrainingJob::Create
// (jobs/training_job.h) then checks the job against its graph and its data.
// Value type.
#ifndef FLOWSTATE_API_JOB_SPEC_H_
#define FLOWSTATE_API_JOB_SPEC_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "graph/attr_value.h"
#include "graph/optimizers.h"
#include "graph/status.h"

namespace flowstate {

struct CsvColumns {
  std::vector<int> indices;        // by position, or
  std::vector<std::string> names;  // by header name
  std::string dtype = "float32";
};

struct DataSpec {
  std::string format = "idx";                // "idx", "csv" or "npy"
  std::map<std::string, std::string> files;  // placeholder name -> path under the data root
  // csv only: one file for all components, columns chosen per component.
  std::map<std::string, CsvColumns> columns;
  std::optional<bool> header;                // csv: default auto-detect
  char delimiter = ',';
  int64_t batch_size = 32;
  std::optional<int64_t> max_examples;       // use only the first N examples
};

struct InputSpec : DataSpec {
  bool shuffle = true;
  int64_t epochs = 1;
  bool drop_remainder = false;
  int prefetch = 4;
};

struct EvalSpec : DataSpec {
  std::vector<std::string> metrics;  // scalar nodes, reported as means over the set
  int64_t every_epochs = 1;
};

struct CheckpointSpec {
  int64_t every_steps = 0;      // 0: not by steps
  double every_seconds = 0;     // 0: not by time
  int keep = 3;
};

// Start the model's variables from another job's checkpoint (fine-tuning);
// variables are matched by name.
struct InitFromSpec {
  std::string job;   // a job id (or an imported checkpoint's id)
  int64_t step = 0;  // the checkpoint's step
};

// What a step whose loss or gradients are NaN/Inf does: its update is never
// applied; kFail fails the job naming the step, kSkipStep goes on with the
// next batch (the step is counted as skipped).
enum class OnNan { kFail, kSkipStep };

// "model": an ONNX model instead of "graph" (jobs/onnx_model.h builds the
// forward graph, the loss and the starting values from it).
struct OnnxFeedSpec {
  std::string input;  // the ONNX graph input this dataset field feeds
  // The field is cast to the input's dtype, then x * scale + shift, then
  // reshaped to the input's shape (batch first).
  double scale = 1;
  double shift = 0;
};

struct ModelSpec {
  // A file beneath the data root (its name ends in ".onnx") or the id of a
  // model uploaded with POST /v1/models.
  std::string onnx;
  std::map<std::string, OnnxFeedSpec> inputs;  // dataset field -> what it feeds
  std::string output;  // the ONNX output the loss reads; empty: the model's only output
  std::string labels;  // the dataset field of the targets ("" with loss "output")
  // "softmax_cross_entropy" (logits [batch, classes], integer labels),
  // "mse", "binary_cross_entropy" (probabilities), "binary_cross_entropy_with_logits",
  // or "output" (`output` is the loss already, a scalar).
  std::string loss = "softmax_cross_entropy";
};

// The names ModelSpec::loss accepts.
const std::vector<std::string>& OnnxLossNames();

struct JobSpec {
  std::string name;
  GraphDef graph;  // empty when `model` is given (until jobs/onnx_model.h fills it)
  std::optional<ModelSpec> model;
  std::string loss;
  std::string optimizer_type = "sgd";
  OptimizerOptions optimizer;
  InputSpec input;
  std::optional<EvalSpec> eval;
  CheckpointSpec checkpoint;
  std::vector<std::string> devices;  // e.g. ["CPU:0"]; empty: the default device
  int replicas = 1;
  // In a cluster, a job with replicas and no `devices` is placed this many
  // replicas a task, in task order from the task that received it
  // (jobs/job_manager.h, "Placement"); 0: ceil(replicas / tasks), i.e. one
  // replica a task when there are enough tasks. Not with `devices`.
  int replicas_per_task = 0;
  // Data-parallel replicas (replicas > 1; jobs/training_job.h): gradients
  // are all-reduced in buckets of about this many bytes (a smaller first
  // one), in the order the backward pass produces them.
  int64_t bucket_bytes = 25 << 20;
  // Sparse gradients (embedding lookups) travel between replicas as the
  // rows they touch, by all-gather; true: densified into the buckets
  // instead (cheaper only when a step touches most of a table). Backup
  // replicas always densify them.
  bool sparse_as_dense = false;
  // "partitioned_tables": "shared" (true): replicas on the tasks of a
  // cluster keep one copy of each partitioned table, part p (and its
  // optimizer slots) on replica p % replicas, and look rows up from it
  // (graph/shared_tables.h); "replicated" (false, the default): every
  // replica holds the whole table.
  bool shared_tables = false;
  // Backup replicas: each step uses the gradients of the first
  // replicas - backup_replicas replicas to finish their backward pass.
  int backup_replicas = 0;
  // Replicas on the tasks of a cluster (jobs/training_job.h): when a
  // replica's task is lost the job resumes from its last checkpoint with
  // the replicas still alive if there are at least min_replicas of them
  // (1 <= min_replicas <= replicas; default: replicas, i.e. wait), else it
  // waits up to replica_wait_seconds for tasks to come back, then fails.
  int min_replicas = 1;
  double replica_wait_seconds = 300;
  // Compare a checksum of the variables across replicas every this many
  // steps (0: never); a difference fails the job.
  int64_t check_replicas_every = 100;
  // A fixed reduction order: two runs are bit-identical (refuses backup
  // replicas, whose choice depends on timing).
  bool deterministic = false;
  uint64_t seed = 0;  // initializers, shuffling and dropout derive from it
  std::optional<int64_t> max_steps;  // stop early after this many steps
  std::optional<InitFromSpec> init_from;
  OnNan on_nan = OnNan::kFail;  // "on_nan": "fail" | "skip_step"
  // "trace": {"steps": [100, 101]}: the steps (1-based, as JobInfo::step
  // counts them) whose ops are traced (GET /v1/jobs/{id}/traces/{step}); at
  // most kMaxTracedSteps, distinct, ascending once parsed. With replicas,
  // the replicas in this process record into the one trace.
  std::vector<int64_t> trace_steps;
};

inline constexpr int kMaxTracedSteps = 16;

// INVALID_ARGUMENT with the JSON path of the first bad field; unknown fields
// are errors too (a typo must not be silently ignored).
StatusOr<JobSpec> ParseJobSpec(std::string_view json);

}  // namespace flowstate

#endif  // FLOWSTATE_API_JOB_SPEC_H_

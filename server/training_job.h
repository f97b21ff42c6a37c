// TrainingJob: one training job from JobSpec to trained variables — the code
// `flowstate train` runs in-process and the server's job manager runs on its
// device pool.
//
// Create() validates the whole job (graph, loss, optimizer, data files and
// their agreement with the placeholders) and builds the training graph on
// the server side: the client's forward graph, its gradients, the
// optimizer's updates and slots, and the variables' initializers. Start()
// loads the data and initializes the variables; then each Step() runs one
// training step, Evaluate() computes the eval metrics over the eval set.
//
// Thread safety: one thread drives a job at a time (Step, Evaluate); the
// accessors of Progress are safe from any thread.
#ifndef FLOWSTATE_SERVER_TRAINING_JOB_H_
#define FLOWSTATE_SERVER_TRAINING_JOB_H_

#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "devices/device_pool.h"
#include "graph/attr_value.h"
#include "graph/status.h"
#include "scheduler/session.h"
#include "server/job_spec.h"
#include "state/dataset.h"
#include "state/input_pipeline.h"

namespace flowstate {

class ThreadPool;

struct TrainingGraph {
  GraphDef graph;       // forward + gradients + optimizer + initializers
  GraphDef eval_graph;  // the forward graph in inference mode
  std::string loss;     // tensor name
  std::string train_op;
  std::string init_op;          // initializers of the model's variables
  std::string optimizer_init;   // slots and the global step
  std::string global_step;
  std::vector<std::string> variables;  // every Variable (model, slots, step)
  std::vector<std::string> trainable;  // model variables that get gradients
};

// Builds the training graph of a parsed job. Errors name the JSON path or
// the node ("loss: node 'nope' is not in the graph").
StatusOr<TrainingGraph> BuildTrainingGraph(const JobSpec& job);

struct TrainingJobOptions {
  std::string data_root = "/usr/share/datasets";
  DevicePool* devices = nullptr;      // required
  ThreadPool* inter_op_pool = nullptr;  // null: the sessions own one
  int inter_op_threads = 1;
};

struct StepResult {
  int64_t step = 0;    // steps done so far, this one included
  int64_t epoch = 0;   // the epoch the step belongs to (0-based)
  double loss = 0;
  int64_t examples = 0;
  bool epoch_end = false;  // this step finished an epoch
  bool done = false;       // no more steps: the last epoch (or max_steps) is done
};

class TrainingJob {
 public:
  static StatusOr<std::unique_ptr<TrainingJob>> Create(const JobSpec& spec,
                                                       const TrainingJobOptions& options);
  ~TrainingJob();

  // Loads the datasets, creates the sessions, initializes the variables.
  Status Start();
  // One training step. FAILED_PRECONDITION before Start() or after done.
  StatusOr<StepResult> Step();
  // Each eval metric's mean over the eval set (weighted by batch size).
  StatusOr<std::map<std::string, double>> Evaluate();
  bool has_eval() const { return spec_.eval.has_value(); }
  // Runs `fetches` of the inference graph with the current variables.
  Status Predict(const std::vector<std::pair<std::string, Tensor>>& inputs,
                 const std::vector<std::string>& fetches, std::vector<Tensor>* outputs);

  const JobSpec& spec() const { return spec_; }
  const TrainingGraph& graph() const { return graph_; }
  int64_t steps_per_epoch() const;
  // Total steps the job will run (epochs * steps per epoch, capped by max_steps).
  int64_t total_steps() const;
  int64_t step() const { return step_; }
  int64_t train_examples() const { return train_data_.num_examples(); }
  Session* train_session() { return train_session_.get(); }
  InputPipeline* pipeline() { return pipeline_.get(); }

 private:
  TrainingJob(const JobSpec& spec, const TrainingJobOptions& options, TrainingGraph graph);
  StatusOr<Dataset> Load(const DataSpec& data, const std::string& path) const;

  JobSpec spec_;
  TrainingJobOptions options_;
  TrainingGraph graph_;
  Dataset train_data_;
  Dataset eval_data_;
  std::unique_ptr<Session> train_session_;
  std::unique_ptr<Session> eval_session_;
  std::unique_ptr<InputPipeline> pipeline_;
  int64_t step_ = 0;
  bool started_ = false;
  bool done_ = false;
};

}  // namespace flowstate

#endif  // FLOWSTATE_SERVER_TRAINING_JOB_H_

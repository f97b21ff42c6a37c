// The training-graph builder: a pure graph transformation from a model (the
// client's forward graph, a scalar loss, an optimizer, a seed) to the graph a
// training job runs -- the forward graph, its gradients (AddGradients), the
// NaN/Inf guard, the optimizer's updates and slots (BuildOptimizer) and the
// variables' initializers (AddVariableInitializers) -- plus the forward
// graph in inference mode for evaluation and predictions. Partitioned
// variables are expanded first (ExpandPartitionedVariables), so each part
// gets its own sparse gradient, update and slots; both graphs hold the
// parts, and TrainingGraph::partitioned says which tables they make up.
//
// Data-parallel replicas (spec.replicas > 1): every replica runs the same
// graph, and the builder inserts the all-reduce between the gradients and
// the optimizer, so the optimizer and its slots stay ordinary graph ops and
// every replica applies the same update. The loss and the gradients go
// through _AllReduce nodes ("replicas/allreduce_<k>"), one per bucket: the
// loss and then the gradients in the order the backward pass produces them
// (the variables in reverse topological order), cut into buckets of about
// spec.bucket_bytes (the first one at most 1 MiB, so that communication
// starts early). Each reduces count * tensor over the replicas and divides by
// the sum of the counts, the examples each replica fed into the float64
// placeholder "replicas/examples": the result is the gradient of the global
// batch's mean loss whatever the split, and a replica without data (or a
// dropped backup replica) contributes zeros with count 0. Sparse (Gather)
// gradients travel as rows (spec.sparse_allgather): one _AllGather each
// ("replicas/allgather_<k>", numbered after the dense buckets) gathers every
// replica's indices and weighted values, so a step sends the rows it
// touched, not the table; the optimizer sums the rows of equal indices,
// which gives the dense sum. Without sparse_allgather (backup replicas
// across processes, whose steps go on with some replicas only) they are
// densified before the all-reduce (UnsortedSegmentSum).
//
// Every gradient reaches the optimizer through a CheckNumerics (after the
// loss's), so a step with a NaN/Inf loss or gradient applies no update.
//
// Pure functions; thread-safe.
#ifndef FLOWSTATE_GRAPH_TRAINING_GRAPH_H_
#define FLOWSTATE_GRAPH_TRAINING_GRAPH_H_

#include <cstdint>
#include <string>
#include <vector>

#include "graph/graph.h"
#include "graph/optimizers.h"
#include "graph/partitioned_variables.h"
#include "graph/status.h"
#include "graph/tensor_shape.h"
#include "graph/types.h"

namespace flowstate {

// What the builder needs from a job.
struct TrainingGraphSpec {
  GraphDef graph;   // the forward graph, with its Variables and their "init"
  std::string loss;  // a scalar float tensor of `graph` ("loss", "loss:0")
  OptimizerOptions optimizer;
  uint64_t seed = 0;  // initializers derive from it
  // Evaluation metrics: scalar numeric tensors of `graph`, checked here
  // (errors name them "eval.metrics[i]").
  std::vector<std::string> metrics;
  // Data-parallel replicas (see above); 1: no all-reduce.
  int replicas = 1;
  int64_t bucket_bytes = 25 << 20;
  bool sparse_allgather = true;  // sparse gradients travel as rows (above)
  std::string allreduce_group = "replicas";  // the _AllReduce nodes' `group`
};

// One _AllReduce node: its outputs, in order, replace the loss (bucket 0's
// first output) and the gradients. Or (`gather`) one _AllGather node of a
// sparse gradient: its outputs replace the gradient's indices and values;
// `shapes` are theirs with no rows (a first dimension of 0), and `bytes` 0.
struct AllReduceBucket {
  std::string node;
  std::vector<std::string> tensors;  // what it reduces (loss, gradients), inputs 0..n-1
  std::vector<DataType> dtypes;
  std::vector<TensorShape> shapes;
  int64_t bytes = 0;
  bool gather = false;
};

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
  std::vector<std::string> model_variables;  // the client's variables (no slots, no step)
  // Partitioned variables and their slots (graph/partitioned_variables.h):
  // `variables` and `model_variables` list their parts; checkpoints hold the
  // logical tables (AssembleLogical, SplitLogical).
  std::vector<PartitionedVariable> partitioned;
  // The CheckNumerics nodes that guard the update (the loss's, then one per
  // gradient): a step that fails in one of them had a NaN/Inf loss or
  // gradient and applied no update.
  std::vector<std::string> numerics_checks;
  // Replicas > 1 only: the buckets in reduction order, and the float64
  // scalar placeholder each replica feeds with its examples of the step.
  // `loss` is then the all-reduced loss (the global batch's mean).
  std::vector<AllReduceBucket> allreduce;
  std::string replica_examples;
};

// Builds the training graph. INVALID_ARGUMENT naming the JSON path of the
// job field or the node: a loss that is not a scalar float tensor of the
// graph, a metric that is not a scalar numeric one, no Variable, no variable
// the loss depends on, a variable without an initializer; with replicas, a
// trained variable whose shape is not fully known.
StatusOr<TrainingGraph> BuildTrainingGraph(const TrainingGraphSpec& spec);

}  // namespace flowstate

#endif  // FLOWSTATE_GRAPH_TRAINING_GRAPH_H_

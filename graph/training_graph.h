// The training-graph builder: a pure graph transformation from a model (the
// client's forward graph, a scalar loss, an optimizer, a seed) to the graph a
// training job runs -- the forward graph, its gradients (AddGradients), the
// NaN/Inf guard, the optimizer's updates and slots (BuildOptimizer) and the
// variables' initializers (AddVariableInitializers) -- plus the forward
// graph in inference mode for evaluation and predictions. Data-parallel
// replicas will insert their all-reduce between the gradients and the
// optimizer here.
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
#include "graph/status.h"

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
  // The CheckNumerics nodes that guard the update (the loss's, then one per
  // gradient): a step that fails in one of them had a NaN/Inf loss or
  // gradient and applied no update.
  std::vector<std::string> numerics_checks;
};

// Builds the training graph. INVALID_ARGUMENT naming the JSON path of the
// job field or the node: a loss that is not a scalar float tensor of the
// graph, a metric that is not a scalar numeric one, no Variable, no variable
// the loss depends on, a variable without an initializer.
StatusOr<TrainingGraph> BuildTrainingGraph(const TrainingGraphSpec& spec);

}  // namespace flowstate

#endif  // FLOWSTATE_GRAPH_TRAINING_GRAPH_H_

// Optimizers as graph builders: given variables and their gradients, they
// emit ordinary ops — the slot variables they need (momentum accumulators,
// Adam's moments), a global step, the learning-rate schedule computed from
// it, optional clipping by global norm, and Assign*/Scatter* updates (Adam's
// as one fused ApplyAdam per variable, a plain op with a CPU kernel) — and
// return the name of one op that applies a whole step. No optimizer needs
// runtime support, so a user can write a new one the same way.
//
// Updates run after every gradient of the step is computed (a barrier of
// control edges), so no gradient reads a variable another update already
// changed.
//
// Sparse gradients (Gather's rows: indices and values) are applied by the
// SparseApply* ops, which touch only the rows named (duplicates summed
// first), so a step costs in proportion to the rows used, not to the table.
// SGD and AdaGrad leave an untouched row alone anyway: their sparse update
// is the dense one, bit for bit. Momentum, Adam and RMSProp are *lazy* on
// sparse gradients (TensorFlow's LazyAdam, PyTorch's SparseAdam): the slots
// of rows absent from a step do not decay and those rows do not move; a
// row's update uses the optimizer's global step count (Adam's bias
// correction), so a row used in every step follows the dense optimizer
// (Momentum bit for bit; RMSProp and Adam to a few ulps: float32 RMSProp
// takes 1 - rho in float32, and ApplyAdam's loop may be compiled with fused
// multiply-adds where the sparse one is not). `sparse_updates = false`
// densifies instead (the dense optimizer's result, at the cost of the whole
// table every step). Clipping by global norm sums a sparse gradient's
// duplicate rows first (Unique and UnsortedSegmentSum), so that its norm is
// the dense gradient's.
//
// Deterministic: the same graph, options and data give the same numbers bit
// for bit (on the same thread counts).
#ifndef FLOWSTATE_GRAPH_OPTIMIZERS_H_
#define FLOWSTATE_GRAPH_OPTIMIZERS_H_

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "graph/gradients.h"
#include "graph/scope.h"
#include "graph/status.h"

namespace flowstate {

struct LearningRateSchedule {
  enum class Kind { kConstant, kExponentialDecay, kCosineDecay };
  Kind kind = Kind::kConstant;
  int64_t decay_steps = 1000;  // exponential and cosine
  double decay_rate = 0.96;    // exponential: lr * rate^(step / decay_steps)
  bool staircase = false;      // exponential: floor(step / decay_steps)
  double alpha = 0.0;          // cosine: the floor, as a fraction of lr
};

struct OptimizerOptions {
  enum class Kind { kSgd, kMomentum, kAdam, kAdaGrad, kRmsProp };
  Kind kind = Kind::kSgd;
  double learning_rate = 0.01;
  // momentum; rmsprop. Unset: the kind's default (EffectiveMomentum): 0.9
  // for momentum, 0 for rmsprop -- the same from C++ and from a JSON job.
  std::optional<double> momentum;
  bool nesterov = false;       // momentum
  double beta1 = 0.9;          // adam
  double beta2 = 0.999;        // adam
  // adam, adagrad, rmsprop. Unset: the kind's default (EffectiveEpsilon):
  // 1e-7 for adagrad (as Keras), 1e-8 for adam and rmsprop.
  std::optional<double> epsilon;
  double rho = 0.9;            // rmsprop
  double initial_accumulator = 0.1;  // adagrad
  double clip_global_norm = 0;  // > 0: scale gradients so their global norm is at most this
  // Sparse gradients by SparseApply* (lazy for momentum, adam and rmsprop);
  // false: densified, then the dense update.
  bool sparse_updates = true;
  LearningRateSchedule schedule;
};

// The value an optimizer of `o.kind` uses: the one set, else the kind's
// default (the one place the defaults are written).
double EffectiveMomentum(const OptimizerOptions& o);
double EffectiveEpsilon(const OptimizerOptions& o);

// INVALID_ARGUMENT naming the field ("optimizer.learning_rate: must be > 0").
Status ValidateOptimizerOptions(const OptimizerOptions& options);

// "sgd", "momentum", "adam", "adagrad", "rmsprop".
StatusOr<OptimizerOptions::Kind> OptimizerKindFromString(const std::string& name);

struct TrainOp {
  std::string train;        // run it to apply one step
  std::string init;         // initializes slots and the global step
  std::string global_step;  // an int64 Variable counting applied steps
  Output learning_rate;     // the scheduled learning rate (scalar)
  std::vector<std::string> slot_variables;
  // Each slot variable: the variable it serves and the slot's name
  // ("momentum", "adam_m", ...), in slot_variables' order.
  struct Slot {
    std::string node;
    std::string variable;
    std::string slot;
  };
  std::vector<Slot> slots;
};

struct VariableGradient {
  Output variable;  // a Variable node's output
  DataType dtype = DataType::kFloat32;
  PartialShape shape;  // must be fully defined for optimizers with slots
  Gradient gradient;   // None: the variable is left alone
};

// Emits the optimizer under `scope` (node names "<name>/..."). INVALID_ARGUMENT
// for bad options (naming the field) or a variable whose shape is not fully
// defined where slots need it.
StatusOr<TrainOp> BuildOptimizer(const Scope& scope, const std::string& name,
                                 const OptimizerOptions& options,
                                 const std::vector<VariableGradient>& vars);

}  // namespace flowstate

#endif  // FLOWSTATE_GRAPH_OPTIMIZERS_H_

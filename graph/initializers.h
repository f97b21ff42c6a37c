// Variable initializers as graph builders: for each Variable that declares
// how it starts (attr `init`), an Assign of that initial value computed by
// ordinary ops (Fill, RandomUniform, ...). Glorot and He initializers take
// fan-in/fan-out from the shape ([in, out] for matrices, [h, w, in, out]
// for convolution filters).
//
// Random initializers are seeded from (graph seed, variable name) unless the
// variable sets `seed`, so the same graph and seed always give the same
// numbers. Pure functions of their inputs.
#ifndef FLOWSTATE_GRAPH_INITIALIZERS_H_
#define FLOWSTATE_GRAPH_INITIALIZERS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "graph/scope.h"
#include "graph/status.h"

namespace flowstate {

struct InitializerResult {
  std::string init_op;                 // a NoOp running every initializer
  std::vector<std::string> initialized;  // variables given an initializer
  std::vector<std::string> without_init;  // variables that declare none
};

// INVALID_ARGUMENT naming the variable for an unknown `init`, or a random
// or fan-based initializer on a shape that is not fully defined.
StatusOr<InitializerResult> AddVariableInitializers(const Scope& scope, uint64_t graph_seed);

// The initializer names accepted by `init`.
const std::vector<std::string>& InitializerNames();

// A deterministic nonzero 63-bit seed for (graph_seed, name).
int64_t DeriveSeed(uint64_t graph_seed, const std::string& name);

}  // namespace flowstate

#endif  // FLOWSTATE_GRAPH_INITIALIZERS_H_

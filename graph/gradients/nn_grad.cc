// Gradient functions of the nn ops (placeholder until they land).
#include "graph/gradients.h"

namespace flowstate::internal {

void RegisterNnGradients(GradientRegistry* r) {}

}  // namespace flowstate::internal

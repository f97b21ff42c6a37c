// Gradient functions of the array ops (placeholder until they land).
#include "graph/gradients.h"

namespace flowstate::internal {

void RegisterArrayGradients(GradientRegistry* r) {}

}  // namespace flowstate::internal

// Gradient functions of the math ops (placeholder until they land).
#include "graph/gradients.h"

namespace flowstate::internal {

void RegisterMathGradients(GradientRegistry* r) {}

}  // namespace flowstate::internal

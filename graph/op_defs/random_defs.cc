// Seeded random tensors. With seed and seed2 both 0 a kernel draws a fresh
// seed; otherwise the same (seed, seed2) gives the same sequence of tensors.
#include "graph/op_defs/register_defs.h"

namespace flowstate::internal {

Status ShapeFromInput0(InferenceContext* c);  // array_defs.cc

namespace {

void Random(OpRegistry* r, const char* name, const char* a1, const char* a2, const char* doc) {
  MustRegister(r, OpDefBuilder(name)
                      .Input("shape: T")
                      .Output("output: dtype")
                      .Attr("T: {int32, int64} = int32")
                      .Attr("dtype: {float32, float64} = float32")
                      .Attr("seed: int = 0")
                      .Attr("seed2: int = 0")
                      .Attr(a1)
                      .Attr(a2)
                      .SetIsStateful()
                      .SetShapeFn(ShapeFromInput0)
                      .Doc(doc));
}

}  // namespace

void RegisterRandomOps(OpRegistry* r) {
  Random(r, "RandomUniform", "minval: float = 0", "maxval: float = 1",
         "Uniform values in [minval, maxval).");
  Random(r, "RandomNormal", "mean: float = 0", "stddev: float = 1",
         "Normally distributed values.");
  Random(r, "TruncatedNormal", "mean: float = 0", "stddev: float = 1",
         "Normal values, redrawn when more than two standard deviations from the mean.");
}

}  // namespace flowstate::internal

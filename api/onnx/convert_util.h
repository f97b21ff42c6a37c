// Helpers shared by the converters of the table (onnx_ops.cc and the
// onnx_*_ops.cc files that hold them): axis checks, layout transposes,
// padding built from existing Flowstate ops, small constant folding.
// Internal to api/onnx/. Free functions; single-threaded like NodeContext.
#ifndef FLOWSTATE_API_ONNX_CONVERT_UTIL_H_
#define FLOWSTATE_API_ONNX_CONVERT_UTIL_H_

#include <optional>
#include <vector>

#include "api/onnx/node_context.h"

namespace flowstate::onnx_import {

// `axis` in [-rank, rank) (or [-rank, rank] with `inclusive`) made
// non-negative; INVALID_ARGUMENT naming `what` otherwise.
StatusOr<int> NormAxis(const NodeContext& c, int64_t axis, int rank, const char* what,
                       bool inclusive = false);
// UNIMPLEMENTED unless the rank of input `what` is known.
Status NeedRank(const NodeContext& c, const Value& v, const char* what);
// UNIMPLEMENTED unless v is float16/32/64 (Flowstate's float kernels).
Status NeedFloat(const NodeContext& c, const Value& v, const char* what);

// x transposed by perm; when x is itself a Transpose by the inverse perm,
// that Transpose's input (no node is added). Every Transpose made is noted
// (ModelState::transposes) for the element-wise ops to move through.
Output Transpose(NodeContext& c, const Output& x, const std::vector<int64_t>& perm);
// Shape(x) as an int64 vector.
Output ShapeVector(NodeContext& c, const Output& x);
// Dimension `axis` of x as an int64 scalar: a Const when ONNX's shape
// inference knows it, else Gather(Shape(x), axis).
Output DimScalar(NodeContext& c, const Value& x, int axis);
// x reversed along `axis` (a StridedSlice with stride -1).
Output Reverse(NodeContext& c, const Output& x, int rank, int axis);

// x padded along `axis` (of a tensor of rank `rank`) with `before` and
// `after` copies of the scalar `fill` (Fill + Concat), or in mode "edge"
// the edge slices repeated, or in mode "reflect" the slices mirrored
// (without the edge).
enum class PadMode { kConstant, kEdge, kReflect };
Output PadAxis(NodeContext& c, const Output& x, int rank, int axis, int64_t before, int64_t after,
               const Output& fill, PadMode mode = PadMode::kConstant);
// Pads every axis: pads = [b_0, ..., b_{r-1}, e_0, ..., e_{r-1}], each >= 0.
Output PadAll(NodeContext& c, const Output& x, int rank, const std::vector<int64_t>& pads,
              const Output& fill, PadMode mode = PadMode::kConstant);

// NumPy broadcasting of known shapes (-1 where a dimension is unknown);
// unknown rank when either is.
PartialShape BroadcastShape(const PartialShape& a, const PartialShape& b);

// Integer tensor helpers for constant folding of shape computations.
std::optional<std::vector<int64_t>> IntValues(const std::optional<Tensor>& t);
Tensor IntTensor(const std::vector<int64_t>& v, const std::vector<int64_t>& dims, DataType dtype);

}  // namespace flowstate::onnx_import

#endif  // FLOWSTATE_API_ONNX_CONVERT_UTIL_H_

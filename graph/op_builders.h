// One C++ function per op, for building graphs (see graph/scope.h). Each
// adds one node (plus, where an argument is a plain vector, a Const holding
// it) and returns its output(s). Attributes not given keep the defaults of
// the op's definition; type attributes are inferred from the inputs.
#ifndef FLOWSTATE_GRAPH_OP_BUILDERS_H_
#define FLOWSTATE_GRAPH_OP_BUILDERS_H_

#include <string>
#include <vector>

#include "graph/scope.h"
#include "graph/tensor.h"

namespace flowstate::ops {

// Constants and inputs.
Output Const(const Scope& s, const Tensor& value);
template <typename T>
Output Const(const Scope& s, T value) {
  return Const(s, Tensor::Scalar<T>(value));
}
template <typename T>
Output Const(const Scope& s, const std::vector<T>& values, const TensorShape& shape) {
  return Const(s, Tensor::FromVector(values, shape));
}
Output Const(const Scope& s, const std::vector<int32_t>& values);  // a vector
Output Const(const Scope& s, const std::vector<float>& values);    // a vector
Output Placeholder(const Scope& s, DataType dtype, const PartialShape& shape = PartialShape());
Output Identity(const Scope& s, const Output& x);
Output StopGradient(const Scope& s, const Output& x);
// Returns the node's name (a NoOp has no outputs); `deps` become control inputs.
std::string NoOp(const Scope& s, const std::vector<std::string>& deps = {});

// Element-wise binary ops with broadcasting.
Output Add(const Scope& s, const Output& x, const Output& y);
Output Sub(const Scope& s, const Output& x, const Output& y);
Output Mul(const Scope& s, const Output& x, const Output& y);
Output Div(const Scope& s, const Output& x, const Output& y);
Output Pow(const Scope& s, const Output& x, const Output& y);
Output Maximum(const Scope& s, const Output& x, const Output& y);
Output Minimum(const Scope& s, const Output& x, const Output& y);
Output SquaredDifference(const Scope& s, const Output& x, const Output& y);
Output Equal(const Scope& s, const Output& x, const Output& y);
Output NotEqual(const Scope& s, const Output& x, const Output& y);
Output Less(const Scope& s, const Output& x, const Output& y);
Output LessEqual(const Scope& s, const Output& x, const Output& y);
Output Greater(const Scope& s, const Output& x, const Output& y);
Output GreaterEqual(const Scope& s, const Output& x, const Output& y);
Output LogicalAnd(const Scope& s, const Output& x, const Output& y);
Output LogicalOr(const Scope& s, const Output& x, const Output& y);
Output LogicalNot(const Scope& s, const Output& x);
Output AddN(const Scope& s, const std::vector<Output>& inputs);
Output Select(const Scope& s, const Output& cond, const Output& t, const Output& e);

// Element-wise unary ops.
Output Neg(const Scope& s, const Output& x);
Output Abs(const Scope& s, const Output& x);
Output Sign(const Scope& s, const Output& x);
Output Exp(const Scope& s, const Output& x);
Output Log(const Scope& s, const Output& x);
Output Sqrt(const Scope& s, const Output& x);
Output Rsqrt(const Scope& s, const Output& x);
Output Square(const Scope& s, const Output& x);
Output Reciprocal(const Scope& s, const Output& x);
Output Cos(const Scope& s, const Output& x);
Output Sin(const Scope& s, const Output& x);
Output Floor(const Scope& s, const Output& x);
Output Cast(const Scope& s, const Output& x, DataType to);

// Matrix products.
Output MatMul(const Scope& s, const Output& a, const Output& b, bool transpose_a = false,
              bool transpose_b = false);
Output BatchMatMul(const Scope& s, const Output& x, const Output& y, bool adj_x = false,
                   bool adj_y = false);

// Reductions; an empty axis list reduces over every axis.
Output Sum(const Scope& s, const Output& x, const Output& axis, bool keep_dims = false);
Output Sum(const Scope& s, const Output& x, const std::vector<int32_t>& axis, bool keep_dims = false);
Output Mean(const Scope& s, const Output& x, const Output& axis, bool keep_dims = false);
Output Mean(const Scope& s, const Output& x, const std::vector<int32_t>& axis, bool keep_dims = false);
Output Max(const Scope& s, const Output& x, const Output& axis, bool keep_dims = false);
Output Max(const Scope& s, const Output& x, const std::vector<int32_t>& axis, bool keep_dims = false);
Output Min(const Scope& s, const Output& x, const Output& axis, bool keep_dims = false);
Output Min(const Scope& s, const Output& x, const std::vector<int32_t>& axis, bool keep_dims = false);
Output Prod(const Scope& s, const Output& x, const Output& axis, bool keep_dims = false);
Output Prod(const Scope& s, const Output& x, const std::vector<int32_t>& axis, bool keep_dims = false);
Output ArgMax(const Scope& s, const Output& x, int32_t dimension,
              DataType output_type = DataType::kInt64);
Output ArgMin(const Scope& s, const Output& x, int32_t dimension,
              DataType output_type = DataType::kInt64);

// Shapes and element movement.
Output Reshape(const Scope& s, const Output& x, const Output& shape);
Output Reshape(const Scope& s, const Output& x, const std::vector<int32_t>& shape);
Output Transpose(const Scope& s, const Output& x, const Output& perm);
Output Transpose(const Scope& s, const Output& x, const std::vector<int32_t>& perm);
Output ExpandDims(const Scope& s, const Output& x, const Output& axis);
Output ExpandDims(const Scope& s, const Output& x, int32_t axis);
Output Squeeze(const Scope& s, const Output& x, const std::vector<int64_t>& axis = {});
Output Concat(const Scope& s, const std::vector<Output>& values, const Output& axis);
Output Concat(const Scope& s, const std::vector<Output>& values, int32_t axis);
std::vector<Output> Split(const Scope& s, const Output& axis, const Output& value, int num_split);
std::vector<Output> Split(const Scope& s, int32_t axis, const Output& value, int num_split);
Output Slice(const Scope& s, const Output& x, const Output& begin, const Output& size);
Output Slice(const Scope& s, const Output& x, const std::vector<int32_t>& begin,
             const std::vector<int32_t>& size);
struct StridedSliceAttrs {
  int64_t begin_mask = 0, end_mask = 0, ellipsis_mask = 0, new_axis_mask = 0,
          shrink_axis_mask = 0;
};
Output StridedSlice(const Scope& s, const Output& x, const Output& begin, const Output& end,
                    const Output& strides, const StridedSliceAttrs& attrs = {});
Output StridedSlice(const Scope& s, const Output& x, const std::vector<int32_t>& begin,
                    const std::vector<int32_t>& end, const std::vector<int32_t>& strides,
                    const StridedSliceAttrs& attrs = {});
Output Gather(const Scope& s, const Output& params, const Output& indices, int64_t axis = 0);
Output Tile(const Scope& s, const Output& x, const Output& multiples);
Output Tile(const Scope& s, const Output& x, const std::vector<int32_t>& multiples);
Output Fill(const Scope& s, const Output& dims, const Output& value);
Output Fill(const Scope& s, const std::vector<int32_t>& dims, const Output& value);
Output ZerosLike(const Scope& s, const Output& x);
Output OnesLike(const Scope& s, const Output& x);
Output Shape(const Scope& s, const Output& x, DataType out_type = DataType::kInt32);
Output Size(const Scope& s, const Output& x, DataType out_type = DataType::kInt32);
Output Rank(const Scope& s, const Output& x);
Output Range(const Scope& s, const Output& start, const Output& limit, const Output& delta);

// Random tensors of `shape`; the same nonzero (seed, seed2) gives the same numbers.
struct RandomAttrs {
  DataType dtype = DataType::kFloat32;
  int64_t seed = 0, seed2 = 0;
};
Output RandomUniform(const Scope& s, const std::vector<int32_t>& shape, const RandomAttrs& a = {},
                     double minval = 0, double maxval = 1);
Output RandomNormal(const Scope& s, const std::vector<int32_t>& shape, const RandomAttrs& a = {},
                    double mean = 0, double stddev = 1);
Output TruncatedNormal(const Scope& s, const std::vector<int32_t>& shape, const RandomAttrs& a = {},
                       double mean = 0, double stddev = 1);

// Variables.
Output Variable(const Scope& s, const PartialShape& shape, DataType dtype,
                const std::string& container = "", const std::string& shared_name = "");
// A Variable whose rows are split over `partitions` variables
// "<name>/part_<p>" (strategy "mod" or "div"; part p on devices[p % size]
// when devices is not empty) once the graph is expanded
// (graph/partitioned_variables.h: sessions and BuildTrainingGraph do it).
// `init` names its initializer as the attr of a JSON Variable ("" for none).
struct PartitionAttrs {
  int64_t partitions = 1;
  std::string strategy = "mod";
  std::vector<std::string> devices;
  std::string init;
};
Output PartitionedVariable(const Scope& s, const PartialShape& shape, DataType dtype,
                           const PartitionAttrs& partition);
Output Assign(const Scope& s, const Output& ref, const Output& value, bool validate_shape = true);
Output AssignAdd(const Scope& s, const Output& ref, const Output& value);
Output AssignSub(const Scope& s, const Output& ref, const Output& value);
Output ScatterUpdate(const Scope& s, const Output& ref, const Output& indices,
                     const Output& updates);
Output ScatterAdd(const Scope& s, const Output& ref, const Output& indices, const Output& updates);
Output ScatterSub(const Scope& s, const Output& ref, const Output& indices, const Output& updates);
Output IsVariableInitialized(const Scope& s, const Output& ref);

// The paper's user-level checkpointing (state/tensor_store.h): Save writes
// `data` named by `names` under `prefix` and returns the node's name (run it
// as a target); Restore reads one tensor back.
std::string Save(const Scope& s, const std::string& prefix, const std::vector<std::string>& names,
                 const std::vector<Output>& data);
Output Restore(const Scope& s, const std::string& prefix, const std::string& name, DataType dt);

// Any op by name, for ops without a function here.
std::vector<Output> Generic(const Scope& s, const std::string& op, const std::vector<Output>& inputs,
                            AttrMap attrs = {}, int num_outputs = 1);

}  // namespace flowstate::ops

#endif  // FLOWSTATE_GRAPH_OP_BUILDERS_H_

#include "graph/op_builders.h"

namespace flowstate::ops {
namespace {

std::vector<std::string> Names(const std::vector<Output>& v) {
  std::vector<std::string> out;
  out.reserve(v.size());
  for (const Output& o : v) out.push_back(o.name());
  return out;
}

Output Op(const Scope& s, const std::string& op, const std::vector<Output>& inputs,
          AttrMap attrs = {}) {
  return Output(s.AddNode(op, op, Names(inputs), std::move(attrs)), 0);
}

Output IntVec(const Scope& s, const std::string& what, const std::vector<int32_t>& v) {
  return Const(s.ForHelper(what), v);
}

}  // namespace

Output Const(const Scope& s, const Tensor& value) {
  return Op(s, "Const", {}, {{"value", AttrValue(value)}, {"dtype", AttrValue(value.dtype())}});
}
Output Const(const Scope& s, const std::vector<int32_t>& values) {
  return Const(s, Tensor::FromVector(values));
}
Output Const(const Scope& s, const std::vector<float>& values) {
  return Const(s, Tensor::FromVector(values));
}

Output Placeholder(const Scope& s, DataType dtype, const PartialShape& shape) {
  return Op(s, "Placeholder", {}, {{"dtype", AttrValue(dtype)}, {"shape", AttrValue(shape)}});
}
Output Identity(const Scope& s, const Output& x) { return Op(s, "Identity", {x}); }
Output StopGradient(const Scope& s, const Output& x) { return Op(s, "StopGradient", {x}); }
std::string NoOp(const Scope& s, const std::vector<std::string>& deps) {
  return s.WithControlDependencies(deps).AddNode("NoOp", "NoOp", {}, {});
}

#define FS_BINARY(Name) \
  Output Name(const Scope& s, const Output& x, const Output& y) { return Op(s, #Name, {x, y}); }
FS_BINARY(Add)
FS_BINARY(Sub)
FS_BINARY(Mul)
FS_BINARY(Div)
FS_BINARY(Pow)
FS_BINARY(Maximum)
FS_BINARY(Minimum)
FS_BINARY(SquaredDifference)
FS_BINARY(Equal)
FS_BINARY(NotEqual)
FS_BINARY(Less)
FS_BINARY(LessEqual)
FS_BINARY(Greater)
FS_BINARY(GreaterEqual)
FS_BINARY(LogicalAnd)
FS_BINARY(LogicalOr)
#undef FS_BINARY

#define FS_UNARY(Name) \
  Output Name(const Scope& s, const Output& x) { return Op(s, #Name, {x}); }
FS_UNARY(LogicalNot)
FS_UNARY(Neg)
FS_UNARY(Abs)
FS_UNARY(Sign)
FS_UNARY(Exp)
FS_UNARY(Log)
FS_UNARY(Sqrt)
FS_UNARY(Rsqrt)
FS_UNARY(Square)
FS_UNARY(Reciprocal)
FS_UNARY(Cos)
FS_UNARY(Sin)
FS_UNARY(Floor)
FS_UNARY(ZerosLike)
FS_UNARY(OnesLike)
FS_UNARY(Rank)
FS_UNARY(IsVariableInitialized)
#undef FS_UNARY

Output AddN(const Scope& s, const std::vector<Output>& inputs) { return Op(s, "AddN", inputs); }
Output Select(const Scope& s, const Output& c, const Output& t, const Output& e) {
  return Op(s, "Select", {c, t, e});
}
Output Cast(const Scope& s, const Output& x, DataType to) {
  return Op(s, "Cast", {x}, {{"DstT", AttrValue(to)}});
}

Output MatMul(const Scope& s, const Output& a, const Output& b, bool ta, bool tb) {
  return Op(s, "MatMul", {a, b}, {{"transpose_a", AttrValue(ta)}, {"transpose_b", AttrValue(tb)}});
}
Output BatchMatMul(const Scope& s, const Output& x, const Output& y, bool ax, bool ay) {
  return Op(s, "BatchMatMul", {x, y}, {{"adj_x", AttrValue(ax)}, {"adj_y", AttrValue(ay)}});
}

#define FS_REDUCTION(Name)                                                                  \
  Output Name(const Scope& s, const Output& x, const Output& axis, bool keep_dims) {         \
    return Op(s, #Name, {x, axis}, {{"keep_dims", AttrValue(keep_dims)}});                  \
  }                                                                                         \
  Output Name(const Scope& s, const Output& x, const std::vector<int32_t>& axis, bool keep) { \
    return Name(s, x, IntVec(s, "axis", axis), keep);                                       \
  }
FS_REDUCTION(Sum)
FS_REDUCTION(Mean)
FS_REDUCTION(Max)
FS_REDUCTION(Min)
FS_REDUCTION(Prod)
#undef FS_REDUCTION

Output ArgMax(const Scope& s, const Output& x, int32_t dimension, DataType output_type) {
  return Op(s, "ArgMax", {x, Const(s.ForHelper("dimension"), dimension)},
            {{"output_type", AttrValue(output_type)}});
}
Output ArgMin(const Scope& s, const Output& x, int32_t dimension, DataType output_type) {
  return Op(s, "ArgMin", {x, Const(s.ForHelper("dimension"), dimension)},
            {{"output_type", AttrValue(output_type)}});
}

Output Reshape(const Scope& s, const Output& x, const Output& shape) {
  return Op(s, "Reshape", {x, shape});
}
Output Reshape(const Scope& s, const Output& x, const std::vector<int32_t>& shape) {
  return Reshape(s, x, IntVec(s, "shape", shape));
}
Output Transpose(const Scope& s, const Output& x, const Output& perm) {
  return Op(s, "Transpose", {x, perm});
}
Output Transpose(const Scope& s, const Output& x, const std::vector<int32_t>& perm) {
  return Transpose(s, x, IntVec(s, "perm", perm));
}
Output ExpandDims(const Scope& s, const Output& x, const Output& axis) {
  return Op(s, "ExpandDims", {x, axis});
}
Output ExpandDims(const Scope& s, const Output& x, int32_t axis) {
  return ExpandDims(s, x, Const(s.ForHelper("axis"), axis));
}
Output Squeeze(const Scope& s, const Output& x, const std::vector<int64_t>& axis) {
  return Op(s, "Squeeze", {x}, {{"axis", AttrValue(axis)}});
}
Output Concat(const Scope& s, const std::vector<Output>& values, const Output& axis) {
  std::vector<Output> in = values;
  in.push_back(axis);
  return Op(s, "Concat", in);
}
Output Concat(const Scope& s, const std::vector<Output>& values, int32_t axis) {
  return Concat(s, values, Const(s.ForHelper("axis"), axis));
}
std::vector<Output> Split(const Scope& s, const Output& axis, const Output& value, int num_split) {
  return Generic(s, "Split", {axis, value}, {{"num_split", AttrValue(int64_t(num_split))}},
                 num_split);
}
std::vector<Output> Split(const Scope& s, int32_t axis, const Output& value, int num_split) {
  return Split(s, Const(s.ForHelper("axis"), axis), value, num_split);
}
Output Slice(const Scope& s, const Output& x, const Output& begin, const Output& size) {
  return Op(s, "Slice", {x, begin, size});
}
Output Slice(const Scope& s, const Output& x, const std::vector<int32_t>& begin,
             const std::vector<int32_t>& size) {
  return Slice(s, x, IntVec(s, "begin", begin), IntVec(s, "size", size));
}
Output StridedSlice(const Scope& s, const Output& x, const Output& begin, const Output& end,
                    const Output& strides, const StridedSliceAttrs& a) {
  return Op(s, "StridedSlice", {x, begin, end, strides},
            {{"begin_mask", AttrValue(a.begin_mask)},
             {"end_mask", AttrValue(a.end_mask)},
             {"ellipsis_mask", AttrValue(a.ellipsis_mask)},
             {"new_axis_mask", AttrValue(a.new_axis_mask)},
             {"shrink_axis_mask", AttrValue(a.shrink_axis_mask)}});
}
Output StridedSlice(const Scope& s, const Output& x, const std::vector<int32_t>& begin,
                    const std::vector<int32_t>& end, const std::vector<int32_t>& strides,
                    const StridedSliceAttrs& a) {
  return StridedSlice(s, x, IntVec(s, "begin", begin), IntVec(s, "end", end),
                      IntVec(s, "strides", strides), a);
}
Output Gather(const Scope& s, const Output& params, const Output& indices, int64_t axis) {
  return Op(s, "Gather", {params, indices}, {{"axis", AttrValue(axis)}});
}
Output Tile(const Scope& s, const Output& x, const Output& multiples) {
  return Op(s, "Tile", {x, multiples});
}
Output Tile(const Scope& s, const Output& x, const std::vector<int32_t>& multiples) {
  return Tile(s, x, IntVec(s, "multiples", multiples));
}
Output Fill(const Scope& s, const Output& dims, const Output& value) {
  return Op(s, "Fill", {dims, value});
}
Output Fill(const Scope& s, const std::vector<int32_t>& dims, const Output& value) {
  return Fill(s, IntVec(s, "dims", dims), value);
}
Output Shape(const Scope& s, const Output& x, DataType out_type) {
  return Op(s, "Shape", {x}, {{"out_type", AttrValue(out_type)}});
}
Output Size(const Scope& s, const Output& x, DataType out_type) {
  return Op(s, "Size", {x}, {{"out_type", AttrValue(out_type)}});
}
Output Range(const Scope& s, const Output& start, const Output& limit, const Output& delta) {
  return Op(s, "Range", {start, limit, delta});
}

namespace {
Output RandomOp(const Scope& s, const char* op, const std::vector<int32_t>& shape,
                const RandomAttrs& a, const char* n1, double v1, const char* n2, double v2) {
  return Op(s, op, {IntVec(s, "shape", shape)},
            {{"dtype", AttrValue(a.dtype)},
             {"seed", AttrValue(a.seed)},
             {"seed2", AttrValue(a.seed2)},
             {n1, AttrValue(v1)},
             {n2, AttrValue(v2)}});
}
}  // namespace

Output RandomUniform(const Scope& s, const std::vector<int32_t>& shape, const RandomAttrs& a,
                     double minval, double maxval) {
  return RandomOp(s, "RandomUniform", shape, a, "minval", minval, "maxval", maxval);
}
Output RandomNormal(const Scope& s, const std::vector<int32_t>& shape, const RandomAttrs& a,
                    double mean, double stddev) {
  return RandomOp(s, "RandomNormal", shape, a, "mean", mean, "stddev", stddev);
}
Output TruncatedNormal(const Scope& s, const std::vector<int32_t>& shape, const RandomAttrs& a,
                       double mean, double stddev) {
  return RandomOp(s, "TruncatedNormal", shape, a, "mean", mean, "stddev", stddev);
}

Output Variable(const Scope& s, const PartialShape& shape, DataType dtype,
                const std::string& container, const std::string& shared_name) {
  return Op(s, "Variable", {},
            {{"shape", AttrValue(shape)},
             {"dtype", AttrValue(dtype)},
             {"container", AttrValue(container)},
             {"shared_name", AttrValue(shared_name)}});
}
Output PartitionedVariable(const Scope& s, const PartialShape& shape, DataType dtype,
                           const PartitionAttrs& partition) {
  return Op(s, "Variable", {},
            {{"shape", AttrValue(shape)},
             {"dtype", AttrValue(dtype)},
             {"init", AttrValue(partition.init)},
             {"partitions", AttrValue(partition.partitions)},
             {"partition_strategy", AttrValue(partition.strategy)},
             {"partition_devices", AttrValue(partition.devices)}});
}
std::string Save(const Scope& s, const std::string& prefix, const std::vector<std::string>& names,
                 const std::vector<Output>& data) {
  return s.AddNode("Save", "Save", Names(data),
                   {{"prefix", AttrValue(prefix)}, {"tensor_names", AttrValue(names)}});
}
Output Restore(const Scope& s, const std::string& prefix, const std::string& name, DataType dt) {
  return Op(s, "Restore", {},
            {{"prefix", AttrValue(prefix)}, {"tensor_name", AttrValue(name)}, {"dt", AttrValue(dt)}});
}
Output Assign(const Scope& s, const Output& ref, const Output& value, bool validate_shape) {
  return Op(s, "Assign", {ref, value}, {{"validate_shape", AttrValue(validate_shape)}});
}
Output AssignAdd(const Scope& s, const Output& ref, const Output& value) {
  return Op(s, "AssignAdd", {ref, value});
}
Output AssignSub(const Scope& s, const Output& ref, const Output& value) {
  return Op(s, "AssignSub", {ref, value});
}
Output ScatterUpdate(const Scope& s, const Output& ref, const Output& i, const Output& u) {
  return Op(s, "ScatterUpdate", {ref, i, u});
}
Output ScatterAdd(const Scope& s, const Output& ref, const Output& i, const Output& u) {
  return Op(s, "ScatterAdd", {ref, i, u});
}
Output ScatterSub(const Scope& s, const Output& ref, const Output& i, const Output& u) {
  return Op(s, "ScatterSub", {ref, i, u});
}

std::vector<Output> Generic(const Scope& s, const std::string& op,
                            const std::vector<Output>& inputs, AttrMap attrs, int num_outputs) {
  std::string name = s.AddNode(op, op, Names(inputs), std::move(attrs));
  std::vector<Output> out;
  for (int i = 0; i < num_outputs; ++i) out.emplace_back(name, i);
  return out;
}

}  // namespace flowstate::ops

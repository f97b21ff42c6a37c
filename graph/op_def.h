// The op registry: what each op is (inputs, outputs, attributes with kinds
// and defaults, statefulness, documentation) and how it infers the dtypes and
// shapes of its outputs. Kernels (devices/, state/) are registered apart from
// the definitions, keyed by op name.
//
// Ops are declared with a small spec language, as in TensorFlow:
//
//   OpDefBuilder("MatMul")
//       .Input("a: T").Input("b: T").Output("product: T")
//       .Attr("T: {float32, float64}")
//       .Attr("transpose_a: bool = false")
//       .SetShapeFn(MatMulShape)
//       .Doc("Matrix product of a and b.")
//
// Input/output specs: "name: float32" (fixed type), "name: T" (type attr),
// "name: N * T" (N tensors of type T), "name: T" with T a list(type) attr
// (one tensor per listed type, which may differ), "name: Ref(T)" (must be a variable;
// the kernel may mutate it). Attr specs: "name: kind [= default]" where kind
// is int, float, bool, string, type, shape, tensor, list(int), list(float),
// list(string), list(type), list(shape); a type attr may list its allowed
// types as "{float32, int32}"; "int >= 1" sets a minimum.
//
// OpRegistry::Global() is filled once, on first use, with every op of graph/
// ops/; after that it is read-only and safe to use from any thread.
#ifndef FLOWSTATE_GRAPH_OP_DEF_H_
#define FLOWSTATE_GRAPH_OP_DEF_H_

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "graph/attr_value.h"
#include "graph/status.h"
#include "graph/tensor_shape.h"
#include "graph/types.h"

namespace flowstate {

struct ArgDef {
  std::string name;
  DataType type = DataType::kInvalid;  // a fixed type, or
  std::string type_attr;               // the name of a `type` attr
  std::string number_attr;             // for "N * T": the `int` attr N
  // "name: T" where T is a list(type) attr: one tensor per listed type (then
  // type_attr names T too). Filled in by OpDefBuilder::Build().
  std::string type_list_attr;
  bool is_ref = false;                 // Ref(T)
};

struct AttrDef {
  std::string name;
  AttrKind kind = AttrKind::kInt;
  std::optional<AttrValue> default_value;
  std::vector<DataType> allowed_types;  // empty: any type
  std::optional<int64_t> minimum;
};

class InferenceContext;
using ShapeFn = std::function<Status(InferenceContext*)>;

struct OpDef {
  std::string name;
  std::vector<ArgDef> inputs;
  std::vector<ArgDef> outputs;
  std::vector<AttrDef> attrs;
  bool is_stateful = false;
  std::string doc;
  ShapeFn shape_fn;

  const AttrDef* FindAttr(std::string_view name) const;
  // Ops whose name starts with '_' are inserted by the runtime (_Send, _Arg,
  // ...) and are not listed to clients.
  bool is_internal() const { return !name.empty() && name[0] == '_'; }
};

class OpDefBuilder {
 public:
  explicit OpDefBuilder(std::string name);
  OpDefBuilder& Input(std::string_view spec);
  OpDefBuilder& Output(std::string_view spec);
  OpDefBuilder& Attr(std::string_view spec);
  OpDefBuilder& SetIsStateful();
  OpDefBuilder& SetShapeFn(ShapeFn fn);
  OpDefBuilder& Doc(std::string_view doc);
  // INVALID_ARGUMENT for a malformed spec.
  StatusOr<OpDef> Build() const;

 private:
  OpDef def_;
  std::vector<std::string> errors_;
};

class OpRegistry {
 public:
  OpRegistry() = default;
  // The process-wide registry holding every op of graph/op_defs/.
  static OpRegistry* Global();

  // ALREADY_EXISTS for a duplicate name; INVALID_ARGUMENT for a bad spec.
  Status Register(const OpDefBuilder& builder);
  // nullptr when unknown.
  const OpDef* Find(std::string_view name) const;
  // INVALID_ARGUMENT naming `node` when unknown.
  StatusOr<const OpDef*> Lookup(std::string_view op, std::string_view node) const;
  // Sorted by name.
  std::vector<const OpDef*> ListOps() const;

 private:
  std::map<std::string, std::unique_ptr<OpDef>, std::less<>> ops_;
};

// What a shape function sees of one node: its attrs (defaults filled in),
// the dtypes and partial shapes of its inputs (list arguments flattened), the
// values of inputs that are constants, and where to put its output shapes.
class InferenceContext {
 public:
  InferenceContext(const NodeDef* node, const OpDef* op,
                   std::vector<DataType> input_types,
                   std::vector<PartialShape> input_shapes,
                   std::vector<const Tensor*> input_constants,
                   int num_outputs);

  const NodeDef& node() const { return *node_; }
  const OpDef& op() const { return *op_; }
  int num_inputs() const { return int(input_shapes_.size()); }
  int num_outputs() const { return int(output_shapes_.size()); }
  const PartialShape& input(int i) const { return input_shapes_[i]; }
  DataType input_type(int i) const { return input_types_[i]; }
  // The value of input i when it is produced by a Const node, else nullptr.
  const Tensor* input_tensor(int i) const { return input_constants_[i]; }

  void set_output(int i, PartialShape shape) { output_shapes_[i] = std::move(shape); }
  const PartialShape& output(int i) const { return output_shapes_[i]; }
  std::vector<PartialShape> TakeOutputs() { return std::move(output_shapes_); }

  // An INVALID_ARGUMENT error naming this node.
  Status Error(std::string_view message) const;

  // Attribute helpers (attrs are already validated against the OpDef, so a
  // declared attr is always present).
  int64_t IntAttr(std::string_view name) const;
  double FloatAttr(std::string_view name) const;
  bool BoolAttr(std::string_view name) const;
  DataType TypeAttr(std::string_view name) const;
  const AttrValue& GetAttr(std::string_view name) const;

 private:
  const NodeDef* node_;
  const OpDef* op_;
  std::vector<DataType> input_types_;
  std::vector<PartialShape> input_shapes_;
  std::vector<const Tensor*> input_constants_;
  std::vector<PartialShape> output_shapes_;
};

// Shape functions shared by many ops (graph/op_defs/shape_fns.cc).
namespace shape_fns {
Status Unknown(InferenceContext* c);           // every output unknown
Status UnchangedShape(InferenceContext* c);    // output 0 = input 0
Status ScalarShape(InferenceContext* c);       // output 0 is a scalar
Status NoOutputs(InferenceContext* c);
// NumPy broadcasting of inputs 0 and 1 into output 0.
Status BroadcastBinary(InferenceContext* c);
// Broadcasts two partial shapes; INVALID_ARGUMENT when incompatible.
StatusOr<PartialShape> Broadcast(const PartialShape& a, const PartialShape& b);
// Reads input i as a vector of int32/int64 when it is constant; nullopt when
// it is not known before running.
std::optional<std::vector<int64_t>> ConstantIntVector(InferenceContext* c, int i);
}  // namespace shape_fns

}  // namespace flowstate

#endif  // FLOWSTATE_GRAPH_OP_DEF_H_

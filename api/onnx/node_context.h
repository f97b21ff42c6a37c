// NodeContext: what one converter of the table (onnx_ops.cc) sees of the
// ONNX node it converts, and the helpers it builds Flowstate nodes with.
// Internal to api/onnx/ (it names ONNX's protobuf types).
//
// A converter reads the node's inputs (Value: the Flowstate tensor, its
// dtype and shape as ONNX's shape inference knows them, and its value when
// known at import), reads every attribute it understands through the typed
// getters (each marks the attribute as checked: the importer refuses a node
// with an attribute no converter read), adds nodes under the node's own
// name scope and sets the node's outputs. Errors name the node and op.
// Single-threaded: one importer, one context per node at a time.
#ifndef FLOWSTATE_API_ONNX_NODE_CONTEXT_H_
#define FLOWSTATE_API_ONNX_NODE_CONTEXT_H_

#include <onnx/onnx_pb.h>

#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "graph/attr_value.h"
#include "graph/op_builders.h"
#include "graph/scope.h"
#include "graph/status.h"
#include "graph/tensor.h"

namespace flowstate::onnx_import {

// An ONNX value as a Flowstate tensor.
struct Value {
  Output out;
  DataType dtype = DataType::kInvalid;
  PartialShape shape;             // unknown rank when ONNX could not infer it
  std::optional<Tensor> constant;  // known at import (initializer, Constant, folded)
  int rank() const { return shape.rank_known() ? shape.rank() : -1; }
};

// ONNX's element type -> DataType; kInvalid when Flowstate has no such type.
DataType FromOnnxType(int32_t elem_type);
std::string OnnxTypeName(int32_t elem_type);

// Replaces a tensor stored as external data by its bytes (raw_data), read
// from beneath `data_root` (empty: external_dir) only: a `location` that is
// absolute, has "..", or resolves (through symbolic links) outside the
// root is INVALID_ARGUMENT naming the tensor; so is any external data when
// external_dir is empty. Done before ONNX's checker, which would otherwise
// look the location up relative to the working directory.
Status InlineExternalData(onnx::TensorProto* t, const std::string& external_dir,
                          const std::string& data_root);

// A TensorProto's value (external data must have been inlined).
StatusOr<Tensor> TensorFromProto(const onnx::TensorProto& t);

// For training and for the export of a trained model: every
// BatchNormalization's scale, bias and running statistics become
// initializers of their own (onnx_import.cc says why).
void GiveBatchNormsInitializersOfTheirOwn(onnx::GraphProto* g);

// The importer's state for one model, shared by the node contexts.
struct ModelState {
  Scope root;
  std::unordered_map<std::string, Value> values;  // by ONNX value name
  // What ONNX's shape inference knows of a value: (elem type, shape).
  std::unordered_map<std::string, std::pair<int32_t, PartialShape>> inferred;
  std::set<std::string> scopes_taken;
  bool training = false;  // OnnxImportOptions::training
  std::set<std::string> variables;  // the Flowstate Variables made of initializers
  // Every Transpose the converters made (convert_util.h Transpose): its
  // output's name -> (its input, perm). A Transpose of one of these by the
  // inverse perm is its input itself, and element-wise ops move through
  // them, so that an imported NCHW model does not go to NHWC and back
  // around each convolution and BatchNorm.
  std::unordered_map<std::string, std::pair<Output, std::vector<int64_t>>> transposes;
};

class NodeContext {
 public:
  NodeContext(ModelState* model, const onnx::NodeProto& node, int index, int opset);

  const std::string& name() const { return name_; }  // the node's name, or "<op>_<index>"
  const std::string& op() const { return node_.op_type(); }
  int opset() const { return opset_; }
  bool training() const { return model_->training; }  // OnnxImportOptions::training
  // True when `v` is an initializer made a Variable (a Ref an op may update).
  bool IsVariable(const Value& v) const { return model_->variables.count(v.out.node) > 0; }
  // The Transpose that made `y` (its input and perm), or nullptr.
  const std::pair<Output, std::vector<int64_t>>* TransposeOf(const Output& y) const {
    auto it = model_->transposes.find(y.name());
    return it == model_->transposes.end() ? nullptr : &it->second;
  }
  void NoteTranspose(const Output& y, const Output& x, std::vector<int64_t> perm) {
    model_->transposes[y.name()] = {x, std::move(perm)};
  }
  const onnx::NodeProto& proto() const { return node_; }

  // Inputs; an optional input left out is absent (or named "").
  int num_inputs() const { return node_.input_size(); }
  bool has_input(int i) const { return i < node_.input_size() && !node_.input(i).empty(); }
  StatusOr<Value> input(int i) const;
  // Input i, which must be known at import, as integers / doubles.
  StatusOr<std::vector<int64_t>> ConstInts(int i, std::string_view what) const;
  StatusOr<std::vector<double>> ConstDoubles(int i, std::string_view what) const;
  int num_outputs() const { return node_.output_size(); }
  bool has_output(int i) const { return i < node_.output_size() && !node_.output(i).empty(); }

  // Attributes: a missing one yields `def`, or INVALID_ARGUMENT when no
  // default is given; a wrong kind is INVALID_ARGUMENT naming it.
  bool HasAttr(std::string_view name) const;
  StatusOr<int64_t> Int(std::string_view name, std::optional<int64_t> def = std::nullopt);
  StatusOr<double> Float(std::string_view name, std::optional<double> def = std::nullopt);
  StatusOr<std::string> String(std::string_view name,
                               std::optional<std::string> def = std::nullopt);
  StatusOr<std::vector<int64_t>> Ints(std::string_view name,
                                      std::optional<std::vector<int64_t>> def = std::nullopt);
  StatusOr<std::vector<double>> Floats(std::string_view name,
                                       std::optional<std::vector<double>> def = std::nullopt);
  StatusOr<Tensor> TensorAttr(std::string_view name);
  // Marks an attribute checked without reading it (its value is irrelevant).
  void Ignore(std::string_view name) { read_.insert(std::string(name)); }
  // The first attribute of the node that no getter read, or "".
  std::string UncheckedAttr() const;

  // Building. Nodes are named "<node scope>/<op>[_n]".
  Output Op(const std::string& op, const std::vector<Output>& inputs, AttrMap attrs = {});
  std::vector<Output> OpN(const std::string& op, const std::vector<Output>& inputs, AttrMap attrs,
                          int num_outputs);
  Output Const(const Tensor& t);
  Output Scalar(double v, DataType dtype);    // a scalar of dtype
  Output Ints64(const std::vector<int64_t>& v);  // an int64 vector
  Output Ints32(const std::vector<int64_t>& v);  // an int32 vector
  Output Int32(int64_t v);                       // an int32 scalar
  const Scope& scope() const { return scope_; }

  // Output i of the node is `out`; its dtype and shape are ONNX's inferred
  // ones when known, else those given. `constant` when known at import.
  Status SetOutput(int i, const Output& out, DataType dtype = DataType::kInvalid,
                   const PartialShape& shape = PartialShape(),
                   std::optional<Tensor> constant = std::nullopt);
  // The dtype ONNX inferred for output i (kInvalid when unknown).
  DataType OutputType(int i) const;
  PartialShape OutputShape(int i) const;

  // "ONNX node 'n' (Op): msg", the node set to the ONNX node's name.
  Status Error(const std::string& msg) const;        // INVALID_ARGUMENT
  Status Unsupported(const std::string& msg) const;  // UNIMPLEMENTED

 private:
  const onnx::AttributeProto* FindAttr(std::string_view name) const;
  StatusOr<const onnx::AttributeProto*> Attr(std::string_view name, int type, bool required);

  ModelState* model_;
  const onnx::NodeProto& node_;
  std::string name_;
  int opset_;
  Scope scope_;
  std::set<std::string, std::less<>> read_;
};

}  // namespace flowstate::onnx_import

#endif  // FLOWSTATE_API_ONNX_NODE_CONTEXT_H_

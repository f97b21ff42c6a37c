// ImportOnnx: an ONNX model (ModelProto bytes or a .onnx file) becomes a
// Flowstate GraphDef that a Session runs or a training job trains.
//
//   OnnxImportOptions o;                      // initializers -> Variables
//   StatusOr<ImportedModel> m = ImportOnnxFile("resnet18.onnx", o);
//   session->Extend(m->graph); session->Run({}, {}, {m->init_op}, &out);
//   session->Run({{m->inputs[0].tensor, x}}, {m->outputs[0].tensor}, {}, &out);
//
// The format is read with the ONNX project's own library (libonnx: its
// protobuf schema, onnx::checker and shape inference); nothing of ONNX
// appears in this header. Graph inputs become Placeholders; floating-point
// initializers become Variables assigned the file's values by `init_op`
// (so training starts from the exported weights), or Consts when
// `initializers_as_constants` is set (pure inference); integer initializers
// (shapes, indices) are always Consts. Every ONNX node maps onto Flowstate
// ops through one converter table (api/onnx/onnx_ops.cc), one function per
// (op, opset range), which checks every attribute: errors are
// INVALID_ARGUMENT (a malformed model, an attribute value out of range) or
// UNIMPLEMENTED (an op, attribute value or dtype Flowstate lacks), their
// message naming the ONNX node and op and their Status::node() the ONNX
// node's name. Layouts stay ONNX's (NCHW); the converters transpose around
// Flowstate's NHWC kernels.
//
// All functions are pure and thread-safe; the result owns its data.
#ifndef FLOWSTATE_API_ONNX_ONNX_IMPORT_H_
#define FLOWSTATE_API_ONNX_ONNX_IMPORT_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "graph/attr_value.h"
#include "graph/status.h"
#include "graph/tensor.h"
#include "graph/tensor_shape.h"
#include "graph/types.h"

namespace flowstate {

// The opsets of the default ONNX domain that the importer accepts.
inline constexpr int kOnnxMinOpset = 11;
inline constexpr int kOnnxMaxOpset = 17;

struct OnnxImportOptions {
  // Initializers become Consts (inference) instead of Variables (training).
  bool initializers_as_constants = false;
  // The graph a training job trains (jobs/onnx_model.h): BatchNormalization
  // becomes Flowstate's BatchNorm (batch statistics, the running mean and
  // variance Variables updated with the node's momentum) and Dropout
  // Flowstate's Dropout, which graph/modes.h's InferenceGraph turns back
  // into their inference forms for evaluation and predictions. The
  // Variables declare `init: "zeros"` and their file values are returned in
  // ImportedModel::initial_values instead of being held by the graph (no
  // init_op): the job assigns them once its variables exist.
  bool training = false;
  // A model of an opset below kOnnxMinOpset is first converted to opset 13
  // by ONNX's own version converter (its errors are INVALID_ARGUMENT);
  // when false such a model is refused naming its opset.
  bool upgrade_older_opsets = false;
  // Where tensors stored as external data are looked up: their `location`
  // is relative to this folder (ImportOnnxFile: the model file's folder
  // when empty). Empty for ImportOnnx: external data is refused.
  std::string external_data_dir;
  // External data files must lie beneath this folder after resolving
  // symbolic links; `location`s that are absolute or contain ".." are
  // refused. Empty: external_data_dir.
  std::string data_root;
};

// A graph input, output or initializer and the Flowstate tensor it became.
struct OnnxTensorInfo {
  std::string onnx_name;
  std::string tensor;  // "node" or "node:1": the feed / fetch / variable name
  DataType dtype = DataType::kInvalid;
  PartialShape shape;  // -1 for a dynamic dimension
};

struct ImportedModel {
  GraphDef graph;
  std::vector<OnnxTensorInfo> inputs;     // Placeholders, in the model's order
  std::vector<OnnxTensorInfo> outputs;    // Identity nodes, in the model's order
  std::vector<OnnxTensorInfo> variables;  // initializers made Variables
  // A NoOp whose run assigns every variable the file's value; empty when
  // there is no variable.
  std::string init_op;
  // With OnnxImportOptions::training: each Variable's value in the file.
  std::vector<std::pair<std::string, Tensor>> initial_values;
  int64_t opset = 0;  // of the default domain, as read (before any upgrade)
  std::string producer;  // producer_name and producer_version
};

StatusOr<ImportedModel> ImportOnnx(std::string_view model_bytes,
                                   const OnnxImportOptions& options = {});
// Reads the file (NOT_FOUND when it cannot be opened) and imports it.
StatusOr<ImportedModel> ImportOnnxFile(const std::string& path,
                                       const OnnxImportOptions& options = {});

// A TensorProto (serialized bytes, as in ONNX's test data) as a Tensor.
StatusOr<Tensor> ParseOnnxTensor(std::string_view tensor_proto_bytes);

// The op types (of any domain, "domain:Op" outside the default one) that a
// model's main graph uses, sorted, without duplicates. For reports.
StatusOr<std::vector<std::string>> OnnxModelOps(std::string_view model_bytes);

// One entry of the converter table: an ONNX op of the default domain and the
// opsets [since, until] that its converter covers.
struct OnnxOpSupport {
  std::string op;
  int since = 0;
  int until = 0;
};
// The whole table, sorted by op.
std::vector<OnnxOpSupport> SupportedOnnxOps();

}  // namespace flowstate

#endif  // FLOWSTATE_API_ONNX_ONNX_IMPORT_H_

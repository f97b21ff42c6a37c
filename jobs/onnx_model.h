// ResolveOnnxModel: a job given as `"model": {"onnx": ...}` (api/job_spec.h
// ModelSpec) becomes a job with a forward graph, a loss and the values its
// variables start from -- what every other part of jobs/ then trains,
// evaluates, checkpoints and serves exactly as a job written as "graph".
//
// The ONNX file (beneath the data root, or an uploaded model read through
// `read_model`) is imported for training (api/onnx/onnx_import.h:
// BatchNormalization and Dropout in their training forms, initializers as
// Variables). Each dataset field of `model.inputs` becomes a Placeholder
// named after the field, of the dtype the data has (read from the IDX
// headers or the CSV columns), cast to the ONNX input's dtype, scaled and
// shifted, and reshaped to the input's shape with the batch first; the
// ONNX input itself becomes an Identity of that. The loss ("loss") is built
// on `model.output` against the `model.labels` field; with
// softmax_cross_entropy an "accuracy" node is added too. Both are scalar
// nodes that `eval.metrics` can name. Imported nodes whose names these
// take are renamed ("onnx/<name>").
//
// Errors name the job field ("model.inputs.x: ...", "model.onnx: ONNX node
// 'conv1' (Conv): ..."). Pure function of its arguments and the files it
// reads; thread-safe.
#ifndef FLOWSTATE_JOBS_ONNX_MODEL_H_
#define FLOWSTATE_JOBS_ONNX_MODEL_H_

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "api/job_spec.h"
#include "graph/status.h"
#include "graph/tensor.h"

namespace flowstate {

// An uploaded model's bytes by id; NOT_FOUND when there is none.
using ModelReader = std::function<StatusOr<std::string>(const std::string& model_id)>;

// Variable name -> the value it starts from.
using InitialValues = std::vector<std::pair<std::string, Tensor>>;

// What the export of the trained model needs of the ONNX model a job
// started from.
struct OnnxSource {
  std::string bytes;  // the model as read
  std::string external_data_dir, data_root;  // where its external data lies
  // ONNX initializer name -> the Variable that holds it.
  std::vector<std::pair<std::string, std::string>> variables;
};

struct ResolvedModel {
  JobSpec spec;  // `graph` and `loss` set; `model` kept (it says where they came from)
  std::shared_ptr<const InitialValues> initial_values;
  std::shared_ptr<const OnnxSource> source;
};

// The model of `source` with the trained `values` (variable name -> value,
// TrainingJob::ModelValues) in its initializers: api/onnx/onnx_export.h.
StatusOr<std::string> ExportTrainedModel(const OnnxSource& source, const InitialValues& values);

// `spec` must have `model`. `read_model` may be empty (no uploads).
StatusOr<ResolvedModel> ResolveOnnxModel(const JobSpec& spec, const std::string& data_root,
                                         const ModelReader& read_model);

// True when `onnx` (ModelSpec::onnx) names a file rather than an uploaded model.
bool NamesOnnxFile(const std::string& onnx);

}  // namespace flowstate

#endif  // FLOWSTATE_JOBS_ONNX_MODEL_H_

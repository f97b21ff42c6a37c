// ExportTrainedOnnx: the ONNX model a training job started from, with its
// trained values -- what GET /v1/jobs/{id}/model.onnx returns. The graph is
// the uploaded one (BatchNormalization running statistics given
// initializers of their own, as for training), its initializers replaced by
// the values of the Variables they became; tensors stored as external data
// are inlined. The result passes onnx::checker with full checking and
// ONNX's strict shape inference, or the export fails with INTERNAL naming
// why (a bug of the export, not of the client).
//
// Pure function; thread-safe. Nothing of ONNX appears in this header.
#ifndef FLOWSTATE_API_ONNX_ONNX_EXPORT_H_
#define FLOWSTATE_API_ONNX_ONNX_EXPORT_H_

#include <map>
#include <string>
#include <string_view>

#include "api/onnx/onnx_import.h"
#include "graph/status.h"
#include "graph/tensor.h"

namespace flowstate {

// `values`: ONNX initializer name -> its trained value (dtype and shape
// must be the initializer's: INVALID_ARGUMENT naming it otherwise).
// `options`: those the model was imported with (external data, training).
StatusOr<std::string> ExportTrainedOnnx(std::string_view model_bytes,
                                        const std::map<std::string, Tensor>& values,
                                        const OnnxImportOptions& options);

}  // namespace flowstate

#endif  // FLOWSTATE_API_ONNX_ONNX_EXPORT_H_

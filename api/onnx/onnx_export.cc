#include "api/onnx/onnx_export.h"

#include <onnx/checker.h>
#include <onnx/defs/schema.h>
#include <onnx/onnx_pb.h>
#include <onnx/shape_inference/implementation.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <vector>

#include "api/onnx/node_context.h"

namespace flowstate {

StatusOr<std::string> ExportTrainedOnnx(std::string_view model_bytes,
                                        const std::map<std::string, Tensor>& values,
                                        const OnnxImportOptions& options) {
  onnx::ModelProto m;
  if (model_bytes.empty() || model_bytes.size() > size_t(std::numeric_limits<int>::max()) ||
      !m.ParseFromArray(model_bytes.data(), int(model_bytes.size()))) {
    return InvalidArgument("the job's ONNX model cannot be parsed again");
  }
  onnx::GraphProto* g = m.mutable_graph();
  for (auto& t : *g->mutable_initializer()) {
    FS_RETURN_IF_ERROR(onnx_import::InlineExternalData(&t, options.external_data_dir, options.data_root));
  }
  for (auto& n : *g->mutable_node()) {
    for (auto& a : *n.mutable_attribute()) {
      if (a.has_t()) {
        FS_RETURN_IF_ERROR(onnx_import::InlineExternalData(a.mutable_t(), options.external_data_dir,
                                                           options.data_root));
      }
    }
  }
  if (options.training) onnx_import::GiveBatchNormsInitializersOfTheirOwn(g);
  size_t replaced = 0;
  for (onnx::TensorProto& t : *g->mutable_initializer()) {
    auto it = values.find(t.name());
    if (it == values.end()) continue;
    const Tensor& v = it->second;
    const DataType want = onnx_import::FromOnnxType(t.data_type());
    std::vector<int64_t> dims(t.dims().begin(), t.dims().end());
    const auto vd = v.shape().dims();
    if (v.dtype() != want || !std::equal(vd.begin(), vd.end(), dims.begin(), dims.end())) {
      return InvalidArgument("initializer '" + t.name() + "' is " + onnx_import::OnnxTypeName(t.data_type()) +
                                 " with " + std::to_string(dims.size()) + " dimensions in the model but the "
                                 "trained value is " + std::string(DataTypeName(v.dtype())) +
                                 v.shape().ToString(),
                             t.name());
    }
    // The value as raw little-endian bytes; the typed fields cleared.
    onnx::TensorProto fresh;
    fresh.set_name(t.name());
    fresh.set_data_type(t.data_type());
    for (int64_t d : dims) fresh.add_dims(d);
    if (t.has_doc_string()) fresh.set_doc_string(t.doc_string());
    fresh.set_raw_data(std::string(static_cast<const char*>(v.raw_data()), v.TotalBytes()));
    t = std::move(fresh);
    ++replaced;
  }
  if (replaced != values.size()) {
    for (const auto& entry : values) {
      // (Not a structured binding: clang 14, the fuzz build's compiler,
      // cannot capture one in a lambda.)
      const std::string& name = entry.first;
      bool found = std::any_of(g->initializer().begin(), g->initializer().end(),
                               [&](const onnx::TensorProto& t) { return t.name() == name; });
      if (!found) return InvalidArgument("the model has no initializer '" + name + "'", name);
    }
  }
  try {
    // onnx.checker.check_model(full_check=True): the checker, then strict
    // shape inference (on a copy: it would add value_info to the model).
    onnx::checker::check_model(m);
    onnx::ModelProto inferred = m;
    onnx::shape_inference::InferShapes(inferred, onnx::OpSchemaRegistry::Instance(),
                                       onnx::ShapeInferenceOptions(true, 1, false));
  } catch (const std::exception& e) {
    std::string why = e.what();
    std::replace(why.begin(), why.end(), '\n', ' ');
    return Internal("the exported model fails ONNX's checker: " + why);
  }
  std::string out;
  if (!m.SerializeToString(&out)) return Internal("the exported model cannot be serialized");
  return out;
}

}  // namespace flowstate

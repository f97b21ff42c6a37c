// The fuzz entry of the ONNX importer (entries.h): api/onnx/.
#include <string>

#include "api/onnx/onnx_import.h"
#include "fuzz/entries.h"
#include "fuzz/entries_internal.h"

namespace flowstate::fuzz {
namespace {

// An op, attribute value or dtype Flowstate lacks is UNIMPLEMENTED: a clean
// refusal of the input too.
Status Clean(const Status& s) {
  if (s.code() == Code::kUnimplemented && !s.message().empty()) return Status();
  CheckClientError(s, "OnnxModel");
  return s;
}

}  // namespace

Status OnnxModel(std::string_view input) {
  (void)Clean(ParseOnnxTensor(input).status());
  OnnxImportOptions constants;
  constants.initializers_as_constants = true;
  (void)Clean(ImportOnnx(input, constants).status());
  StatusOr<ImportedModel> m = ImportOnnx(input);
  if (m.ok()) {
    if (m->outputs.empty() && m->inputs.empty() && m->graph.nodes.empty()) {
      Fail("OnnxModel", "an accepted model with no nodes, inputs or outputs");
    }
    if (!m->variables.empty() && m->init_op.empty()) {
      Fail("OnnxModel", "variables without an init_op");
    }
  }
  return Clean(m.status());
}

}  // namespace flowstate::fuzz

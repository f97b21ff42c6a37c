// The converter table: one entry per (ONNX op, opset range) of the default
// domain, each a small function over a NodeContext (node_context.h). The
// table in onnx_ops.cc is the one place that says what is supported.
// Internal to api/onnx/. Immutable; thread-safe.
#ifndef FLOWSTATE_API_ONNX_ONNX_OPS_H_
#define FLOWSTATE_API_ONNX_ONNX_OPS_H_

#include <span>
#include <string_view>

#include "api/onnx/node_context.h"

namespace flowstate::onnx_import {

using ConvertFn = Status (*)(NodeContext& c);

struct ConverterEntry {
  const char* op;
  int since;  // first opset covered
  int until;  // last opset covered
  ConvertFn fn;
};

std::span<const ConverterEntry> ConverterTable();

// The entry for `op` at `opset`, or nullptr. When there is none but the op
// has entries for other opsets, *other is one of them.
const ConverterEntry* FindConverter(std::string_view op, int opset,
                                    const ConverterEntry** other = nullptr);

}  // namespace flowstate::onnx_import

#endif  // FLOWSTATE_API_ONNX_ONNX_OPS_H_

// The converter table: what the importer supports, one line per (ONNX op,
// opset range). Ranges split where ONNX changed an op's signature within
// opsets 11-17 (Softmax's axis at 13, Squeeze/Unsqueeze/ReduceSum/Split
// taking inputs at 13, ...). The converters live in onnx_math_ops.cc,
// onnx_array_ops.cc, onnx_nn_ops.cc, onnx_rnn_ops.cc, onnx_resize_ops.cc and
// onnx_loss_ops.cc.
#include "api/onnx/onnx_ops.h"

#include "api/onnx/converters.h"

namespace flowstate::onnx_import {
namespace {

#define UNARY(onnx, fs, float_only) \
  {onnx, 11, 17, [](NodeContext& c) { return UnaryOp(c, fs, float_only); }}
#define BINARY(onnx, fs, since) {onnx, since, 17, [](NodeContext& c) { return BinaryOp(c, fs); }}
#define COMPARE(onnx, fs, since) {onnx, since, 17, [](NodeContext& c) { return CompareOp(c, fs); }}
#define CALL(onnx, since, until, ...) \
  {onnx, since, until, [](NodeContext& c) { return __VA_ARGS__; }}

const ConverterEntry kTable[] = {
    // Element-wise.
    BINARY("Add", "Add", 11),
    BINARY("Sub", "Sub", 11),
    BINARY("Mul", "Mul", 11),
    BINARY("Div", "Div", 11),
    {"Pow", 11, 17, ConvertPow},
    CALL("Sum", 11, 17, VariadicOp(c, "Add", false)),
    CALL("Mean", 11, 17, VariadicOp(c, "Add", true)),
    CALL("Max", 11, 17, VariadicOp(c, "Maximum", false)),
    CALL("Min", 11, 17, VariadicOp(c, "Minimum", false)),
    COMPARE("Equal", "Equal", 11),
    COMPARE("Less", "Less", 11),
    COMPARE("Greater", "Greater", 11),
    COMPARE("LessOrEqual", "LessEqual", 12),
    COMPARE("GreaterOrEqual", "GreaterEqual", 12),
    COMPARE("And", "LogicalAnd", 11),
    COMPARE("Or", "LogicalOr", 11),
    COMPARE("Xor", "NotEqual", 11),
    {"Not", 11, 17, ConvertNot},
    {"IsNaN", 11, 17, ConvertIsNaN},
    UNARY("Neg", "Neg", false),
    UNARY("Abs", "Abs", false),
    UNARY("Sign", "Sign", false),
    UNARY("Exp", "Exp", true),
    UNARY("Log", "Log", true),
    UNARY("Sqrt", "Sqrt", true),
    UNARY("Reciprocal", "Reciprocal", true),
    UNARY("Floor", "Floor", true),
    {"Ceil", 11, 17, ConvertCeil},
    UNARY("Sin", "Sin", true),
    UNARY("Cos", "Cos", true),
    {"Tan", 11, 17, ConvertTan},
    {"Erf", 11, 17, ConvertErf},
    CALL("Sinh", 11, 17, ConvertHyperbolic(c, "Sinh")),
    CALL("Cosh", 11, 17, ConvertHyperbolic(c, "Cosh")),
    CALL("Asinh", 11, 17, ConvertHyperbolic(c, "Asinh")),
    CALL("Acosh", 11, 17, ConvertHyperbolic(c, "Acosh")),
    CALL("Atanh", 11, 17, ConvertHyperbolic(c, "Atanh")),
    {"IsInf", 11, 17, ConvertIsInf},
    {"Round", 11, 17, ConvertRound},
    {"Mod", 11, 17, ConvertMod},
    {"CumSum", 11, 17, ConvertCumSum},
    {"OneHot", 11, 17, ConvertOneHot},
    {"Clip", 11, 17, ConvertClip},
    {"Where", 11, 17, ConvertWhere},
    {"Cast", 11, 17, ConvertCast},
    {"CastLike", 15, 17, ConvertCastLike},
    // Activations.
    UNARY("Relu", "Relu", true),
    UNARY("Sigmoid", "Sigmoid", true),
    UNARY("Tanh", "Tanh", true),
    UNARY("Softplus", "Softplus", true),
    {"LeakyRelu", 11, 17, ConvertLeakyRelu},
    {"Elu", 11, 17, ConvertElu},
    {"Selu", 11, 17, ConvertSelu},
    {"PRelu", 11, 17, ConvertPRelu},
    {"HardSigmoid", 11, 17, ConvertHardSigmoid},
    {"HardSwish", 14, 17, ConvertHardSwish},
    {"Softsign", 11, 17, ConvertSoftsign},
    {"ThresholdedRelu", 11, 17, ConvertThresholdedRelu},
    {"Shrink", 11, 17, ConvertShrink},
    {"Celu", 12, 17, ConvertCelu},
    CALL("Softmax", 11, 17, ConvertSoftmax(c, "Softmax")),
    CALL("LogSoftmax", 11, 17, ConvertSoftmax(c, "LogSoftmax")),
    // Products and reductions.
    {"MatMul", 11, 17, ConvertMatMul},
    {"Gemm", 11, 17, ConvertGemm},
    CALL("ReduceSum", 11, 12, ConvertReduce(c, "Sum", nullptr, nullptr, false)),
    CALL("ReduceSum", 13, 17, ConvertReduce(c, "Sum", nullptr, nullptr, true)),
    CALL("ReduceMean", 11, 17, ConvertReduce(c, "Mean", nullptr, nullptr, false)),
    CALL("ReduceMax", 11, 17, ConvertReduce(c, "Max", nullptr, nullptr, false)),
    CALL("ReduceMin", 11, 17, ConvertReduce(c, "Min", nullptr, nullptr, false)),
    CALL("ReduceProd", 11, 17, ConvertReduce(c, "Prod", nullptr, nullptr, false)),
    CALL("ReduceSumSquare", 11, 17, ConvertReduce(c, "Sum", "Square", nullptr, false)),
    CALL("ReduceL1", 11, 17, ConvertReduce(c, "Sum", "Abs", nullptr, false)),
    CALL("ReduceL2", 11, 17, ConvertReduce(c, "Sum", "Square", "Sqrt", false)),
    CALL("ReduceLogSum", 11, 17, ConvertReduce(c, "Sum", nullptr, "Log", false)),
    CALL("ReduceLogSumExp", 11, 17, ConvertReduce(c, "Sum", "Exp", "Log", false)),
    CALL("ArgMax", 11, 17, ConvertArgMax(c, "ArgMax")),
    CALL("ArgMin", 11, 17, ConvertArgMax(c, "ArgMin")),
    // Shapes, slicing, constants.
    {"Identity", 11, 17, ConvertIdentity},
    {"Constant", 11, 17, ConvertConstant},
    {"ConstantOfShape", 11, 17, ConvertConstantOfShape},
    {"Shape", 11, 17, ConvertShape},
    {"Size", 11, 17, ConvertSize},
    {"Reshape", 11, 17, ConvertReshape},
    {"Flatten", 11, 17, ConvertFlatten},
    {"Transpose", 11, 17, ConvertTranspose},
    {"Concat", 11, 17, ConvertConcat},
    {"Gather", 11, 17, ConvertGather},
    {"Unsqueeze", 11, 12, ConvertUnsqueeze},
    {"Unsqueeze", 13, 17, ConvertUnsqueeze},
    {"Squeeze", 11, 12, ConvertSqueeze},
    {"Squeeze", 13, 17, ConvertSqueeze},
    {"Slice", 11, 17, ConvertSlice},
    {"Split", 11, 12, ConvertSplit},
    {"Split", 13, 17, ConvertSplit},
    {"Expand", 11, 17, ConvertExpand},
    {"Tile", 11, 17, ConvertTile},
    {"Pad", 11, 17, ConvertPad},
    {"Range", 11, 17, ConvertRange},
    {"DepthToSpace", 11, 17, ConvertDepthToSpace},
    {"EyeLike", 11, 17, ConvertEyeLike},
    {"Resize", 11, 17, ConvertResize},
    {"SpaceToDepth", 11, 17, ConvertSpaceToDepth},
    {"Dropout", 11, 11, ConvertDropout},
    {"Dropout", 12, 17, ConvertDropout},
    // Convolution, pooling, normalization.
    {"Conv", 11, 17, ConvertConv},
    {"ConvTranspose", 11, 17, ConvertConvTranspose},
    {"MaxPool", 11, 17, ConvertMaxPool},
    {"AveragePool", 11, 17, ConvertAveragePool},
    CALL("GlobalAveragePool", 11, 17, ConvertGlobalPool(c, "Mean")),
    CALL("GlobalMaxPool", 11, 17, ConvertGlobalPool(c, "Max")),
    {"BatchNormalization", 11, 13, ConvertBatchNormalization},
    {"BatchNormalization", 14, 17, ConvertBatchNormalization},
    {"InstanceNormalization", 11, 17, ConvertInstanceNormalization},
    {"LayerNormalization", 17, 17, ConvertLayerNormalization},
    // Recurrent layers.
    {"LSTM", 11, 17, ConvertLstm},
    {"GRU", 11, 17, ConvertGru},
    {"RNN", 11, 17, ConvertRnn},
    // Losses and index ops.
    {"NegativeLogLikelihoodLoss", 12, 17, ConvertNllLoss},
    {"SoftmaxCrossEntropyLoss", 12, 17, ConvertSoftmaxCrossEntropyLoss},
    {"GatherElements", 11, 17, ConvertGatherElements},
    {"Trilu", 14, 17, ConvertTrilu},
    {"Hardmax", 13, 17, ConvertHardmax},
    {"ScatterElements", 11, 17, ConvertScatterElements},
    {"TopK", 11, 17, ConvertTopK},
};

#undef UNARY
#undef BINARY
#undef COMPARE
#undef CALL

}  // namespace

std::span<const ConverterEntry> ConverterTable() { return kTable; }

const ConverterEntry* FindConverter(std::string_view op, int opset, const ConverterEntry** other) {
  for (const ConverterEntry& e : kTable) {
    if (op != e.op) continue;
    if (e.since <= opset && opset <= e.until) return &e;
    if (other != nullptr) *other = &e;
  }
  return nullptr;
}

}  // namespace flowstate::onnx_import

// The converter functions that the table in onnx_ops.cc lists, grouped by
// file: onnx_math_ops.cc (element-wise, reductions, products, softmax),
// onnx_array_ops.cc (shapes, slicing, constants), onnx_nn_ops.cc
// (convolution, pooling, normalization), onnx_loss_ops.cc (losses and the
// index ops they build on). Internal to api/onnx/.
#ifndef FLOWSTATE_API_ONNX_CONVERTERS_H_
#define FLOWSTATE_API_ONNX_CONVERTERS_H_

#include "api/onnx/node_context.h"

namespace flowstate::onnx_import {

// onnx_math_ops.cc
Status UnaryOp(NodeContext& c, const char* op, bool float_only);
Status BinaryOp(NodeContext& c, const char* op);
Status CompareOp(NodeContext& c, const char* op);
Status VariadicOp(NodeContext& c, const char* op, bool mean);
Status ConvertPow(NodeContext& c);
Status ConvertNot(NodeContext& c);
Status ConvertIsNaN(NodeContext& c);
Status ConvertCeil(NodeContext& c);
Status ConvertLeakyRelu(NodeContext& c);
Status ConvertElu(NodeContext& c);
Status ConvertSelu(NodeContext& c);
Status ConvertPRelu(NodeContext& c);
Status ConvertHardSigmoid(NodeContext& c);
Status ConvertHardSwish(NodeContext& c);
Status ConvertSoftsign(NodeContext& c);
Status ConvertThresholdedRelu(NodeContext& c);
Status ConvertErf(NodeContext& c);
Status ConvertTan(NodeContext& c);
Status ConvertClip(NodeContext& c);
Status ConvertWhere(NodeContext& c);
Status ConvertCast(NodeContext& c);
Status ConvertCastLike(NodeContext& c);
Status ConvertSoftmax(NodeContext& c, const char* op);  // Softmax / LogSoftmax
Status ConvertMatMul(NodeContext& c);
Status ConvertGemm(NodeContext& c);
// Reductions: op is the Flowstate reduction; pre/post the ONNX variants'
// element-wise steps (ReduceL2: Square, Sum, Sqrt).
Status ConvertReduce(NodeContext& c, const char* op, const char* pre, const char* post,
                     bool axes_input);
Status ConvertArgMax(NodeContext& c, const char* op);
Status ConvertHyperbolic(NodeContext& c, const char* op);  // Sinh, Cosh, Asinh, Acosh, Atanh
Status ConvertIsInf(NodeContext& c);
Status ConvertShrink(NodeContext& c);
Status ConvertCelu(NodeContext& c);
Status ConvertRound(NodeContext& c);
Status ConvertMod(NodeContext& c);
Status ConvertCumSum(NodeContext& c);
Status ConvertOneHot(NodeContext& c);

// onnx_array_ops.cc
Status ConvertIdentity(NodeContext& c);
Status ConvertConstant(NodeContext& c);
Status ConvertConstantOfShape(NodeContext& c);
Status ConvertShape(NodeContext& c);
Status ConvertSize(NodeContext& c);
Status ConvertReshape(NodeContext& c);
Status ConvertFlatten(NodeContext& c);
Status ConvertTranspose(NodeContext& c);
Status ConvertConcat(NodeContext& c);
Status ConvertGather(NodeContext& c);
Status ConvertUnsqueeze(NodeContext& c);
Status ConvertSqueeze(NodeContext& c);
Status ConvertSlice(NodeContext& c);
Status ConvertSplit(NodeContext& c);
Status ConvertExpand(NodeContext& c);
Status ConvertTile(NodeContext& c);
Status ConvertPad(NodeContext& c);
Status ConvertRange(NodeContext& c);
Status ConvertDropout(NodeContext& c);
Status ConvertDepthToSpace(NodeContext& c);
Status ConvertEyeLike(NodeContext& c);
Status ConvertSpaceToDepth(NodeContext& c);

// onnx_nn_ops.cc
Status ConvertConv(NodeContext& c);
Status ConvertConvTranspose(NodeContext& c);
Status ConvertMaxPool(NodeContext& c);
Status ConvertAveragePool(NodeContext& c);
Status ConvertGlobalPool(NodeContext& c, const char* op);
Status ConvertBatchNormalization(NodeContext& c);
Status ConvertInstanceNormalization(NodeContext& c);
Status ConvertLayerNormalization(NodeContext& c);

// onnx_rnn_ops.cc
Status ConvertLstm(NodeContext& c);
Status ConvertGru(NodeContext& c);
Status ConvertRnn(NodeContext& c);

// onnx_resize_ops.cc
Status ConvertResize(NodeContext& c);

// onnx_loss_ops.cc
Status ConvertNllLoss(NodeContext& c);
Status ConvertSoftmaxCrossEntropyLoss(NodeContext& c);
Status ConvertGatherElements(NodeContext& c);
Status ConvertTrilu(NodeContext& c);
Status ConvertHardmax(NodeContext& c);
Status ConvertScatterElements(NodeContext& c);
Status ConvertTopK(NodeContext& c);

}  // namespace flowstate::onnx_import

#endif  // FLOWSTATE_API_ONNX_CONVERTERS_H_

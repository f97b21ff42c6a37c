// Internal to devices/cpu/: what the array kernels (array_kernels.cc,
// slice_kernels.cc, gather_kernels.cc) share — reading shape-like int32/int64
// inputs with errors that name the node, dispatch on element size (data
// movement does not care whether 4 bytes are a float or an int32), parallel
// memcpy, and one strided-copy engine that Transpose, Slice and
// StridedSlice all lower to.
//
// Everything here is stateless and thread-safe.
#ifndef FLOWSTATE_DEVICES_CPU_ARRAY_KERNEL_UTIL_H_
#define FLOWSTATE_DEVICES_CPU_ARRAY_KERNEL_UTIL_H_

#include <cstdint>
#include <string>
#include <vector>

#include "devices/cpu/register_kernels.h"

namespace flowstate::internal {

// The per-file registration functions behind RegisterArrayKernels.
void RegisterSliceKernels(KernelRegistry* r);   // slice_kernels.cc
void RegisterGatherKernels(KernelRegistry* r);  // gather_kernels.cc

// INVALID_ARGUMENT "node 'x' (Op): message", naming the node.
Status KernelError(const OpKernel& k, const std::string& message);

// Reads an int32/int64 tensor of rank 0 or 1 as a vector. `what` names the
// input in errors ("shape", "perm", ...). Rank > 1 or another dtype is an
// INVALID_ARGUMENT error.
Status ReadIndexVector(const OpKernel& k, const Tensor& t, const char* what,
                       std::vector<int64_t>* out);
// The same, but the tensor must hold exactly one element.
Status ReadIndexScalar(const OpKernel& k, const Tensor& t, const char* what, int64_t* out);

// Calls fn.template operator()<U>() with U an unsigned integer of the same
// size as one element of `dtype` (1, 2, 4 or 8 bytes).
template <typename Fn>
decltype(auto) DispatchByElementSize(DataType dtype, Fn&& fn) {
  switch (DataTypeSize(dtype)) {
    case 1: return fn.template operator()<uint8_t>();
    case 2: return fn.template operator()<uint16_t>();
    case 8: return fn.template operator()<uint64_t>();
    default: return fn.template operator()<uint32_t>();
  }
}

// memcpy of `bytes`, split across the device's intra-op threads when large.
void ParallelMemcpy(Device* device, void* dst, const void* src, size_t bytes);

// A box of source elements read in row-major order: output element
// (i_0, ..., i_{rank-1}) is src[offset + sum_k i_k * stride[k]]. Strides are
// in elements and may be negative or zero.
struct StridedCopyPlan {
  int rank = 0;
  int64_t len[kMaxRank] = {};
  int64_t stride[kMaxRank] = {};
  int64_t offset = 0;

  int64_t num_elements() const;
  // Drops dimensions of length 1 and merges neighbours that are contiguous
  // in the source, so the innermost run is as long as possible.
  void Simplify();
};

// Sets output 0 of ctx to the elements `plan` selects from `in`, with
// `out_shape` (REQUIRES: out_shape.num_elements() == plan.num_elements()).
// When the selection is one contiguous, increasing run the output shares
// `in`'s buffer; otherwise it is copied (blocked when the copy is a
// transpose of the innermost dimensions, memcpy of runs when the innermost
// source stride is 1), in parallel for big tensors.
void EmitStridedCopy(OpKernelContext* ctx, const Tensor& in, StridedCopyPlan plan,
                     const TensorShape& out_shape);

// Row-major strides (in elements) of `shape`.
void RowMajorStrides(const TensorShape& shape, int64_t* strides);

}  // namespace flowstate::internal

#endif  // FLOWSTATE_DEVICES_CPU_ARRAY_KERNEL_UTIL_H_

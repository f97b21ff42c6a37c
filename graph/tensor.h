// Tensor: a typed, shaped view of a reference-counted, 64-byte-aligned
// buffer.
//
// Copying a Tensor copies the view and adds a reference to the buffer; no
// element is copied. Reshape() and Slice() along dimension 0 share the buffer
// too (zero-copy). DeepCopy() makes an independent buffer. The buffer is
// freed, through the Allocator that made it, when the last Tensor using it
// goes away.
//
// Thread safety: a Tensor object is a value; distinct Tensor objects sharing
// one buffer may be used from distinct threads (the reference count is
// atomic). Writing elements of a shared buffer while another thread reads
// them is the caller's race to avoid (variables use RefCountIsOne() to
// decide between updating in place and copy-on-write).
#ifndef FLOWSTATE_GRAPH_TENSOR_H_
#define FLOWSTATE_GRAPH_TENSOR_H_

#include <atomic>
#include <cassert>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "graph/allocator.h"
#include "graph/status.h"
#include "graph/tensor_shape.h"
#include "graph/types.h"

namespace flowstate {

// The memory behind one or more Tensors. Intrusively reference counted.
class TensorBuffer {
 public:
  TensorBuffer(void* data, size_t bytes) : data_(data), bytes_(bytes) {}
  virtual ~TensorBuffer() = default;
  TensorBuffer(const TensorBuffer&) = delete;
  TensorBuffer& operator=(const TensorBuffer&) = delete;

  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }
  // The buffer that owns the memory (itself unless this is a slice).
  virtual const TensorBuffer* root() const { return this; }

  void Ref() const { refs_.fetch_add(1, std::memory_order_relaxed); }
  void Unref() const {
    if (refs_.fetch_sub(1, std::memory_order_acq_rel) == 1) delete this;
  }
  bool RefCountIsOne() const { return refs_.load(std::memory_order_acquire) == 1; }

 private:
  void* data_;
  size_t bytes_;
  mutable std::atomic<int32_t> refs_{1};
};

class Tensor {
 public:
  // An uninitialized tensor: no dtype, no buffer. IsInitialized() is false.
  Tensor() = default;
  // Allocates from HostAllocator(); aborts if memory is exhausted. Elements
  // are uninitialized. Use Allocate() where the size is untrusted.
  Tensor(DataType dtype, const TensorShape& shape);
  // Allocates from `allocator`; RESOURCE_EXHAUSTED if it refuses.
  static StatusOr<Tensor> Allocate(Allocator* allocator, DataType dtype,
                                   const TensorShape& shape);
  // Wraps an existing buffer. REQUIRES: buffer holds >= the bytes needed.
  Tensor(DataType dtype, const TensorShape& shape, TensorBuffer* buffer);

  Tensor(const Tensor& o);
  Tensor(Tensor&& o) noexcept;
  Tensor& operator=(const Tensor& o);
  Tensor& operator=(Tensor&& o) noexcept;
  ~Tensor();

  // Convenience constructors (host memory).
  template <typename T>
  static Tensor Scalar(T value) {
    Tensor t(kDataTypeOf<T>, TensorShape());
    *t.data<T>() = value;
    return t;
  }
  // REQUIRES: values.size() == shape.num_elements().
  template <typename T>
  static Tensor FromVector(const std::vector<T>& values, const TensorShape& shape) {
    assert(int64_t(values.size()) == shape.num_elements());
    Tensor t(kDataTypeOf<T>, shape);
    T* d = t.data<T>();
    for (size_t i = 0; i < values.size(); ++i) d[i] = values[i];
    return t;
  }
  template <typename T>
  static Tensor FromVector(const std::vector<T>& values) {
    return FromVector(values, TensorShape({int64_t(values.size())}));
  }

  bool IsInitialized() const { return dtype_ != DataType::kInvalid; }
  DataType dtype() const { return dtype_; }
  const TensorShape& shape() const { return shape_; }
  int rank() const { return shape_.rank(); }
  int64_t dim(int i) const { return shape_.dim(i); }
  int64_t num_elements() const { return shape_.num_elements(); }
  size_t TotalBytes() const { return size_t(num_elements()) * DataTypeSize(dtype_); }

  void* raw_data() { return data_; }
  const void* raw_data() const { return data_; }
  // REQUIRES: dtype() == kDataTypeOf<T> (asserted).
  template <typename T>
  T* data() {
    assert(dtype_ == kDataTypeOf<T>);
    return static_cast<T*>(data_);
  }
  template <typename T>
  const T* data() const {
    assert(dtype_ == kDataTypeOf<T>);
    return static_cast<const T*>(data_);
  }
  template <typename T>
  std::span<T> flat() { return {data<T>(), size_t(num_elements())}; }
  template <typename T>
  std::span<const T> flat() const { return {data<T>(), size_t(num_elements())}; }
  // The only element of a one-element tensor.
  template <typename T>
  T scalar() const {
    assert(num_elements() == 1);
    return *data<T>();
  }

  // A tensor of `shape` sharing this buffer. INVALID_ARGUMENT unless the
  // element counts match.
  StatusOr<Tensor> Reshaped(const TensorShape& shape) const;
  // Rows [begin, end) of dimension 0, sharing the buffer. REQUIRES: rank >= 1
  // and 0 <= begin <= end <= dim(0).
  Tensor Slice(int64_t begin, int64_t end) const;
  // An independent copy (host memory).
  Tensor DeepCopy() const;

  // True when no other Tensor shares this buffer (so writing in place is
  // invisible to anyone else). False for tensors without a buffer.
  bool RefCountIsOne() const;
  bool SharesBufferWith(const Tensor& o) const;

  // Copies `n` raw bytes in; REQUIRES: n == TotalBytes().
  void CopyFromBytes(const void* src, size_t n) {
    assert(n == TotalBytes());
    if (n) std::memcpy(data_, src, n);
  }

  // "float32[2, 3]: 1 2 3 4 5 6" with at most `max_elements` values.
  std::string DebugString(int max_elements = 16) const;
  // Element i converted to double (for tests, printing and codecs).
  double ElementAsDouble(int64_t i) const;

 private:
  DataType dtype_ = DataType::kInvalid;
  TensorShape shape_;
  TensorBuffer* buf_ = nullptr;  // owned reference, may be null
  void* data_ = nullptr;
};

// Same dtype, same shape, same bytes.
bool TensorsEqual(const Tensor& a, const Tensor& b);

}  // namespace flowstate

#endif  // FLOWSTATE_GRAPH_TENSOR_H_

#include "graph/tensor.h"

#include <cstdio>
#include <cstdlib>

namespace flowstate {
namespace {

class AllocatedBuffer final : public TensorBuffer {
 public:
  AllocatedBuffer(Allocator* a, void* data, size_t bytes)
      : TensorBuffer(data, bytes), allocator_(a) {}
  ~AllocatedBuffer() override { allocator_->Deallocate(data(), bytes()); }

 private:
  Allocator* allocator_;
};

// A window into another buffer; keeps the parent alive.
class SubBuffer final : public TensorBuffer {
 public:
  SubBuffer(const TensorBuffer* parent, void* data, size_t bytes)
      : TensorBuffer(data, bytes), parent_(parent) {
    parent_->Ref();
  }
  ~SubBuffer() override { parent_->Unref(); }
  const TensorBuffer* root() const override { return parent_->root(); }

 private:
  const TensorBuffer* parent_;
};

}  // namespace

StatusOr<Tensor> Tensor::Allocate(Allocator* allocator, DataType dtype,
                                  const TensorShape& shape) {
  Tensor t;
  t.dtype_ = dtype;
  t.shape_ = shape;
  size_t bytes = t.TotalBytes();
  if (bytes > 0) {
    void* p = allocator->Allocate(bytes, kTensorAlignment);
    if (p == nullptr) {
      const AllocatorStats st = allocator->Stats();
      std::string limit;
      if (st.bytes_limit > 0) {
        limit = " (memory limit " + std::to_string(st.bytes_limit) + " bytes, " +
                std::to_string(st.bytes_in_use) + " in use)";
      }
      return ResourceExhausted("out of memory allocating " + std::to_string(bytes) +
                               " bytes for a " + std::string(DataTypeName(dtype)) +
                               shape.ToString() + " tensor on " +
                               std::string(allocator->Name()) + limit);
    }
    t.buf_ = new AllocatedBuffer(allocator, p, bytes);
    t.data_ = p;
  }
  return t;
}

Tensor::Tensor(DataType dtype, const TensorShape& shape) {
  StatusOr<Tensor> t = Allocate(HostAllocator(), dtype, shape);
  t.status().CheckOk();
  *this = std::move(t).value();
}

Tensor::Tensor(DataType dtype, const TensorShape& shape, TensorBuffer* buffer)
    : dtype_(dtype), shape_(shape), buf_(buffer), data_(buffer ? buffer->data() : nullptr) {
  assert(buffer == nullptr || buffer->bytes() >= TotalBytes());
}

Tensor::Tensor(const Tensor& o)
    : dtype_(o.dtype_), shape_(o.shape_), buf_(o.buf_), data_(o.data_) {
  if (buf_) buf_->Ref();
}

Tensor::Tensor(Tensor&& o) noexcept
    : dtype_(o.dtype_), shape_(o.shape_), buf_(o.buf_), data_(o.data_) {
  o.buf_ = nullptr;
  o.data_ = nullptr;
  o.dtype_ = DataType::kInvalid;
  o.shape_ = TensorShape();
}

Tensor& Tensor::operator=(const Tensor& o) {
  if (this != &o) {
    if (o.buf_) o.buf_->Ref();
    if (buf_) buf_->Unref();
    dtype_ = o.dtype_;
    shape_ = o.shape_;
    buf_ = o.buf_;
    data_ = o.data_;
  }
  return *this;
}

Tensor& Tensor::operator=(Tensor&& o) noexcept {
  if (this != &o) {
    if (buf_) buf_->Unref();
    dtype_ = o.dtype_;
    shape_ = o.shape_;
    buf_ = o.buf_;
    data_ = o.data_;
    o.buf_ = nullptr;
    o.data_ = nullptr;
    o.dtype_ = DataType::kInvalid;
    o.shape_ = TensorShape();
  }
  return *this;
}

Tensor::~Tensor() {
  if (buf_) buf_->Unref();
}

StatusOr<Tensor> Tensor::Reshaped(const TensorShape& shape) const {
  if (shape.num_elements() != num_elements()) {
    return InvalidArgument("cannot reshape a tensor of shape " + shape_.ToString() +
                           " (" + std::to_string(num_elements()) +
                           " elements) to " + shape.ToString() + " (" +
                           std::to_string(shape.num_elements()) + " elements)");
  }
  Tensor t(*this);
  t.shape_ = shape;
  return t;
}

Tensor Tensor::Slice(int64_t begin, int64_t end) const {
  assert(rank() >= 1 && 0 <= begin && begin <= end && end <= dim(0));
  TensorShape s = shape_;
  s.set_dim(0, end - begin);
  size_t row_bytes = dim(0) == 0 ? 0 : TotalBytes() / size_t(dim(0));
  if (buf_ == nullptr || s.num_elements() == 0) {
    Tensor t;
    t.dtype_ = dtype_;
    t.shape_ = s;
    return t;
  }
  char* start = static_cast<char*>(data_) + begin * row_bytes;
  auto* sub = new SubBuffer(buf_, start, size_t(end - begin) * row_bytes);
  return Tensor(dtype_, s, sub);
}

Tensor Tensor::DeepCopy() const {
  if (!IsInitialized()) return Tensor();
  Tensor t(dtype_, shape_);
  if (TotalBytes()) std::memcpy(t.data_, data_, TotalBytes());
  return t;
}

bool Tensor::RefCountIsOne() const {
  if (buf_ == nullptr) return false;
  // A slice shares its root's memory: both must be unshared.
  const TensorBuffer* root = buf_->root();
  return buf_->RefCountIsOne() && (root == buf_ || root->RefCountIsOne());
}

bool Tensor::SharesBufferWith(const Tensor& o) const {
  return buf_ && o.buf_ && buf_->root() == o.buf_->root();
}

double Tensor::ElementAsDouble(int64_t i) const {
  return DispatchDataType(dtype_, [&]<typename T>() -> double {
    if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>) {
      return double(float(static_cast<const T*>(data_)[i]));
    } else {
      return double(static_cast<const T*>(data_)[i]);
    }
  });
}

std::string Tensor::DebugString(int max_elements) const {
  if (!IsInitialized()) return "<uninitialized tensor>";
  std::string s(DataTypeName(dtype_));
  s += shape_.ToString();
  s += ":";
  int64_t n = num_elements();
  for (int64_t i = 0; i < n && i < max_elements; ++i) {
    char buf[32];
    std::snprintf(buf, sizeof(buf), " %g", ElementAsDouble(i));
    s += buf;
  }
  if (n > max_elements) s += " ...";
  return s;
}

bool TensorsEqual(const Tensor& a, const Tensor& b) {
  if (a.dtype() != b.dtype() || a.shape() != b.shape()) return false;
  if (a.TotalBytes() == 0) return true;
  return std::memcmp(a.raw_data(), b.raw_data(), a.TotalBytes()) == 0;
}

}  // namespace flowstate

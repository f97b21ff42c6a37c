#include "state/variable.h"
#include "graph/mutex.h"

#include <cstring>

namespace flowstate {
namespace {

// `value` copied into a buffer of `allocator` (RESOURCE_EXHAUSTED, as
// Tensor::Allocate, when it refuses).
StatusOr<Tensor> CopyTo(Allocator* allocator, const Tensor& value) {
  FS_ASSIGN_OR_RETURN(Tensor t, Tensor::Allocate(allocator, value.dtype(), value.shape()));
  if (value.TotalBytes()) std::memcpy(t.raw_data(), value.raw_data(), value.TotalBytes());
  return t;
}

}  // namespace

Variable::Variable(std::string name, DataType dtype, PartialShape shape, Allocator* allocator)
    : name_(std::move(name)),
      dtype_(dtype),
      shape_(std::move(shape)),
      allocator_(allocator != nullptr ? allocator : HostAllocator()) {}

std::string Variable::DebugString() const {
  return "Variable " + std::string(DataTypeName(dtype_)) + shape_.ToString();
}

Status Variable::UninitializedError() const {
  return FailedPrecondition("variable '" + name_ + "' is read before it was initialized", name_);
}

StatusOr<Tensor> Variable::Read() {
  MutexLock l(mu_);
  if (!value_.IsInitialized()) return UninitializedError();
  return value_;
}

bool Variable::IsInitialized() {
  MutexLock l(mu_);
  return value_.IsInitialized();
}

Status Variable::Assign(const Tensor& value, bool validate_shape) {
  return AssignImpl(value, validate_shape, /*take_buffer=*/false);
}

Status Variable::AssignTakingBuffer(const Tensor& value, bool validate_shape) {
  return AssignImpl(value, validate_shape, /*take_buffer=*/true);
}

Status Variable::AssignImpl(const Tensor& value, bool validate_shape, bool take_buffer) {
  if (value.dtype() != dtype_) {
    return InvalidArgument("cannot assign a " + std::string(DataTypeName(value.dtype())) +
                               " value to " + std::string(DataTypeName(dtype_)) + " variable '" +
                               name_ + "'",
                           name_);
  }
  if (validate_shape && !shape_.IsCompatibleWith(value.shape())) {
    return InvalidArgument("cannot assign a value of shape " + value.shape().ToString() +
                               " to variable '" + name_ + "' of shape " + shape_.ToString(),
                           name_);
  }
  MutexLock l(mu_);
  if (take_buffer && value.RefCountIsOne()) {
    value_ = value;  // shared with the caller's handle until it drops it
    return Status();
  }
  if (value_.IsInitialized() && value_.shape() == value.shape() && value_.RefCountIsOne() &&
      !value_.SharesBufferWith(value)) {
    if (value.TotalBytes()) std::memcpy(value_.raw_data(), value.raw_data(), value.TotalBytes());
    return Status();
  }
  FS_ASSIGN_OR_RETURN(Tensor copy, CopyTo(allocator_, value));
  value_ = std::move(copy);
  return Status();
}

Status Variable::Mutate(const std::function<Status(Tensor* value)>& fn) {
  MutexLock l(mu_);
  if (!value_.IsInitialized()) return UninitializedError();
  if (!value_.RefCountIsOne()) {
    FS_ASSIGN_OR_RETURN(Tensor copy, CopyTo(allocator_, value_));
    value_ = std::move(copy);
  }
  return fn(&value_);
}

}  // namespace flowstate

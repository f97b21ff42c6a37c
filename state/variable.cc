#include "state/variable.h"

#include <cstring>

namespace flowstate {

Variable::Variable(std::string name, DataType dtype, PartialShape shape)
    : name_(std::move(name)), dtype_(dtype), shape_(std::move(shape)) {}

std::string Variable::DebugString() const {
  return "Variable " + std::string(DataTypeName(dtype_)) + shape_.ToString();
}

Status Variable::UninitializedError() const {
  return FailedPrecondition("variable '" + name_ + "' is read before it was initialized", name_);
}

StatusOr<Tensor> Variable::Read() {
  std::lock_guard<std::mutex> l(mu_);
  if (!value_.IsInitialized()) return UninitializedError();
  return value_;
}

bool Variable::IsInitialized() {
  std::lock_guard<std::mutex> l(mu_);
  return value_.IsInitialized();
}

Status Variable::Assign(const Tensor& value, bool validate_shape) {
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
  std::lock_guard<std::mutex> l(mu_);
  if (value_.IsInitialized() && value_.shape() == value.shape() && value_.RefCountIsOne() &&
      !value_.SharesBufferWith(value)) {
    if (value.TotalBytes()) std::memcpy(value_.raw_data(), value.raw_data(), value.TotalBytes());
    return Status();
  }
  value_ = value.DeepCopy();
  return Status();
}

Status Variable::Mutate(const std::function<Status(Tensor* value)>& fn) {
  std::lock_guard<std::mutex> l(mu_);
  if (!value_.IsInitialized()) return UninitializedError();
  if (!value_.RefCountIsOne()) value_ = value_.DeepCopy();
  return fn(&value_);
}

}  // namespace flowstate

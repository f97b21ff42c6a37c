// Variable: a tensor that persists across steps, the state of a model.
//
// Reads share the current buffer (no copy). Writers take the variable's
// mutex; when the buffer is shared with a reader still holding it, a writer
// copies it first (copy-on-write), so a reader's tensor never changes under
// it and concurrent steps see whole values. Steps may still interleave
// their updates — Hogwild-style, as the paper allows — but each single
// update is atomic. Its buffers come from the allocator of the device the
// variable lives on, so the device counts them (bytes_in_use) and its memory
// limit applies to them. Thread-safe.
#ifndef FLOWSTATE_STATE_VARIABLE_H_
#define FLOWSTATE_STATE_VARIABLE_H_

#include <functional>
#include <string>

#include "graph/mutex.h"
#include "graph/status.h"
#include "graph/tensor.h"
#include "graph/tensor_ref.h"
#include "graph/tensor_shape.h"
#include "state/resource_mgr.h"

namespace flowstate {

class Variable final : public ResourceBase, public TensorRef {
 public:
  // `shape` is the declared shape (may be partial); `name` is used in errors.
  // `allocator`: where its buffers come from (null: HostAllocator()); it
  // must outlive the variable's buffers.
  Variable(std::string name, DataType dtype, PartialShape shape, Allocator* allocator = nullptr);

  const std::string& ref_name() const override { return name_; }
  DataType dtype() const { return dtype_; }
  const PartialShape& declared_shape() const { return shape_; }
  std::string DebugString() const override;

  // The current value, sharing its buffer. FAILED_PRECONDITION if never
  // assigned.
  StatusOr<Tensor> Read() override;
  bool IsInitialized();

  // Replaces the value. INVALID_ARGUMENT if the dtype differs, or (with
  // validate_shape) if the shape does not fit the declared shape or the
  // current shape. Copies `value` unless it can be written in place;
  // RESOURCE_EXHAUSTED when the allocator refuses the copy.
  Status Assign(const Tensor& value, bool validate_shape = true);
  // Assign that takes value's buffer instead of copying it when nothing but
  // the caller's handle references it (value.RefCountIsOne(); otherwise it
  // copies as Assign does). The Assign kernel passes its input this way, so
  // an initializer's fresh output (Fill, RandomUniform: the executor drops
  // its slot after the kernel) becomes the variable without a second copy
  // of the table. REQUIRES: the caller writes the buffer no more; it is
  // memory of the variable's device (it stays counted by the allocator that
  // made it).
  Status AssignTakingBuffer(const Tensor& value, bool validate_shape = true);

  // Runs fn on the value with the mutex held, after making the buffer
  // exclusive (copy-on-write). FAILED_PRECONDITION if never assigned.
  Status Mutate(const std::function<Status(Tensor* value)>& fn) override;

 private:
  Status UninitializedError() const;
  Status AssignImpl(const Tensor& value, bool validate_shape, bool take_buffer);

  const std::string name_;
  const DataType dtype_;
  const PartialShape shape_;
  Allocator* const allocator_;
  Mutex mu_;
  Tensor value_ ABSL_GUARDED_BY(mu_);  // uninitialized until the first Assign
};

}  // namespace flowstate

#endif  // FLOWSTATE_STATE_VARIABLE_H_

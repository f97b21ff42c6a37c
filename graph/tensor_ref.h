// TensorRef: a mutable tensor handed around by reference — what a Variable
// is to the ops that mutate it (Ref(T) inputs) and to the ops that read it
// (they get its value, read when they run). The interface lives here, beside
// Tensor, so that both the runtime (devices/, scheduler/) and the owners of
// state (state/, checkpoints/) can speak of it without depending on each
// other. Implementations are thread-safe.
#ifndef FLOWSTATE_GRAPH_TENSOR_REF_H_
#define FLOWSTATE_GRAPH_TENSOR_REF_H_

#include <functional>
#include <string>

#include "graph/status.h"
#include "graph/tensor.h"

namespace flowstate {

class TensorRef {
 public:
  virtual ~TensorRef() = default;
  // The current value (sharing its buffer; writers copy on write while it
  // is shared). FAILED_PRECONDITION naming the variable if it has never been
  // assigned.
  virtual StatusOr<Tensor> Read() = 0;
  // Runs fn on the value with the variable locked, after making its buffer
  // exclusive (copy-on-write). FAILED_PRECONDITION if never assigned. fn
  // should check everything before it writes anything.
  virtual Status Mutate(const std::function<Status(Tensor* value)>& fn) = 0;
  virtual const std::string& ref_name() const = 0;
};

}  // namespace flowstate

#endif  // FLOWSTATE_GRAPH_TENSOR_REF_H_

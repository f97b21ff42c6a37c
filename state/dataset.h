// Dataset: N examples of named components, held in memory.
//
// Each component is one contiguous Tensor whose dimension 0 is the example
// index: Fashion-MNIST's training set is {"x": uint8 [60000, 28, 28],
// "y": uint8 [60000]}, so example i is row i of every component. Loaders
// (LoadIdxDataset, LoadCsvDataset) build one; an InputPipeline batches it.
//
// A Dataset is an immutable value: copying it shares the component buffers
// (Tensor reference counting), and any number of threads may read one at the
// same time. Nobody may write into a component tensor after Make().
#ifndef FLOWSTATE_STATE_DATASET_H_
#define FLOWSTATE_STATE_DATASET_H_

#include <cstdint>
#include <map>
#include <string>

#include "graph/status.h"
#include "graph/tensor.h"
#include "graph/tensor_shape.h"

namespace flowstate {

class Dataset {
 public:
  // An empty dataset: no components, no examples. Make() never returns one.
  Dataset() = default;

  // INVALID_ARGUMENT, naming the component, unless there is at least one
  // component and each is an initialized tensor of rank >= 1 whose
  // dimension 0 is the same for all (the number of examples, may be 0).
  static StatusOr<Dataset> Make(std::map<std::string, Tensor> components);

  int64_t num_examples() const { return num_examples_; }
  int num_components() const { return int(components_.size()); }
  // name -> [num_examples, ...], sorted by name.
  const std::map<std::string, Tensor>& components() const { return components_; }
  // nullptr when there is no component `name`.
  const Tensor* Find(const std::string& name) const;
  // The shape of one example of component `name` (its dims after the first).
  // NOT_FOUND for an unknown name.
  StatusOr<TensorShape> ExampleShape(const std::string& name) const;

  // The first min(n, num_examples()) examples, sharing the buffers.
  // REQUIRES: n >= 0.
  Dataset Take(int64_t n) const;

  // "Dataset(60000 examples; x: uint8[28, 28], y: uint8[])".
  std::string DebugString() const;

 private:
  std::map<std::string, Tensor> components_;
  int64_t num_examples_ = 0;
};

}  // namespace flowstate

#endif  // FLOWSTATE_STATE_DATASET_H_

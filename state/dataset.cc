#include "state/dataset.h"

#include <algorithm>
#include <cassert>
#include <utility>

namespace flowstate {

StatusOr<Dataset> Dataset::Make(std::map<std::string, Tensor> components) {
  if (components.empty()) return InvalidArgument("a dataset needs at least one component");
  const std::string* first_name = nullptr;
  int64_t n = 0;
  for (const auto& [name, t] : components) {
    if (!t.IsInitialized()) {
      return InvalidArgument("dataset component '" + name + "' has no value");
    }
    if (t.rank() < 1) {
      return InvalidArgument("dataset component '" + name +
                             "' is a scalar; it needs a leading example dimension");
    }
    if (first_name == nullptr) {
      first_name = &name;
      n = t.dim(0);
    } else if (t.dim(0) != n) {
      return InvalidArgument("dataset components disagree on the number of examples: '" +
                             *first_name + "' has " + std::to_string(n) + ", '" + name + "' has " +
                             std::to_string(t.dim(0)));
    }
  }
  Dataset d;
  d.components_ = std::move(components);
  d.num_examples_ = n;
  return d;
}

const Tensor* Dataset::Find(const std::string& name) const {
  auto it = components_.find(name);
  return it == components_.end() ? nullptr : &it->second;
}

StatusOr<TensorShape> Dataset::ExampleShape(const std::string& name) const {
  const Tensor* t = Find(name);
  if (t == nullptr) return NotFound("dataset has no component '" + name + "'");
  TensorShape s = t->shape();
  s.RemoveDim(0);
  return s;
}

Dataset Dataset::Take(int64_t n) const {
  assert(n >= 0);
  if (n >= num_examples_) return *this;
  Dataset d;
  for (const auto& [name, t] : components_) d.components_.emplace(name, t.Slice(0, n));
  d.num_examples_ = n;
  return d;
}

std::string Dataset::DebugString() const {
  std::string s = "Dataset(" + std::to_string(num_examples_) + " examples";
  const char* sep = "; ";
  for (const auto& [name, t] : components_) {
    TensorShape shape = t.shape();
    shape.RemoveDim(0);
    s += sep + name + ": " + std::string(DataTypeName(t.dtype())) + shape.ToString();
    sep = ", ";
  }
  return s + ")";
}

}  // namespace flowstate

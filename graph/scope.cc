#include "graph/scope.h"

namespace flowstate {

Scope::Scope() : shared_(std::make_shared<Shared>()) {}

Scope::Scope(GraphDef graph) : shared_(std::make_shared<Shared>()) {
  for (const NodeDef& n : graph.nodes) shared_->used[n.name] = 1;
  shared_->graph = std::move(graph);
}

Scope Scope::WithOpName(std::string name) const {
  Scope s = *this;
  s.op_name_ = std::move(name);
  return s;
}

Scope Scope::NewSubScope(const std::string& prefix) const {
  Scope s = *this;
  s.op_name_.clear();
  s.prefix_ = prefix_.empty() ? prefix : prefix_ + "/" + prefix;
  return s;
}

Scope Scope::UnderNode(const std::string& node) const {
  Scope s = *this;
  s.op_name_.clear();
  s.prefix_ = node;
  return s;
}

Scope Scope::WithDevice(std::string device) const {
  Scope s = *this;
  s.device_ = std::move(device);
  return s;
}

Scope Scope::WithControlDependencies(const std::vector<std::string>& nodes) const {
  Scope s = *this;
  s.control_deps_.insert(s.control_deps_.end(), nodes.begin(), nodes.end());
  return s;
}

Scope Scope::ForHelper(const std::string& suffix) const {
  Scope s = *this;
  if (!op_name_.empty()) s.op_name_ = op_name_ + "/" + suffix;
  return s;
}

std::string Scope::UniqueName(const std::string& base) const {
  std::string full = prefix_.empty() ? base : prefix_ + "/" + base;
  int& n = shared_->used[full];
  if (n++ == 0) return full;
  // "name_1", "name_2", ... skipping names the user took explicitly.
  for (;;) {
    std::string candidate = full + "_" + std::to_string(n - 1);
    int& m = shared_->used[candidate];
    if (m++ == 0) return candidate;
    ++n;
  }
}

std::string Scope::AddNode(const std::string& default_name, const std::string& op,
                           std::vector<std::string> inputs, AttrMap attrs) const {
  NodeDef def;
  def.name = UniqueName(op_name_.empty() ? default_name : op_name_);
  def.op = op;
  def.inputs = std::move(inputs);
  for (const std::string& c : control_deps_) def.inputs.push_back("^" + c);
  def.attrs = std::move(attrs);
  def.device = device_;
  shared_->graph.nodes.push_back(def);
  return def.name;
}

const GraphDef& Scope::graph_def() const { return shared_->graph; }
GraphDef* Scope::mutable_graph_def() const { return &shared_->graph; }

}  // namespace flowstate

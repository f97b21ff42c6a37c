// Scope: the C++ graph-building API. A Scope appends nodes to a GraphDef it
// shares with the scopes derived from it, picks unique node names, and
// carries a name prefix, a device and control dependencies for the nodes it
// creates. The op functions of graph/op_builders.h take a Scope:
//
//   Scope root;
//   Output x = ops::Placeholder(root.WithOpName("x"), DataType::kFloat32, {-1, 2});
//   Output w = ops::Variable(root.WithOpName("w"), {2, 1}, DataType::kFloat32);
//   Output y = ops::MatMul(root, x, w);
//   GraphDef g = root.graph_def();
//
// Nodes are not validated as they are added; Graph::Create() (or a Session)
// validates the whole graph and names any bad node. Scopes derived from one
// root share its state: use them from one thread at a time.
#ifndef FLOWSTATE_GRAPH_SCOPE_H_
#define FLOWSTATE_GRAPH_SCOPE_H_

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "graph/attr_value.h"

namespace flowstate {

// A tensor produced by a node: output `index` of node `node`.
struct Output {
  std::string node;
  int index = 0;
  Output() = default;
  Output(std::string n, int i = 0) : node(std::move(n)), index(i) {}
  Output(const char* n) : node(n) {}
  std::string name() const { return TensorId{node, index}.ToString(); }
};

class Scope {
 public:
  // A root scope over a new, empty graph.
  Scope();
  // A root scope that appends to `graph` (names already in it are taken).
  explicit Scope(GraphDef graph);

  // The next node gets exactly this name (within the prefix).
  Scope WithOpName(std::string name) const;
  // Nodes get names "prefix/...".
  Scope NewSubScope(const std::string& prefix) const;
  // Nodes get names "<node>/...", whatever this scope's prefix: for the
  // nodes a builder makes under the node that names its result (a While's).
  Scope UnderNode(const std::string& node) const;
  Scope WithDevice(std::string device) const;
  // Nodes get control inputs on these nodes (added to any already set).
  Scope WithControlDependencies(const std::vector<std::string>& nodes) const;
  // For a helper node made by an op function (the Const holding a shape,
  // say): named "<op name>/<suffix>" when the scope sets an op name.
  Scope ForHelper(const std::string& suffix) const;

  // Adds a node named after the scope (or `default_name`, made unique) with
  // the scope's device and control dependencies. Returns its name.
  std::string AddNode(const std::string& default_name, const std::string& op,
                      std::vector<std::string> inputs, AttrMap attrs) const;

  const GraphDef& graph_def() const;
  GraphDef* mutable_graph_def() const;

 private:
  struct Shared {
    GraphDef graph;
    std::map<std::string, int> used;  // name -> times taken
  };
  std::string UniqueName(const std::string& base) const;

  std::shared_ptr<Shared> shared_;
  std::string prefix_;
  std::string op_name_;
  std::string device_;
  std::vector<std::string> control_deps_;
};

}  // namespace flowstate

#endif  // FLOWSTATE_GRAPH_SCOPE_H_

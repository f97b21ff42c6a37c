// Graph: a validated, immutable dataflow graph built from a GraphDef.
//
// Building a Graph checks everything that can be known before running:
// unknown ops, duplicate names, unknown inputs, wrong arity, dtype
// mismatches, reference inputs that are not variables, cycles, and the shape
// functions of every op. Each error is INVALID_ARGUMENT and names the node.
// Attributes are resolved on the way: defaults are filled in and type attrs
// are inferred from the inputs (an Add of two float32 tensors gets T =
// float32), so node(i).def() is complete.
//
// Nodes have dense ids 0..num_nodes()-1 in GraphDef order; topo_order() lists
// them so that every node comes after all its inputs, a loop's back edges
// (NextIteration -> Merge) aside: those are the only cycles allowed, and a
// graph with control-flow ops must also form well-nested frames
// (graph/control_flow.h). A Graph is read-only
// after Create() and safe to share between threads.
#ifndef FLOWSTATE_GRAPH_GRAPH_H_
#define FLOWSTATE_GRAPH_GRAPH_H_

#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "graph/attr_value.h"
#include "graph/op_def.h"
#include "graph/status.h"

namespace flowstate {

struct ControlFlowInfo;  // graph/control_flow.h

// The source of a data input: output `output` of node `node`.
struct Endpoint {
  int node = -1;
  int output = 0;
  bool operator==(const Endpoint& o) const { return node == o.node && output == o.output; }
};

// An edge leaving a node. dst_input is -1 for a control edge.
struct OutEdge {
  int src_output = 0;
  int dst = -1;
  int dst_input = 0;
  bool is_control() const { return dst_input < 0; }
};

class Node {
 public:
  int id() const { return id_; }
  const std::string& name() const { return def_.name; }
  const std::string& op() const { return def_.op; }
  const NodeDef& def() const { return def_; }  // attrs resolved
  const OpDef& op_def() const { return *op_def_; }
  const AttrMap& attrs() const { return def_.attrs; }
  const std::string& requested_device() const { return def_.device; }
  bool is_stateful() const { return op_def_->is_stateful; }

  int num_inputs() const { return int(inputs_.size()); }
  const Endpoint& input(int i) const { return inputs_[i]; }
  std::span<const Endpoint> inputs() const { return inputs_; }
  DataType input_type(int i) const { return input_types_[i]; }
  // True when input i is a Ref(T) argument (the kernel mutates a variable).
  bool input_is_ref(int i) const { return input_is_ref_[i]; }
  std::span<const int> control_inputs() const { return control_inputs_; }

  int num_outputs() const { return int(output_types_.size()); }
  DataType output_type(int i) const { return output_types_[i]; }
  const PartialShape& output_shape(int i) const { return output_shapes_[i]; }
  bool output_is_ref(int i) const { return output_is_ref_[i]; }
  std::span<const OutEdge> out_edges() const { return out_edges_; }

 private:
  friend class Graph;
  int id_ = -1;
  NodeDef def_;
  const OpDef* op_def_ = nullptr;
  std::vector<Endpoint> inputs_;
  std::vector<DataType> input_types_;
  std::vector<bool> input_is_ref_;
  std::vector<int> control_inputs_;
  std::vector<DataType> output_types_;
  std::vector<PartialShape> output_shapes_;
  std::vector<bool> output_is_ref_;
  std::vector<OutEdge> out_edges_;
};

class Graph {
 public:
  // Validates `def` against `registry` (OpRegistry::Global() when null).
  static StatusOr<Graph> Create(const GraphDef& def, const OpRegistry* registry = nullptr);

  Graph(Graph&&) = default;
  Graph& operator=(Graph&&) = default;

  int num_nodes() const { return int(nodes_.size()); }
  const Node& node(int id) const { return nodes_[id]; }
  // nullptr when there is no such node.
  const Node* FindNode(std::string_view name) const;
  std::span<const int> topo_order() const { return topo_order_; }

  // The resolved definition of every node, in id order.
  GraphDef ToGraphDef() const;

  // The frames of a graph with control-flow ops (graph/control_flow.h), or
  // nullptr when it has none.
  const ControlFlowInfo* control_flow() const { return control_flow_.get(); }

 private:
  Graph() = default;
  Status Resolve(Node* n);
  Status InferShapes(Node* n);
  // Loops: a NextIteration's out-edges are back edges, left out of the
  // topological order; they may only feed a Merge, with the dtype and a
  // shape compatible with the loop variable's on entry.
  bool IsBackEdgeSource(int id) const;
  Status CheckBackEdges() const;
  StatusOr<DataType> BackEdgeType(Node& node, const ArgDef& a);
  Status CheckLoopVariables() const;

  const OpRegistry* registry_ = nullptr;
  std::vector<Node> nodes_;
  std::unordered_map<std::string, int> by_name_;
  std::vector<int> topo_order_;
  std::shared_ptr<const ControlFlowInfo> control_flow_;  // null: no control-flow op
};

// Node names must be non-empty and use letters, digits and "_-./"; they may
// not start with '^' and may not contain ':'.
Status ValidateNodeName(std::string_view name);

// The dtype of the Placeholder that a feed `name` ("x", "x:0") names: what
// the graph expects to be fed there. nullopt when `name` names no
// Placeholder with a dtype (or is not a tensor name).
std::optional<DataType> PlaceholderDtype(const Graph& graph, std::string_view name);
std::optional<DataType> PlaceholderDtype(const GraphDef& graph, std::string_view name);

}  // namespace flowstate

#endif  // FLOWSTATE_GRAPH_GRAPH_H_

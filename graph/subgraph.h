// Pruning a graph to one run signature: the nodes that computing `fetches`
// and running `targets` needs when `feeds` are given, and nothing else.
//
// The result is a GraphDef ready to place and execute: each fed tensor that
// is used is produced by an _Arg node (attr index = its position in feeds),
// and each fetch is consumed by a _Retval node (index = its position in
// fetches). A control dependency on a fed Placeholder becomes one on its
// _Arg (TensorFlow's rule). Pure function of its inputs; thread-safe.
#ifndef FLOWSTATE_GRAPH_SUBGRAPH_H_
#define FLOWSTATE_GRAPH_SUBGRAPH_H_

#include <string>
#include <vector>

#include "graph/attr_value.h"
#include "graph/graph.h"
#include "graph/status.h"

namespace flowstate {

struct RunSignature {
  std::vector<std::string> feeds;    // tensor names: "x", "x:1"
  std::vector<std::string> fetches;  // tensor names
  std::vector<std::string> targets;  // node names, run for their effects
};

struct PrunedGraph {
  GraphDef graph;
  // For each feed: the dtype and shape the fed tensor must have (the shape
  // may be partial). A feed nothing needs is still listed.
  std::vector<DataType> feed_types;
  std::vector<PartialShape> feed_shapes;
  std::vector<DataType> fetch_types;
};

// Errors (INVALID_ARGUMENT unless noted), each naming the feed, fetch or
// node: an unknown node (NOT_FOUND), a malformed or out-of-range tensor
// name, a tensor fed twice, and a Placeholder that is needed but not fed.
StatusOr<PrunedGraph> PruneForSignature(const Graph& graph, const RunSignature& signature);

}  // namespace flowstate

#endif  // FLOWSTATE_GRAPH_SUBGRAPH_H_

// The frames of a graph with control flow (the paper's section 3.4, as
// TensorFlow's executor has them): which loop each node belongs to.
//
// Every node lies in one frame. Nodes without inputs lie in the root frame;
// a node lies in the frame of its inputs, except that an Enter's
// successors lie in the child frame the Enter names (attr frame_name) and an
// Exit's successors in the parent of the Exit's frame. A loop's body runs
// once per iteration of its frame; a frame nested in a loop runs once per
// iteration of the enclosing one.
//
// BuildControlFlowInfo checks that the control-flow ops fit together, each
// error INVALID_ARGUMENT naming the node: inputs from two frames, an Exit or
// NextIteration or LoopCond outside any loop, one frame name entered from two
// different frames or with different parallel_iterations (or one over
// kMaxParallelIterations), an Enter into the frame it is in, a fetch
// (_Retval) inside a loop. Graph::Create runs it for every graph with a control-flow
// op and keeps the result (Graph::control_flow()). Plain data, immutable once
// built; safe to share.
#ifndef FLOWSTATE_GRAPH_CONTROL_FLOW_H_
#define FLOWSTATE_GRAPH_CONTROL_FLOW_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "graph/graph.h"
#include "graph/status.h"

namespace flowstate {

struct ControlFlowInfo {
  struct Frame {
    std::string name;             // the Enters' frame_name; "" for the root frame
    int parent = -1;              // index of the enclosing frame; -1 for the root
    int parallel_iterations = 1;  // the Enters' attr; 1 for the root
    std::vector<int> nodes;       // ids of the nodes in this frame
    std::vector<int> enters;      // the Enter nodes feeding it (they lie in the parent)
    std::vector<int> exits;       // its Exit nodes (they lie in it)
  };
  std::vector<Frame> frames;  // frames[0] is the root frame
  std::vector<int> frame_of;  // by node id: the index of its frame
};

// Switch, Merge, Enter, Exit, NextIteration, LoopCond.
bool IsControlFlowOp(std::string_view op);

// The most iterations of one loop that may run at once (an Enter's
// parallel_iterations): the executor keeps a slot per iteration in flight.
inline constexpr int64_t kMaxParallelIterations = 1 << 16;

StatusOr<ControlFlowInfo> BuildControlFlowInfo(const Graph& graph);

}  // namespace flowstate

#endif  // FLOWSTATE_GRAPH_CONTROL_FLOW_H_

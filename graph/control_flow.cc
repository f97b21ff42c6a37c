#include "graph/control_flow.h"

#include <deque>

namespace flowstate {
namespace {

std::string Label(const Node& n) { return "node '" + n.name() + "' (" + n.op() + ")"; }

Status Error(const Node& n, const std::string& msg) {
  return InvalidArgument(Label(n) + ": " + msg, n.name());
}

std::string FrameLabel(const ControlFlowInfo& info, int f) {
  return f == 0 ? std::string("the root frame (outside any loop)")
                : "frame '" + info.frames[f].name + "'";
}

}  // namespace

bool IsControlFlowOp(std::string_view op) {
  return op == "Switch" || op == "Merge" || op == "Enter" || op == "Exit" ||
         op == "NextIteration" || op == "LoopCond";
}

StatusOr<ControlFlowInfo> BuildControlFlowInfo(const Graph& graph) {
  const int n = graph.num_nodes();
  ControlFlowInfo info;
  info.frames.push_back(ControlFlowInfo::Frame{});
  info.frame_of.assign(n, -1);
  std::vector<int> via(n, -1);  // the input that set a node's frame, for errors

  // The frame an edge out of `src` leads into.
  auto frame_after = [&](const Node& src) -> StatusOr<int> {
    const int f = info.frame_of[src.id()];
    if (src.op() == "Exit") {
      if (f == 0) return Error(src, "an Exit outside any loop (no Enter leads to it)");
      return info.frames[f].parent;
    }
    if (src.op() != "Enter") return f;
    const std::string& name = src.attrs().at("frame_name").s();
    const int64_t parallel = src.attrs().at("parallel_iterations").i();
    if (name.empty()) return Error(src, "frame_name is empty");
    if (parallel > kMaxParallelIterations) {
      return Error(src, "parallel_iterations " + std::to_string(parallel) + " is over the limit of " +
                            std::to_string(kMaxParallelIterations));
    }
    for (int a = f; a >= 0; a = info.frames[a].parent) {
      if (a > 0 && info.frames[a].name == name) {
        return Error(src, "enters frame '" + name + "' from inside that frame");
      }
    }
    for (size_t c = 1; c < info.frames.size(); ++c) {
      ControlFlowInfo::Frame& frame = info.frames[c];
      if (frame.name != name) continue;
      if (frame.parent != f) {
        return Error(src, "enters frame '" + name + "' from " + FrameLabel(info, f) +
                              ", but other Enters enter it from " +
                              FrameLabel(info, frame.parent));
      }
      if (frame.parallel_iterations != parallel) {
        return Error(src, "parallel_iterations " + std::to_string(parallel) + " differs from " +
                              std::to_string(frame.parallel_iterations) +
                              " of the other Enters of frame '" + name + "'");
      }
      return int(c);
    }
    ControlFlowInfo::Frame frame;
    frame.name = name;
    frame.parent = f;
    frame.parallel_iterations = int(parallel);
    info.frames.push_back(std::move(frame));
    return int(info.frames.size()) - 1;
  };

  // Breadth first from the nodes without inputs (a loop's back edges lead
  // into nodes already reached).
  std::deque<int> queue;
  for (int i = 0; i < n; ++i) {
    const Node& node = graph.node(i);
    if (node.num_inputs() == 0 && node.control_inputs().empty()) {
      info.frame_of[i] = 0;
      queue.push_back(i);
    }
  }
  while (!queue.empty()) {
    const Node& src = graph.node(queue.front());
    queue.pop_front();
    FS_ASSIGN_OR_RETURN(int f, frame_after(src));
    for (const OutEdge& e : src.out_edges()) {
      const Node& dst = graph.node(e.dst);
      if (info.frame_of[e.dst] < 0) {
        info.frame_of[e.dst] = f;
        via[e.dst] = src.id();
        queue.push_back(e.dst);
      } else if (info.frame_of[e.dst] != f) {
        return Error(dst, "its inputs come from two frames: '" + src.name() + "' from " +
                              FrameLabel(info, f) + ", '" + graph.node(via[e.dst]).name() +
                              "' from " + FrameLabel(info, info.frame_of[e.dst]));
      }
    }
  }

  for (int i = 0; i < n; ++i) {
    const Node& node = graph.node(i);
    const int f = info.frame_of[i];
    if (f < 0) return Error(node, "not reached from any node without inputs");
    info.frames[f].nodes.push_back(i);
    const std::string& op = node.op();
    if (f == 0 && (op == "NextIteration" || op == "LoopCond")) {
      return Error(node, "a " + op + " outside any loop (no Enter leads to it)");
    }
    if (f != 0 && op == "_Retval") {
      // A fetch inside a loop would have one value per iteration.
      const std::string fetched = graph.node(node.input(0).node).name();
      return InvalidArgument("cannot fetch '" + node.def().inputs[0] + "': it lies inside loop '" +
                                 info.frames[f].name + "' (fetch the loop's results)",
                             fetched);
    }
    if (op == "Exit") info.frames[f].exits.push_back(i);
    if (op == "Enter") {
      FS_ASSIGN_OR_RETURN(int child, frame_after(node));
      info.frames[child].enters.push_back(i);
    }
  }
  return info;
}

}  // namespace flowstate

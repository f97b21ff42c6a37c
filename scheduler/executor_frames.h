// Internal to the executor: what is fixed per graph for a graph with
// control flow (graph/control_flow.h) — each node's frame, its dense id and
// input slots within that frame, its initial pending count, and each
// frame's sizes — so that a step allocates per iteration only the state of
// that iteration's frame. Built once by Executor::Create; immutable.
#ifndef FLOWSTATE_SCHEDULER_EXECUTOR_FRAMES_H_
#define FLOWSTATE_SCHEDULER_EXECUTOR_FRAMES_H_

#include <cstdint>
#include <string>
#include <vector>

#include "graph/control_flow.h"

namespace flowstate {

struct FrameLayout {
  // kSend and kRecv: the transfer nodes between partitions; a dead _Send
  // still runs (it sends the dead mark), a _Recv that receives it is dead.
  enum Kind : uint8_t { kPlain, kSwitch, kMerge, kEnter, kExit, kNextIteration, kSend, kRecv };
  struct Item {
    Kind kind = kPlain;
    bool is_constant_enter = false;
    bool is_retval = false;     // a fetch: dead is an error
    int frame = 0;              // the frame the node lies in
    int local_id = 0;           // dense within its frame
    int local_input_start = 0;  // its first input slot within its frame
    int child_frame = -1;       // Enter: the frame it enters
    int exit_index = -1;        // Exit: its index among its frame's exits
  };
  struct Frame {
    std::string name;
    int parallel_iterations = 1;
    int num_enters = 0;
    int num_inputs = 0;                // input slots of one iteration
    std::vector<int> initial_pending;  // by local id; a Merge's is (controls << 1) | 1
    std::vector<int> exits;            // node ids
  };
  std::vector<Item> items;  // by node id
  std::vector<Frame> frames;
};

FrameLayout BuildFrameLayout(const Graph& graph, const ControlFlowInfo& info);

}  // namespace flowstate

#endif  // FLOWSTATE_SCHEDULER_EXECUTOR_FRAMES_H_

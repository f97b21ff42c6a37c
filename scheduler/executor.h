// Executor: runs one partition (the nodes of one device) of a step as
// dataflow — a node runs once all its inputs and control inputs are done.
//
// What is fixed per graph is computed once, in Create(): dense node ids,
// the kernels, each node's slots in a flat input array, its out-edges and
// its initial pending count. What lives per step is small: the pending
// counts, the input slots, and a count of nodes in flight. A thread that
// finishes a node runs the cheap successors it made ready itself and at most
// one expensive one, handing the others to the inter-op pool; asynchronous
// kernels (Recv) give their thread back while they wait. Among the nodes one
// node makes ready, those that feed an _AllReduce (a replica's gradients
// bound for an all-reduce bucket) run first, so that a bucket's reduction
// starts while the rest of the backward pass runs (depth first, the weight
// gradients would wait behind the whole chain below them). The first error
// aborts the step: nothing new starts, the rendezvous and the cancellation
// manager are told, and that error is the step's result.
//
// A graph with control-flow ops (graph/control_flow.h) runs in frames and
// iterations, as in TensorFlow's executor (executor_frames.cc): a node runs
// once per iteration of its frame; a node with a dead input is dead (it
// does not run, and its outputs are dead), except a Merge, which runs on its
// first live input; an untaken Switch output is dead; Enter, Exit and
// NextIteration move a value into a loop, out of it, and into its next
// iteration; at most `parallel_iterations` iterations of a loop are alive at
// once, and a finished iteration's state is freed, so a loop of any length
// runs in bounded memory. Such a step checks Args::cancellation before each
// node, so that cancelling it stops a loop that would not end. Between
// partitions, a dead _Send still runs and sends the dead mark, and a _Recv
// that receives it is dead; _Send and _Recv inside a loop get the frame
// instance and iteration they run in (OpKernelContext::frame_iter) for
// their keys. A partition without control-flow ops whose _Recvs may receive
// the dead mark (attr _maybe_dead, set by the partitioner) runs on this
// path too, in the root frame. Graphs without either take the flat path
// above, which knows nothing of this.
//
// An Executor is immutable after Create() and runs any number of steps at
// once. It must outlive the steps it runs.
#ifndef FLOWSTATE_SCHEDULER_EXECUTOR_H_
#define FLOWSTATE_SCHEDULER_EXECUTOR_H_

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "devices/device.h"
#include "devices/op_kernel.h"
#include "graph/graph.h"
#include "graph/mutex.h"

namespace flowstate {

class StepTraceCollector;
class ThreadPool;
struct FrameLayout;

// Kernels of stateful nodes (random generators, variables) shared by every
// executable of a session, so that a node keeps its state whichever run
// signature executes it. Thread-safe.
class KernelCache {
 public:
  // Returns the cached kernel for (device, node) or builds it with `make`.
  StatusOr<std::shared_ptr<OpKernel>> GetOrCreate(
      const std::string& device, const std::string& node,
      const std::function<StatusOr<std::unique_ptr<OpKernel>>()>& make);
  void Clear();

  // The states of the cached kernels that keep one (OpKernel::HasState), by
  // node name, plus states restored for kernels not built yet.
  StatusOr<std::map<std::string, std::string>> SaveStates();
  // Restores states by node name: kernels already cached restore now, the
  // others when GetOrCreate builds them (a state they refuse then fails the
  // build). All or nothing for the cached ones: the first refusal is
  // returned after the earlier ones were applied — callers restore into a
  // fresh session or fail it.
  Status RestoreStates(const std::map<std::string, std::string>& states);

 private:
  Mutex mu_;
  std::map<std::pair<std::string, std::string>, std::shared_ptr<OpKernel>> kernels_;
  std::map<std::string, std::string> pending_states_ ABSL_GUARDED_BY(mu_);  // by node name
};

class Executor {
 public:
  struct Options {
    Device* device = nullptr;               // required
    ResourceMgr* resource_manager = nullptr;
    KernelCache* kernel_cache = nullptr;    // for stateful kernels; may be null
  };
  // Builds the kernels of `graph` (one partition). Errors name the node.
  static StatusOr<std::unique_ptr<Executor>> Create(Graph graph, const Options& options);
  ~Executor();

  struct Args {
    int64_t step_id = 0;
    Rendezvous* rendezvous = nullptr;
    CallFrame* call_frame = nullptr;
    CancellationManager* cancellation = nullptr;
    // Where expensive ready nodes go; inline when null.
    ThreadPool* pool = nullptr;
    // Called once with the first error of this partition (before `done`, and
    // before the rendezvous and the cancellation manager hear of it), so the
    // caller can abort the step's other partitions.
    std::function<void(const Status&)> on_error;
    // Where each kernel run of this partition is recorded (step traces);
    // null: not traced, at the cost of one branch per op.
    StepTraceCollector* trace = nullptr;
  };
  // Runs the step; `done` is called exactly once, on some thread, after
  // every node has finished or the step was aborted.
  void RunAsync(const Args& args, std::function<void(const Status&)> done) const;
  // Runs the step and waits.
  Status Run(const Args& args) const;

  int num_nodes() const { return int(items_.size()); }
  const Graph& graph() const { return graph_; }
  // True when a step of this partition may wait or run unbounded: it holds
  // an asynchronous kernel (a queue's dequeue or enqueue, a Recv, a
  // collective) or control flow (a loop may not end). False: its length
  // follows its inputs, which is what a server may run on a thread that
  // must not block (server/inline_policy.h).
  bool may_wait() const { return may_wait_; }

 private:
  friend class ExecutorStateBase;
  friend class ExecutorState;
  friend class ControlFlowExecutorState;
  struct EdgeInfo {
    int dst = 0;
    int dst_slot = -1;   // index into the step's input slots; -1 for control
    int src_output = 0;
    bool last_use = false;  // the last edge reading src_output: may move it
  };
  struct NodeItem {
    OpKernel* kernel = nullptr;
    bool is_async = false;
    bool expensive = true;
    bool feeds_collective = false;  // an out-edge goes to an _AllReduce
    int input_start = 0;
    int num_inputs = 0;
    int num_outputs = 0;
    int edge_start = 0;
    int num_edges = 0;
    int initial_pending = 0;
  };

  Executor(Graph graph, const Options& options);
  void RunWithFrames(const Args& args, std::function<void(const Status&)> done) const;

  Graph graph_;
  Options options_;
  std::vector<std::shared_ptr<OpKernel>> kernels_;
  std::vector<NodeItem> items_;
  std::vector<EdgeInfo> edges_;
  std::vector<uint8_t> input_is_ref_;  // per input slot
  std::vector<int> roots_;
  int total_inputs_ = 0;
  int max_outputs_ = 0;
  std::unique_ptr<const FrameLayout> frames_;  // null: no control flow (the flat path)
  bool may_wait_ = false;
};

}  // namespace flowstate

#endif  // FLOWSTATE_SCHEDULER_EXECUTOR_H_

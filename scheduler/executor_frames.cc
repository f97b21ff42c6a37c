// The executor's path for graphs with control flow: frames, iterations and
// dead tensors, after TensorFlow's executor (core/common_runtime/executor.cc).
//
// A step holds a tree of frame instances: the root frame, and one instance
// of a loop's frame per iteration of the frame around it that enters it.
// Each live iteration of a frame instance holds the pending counts and
// input slots of the frame's nodes only. Nodes are tagged with the frame
// instance and iteration they run in. All bookkeeping of frames and
// iterations happens under one mutex per step (cf_mu_); kernels run outside
// it, on the threads and with the inline/pool policy of the flat path.
#include "scheduler/executor_frames.h"

#include <memory>
#include <unordered_map>

#include "graph/mutex.h"
#include "scheduler/executor_state.h"
#include "scheduler/thread_pool.h"

namespace flowstate {

FrameLayout BuildFrameLayout(const Graph& graph, const ControlFlowInfo& info) {
  FrameLayout layout;
  layout.items.resize(graph.num_nodes());
  layout.frames.resize(info.frames.size());
  for (size_t f = 0; f < info.frames.size(); ++f) {
    const ControlFlowInfo::Frame& src = info.frames[f];
    FrameLayout::Frame& frame = layout.frames[f];
    frame.name = src.name;
    frame.parallel_iterations = src.parallel_iterations;
    frame.num_enters = int(src.enters.size());
    frame.exits = src.exits;
    for (size_t k = 0; k < src.exits.size(); ++k) layout.items[src.exits[k]].exit_index = int(k);
    for (int id : src.nodes) {
      const Node& node = graph.node(id);
      FrameLayout::Item& item = layout.items[id];
      item.frame = int(f);
      item.local_id = int(frame.initial_pending.size());
      item.local_input_start = frame.num_inputs;
      frame.num_inputs += node.num_inputs();
      const int controls = int(node.control_inputs().size());
      const std::string& op = node.op();
      if (op == "Merge") {
        item.kind = FrameLayout::kMerge;
        frame.initial_pending.push_back((controls << 1) | 1);
      } else {
        frame.initial_pending.push_back(node.num_inputs() + controls);
      }
      item.is_retval = op == "_Retval";
      if (op == "Switch") item.kind = FrameLayout::kSwitch;
      if (op == "Exit") item.kind = FrameLayout::kExit;
      if (op == "NextIteration") item.kind = FrameLayout::kNextIteration;
      if (op == "_Send") item.kind = FrameLayout::kSend;
      if (op == "_Recv") item.kind = FrameLayout::kRecv;
      if (op == "Enter") {
        item.kind = FrameLayout::kEnter;
        item.is_constant_enter = node.attrs().at("is_constant").b();
      }
    }
    for (int id : src.enters) layout.items[id].child_frame = int(f);
  }
  return layout;
}

namespace {

// The state below lives in one step and is guarded by the step's cf_mu_
// (said to the compiler on the functions that change it),
// except what a running node reads of its own iteration: its input slots,
// which only it touches once it is ready.

struct PendingCount {
  int pending = 0;
  int dead = 0;
};

struct FrameState;

struct IterationState {
  int64_t num = 0;
  std::unique_ptr<TensorValue[]> inputs;   // the frame's input slots
  std::unique_ptr<PendingCount[]> counts;  // by local id
  int outstanding_ops = 0;     // nodes of this iteration ready or running
  int outstanding_frames = 0;  // child frame instances not finished
  std::unordered_map<int, std::unique_ptr<FrameState>> children;  // by frame index
};

struct FrameState {
  int index = 0;  // into FrameLayout::frames
  FrameState* parent = nullptr;
  IterationState* parent_iter = nullptr;
  int max_parallel = 1;
  int64_t iteration_count = 0;  // the newest iteration
  int num_outstanding_iterations = 1;
  int num_pending_inputs = 0;  // Enters that have not delivered yet
  std::vector<std::unique_ptr<IterationState>> iterations;  // ring of max_parallel + 1
  std::vector<std::pair<int, TensorValue>> next_iter_roots;  // deferred NextIterations
  struct Invariant {
    int id;
    TensorValue value;
    bool dead;
  };
  std::vector<Invariant> invariants;  // values of constant Enters
  std::vector<uint8_t> exit_delivered;  // by exit index: gave its live value to the parent
  std::unique_ptr<IterationState> spare;  // a finished iteration, for reuse
  // "<tag of the parent iteration>/<frame name>#": with an iteration's
  // number, the tag that names it alike on every partition of the step
  // (the rendezvous keys of transfers inside loops). Empty for the root.
  std::string tag_prefix;

  IterationState* Iteration(int64_t n) const {
    return iterations[size_t(n % int64_t(iterations.size()))].get();
  }
};

struct TaggedNode {
  int id;
  FrameState* frame;
  IterationState* iter;
  bool dead;
};

}  // namespace

class ControlFlowExecutorState final : public ExecutorStateBase {
 public:
  ControlFlowExecutorState(const Executor* exec, const Executor::Args& args,
                           std::function<void(const Status&)> done)
      : ExecutorStateBase(exec, args, std::move(done)), layout_(*exec->frames_) {}

  void Start() {
    root_ = NewFrame(0, nullptr, nullptr);
    outstanding_.store(1, std::memory_order_relaxed);  // held by this call
    std::vector<TaggedNode> ready;
    IterationState* iter = root_->Iteration(0);
    for (int id : exec_->roots_) {
      ready.push_back(TaggedNode{id, root_.get(), iter, false});
      ++iter->outstanding_ops;
    }
    std::vector<TaggedNode> inline_ready;
    ScheduleReady(ready, &inline_ready);
    RunLoop(&inline_ready);
    NodesDone(1);
  }

 private:
  struct AsyncCall {
    ControlFlowExecutorState* state;
    TaggedNode node;
    std::vector<TensorValue> outputs;
    std::unique_ptr<OpKernelContext> ctx;
    int64_t trace_start_ns = 0;
    std::string frame_iter;  // the node's tag (transfer nodes in loops only)
  };

  // The tag of iteration `iter` of `frame`: "" in the root frame, else
  // "/outer#3/inner#5" for iteration 5 of the inner loop entered in
  // iteration 3 of the outer one.
  static std::string IterationTag(const FrameState* frame, const IterationState* iter) {
    if (frame->parent == nullptr) return std::string();
    return frame->tag_prefix + std::to_string(iter->num);
  }

  // The tag a transfer node (_Send/_Recv) adds to its key; other nodes
  // need none.
  std::string TransferTag(const TaggedNode& t) const {
    const FrameLayout::Kind kind = layout_.items[t.id].kind;
    if (kind != FrameLayout::kSend && kind != FrameLayout::kRecv) return std::string();
    return IterationTag(t.frame, t.iter);
  }

  TensorValue* InputsOf(const TaggedNode& t) const {
    return t.iter->inputs.get() + layout_.items[t.id].local_input_start;
  }

  std::string Where(const TaggedNode& t) const {
    if (t.frame->parent == nullptr) return "";
    return " in iteration " + std::to_string(t.iter->num) + " of loop '" +
           layout_.frames[t.frame->index].name + "'";
  }

  std::unique_ptr<IterationState> NewIteration(FrameState* frame, int64_t num) {
    const FrameLayout::Frame& f = layout_.frames[frame->index];
    std::unique_ptr<IterationState> it = std::move(frame->spare);
    if (it == nullptr) {
      it = std::make_unique<IterationState>();
      it->inputs.reset(new TensorValue[f.num_inputs]);
      it->counts.reset(new PendingCount[f.initial_pending.size()]);
    } else {
      // Slots are cleared as their nodes run; a node that never ran (a
      // Merge's unused input) may have left one.
      for (int k = 0; k < f.num_inputs; ++k) {
        if (it->inputs[k].has_value()) it->inputs[k].Clear();
      }
    }
    for (size_t k = 0; k < f.initial_pending.size(); ++k) {
      it->counts[k] = PendingCount{f.initial_pending[k], 0};
    }
    it->num = num;
    it->outstanding_ops = 0;
    it->outstanding_frames = 0;
    return it;
  }

  std::unique_ptr<FrameState> NewFrame(int index, FrameState* parent, IterationState* parent_iter) {
    const FrameLayout::Frame& f = layout_.frames[index];
    auto frame = std::make_unique<FrameState>();
    frame->index = index;
    frame->parent = parent;
    frame->parent_iter = parent_iter;
    frame->max_parallel = f.parallel_iterations;
    frame->num_pending_inputs = f.num_enters;
    frame->iterations.resize(size_t(f.parallel_iterations) + 1);
    frame->exit_delivered.assign(f.exits.size(), 0);
    if (parent != nullptr) frame->tag_prefix = IterationTag(parent, parent_iter) + "/" + f.name + "#";
    frame->iterations[0] = NewIteration(frame.get(), 0);
    return frame;
  }

  // Delivers the outputs of node `id` (all dead when is_dead; a missing
  // output is dead too) to its successors in iteration `iter` of `frame`,
  // appending those made ready. May move the outputs when allow_move.
  void ActivateNodes(int id, bool is_dead, FrameState* frame, IterationState* iter,
                     TensorValue* outputs, bool allow_move, std::vector<TaggedNode>* ready)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(cf_mu_) {
    const Executor::NodeItem& item = exec_->items_[id];
    const bool from_enter = layout_.items[id].kind == FrameLayout::kEnter;
    const Executor::EdgeInfo* e = exec_->edges_.data() + item.edge_start;
    for (int k = 0; k < item.num_edges; ++k, ++e) {
      const FrameLayout::Item& dst = layout_.items[e->dst];
      PendingCount& c = iter->counts[dst.local_id];
      const bool control = e->dst_slot < 0;
      const bool live = !is_dead && (control || outputs[e->src_output].has_value());
      bool dst_dead = false, dst_ready = false, need_input = false;
      if (dst.kind == FrameLayout::kMerge) {
        // Ready once every control input is in and either a live data
        // input arrived (the first one is taken) or all data inputs are
        // dead. The low bit of `pending` is set until a live one arrives.
        const int num_data = exec_->items_[e->dst].num_inputs;
        if (control) {
          c.pending -= 2;
          dst_dead = c.dead == num_data;
          dst_ready = c.pending == 0 || (c.pending == 1 && dst_dead);
        } else if (live) {
          const int count = c.pending;
          c.pending &= ~1;
          dst_ready = count == 1;
          need_input = (count & 1) == 1;
        } else {
          // A dead Enter makes its Merge dead: the loop lies on an untaken
          // branch and never starts.
          ++c.dead;
          dst_dead = c.dead == num_data || from_enter;
          dst_ready = c.pending == 1 && dst_dead;
        }
      } else {
        if (!live) ++c.dead;
        dst_dead = c.dead > 0;
        dst_ready = --c.pending == 0;
        need_input = live && !control;
      }
      if (need_input) {
        const int slot = dst.local_input_start + (e->dst_slot - exec_->items_[e->dst].input_start);
        if (allow_move && e->last_use) {
          iter->inputs[slot] = std::move(outputs[e->src_output]);
        } else {
          iter->inputs[slot] = outputs[e->src_output];
        }
      }
      // A dead Exit would only retire (the loop's other iterations, or a
      // loop that never started, which FinishFrames handles): not run.
      if (dst_ready && !(dst_dead && dst.kind == FrameLayout::kExit)) {
        ready->push_back(TaggedNode{e->dst, frame, iter, dst_dead});
        ++iter->outstanding_ops;
      }
    }
  }

  // A new newest iteration of `frame`, with the deferred NextIteration
  // values and the loop invariants delivered to it.
  IterationState* IncrementIteration(FrameState* frame, std::vector<TaggedNode>* ready)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(cf_mu_) {
    const int64_t num = ++frame->iteration_count;
    auto& slot = frame->iterations[size_t(num % int64_t(frame->iterations.size()))];
    slot = NewIteration(frame, num);
    IterationState* iter = slot.get();
    ++frame->num_outstanding_iterations;
    std::vector<std::pair<int, TensorValue>> roots;
    roots.swap(frame->next_iter_roots);
    for (auto& [id, value] : roots) ActivateNodes(id, false, frame, iter, &value, true, ready);
    for (FrameState::Invariant& inv : frame->invariants) {
      ActivateNodes(inv.id, inv.dead, frame, iter, &inv.value, false, ready);
    }
    return iter;
  }

  bool IsIterationDone(const FrameState* frame, int64_t n) const {
    const IterationState* it = frame->Iteration(n);
    if (it->outstanding_ops != 0 || it->outstanding_frames != 0) return false;
    if (n == 0) return frame->num_pending_inputs == 0;
    return frame->Iteration(n - 1) == nullptr;
  }

  // Frees the finished iterations of `frame` from iteration n on, starting
  // deferred ones; returns whether the whole frame is done. The root frame
  // is never done: the step's end is the count of work in flight.
  bool CleanupIterations(FrameState* frame, int64_t n, std::vector<TaggedNode>* ready)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(cf_mu_) {
    if (frame->parent == nullptr) return false;
    while (n <= frame->iteration_count && IsIterationDone(frame, n)) {
      auto& slot = frame->iterations[size_t(n % int64_t(frame->iterations.size()))];
      slot->children.clear();  // empty already: outstanding_frames == 0
      frame->spare = std::move(slot);
      --frame->num_outstanding_iterations;
      ++n;
      if (!frame->next_iter_roots.empty()) IncrementIteration(frame, ready);
    }
    return frame->num_pending_inputs == 0 && frame->num_outstanding_iterations == 0;
  }

  // Deletes the finished frame instances from `frame` up: each delivers a
  // dead value from every Exit that gave none, and may finish the
  // iteration (and so the frame) around it.
  void FinishFrames(FrameState* frame, std::vector<TaggedNode>* ready) ABSL_EXCLUSIVE_LOCKS_REQUIRED(cf_mu_) {
    while (frame != nullptr) {
      FrameState* parent = frame->parent;
      IterationState* parent_iter = frame->parent_iter;
      const FrameLayout::Frame& f = layout_.frames[frame->index];
      for (size_t k = 0; k < f.exits.size(); ++k) {
        if (!frame->exit_delivered[k]) {
          ActivateNodes(f.exits[k], true, parent, parent_iter, nullptr, false, ready);
        }
      }
      const int index = frame->index;
      parent_iter->children.erase(index);  // deletes *frame
      --parent_iter->outstanding_frames;
      frame = nullptr;
      if (parent_iter->outstanding_ops == 0 && parent_iter->outstanding_frames == 0 &&
          CleanupIterations(parent, parent_iter->num, ready)) {
        frame = parent;
      }
    }
  }

  // Moves a finished node's outputs on (into another frame or iteration for
  // Enter, Exit and NextIteration) and retires it from its iteration.
  // Returns an error for a malformed loop found while running.
  Status Propagate(const TaggedNode& t, TensorValue* outputs, std::vector<TaggedNode>* ready) {
    const FrameLayout::Item& item = layout_.items[t.id];
    MutexLock l(cf_mu_);
    FrameState* frame = t.frame;
    IterationState* iter = t.iter;
    switch (item.kind) {
      case FrameLayout::kEnter: {
        auto& child = iter->children[item.child_frame];
        if (child == nullptr) {
          child = NewFrame(item.child_frame, frame, iter);
          ++iter->outstanding_frames;
        }
        FrameState* c = child.get();
        if (item.is_constant_enter) {
          c->invariants.push_back(FrameState::Invariant{t.id, outputs[0], t.dead});
          TensorValue* value = &c->invariants.back().value;
          for (int64_t n = c->iteration_count - c->num_outstanding_iterations + 1;
               n <= c->iteration_count; ++n) {
            ActivateNodes(t.id, t.dead, c, c->Iteration(n), value, false, ready);
          }
        } else {
          ActivateNodes(t.id, t.dead, c, c->Iteration(0), outputs, true, ready);
        }
        --c->num_pending_inputs;
        const int64_t oldest = c->iteration_count - c->num_outstanding_iterations + 1;
        if (c->num_pending_inputs == 0 && c->Iteration(oldest)->outstanding_ops == 0 &&
            CleanupIterations(c, oldest, ready)) {
          FinishFrames(c, ready);
        }
        break;
      }
      case FrameLayout::kExit:
        if (!t.dead) {
          if (frame->parent == nullptr) {
            return Internal("an Exit outside any loop");  // BuildControlFlowInfo refuses these
          }
          if (frame->exit_delivered[item.exit_index]) {
            return InvalidArgument("an Exit gave a value in two iterations of loop '" +
                                   layout_.frames[frame->index].name +
                                   "' (is its Switch's predicate the loop's LoopCond?)");
          }
          frame->exit_delivered[item.exit_index] = 1;
          ActivateNodes(t.id, false, frame->parent, frame->parent_iter, outputs, true, ready);
        }
        break;
      case FrameLayout::kNextIteration:
        if (t.dead) break;  // the loop ends here: deadness stops
        if (iter->num < frame->iteration_count) {
          ActivateNodes(t.id, false, frame, frame->Iteration(iter->num + 1), outputs, true, ready);
        } else if (frame->num_outstanding_iterations == frame->max_parallel) {
          frame->next_iter_roots.emplace_back(t.id, std::move(outputs[0]));
        } else {
          IterationState* next = IncrementIteration(frame, ready);
          ActivateNodes(t.id, false, frame, next, outputs, true, ready);
        }
        break;
      default:
        ActivateNodes(t.id, t.dead, frame, iter, outputs, true, ready);
        break;
    }
    if (--iter->outstanding_ops == 0 && CleanupIterations(frame, iter->num, ready)) {
      FinishFrames(frame, ready);
    }
    return Status();
  }

  // Cheap nodes and the first expensive one stay with this thread; the
  // other expensive ones go to the pool (each holding an outstanding unit).
  void ScheduleReady(const std::vector<TaggedNode>& ready, std::vector<TaggedNode>* inline_ready) {
    bool kept = false;
    for (const TaggedNode& t : ready) {
      if (t.dead || !exec_->items_[t.id].expensive) {
        inline_ready->push_back(t);
      } else if (!kept || args_.pool == nullptr) {
        kept = true;
        inline_ready->push_back(t);
      } else {
        RunInPool(t);
      }
    }
  }

  void RunInPool(const TaggedNode& t) {
    outstanding_.fetch_add(1, std::memory_order_relaxed);
    args_.pool->Schedule([this, t] {
      std::vector<TaggedNode> list{t};
      RunLoop(&list);
      NodesDone(1);
    });
  }

  // Runs every node of `inline_ready` and those they make ready inline.
  // The caller holds an outstanding unit for the duration.
  void RunLoop(std::vector<TaggedNode>* inline_ready) {
    std::vector<TensorValue> outputs(exec_->max_outputs_);
    std::vector<TaggedNode> ready;
    InputBuffers trace_inputs;
    while (!inline_ready->empty()) {
      const TaggedNode t = inline_ready->back();
      inline_ready->pop_back();
      if (aborted_.load(std::memory_order_relaxed)) continue;
      const Executor::NodeItem& item = exec_->items_[t.id];
      TensorValue* in = InputsOf(t);
      Status s;
      if (args_.cancellation != nullptr && args_.cancellation->IsCancelled()) {
        // A loop may never end by itself: a cancelled step stops here.
        s = Cancelled("the step was cancelled");
      } else if (t.dead && layout_.items[t.id].is_retval) {
        const std::string& fetched = exec_->graph_.node(t.id).def().inputs[0];
        s = InvalidArgument("the fetched tensor '" + fetched +
                                "' is dead: it comes from the untaken branch of a conditional",
                            ParseTensorId(fetched).value().node);
      } else if (t.dead && layout_.items[t.id].kind == FrameLayout::kSend) {
        // A dead value crosses to the other partition: the _Send runs with
        // no input, which it sends as the dead mark.
        ClearInputs(item, in);
        if (item.is_async) {
          LaunchAsync(t);
          continue;
        }
        s = ComputeSync(item, in, outputs.data(), &trace_inputs, TransferTag(t));
      } else if (!t.dead) {
        s = PrepareInputs(item, in);
        if (s.ok() && item.is_async) {
          LaunchAsync(t);
          continue;
        }
        if (s.ok()) {
          s = ComputeSync(item, in, outputs.data(), &trace_inputs, TransferTag(t));
          // A Switch leaves its untaken output empty: dead.
          if (s.ok() && layout_.items[t.id].kind != FrameLayout::kSwitch) {
            s = CheckOutputs(item, outputs.data());
          }
        }
      }
      ClearInputs(item, in);
      if (s.ok()) {
        ready.clear();
        s = Propagate(t, outputs.data(), &ready);
        if (s.ok()) ScheduleReady(ready, inline_ready);
      }
      if (!s.ok()) Abort(t.id, s, Where(t));
      for (int k = 0; k < item.num_outputs; ++k) outputs[k].Clear();
    }
  }

  void LaunchAsync(const TaggedNode& t) {
    const Executor::NodeItem& item = exec_->items_[t.id];
    auto* call = new AsyncCall{this, t, std::vector<TensorValue>(item.num_outputs), nullptr, 0,
                               TransferTag(t)};
    call->ctx = std::make_unique<OpKernelContext>(
        MakeParams(item, InputsOf(t), call->outputs.data(), call->frame_iter));
    if (args_.trace != nullptr) call->trace_start_ns = args_.trace->NowNs();
    outstanding_.fetch_add(1, std::memory_order_relaxed);
    item.kernel->AsAsync()->ComputeAsync(call->ctx.get(), [call] { call->state->AsyncDone(call); });
  }

  void AsyncDone(AsyncCall* call) {
    TaggedNode t = call->node;
    const Executor::NodeItem& item = exec_->items_[t.id];
    if (args_.trace != nullptr) {
      InputBuffers in;
      in.Capture(InputsOf(t), item.num_inputs);
      RecordTrace(item, call->outputs.data(), in, call->trace_start_ns);
    }
    Status s = call->ctx->status();
    if (s.ok() && layout_.items[t.id].kind == FrameLayout::kRecv && !call->outputs[0].has_value()) {
      t.dead = true;  // the sender's value was dead
    } else if (s.ok()) {
      s = CheckOutputs(item, call->outputs.data());
    }
    ClearInputs(item, InputsOf(t));
    std::vector<TaggedNode> ready;
    if (s.ok() && !aborted_.load(std::memory_order_relaxed)) s = Propagate(t, call->outputs.data(), &ready);
    if (!s.ok()) {
      Abort(t.id, s, Where(t));
      ready.clear();
    }
    delete call;
    std::vector<TaggedNode> inline_ready;
    if (args_.pool != nullptr) {
      // Never run successors on the thread that completed the wait (it may
      // be another partition's sender).
      for (const TaggedNode& r : ready) RunInPool(r);
    } else {
      ScheduleReady(ready, &inline_ready);
    }
    RunLoop(&inline_ready);
    NodesDone(1);
  }

  const FrameLayout& layout_;
  Mutex cf_mu_;
  // The root frame; the frames under it hang off their parent iterations.
  // Guarded by cf_mu_ once Start() has made it (counts, iterations, children).
  std::unique_ptr<FrameState> root_;
};

void Executor::RunWithFrames(const Args& args, std::function<void(const Status&)> done) const {
  (new ControlFlowExecutorState(this, args, std::move(done)))->Start();
}

}  // namespace flowstate

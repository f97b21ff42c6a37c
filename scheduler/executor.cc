#include "scheduler/executor.h"

#include <algorithm>
#include <atomic>

#include "devices/kernel_registry.h"
#include "graph/control_flow.h"
#include "graph/mutex.h"
#include "scheduler/executor_frames.h"
#include "scheduler/executor_state.h"
#include "scheduler/thread_pool.h"
#include "scheduler/wait.h"

namespace flowstate {

StatusOr<std::shared_ptr<OpKernel>> KernelCache::GetOrCreate(
    const std::string& device, const std::string& node,
    const std::function<StatusOr<std::unique_ptr<OpKernel>>()>& make) {
  MutexLock l(mu_);
  auto key = std::make_pair(device, node);
  auto it = kernels_.find(key);
  if (it != kernels_.end()) return it->second;
  StatusOr<std::unique_ptr<OpKernel>> k = make();
  if (!k.ok()) return k.status();
  std::shared_ptr<OpKernel> shared(std::move(k).value());
  if (auto p = pending_states_.find(node); p != pending_states_.end()) {
    FS_RETURN_IF_ERROR(shared->RestoreState(p->second));
    pending_states_.erase(p);
  }
  kernels_.emplace(key, shared);
  return shared;
}

void KernelCache::Clear() {
  MutexLock l(mu_);
  kernels_.clear();
  pending_states_.clear();
}

StatusOr<std::map<std::string, std::string>> KernelCache::SaveStates() {
  MutexLock l(mu_);
  std::map<std::string, std::string> out = pending_states_;
  for (const auto& [key, kernel] : kernels_) {
    if (!kernel->HasState()) continue;
    std::string state;
    FS_RETURN_IF_ERROR(kernel->SaveState(&state));
    out[key.second] = std::move(state);
  }
  return out;
}

Status KernelCache::RestoreStates(const std::map<std::string, std::string>& states) {
  MutexLock l(mu_);
  for (const auto& [node, state] : states) {
    bool cached = false;
    for (auto& [key, kernel] : kernels_) {
      if (key.second != node) continue;
      cached = true;
      FS_RETURN_IF_ERROR(kernel->RestoreState(state));
    }
    if (!cached) pending_states_[node] = state;
  }
  return Status();
}

Executor::Executor(Graph graph, const Options& options)
    : graph_(std::move(graph)), options_(options) {}

Executor::~Executor() = default;

StatusOr<std::unique_ptr<Executor>> Executor::Create(Graph graph, const Options& options) {
  std::unique_ptr<Executor> e(new Executor(std::move(graph), options));
  const Graph& g = e->graph_;
  const int n = g.num_nodes();
  e->items_.resize(n);
  e->kernels_.resize(n);
  KernelRegistry* registry = KernelRegistry::Global();
  int slot = 0;
  for (int i = 0; i < n; ++i) {
    const Node& node = g.node(i);
    std::vector<DataType> in_types, out_types;
    for (int k = 0; k < node.num_inputs(); ++k) in_types.push_back(node.input_type(k));
    for (int k = 0; k < node.num_outputs(); ++k) out_types.push_back(node.output_type(k));
    auto make = [&]() {
      return registry->CreateKernel(node.def(), node.op_def(), options.device,
                                    options.resource_manager, in_types, out_types);
    };
    if (node.is_stateful() && options.kernel_cache != nullptr) {
      FS_ASSIGN_OR_RETURN(e->kernels_[i],
                          options.kernel_cache->GetOrCreate(options.device->name(), node.name(), make));
    } else {
      FS_ASSIGN_OR_RETURN(std::unique_ptr<OpKernel> k, make());
      e->kernels_[i] = std::move(k);
    }
    NodeItem& item = e->items_[i];
    item.kernel = e->kernels_[i].get();
    item.is_async = item.kernel->AsAsync() != nullptr;
    item.expensive = item.kernel->IsExpensive();
    item.input_start = slot;
    item.num_inputs = node.num_inputs();
    item.num_outputs = node.num_outputs();
    item.initial_pending = node.num_inputs() + int(node.control_inputs().size());
    for (int k = 0; k < node.num_inputs(); ++k) e->input_is_ref_.push_back(node.input_is_ref(k));
    slot += node.num_inputs();
    e->max_outputs_ = std::max(e->max_outputs_, node.num_outputs());
    if (item.initial_pending == 0) e->roots_.push_back(i);
  }
  e->total_inputs_ = slot;
  for (int i = 0; i < n; ++i) {
    const Node& node = g.node(i);
    NodeItem& item = e->items_[i];
    item.edge_start = int(e->edges_.size());
    for (const OutEdge& oe : node.out_edges()) {
      EdgeInfo info;
      info.dst = oe.dst;
      info.dst_slot = oe.is_control() ? -1 : e->items_[oe.dst].input_start + oe.dst_input;
      info.src_output = oe.src_output;
      e->edges_.push_back(info);
    }
    item.num_edges = int(e->edges_.size()) - item.edge_start;
    for (const OutEdge& oe : node.out_edges()) {
      if (!oe.is_control() && g.node(oe.dst).op() == "_AllReduce") item.feeds_collective = true;
    }
    // The last data edge reading each output may move the tensor.
    std::vector<bool> seen(node.num_outputs(), false);
    for (int k = item.num_edges - 1; k >= 0; --k) {
      EdgeInfo& info = e->edges_[item.edge_start + k];
      if (info.dst_slot >= 0 && !seen[info.src_output]) {
        info.last_use = true;
        seen[info.src_output] = true;
      }
    }
  }
  if (g.control_flow() != nullptr) {
    e->frames_ = std::make_unique<const FrameLayout>(BuildFrameLayout(g, *g.control_flow()));
  } else {
    // A partition of a graph with control flow may receive dead tensors
    // (the partitioner marks its _Recvs) without holding a control-flow op
    // itself: it runs on the frames path, in the root frame.
    for (int i = 0; i < n; ++i) {
      auto it = g.node(i).attrs().find("_maybe_dead");
      if (it == g.node(i).attrs().end() || it->second.kind() != AttrKind::kBool || !it->second.b()) {
        continue;
      }
      FS_ASSIGN_OR_RETURN(ControlFlowInfo info, BuildControlFlowInfo(g));
      e->frames_ = std::make_unique<const FrameLayout>(BuildFrameLayout(g, info));
      break;
    }
  }
  e->may_wait_ = e->frames_ != nullptr ||
                 std::any_of(e->items_.begin(), e->items_.end(),
                             [](const NodeItem& item) { return item.is_async; });
  return e;
}

// The state of one step of one Executor. Deletes itself when the step ends.
class ExecutorState final : public ExecutorStateBase {
 public:
  ExecutorState(const Executor* exec, const Executor::Args& args,
                std::function<void(const Status&)> done)
      : ExecutorStateBase(exec, args, std::move(done)),
        pending_(new std::atomic<int>[exec->items_.size()]),
        inputs_(new TensorValue[exec->total_inputs_]) {
    for (size_t i = 0; i < exec->items_.size(); ++i) {
      pending_[i].store(exec->items_[i].initial_pending, std::memory_order_relaxed);
    }
  }

  void Start() {
    outstanding_.store(1, std::memory_order_relaxed);  // held by this call
    std::vector<int> ready(exec_->roots_.begin(), exec_->roots_.end());
    std::vector<int> inline_ready;
    ScheduleReady(ready, &inline_ready);
    RunLoop(&inline_ready);
    NodesDone(1);
  }

 private:
  struct AsyncCall {
    ExecutorState* state;
    int id;
    std::vector<TensorValue> outputs;
    std::unique_ptr<OpKernelContext> ctx;
    int64_t trace_start_ns = 0;  // traced steps: when it was launched
  };

  // Moves outputs along the node's edges; appends nodes made ready.
  void Propagate(const Executor::NodeItem& item, TensorValue* outputs, std::vector<int>* ready) {
    const Executor::EdgeInfo* e = exec_->edges_.data() + item.edge_start;
    for (int k = 0; k < item.num_edges; ++k, ++e) {
      if (e->dst_slot >= 0) {
        TensorValue& dst = inputs_[e->dst_slot];
        if (e->last_use) {
          dst = std::move(outputs[e->src_output]);
        } else {
          dst = outputs[e->src_output];
        }
      }
      if (exec_->items_[e->dst].initial_pending == 1 ||
          pending_[e->dst].fetch_sub(1, std::memory_order_acq_rel) == 1) {
        ready->push_back(e->dst);
      }
    }
  }

  // Cheap nodes and the first expensive one stay with this thread; the
  // other expensive ones go to the pool (each holding an outstanding unit).
  // Expensive nodes that feed a collective all stay with this thread and
  // run first: in the pool they would wait behind the chain this thread
  // goes on with.
  void ScheduleReady(const std::vector<int>& ready, std::vector<int>* inline_ready) {
    int kept = -1;
    size_t first = 0;  // how many collective feeders to push last
    for (int id : ready) {
      if (!exec_->items_[id].expensive) continue;
      if (exec_->items_[id].feeds_collective) {
        ++first;
        continue;
      }
      if (kept < 0 || args_.pool == nullptr) {
        if (kept >= 0) inline_ready->push_back(kept);
        kept = id;
      } else {
        outstanding_.fetch_add(1, std::memory_order_relaxed);
        args_.pool->Schedule([this, id] {
          std::vector<int> list{id};
          RunLoop(&list);
          NodesDone(1);
        });
      }
    }
    if (kept >= 0) inline_ready->push_back(kept);
    for (int id : ready) {
      if (!exec_->items_[id].expensive) inline_ready->push_back(id);
    }
    if (first > 0) {
      for (auto it = ready.rbegin(); it != ready.rend(); ++it) {
        const Executor::NodeItem& item = exec_->items_[*it];
        if (item.expensive && item.feeds_collective) inline_ready->push_back(*it);
      }
    }
  }

  // Runs every node of `inline_ready` and those they make ready inline.
  // The caller holds an outstanding unit for the duration.
  void RunLoop(std::vector<int>* inline_ready) {
    std::vector<TensorValue> outputs(exec_->max_outputs_);
    std::vector<int> ready;
    InputBuffers trace_inputs;
    while (!inline_ready->empty()) {
      const int id = inline_ready->back();
      inline_ready->pop_back();
      if (aborted_.load(std::memory_order_relaxed)) continue;
      const Executor::NodeItem& item = exec_->items_[id];
      TensorValue* in = inputs_.get() + item.input_start;
      Status s = PrepareInputs(item, in);
      if (s.ok() && item.is_async) {
        LaunchAsync(id);
        continue;
      }
      if (s.ok()) {
        s = ComputeSync(item, in, outputs.data(), &trace_inputs);
        if (s.ok()) s = CheckOutputs(item, outputs.data());
      }
      ClearInputs(item, in);
      if (!s.ok()) {
        Abort(id, s);
      } else {
        ready.clear();
        Propagate(item, outputs.data(), &ready);
        ScheduleReady(ready, inline_ready);
      }
      for (int k = 0; k < item.num_outputs; ++k) outputs[k].Clear();
    }
  }

  void LaunchAsync(int id) {
    const Executor::NodeItem& item = exec_->items_[id];
    auto* call = new AsyncCall{this, id, std::vector<TensorValue>(item.num_outputs), nullptr};
    call->ctx = std::make_unique<OpKernelContext>(
        MakeParams(item, inputs_.get() + item.input_start, call->outputs.data()));
    if (args_.trace != nullptr) call->trace_start_ns = args_.trace->NowNs();
    outstanding_.fetch_add(1, std::memory_order_relaxed);
    item.kernel->AsAsync()->ComputeAsync(call->ctx.get(), [call] { call->state->AsyncDone(call); });
  }

  void AsyncDone(AsyncCall* call) {
    const Executor::NodeItem& item = exec_->items_[call->id];
    if (args_.trace != nullptr) {
      // From launch to completion, on the completing thread: an async
      // kernel's time is mostly waiting (a Recv for its tensor).
      InputBuffers in;
      in.Capture(inputs_.get() + item.input_start, item.num_inputs);
      RecordTrace(item, call->outputs.data(), in, call->trace_start_ns);
    }
    Status s = call->ctx->status();
    if (s.ok()) s = CheckOutputs(item, call->outputs.data());
    ClearInputs(item, inputs_.get() + item.input_start);
    std::vector<int> inline_ready;
    if (!s.ok()) {
      Abort(call->id, s);
    } else if (!aborted_.load(std::memory_order_relaxed)) {
      std::vector<int> ready;
      Propagate(item, call->outputs.data(), &ready);
      if (args_.pool != nullptr) {
        // Never run successors on the thread that completed the wait (it
        // may be another partition's sender).
        for (int id : ready) {
          outstanding_.fetch_add(1, std::memory_order_relaxed);
          args_.pool->Schedule([this, id] {
            std::vector<int> list{id};
            RunLoop(&list);
            NodesDone(1);
          });
        }
      } else {
        ScheduleReady(ready, &inline_ready);
      }
    }
    delete call;
    RunLoop(&inline_ready);
    NodesDone(1);
  }

  std::unique_ptr<std::atomic<int>[]> pending_;
  std::unique_ptr<TensorValue[]> inputs_;
};

void Executor::RunAsync(const Args& args, std::function<void(const Status&)> done) const {
  if (frames_ != nullptr) {
    RunWithFrames(args, std::move(done));
    return;
  }
  (new ExecutorState(this, args, std::move(done)))->Start();
}

Status Executor::Run(const Args& args) const {
  return RunAndWait(
      [&](std::function<void(const Status&)> done) { RunAsync(args, std::move(done)); });
}

}  // namespace flowstate

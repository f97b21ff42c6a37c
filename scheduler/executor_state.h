// Internal to the executor: what the state of one step of one Executor
// needs whatever the graph — kernel contexts, reading variables consumed by
// value, tracing, the first error and the count of work in flight. Two
// subclasses run steps: ExecutorState (executor.cc) for graphs without
// control flow, flat and lock-free, and ControlFlowExecutorState
// (executor_frames.cc) for graphs with frames and dead tensors.
//
// A state deletes itself when its step ends (Finish). Its helpers are
// thread-safe where the executor calls them from several threads (Abort,
// NodesDone); the others touch only the node that the calling thread runs.
#ifndef FLOWSTATE_SCHEDULER_EXECUTOR_STATE_H_
#define FLOWSTATE_SCHEDULER_EXECUTOR_STATE_H_

#include <algorithm>
#include <atomic>
#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "graph/mutex.h"
#include "scheduler/executor.h"
#include "scheduler/rendezvous.h"
#include "scheduler/step_trace.h"

namespace flowstate {

class ExecutorStateBase {
 public:
  virtual ~ExecutorStateBase() = default;

 protected:
  ExecutorStateBase(const Executor* exec, const Executor::Args& args,
                    std::function<void(const Status&)> done)
      : exec_(exec), args_(args), done_(std::move(done)) {}

  // Traced steps only: the buffers of a node's inputs before it runs, so
  // that outputs sharing one (forwarded, sliced, reshaped) are not counted
  // as allocated.
  struct InputBuffers {
    std::vector<std::pair<const char*, size_t>> ranges;
    void Capture(const TensorValue* in, int n) {
      ranges.clear();
      for (int k = 0; k < n; ++k) {
        if (in[k].tensor.IsInitialized()) {
          ranges.emplace_back(static_cast<const char*>(in[k].tensor.raw_data()), in[k].tensor.TotalBytes());
        }
      }
    }
    bool Contains(const void* p) const {
      const char* c = static_cast<const char*>(p);
      for (const auto& [begin, bytes] : ranges) {
        if (c >= begin && c < begin + std::max<size_t>(bytes, 1)) return true;
      }
      return false;
    }
  };

  // Records a kernel run into the step's trace: output bytes, and the bytes
  // of outputs in buffers of their own (what the executor can tell of
  // allocations; a kernel's scratch memory is not seen).
  void RecordTrace(const Executor::NodeItem& item, const TensorValue* outputs, const InputBuffers& in,
                   int64_t start_ns) {
    const int64_t end_ns = args_.trace->NowNs();
    int64_t out_bytes = 0, allocated = 0;
    for (int k = 0; k < item.num_outputs; ++k) {
      const Tensor& t = outputs[k].tensor;
      if (outputs[k].ref != nullptr || !t.IsInitialized()) continue;
      out_bytes += int64_t(t.TotalBytes());
      if (t.TotalBytes() > 0 && !in.Contains(t.raw_data())) allocated += int64_t(t.TotalBytes());
    }
    args_.trace->Record(exec_->options_.device->name(), *item.kernel, start_ns, end_ns, out_bytes, allocated);
  }

  OpKernelContext::Params MakeParams(const Executor::NodeItem& item, TensorValue* inputs,
                                     TensorValue* outputs, std::string_view frame_iter = {}) {
    OpKernelContext::Params p;
    p.step_id = args_.step_id;
    p.device = exec_->options_.device;
    p.kernel = item.kernel;
    p.inputs = std::span<TensorValue>(inputs, item.num_inputs);
    p.outputs = std::span<TensorValue>(outputs, item.num_outputs);
    p.resource_manager = exec_->options_.resource_manager;
    p.rendezvous = args_.rendezvous;
    p.call_frame = args_.call_frame;
    p.cancellation = args_.cancellation;
    p.frame_iter = frame_iter;
    return p;
  }

  // Runs a synchronous kernel over the node's input slots `in` into
  // `outputs`, recording it when the step is traced; returns its status.
  Status ComputeSync(const Executor::NodeItem& item, TensorValue* in, TensorValue* outputs,
                     InputBuffers* trace_inputs, std::string_view frame_iter = {}) {
    OpKernelContext ctx(MakeParams(item, in, outputs, frame_iter));
    if (args_.trace == nullptr) {
      item.kernel->Compute(&ctx);
    } else {
      trace_inputs->Capture(in, item.num_inputs);
      const int64_t start = args_.trace->NowNs();
      item.kernel->Compute(&ctx);
      RecordTrace(item, outputs, *trace_inputs, start);
    }
    return ctx.status();
  }

  // Reads variables consumed by value (`in`: the node's input slots).
  // Returns the first failure.
  Status PrepareInputs(const Executor::NodeItem& item, TensorValue* in) {
    for (int k = 0; k < item.num_inputs; ++k) {
      if (in[k].ref != nullptr && !exec_->input_is_ref_[item.input_start + k]) {
        StatusOr<Tensor> v = in[k].ref->Read();
        if (!v.ok()) return v.status();
        in[k].tensor = std::move(v).value();
        in[k].ref = nullptr;
      }
    }
    return Status();
  }

  static void ClearInputs(const Executor::NodeItem& item, TensorValue* in) {
    for (int k = 0; k < item.num_inputs; ++k) in[k].Clear();
  }

  static Status CheckOutputs(const Executor::NodeItem& item, const TensorValue* outputs) {
    for (int k = 0; k < item.num_outputs; ++k) {
      if (!outputs[k].has_value()) {
        return Internal("the kernel produced no value for output " + std::to_string(k));
      }
    }
    return Status();
  }

  // Records the step's first error (naming node `id`, with `where` after
  // the node when not empty) and aborts the step: nothing new starts, the
  // caller, the rendezvous and the cancellation manager are told.
  void Abort(int id, const Status& s, const std::string& where = "") {
    const std::string& name = exec_->items_[id].kernel->name();
    Status named = s;
    if (s.message().find("'" + name + "'") == std::string::npos) {
      named = Status(s.code(),
                     "node '" + name + "' (" + exec_->items_[id].kernel->type_string() + ")" +
                         where + ": " + s.message(),
                     s.node().empty() ? name : s.node());
    } else if (s.node().empty()) {
      named = s.WithNode(name);
    }
    bool first = false;
    {
      MutexLock l(mu_);
      if (status_.ok()) {
        status_ = named;
        first = true;
      }
    }
    aborted_.store(true, std::memory_order_relaxed);
    if (!first) return;
    // Tell the caller first, so that it knows the step's first error before
    // other partitions fail with its consequences; then wake what waits
    // inside this step (async kernels, Recvs). The caller still holds an
    // outstanding unit, so the step cannot finish under us.
    if (args_.on_error) args_.on_error(named);
    if (args_.rendezvous != nullptr) args_.rendezvous->StartAbort(named);
    if (args_.cancellation != nullptr) args_.cancellation->StartCancel();
  }

  void NodesDone(int n) {
    if (outstanding_.fetch_sub(n, std::memory_order_acq_rel) == n) Finish();
  }

  void Finish() {
    Status s;
    {
      MutexLock l(mu_);
      s = status_;
    }
    auto done = std::move(done_);
    delete this;
    done(s);
  }

  const Executor* exec_;
  Executor::Args args_;
  std::function<void(const Status&)> done_;
  // Units of work in flight: one per thread running nodes of this step and
  // one per async kernel waiting; the step ends when it drops to zero.
  std::atomic<int> outstanding_{0};
  std::atomic<bool> aborted_{false};
  Mutex mu_;
  Status status_ ABSL_GUARDED_BY(mu_);  // the first error
};

}  // namespace flowstate

#endif  // FLOWSTATE_SCHEDULER_EXECUTOR_STATE_H_

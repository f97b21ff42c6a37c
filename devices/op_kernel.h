// OpKernel: the code that computes one node on one device, and the contexts
// it sees when it is built (OpKernelConstruction) and when it runs
// (OpKernelContext).
//
// A kernel is built once per node per executable: the constructor parses
// attributes and reports bad ones through the construction context. Compute
// may then be called from many threads at once (concurrent steps), so it
// must not mutate the kernel without synchronization, and it must not block:
// a kernel that waits (Recv, a queue's Dequeue) derives from AsyncOpKernel
// and calls `done` when it is finished, without holding a thread.
//
// Inputs are borrowed from the executor's per-step slots, which the node
// owns exclusively while it runs; an input whose buffer is referenced by no
// one else may be forwarded to an output (forward_input_or_allocate_output),
// which is how element-wise ops update in place.
//
// On an accelerator (Device::memory_type() kDevice) a kernel's tensors live
// in device memory except the arguments its registration declares in host
// memory (KernelDef::HostMemory); allocate_output follows that declaration,
// and the runtime delivers host-memory inputs in host memory. On a CPU every
// argument is in host memory and nothing of this costs anything.
#ifndef FLOWSTATE_DEVICES_OP_KERNEL_H_
#define FLOWSTATE_DEVICES_OP_KERNEL_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "devices/device.h"
#include "graph/attr_value.h"
#include "graph/mutex.h"
#include "graph/op_def.h"
#include "graph/status.h"
#include "graph/tensor.h"
#include "graph/tensor_ref.h"

namespace flowstate {

// Defined by the layers that own them (state/, scheduler/); kernels that
// need them include those headers.
class ResourceMgr;
class Rendezvous;
class CallFrame;

// One input or output slot: a tensor, or a reference to a variable.
struct TensorValue {
  Tensor tensor;
  TensorRef* ref = nullptr;
  bool has_value() const { return ref != nullptr || tensor.IsInitialized(); }
  void Clear() {
    tensor = Tensor();
    ref = nullptr;
  }
};

// Callbacks run when a step is cancelled (an error elsewhere, Close()).
// Thread-safe.
class CancellationManager {
 public:
  using Token = int64_t;
  static constexpr Token kInvalidToken = -1;
  // Returns kInvalidToken if already cancelled (the callback is not called).
  Token Register(std::function<void()> callback);
  // True if the callback was removed before running.
  bool Deregister(Token token);
  void StartCancel();
  bool IsCancelled() const { return cancelled_.load(std::memory_order_acquire); }

 private:
  Mutex mu_;
  std::atomic<bool> cancelled_{false};
  Token next_ = 0;
  std::vector<std::pair<Token, std::function<void()>>> callbacks_;
};

class OpKernelConstruction {
 public:
  OpKernelConstruction(const NodeDef* def, const OpDef* op_def, Device* device,
                       ResourceMgr* resource_mgr, std::vector<DataType> input_types,
                       std::vector<DataType> output_types);

  const NodeDef& def() const { return *def_; }
  const OpDef& op_def() const { return *op_def_; }
  Device* device() const { return device_; }
  ResourceMgr* resource_manager() const { return resource_mgr_; }
  int num_inputs() const { return int(input_types_.size()); }
  int num_outputs() const { return int(output_types_.size()); }
  DataType input_type(int i) const { return input_types_[i]; }
  DataType output_type(int i) const { return output_types_[i]; }
  const std::vector<DataType>& input_types() const { return input_types_; }
  const std::vector<DataType>& output_types() const { return output_types_; }
  // Where input/output i lives: kHost on a host-memory device, else as the
  // kernel's registration declares (KernelDef::HostMemory).
  MemoryType input_memory_type(int i) const {
    return input_memory_types_.empty() ? MemoryType::kHost : input_memory_types_[i];
  }
  MemoryType output_memory_type(int i) const {
    return output_memory_types_.empty() ? MemoryType::kHost : output_memory_types_[i];
  }
  // Set by KernelRegistry::CreateKernel before the kernel is built; empty
  // vectors (the default) mean every argument is in host memory.
  void set_memory_types(std::vector<MemoryType> inputs, std::vector<MemoryType> outputs) {
    input_memory_types_ = std::move(inputs);
    output_memory_types_ = std::move(outputs);
  }
  const std::vector<MemoryType>& input_memory_types() const { return input_memory_types_; }
  const std::vector<MemoryType>& output_memory_types() const { return output_memory_types_; }

  // Attribute lookups; a failure is recorded in status() and also returned.
  Status GetAttr(std::string_view name, int64_t* v);
  Status GetAttr(std::string_view name, int32_t* v);
  Status GetAttr(std::string_view name, double* v);
  Status GetAttr(std::string_view name, float* v);
  Status GetAttr(std::string_view name, bool* v);
  Status GetAttr(std::string_view name, std::string* v);
  Status GetAttr(std::string_view name, DataType* v);
  Status GetAttr(std::string_view name, PartialShape* v);
  Status GetAttr(std::string_view name, Tensor* v);
  Status GetAttr(std::string_view name, std::vector<int64_t>* v);

  // Records an error; the kernel is then discarded and the error returned.
  void SetStatus(const Status& s);
  const Status& status() const { return status_; }

 private:
  const NodeDef* def_;
  const OpDef* op_def_;
  Device* device_;
  ResourceMgr* resource_mgr_;
  std::vector<DataType> input_types_;
  std::vector<DataType> output_types_;
  std::vector<MemoryType> input_memory_types_;   // empty: all kHost
  std::vector<MemoryType> output_memory_types_;  // empty: all kHost
  Status status_;
};

class AsyncOpKernel;

class OpKernel {
 public:
  explicit OpKernel(OpKernelConstruction* c);
  virtual ~OpKernel() = default;
  OpKernel(const OpKernel&) = delete;
  OpKernel& operator=(const OpKernel&) = delete;

  virtual void Compute(class OpKernelContext* ctx) = 0;
  virtual AsyncOpKernel* AsAsync() { return nullptr; }
  // Cheap kernels (constants, shape ops, control) run inline on the thread
  // that made them ready; expensive ones may be handed to another thread.
  virtual bool IsExpensive() const { return true; }

  // State a kernel keeps across steps besides the ResourceMgr's (the Philox
  // key and block counter of the random kernels), so that a checkpoint can
  // resume the same random streams. SaveState sets *state to opaque bytes
  // that RestoreState of a kernel of the same node accepts; kernels without
  // such state (the default) report HasState() false, save "" and accept
  // only "". RestoreState returns INVALID_ARGUMENT naming the node for bytes
  // it does not understand, changing nothing. Call both between steps: they
  // are not ordered against a concurrent Compute of the same kernel.
  virtual bool HasState() const { return false; }
  virtual Status SaveState(std::string* state) const;
  virtual Status RestoreState(const std::string& state);

  const std::string& name() const { return name_; }
  const std::string& type_string() const { return op_; }
  int num_inputs() const { return int(input_types_.size()); }
  int num_outputs() const { return int(output_types_.size()); }
  DataType input_type(int i) const { return input_types_[i]; }
  DataType output_type(int i) const { return output_types_[i]; }
  // Where input/output i lives (OpKernelConstruction::input_memory_type).
  MemoryType input_memory_type(int i) const {
    return input_memory_types_.empty() ? MemoryType::kHost : input_memory_types_[i];
  }
  MemoryType output_memory_type(int i) const {
    return output_memory_types_.empty() ? MemoryType::kHost : output_memory_types_[i];
  }
  // Empty on a host-memory device (every argument kHost).
  const std::vector<MemoryType>& input_memory_types() const { return input_memory_types_; }
  const std::vector<MemoryType>& output_memory_types() const { return output_memory_types_; }

 private:
  std::string name_;
  std::string op_;
  std::vector<DataType> input_types_;
  std::vector<DataType> output_types_;
  std::vector<MemoryType> input_memory_types_;   // empty: all kHost
  std::vector<MemoryType> output_memory_types_;  // empty: all kHost
};

class AsyncOpKernel : public OpKernel {
 public:
  using DoneCallback = std::function<void()>;
  using OpKernel::OpKernel;
  // Must call `done` exactly once, possibly from another thread, after
  // setting outputs or an error status on ctx.
  virtual void ComputeAsync(OpKernelContext* ctx, DoneCallback done) = 0;
  AsyncOpKernel* AsAsync() final { return this; }
  // Runs ComputeAsync and waits; for tests and tools, never the executor.
  void Compute(OpKernelContext* ctx) final;
};

class OpKernelContext {
 public:
  struct Params {
    int64_t step_id = 0;
    Device* device = nullptr;
    OpKernel* kernel = nullptr;
    std::span<TensorValue> inputs;   // borrowed, one per input
    std::span<TensorValue> outputs;  // filled by the kernel, one per output
    ResourceMgr* resource_manager = nullptr;
    Rendezvous* rendezvous = nullptr;
    CallFrame* call_frame = nullptr;
    CancellationManager* cancellation = nullptr;
    // The loop frame instance and iteration the kernel runs in ("" outside
    // any loop), as the executor names them alike on every partition of a
    // step: what _Send and _Recv add to their rendezvous keys. Borrowed for
    // the duration of Compute/ComputeAsync.
    std::string_view frame_iter;
  };
  explicit OpKernelContext(const Params& p) : p_(p) {}

  int num_inputs() const { return int(p_.inputs.size()); }
  int num_outputs() const { return int(p_.outputs.size()); }
  const Tensor& input(int i) const { return p_.inputs[i].tensor; }
  // The variable behind a Ref(T) input.
  TensorRef* input_ref(int i) const { return p_.inputs[i].ref; }
  OpKernel& kernel() const { return *p_.kernel; }
  Device* device() const { return p_.device; }
  Allocator* allocator() const { return p_.device->allocator(); }
  // Where host-memory outputs and scratch go (Device::host_allocator()).
  Allocator* host_allocator() const { return p_.device->host_allocator(); }
  DeviceContext* device_context() const { return p_.device->device_context(); }
  int64_t step_id() const { return p_.step_id; }
  ResourceMgr* resource_manager() const { return p_.resource_manager; }
  Rendezvous* rendezvous() const { return p_.rendezvous; }
  CallFrame* call_frame() const { return p_.call_frame; }
  CancellationManager* cancellation() const { return p_.cancellation; }
  std::string_view frame_iter() const { return p_.frame_iter; }

  // Allocates output i in its memory (the device's, or the host's for an
  // output declared in host memory); RESOURCE_EXHAUSTED is also recorded in
  // status(). *out stays owned by the context.
  Status allocate_output(int i, const TensorShape& shape, Tensor** out);
  // Reuses the buffer of one of `candidates` (inputs of the output's dtype,
  // element count and memory type that nobody else references) or
  // allocates.
  Status forward_input_or_allocate_output(std::initializer_list<int> candidates, int output,
                                          const TensorShape& shape, Tensor** out);
  // A scratch tensor from the device allocator.
  StatusOr<Tensor> allocate_temp(DataType dtype, const TensorShape& shape);
  void set_output(int i, Tensor t) { p_.outputs[i].tensor = std::move(t); }
  void set_output_ref(int i, TensorRef* ref) { p_.outputs[i].ref = ref; }
  // Moves input i to output o without copying.
  void forward_input(int i, int o) { p_.outputs[o].tensor = std::move(p_.inputs[i].tensor); }

  void SetStatus(const Status& s);
  const Status& status() const { return status_; }
  bool ok() const { return status_.ok(); }

 private:
  Params p_;
  Status status_;
};

// Error-checking helpers for kernels: on failure record the status on the
// context and return from Compute.
#define FS_OP_REQUIRES(ctx, cond, status) \
  do {                                    \
    if (!(cond)) {                        \
      (ctx)->SetStatus(status);           \
      return;                             \
    }                                     \
  } while (0)

#define FS_OP_REQUIRES_OK(ctx, expr)                             \
  do {                                                           \
    ::flowstate::Status _fs_s = ::flowstate::internal::AsStatus(expr); \
    if (!_fs_s.ok()) {                                           \
      (ctx)->SetStatus(_fs_s);                                   \
      return;                                                    \
    }                                                            \
  } while (0)

#define FS_OP_REQUIRES_ASYNC(ctx, cond, status, done) \
  do {                                                \
    if (!(cond)) {                                    \
      (ctx)->SetStatus(status);                       \
      (done)();                                       \
      return;                                         \
    }                                                 \
  } while (0)

}  // namespace flowstate

#endif  // FLOWSTATE_DEVICES_OP_KERNEL_H_

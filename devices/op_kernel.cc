#include "devices/op_kernel.h"
#include "graph/mutex.h"


namespace flowstate {

CancellationManager::Token CancellationManager::Register(std::function<void()> callback) {
  MutexLock l(mu_);
  if (cancelled_.load(std::memory_order_relaxed)) return kInvalidToken;
  Token t = next_++;
  callbacks_.emplace_back(t, std::move(callback));
  return t;
}

bool CancellationManager::Deregister(Token token) {
  MutexLock l(mu_);
  for (auto it = callbacks_.begin(); it != callbacks_.end(); ++it) {
    if (it->first == token) {
      callbacks_.erase(it);
      return true;
    }
  }
  return false;
}

void CancellationManager::StartCancel() {
  std::vector<std::pair<Token, std::function<void()>>> run;
  {
    MutexLock l(mu_);
    if (cancelled_.exchange(true)) return;
    run.swap(callbacks_);
  }
  for (auto& [t, cb] : run) cb();
}

OpKernelConstruction::OpKernelConstruction(const NodeDef* def, const OpDef* op_def,
                                           Device* device, ResourceMgr* resource_mgr,
                                           std::vector<DataType> input_types,
                                           std::vector<DataType> output_types)
    : def_(def),
      op_def_(op_def),
      device_(device),
      resource_mgr_(resource_mgr),
      input_types_(std::move(input_types)),
      output_types_(std::move(output_types)) {}

void OpKernelConstruction::SetStatus(const Status& s) {
  if (status_.ok() && !s.ok()) status_ = s.WithNode(def_->name);
}

#define FS_GETATTR_IMPL(Type, Getter, Convert)                                   \
  Status OpKernelConstruction::GetAttr(std::string_view name, Type* v) {         \
    auto r = Getter(*def_, name);                                                \
    if (!r.ok()) {                                                               \
      SetStatus(r.status());                                                     \
      return r.status();                                                         \
    }                                                                            \
    *v = Convert(*r);                                                            \
    return Status();                                                             \
  }
FS_GETATTR_IMPL(int64_t, GetIntAttr, )
FS_GETATTR_IMPL(int32_t, GetIntAttr, int32_t)
FS_GETATTR_IMPL(double, GetFloatAttr, )
FS_GETATTR_IMPL(float, GetFloatAttr, float)
FS_GETATTR_IMPL(bool, GetBoolAttr, )
FS_GETATTR_IMPL(std::string, GetStringAttr, )
FS_GETATTR_IMPL(DataType, GetTypeAttr, )
FS_GETATTR_IMPL(PartialShape, GetShapeAttr, )
FS_GETATTR_IMPL(Tensor, GetTensorAttr, )
FS_GETATTR_IMPL(std::vector<int64_t>, GetIntListAttr, )
#undef FS_GETATTR_IMPL

OpKernel::OpKernel(OpKernelConstruction* c)
    : name_(c->def().name),
      op_(c->def().op),
      input_types_(c->input_types()),
      output_types_(c->output_types()),
      input_memory_types_(c->input_memory_types()),
      output_memory_types_(c->output_memory_types()) {}

Status OpKernel::SaveState(std::string* state) const {
  state->clear();
  return Status();
}

Status OpKernel::RestoreState(const std::string& state) {
  if (state.empty()) return Status();
  return InvalidArgument("kernel " + op_ + " of node '" + name_ +
                             "' keeps no state but a saved state was given for it",
                         name_);
}

void AsyncOpKernel::Compute(OpKernelContext* ctx) {
  Mutex mu;
  CondVar cv;
  bool finished = false;
  ComputeAsync(ctx, [&] {
    MutexLock l(mu);
    finished = true;
    cv.NotifyAll();
  });
  MutexLock l(mu);
  while (!finished) cv.Wait(mu);
}

Status OpKernelContext::allocate_output(int i, const TensorShape& shape, Tensor** out) {
  // Empty memory types: a host-memory device, where both allocators agree.
  const std::vector<MemoryType>& types = p_.kernel->output_memory_types();
  Allocator* a = !types.empty() && types[i] == MemoryType::kHost ? host_allocator() : allocator();
  StatusOr<Tensor> t = Tensor::Allocate(a, p_.kernel->output_type(i), shape);
  if (!t.ok()) {
    SetStatus(t.status());
    return t.status();
  }
  p_.outputs[i].tensor = std::move(t).value();
  *out = &p_.outputs[i].tensor;
  return Status();
}

Status OpKernelContext::forward_input_or_allocate_output(std::initializer_list<int> candidates,
                                                         int output, const TensorShape& shape,
                                                         Tensor** out) {
  DataType want = p_.kernel->output_type(output);
  for (int i : candidates) {
    Tensor& in = p_.inputs[i].tensor;
    if (p_.inputs[i].ref == nullptr && in.dtype() == want &&
        in.num_elements() == shape.num_elements() && in.RefCountIsOne() &&
        p_.kernel->input_memory_type(i) == p_.kernel->output_memory_type(output)) {
      StatusOr<Tensor> r = in.Reshaped(shape);
      p_.outputs[output].tensor = std::move(r).value();
      in = Tensor();
      *out = &p_.outputs[output].tensor;
      return Status();
    }
  }
  return allocate_output(output, shape, out);
}

StatusOr<Tensor> OpKernelContext::allocate_temp(DataType dtype, const TensorShape& shape) {
  StatusOr<Tensor> t = Tensor::Allocate(allocator(), dtype, shape);
  if (!t.ok()) SetStatus(t.status());
  return t;
}

void OpKernelContext::SetStatus(const Status& s) {
  if (status_.ok() && !s.ok()) status_ = s;
}

}  // namespace flowstate

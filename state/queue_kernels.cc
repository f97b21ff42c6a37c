// Kernels of the queue ops (graph/op_defs/queue_defs.cc). A queue node's kernel
// creates or finds its Queue in the session's ResourceMgr when it is built
// (as a Variable's does) and hands it to the Queue* ops over the Ref edge.
// Enqueue and dequeue kernels are asynchronous: a step that waits on a
// queue holds no thread, and the step's cancellation ends the wait.
#include <memory>

#include "devices/kernel_registry.h"
#include "devices/op_kernel.h"
#include "state/queue.h"
#include "state/resource_mgr.h"

namespace flowstate {
namespace {

// A list attr of the node (validated by the graph; the op's default when
// the def lacks it).
const AttrValue* ListAttr(OpKernelConstruction* c, const std::string& name) {
  auto it = c->def().attrs.find(name);
  if (it != c->def().attrs.end()) return &it->second;
  const AttrDef* d = c->op_def().FindAttr(name);
  return d != nullptr && d->default_value ? &*d->default_value : nullptr;
}

class QueueOp final : public OpKernel {
 public:
  QueueOp(OpKernelConstruction* c, Queue::Kind kind) : OpKernel(c) {
    Queue::Options o;
    o.kind = kind;
    std::string container, shared_name;
    const AttrValue* types = ListAttr(c, "component_types");
    const AttrValue* shapes = ListAttr(c, "shapes");
    if (types == nullptr || shapes == nullptr) {
      c->SetStatus(InvalidArgument("missing attr component_types or shapes", c->def().name));
      return;
    }
    o.component_types = types->types();
    o.shapes = shapes->shapes();
    if (!c->GetAttr("capacity", &o.capacity).ok() || !c->GetAttr("container", &container).ok() ||
        !c->GetAttr("shared_name", &shared_name).ok()) {
      return;
    }
    if (kind == Queue::Kind::kRandomShuffle &&
        (!c->GetAttr("min_after_dequeue", &o.min_after_dequeue).ok() ||
         !c->GetAttr("seed", &o.seed).ok() || !c->GetAttr("seed2", &o.seed2).ok())) {
      return;
    }
    if (c->resource_manager() == nullptr) {
      c->SetStatus(FailedPrecondition("queues need a session's resource manager", c->def().name));
      return;
    }
    o.name = shared_name.empty() ? c->def().name : shared_name;
    o.allocator = c->device() != nullptr ? c->device()->host_allocator() : nullptr;
    auto q = c->resource_manager()->LookupOrCreate<Queue>(
        container, o.name, [&]() -> StatusOr<std::shared_ptr<Queue>> { return Queue::Create(o); });
    Status s = q.ok() ? (*q)->CheckSame(o) : q.status();
    if (!s.ok()) {
      c->SetStatus(s.WithNode(c->def().name));
      return;
    }
    queue_ = *q;
  }
  void Compute(OpKernelContext* ctx) override { ctx->set_output_ref(0, queue_.get()); }
  bool IsExpensive() const override { return false; }

 private:
  std::shared_ptr<Queue> queue_;
};

template <Queue::Kind K>
std::unique_ptr<OpKernel> MakeQueue(OpKernelConstruction* c) {
  return std::make_unique<QueueOp>(c, K);
}

// The queue behind input 0; INVALID_ARGUMENT naming the node when it is
// another kind of Ref (a variable).
StatusOr<Queue*> GetQueue(OpKernelContext* ctx) {
  TensorRef* ref = ctx->input_ref(0);
  auto* q = dynamic_cast<Queue*>(ref);
  if (q == nullptr) {
    return InvalidArgument("input 'handle' of " + ctx->kernel().type_string() + " '" +
                               ctx->kernel().name() + "' must be a queue, got '" +
                               (ref != nullptr ? ref->ref_name() : std::string("nothing")) + "'",
                           ctx->kernel().name());
  }
  return q;
}

// The dtypes a dequeue node declares must be the queue's.
Status CheckOutputTypes(OpKernelContext* ctx, const Queue& q) {
  std::vector<DataType> want;
  for (int i = 0; i < ctx->num_outputs(); ++i) want.push_back(ctx->kernel().output_type(i));
  if (want == q.component_types()) return Status();
  std::string have;
  for (DataType t : want) have += (have.empty() ? "" : ", ") + std::string(DataTypeName(t));
  return InvalidArgument(ctx->kernel().type_string() + " '" + ctx->kernel().name() +
                             "' declares component_types (" + have + ") but its queue is " +
                             q.DebugString(),
                         ctx->kernel().name());
}

template <bool kMany>
class EnqueueOp final : public AsyncOpKernel {
 public:
  using AsyncOpKernel::AsyncOpKernel;
  void ComputeAsync(OpKernelContext* ctx, DoneCallback done) override {
    StatusOr<Queue*> q = GetQueue(ctx);
    FS_OP_REQUIRES_ASYNC(ctx, q.ok(), q.status(), done);
    Queue::Tuple tuple;
    for (int i = 1; i < ctx->num_inputs(); ++i) tuple.push_back(ctx->input(i));
    Status valid = (*q)->ValidateTuple(tuple, kMany);
    FS_OP_REQUIRES_ASYNC(ctx, valid.ok(), valid.WithNode(name()), done);
    auto finish = [ctx, done](const Status& s) {
      if (!s.ok()) ctx->SetStatus(s);
      done();
    };
    if constexpr (kMany) {
      (*q)->TryEnqueueMany(std::move(tuple), ctx->cancellation(), std::move(finish));
    } else {
      (*q)->TryEnqueue(std::move(tuple), ctx->cancellation(), std::move(finish));
    }
  }
  bool IsExpensive() const override { return false; }
};

enum class Take { kOne, kMany, kUpTo };

template <Take T>
class DequeueOp final : public AsyncOpKernel {
 public:
  using AsyncOpKernel::AsyncOpKernel;
  void ComputeAsync(OpKernelContext* ctx, DoneCallback done) override {
    StatusOr<Queue*> q = GetQueue(ctx);
    FS_OP_REQUIRES_ASYNC(ctx, q.ok(), q.status(), done);
    Status types = CheckOutputTypes(ctx, **q);
    FS_OP_REQUIRES_ASYNC(ctx, types.ok(), types, done);
    auto finish = [ctx, done](const Status& s, Queue::Tuple tuple) {
      if (!s.ok()) {
        ctx->SetStatus(s);
      } else {
        for (size_t i = 0; i < tuple.size(); ++i) ctx->set_output(int(i), std::move(tuple[i]));
      }
      done();
    };
    if constexpr (T == Take::kOne) {
      (*q)->TryDequeue(ctx->cancellation(), std::move(finish));
    } else {
      const Tensor& n = ctx->input(1);
      FS_OP_REQUIRES_ASYNC(ctx, n.num_elements() == 1,
                           InvalidArgument("n must be a scalar, got shape " + n.shape().ToString(),
                                           name()),
                           done);
      (*q)->TryDequeueMany(n.data<int32_t>()[0], T == Take::kUpTo, ctx->cancellation(),
                           std::move(finish));
    }
  }
  bool IsExpensive() const override { return false; }
};

class CloseOp final : public OpKernel {
 public:
  explicit CloseOp(OpKernelConstruction* c) : OpKernel(c) {
    (void)c->GetAttr("cancel_pending_enqueues", &cancel_pending_enqueues_);
  }
  void Compute(OpKernelContext* ctx) override {
    StatusOr<Queue*> q = GetQueue(ctx);
    FS_OP_REQUIRES_OK(ctx, q.status());
    (*q)->Close(cancel_pending_enqueues_);
  }
  bool IsExpensive() const override { return false; }

 private:
  bool cancel_pending_enqueues_ = false;
};

class SizeOp final : public OpKernel {
 public:
  using OpKernel::OpKernel;
  void Compute(OpKernelContext* ctx) override {
    StatusOr<Queue*> q = GetQueue(ctx);
    FS_OP_REQUIRES_OK(ctx, q.status());
    Tensor* out;
    FS_OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape(), &out));
    *out->data<int32_t>() = int32_t((*q)->size());
  }
  bool IsExpensive() const override { return false; }
};

}  // namespace

namespace state {

void RegisterQueueKernels() {
  auto must = [](const char* op, KernelFactory f) {
    KernelRegistry::Global()->Register(KernelDef(op), std::move(f)).CheckOk();
  };
  must("FIFOQueue", MakeQueue<Queue::Kind::kFIFO>);
  must("RandomShuffleQueue", MakeQueue<Queue::Kind::kRandomShuffle>);
  must("PaddingFIFOQueue", MakeQueue<Queue::Kind::kPaddingFIFO>);
  must("QueueEnqueue", MakeKernel<EnqueueOp<false>>);
  must("QueueEnqueueMany", MakeKernel<EnqueueOp<true>>);
  must("QueueDequeue", MakeKernel<DequeueOp<Take::kOne>>);
  must("QueueDequeueMany", MakeKernel<DequeueOp<Take::kMany>>);
  must("QueueDequeueUpTo", MakeKernel<DequeueOp<Take::kUpTo>>);
  must("QueueClose", MakeKernel<CloseOp>);
  must("QueueSize", MakeKernel<SizeOp>);
}

}  // namespace state
}  // namespace flowstate

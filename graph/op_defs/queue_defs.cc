// Queues (the paper's section 3.4 "Queues"; TensorFlow's FIFOQueue,
// RandomShuffleQueue and PaddingFIFOQueue with the Queue* ops): a queue node
// outputs a handle (a Ref edge: its consumers run on the queue's device),
// the Queue* ops enqueue into it, dequeue from it, close it and read its
// size. The kernels live in state/ (state/queue.h). Flowstate has no string
// tensors, so a handle is typed Ref(int32); it has no value of its own.
#include <string>

#include "graph/op_defs/register_defs.h"

namespace flowstate::internal {
namespace {

constexpr const char* kHandle = "handle: Ref(int32)";

// The queue attrs every kind shares: components, shapes, capacity.
Status QueueAttrs(InferenceContext* c, bool need_shapes, bool need_full_shapes) {
  const std::vector<DataType>& types = c->GetAttr("component_types").types();
  const std::vector<PartialShape>& shapes = c->GetAttr("shapes").shapes();
  if (types.empty()) return c->Error("attr 'component_types' must list at least one dtype");
  if (need_shapes && shapes.empty()) {
    return c->Error("attr 'shapes' must give one (partial) shape per component");
  }
  if (!shapes.empty() && shapes.size() != types.size()) {
    return c->Error("attr 'shapes' has " + std::to_string(shapes.size()) + " shape(s) for " +
                    std::to_string(types.size()) + " component(s)");
  }
  for (size_t i = 0; i < shapes.size(); ++i) {
    if (need_full_shapes && !shapes[i].IsFullyDefined()) {
      return c->Error("shapes[" + std::to_string(i) + "] is " + shapes[i].ToString() +
                      ": this queue needs fully defined shapes (PaddingFIFOQueue takes "
                      "partial ones)");
    }
    if (!shapes[i].rank_known()) {
      return c->Error("shapes[" + std::to_string(i) + "] has an unknown rank");
    }
  }
  const int64_t capacity = c->IntAttr("capacity");
  if (capacity == 0 || capacity < -1) {
    return c->Error("attr 'capacity' is " + std::to_string(capacity) +
                    ": it must be >= 1, or -1 for no bound");
  }
  c->set_output(0, PartialShape(std::vector<int64_t>{}));
  return Status();
}

Status RandomShuffleQueueShape(InferenceContext* c) {
  FS_RETURN_IF_ERROR(QueueAttrs(c, false, true));
  const int64_t min_after = c->IntAttr("min_after_dequeue");
  const int64_t capacity = c->IntAttr("capacity");
  if (min_after < 0) {
    return c->Error("attr 'min_after_dequeue' is " + std::to_string(min_after) +
                    ": it must be >= 0");
  }
  if (capacity > 0 && min_after >= capacity) {
    return c->Error("attr 'min_after_dequeue' (" + std::to_string(min_after) +
                    ") must be below 'capacity' (" + std::to_string(capacity) + ")");
  }
  return Status();
}

// The handle of a queue op is its first input; nothing else to check
// statically (the queue's components are checked when the op runs).
Status EnqueueShape(InferenceContext* c) {
  if (c->num_inputs() < 2) return c->Error("enqueues at least one component");
  return Status();
}

Status DequeueManyShape(InferenceContext* c) {
  if (c->input(1).rank_known() && c->input(1).rank() != 0) {
    return c->Error("n must be a scalar, got shape " + c->input(1).ToString());
  }
  if (const Tensor* n = c->input_tensor(1); n != nullptr && n->data<int32_t>()[0] < 0) {
    return c->Error("n is " + std::to_string(n->data<int32_t>()[0]) + ": it must be >= 0");
  }
  return shape_fns::Unknown(c);
}

void RegisterQueue(OpRegistry* r, OpDefBuilder b, ShapeFn fn, const std::string& doc) {
  MustRegister(r, b.Output(kHandle)
                      .Attr("component_types: list(type)")
                      .Attr("shapes: list(shape) = []")
                      .Attr("capacity: int = -1")
                      .Attr("container: string = \"\"")
                      .Attr("shared_name: string = \"\"")
                      .SetIsStateful()
                      .SetShapeFn(std::move(fn))
                      .Doc(doc +
                           " Its resource is named by shared_name (the node name when empty) "
                           "within container and shared by every step of the session; a second "
                           "queue node of the same name must declare the same queue. "
                           "capacity -1: unbounded; else an enqueue waits while it is full. "
                           "Consumers of the handle run on the queue's device."));
}

}  // namespace

void RegisterQueueOps(OpRegistry* r) {
  RegisterQueue(r, OpDefBuilder("FIFOQueue"),
                [](InferenceContext* c) { return QueueAttrs(c, false, true); },
                "A queue of tuples of tensors (one per component_types), dequeued first in, "
                "first out. shapes, when given, fixes each component's shape (fully defined); "
                "without it any shapes are taken, and QueueDequeueMany needs the elements of a "
                "batch to agree.");
  RegisterQueue(r,
                OpDefBuilder("RandomShuffleQueue")
                    .Attr("min_after_dequeue: int = 0")
                    .Attr("seed: int = 0")
                    .Attr("seed2: int = 0"),
                RandomShuffleQueueShape,
                "A queue that dequeues its elements in random order: each dequeue takes a "
                "uniformly chosen element, and only while more than min_after_dequeue "
                "elements remain (so that the mix stays good) unless the queue is closed. "
                "A nonzero (seed, seed2) makes the order the same for the same sequence of "
                "operations.");
  RegisterQueue(r, OpDefBuilder("PaddingFIFOQueue"),
                [](InferenceContext* c) { return QueueAttrs(c, true, false); },
                "A FIFOQueue whose shapes may be partially known (-1 for a dimension that "
                "varies; the rank must be known): QueueDequeueMany and QueueDequeueUpTo pad "
                "each component of the batch with zeros to the largest size of each "
                "dimension among the batch's elements.");
  MustRegister(r, OpDefBuilder("QueueEnqueue")
                      .Input(kHandle)
                      .Input("components: Tcomponents")
                      .Attr("Tcomponents: list(type)")
                      .Attr("timeout_ms: int = -1")
                      .SetIsStateful()
                      .SetShapeFn(EnqueueShape)
                      .Doc("Enqueues one element (a tuple of the components). Waits while the "
                           "queue is full, without holding a thread; a closed queue refuses it "
                           "(CANCELLED). Wrong count, dtypes or shapes: INVALID_ARGUMENT. "
                           "timeout_ms is accepted for TensorFlow compatibility and ignored: the "
                           "step's deadline (timeout_ms of the run) bounds the wait."));
  MustRegister(r, OpDefBuilder("QueueEnqueueMany")
                      .Input(kHandle)
                      .Input("components: Tcomponents")
                      .Attr("Tcomponents: list(type)")
                      .Attr("timeout_ms: int = -1")
                      .SetIsStateful()
                      .SetShapeFn(EnqueueShape)
                      .Doc("Enqueues the slices of the components along dimension 0 as "
                           "elements (every component must have the same size in dimension 0). "
                           "Waits for room as QueueEnqueue does; elements enqueued before a "
                           "cancel stay."));
  MustRegister(r, OpDefBuilder("QueueDequeue")
                      .Input(kHandle)
                      .Output("components: component_types")
                      .Attr("component_types: list(type)")
                      .Attr("timeout_ms: int = -1")
                      .SetIsStateful()
                      .SetShapeFn(shape_fns::Unknown)
                      .Doc("Dequeues one element. Waits while the queue is empty, without "
                           "holding a thread; cancelling the step, its deadline or closing the "
                           "session ends the wait. OUT_OF_RANGE once the queue is closed and "
                           "empty."));
  MustRegister(r, OpDefBuilder("QueueDequeueMany")
                      .Input(kHandle)
                      .Input("n: int32")
                      .Output("components: component_types")
                      .Attr("component_types: list(type)")
                      .Attr("timeout_ms: int = -1")
                      .SetIsStateful()
                      .SetShapeFn(DequeueManyShape)
                      .Doc("Dequeues n elements, stacked along a new dimension 0 (padded in a "
                           "PaddingFIFOQueue). Waits until there are n; OUT_OF_RANGE when the "
                           "queue is closed with fewer than n left (those stay queued)."));
  MustRegister(r, OpDefBuilder("QueueDequeueUpTo")
                      .Input(kHandle)
                      .Input("n: int32")
                      .Output("components: component_types")
                      .Attr("component_types: list(type)")
                      .Attr("timeout_ms: int = -1")
                      .SetIsStateful()
                      .SetShapeFn(DequeueManyShape)
                      .Doc("QueueDequeueMany, except that once the queue is closed it returns "
                           "what is left (between 1 and n elements); OUT_OF_RANGE when the "
                           "queue is closed and empty."));
  MustRegister(r, OpDefBuilder("QueueClose")
                      .Input(kHandle)
                      .Attr("cancel_pending_enqueues: bool = false")
                      .SetIsStateful()
                      .SetShapeFn(shape_fns::NoOutputs)
                      .Doc("Closes the queue: later enqueues fail (CANCELLED); dequeues take "
                           "what is left, then fail OUT_OF_RANGE. Enqueues already waiting "
                           "for room go on waiting (and complete as dequeues make room) unless "
                           "cancel_pending_enqueues, which fails them (CANCELLED). Closing "
                           "twice is harmless."));
  MustRegister(r, OpDefBuilder("QueueSize")
                      .Input(kHandle)
                      .Output("size: int32")
                      .SetIsStateful()
                      .SetShapeFn(shape_fns::ScalarShape)
                      .Doc("The number of elements in the queue."));
}

}  // namespace flowstate::internal

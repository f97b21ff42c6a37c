// Builders of the queue ops (graph/op_defs/queue_defs.cc), in graph/op_builders.h's
// style: one function per op, adding one node to the scope's graph.
//
//   Scope root;
//   Output q = ops::FIFOQueue(root.WithOpName("q"), {DataType::kFloat32},
//                             {.shapes = {PartialShape({2})}, .capacity = 8});
//   Output x = ops::Placeholder(root.WithOpName("x"), DataType::kFloat32, {2});
//   std::string enq = ops::QueueEnqueue(root.WithOpName("enq"), q, {x});
//   std::vector<Output> batch =
//       ops::QueueDequeueMany(root.WithOpName("batch"), q, ops::Const(root, 4),
//                             {DataType::kFloat32});
//
// One session step runs "enq" (a target, x fed), another fetches "batch"
// (float32[4, 2]); both find the same queue, the node "q" (state/queue.h).
// The functions only build; a bad attr (capacity 0, shapes that do not fit
// component_types) is reported when the graph is validated, naming the node.
#ifndef FLOWSTATE_GRAPH_QUEUE_BUILDERS_H_
#define FLOWSTATE_GRAPH_QUEUE_BUILDERS_H_

#include <string>
#include <vector>

#include "graph/scope.h"
#include "graph/tensor_shape.h"
#include "graph/types.h"

namespace flowstate::ops {

struct QueueAttrs {
  // One per component; empty: any shapes (not for PaddingFIFOQueue).
  std::vector<PartialShape> shapes;
  int64_t capacity = -1;  // -1: unbounded
  std::string container;
  std::string shared_name;  // "": the node's name
};

Output FIFOQueue(const Scope& s, const std::vector<DataType>& component_types,
                 const QueueAttrs& a = {});
Output PaddingFIFOQueue(const Scope& s, const std::vector<DataType>& component_types,
                        const QueueAttrs& a);
struct ShuffleAttrs {
  int64_t min_after_dequeue = 0;
  int64_t seed = 0, seed2 = 0;  // both 0: a different order every time
};
Output RandomShuffleQueue(const Scope& s, const std::vector<DataType>& component_types,
                          const QueueAttrs& a, const ShuffleAttrs& shuffle);

// Return the node's name (run it as a target).
std::string QueueEnqueue(const Scope& s, const Output& queue, const std::vector<Output>& components);
std::string QueueEnqueueMany(const Scope& s, const Output& queue,
                             const std::vector<Output>& components);
std::string QueueClose(const Scope& s, const Output& queue, bool cancel_pending_enqueues = false);

// One output per component type.
std::vector<Output> QueueDequeue(const Scope& s, const Output& queue,
                                 const std::vector<DataType>& component_types);
std::vector<Output> QueueDequeueMany(const Scope& s, const Output& queue, const Output& n,
                                     const std::vector<DataType>& component_types);
std::vector<Output> QueueDequeueUpTo(const Scope& s, const Output& queue, const Output& n,
                                     const std::vector<DataType>& component_types);
Output QueueSize(const Scope& s, const Output& queue);

}  // namespace flowstate::ops

#endif  // FLOWSTATE_GRAPH_QUEUE_BUILDERS_H_

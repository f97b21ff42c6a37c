#include "graph/queue_builders.h"

namespace flowstate::ops {
namespace {

AttrMap QueueAttrMap(const std::vector<DataType>& types, const QueueAttrs& a) {
  return {{"component_types", AttrValue(types)},
          {"shapes", AttrValue(a.shapes)},
          {"capacity", AttrValue(a.capacity)},
          {"container", AttrValue(a.container)},
          {"shared_name", AttrValue(a.shared_name)}};
}

std::vector<std::string> Inputs(const Output& queue, const std::vector<Output>& rest) {
  std::vector<std::string> in{queue.name()};
  for (const Output& o : rest) in.push_back(o.name());
  return in;
}

std::vector<Output> Outputs(const std::string& node, size_t n) {
  std::vector<Output> out;
  for (size_t i = 0; i < n; ++i) out.emplace_back(node, int(i));
  return out;
}

std::vector<Output> Dequeue(const Scope& s, const std::string& op, const Output& queue,
                            const std::vector<Output>& n, const std::vector<DataType>& types) {
  const std::string node =
      s.AddNode(op, op, Inputs(queue, n), {{"component_types", AttrValue(types)}});
  return Outputs(node, types.size());
}

}  // namespace

Output FIFOQueue(const Scope& s, const std::vector<DataType>& types, const QueueAttrs& a) {
  return Output(s.AddNode("FIFOQueue", "FIFOQueue", {}, QueueAttrMap(types, a)), 0);
}
Output PaddingFIFOQueue(const Scope& s, const std::vector<DataType>& types, const QueueAttrs& a) {
  return Output(s.AddNode("PaddingFIFOQueue", "PaddingFIFOQueue", {}, QueueAttrMap(types, a)), 0);
}
Output RandomShuffleQueue(const Scope& s, const std::vector<DataType>& types, const QueueAttrs& a,
                          const ShuffleAttrs& shuffle) {
  AttrMap attrs = QueueAttrMap(types, a);
  attrs["min_after_dequeue"] = AttrValue(shuffle.min_after_dequeue);
  attrs["seed"] = AttrValue(shuffle.seed);
  attrs["seed2"] = AttrValue(shuffle.seed2);
  return Output(s.AddNode("RandomShuffleQueue", "RandomShuffleQueue", {}, std::move(attrs)), 0);
}

std::string QueueEnqueue(const Scope& s, const Output& queue, const std::vector<Output>& c) {
  return s.AddNode("QueueEnqueue", "QueueEnqueue", Inputs(queue, c), {});
}
std::string QueueEnqueueMany(const Scope& s, const Output& queue, const std::vector<Output>& c) {
  return s.AddNode("QueueEnqueueMany", "QueueEnqueueMany", Inputs(queue, c), {});
}
std::string QueueClose(const Scope& s, const Output& queue, bool cancel_pending_enqueues) {
  return s.AddNode("QueueClose", "QueueClose", {queue.name()},
                   {{"cancel_pending_enqueues", AttrValue(cancel_pending_enqueues)}});
}
std::vector<Output> QueueDequeue(const Scope& s, const Output& queue,
                                 const std::vector<DataType>& types) {
  return Dequeue(s, "QueueDequeue", queue, {}, types);
}
std::vector<Output> QueueDequeueMany(const Scope& s, const Output& queue, const Output& n,
                                     const std::vector<DataType>& types) {
  return Dequeue(s, "QueueDequeueMany", queue, {n}, types);
}
std::vector<Output> QueueDequeueUpTo(const Scope& s, const Output& queue, const Output& n,
                                     const std::vector<DataType>& types) {
  return Dequeue(s, "QueueDequeueUpTo", queue, {n}, types);
}
Output QueueSize(const Scope& s, const Output& queue) {
  return Output(s.AddNode("QueueSize", "QueueSize", {queue.name()}, {}), 0);
}

}  // namespace flowstate::ops

// Placement and partitioning: giving every node of an executable graph a
// device, and cutting the graph into one subgraph per device joined by
// _Send/_Recv pairs.
//
// Placement honours, in order: colocation (an op that takes a variable by
// reference runs where the variable lives; a node with attr _colocate_with
// runs with the named node; a StackPop runs with the StackPushes of its
// stack_name), the device each node requests (full or partial
// specs; all members of a colocation group must agree), kernel availability
// on the device type, and otherwise the default device. Pure functions;
// thread-safe.
#ifndef FLOWSTATE_SCHEDULER_PLACEMENT_H_
#define FLOWSTATE_SCHEDULER_PLACEMENT_H_

#include <cstdint>
#include <string_view>
#include <vector>

#include "devices/device.h"
#include "devices/device_pool.h"
#include "graph/graph.h"

namespace flowstate {

// One device per node id. INVALID_ARGUMENT naming the node when its request
// matches no device, when colocated nodes ask for different devices, or when
// no matching device has a kernel for it.
StatusOr<std::vector<Device*>> PlaceGraph(const Graph& graph, const DevicePool& pool,
                                          Device* default_device);
// The same over any set of devices, e.g. this task's and other tasks'
// (RemoteDevice, scheduler/cluster_view.h): a node may ask for
// "/job:worker/task:1" and get a device of that task. `where` names the set
// in errors ("this server", "the cluster").
StatusOr<std::vector<Device*>> PlaceGraph(const Graph& graph, const std::vector<Device*>& devices,
                                          Device* default_device, std::string_view where);

struct GraphPartition {
  Device* device = nullptr;
  GraphDef graph;
};

// Splits `graph` by `placement`. Every data edge between devices becomes
// _Send (on the producer's device) -> _Recv (on the consumer's), one pair
// per (tensor, consumer device, consumer wants host memory); a control edge
// between devices becomes a _Send of a dummy scalar after the producer and a
// control input on the _Recv'd value. Where a device has its own memory
// (Device::memory_type), the pair's `host_memory` attrs say which end is in
// host memory (arguments its kernels declare HostMemory), and an edge within
// one such device whose ends are in different memories gets a _CopyToHost or
// _CopyToDevice node. Graphs on host-memory devices only get none of this.
// Partitions come in the order their devices first appear in the graph.
// Rendezvous keys carry the source device's incarnation: a RemoteDevice's
// own, `local_incarnation` for the devices of this task (0:
// ProcessIncarnation()).
//
// Control flow may be split too (the paper's section 3.4). A _Recv whose
// consumer lies in a loop takes a control input from the Merge of a
// control-loop skeleton that its partition gets for that frame (Enter of a
// constant, Merge, Switch on the frame's LoopCond, NextIteration; nested
// frames enter from their parent's skeleton). The LoopCond's value is sent
// to every such partition each iteration; the executor adds the frame
// instance and iteration to the keys of transfers inside loops, and a dead
// value crosses as the dead mark, so an untaken branch on another device is
// dead there too. An edge out of an Enter or a NextIteration is cut before
// it: the node is copied into the consumer's partition. Every _Recv of a
// graph with control flow carries attr _maybe_dead, which makes its
// partition run on the executor's frames path. UNIMPLEMENTED naming the
// consumer for a loop that cannot be split this way: one without a single
// LoopCond, or one that would cross onto a device with its own memory.
StatusOr<std::vector<GraphPartition>> PartitionGraph(const Graph& graph,
                                                     const std::vector<Device*>& placement,
                                                     uint64_t local_incarnation = 0);

}  // namespace flowstate

#endif  // FLOWSTATE_SCHEDULER_PLACEMENT_H_

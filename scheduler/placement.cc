#include "scheduler/placement.h"

#include <algorithm>
#include <functional>
#include <map>
#include <numeric>
#include <unordered_set>

#include "devices/kernel_registry.h"
#include "graph/control_flow.h"
#include "scheduler/cluster_view.h"
#include "scheduler/rendezvous.h"

namespace flowstate {
namespace {

struct UnionFind {
  explicit UnionFind(int n) : parent(n) { std::iota(parent.begin(), parent.end(), 0); }
  int Find(int x) {
    while (parent[x] != x) x = parent[x] = parent[parent[x]];
    return x;
  }
  void Union(int a, int b) { parent[Find(a)] = Find(b); }
  std::vector<int> parent;
};

// A device of another task carries that task's incarnation; the devices of
// this process have `local`.
uint64_t IncarnationOf(const Device* d, uint64_t local) {
  const auto* remote = dynamic_cast<const RemoteDevice*>(d);
  return remote != nullptr ? remote->incarnation() : local;
}

}  // namespace

StatusOr<std::vector<Device*>> PlaceGraph(const Graph& g, const DevicePool& pool,
                                          Device* default_device) {
  return PlaceGraph(g, pool.devices(), default_device, "this server");
}

StatusOr<std::vector<Device*>> PlaceGraph(const Graph& g, const std::vector<Device*>& devices,
                                          Device* default_device, std::string_view where_set) {
  const int n = g.num_nodes();
  UnionFind groups(n);
  for (int i = 0; i < n; ++i) {
    const Node& node = g.node(i);
    for (int k = 0; k < node.num_inputs(); ++k) {
      if (node.input_is_ref(k)) groups.Union(i, node.input(k).node);
    }
    auto it = node.attrs().find("_colocate_with");
    if (it != node.attrs().end() && it->second.kind() == AttrKind::kString) {
      const Node* other = g.FindNode(it->second.s());
      if (other == nullptr) {
        return InvalidArgument("node '" + node.name() + "' is to be colocated with '" +
                                   it->second.s() + "', which is not in the graph",
                               node.name());
      }
      groups.Union(i, other->id());
    }
  }
  // A StackPop runs where the StackPushes of its stack run: the values live
  // in the step's call frame of the task that pushed them.
  std::map<std::string, int> stack_of;
  for (int i = 0; i < n; ++i) {
    const Node& node = g.node(i);
    if (node.op() != "StackPush" && node.op() != "StackPop") continue;
    auto it = node.attrs().find("stack_name");
    if (it == node.attrs().end() || it->second.kind() != AttrKind::kString) continue;
    auto [owner, added] = stack_of.emplace(it->second.s(), i);
    if (!added) groups.Union(i, owner->second);
  }

  // Merge each group's requests; remember who asked, for error messages.
  std::map<int, DeviceName> spec;
  std::map<int, int> asked_by;
  for (int i = 0; i < n; ++i) {
    const Node& node = g.node(i);
    int root = groups.Find(i);
    DeviceName& s = spec[root];
    if (node.requested_device().empty()) continue;
    StatusOr<DeviceName> req = DeviceName::Parse(node.requested_device());
    if (!req.ok()) {
      return InvalidArgument("node '" + node.name() + "': " + req.status().message(), node.name());
    }
    DeviceName merged = s;
    if (!merged.MergeFrom(*req).ok()) {
      const Node& other = g.node(asked_by[root]);
      return InvalidArgument("node '" + node.name() + "' asks for device '" +
                                 node.requested_device() + "' but must run with '" +
                                 other.name() + "', which asks for '" +
                                 other.requested_device() + "'",
                             node.name());
    }
    s = merged;
    asked_by[root] = i;
  }

  std::vector<Device*> out(n, nullptr);
  std::map<int, Device*> chosen;
  KernelRegistry* kernels = KernelRegistry::Global();
  for (int i = 0; i < n; ++i) {
    int root = groups.Find(i);
    if (chosen.count(root)) {
      out[i] = chosen[root];
      continue;
    }
    const DeviceName& s = spec[root];
    std::vector<Device*> candidates;
    for (Device* d : devices) {
      if (d->parsed_name().Matches(s)) candidates.push_back(d);
    }
    if (candidates.empty()) {
      const Node& who = asked_by.count(root) ? g.node(asked_by[root]) : g.node(i);
      return InvalidArgument("node '" + who.name() + "' asks for device '" + s.ToString() +
                                 "', and no device of " + std::string(where_set) + " matches it",
                             who.name());
    }
    // Prefer the default device when it qualifies.
    if (default_device != nullptr) {
      for (size_t c = 0; c < candidates.size(); ++c) {
        if (candidates[c] == default_device) std::swap(candidates[0], candidates[c]);
      }
    }
    Device* pick = nullptr;
    std::string missing;
    for (Device* d : candidates) {
      bool all = true;
      for (int j = 0; j < n && all; ++j) {
        if (groups.Find(j) == root && !kernels->HasKernel(g.node(j).def(), d->type())) {
          all = false;
          missing = g.node(j).name();
        }
      }
      if (all) {
        pick = d;
        break;
      }
    }
    if (pick == nullptr) {
      const Node& m = *g.FindNode(missing);
      std::string types;
      for (const auto& [name, v] : m.attrs()) {
        if (v.kind() == AttrKind::kType) {
          types += (types.empty() ? " with " : ", ") + name + "=" +
                   std::string(DataTypeName(v.type()));
        }
      }
      std::string where = s.ToString().empty() ? "on any device of " + std::string(where_set)
                                               : "on any device matching '" + s.ToString() + "'";
      std::string have;
      for (const std::string& t : kernels->DeviceTypesFor(m.op())) {
        have += (have.empty() ? "" : ", ") + t;
      }
      return InvalidArgument("node '" + m.name() + "': no kernel for op " + m.op() + types + " " +
                                 where + " (" + m.op() + " has kernels for: " +
                                 (have.empty() ? "no device type" : have) + ")",
                             m.name());
    }
    chosen[root] = pick;
    out[i] = pick;
  }
  return out;
}

namespace {

// The LoopCond of each frame (by frame index; -1 where a frame has none or
// several, which cannot be split).
std::vector<int> LoopCondOfFrames(const Graph& g, const ControlFlowInfo& cf) {
  std::vector<int> cond(cf.frames.size(), -1);
  std::vector<int> count(cf.frames.size(), 0);
  for (int i = 0; i < g.num_nodes(); ++i) {
    if (g.node(i).op() != "LoopCond") continue;
    const int f = cf.frame_of[i];
    if (++count[f] == 1) cond[f] = i;
  }
  for (size_t f = 0; f < cond.size(); ++f) {
    if (count[f] > 1) cond[f] = -1;
  }
  return cond;
}

// By node id: whether the node can run in the first iteration of its loop
// only, because it reads (through nodes other than a Merge) the value of a
// non-constant Enter, which only iteration 0 receives.
std::vector<bool> FirstIterationOnly(const Graph& g, const ControlFlowInfo& cf) {
  std::vector<bool> first(g.num_nodes(), false);
  auto from_first = [&](int j) {
    const Node& in = g.node(j);
    if (in.op() == "Enter") return !in.attrs().at("is_constant").b();
    return bool(first[j]);
  };
  for (int id : g.topo_order()) {
    const Node& n = g.node(id);
    if (cf.frame_of[id] == 0 || n.op() == "Enter") continue;
    if (n.op() == "Merge") {
      bool all = n.num_inputs() > 0;
      for (const Endpoint& e : n.inputs()) {
        all = all && g.node(e.node).op() != "NextIteration" && from_first(e.node);
      }
      first[id] = all;
      continue;
    }
    bool any = false;
    for (const Endpoint& e : n.inputs()) any = any || from_first(e.node);
    for (int c : n.control_inputs()) any = any || from_first(c);
    first[id] = any;
  }
  return first;
}

}  // namespace

StatusOr<std::vector<GraphPartition>> PartitionGraph(const Graph& g,
                                                     const std::vector<Device*>& placement,
                                                     uint64_t local_incarnation) {
  if (local_incarnation == 0) local_incarnation = ProcessIncarnation();
  std::vector<Device*> devices;
  std::map<Device*, int> index;
  for (int i = 0; i < g.num_nodes(); ++i) {
    if (!index.count(placement[i])) {
      index[placement[i]] = int(devices.size());
      devices.push_back(placement[i]);
    }
  }
  std::vector<GraphPartition> parts(devices.size());
  for (size_t p = 0; p < devices.size(); ++p) parts[p].device = devices[p];

  // Where each argument lives; only looked up when a device has its own
  // memory (empty otherwise, and for the nodes of host-memory devices).
  bool all_host = true;
  for (Device* d : devices) all_host = all_host && d->memory_type() == MemoryType::kHost;
  std::vector<MemoryTypes> mem;
  auto out_on_host = [&](int node, int out) {
    return mem.empty() || mem[node].outputs.empty() || mem[node].outputs[out] == MemoryType::kHost;
  };
  auto in_on_host = [&](int node, int in) {
    return mem.empty() || mem[node].inputs.empty() || mem[node].inputs[in] == MemoryType::kHost;
  };
  bool crosses_memory = false;  // an edge within one device changes memory
  if (!all_host) {
    mem.resize(g.num_nodes());
    KernelRegistry* kernels = KernelRegistry::Global();
    for (int i = 0; i < g.num_nodes(); ++i) {
      const Node& n = g.node(i);
      if (placement[i]->memory_type() == MemoryType::kHost) continue;
      mem[i] = kernels->MemoryTypesFor(n.def(), n.op_def(), *placement[i], n.num_inputs(),
                                       n.num_outputs());
    }
    for (int i = 0; i < g.num_nodes(); ++i) {
      for (int k = 0; k < g.node(i).num_inputs(); ++k) {
        const Endpoint& e = g.node(i).input(k);
        if (placement[e.node] == placement[i] &&
            out_on_host(e.node, e.output) != in_on_host(i, k)) {
          crosses_memory = true;
        }
      }
    }
  }
  if (devices.size() == 1 && !crosses_memory) {
    parts[0].graph = g.ToGraphDef();
    for (NodeDef& n : parts[0].graph.nodes) n.device = devices[0]->name();
    return parts;
  }

  std::unordered_set<std::string> taken;
  auto unique = [&](std::string base) {
    while (g.FindNode(base) != nullptr || taken.count(base)) base += "_";
    taken.insert(base);
    return base;
  };
  std::vector<NodeDef> defs(g.num_nodes());
  for (int i = 0; i < g.num_nodes(); ++i) {
    defs[i] = g.node(i).def();
    defs[i].device = placement[i]->name();
    defs[i].inputs.clear();
  }

  // Adds (once) the node that copies tensor (src, out) between its device's
  // memory and the host, on that device.
  std::map<std::tuple<int, int, bool>, std::string> copies;
  auto copy_for = [&](int src, int out, bool to_host) -> std::string {
    auto key = std::make_tuple(src, out, to_host);
    auto it = copies.find(key);
    if (it != copies.end()) return it->second;
    const Node& s = g.node(src);
    std::string tensor = TensorId{s.name(), out}.ToString();
    NodeDef copy;
    copy.name = unique((to_host ? "_copy_to_host/" : "_copy_to_device/") + tensor);
    copy.op = to_host ? "_CopyToHost" : "_CopyToDevice";
    copy.inputs.push_back(tensor);
    copy.attrs["T"] = AttrValue(s.output_type(out));
    copy.device = placement[src]->name();
    copies[key] = copy.name;
    parts[index[placement[src]]].graph.nodes.push_back(std::move(copy));
    return copies[key];
  };

  // Control flow split over partitions (the paper's section 3.4, after
  // TensorFlow's graph_partition.cc): a _Recv inside a loop must run once
  // per iteration of its frame instance, including the last one, where it
  // receives the dead mark, so it takes a control input from the Merge of a
  // control-loop skeleton that its partition gets per frame:
  //   Enter(const) -> Merge -> Switch(pred) -> NextIteration -> Merge
  // whose predicate is the frame's LoopCond, received from the partition
  // that computes it each iteration (its _Send is in the frame, keyed by
  // iteration). A skeleton of a nested frame enters from the Merge of its
  // parent frame's skeleton. Edges out of an Enter or NextIteration that
  // cross partitions are cut before the node instead (a copy of it goes to
  // the consumer's partition): their values belong to another iteration
  // than the one they are computed in.
  const ControlFlowInfo* cf = g.control_flow();
  const std::vector<int> loop_cond = cf != nullptr ? LoopCondOfFrames(g, *cf) : std::vector<int>();
  const std::vector<bool> first_only =
      cf != nullptr ? FirstIterationOnly(g, *cf) : std::vector<bool>();
  Status split_error;   // the first part of the graph that cannot be split
  int current_node = 0;  // the consumer whose inputs are being cut, for errors
  auto refuse = [&](const std::string& why) {
    if (!split_error.ok()) return;
    const Node& who = g.node(current_node);
    split_error = Status(Code::kUnimplemented,
                         "node '" + who.name() + "' (" + who.op() + ") on " +
                             placement[current_node]->name() + ": " + why,
                         who.name());
  };
  std::map<std::pair<int, int>, std::string> triggers;  // (frame, partition) -> Merge
  std::function<std::string(int, int)> trigger;
  std::map<std::pair<int, int>, std::string> clones;  // (Enter/NextIteration, partition)
  std::function<std::string(int, int)> clone_for;

  // (producer tensor or control source, consumer partition, send deps, host
  // memory at the consumer) -> name of the _Recv.
  std::map<std::tuple<int, int, int, std::string, bool>, std::string> recvs;
  // Adds (once) the Send/Recv pair for tensor (src, out) into partition
  // `dst_part`, delivered in host memory when `recv_host` (which matters
  // only on a device with its own memory). `send_deps` become control
  // inputs of the _Send.
  // `frame`: the frame the _Recv lies in (its consumer's).
  std::function<std::string(int, int, int, bool, const std::vector<std::string>&, bool, int)> recv_for;
  recv_for = [&](int src, int out, int dst_part, bool control,
                 const std::vector<std::string>& send_deps, bool recv_host, int frame) -> std::string {
    std::string deps_key;
    for (const std::string& d : send_deps) deps_key += d + ",";
    auto key = std::make_tuple(src, control ? -1 : out, dst_part, deps_key, recv_host);
    auto it = recvs.find(key);
    if (it != recvs.end()) return it->second;
    const Node& s = g.node(src);
    Device* sd = placement[src];
    Device* dd = devices[dst_part];
    const bool sd_own = sd->memory_type() != MemoryType::kHost;
    const bool dd_own = dd->memory_type() != MemoryType::kHost;
    std::string tensor = TensorId{s.name(), out}.ToString();
    DataType dtype = s.num_outputs() > out ? s.output_type(out) : DataType::kBool;
    PartialShape shape = s.num_outputs() > out ? s.output_shape(out) : PartialShape();
    bool send_host = control || out_on_host(src, out);
    if (control) {
      // A dummy scalar that exists after `src` ran (in host memory, so that
      // no copy is made for it).
      NodeDef dummy;
      dummy.name = unique("_ctrl/" + s.name());
      dummy.op = sd_own ? "_HostConst" : "Const";
      dummy.attrs["value"] = AttrValue(Tensor::Scalar<bool>(true));
      dummy.attrs["dtype"] = AttrValue(DataType::kBool);
      dummy.inputs.push_back("^" + s.name());
      dummy.device = sd->name();
      tensor = dummy.name;
      dtype = DataType::kBool;
      shape = PartialShape(std::vector<int64_t>{});
      parts[index[sd]].graph.nodes.push_back(std::move(dummy));
    }
    std::string rendezvous_key =
        CreateRendezvousKey(sd->name(), IncarnationOf(sd, local_incarnation), dd->name(), tensor);
    // The same tensor may go to one accelerator twice: in its memory and in
    // host memory.
    if (dd_own && recv_host) rendezvous_key += ";host";
    // Node names allow no ':': output k of a node is "node_k" in theirs.
    std::string name_part = tensor;
    std::replace(name_part.begin(), name_part.end(), ':', '_');
    NodeDef send;
    send.name = unique("_send/" + name_part + "/" + std::to_string(dst_part));
    send.op = "_Send";
    send.inputs.push_back(tensor);
    for (const std::string& d : send_deps) send.inputs.push_back("^" + d);
    send.attrs["T"] = AttrValue(dtype);
    send.attrs["key"] = AttrValue(rendezvous_key);
    send.attrs["send_device"] = AttrValue(sd->name());
    send.attrs["recv_device"] = AttrValue(dd->name());
    if (sd_own && send_host) send.attrs["host_memory"] = AttrValue(true);
    send.device = sd->name();
    parts[index[sd]].graph.nodes.push_back(std::move(send));
    NodeDef recv;
    recv.name = unique("_recv/" + name_part + "/" + std::to_string(dst_part));
    recv.op = "_Recv";
    recv.attrs["T"] = AttrValue(dtype);
    recv.attrs["key"] = AttrValue(rendezvous_key);
    recv.attrs["send_device"] = AttrValue(sd->name());
    recv.attrs["recv_device"] = AttrValue(dd->name());
    if (dd_own && recv_host) recv.attrs["host_memory"] = AttrValue(true);
    recv.attrs["shape"] = AttrValue(shape);
    recv.device = dd->name();
    recvs[key] = recv.name;
    if (cf != nullptr) {
      // It may receive the dead mark: its partition runs with frames.
      recv.attrs["_maybe_dead"] = AttrValue(true);
      if (frame != 0 && first_only[src]) {
        refuse("reads '" + s.name() + "' on " + sd->name() + " inside loop '" + cf->frames[frame].name +
               "', and '" + s.name() + "' runs in the loop's first iteration only (it reads the "
               "Enter of a loop variable, not its Merge), while the receiving side runs every "
               "iteration; place the two on one device");
      }
      if (frame != 0) {
        const std::string merge = trigger(frame, dst_part);
        if (!merge.empty()) recv.inputs.push_back("^" + merge);
      }
    }
    parts[dst_part].graph.nodes.push_back(std::move(recv));
    return recvs[key];
  };

  auto frame_of = [&](int node) { return cf != nullptr ? cf->frame_of[node] : 0; };
  auto moves_frame = [&](int node) {
    if (cf == nullptr) return false;
    const std::string& op = g.node(node).op();
    return op == "Enter" || op == "NextIteration";
  };

  trigger = [&](int f, int p) -> std::string {
    auto it = triggers.find({f, p});
    if (it != triggers.end()) return it->second;
    const ControlFlowInfo::Frame& frame = cf->frames[f];
    Device* d = devices[p];
    if (d->memory_type() != MemoryType::kHost) {
      refuse("lies in loop '" + frame.name + "', split across devices onto " + d->name() +
             ", a device with its own memory: a loop split across devices runs on host-memory "
             "devices only; place the loop's nodes on one device");
      return std::string();
    }
    if (loop_cond[f] < 0) {
      refuse("lies in loop '" + frame.name + "', split across devices, which has no single "
             "LoopCond to drive its other partitions; place the loop's nodes on one device");
      return std::string();
    }
    const std::string base = "_cf/" + frame.name + "/" + std::to_string(p);
    NodeDef start;
    start.name = unique(base + "/start");
    start.op = "Const";
    start.attrs["value"] = AttrValue(Tensor::Scalar<bool>(true));
    start.attrs["dtype"] = AttrValue(DataType::kBool);
    start.device = d->name();
    if (frame.parent != 0) {
      const std::string outer = trigger(frame.parent, p);
      if (outer.empty()) return std::string();
      start.inputs.push_back("^" + outer);
    }
    NodeDef enter;
    enter.name = unique(base + "/enter");
    enter.op = "Enter";
    enter.inputs.push_back(start.name);
    enter.attrs["T"] = AttrValue(DataType::kBool);
    enter.attrs["frame_name"] = AttrValue(frame.name);
    enter.attrs["is_constant"] = AttrValue(false);
    enter.attrs["parallel_iterations"] = AttrValue(int64_t(frame.parallel_iterations));
    enter.device = d->name();
    NodeDef merge;
    merge.name = unique(base + "/merge");
    NodeDef sw;
    sw.name = unique(base + "/switch");
    NodeDef next;
    next.name = unique(base + "/next_iteration");
    merge.op = "Merge";
    merge.inputs = {enter.name, next.name};
    merge.attrs["T"] = AttrValue(DataType::kBool);
    merge.attrs["N"] = AttrValue(int64_t(2));
    merge.device = d->name();
    triggers[{f, p}] = merge.name;  // before the predicate's _Recv, which runs after it
    const int cond = loop_cond[f];
    std::string pred = placement[cond] == d
                           ? g.node(cond).name()
                           : recv_for(cond, 0, p, false, {}, true, f);
    sw.op = "Switch";
    sw.inputs = {merge.name, pred};
    sw.attrs["T"] = AttrValue(DataType::kBool);
    sw.device = d->name();
    next.op = "NextIteration";
    next.inputs = {sw.name + ":1"};
    next.attrs["T"] = AttrValue(DataType::kBool);
    next.device = d->name();
    for (NodeDef* n : {&start, &enter, &merge, &sw, &next}) parts[p].graph.nodes.push_back(std::move(*n));
    return triggers[{f, p}];
  };

  // Input k of node `dst` as partition p sees it.
  std::function<std::string(int, int, int)> input_in = [&](int dst, int k, int p) -> std::string {
    const Endpoint& e = g.node(dst).input(k);
    if (placement[e.node] == devices[p]) return TensorId{g.node(e.node).name(), e.output}.ToString();
    if (moves_frame(e.node)) return clone_for(e.node, p);
    return recv_for(e.node, e.output, p, false, {}, in_on_host(dst, k), frame_of(dst));
  };

  clone_for = [&](int src, int p) -> std::string {
    auto it = clones.find({src, p});
    if (it != clones.end()) return it->second;
    const Node& s = g.node(src);
    if (devices[p]->memory_type() != MemoryType::kHost || placement[src]->memory_type() != MemoryType::kHost) {
      refuse("reads '" + s.name() + "' (" + s.op() + ") of another device: a loop split across "
             "devices runs on host-memory devices only; place the loop's nodes on one device");
      return s.name();
    }
    NodeDef c = s.def();
    c.name = unique(s.name() + "/_part" + std::to_string(p));
    c.device = devices[p]->name();
    c.inputs.clear();
    for (int k = 0; k < s.num_inputs(); ++k) c.inputs.push_back(input_in(src, k, p));
    for (int ctl : s.control_inputs()) {
      c.inputs.push_back("^" + (placement[ctl] == devices[p]
                                    ? g.node(ctl).name()
                                    : moves_frame(ctl) ? clone_for(ctl, p)
                                                       : recv_for(ctl, 0, p, true, {}, true, frame_of(src))));
    }
    clones[{src, p}] = c.name;
    parts[p].graph.nodes.push_back(std::move(c));
    return clones[{src, p}];
  };

  // A partition that holds nodes of a split loop, other than the one that
  // computes its LoopCond, gets the loop's skeleton even without a _Recv
  // inside the loop: its nodes that read only loop invariants (constant
  // Enters) run once per iteration of the frame instance, which only the
  // skeleton makes iterate in step with the loop.
  if (cf != nullptr) {
    for (size_t f = 1; f < cf->frames.size(); ++f) {
      const std::vector<int>& nodes = cf->frames[f].nodes;
      if (nodes.empty()) continue;
      for (int id : nodes) {
        if (loop_cond[f] < 0) {
          if (placement[id] == placement[nodes[0]]) continue;
        } else if (placement[id] == placement[loop_cond[f]]) {
          continue;
        }
        current_node = id;
        trigger(int(f), index[placement[id]]);
        if (loop_cond[f] < 0) break;
      }
    }
  }

  for (int i = 0; i < g.num_nodes(); ++i) {
    const Node& n = g.node(i);
    int my = index[placement[i]];
    current_node = i;
    for (int k = 0; k < n.num_inputs(); ++k) {
      const Endpoint& e = n.input(k);
      const bool want_host = in_on_host(i, k);
      if (placement[e.node] != placement[i] && moves_frame(e.node)) {
        defs[i].inputs.push_back(clone_for(e.node, my));
      } else if (placement[e.node] == placement[i]) {
        if (out_on_host(e.node, e.output) == want_host) {
          defs[i].inputs.push_back(TensorId{g.node(e.node).name(), e.output}.ToString());
        } else {
          defs[i].inputs.push_back(copy_for(e.node, e.output, want_host));
        }
      } else {
        // A variable is read when the _Send runs, so the consumer's control
        // dependencies must hold for the _Send too.
        std::vector<std::string> deps;
        if (g.node(e.node).output_is_ref(e.output)) {
          int src_part = index[placement[e.node]];
          for (int c : n.control_inputs()) {
            deps.push_back(placement[c] == placement[e.node]
                               ? g.node(c).name()
                               : recv_for(c, 0, src_part, true, {}, true, frame_of(i)));
          }
        }
        defs[i].inputs.push_back(recv_for(e.node, e.output, my, false, deps, want_host, frame_of(i)));
      }
    }
    for (int c : n.control_inputs()) {
      if (placement[c] == placement[i]) {
        defs[i].inputs.push_back("^" + g.node(c).name());
      } else if (moves_frame(c)) {
        defs[i].inputs.push_back("^" + clone_for(c, my));
      } else {
        defs[i].inputs.push_back("^" + recv_for(c, 0, my, true, {}, true, frame_of(i)));
      }
    }
  }
  if (!split_error.ok()) return split_error;
  for (int i = 0; i < g.num_nodes(); ++i) parts[index[placement[i]]].graph.nodes.push_back(defs[i]);
  return parts;
}

}  // namespace flowstate

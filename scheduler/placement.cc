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

// Send/Recv pairs know nothing of frames and dead tensors yet (the paper's
// control-loop state machine between partitions is not built): a loop's
// nodes, and every node a Switch's output may leave dead, must share their
// neighbours' device. UNIMPLEMENTED naming the node otherwise.
Status CheckControlFlowStaysOnOneDevice(const Graph& g, const std::vector<Device*>& placement) {
  const ControlFlowInfo* cf = g.control_flow();
  if (cf == nullptr) return Status();
  std::vector<bool> may_be_dead(g.num_nodes(), false);
  for (int id : g.topo_order()) {
    const Node& n = g.node(id);
    bool dead = n.op() == "Switch";
    for (const Endpoint& e : n.inputs()) dead = dead || may_be_dead[e.node];
    for (int c : n.control_inputs()) dead = dead || may_be_dead[c];
    may_be_dead[id] = dead;
  }
  for (int i = 0; i < g.num_nodes(); ++i) {
    const Node& n = g.node(i);
    for (const OutEdge& e : n.out_edges()) {
      if (placement[e.dst] == placement[i]) continue;
      const bool in_loop = cf->frame_of[i] != 0 || cf->frame_of[e.dst] != 0;
      if (!in_loop && !may_be_dead[i]) continue;
      const Node& dst = g.node(e.dst);
      return Status(Code::kUnimplemented,
                    "node '" + dst.name() + "' (" + dst.op() + ") on " + placement[e.dst]->name() +
                        " reads '" + n.name() + "' on " + placement[i]->name() + ", " +
                        (in_loop ? "inside a loop" : "downstream of a Switch (maybe dead)") +
                        ": control flow across devices is not supported yet; place the "
                        "loop or conditional and what reads it on one device",
                    dst.name());
    }
  }
  return Status();
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
  if (devices.size() > 1) FS_RETURN_IF_ERROR(CheckControlFlowStaysOnOneDevice(g, placement));
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

  // (producer tensor or control source, consumer partition, send deps, host
  // memory at the consumer) -> name of the _Recv.
  std::map<std::tuple<int, int, int, std::string, bool>, std::string> recvs;
  // Adds (once) the Send/Recv pair for tensor (src, out) into partition
  // `dst_part`, delivered in host memory when `recv_host` (which matters
  // only on a device with its own memory). `send_deps` become control
  // inputs of the _Send.
  std::function<std::string(int, int, int, bool, const std::vector<std::string>&, bool)> recv_for;
  recv_for = [&](int src, int out, int dst_part, bool control,
                 const std::vector<std::string>& send_deps, bool recv_host) -> std::string {
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
    parts[dst_part].graph.nodes.push_back(std::move(recv));
    return recvs[key];
  };

  for (int i = 0; i < g.num_nodes(); ++i) {
    const Node& n = g.node(i);
    int my = index[placement[i]];
    for (int k = 0; k < n.num_inputs(); ++k) {
      const Endpoint& e = n.input(k);
      const bool want_host = in_on_host(i, k);
      if (placement[e.node] == placement[i]) {
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
                               : recv_for(c, 0, src_part, true, {}, true));
          }
        }
        defs[i].inputs.push_back(recv_for(e.node, e.output, my, false, deps, want_host));
      }
    }
    for (int c : n.control_inputs()) {
      if (placement[c] == placement[i]) {
        defs[i].inputs.push_back("^" + g.node(c).name());
      } else {
        defs[i].inputs.push_back("^" + recv_for(c, 0, my, true, {}, true));
      }
    }
  }
  for (int i = 0; i < g.num_nodes(); ++i) parts[index[placement[i]]].graph.nodes.push_back(defs[i]);
  return parts;
}

}  // namespace flowstate

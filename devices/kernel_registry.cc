#include "devices/kernel_registry.h"

#include <algorithm>
#include <set>

#include "devices/cpu/register_kernels.h"
#include "graph/mutex.h"

namespace flowstate {

KernelRegistry* KernelRegistry::Global() {
  static KernelRegistry* r = [] {
    auto* reg = new KernelRegistry();
    internal::RegisterCpuKernels(reg);
    return reg;
  }();
  return r;
}

static std::string Describe(const KernelDef& d) {
  std::string s = d.op + " on " + d.device_type;
  for (const auto& [attr, t] : d.constraints) s += " " + attr + "=" + std::string(DataTypeName(t));
  return s;
}

namespace {

bool HasArg(const std::vector<ArgDef>& args, const std::string& name) {
  for (const ArgDef& a : args) {
    if (a.name == name) return true;
  }
  return false;
}

// How many tensors argument `a` of `node` stands for (attrs resolved).
int ArgCount(const ArgDef& a, const NodeDef& node) {
  if (!a.number_attr.empty()) {
    auto it = node.attrs.find(a.number_attr);
    return it != node.attrs.end() && it->second.kind() == AttrKind::kInt ? int(it->second.i()) : 0;
  }
  if (!a.type_list_attr.empty()) {
    auto it = node.attrs.find(a.type_list_attr);
    return it != node.attrs.end() && it->second.kind() == AttrKind::kTypeList
               ? int(it->second.types().size())
               : 0;
  }
  return 1;
}

// kDevice for every tensor, then kHost for those of the host-memory args.
std::vector<MemoryType> ArgMemory(const std::vector<ArgDef>& args, const NodeDef& node, int n,
                                  const std::vector<std::string>& host_args) {
  std::vector<MemoryType> out(std::max(n, 0), MemoryType::kDevice);
  int pos = 0;
  for (const ArgDef& a : args) {
    int count = ArgCount(a, node);
    bool host = std::find(host_args.begin(), host_args.end(), a.name) != host_args.end();
    for (int k = 0; k < count && pos < n; ++k, ++pos) {
      if (host) out[pos] = MemoryType::kHost;
    }
  }
  return out;
}

}  // namespace

Status KernelRegistry::Register(const KernelDef& def, KernelFactory factory) {
  if (const OpDef* op = OpRegistry::Global()->Find(def.op); op != nullptr) {
    for (const std::string& arg : def.host_memory_args) {
      if (!HasArg(op->inputs, arg) && !HasArg(op->outputs, arg)) {
        return InvalidArgument("kernel " + Describe(def) + ": HostMemory(\"" + arg +
                               "\") names no input or output of " + def.op);
      }
    }
  }
  MutexLock l(mu_);
  auto range = kernels_.equal_range(def.op);
  for (auto it = range.first; it != range.second; ++it) {
    const KernelDef& o = it->second.def;
    if (o.device_type == def.device_type && o.constraints == def.constraints) {
      return AlreadyExists("kernel " + Describe(def) + " is already registered");
    }
  }
  kernels_.emplace(def.op, Entry{def, std::move(factory)});
  return Status();
}

const KernelRegistry::Entry* KernelRegistry::Find(const NodeDef& node,
                                                  const std::string& device_type) const {
  MutexLock l(mu_);
  auto range = kernels_.equal_range(node.op);
  for (auto it = range.first; it != range.second; ++it) {
    const KernelDef& d = it->second.def;
    if (d.device_type != device_type) continue;
    bool ok = true;
    for (const auto& [attr, t] : d.constraints) {
      auto a = node.attrs.find(attr);
      if (a == node.attrs.end() || a->second.kind() != AttrKind::kType || a->second.type() != t) {
        ok = false;
        break;
      }
    }
    if (ok) return &it->second;
  }
  return nullptr;
}

bool KernelRegistry::HasKernel(const NodeDef& node, const std::string& device_type) const {
  return Find(node, device_type) != nullptr;
}

const KernelDef* KernelRegistry::FindKernelDef(const NodeDef& node,
                                              const std::string& device_type) const {
  const Entry* e = Find(node, device_type);
  return e ? &e->def : nullptr;
}

StatusOr<std::unique_ptr<OpKernel>> KernelRegistry::CreateKernel(
    const NodeDef& node, const OpDef& op, Device* device, ResourceMgr* resource_mgr,
    std::vector<DataType> input_types, std::vector<DataType> output_types) const {
  const Entry* e = Find(node, device->type());
  if (e == nullptr) {
    std::string types;
    for (const auto& [name, v] : node.attrs) {
      if (v.kind() == AttrKind::kType) {
        types += (types.empty() ? "" : ", ") + name + "=" + std::string(DataTypeName(v.type()));
      }
    }
    return NotFound("node '" + node.name + "': no " + device->type() + " kernel for op " +
                        node.op + (types.empty() ? "" : " with " + types),
                    node.name);
  }
  OpKernelConstruction c(&node, &op, device, resource_mgr, std::move(input_types),
                         std::move(output_types));
  if (device->memory_type() != MemoryType::kHost) {
    c.set_memory_types(ArgMemory(op.inputs, node, c.num_inputs(), e->def.host_memory_args),
                       ArgMemory(op.outputs, node, c.num_outputs(), e->def.host_memory_args));
  }
  std::unique_ptr<OpKernel> k = e->factory(&c);
  if (!c.status().ok()) {
    const Status& s = c.status();
    return Status(s.code(), "node '" + node.name + "' (" + node.op + "): " + s.message(),
                  node.name);
  }
  return k;
}

MemoryTypes KernelRegistry::MemoryTypesFor(const NodeDef& node, const OpDef& op,
                                           const Device& device, int num_inputs,
                                           int num_outputs) const {
  MemoryTypes m;
  if (device.memory_type() == MemoryType::kHost) {
    m.inputs.assign(num_inputs, MemoryType::kHost);
    m.outputs.assign(num_outputs, MemoryType::kHost);
    return m;
  }
  const Entry* e = Find(node, device.type());
  static const std::vector<std::string> kNone;
  const std::vector<std::string>& host = e != nullptr ? e->def.host_memory_args : kNone;
  m.inputs = ArgMemory(op.inputs, node, num_inputs, host);
  m.outputs = ArgMemory(op.outputs, node, num_outputs, host);
  return m;
}

std::vector<KernelDef> KernelRegistry::ListKernels() const {
  MutexLock l(mu_);
  std::vector<KernelDef> out;
  for (const auto& [op, e] : kernels_) out.push_back(e.def);
  std::stable_sort(out.begin(), out.end(), [](const KernelDef& a, const KernelDef& b) {
    return std::tie(a.op, a.device_type) < std::tie(b.op, b.device_type);
  });
  return out;
}

std::vector<std::string> KernelRegistry::DeviceTypesFor(const std::string& op) const {
  MutexLock l(mu_);
  std::set<std::string> types;
  auto range = kernels_.equal_range(op);
  for (auto it = range.first; it != range.second; ++it) types.insert(it->second.def.device_type);
  return {types.begin(), types.end()};
}

}  // namespace flowstate

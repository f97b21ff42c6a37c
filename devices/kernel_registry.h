// The kernel registry: which OpKernel implements an op on a device type for
// given dtypes. Keyed by (op, device type, type constraints), as in
// TensorFlow's REGISTER_KERNEL_BUILDER:
//
//   r->Register(KernelDef("Add").Device("CPU").TypeConstraint("T", DataType::kFloat32),
//               MakeKernel<AddOp<float>>);
//
// A kernel for a device with its own memory (an accelerator) may keep some
// arguments in host memory — shapes, axes, sizes it reads on the host — as
// TensorFlow's HostMemory does:
//
//   KernelDef("Reshape").Device("GPU").TypeConstraint("T", DataType::kFloat32)
//       .HostMemory("shape")
//
// The partitioner then delivers those inputs in host memory and the kernel's
// allocate_output puts those outputs there (OpKernelContext). On a CPU every
// argument is in host memory anyway.
//
// KernelRegistry::Global() holds the kernels of devices/ (registered on
// first use); other layers and device types add theirs through their own
// registration function (state::RegisterKernels() for instance), which the
// runtime calls before building kernels. Registration is thread-safe;
// lookups after it are lock-free reads of a stable map.
#ifndef FLOWSTATE_DEVICES_KERNEL_REGISTRY_H_
#define FLOWSTATE_DEVICES_KERNEL_REGISTRY_H_

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "devices/op_kernel.h"
#include "graph/mutex.h"

namespace flowstate {

using KernelFactory = std::function<std::unique_ptr<OpKernel>(OpKernelConstruction*)>;

template <typename K>
std::unique_ptr<OpKernel> MakeKernel(OpKernelConstruction* c) {
  return std::make_unique<K>(c);
}

struct KernelDef {
  explicit KernelDef(std::string op_name) : op(std::move(op_name)) {}
  KernelDef& Device(std::string type) {
    device_type = std::move(type);
    return *this;
  }
  KernelDef& TypeConstraint(std::string attr, DataType t) {
    constraints.emplace_back(std::move(attr), t);
    return *this;
  }
  // The input or output argument `arg` (its name in the OpDef; every tensor
  // of a list argument) stays in host memory.
  KernelDef& HostMemory(std::string arg) {
    host_memory_args.push_back(std::move(arg));
    return *this;
  }
  std::string op;
  std::string device_type = "CPU";
  std::vector<std::pair<std::string, DataType>> constraints;
  std::vector<std::string> host_memory_args;
};

// Where each input and output of one node's kernel lives.
struct MemoryTypes {
  std::vector<MemoryType> inputs;
  std::vector<MemoryType> outputs;
};

class KernelRegistry {
 public:
  // The registry with every kernel of devices/ registered.
  static KernelRegistry* Global();

  // ALREADY_EXISTS for an identical (op, device, constraints) key;
  // INVALID_ARGUMENT for a HostMemory name that is no argument of the op
  // (when the op is in OpRegistry::Global()).
  Status Register(const KernelDef& def, KernelFactory factory);

  // Builds the kernel for `node` (attrs resolved) on `device`. NOT_FOUND
  // naming the node, op, device type and dtypes when none is registered;
  // the construction error when the kernel rejects its attributes.
  StatusOr<std::unique_ptr<OpKernel>> CreateKernel(const NodeDef& node, const OpDef& op,
                                                   Device* device, ResourceMgr* resource_mgr,
                                                   std::vector<DataType> input_types,
                                                   std::vector<DataType> output_types) const;

  bool HasKernel(const NodeDef& node, const std::string& device_type) const;
  // The registration that CreateKernel would use, or nullptr.
  const KernelDef* FindKernelDef(const NodeDef& node, const std::string& device_type) const;
  // The memory of each of `node`'s num_inputs inputs and num_outputs outputs
  // (attrs resolved) on `device`: all kHost on a host-memory device; on
  // another, kDevice except the arguments its kernel declares HostMemory
  // (all kDevice when it has no kernel there).
  MemoryTypes MemoryTypesFor(const NodeDef& node, const OpDef& op, const Device& device,
                             int num_inputs, int num_outputs) const;
  // Every registration, sorted by op then device.
  std::vector<KernelDef> ListKernels() const;
  // Device types that have a kernel for `op` (any dtype).
  std::vector<std::string> DeviceTypesFor(const std::string& op) const;

 private:
  struct Entry {
    KernelDef def;
    KernelFactory factory;
  };
  const Entry* Find(const NodeDef& node, const std::string& device_type) const;

  mutable Mutex mu_;
  std::multimap<std::string, Entry> kernels_;  // by op name
};

}  // namespace flowstate

#endif  // FLOWSTATE_DEVICES_KERNEL_REGISTRY_H_

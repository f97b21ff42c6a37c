// TensorStore: where the `Save` and `Restore` graph ops (the paper's
// user-level checkpointing) write and read named tensors.
//
// state/ only declares the interface; checkpoints/ implements it on the
// server's RocksDB store (checkpoints::NewTensorStore), tests may implement
// it in memory. Whoever creates a session installs one in the session's
// ResourceMgr with SetTensorStore(); the Save/Restore kernels find it there
// when they are built (FAILED_PRECONDITION naming the node when none is
// installed). A prefix names one saved set of tensors, like the file prefix
// of TensorFlow's Save: writing a prefix replaces everything stored under it.
//
// Implementations must be thread-safe (steps run concurrently). The store is
// shared (std::shared_ptr) between the ResourceMgr and its creator.
#ifndef FLOWSTATE_STATE_TENSOR_STORE_H_
#define FLOWSTATE_STATE_TENSOR_STORE_H_

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "graph/status.h"
#include "graph/tensor.h"
#include "state/resource_mgr.h"

namespace flowstate {

class TensorStore {
 public:
  virtual ~TensorStore() = default;
  // Replaces everything stored under `prefix` with `tensors` (name, value),
  // atomically and durably. INVALID_ARGUMENT for an empty or duplicate name.
  virtual Status Write(const std::string& prefix,
                       const std::vector<std::pair<std::string, Tensor>>& tensors) = 0;
  // NOT_FOUND naming prefix and name when absent; DATA_LOSS when the stored
  // record fails its checksum.
  virtual StatusOr<Tensor> Read(const std::string& prefix, const std::string& name) = 0;
};

// The ResourceMgr entry holding a session's TensorStore.
class TensorStoreResource final : public ResourceBase {
 public:
  explicit TensorStoreResource(std::shared_ptr<TensorStore> store) : store_(std::move(store)) {}
  const std::shared_ptr<TensorStore>& store() const { return store_; }
  std::string DebugString() const override { return "TensorStore"; }

 private:
  std::shared_ptr<TensorStore> store_;
};

// Where the resource lives: container "_flowstate", name "tensor_store".
inline constexpr const char* kTensorStoreContainer = "_flowstate";
inline constexpr const char* kTensorStoreName = "tensor_store";

// Installs `store` (replacing any earlier one). REQUIRES: rm, store non-null.
Status SetTensorStore(ResourceMgr* rm, std::shared_ptr<TensorStore> store);
// FAILED_PRECONDITION when none is installed.
StatusOr<std::shared_ptr<TensorStore>> GetTensorStore(ResourceMgr* rm);

}  // namespace flowstate

#endif  // FLOWSTATE_STATE_TENSOR_STORE_H_

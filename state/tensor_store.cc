#include "state/tensor_store.h"

namespace flowstate {

Status SetTensorStore(ResourceMgr* rm, std::shared_ptr<TensorStore> store) {
  if (rm == nullptr || store == nullptr) return InvalidArgument("SetTensorStore needs a resource manager and a store");
  (void)rm->Delete(kTensorStoreContainer, kTensorStoreName);  // NOT_FOUND when first set
  auto r = rm->LookupOrCreate<TensorStoreResource>(
      kTensorStoreContainer, kTensorStoreName,
      [&]() -> StatusOr<std::shared_ptr<TensorStoreResource>> {
        return std::make_shared<TensorStoreResource>(store);
      });
  return r.status();
}

StatusOr<std::shared_ptr<TensorStore>> GetTensorStore(ResourceMgr* rm) {
  if (rm == nullptr) return FailedPrecondition("Save/Restore need a session's resource manager");
  auto r = rm->Lookup<TensorStoreResource>(kTensorStoreContainer, kTensorStoreName);
  if (!r.ok()) {
    return FailedPrecondition(
        "no tensor store is installed in this session (Save/Restore need one: "
        "SetTensorStore in state/tensor_store.h; the server installs its RocksDB store)");
  }
  return (*r)->store();
}

}  // namespace flowstate

// ModelRegistry: the ONNX models clients upload (POST /v1/models), kept for
// the jobs and sessions that name them by id ("model": {"onnx": "model-3"}).
//
// An upload is checked before anything is stored: it must be at most
// max_model_bytes and import (api/onnx/onnx_import.h), else
// INVALID_ARGUMENT (the importer's message, naming the node, field or
// opset) or RESOURCE_EXHAUSTED (naming limits.max_model_bytes or
// limits.max_models). With a Store, a model's bytes and the registry's
// index (ids, names, inputs and outputs) are records of its meta column
// family ("models/bytes/<id>", "models/index", written synchronously, bytes
// first), so models outlive restarts; without one they live in memory.
//
// Thread-safe: one mutex guards the index (and the bytes without a store);
// imports run outside it.
#ifndef FLOWSTATE_JOBS_MODEL_REGISTRY_H_
#define FLOWSTATE_JOBS_MODEL_REGISTRY_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "api/views.h"
#include "graph/mutex.h"
#include "graph/status.h"

namespace flowstate {

namespace checkpoints {
class Store;
}

struct ModelRegistryOptions {
  checkpoints::Store* store = nullptr;  // not owned; null: in memory
  int64_t max_model_bytes = int64_t{64} << 20;  // limits.max_model_bytes
  int max_models = 100;                         // limits.max_models
};

class ModelRegistry {
 public:
  // Reads the index back from the store (DATA_LOSS when it is damaged).
  static StatusOr<std::unique_ptr<ModelRegistry>> Open(const ModelRegistryOptions& options);

  StatusOr<ModelInfo> Upload(const std::string& bytes, const std::string& name);
  StatusOr<ModelInfo> Get(const std::string& id) const;  // NOT_FOUND
  std::vector<ModelInfo> List() const;                   // by id
  StatusOr<std::string> Read(const std::string& id) const;  // the bytes; NOT_FOUND
  Status Delete(const std::string& id);                     // NOT_FOUND

 private:
  explicit ModelRegistry(const ModelRegistryOptions& o) : options_(o) {}
  Status WriteIndexLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const ModelRegistryOptions options_;
  mutable Mutex mu_;
  std::map<std::string, ModelInfo> models_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::string> bytes_ ABSL_GUARDED_BY(mu_);  // without a store
  int64_t next_id_ ABSL_GUARDED_BY(mu_) = 1;
};

}  // namespace flowstate

#endif  // FLOWSTATE_JOBS_MODEL_REGISTRY_H_

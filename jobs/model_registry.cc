#include "jobs/model_registry.h"

#include <nlohmann/json.hpp>

#include <chrono>

#include "api/onnx/onnx_import.h"
#include "api/views_json.h"
#include "checkpoints/store.h"

namespace flowstate {
namespace {

using Json = nlohmann::json;
using checkpoints::Store;

constexpr char kIndexKey[] = "models/index";
std::string BytesKey(const std::string& id) { return "models/bytes/" + id; }

double NowSeconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

ModelInfo::Tensor TensorOf(const OnnxTensorInfo& t) {
  ModelInfo::Tensor v;
  v.name = t.onnx_name;
  v.dtype = std::string(DataTypeName(t.dtype));
  v.rank_known = t.shape.rank_known();
  if (v.rank_known) v.shape = t.shape.dims();
  return v;
}

}  // namespace

StatusOr<std::unique_ptr<ModelRegistry>> ModelRegistry::Open(const ModelRegistryOptions& options) {
  std::unique_ptr<ModelRegistry> r(new ModelRegistry(options));
  if (options.store == nullptr) return r;
  StatusOr<std::string> text = options.store->GetRecord(Store::Kind::kMeta, kIndexKey);
  if (!text.ok() && text.status().code() == Code::kNotFound) return r;
  if (!text.ok()) return text.status().WithPrefix("reading the model index");
  Json j = Json::parse(*text, nullptr, false);
  if (j.is_discarded() || !j.is_object() || !j.contains("next") || !j.contains("models")) {
    return DataLoss("the model index (" + std::string(kIndexKey) + ") is damaged");
  }
  MutexLock l(r->mu_);
  r->next_id_ = j["next"].get<int64_t>();
  for (const Json& m : j["models"]) {
    StatusOr<ModelInfo> info = ModelInfoFromJson(m.dump());
    if (!info.ok()) return DataLoss("the model index is damaged: " + info.status().message());
    r->models_[info->id] = std::move(info).value();
  }
  return r;
}

Status ModelRegistry::WriteIndexLocked() {
  if (options_.store == nullptr) return Status();
  Json list = Json::array();
  for (const auto& [id, m] : models_) list.push_back(Json::parse(ModelInfoToJson(m)));
  Json index{{"next", next_id_}, {"models", std::move(list)}};
  return options_.store->PutRecord(Store::Kind::kMeta, kIndexKey, index.dump(), true);
}

StatusOr<ModelInfo> ModelRegistry::Upload(const std::string& bytes, const std::string& name) {
  if (int64_t(bytes.size()) > options_.max_model_bytes) {
    return ResourceExhausted("the model is " + std::to_string(bytes.size()) + " bytes, over the limit of " +
                             std::to_string(options_.max_model_bytes) + " (limits.max_model_bytes)");
  }
  if (name.size() > 256) return InvalidArgument("name: at most 256 bytes");
  // The model must import (outside the lock: a large model takes a while).
  StatusOr<ImportedModel> imported = ImportOnnx(bytes);
  if (!imported.ok()) {
    // An op or dtype Flowstate lacks is the upload's problem too: 400.
    return Status(imported.status().code() == Code::kUnimplemented ? Code::kInvalidArgument
                                                                   : imported.status().code(),
                  "the model cannot be imported: " + imported.status().message(),
                  imported.status().node());
  }
  ModelInfo info;
  info.name = name;
  info.bytes = int64_t(bytes.size());
  info.created = NowSeconds();
  info.opset = imported->opset;
  info.producer = imported->producer;
  for (const OnnxTensorInfo& t : imported->inputs) info.inputs.push_back(TensorOf(t));
  for (const OnnxTensorInfo& t : imported->outputs) info.outputs.push_back(TensorOf(t));
  for (const OnnxTensorInfo& v : imported->variables) {
    int64_t n = 1;
    for (int64_t d : v.shape.dims()) n *= d;
    info.parameters += n;
  }
  MutexLock l(mu_);
  if (int(models_.size()) >= options_.max_models) {
    return ResourceExhausted("this server keeps at most " + std::to_string(options_.max_models) +
                             " models (limits.max_models); delete one first");
  }
  info.id = "model-" + std::to_string(next_id_);
  if (options_.store != nullptr) {
    Status s = options_.store->PutRecord(Store::Kind::kMeta, BytesKey(info.id), bytes, true);
    if (!s.ok()) return Unavailable("the model could not be stored: " + s.ToString());
    ++next_id_;
    models_[info.id] = info;
    s = WriteIndexLocked();
    if (!s.ok()) {
      models_.erase(info.id);
      (void)options_.store->DeleteRecord(Store::Kind::kMeta, BytesKey(info.id));
      return Unavailable("the model could not be stored: " + s.ToString());
    }
  } else {
    ++next_id_;
    models_[info.id] = info;
    bytes_[info.id] = bytes;
  }
  return info;
}

StatusOr<ModelInfo> ModelRegistry::Get(const std::string& id) const {
  MutexLock l(mu_);
  auto it = models_.find(id);
  if (it == models_.end()) return NotFound("no model '" + id + "'");
  return it->second;
}

std::vector<ModelInfo> ModelRegistry::List() const {
  MutexLock l(mu_);
  std::vector<ModelInfo> out;
  for (const auto& [id, m] : models_) out.push_back(m);
  return out;
}

StatusOr<std::string> ModelRegistry::Read(const std::string& id) const {
  {
    MutexLock l(mu_);
    if (!models_.count(id)) return NotFound("no model '" + id + "'");
    if (options_.store == nullptr) return bytes_.at(id);
  }
  StatusOr<std::string> bytes = options_.store->GetRecord(Store::Kind::kMeta, BytesKey(id));
  if (!bytes.ok() && bytes.status().code() == Code::kNotFound) {
    return DataLoss("model '" + id + "' is in the index but its bytes are missing");
  }
  return bytes;
}

Status ModelRegistry::Delete(const std::string& id) {
  MutexLock l(mu_);
  auto it = models_.find(id);
  if (it == models_.end()) return NotFound("no model '" + id + "'");
  ModelInfo kept = it->second;
  models_.erase(it);
  if (options_.store == nullptr) {
    bytes_.erase(id);
    return Status();
  }
  Status s = WriteIndexLocked();
  if (!s.ok()) {
    models_[id] = kept;
    return Unavailable("the model could not be deleted: " + s.ToString());
  }
  // Bytes without an index entry are harmless (and overwritten by no id).
  (void)options_.store->DeleteRecord(Store::Kind::kMeta, BytesKey(id));
  return Status();
}

}  // namespace flowstate

// The JSON views of what clients upload (api/views_json.h): ONNX models
// (also the model registry's stored record, read back by ModelInfoFromJson)
// and datasets.
#include <nlohmann/json.hpp>

#include <exception>
#include <string>
#include <vector>

#include "api/json_internal.h"
#include "api/views_json.h"

namespace flowstate {
namespace {

using api::internal::DumpJson;
using api::internal::Json;
using api::internal::TimeJson;

Json ModelJson(const ModelInfo& m) {
  auto tensors = [](const std::vector<ModelInfo::Tensor>& list) {
    Json out = Json::array();
    for (const ModelInfo::Tensor& t : list) {
      Json o{{"name", t.name}, {"dtype", t.dtype}};
      o["shape"] = t.rank_known ? Json(t.shape) : Json(nullptr);
      out.push_back(std::move(o));
    }
    return out;
  };
  return Json{{"model_id", m.id},       {"name", m.name},
              {"bytes", m.bytes},       {"created", TimeJson(m.created)},
              {"created_unix", m.created}, {"opset", m.opset},
              {"producer", m.producer}, {"inputs", tensors(m.inputs)},
              {"outputs", tensors(m.outputs)}, {"parameters", m.parameters}};
}

Json DatasetJson(const DatasetInfo& d) {
  Json arrays = Json::array();
  for (const DatasetInfo::Array& a : d.arrays) {
    arrays.push_back(Json{{"name", a.name}, {"dtype", a.dtype}, {"shape", a.shape}});
  }
  return Json{{"dataset_id", d.id},          {"path", d.path},
              {"bytes", d.bytes},            {"complete", d.complete},
              {"modified", TimeJson(d.modified)}, {"arrays", std::move(arrays)}};
}

}  // namespace

std::string DatasetInfoToJson(const DatasetInfo& dataset) { return DumpJson(DatasetJson(dataset)); }

std::string DatasetInfoListToJson(const std::vector<DatasetInfo>& datasets) {
  Json list = Json::array();
  for (const DatasetInfo& d : datasets) list.push_back(DatasetJson(d));
  return DumpJson(Json{{"datasets", std::move(list)}});
}

std::string ModelInfoToJson(const ModelInfo& model) { return DumpJson(ModelJson(model)); }

std::string ModelInfoListToJson(const std::vector<ModelInfo>& models) {
  Json list = Json::array();
  for (const ModelInfo& m : models) list.push_back(ModelJson(m));
  return DumpJson(Json{{"models", std::move(list)}});
}

StatusOr<ModelInfo> ModelInfoFromJson(std::string_view text) {
  Json j = Json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return InvalidArgument("not a model record");
  try {
    ModelInfo m;
    m.id = j.at("model_id").get<std::string>();
    m.name = j.at("name").get<std::string>();
    m.bytes = j.at("bytes").get<int64_t>();
    m.created = j.at("created_unix").get<double>();
    m.opset = j.at("opset").get<int64_t>();
    m.producer = j.at("producer").get<std::string>();
    m.parameters = j.at("parameters").get<int64_t>();
    for (const char* key : {"inputs", "outputs"}) {
      for (const Json& t : j.at(key)) {
        ModelInfo::Tensor v;
        v.name = t.at("name").get<std::string>();
        v.dtype = t.at("dtype").get<std::string>();
        v.rank_known = !t.at("shape").is_null();
        if (v.rank_known) v.shape = t.at("shape").get<std::vector<int64_t>>();
        (std::string(key) == "inputs" ? m.inputs : m.outputs).push_back(std::move(v));
      }
    }
    return m;
  } catch (const std::exception& e) {
    return InvalidArgument(std::string("not a model record: ") + e.what());
  }
}

std::string ModelDeletedToJson(const std::string& model_id) {
  return DumpJson(Json{{"model_id", model_id}, {"deleted", true}});
}

}  // namespace flowstate

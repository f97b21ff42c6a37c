// The REST frontend's catalog routes (http_handlers.h): uploaded ONNX
// models and a job's ONNX export, uploaded datasets, and the gradients of a
// graph. Each is a thin adapter over one Service call; the status codes
// beyond api::HttpStatusFor's (413 for a body over a limit, 409 for a
// conflict) are chosen here, next to the call they are about.
#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "api/json_codec.h"
#include "api/views_json.h"
#include "server/rest/http_handlers.h"

namespace flowstate::http_internal {

// ONNX models: the body is the .onnx file's bytes; ?name= names it.
HttpResponse UploadModel(const Call& c) {
  std::string name = QueryParam(c.req.target, "name").value_or("");
  StatusOr<ModelInfo> m = c.service().UploadModel(c.req.body, name);
  // Over limits.max_model_bytes: 413, as a body over the HTTP limit.
  if (!m.ok()) return ErrorResponse(m.status(), m.status().code() == Code::kResourceExhausted ? 413 : 0);
  return JsonResponse(201, ModelInfoToJson(*m));
}

HttpResponse ExportJobOnnx(const Call& c) {
  StatusOr<std::string> bytes = c.service().ExportJobOnnx(c.id);
  // No variables yet, or a job not given as ONNX: 409.
  if (!bytes.ok()) {
    return ErrorResponse(bytes.status(), bytes.status().code() == Code::kFailedPrecondition ? 409 : 0);
  }
  HttpResponse r;
  r.content_type = "application/octet-stream";
  r.body = std::move(bytes).value();
  r.headers.emplace_back("Content-Disposition", "attachment; filename=\"" + c.id + ".onnx\"");
  return r;
}

HttpResponse ListModels(const Call& c) {
  StatusOr<std::vector<ModelInfo>> list = c.service().ListModels();
  if (!list.ok()) return ErrorResponse(list.status());
  return JsonResponse(200, ModelInfoListToJson(*list));
}

HttpResponse GetModel(const Call& c) {
  StatusOr<ModelInfo> m = c.service().GetModel(c.id);
  if (!m.ok()) return ErrorResponse(m.status());
  return JsonResponse(200, ModelInfoToJson(*m));
}

HttpResponse DeleteModel(const Call& c) {
  Status s = c.service().DeleteModel(c.id);
  // A model a job names conflicts with its deletion: 409.
  if (!s.ok()) return ErrorResponse(s, s.code() == Code::kFailedPrecondition ? 409 : 0);
  return JsonResponse(200, ModelDeletedToJson(c.id));
}

HttpResponse Gradients(const Call& c) {
  if (std::all_of(c.req.body.begin(), c.req.body.end(), [](char ch) { return std::isspace(static_cast<unsigned char>(ch)); })) {
    return ErrorResponse(InvalidArgument("the request has no body; expected a gradients request (a JSON object)"));
  }
  api::GraphJsonOptions options;
  options.max_tensor_bytes = size_t(std::max<int64_t>(0, c.max_tensor_bytes()));
  StatusOr<api::GradientsRequest> r = api::ParseGradientsRequestJson(c.req.body, options);
  if (!r.ok()) return ErrorResponse(r.status());
  StatusOr<GraphGradients> g = c.service().Gradients(r->graph, r->y, r->xs, r->prefix);
  if (!g.ok()) return ErrorResponse(g.status());
  return JsonResponse(200, api::GradientsToJson(g->added, g->prefix, g->grads));
}

// Uploaded datasets: the body is a chunk of an .npy or .npz file;
// ?final=false when more chunks follow. Over limits.max_dataset_bytes (or
// the disk's space): 413; an offset that is not the bytes received so far,
// or a dataset already complete: 409.
namespace {

StatusOr<std::pair<int64_t, bool>> ChunkParams(const Call& c) {
  int64_t offset = 0;
  if (std::optional<std::string> o = QueryParam(c.req.target, "offset")) {
    char* end = nullptr;
    errno = 0;
    long long v = std::strtoll(o->c_str(), &end, 10);
    if (o->empty() || *end != '\0' || errno != 0 || v < 0) {
      return InvalidArgument("offset: expected a byte offset >= 0, got '" + o->substr(0, 32) + "'");
    }
    offset = v;
  }
  std::string final = QueryParam(c.req.target, "final").value_or("true");
  if (final != "true" && final != "false") {
    return InvalidArgument("final: expected true or false, got '" + final.substr(0, 32) + "'");
  }
  return std::make_pair(offset, final == "true");
}

HttpResponse DatasetChunk(const Call& c, const std::string& id) {
  StatusOr<std::pair<int64_t, bool>> p = ChunkParams(c);
  if (!p.ok()) return ErrorResponse(p.status());
  StatusOr<DatasetInfo> d = c.service().UploadDataset(id, p->first, c.req.body, p->second);
  if (!d.ok()) {
    const Code code = d.status().code();
    return ErrorResponse(d.status(), code == Code::kResourceExhausted ? 413
                                     : code == Code::kFailedPrecondition && !id.empty() ? 409 : 0);
  }
  return JsonResponse(id.empty() ? 201 : 200, DatasetInfoToJson(*d));
}

}  // namespace

HttpResponse UploadDataset(const Call& c) { return DatasetChunk(c, ""); }
HttpResponse AppendDataset(const Call& c) { return DatasetChunk(c, c.id); }

HttpResponse ListDatasets(const Call& c) {
  return JsonResponse(200, DatasetInfoListToJson(c.service().ListDatasets()));
}

HttpResponse GetDataset(const Call& c) {
  StatusOr<DatasetInfo> d = c.service().GetDataset(c.id);
  if (!d.ok()) return ErrorResponse(d.status());
  return JsonResponse(200, DatasetInfoToJson(*d));
}

HttpResponse DeleteDataset(const Call& c) {
  Status s = c.service().DeleteDataset(c.id);
  if (!s.ok()) return ErrorResponse(s);
  return JsonResponse(200, "{}");
}

}  // namespace flowstate::http_internal

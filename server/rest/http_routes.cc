#include "server/rest/http_routes.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <fstream>
#include <optional>

#include "api/json_codec.h"
#include "api/openapi.h"
#include "checkpoints/npz.h"
#include "server/auth.h"
#include "server/rest/http_bodies.h"
#include "server/rest/http_handlers.h"
#include "api/views_json.h"
#include "server/metrics.h"
#include "server/service.h"
#include "web/console_assets.h"

namespace flowstate {

namespace {

using http_internal::AppendDataset;
using http_internal::Call;
using http_internal::DeleteDataset;
using http_internal::DeleteModel;
using http_internal::ExportJobOnnx;
using http_internal::GetDataset;
using http_internal::GetModel;
using http_internal::Gradients;
using http_internal::Handler;
using http_internal::JsonResponse;
using http_internal::ListDatasets;
using http_internal::ListModels;
using http_internal::QueryParam;
using http_internal::UploadDataset;
using http_internal::UploadModel;
using http_internal::ParseGraphBody;
using http_internal::IsTensorsBody;
using http_internal::OutputsResponse;
using http_internal::ParsePredictBody;
using http_internal::ParseRunBody;

constexpr const char* kUnmatched = "unmatched";


struct MethodEntry {
  const char* method;
  Handler handler;
  RequestCost cost;  // where the socket layer runs it (http_routes.h)
};

struct Route {
  const char* path;  // the template: "{id}" (then "{step}") matches one non-empty segment
  std::vector<MethodEntry> methods;
  // Served without a token whatever auth.open_routes says: the web
  // console's static files, which hold no data (its API calls carry the token).
  bool public_page = false;
};

double SecondsSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

HttpResponse JobResponse(const StatusOr<JobInfo>& job, int status = 200) {
  if (!job.ok()) return ErrorResponse(job.status());
  return JsonResponse(status, JobInfoToJson(*job));
}

// A scratch file for export/import bodies, removed when it goes out of scope.
struct ScratchFile {
  std::string path;
  ScratchFile() {
    static std::atomic<uint64_t> n{0};
    path = (std::filesystem::temp_directory_path() /
            ("flowstate-http-" + std::to_string(::getpid()) + "-" + std::to_string(n++) + ".fsck"))
               .string();
  }
  ~ScratchFile() {
    std::error_code ec;
    std::filesystem::remove(path, ec);
  }
};

// --- The handlers.

HttpResponse Healthz(const Call&) { return JsonResponse(200, R"({"status":"ok"})"); }

HttpResponse Readyz(const Call& c) {
  if (!c.service().Ready()) return ErrorResponse(Unavailable("not ready: the server is shutting down"));
  return JsonResponse(200, R"({"status":"ready"})");
}

HttpResponse MetricsText(const Call& c) {
  if (c.ctx.metrics == nullptr) return ErrorResponse(Unavailable("metrics are not enabled"));
  HttpResponse r;
  r.content_type = "text/plain; version=0.0.4";
  r.body = c.ctx.metrics->Render();
  return r;
}

// The OpenAPI description of this table (api/openapi.json).
HttpResponse OpenApi(const Call&) { return JsonResponse(200, std::string(api::OpenApiJson())); }

HttpResponse ListOps(const Call& c) { return JsonResponse(200, OpInfoListToJson(c.service().ListOps())); }

HttpResponse ListDevices(const Call& c) {
  return JsonResponse(200, DeviceInfoListToJson(c.service().ListDevices()));
}

HttpResponse GetCluster(const Call& c) {
  const double now =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  return JsonResponse(200, ClusterInfoToJson(c.service().GetCluster(), now));
}

HttpResponse CreateSession(const Call& c) {
  StatusOr<GraphDef> graph = ParseGraphBody(c.req.body, "a session", c.max_tensor_bytes());
  if (!graph.ok()) return ErrorResponse(graph.status());
  StatusOr<std::string> id = c.service().CreateSession(*graph);
  // RESOURCE_EXHAUSTED here is the session quota, not a payload: 429.
  if (!id.ok()) return ErrorResponse(id.status(), api::HttpStatusFor(id.status().code(), 429));
  std::string body = R"({"session_id":)";
  body += "\"" + *id + "\"}";  // ids are [a-z0-9-]: nothing to escape
  HttpResponse r = JsonResponse(201, std::move(body));
  r.headers.emplace_back("Location", "/v1/sessions/" + *id);
  return r;
}

HttpResponse ExtendSession(const Call& c) {
  StatusOr<GraphDef> graph = ParseGraphBody(c.req.body, "an extension", c.max_tensor_bytes());
  if (!graph.ok()) return ErrorResponse(graph.status());
  Status s = c.service().ExtendSession(c.id, *graph);
  if (!s.ok()) return ErrorResponse(s);
  return JsonResponse(200, "{}");
}

std::vector<std::string> NamesOf(const std::vector<std::pair<std::string, Tensor>>& tensors) {
  std::vector<std::string> names;
  names.reserve(tensors.size());
  for (const auto& [name, t] : tensors) names.push_back(name);
  return names;
}

HttpResponse Deferred() {
  HttpResponse r;
  r.deferred = true;
  return r;
}

HttpResponse RunSession(const Call& c) {
  // Nested arrays read as the dtypes the session's Placeholders expect.
  StatusOr<api::RunRequest> req =
      ParseRunBody(c.req.body, IsTensorsBody(c.req), c.max_tensor_bytes(),
                   [&c](const std::string& name) { return c.service().SessionFeedDtype(c.id, name); });
  if (!req.ok()) return ErrorResponse(req.status());
  SessionRunRequest run;
  run.feeds = std::move(req->feeds);
  run.fetches = std::move(req->fetches);
  run.targets = std::move(req->targets);
  run.trace = req->trace;
  run.timeout_ms = req->timeout_ms;
  run.step_tag = req->step_tag;
  if (c.req.must_not_wait &&
      c.service().SessionStepMayWait(c.id, NamesOf(run.feeds), run.fetches, run.targets)) {
    return Deferred();
  }
  StepTrace trace;
  const auto t0 = std::chrono::steady_clock::now();
  StatusOr<std::vector<std::pair<std::string, Tensor>>> out = c.service().RunSession(c.id, run, &trace);
  const double step = SecondsSince(t0);
  if (!out.ok()) return ErrorResponse(out.status());
  HttpResponse r = OutputsResponse(*out, req->binary_outputs, req->encoding,
                                   run.trace ? StepTraceToChromeJson(trace) : "");
  r.timings.emplace_back("step", step);
  return r;
}

// {"step_tag": "..."} -> {"cancelled": true | false}.
HttpResponse CancelStep(const Call& c) {
  StatusOr<std::string> tag = api::ParseCancelStepJson(c.req.body);
  if (!tag.ok()) return ErrorResponse(tag.status());
  StatusOr<bool> cancelled = c.service().CancelSessionStep(c.id, *tag);
  if (!cancelled.ok()) return ErrorResponse(cancelled.status());
  return JsonResponse(200, *cancelled ? "{\"cancelled\":true}" : "{\"cancelled\":false}");
}

HttpResponse CloseSession(const Call& c) {
  Status s = c.service().CloseSession(c.id);
  if (!s.ok()) return ErrorResponse(s);
  return JsonResponse(200, "{}");
}

HttpResponse SubmitJob(const Call& c) {
  StatusOr<JobInfo> job = c.service().SubmitJob(c.req.body);
  if (!job.ok()) return ErrorResponse(job.status());
  HttpResponse r = JobResponse(job, 201);
  r.headers.emplace_back("Location", "/v1/jobs/" + job->id);
  return r;
}

HttpResponse ListJobs(const Call& c) { return JsonResponse(200, JobInfoListToJson(c.service().ListJobs())); }

HttpResponse GetJob(const Call& c) { return JobResponse(c.service().GetJob(c.id)); }

template <Status (Service::*kAction)(const std::string&)>
HttpResponse JobAction(const Call& c) {
  Status s = (c.service().*kAction)(c.id);
  if (!s.ok()) return ErrorResponse(s);
  return JobResponse(c.service().GetJob(c.id));
}

HttpResponse DeleteJob(const Call& c) {
  Status s = c.service().DeleteJob(c.id);
  // A job that is not finished conflicts with its deletion: 409.
  if (!s.ok()) return ErrorResponse(s, s.code() == Code::kFailedPrecondition ? 409 : 0);
  return JsonResponse(200, JobDeletedToJson(c.id));
}

HttpResponse JobEvents(const Call& c) {
  std::optional<std::string> history = QueryParam(c.req.target, "history");
  bool replay = history && (*history == "1" || *history == "true");
  StatusOr<std::unique_ptr<JobEventStream>> stream = c.service().WatchJob(c.id, replay);
  if (!stream.ok()) {
    // RESOURCE_EXHAUSTED here is the event-stream cap, not a payload: 503.
    HttpResponse r = ErrorResponse(stream.status(), api::HttpStatusFor(stream.status().code(), 503));
    if (r.status == 503) r.headers.emplace_back("Retry-After", "1");
    return r;
  }
  HttpResponse r;
  r.content_type = "text/event-stream";
  r.headers.emplace_back("Cache-Control", "no-cache");
  r.headers.emplace_back("X-Accel-Buffering", "no");  // proxies: do not buffer the stream
  r.stream = http_internal::MakeJobEventSource(std::move(stream).value(),
                                               c.ctx.options.keep_alive_interval);
  return r;
}

HttpResponse Predict(const Call& c) {
  StatusOr<api::PredictRequest> req =
      ParsePredictBody(c.req.body, IsTensorsBody(c.req), c.max_tensor_bytes(),
                       [&c](const std::string& name) { return c.service().JobInputDtype(c.id, name); });
  if (!req.ok()) return ErrorResponse(req.status());
  if (c.req.must_not_wait && c.service().PredictMayWait(c.id, NamesOf(req->inputs), req->fetches)) {
    return Deferred();
  }
  std::vector<Tensor> outputs;
  const auto t0 = std::chrono::steady_clock::now();
  Status s = c.service().Predict(c.id, req->inputs, req->fetches, &outputs);
  const double step = SecondsSince(t0);
  if (!s.ok()) return ErrorResponse(s);
  api::NamedTensors named;
  for (size_t i = 0; i < outputs.size() && i < req->fetches.size(); ++i) {
    named.emplace_back(req->fetches[i], std::move(outputs[i]));
  }
  HttpResponse r = OutputsResponse(named, req->binary_outputs, req->encoding);
  r.timings.emplace_back("step", step);
  return r;
}

HttpResponse GetJobHistory(const Call& c) {
  StatusOr<JobHistory> h = c.service().JobHistoryOf(c.id);
  if (!h.ok()) return ErrorResponse(h.status());
  return JsonResponse(200, JobHistoryToJson(*h));
}

// The document as submitted: JSON already (Submit parsed it).
HttpResponse GetJobSpec(const Call& c) {
  StatusOr<std::string> doc = c.service().JobDocument(c.id);
  if (!doc.ok()) return ErrorResponse(doc.status());
  return JsonResponse(200, std::move(doc).value());
}

HttpResponse ListTraces(const Call& c) {
  StatusOr<std::vector<int64_t>> steps = c.service().JobTracedSteps(c.id);
  if (!steps.ok()) return ErrorResponse(steps.status());
  std::string body = "{\"job_id\":\"" + c.id + "\",\"steps\":[";  // ids are [a-z0-9-]
  for (size_t i = 0; i < steps->size(); ++i) body += (i ? "," : "") + std::to_string((*steps)[i]);
  return JsonResponse(200, body + "]}");
}

HttpResponse GetTrace(const Call& c) {
  char* end = nullptr;
  const long long step = std::strtoll(c.arg.c_str(), &end, 10);
  if (c.arg.empty() || *end != '\0' || step < 1) {
    return ErrorResponse(InvalidArgument("step: expected a step number (an integer >= 1), got '" + c.arg + "'"));
  }
  StatusOr<std::string> trace = c.service().JobTrace(c.id, step);
  if (!trace.ok()) return ErrorResponse(trace.status());
  HttpResponse r = JsonResponse(200, std::move(trace).value());
  r.headers.emplace_back("Content-Disposition", "inline; filename=\"" + c.id + "-step-" +
                                                    std::to_string(step) + ".trace.json\"");
  return r;
}

HttpResponse ListCheckpoints(const Call& c) {
  StatusOr<std::vector<JobCheckpointInfo>> list = c.service().ListCheckpoints(c.id);
  if (!list.ok()) return ErrorResponse(list.status());
  return JsonResponse(200, CheckpointListToJson(c.id, *list));
}

HttpResponse TakeCheckpoint(const Call& c) {
  StatusOr<CheckpointRequestResult> r = c.service().CheckpointJob(c.id);
  if (!r.ok()) return ErrorResponse(r.status());
  // 201: written; 202: snapshotted, being written in the background.
  return JsonResponse(r->written ? 201 : 202,
                      CheckpointRequestToJson(c.id, r->step, r->written));
}

HttpResponse ExportCheckpoint(const Call& c) {
  checkpoints::ExportFormat format = checkpoints::ExportFormat::kFsck;
  if (std::optional<std::string> f = QueryParam(c.req.target, "format")) {
    StatusOr<checkpoints::ExportFormat> parsed = checkpoints::ParseExportFormat(*f);
    if (!parsed.ok()) return ErrorResponse(parsed.status());
    format = *parsed;
  }
  std::optional<std::string> step_text = QueryParam(c.req.target, "step");
  int64_t step = -1;
  if (step_text) {
    char* end = nullptr;
    step = std::strtoll(step_text->c_str(), &end, 10);
    if (step_text->empty() || *end != '\0' || step < 0) {
      return ErrorResponse(InvalidArgument("step: expected a checkpoint step (an integer >= 0), got '" +
                                           *step_text + "'"));
    }
  } else {
    StatusOr<std::vector<JobCheckpointInfo>> list = c.service().ListCheckpoints(c.id);
    if (!list.ok()) return ErrorResponse(list.status());
    if (list->empty()) return ErrorResponse(NotFound("job '" + c.id + "' has no checkpoint"));
    step = list->back().step;
  }
  ScratchFile file;
  std::vector<std::string> converted;
  Status s = c.service().ExportCheckpoint(c.id, step, file.path, format, &converted);
  if (!s.ok()) return ErrorResponse(s);
  std::ifstream in(file.path, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (!in.good() && !in.eof()) return ErrorResponse(Internal("reading the exported checkpoint failed"));
  HttpResponse r;
  r.content_type = "application/octet-stream";
  r.body = std::move(bytes);
  r.headers.emplace_back("Content-Disposition",
                         "attachment; filename=\"" + c.id + "-" + std::to_string(step) +
                             std::string(checkpoints::ExportFormatExtension(format)) + "\"");
  r.headers.emplace_back("X-Flowstate-Step", std::to_string(step));
  if (!converted.empty()) {
    // npz: the bfloat16 tensors numpy cannot hold, written as float32.
    std::string names;
    for (const std::string& n : converted) names += (names.empty() ? "" : ", ") + n;
    r.headers.emplace_back("X-Flowstate-Converted-To-Float32", names);
  }
  return r;
}

HttpResponse ImportCheckpoint(const Call& c) {
  ScratchFile file;
  {
    std::ofstream out(file.path, std::ios::binary);
    out.write(c.req.body.data(), std::streamsize(c.req.body.size()));
    if (!out.good()) return ErrorResponse(Internal("storing the uploaded checkpoint failed"));
  }
  StatusOr<std::pair<std::string, int64_t>> r = c.service().ImportCheckpoint(file.path);
  if (!r.ok()) return ErrorResponse(r.status());
  return JsonResponse(201, CheckpointRequestToJson(r->first, r->second, true));
}

// The web console's files (web/console_assets.h): public, cached until they
// change (ETag), and allowed to load nothing but themselves and to talk to
// nothing but this server (Content-Security-Policy).
HttpResponse ConsoleFile(const Call& c, std::string_view name) {
  const web::ConsoleAsset* a = web::FindConsoleAsset(name);
  if (a == nullptr) {
    return ErrorResponse(NotFound(web::ConsoleBuiltIn()
                                      ? "the web console has no file '" + std::string(name) + "'"
                                      : std::string("this binary was built without the web console "
                                                    "(-DFLOWSTATE_WEB_CONSOLE=OFF)")));
  }
  HttpResponse r;
  r.content_type = std::string(a->content_type);
  r.headers.emplace_back("ETag", std::string(a->etag));
  r.headers.emplace_back("Cache-Control", "no-cache");
  r.headers.emplace_back("Content-Security-Policy",
                         "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
                         "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'");
  r.headers.emplace_back("X-Content-Type-Options", "nosniff");
  r.headers.emplace_back("Referrer-Policy", "no-referrer");
  auto [begin, end] = c.req.headers.equal_range("if-none-match");
  for (auto it = begin; it != end; ++it) {
    if (it->second.find(a->etag) != std::string::npos) {
      r.status = 304;
      return r;
    }
  }
  r.body = std::string(a->body);
  return r;
}

HttpResponse ConsolePage(const Call& c) { return ConsoleFile(c, "index.html"); }
HttpResponse ConsoleAsset(const Call& c) { return ConsoleFile(c, c.id); }

const std::vector<Route>& Routes() {
  static const std::vector<Route> routes = {
      {"/healthz", {{"GET", Healthz, RequestCost::kCheap}}},
      {"/readyz", {{"GET", Readyz, RequestCost::kCheap}}},
      {"/metrics", {{"GET", MetricsText, RequestCost::kCheap}}},
      {"/v1/openapi.json", {{"GET", OpenApi, RequestCost::kCheap}}},
      {"/v1/ops", {{"GET", ListOps, RequestCost::kCheap}}},
      {"/v1/devices", {{"GET", ListDevices, RequestCost::kCheap}}},
      {"/v1/cluster", {{"GET", GetCluster, RequestCost::kCheap}}},
      {"/v1/sessions", {{"POST", CreateSession, RequestCost::kExpensive}}},
      // Validates and differentiates the whole graph.
      {"/v1/gradients", {{"POST", Gradients, RequestCost::kExpensive}}},
      // Closing waits for the session's running steps.
      {"/v1/sessions/{id}", {{"DELETE", CloseSession, RequestCost::kExpensive}}},
      {"/v1/sessions/{id}/extend", {{"POST", ExtendSession, RequestCost::kExpensive}}},
      {"/v1/sessions/{id}/run", {{"POST", RunSession, RequestCost::kStep}}},
      {"/v1/sessions/{id}/cancel", {{"POST", CancelStep, RequestCost::kCheap}}},
      {"/v1/jobs", {{"GET", ListJobs, RequestCost::kCheap}, {"POST", SubmitJob, RequestCost::kExpensive}}},
      // Deleting waits for the job's checkpoint writes in flight.
      {"/v1/jobs/{id}", {{"GET", GetJob, RequestCost::kCheap}, {"DELETE", DeleteJob, RequestCost::kExpensive}}},
      {"/v1/jobs/{id}/events", {{"GET", JobEvents, RequestCost::kCheap}}},
      {"/v1/jobs/{id}/cancel", {{"POST", JobAction<&Service::CancelJob>, RequestCost::kCheap}}},
      {"/v1/jobs/{id}/pause", {{"POST", JobAction<&Service::PauseJob>, RequestCost::kCheap}}},
      {"/v1/jobs/{id}/resume", {{"POST", JobAction<&Service::ResumeJob>, RequestCost::kCheap}}},
      // Taking one waits for the end of the running step (and writes it
      // when the job is idle); export and import move whole checkpoints.
      {"/v1/jobs/{id}/checkpoints", {{"GET", ListCheckpoints, RequestCost::kCheap}, {"POST", TakeCheckpoint, RequestCost::kExpensive}}},
      {"/v1/jobs/{id}/checkpoints/export", {{"GET", ExportCheckpoint, RequestCost::kExpensive}}},
      {"/v1/checkpoints/import", {{"POST", ImportCheckpoint, RequestCost::kExpensive}}},
      // An upload is imported (checked) before it is stored.
      {"/v1/models", {{"GET", ListModels, RequestCost::kCheap}, {"POST", UploadModel, RequestCost::kExpensive}}},
      {"/v1/models/{id}", {{"GET", GetModel, RequestCost::kCheap}, {"DELETE", DeleteModel, RequestCost::kExpensive}}},
      // Chunks are written to disk; the final one reads the file through.
      {"/v1/datasets", {{"GET", ListDatasets, RequestCost::kExpensive}, {"POST", UploadDataset, RequestCost::kExpensive}}},
      {"/v1/datasets/{id}", {{"GET", GetDataset, RequestCost::kExpensive}, {"DELETE", DeleteDataset, RequestCost::kExpensive}}},
      {"/v1/datasets/{id}/append", {{"POST", AppendDataset, RequestCost::kExpensive}}},
      {"/v1/jobs/{id}/predict", {{"POST", Predict, RequestCost::kStep}}},
      // Reads the variables and writes the model out: the size of the model.
      {"/v1/jobs/{id}/model.onnx", {{"GET", ExportJobOnnx, RequestCost::kExpensive}}},
      {"/v1/jobs/{id}/history", {{"GET", GetJobHistory, RequestCost::kCheap}}},
      {"/v1/jobs/{id}/spec", {{"GET", GetJobSpec, RequestCost::kCheap}}},
      {"/v1/jobs/{id}/traces", {{"GET", ListTraces, RequestCost::kCheap}}},
      // A trace is read back from the store.
      {"/v1/jobs/{id}/traces/{step}", {{"GET", GetTrace, RequestCost::kExpensive}}},
      {"/", {{"GET", ConsolePage, RequestCost::kCheap}}, true},
      {"/console/{id}", {{"GET", ConsoleAsset, RequestCost::kCheap}}, true},
  };
  return routes;
}

// --- Paths.

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// The path of a target without its query, split at '/', each segment
// percent-decoded ("%2F" stays inside its segment). One trailing slash is
// ignored ("/v1/jobs/" is "/v1/jobs").
std::vector<std::string> PathSegments(std::string_view target) {
  std::string_view path = target.substr(0, target.find_first_of("?#"));
  std::vector<std::string> out;
  size_t i = 0;
  while (i < path.size()) {
    if (path[i] == '/') {
      ++i;
      continue;
    }
    size_t end = path.find('/', i);
    if (end == std::string_view::npos) end = path.size();
    std::string seg;
    for (size_t k = i; k < end; ++k) {
      int hi, lo;
      if (path[k] == '%' && k + 2 < end && (hi = HexValue(path[k + 1])) >= 0 &&
          (lo = HexValue(path[k + 2])) >= 0) {
        seg.push_back(char(hi * 16 + lo));
        k += 2;
      } else {
        seg.push_back(path[k]);
      }
    }
    out.push_back(std::move(seg));
    i = end;
  }
  return out;
}

std::vector<std::string_view> TemplateSegments(std::string_view t) {
  std::vector<std::string_view> out;
  if (t == "/") return out;  // the root has no segment, as PathSegments("/") has none
  size_t i = 1;
  while (i <= t.size()) {
    size_t end = t.find('/', i);
    if (end == std::string_view::npos) end = t.size();
    out.push_back(t.substr(i, end - i));
    i = end + 1;
  }
  return out;
}

// Each route's template split once, in the order of Routes().
const std::vector<std::vector<std::string_view>>& RouteSegments() {
  static const std::vector<std::vector<std::string_view>> segments = [] {
    std::vector<std::vector<std::string_view>> v;
    for (const Route& r : Routes()) v.push_back(TemplateSegments(r.path));
    return v;
  }();
  return segments;
}

// The route of a target split into path segments, with its {id} and its
// second parameter ({step}) if any; nullptr when none.
const Route* MatchSegments(const std::vector<std::string>& segs, std::string* id,
                           std::string* arg = nullptr) {
  const std::vector<Route>& routes = Routes();
  const std::vector<std::vector<std::string_view>>& templates = RouteSegments();
  for (size_t r = 0; r < routes.size(); ++r) {
    const std::vector<std::string_view>& t = templates[r];
    if (t.size() != segs.size()) continue;
    bool ok = true;
    size_t id_at = t.size(), arg_at = t.size();
    for (size_t i = 0; i < t.size() && ok; ++i) {
      if (t[i] == "{id}") {
        id_at = i;
      } else if (t[i].size() > 2 && t[i].front() == '{' && t[i].back() == '}') {
        arg_at = i;
      } else {
        ok = t[i] == segs[i];
      }
    }
    if (ok) {
      id->assign(id_at < segs.size() ? segs[id_at] : std::string());
      if (arg != nullptr) arg->assign(arg_at < segs.size() ? segs[arg_at] : std::string());
      return &routes[r];
    }
  }
  return nullptr;
}

// The route `target` belongs to, with its {id}; nullptr when none.
const Route* Match(std::string_view target, std::string* id) {
  return MatchSegments(PathSegments(target), id);
}

const MethodEntry* FindMethod(const Route& r, std::string_view method) {
  for (const MethodEntry& m : r.methods) {
    if (method == m.method) return &m;
  }
  return nullptr;
}

// --- Authentication.

bool IsOpen(const RouteOptions& o, const std::string& path, const Route* route) {
  if (route != nullptr && route->public_page) return true;
  for (const std::string& open : o.open_routes) {
    if (open == path || (route != nullptr && open == route->path)) return true;
  }
  return false;
}

// The request's Authorization headers against the tokens (server/auth.h).
BearerCheck CheckAuth(const HttpRequest& req, const RouteOptions& o) {
  std::vector<std::string_view> values;
  auto [begin, end] = req.headers.equal_range("authorization");
  for (auto it = begin; it != end; ++it) values.emplace_back(it->second);
  return CheckBearerToken(values, o.tokens);
}

HttpResponse Unauthorized(const BearerCheck& check) {
  HttpResponse r = ErrorResponse(check.status);
  const char* challenge = R"(Bearer realm="flowstate")";
  if (check.outcome == BearerCheck::Outcome::kInvalid) {
    challenge = R"(Bearer realm="flowstate", error="invalid_token")";
  } else if (check.outcome == BearerCheck::Outcome::kMalformed) {
    challenge = R"(Bearer realm="flowstate", error="invalid_request")";
  }
  r.headers.emplace_back("WWW-Authenticate", challenge);
  return r;
}

// The decoded path of a target's segments ("/v1/jobs/a%2Fb" -> "/v1/jobs/a/b").
std::string RequestPath(const std::vector<std::string>& segs) {
  std::string path = "/";
  for (size_t i = 0; i < segs.size(); ++i) path += (i ? "/" : "") + segs[i];
  return path;
}

// A request looked up: its route and method, or why it is refused before
// any handler sees it (auth, then route, then method).
struct Resolved {
  const Route* route = nullptr;
  const MethodEntry* method = nullptr;
  std::string id, arg;
  std::optional<BearerCheck> auth_failure;
  bool open = false;           // an open route (served without a token)
  bool authenticated = true;   // tokens off, or a valid one was sent
  std::vector<std::string> segs;
};

Resolved Resolve(const HttpRequest& req, const RouteContext& ctx) {
  Resolved r;
  r.segs = PathSegments(req.target);
  r.route = MatchSegments(r.segs, &r.id, &r.arg);
  if (!ctx.options.tokens.empty()) {
    BearerCheck auth = CheckAuth(req, ctx.options);
    r.authenticated = auth.ok();
    r.open = IsOpen(ctx.options, RequestPath(r.segs), r.route);
    if (!r.authenticated && !r.open) {
      r.auth_failure = std::move(auth);
      return r;
    }
  }
  if (r.route != nullptr) r.method = FindMethod(*r.route, req.method);
  return r;
}

HttpResponse Dispatch(const HttpRequest& req, RouteContext& ctx, std::string* route_label) {
  Resolved r = Resolve(req, ctx);
  *route_label = r.route ? r.route->path : kUnmatched;
  if (r.auth_failure) return Unauthorized(*r.auth_failure);
  if (r.route == nullptr) {
    return ErrorResponse(NotFound("no route for " + req.method + " " + RequestPath(r.segs)));
  }
  if (r.method == nullptr) {
    std::string allow;
    for (const MethodEntry& e : r.route->methods) allow += (allow.empty() ? "" : ", ") + std::string(e.method);
    HttpResponse resp = ErrorResponse(
        Unimplemented("method " + req.method + " is not allowed on " + r.route->path + " (allowed: " +
                      allow + ")"),
        405);
    resp.headers.emplace_back("Allow", allow);
    return resp;
  }
  return r.method->handler(Call{req, ctx, r.id, r.arg});
}

}  // namespace

namespace http_internal {

HttpResponse JsonResponse(int status, std::string body) {
  HttpResponse r;
  r.status = status;
  r.body = std::move(body);
  return r;
}

// A query value percent-decoded ("my%20cnn", "my+cnn" -> "my cnn"); a '%'
// not followed by two hex digits stays as it is.
static std::string DecodeQueryValue(std::string_view v) {
  std::string out;
  for (size_t k = 0; k < v.size(); ++k) {
    int hi, lo;
    if (v[k] == '%' && k + 2 < v.size() && (hi = HexValue(v[k + 1])) >= 0 &&
        (lo = HexValue(v[k + 2])) >= 0) {
      out += char(hi * 16 + lo);
      k += 2;
    } else {
      out += v[k] == '+' ? ' ' : v[k];
    }
  }
  return out;
}

// The value of `key` in the target's query ("?step=5&x=1"), if present,
// percent-decoded.
std::optional<std::string> QueryParam(std::string_view target, std::string_view key) {
  size_t q = target.find('?');
  if (q == std::string_view::npos) return std::nullopt;
  std::string_view query = target.substr(q + 1);
  query = query.substr(0, query.find('#'));
  while (!query.empty()) {
    size_t amp = query.find('&');
    std::string_view pair = query.substr(0, amp);
    size_t eq = pair.find('=');
    if (pair.substr(0, eq) == key) {
      return DecodeQueryValue(eq == std::string_view::npos ? std::string_view() : pair.substr(eq + 1));
    }
    if (amp == std::string_view::npos) break;
    query = query.substr(amp + 1);
  }
  return std::nullopt;
}

}  // namespace http_internal

HttpResponse ErrorResponse(const Status& status, int http_status) {
  HttpResponse r;
  r.status = http_status != 0 ? http_status : api::HttpStatusFor(status.code());
  r.body = api::StatusToJson(status);
  return r;
}

HttpResponse HandleRequest(const HttpRequest& req, RouteContext& ctx) {
  auto t0 = std::chrono::steady_clock::now();
  std::string route = kUnmatched;
  HttpResponse r;
  try {
    r = Dispatch(req, ctx, &route);
  } catch (const std::exception& e) {
    r = ErrorResponse(Internal(std::string("internal error: ") + e.what()));
  } catch (...) {
    r = ErrorResponse(Internal("internal error"));
  }
  if (r.deferred) return r;  // handled again where it may wait
  const double secs = SecondsSince(t0);
  r.timings.emplace_back("handler", secs);
  if (ctx.metrics != nullptr) ctx.metrics->ObserveHttpRequest(route, r.status, secs);
  return r;
}

HeadVerdict CheckHead(const HttpRequest& head, const RouteContext& ctx) {
  Resolved r = Resolve(head, ctx);
  if (r.auth_failure || r.route == nullptr || r.method == nullptr) return HeadVerdict::kRefuse;
  return r.authenticated ? HeadVerdict::kRead : HeadVerdict::kReadUnauthenticated;
}

RequestCost CostOf(const HttpRequest& req) {
  std::string id;
  const Route* route = Match(req.target, &id);
  if (route == nullptr) return RequestCost::kCheap;
  const MethodEntry* m = FindMethod(*route, req.method);
  return m != nullptr ? m->cost : RequestCost::kCheap;
}

std::vector<RouteMethod> RouteTable() {
  std::vector<RouteMethod> out;
  for (const Route& r : Routes()) {
    for (const MethodEntry& m : r.methods) out.push_back({m.method, r.path});
  }
  return out;
}

std::string RouteTemplateFor(std::string_view target) {
  std::string id;
  const Route* route = Match(target, &id);
  return route ? route->path : kUnmatched;
}

}  // namespace flowstate

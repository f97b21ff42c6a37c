// JobManager's history and traces (job_manager.h, "History and traces"):
// the loss per step and evaluations of each job (jobs/step_history.h) and
// the Chrome traces of the steps its "trace" asks for, in memory and in the
// store's kMeta records "history/<job id>" and "trace/<job id>/<step>".
#include <cmath>
#include <utility>

#include "api/views_json.h"
#include "graph/mutex.h"
#include "jobs/job_manager_internal.h"

namespace flowstate {

using namespace job_manager_internal;  // NOLINT: one class over several files
using checkpoints::Store;

namespace {

std::string HistoryKey(const std::string& id) { return "history/" + id; }

std::string TraceKey(const std::string& id, int64_t step) {
  return "trace/" + id + "/" + std::to_string(step);
}

std::string StepList(const std::vector<int64_t>& steps) {
  std::string s;
  for (int64_t step : steps) s += (s.empty() ? "" : ", ") + std::to_string(step);
  return s.empty() ? "none" : s;
}

}  // namespace

void JobManager::RecordStepLocked(Job* job, StepResult* r, double seconds) {
  job->curves.AddStep(r->step, r->epoch, r->skipped ? std::nan("") : r->loss, r->examples, seconds, Now());
  if (r->trace_json.empty()) return;
  // Only the job's listed steps are traced (at most kMaxTracedSteps).
  std::string& kept = job->traces[r->step];
  kept.clear();
  if (options_.store != nullptr &&
      options_.store->PutRecord(Store::Kind::kMeta, TraceKey(job->info.id, r->step), r->trace_json,
                                /*sync=*/false)
          .ok()) {
    return;  // read back from the store
  }
  kept = std::move(r->trace_json);
}

void JobManager::RecordEvalLocked(Job* job) {
  job->curves.AddEval(job->info.step, job->info.epoch, job->info.metrics, Now());
}

void JobManager::PersistHistoryLocked(Job& job) {
  if (options_.store == nullptr || job.curves.version() == job.curves_stored) return;
  Status st = options_.store->PutRecord(Store::Kind::kMeta, HistoryKey(job.info.id),
                                        JobHistoryRecordToJson(job.curves.View(job.info.id)),
                                        /*sync=*/false);
  if (st.ok()) job.curves_stored = job.curves.version();  // else: again at the next write
}

void JobManager::LoadHistory(Job* job) {
  if (options_.store == nullptr) return;
  StatusOr<std::string> text = options_.store->GetRecord(Store::Kind::kMeta, HistoryKey(job->info.id));
  if (text.ok()) {
    // A history that does not parse is dropped: the job itself is intact.
    StatusOr<JobHistory> h = JobHistoryFromJson(*text);
    if (h.ok()) job->curves = StepHistory(std::move(h).value());
  }
  job->curves_stored = job->curves.version();
  for (int64_t step : job->spec.trace_steps) {
    if (options_.store->GetRecord(Store::Kind::kMeta, TraceKey(job->info.id, step)).ok()) {
      job->traces[step].clear();  // in the store
    }
  }
}

Status JobManager::DeleteHistoryLocked(const Job& job) {
  if (options_.store == nullptr) return Status();
  for (const auto& [step, text] : job.traces) {
    FS_RETURN_IF_ERROR(options_.store->DeleteRecord(Store::Kind::kMeta, TraceKey(job.info.id, step)));
  }
  return options_.store->DeleteRecord(Store::Kind::kMeta, HistoryKey(job.info.id));
}

StatusOr<JobHistory> JobManager::History(const std::string& id) const {
  MutexLock l(mu_);
  auto it = jobs_.find(id);
  if (it == jobs_.end()) return NotFound("no job '" + id + "'");
  return it->second->curves.View(id);
}

StatusOr<std::string> JobManager::Document(const std::string& id) const {
  MutexLock l(mu_);
  auto it = jobs_.find(id);
  if (it == jobs_.end()) return NotFound("no job '" + id + "'");
  return it->second->spec_json;
}

StatusOr<std::vector<int64_t>> JobManager::TracedSteps(const std::string& id) const {
  MutexLock l(mu_);
  auto it = jobs_.find(id);
  if (it == jobs_.end()) return NotFound("no job '" + id + "'");
  std::vector<int64_t> steps;
  for (const auto& [step, text] : it->second->traces) steps.push_back(step);
  return steps;
}

StatusOr<std::string> JobManager::Trace(const std::string& id, int64_t step) const {
  {
    MutexLock l(mu_);
    auto it = jobs_.find(id);
    if (it == jobs_.end()) return NotFound("no job '" + id + "'");
    const Job& job = *it->second;
    auto t = job.traces.find(step);
    if (t == job.traces.end()) {
      std::vector<int64_t> traced;
      for (const auto& [s, text] : job.traces) traced.push_back(s);
      return NotFound("job '" + id + "' has no trace of step " + std::to_string(step) +
                      " (traced so far: " + StepList(traced) + "; its \"trace\" asks for: " +
                      StepList(job.spec.trace_steps) + ")");
    }
    if (!t->second.empty() || options_.store == nullptr) return t->second;
  }
  StatusOr<std::string> text = options_.store->GetRecord(Store::Kind::kMeta, TraceKey(id, step));
  if (!text.ok() && text.status().code() == Code::kNotFound) {
    return NotFound("the trace of step " + std::to_string(step) + " of job '" + id + "' is gone (deleted)");
  }
  return text;
}

}  // namespace flowstate

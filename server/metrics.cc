#include "server/metrics.h"

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/metric_family.h>
#include <prometheus/registry.h>
#include <prometheus/text_serializer.h>

#include <algorithm>
#include <deque>
#include <map>
#include <set>
#include <sstream>
#include <utility>
#include <vector>

#include "graph/mutex.h"
#include "jobs/training_job.h"

namespace flowstate {

namespace {

using prometheus::Counter;
using prometheus::Family;
using prometheus::Gauge;
using prometheus::Histogram;

// Bucket bounds are decimal literals with few significant digits: prometheus-cpp
// prints `le` with 16 significant digits, and a computed bound such as
// 0.1 + 0.2 would print as "0.3" and collide with a neighbour. The test checks
// that every rendered `le` parses back to exactly one of these.
const Histogram::BucketBoundaries& StepBuckets() {  // 1 ms ... 60 s
  static const Histogram::BucketBoundaries b{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
                                             0.5,   1,      2.5,   5,    10,    30,   60};
  return b;
}
const Histogram::BucketBoundaries& RequestBuckets() {  // 100 us ... 10 s
  static const Histogram::BucketBoundaries b{0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005,
                                             0.01,   0.025,   0.05,   0.1,   0.25,   0.5,
                                             1,      2.5,     5,      10};
  return b;
}
const Histogram::BucketBoundaries& CheckpointBuckets() {  // 1 ms ... 300 s
  static const Histogram::BucketBoundaries b{0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1,
                                             2.5,   5,     10,   30,   60,  120,  300};
  return b;
}

// At most this many distinct values of one label of one family; further
// values are reported as "other". Routes and methods are templates and
// states and devices are few, so this only guards against a caller passing
// raw paths by mistake.
constexpr size_t kMaxLabelValues = 100;
constexpr const char* kOverflowLabel = "other";

// Default number of finished jobs whose series are kept.
constexpr size_t kDefaultFinishedJobRetention = 64;

// Escapes a HELP text as the exposition format wants (prometheus-cpp 1.0.1
// writes it verbatim).
std::string EscapeHelp(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

// prometheus-cpp writes NaN as "Nan"; the format spells it "NaN".
void FixNaN(std::string* text) {
  const std::string bad = " Nan\n";
  for (size_t pos = text->find(bad); pos != std::string::npos; pos = text->find(bad, pos + 1)) {
    text->replace(pos, bad.size(), " NaN\n");
  }
}

}  // namespace

struct Metrics::Impl : public JobObserver {
  Impl();

  void OnStep(const JobInfo& job, double step_seconds, int64_t examples) override;
  void OnStateChange(const JobInfo& job, JobState from) override;
  void OnCheckpoint(const JobInfo& job, double seconds, int64_t bytes, bool ok) override;
  void OnNan(const JobInfo& job, bool skipped) override;
  void OnDelete(const std::string& job_id) override;
  void OnReplicaStep(const JobInfo& job, const std::vector<ReplicaStepStats>& replicas) override;
  void OnRestart(const JobInfo& job) override;
  void Checkpoint(const std::string& job, double seconds, int64_t bytes, bool ok);

  // The series of one job. Gauges and histograms are created on first use;
  // a null pointer means "not exported (now)".
  struct JobSeries {
    Counter* steps = nullptr;
    Counter* examples = nullptr;
    Histogram* step_seconds = nullptr;
    Gauge* examples_per_second = nullptr;
    Gauge* loss = nullptr;
    Histogram* checkpoint_seconds = nullptr;
    Gauge* checkpoint_bytes = nullptr;
    Counter* checkpoint_failures = nullptr;
    Counter* skipped_steps = nullptr;
    // Data-parallel replicas, by replica index.
    struct Replica {
      Histogram* allreduce_wait = nullptr;
      Histogram* step_seconds = nullptr;
      Gauge* examples_per_second = nullptr;
      Counter* dropped_steps = nullptr;
    };
    std::vector<Replica> replicas;
    Gauge* replicas_alive = nullptr;
    Counter* restarts = nullptr;
    Counter* allreduce_bytes = nullptr;
    Counter* allreduce_seconds = nullptr;
    bool finished = false;
  };
  JobSeries& JobLocked(const std::string& id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(jobs_mu);  // creates steps/examples/step_seconds
  void MarkFinishedLocked(const std::string& id, JobSeries* s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(jobs_mu);
  void RemoveJobLocked(const std::string& id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(jobs_mu);
  void EvictLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(jobs_mu);

  // `value`, or "other" once `seen` holds kMaxLabelValues other values.
  static std::string Bounded(std::set<std::string>* seen, const std::string& value);

  std::shared_ptr<prometheus::Registry> registry = std::make_shared<prometheus::Registry>();

  Family<Counter>& job_steps;
  Family<Counter>& job_examples;
  Family<Histogram>& job_step_seconds;
  Family<Gauge>& job_examples_per_second;
  Family<Gauge>& job_loss;
  Family<Gauge>& jobs;
  Family<Gauge>& queue_depth;
  Family<Gauge>& device_memory;
  Family<Gauge>& device_cached;
  Family<Counter>& http_requests;
  Family<Histogram>& http_seconds;
  Family<Counter>& grpc_requests;
  Family<Histogram>& grpc_seconds;
  Family<Histogram>& checkpoint_seconds;
  Family<Gauge>& checkpoint_bytes;
  Family<Counter>& checkpoint_failures;
  Family<Counter>& job_skipped_steps;
  Family<Histogram>& replica_allreduce_wait;
  Family<Histogram>& replica_step_seconds;
  Family<Gauge>& replica_examples_per_second;
  Family<Counter>& replica_dropped_steps;
  Family<Gauge>& job_replicas_alive;
  Family<Counter>& job_restarts;
  Family<Counter>& allreduce_bytes;
  Family<Counter>& allreduce_seconds;
  Gauge& queue_depth_gauge;
  Gauge& http_connections;
  Counter& http_connections_refused;
  Gauge& event_streams;

  // Cached children of the request families: Family::Add builds (and drops)
  // a new metric on every call, which the request path should not pay.
  Mutex requests_mu;
  std::set<std::string> http_routes ABSL_GUARDED_BY(requests_mu);
  std::set<std::string> grpc_methods ABSL_GUARDED_BY(requests_mu);
  std::map<std::pair<std::string, int>, Counter*> http_counters ABSL_GUARDED_BY(requests_mu);
  std::map<std::string, Histogram*> http_histograms ABSL_GUARDED_BY(requests_mu);
  std::map<std::pair<std::string, std::string>, Counter*> grpc_counters ABSL_GUARDED_BY(requests_mu);
  std::map<std::string, Histogram*> grpc_histograms ABSL_GUARDED_BY(requests_mu);

  Mutex gauges_mu;
  std::set<std::string> states ABSL_GUARDED_BY(gauges_mu);
  std::set<std::string> devices ABSL_GUARDED_BY(gauges_mu);
  std::map<std::string, Gauge*> state_gauges ABSL_GUARDED_BY(gauges_mu);
  std::map<std::string, Gauge*> device_gauges ABSL_GUARDED_BY(gauges_mu);
  std::map<std::string, Gauge*> device_cached_gauges ABSL_GUARDED_BY(gauges_mu);

  // Job series. Observer calls arrive with the job manager's lock held, so
  // nothing under jobs_mu may call back into the manager.
  Mutex jobs_mu;
  std::map<std::string, JobSeries> job_series ABSL_GUARDED_BY(jobs_mu);
  std::deque<std::string> finished ABSL_GUARDED_BY(jobs_mu);                    // oldest first
  size_t finished_retention ABSL_GUARDED_BY(jobs_mu) = kDefaultFinishedJobRetention;

  Mutex hook_mu;
  std::function<void(Metrics*)> hook ABSL_GUARDED_BY(hook_mu);
};

Metrics::Impl::Impl()
    : job_steps(prometheus::BuildCounter()
                    .Name("flowstate_job_steps_total")
                    .Help("Training steps completed by this server, per job.")
                    .Register(*registry)),
      job_examples(prometheus::BuildCounter()
                       .Name("flowstate_job_examples_total")
                       .Help("Training examples consumed by this server, per job.")
                       .Register(*registry)),
      job_step_seconds(prometheus::BuildHistogram()
                           .Name("flowstate_job_step_duration_seconds")
                           .Help("Wall time of one training step, per job.")
                           .Register(*registry)),
      job_examples_per_second(prometheus::BuildGauge()
                                  .Name("flowstate_job_examples_per_second")
                                  .Help("Training throughput of a running job (examples per second "
                                        "as the job reports it; 0 while paused or queued).")
                                  .Register(*registry)),
      job_loss(prometheus::BuildGauge()
                   .Name("flowstate_job_loss")
                   .Help("Loss of the last training step, per job.")
                   .Register(*registry)),
      jobs(prometheus::BuildGauge()
               .Name("flowstate_jobs")
               .Help("Jobs known to the server, by state.")
               .Register(*registry)),
      queue_depth(prometheus::BuildGauge()
                      .Name("flowstate_scheduler_queue_depth")
                      .Help("Jobs waiting for a running slot.")
                      .Register(*registry)),
      device_memory(prometheus::BuildGauge()
                        .Name("flowstate_device_memory_bytes")
                        .Help("Device memory in use, per device.")
                        .Register(*registry)),
      device_cached(prometheus::BuildGauge()
                        .Name("flowstate_device_cached_bytes")
                        .Help("Freed device buffers the pool keeps for reuse, per device.")
                        .Register(*registry)),
      http_requests(prometheus::BuildCounter()
                        .Name("flowstate_http_requests_total")
                        .Help("HTTP requests served, by route template and status code.")
                        .Register(*registry)),
      http_seconds(prometheus::BuildHistogram()
                       .Name("flowstate_http_request_duration_seconds")
                       .Help("Time to serve an HTTP request, by route template.")
                       .Register(*registry)),
      grpc_requests(prometheus::BuildCounter()
                        .Name("flowstate_grpc_requests_total")
                        .Help("gRPC calls served, by method and status code.")
                        .Register(*registry)),
      grpc_seconds(prometheus::BuildHistogram()
                       .Name("flowstate_grpc_request_duration_seconds")
                       .Help("Time to serve a gRPC call, by method.")
                       .Register(*registry)),
      checkpoint_seconds(prometheus::BuildHistogram()
                             .Name("flowstate_checkpoint_duration_seconds")
                             .Help("Time to write a checkpoint durably, per job (successful ones).")
                             .Register(*registry)),
      checkpoint_bytes(prometheus::BuildGauge()
                           .Name("flowstate_checkpoint_bytes")
                           .Help("Size of the last successful checkpoint, per job.")
                           .Register(*registry)),
      checkpoint_failures(prometheus::BuildCounter()
                              .Name("flowstate_checkpoint_failures_total")
                              .Help("Checkpoints that failed to be written, per job.")
                              .Register(*registry)),
      job_skipped_steps(prometheus::BuildCounter()
                            .Name("flowstate_job_skipped_steps_total")
                            .Help("Training steps whose loss or gradients were NaN/Inf and whose "
                                  "update was not applied (on_nan \"skip_step\"), per job.")
                            .Register(*registry)),
      replica_allreduce_wait(prometheus::BuildHistogram()
                                 .Name("flowstate_replica_allreduce_wait_seconds")
                                 .Help("Time one replica of a data-parallel job spent in the "
                                       "all-reduce of a step (waiting for the other replicas, "
                                       "and reducing): the fast replicas wait on a straggler.")
                                 .Register(*registry)),
      replica_step_seconds(prometheus::BuildHistogram()
                               .Name("flowstate_replica_step_seconds")
                               .Help("Wall time of one replica's part of a training step.")
                               .Register(*registry)),
      replica_examples_per_second(prometheus::BuildGauge()
                                      .Name("flowstate_replica_examples_per_second")
                                      .Help("Examples per second of one replica in its last step "
                                            "(running jobs only).")
                                      .Register(*registry)),
      replica_dropped_steps(prometheus::BuildCounter()
                                .Name("flowstate_replica_dropped_steps_total")
                                .Help("Steps whose gradients of this replica did not count "
                                      "(backup replicas: it was not among the first to finish).")
                                .Register(*registry)),
      job_replicas_alive(prometheus::BuildGauge()
                             .Name("flowstate_job_replicas_alive")
                             .Help("Replicas taking part in the steps of a running job.")
                             .Register(*registry)),
      job_restarts(prometheus::BuildCounter()
                       .Name("flowstate_job_restarts_total")
                       .Help("Times a job resumed (from its last checkpoint, or from step 0) "
                             "after its run was interrupted.")
                       .Register(*registry)),
      allreduce_bytes(prometheus::BuildCounter()
                          .Name("flowstate_allreduce_bytes_total")
                          .Help("Bytes all-reduced by a data-parallel job, summed over its "
                                "replicas (each replica's buffers).")
                          .Register(*registry)),
      allreduce_seconds(prometheus::BuildCounter()
                            .Name("flowstate_allreduce_seconds_total")
                            .Help("Seconds a data-parallel job's replicas spent in all-reduce "
                                  "calls, summed over its replicas.")
                            .Register(*registry)),
      queue_depth_gauge(queue_depth.Add({})),
      http_connections(prometheus::BuildGauge()
                           .Name("flowstate_http_connections")
                           .Help("HTTP connections being served (event streams included).")
                           .Register(*registry)
                           .Add({})),
      http_connections_refused(prometheus::BuildCounter()
                                   .Name("flowstate_http_connections_refused_total")
                                   .Help("HTTP connections refused because http.max_connections "
                                         "were open (answered 503, or closed).")
                                   .Register(*registry)
                                   .Add({})),
      event_streams(prometheus::BuildGauge()
                        .Name("flowstate_event_streams")
                        .Help("Job event streams open (REST server-sent events and gRPC Watch).")
                        .Register(*registry)
                        .Add({})) {
  // Every state is present from the start, so a dashboard shows 0, not "no data".
  for (JobState s : {JobState::kQueued, JobState::kRunning, JobState::kPaused, JobState::kSucceeded,
                     JobState::kFailed, JobState::kCancelled}) {
    std::string name(JobStateName(s));
    states.insert(name);
    state_gauges[name] = &jobs.Add({{"state", name}});
  }
}

std::string Metrics::Impl::Bounded(std::set<std::string>* seen, const std::string& value) {
  if (seen->count(value)) return value;
  if (seen->size() >= kMaxLabelValues) return kOverflowLabel;
  seen->insert(value);
  return value;
}

Metrics::Impl::JobSeries& Metrics::Impl::JobLocked(const std::string& id) {
  JobSeries& s = job_series[id];
  prometheus::Labels labels{{"job_id", id}};
  if (!s.steps) s.steps = &job_steps.Add(labels);
  if (!s.examples) s.examples = &job_examples.Add(labels);
  if (!s.step_seconds) s.step_seconds = &job_step_seconds.Add(labels, StepBuckets());
  return s;
}

void Metrics::Impl::OnStep(const JobInfo& job, double step_seconds, int64_t examples) {
  MutexLock l(jobs_mu);
  JobSeries& s = JobLocked(job.id);
  prometheus::Labels labels{{"job_id", job.id}};
  s.steps->Increment();
  if (examples > 0) s.examples->Increment(double(examples));
  if (step_seconds >= 0) s.step_seconds->Observe(step_seconds);
  if (!s.loss) s.loss = &job_loss.Add(labels);
  s.loss->Set(job.loss);
  if (!s.finished) {
    if (!s.examples_per_second) s.examples_per_second = &job_examples_per_second.Add(labels);
    s.examples_per_second->Set(job.examples_per_sec);
  }
}

void Metrics::Impl::OnStateChange(const JobInfo& job, JobState from) {
  MutexLock l(jobs_mu);
  auto it = job_series.find(job.id);
  if (job.state == JobState::kRunning) {
    // Series exist (at 0) from the moment the job runs, so rate() sees the
    // first steps.
    JobSeries& s = JobLocked(job.id);
    if (s.finished) {
      s.finished = false;
      finished.erase(std::remove(finished.begin(), finished.end(), job.id), finished.end());
    }
    if (!s.examples_per_second) s.examples_per_second = &job_examples_per_second.Add({{"job_id", job.id}});
    s.examples_per_second->Set(job.examples_per_sec);
    return;
  }
  if (it == job_series.end()) return;  // never ran: nothing exported
  JobSeries& s = it->second;
  if (IsTerminal(job.state)) {
    MarkFinishedLocked(job.id, &s);
  } else if (s.examples_per_second) {
    s.examples_per_second->Set(0);  // paused, or queued again after a resume
  }
}

// A finished job keeps its counters, histograms and final loss (until
// evicted) but no longer reports a throughput.
void Metrics::Impl::MarkFinishedLocked(const std::string& id, JobSeries* s) {
  if (s->examples_per_second) {
    job_examples_per_second.Remove(s->examples_per_second);
    s->examples_per_second = nullptr;
  }
  for (JobSeries::Replica& r : s->replicas) {
    if (r.examples_per_second) replica_examples_per_second.Remove(r.examples_per_second);
    r.examples_per_second = nullptr;
  }
  if (s->replicas_alive) {
    job_replicas_alive.Remove(s->replicas_alive);
    s->replicas_alive = nullptr;
  }
  if (!s->finished) {
    s->finished = true;
    finished.push_back(id);
  }
  EvictLocked();
}

void Metrics::Impl::EvictLocked() {
  while (finished.size() > finished_retention) {
    std::string id = finished.front();
    finished.pop_front();
    RemoveJobLocked(id);
  }
}

void Metrics::Impl::RemoveJobLocked(const std::string& id) {
  auto it = job_series.find(id);
  if (it == job_series.end()) return;
  JobSeries& s = it->second;
  if (s.steps) job_steps.Remove(s.steps);
  if (s.examples) job_examples.Remove(s.examples);
  if (s.step_seconds) job_step_seconds.Remove(s.step_seconds);
  if (s.examples_per_second) job_examples_per_second.Remove(s.examples_per_second);
  if (s.loss) job_loss.Remove(s.loss);
  if (s.checkpoint_seconds) checkpoint_seconds.Remove(s.checkpoint_seconds);
  if (s.checkpoint_bytes) checkpoint_bytes.Remove(s.checkpoint_bytes);
  if (s.checkpoint_failures) checkpoint_failures.Remove(s.checkpoint_failures);
  if (s.skipped_steps) job_skipped_steps.Remove(s.skipped_steps);
  for (JobSeries::Replica& r : s.replicas) {
    if (r.allreduce_wait) replica_allreduce_wait.Remove(r.allreduce_wait);
    if (r.step_seconds) replica_step_seconds.Remove(r.step_seconds);
    if (r.examples_per_second) replica_examples_per_second.Remove(r.examples_per_second);
    if (r.dropped_steps) replica_dropped_steps.Remove(r.dropped_steps);
  }
  if (s.replicas_alive) job_replicas_alive.Remove(s.replicas_alive);
  if (s.restarts) job_restarts.Remove(s.restarts);
  if (s.allreduce_bytes) allreduce_bytes.Remove(s.allreduce_bytes);
  if (s.allreduce_seconds) allreduce_seconds.Remove(s.allreduce_seconds);
  job_series.erase(it);
}

void Metrics::Impl::OnReplicaStep(const JobInfo& job, const std::vector<ReplicaStepStats>& replicas) {
  MutexLock l(jobs_mu);
  JobSeries& s = JobLocked(job.id);
  prometheus::Labels labels{{"job_id", job.id}};
  if (!s.allreduce_bytes) s.allreduce_bytes = &allreduce_bytes.Add(labels);
  if (!s.allreduce_seconds) s.allreduce_seconds = &allreduce_seconds.Add(labels);
  if (!s.finished) {
    if (!s.replicas_alive) s.replicas_alive = &job_replicas_alive.Add(labels);
    s.replicas_alive->Set(double(replicas.size()));
  }
  if (s.replicas.size() < replicas.size()) s.replicas.resize(replicas.size());
  for (size_t i = 0; i < replicas.size(); ++i) {
    const ReplicaStepStats& r = replicas[i];
    JobSeries::Replica& m = s.replicas[i];
    prometheus::Labels rl{{"job_id", job.id}, {"replica", std::to_string(i)}};
    if (!m.allreduce_wait) m.allreduce_wait = &replica_allreduce_wait.Add(rl, RequestBuckets());
    if (!m.step_seconds) m.step_seconds = &replica_step_seconds.Add(rl, StepBuckets());
    if (!m.dropped_steps) m.dropped_steps = &replica_dropped_steps.Add(rl);
    m.allreduce_wait->Observe(r.allreduce_seconds);
    m.step_seconds->Observe(r.step_seconds);
    if (r.dropped_steps > 0) m.dropped_steps->Increment(double(r.dropped_steps));
    if (!s.finished) {
      if (!m.examples_per_second) m.examples_per_second = &replica_examples_per_second.Add(rl);
      m.examples_per_second->Set(r.step_seconds > 0 ? double(r.examples) / r.step_seconds : 0);
    }
    s.allreduce_bytes->Increment(double(r.allreduce_bytes));
    s.allreduce_seconds->Increment(r.allreduce_seconds);
  }
}

void Metrics::Impl::OnRestart(const JobInfo& job) {
  MutexLock l(jobs_mu);
  JobSeries& s = JobLocked(job.id);
  if (!s.restarts) s.restarts = &job_restarts.Add({{"job_id", job.id}});
  s.restarts->Increment();
}

Metrics::Metrics() : impl_(std::make_unique<Impl>()) {}
Metrics::~Metrics() = default;

void Metrics::ObserveHttpRequest(const std::string& route, int status, double seconds) {
  Counter* counter;
  Histogram* histogram;
  {
    MutexLock l(impl_->requests_mu);
    const std::string r = Impl::Bounded(&impl_->http_routes, route.empty() ? kOverflowLabel : route);
    if (status < 100 || status > 599) status = 0;  // "0": not an HTTP status
    Counter*& c = impl_->http_counters[{r, status}];
    if (!c) c = &impl_->http_requests.Add({{"route", r}, {"code", std::to_string(status)}});
    Histogram*& h = impl_->http_histograms[r];
    if (!h) h = &impl_->http_seconds.Add({{"route", r}}, RequestBuckets());
    counter = c;
    histogram = h;
  }
  // Request series are never removed, so the pointers stay valid.
  counter->Increment();
  if (seconds >= 0) histogram->Observe(seconds);
}

void Metrics::ObserveGrpcRequest(const std::string& method, const std::string& code, double seconds) {
  Counter* counter;
  Histogram* histogram;
  {
    MutexLock l(impl_->requests_mu);
    const std::string m = Impl::Bounded(&impl_->grpc_methods, method.empty() ? kOverflowLabel : method);
    Counter*& c = impl_->grpc_counters[{m, code}];
    if (!c) c = &impl_->grpc_requests.Add({{"method", m}, {"code", code}});
    Histogram*& h = impl_->grpc_histograms[m];
    if (!h) h = &impl_->grpc_seconds.Add({{"method", m}}, RequestBuckets());
    counter = c;
    histogram = h;
  }
  counter->Increment();
  if (seconds >= 0) histogram->Observe(seconds);
}

void Metrics::Impl::Checkpoint(const std::string& job, double seconds, int64_t bytes, bool ok) {
  MutexLock l(jobs_mu);
  auto [it, inserted] = job_series.try_emplace(job);
  JobSeries& s = it->second;
  if (inserted) {
    // A job this observer never saw run (a checkpoint of a finished or
    // restored job): subject to the same retention as finished jobs.
    s.finished = true;
    finished.push_back(job);
  }
  prometheus::Labels labels{{"job_id", job}};
  if (!s.checkpoint_failures) s.checkpoint_failures = &checkpoint_failures.Add(labels);
  if (!s.checkpoint_seconds) s.checkpoint_seconds = &checkpoint_seconds.Add(labels, CheckpointBuckets());
  if (ok) {
    if (!s.checkpoint_bytes) s.checkpoint_bytes = &checkpoint_bytes.Add(labels);
    if (seconds >= 0) s.checkpoint_seconds->Observe(seconds);
    s.checkpoint_bytes->Set(double(bytes));
  } else {
    s.checkpoint_failures->Increment();
  }
  if (inserted) EvictLocked();
}

void Metrics::Impl::OnCheckpoint(const JobInfo& job, double seconds, int64_t bytes, bool ok) {
  Checkpoint(job.id, seconds, bytes, ok);
}

void Metrics::ObserveCheckpoint(const std::string& job, double seconds, int64_t bytes, bool ok) {
  impl_->Checkpoint(job, seconds, bytes, ok);
}

void Metrics::Impl::OnNan(const JobInfo& job, bool skipped) {
  if (!skipped) return;
  MutexLock l(jobs_mu);
  JobSeries& s = JobLocked(job.id);
  if (!s.skipped_steps) s.skipped_steps = &job_skipped_steps.Add({{"job_id", job.id}});
  s.skipped_steps->Increment();
}

void Metrics::Impl::OnDelete(const std::string& job_id) {
  MutexLock l(jobs_mu);
  finished.erase(std::remove(finished.begin(), finished.end(), job_id), finished.end());
  RemoveJobLocked(job_id);
}

JobObserver* Metrics::job_observer() { return impl_.get(); }

void Metrics::SetScrapeHook(std::function<void(Metrics*)> hook) {
  MutexLock l(impl_->hook_mu);
  impl_->hook = std::move(hook);
}

void Metrics::SetJobsByState(const std::string& state, double n) {
  MutexLock l(impl_->gauges_mu);
  const std::string s = Impl::Bounded(&impl_->states, state);
  Gauge*& g = impl_->state_gauges[s];
  if (!g) g = &impl_->jobs.Add({{"state", s}});
  g->Set(n);
}

void Metrics::SetQueueDepth(double n) { impl_->queue_depth_gauge.Set(n); }

void Metrics::SetHttpConnections(double n) { impl_->http_connections.Set(n); }

void Metrics::CountRefusedHttpConnection() { impl_->http_connections_refused.Increment(); }

void Metrics::SetEventStreams(double n) { impl_->event_streams.Set(n); }

void Metrics::SetDeviceMemory(const std::string& device, double bytes, double cached_bytes) {
  MutexLock l(impl_->gauges_mu);
  const std::string d = Impl::Bounded(&impl_->devices, device);
  Gauge*& g = impl_->device_gauges[d];
  if (!g) g = &impl_->device_memory.Add({{"device", d}});
  g->Set(bytes);
  Gauge*& c = impl_->device_cached_gauges[d];
  if (!c) c = &impl_->device_cached.Add({{"device", d}});
  c->Set(cached_bytes);
}

void Metrics::SetFinishedJobRetention(size_t jobs) {
  MutexLock l(impl_->jobs_mu);
  impl_->finished_retention = jobs;
  impl_->EvictLocked();
}

std::string Metrics::Render() {
  // The hook runs without any of our locks: it reads the job manager, whose
  // lock the observer calls come in with.
  std::function<void(Metrics*)> hook;
  {
    MutexLock l(impl_->hook_mu);
    hook = impl_->hook;
  }
  if (hook) hook(this);

  std::vector<prometheus::MetricFamily> families = impl_->registry->Collect();
  // Stable output: families by name, series by labels (prometheus-cpp keeps
  // them in hash order).
  std::sort(families.begin(), families.end(),
            [](const prometheus::MetricFamily& a, const prometheus::MetricFamily& b) { return a.name < b.name; });
  for (prometheus::MetricFamily& f : families) {
    f.help = EscapeHelp(f.help);
    std::sort(f.metric.begin(), f.metric.end(),
              [](const prometheus::ClientMetric& a, const prometheus::ClientMetric& b) { return a.label < b.label; });
  }
  std::ostringstream out;
  prometheus::TextSerializer().Serialize(out, families);
  std::string text = out.str();
  FixNaN(&text);
  return text;
}

}  // namespace flowstate

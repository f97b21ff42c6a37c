// Metrics: the server's Prometheus metrics (prometheus-cpp's registry),
// rendered in the text exposition format for GET /metrics by our own HTTP
// frontend. Names are flowstate_* in base units:
//
//   flowstate_job_steps_total{job_id}                    counter
//   flowstate_job_examples_total{job_id}                 counter
//   flowstate_job_step_duration_seconds{job_id}          histogram, 1 ms ... 60 s
//   flowstate_job_examples_per_second{job_id}            gauge (running jobs only)
//   flowstate_job_loss{job_id}                           gauge (loss of the last step)
//   flowstate_jobs{state}                                gauge (jobs by state)
//   flowstate_scheduler_queue_depth                      gauge (jobs waiting for a slot)
//   flowstate_device_memory_bytes{device}                gauge (bytes in use)
//   flowstate_device_cached_bytes{device}                gauge (freed buffers kept for reuse)
//   flowstate_http_requests_total{route,code}            counter
//   flowstate_http_request_duration_seconds{route}       histogram, 100 us ... 10 s
//   flowstate_http_connections                           gauge (connections being served)
//   flowstate_http_connections_refused_total             counter (over http.max_connections)
//   flowstate_event_streams                              gauge (REST and gRPC job event streams)
//   flowstate_grpc_requests_total{method,code}           counter
//   flowstate_grpc_request_duration_seconds{method}      histogram, 100 us ... 10 s
//   flowstate_checkpoint_duration_seconds{job_id}        histogram, 1 ms ... 300 s (successful)
//   flowstate_checkpoint_bytes{job_id}                   gauge (size of the last successful one)
//   flowstate_checkpoint_failures_total{job_id}          counter
//   flowstate_job_skipped_steps_total{job_id}            counter (NaN/Inf steps skipped)
//   flowstate_job_restarts_total{job_id}                 counter (resumed after an interruption)
// Data-parallel jobs ("replicas" > 1):
//   flowstate_replica_allreduce_wait_seconds{job_id,replica}  histogram, 100 us ... 10 s
//   flowstate_replica_step_seconds{job_id,replica}       histogram, 1 ms ... 60 s
//   flowstate_replica_examples_per_second{job_id,replica} gauge (last step; running jobs only)
//   flowstate_replica_dropped_steps_total{job_id,replica} counter (backup replicas)
//   flowstate_job_replicas_alive{job_id}                 gauge (running jobs only)
//   flowstate_allreduce_bytes_total{job_id}              counter (summed over replicas)
//   flowstate_allreduce_seconds_total{job_id}            counter (summed over replicas)
//
// The job label is `job_id`, not `job`: Prometheus sets `job` on every series
// it scrapes (the scrape job) and would rename ours to `exported_job`.
//
// Routes are templates ("/v1/jobs/{id}"), never raw paths, so label sets
// stay bounded; as a guard, a label takes at most 100 distinct values per
// metric and reports further ones as "other". A job's series appear when it
// starts running; when it finishes its throughput gauge goes away and the
// rest stays, until more than SetFinishedJobRetention() (default 64) newer
// jobs have finished, or the job is deleted (JobObserver::OnDelete).
// Thread-safe: frontends and job workers record concurrently.
#ifndef FLOWSTATE_SERVER_METRICS_H_
#define FLOWSTATE_SERVER_METRICS_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "jobs/job_manager.h"

namespace flowstate {

class Metrics {
 public:
  Metrics();
  ~Metrics();

  void ObserveHttpRequest(const std::string& route, int status, double seconds);
  void ObserveGrpcRequest(const std::string& method, const std::string& code, double seconds);
  void ObserveCheckpoint(const std::string& job, double seconds, int64_t bytes, bool ok);

  // Feeds the flowstate_job_* series; give it to JobManagerOptions.
  JobObserver* job_observer();

  // Called at every scrape to refresh gauges that are read, not pushed
  // (jobs by state, queue depth, device memory).
  void SetScrapeHook(std::function<void(Metrics*)> hook);
  void SetJobsByState(const std::string& state, double n);
  void SetQueueDepth(double n);
  void SetDeviceMemory(const std::string& device, double bytes, double cached_bytes = 0);
  // The REST frontend's connections: served now, and one more refused.
  void SetHttpConnections(double n);
  void CountRefusedHttpConnection();
  void SetEventStreams(double n);

  // How many finished jobs keep their series (the oldest are removed first).
  void SetFinishedJobRetention(size_t jobs);

  // The Prometheus text format (0.0.4) of every metric, after running the
  // scrape hook. Families sorted by name, series by labels.
  std::string Render();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace flowstate

#endif  // FLOWSTATE_SERVER_METRICS_H_

// metrics_dump: prints the Prometheus text of a Metrics that has recorded
// one of everything, so tests/integration/check_docker_files.py can check
// that every flowstate_* metric the Grafana dashboard queries is exported.
//
//   metrics_dump > metrics.txt
#include <cstdio>
#include <string>

#include "server/metrics.h"

int main() {
  using flowstate::JobInfo;
  using flowstate::JobState;
  flowstate::Metrics m;

  m.ObserveHttpRequest("/v1/jobs", 200, 0.002);
  m.ObserveHttpRequest("/v1/jobs/{id}", 404, 0.0003);
  m.ObserveGrpcRequest("/flowstate.v1.Jobs/Submit", "OK", 0.004);
  m.ObserveGrpcRequest("/flowstate.v1.Jobs/Get", "NOT_FOUND", 0.0002);

  JobInfo job;
  job.id = "1";
  job.name = "dump";
  job.state = JobState::kRunning;
  m.job_observer()->OnStateChange(job, JobState::kQueued);
  job.step = 1;
  job.loss = 0.5;
  job.examples_per_sec = 1000;
  m.job_observer()->OnStep(job, 0.128, 128);

  m.ObserveCheckpoint(job.id, 0.05, 4096, true);
  m.ObserveCheckpoint(job.id, 0.01, 0, false);

  m.SetScrapeHook([](flowstate::Metrics* mm) {
    mm->SetJobsByState("RUNNING", 1);
    mm->SetQueueDepth(0);
    mm->SetDeviceMemory("/job:localhost/replica:0/task:0/device:CPU:0", 1 << 20);
  });

  std::string text = m.Render();
  std::fwrite(text.data(), 1, text.size(), stdout);
  return std::fflush(stdout) == 0 ? 0 : 1;
}

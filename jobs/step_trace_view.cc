#include "jobs/step_trace_view.h"

#include <algorithm>

namespace flowstate {

StepTrace MakeStepTrace(StepTraceCollector& collector, int64_t step) {
  collector.Finish();
  StepTrace t;
  t.step = step;
  t.time = collector.start_time();
  t.wall_us = double(collector.wall_ns()) / 1e3;
  t.devices = collector.devices();
  std::vector<StepTraceCollector::Event> events = collector.events();
  std::stable_sort(events.begin(), events.end(),
                   [](const auto& a, const auto& b) { return a.start_ns < b.start_ns; });
  t.events.reserve(events.size());
  for (StepTraceCollector::Event& e : events) {
    StepTraceEvent v;
    v.node = std::move(e.node);
    v.op = std::move(e.op);
    v.device = e.device;
    v.thread = e.thread;
    v.start_us = double(e.start_ns) / 1e3;
    v.duration_us = double(e.duration_ns) / 1e3;
    v.output_bytes = e.output_bytes;
    v.allocated_bytes = e.allocated_bytes;
    t.events.push_back(std::move(v));
  }
  return t;
}

}  // namespace flowstate

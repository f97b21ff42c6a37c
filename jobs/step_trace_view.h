// The view of a traced step (api/views.h StepTrace) from the executor's
// collector (scheduler/step_trace.h), for the job manager (a job's traced
// steps) and the service (a session run with "trace": true): one
// conversion for both. Pure function.
#ifndef FLOWSTATE_JOBS_STEP_TRACE_VIEW_H_
#define FLOWSTATE_JOBS_STEP_TRACE_VIEW_H_

#include <cstdint>

#include "api/views.h"
#include "scheduler/step_trace.h"

namespace flowstate {

// REQUIRES: the step ended (no Record() in flight). `step` is the job's
// step or the run's step id. Calls collector.Finish() when it was not
// called, so the wall time is never 0.
StepTrace MakeStepTrace(StepTraceCollector& collector, int64_t step);

}  // namespace flowstate

#endif  // FLOWSTATE_JOBS_STEP_TRACE_VIEW_H_

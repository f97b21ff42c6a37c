// The Server-Timing header's value (W3C Server Timing) from (name, seconds)
// pairs, in the order given: "read;dur=0.005, step;dur=0.092, total;dur=0.111",
// durations in milliseconds to the microsecond (negative ones as 0). The
// REST frontend sends it as a header, the gRPC frontend as "server-timing"
// trailing metadata. A pure function; thread-safe.
#ifndef FLOWSTATE_SERVER_SERVER_TIMING_H_
#define FLOWSTATE_SERVER_SERVER_TIMING_H_

#include <string>
#include <utility>
#include <vector>

namespace flowstate {

std::string ServerTimingHeader(const std::vector<std::pair<const char*, double>>& timings);

}  // namespace flowstate

#endif  // FLOWSTATE_SERVER_SERVER_TIMING_H_

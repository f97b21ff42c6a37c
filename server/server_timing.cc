#include "server/server_timing.h"

#include <algorithm>
#include <cstdio>

namespace flowstate {

std::string ServerTimingHeader(const std::vector<std::pair<const char*, double>>& timings) {
  std::string out;
  for (const auto& [name, seconds] : timings) {
    char buf[64];
    int n = std::snprintf(buf, sizeof buf, "%s%s;dur=%.3f", out.empty() ? "" : ", ", name,
                          std::max(0.0, seconds) * 1e3);
    if (n > 0) out.append(buf, size_t(std::min<int>(n, int(sizeof buf) - 1)));
  }
  return out;
}

}  // namespace flowstate

#include "bench/cpu_idle.h"

#include <fcntl.h>
#include <unistd.h>

#include <csignal>
#include <cstdlib>
#include <fstream>

namespace flowstate::bench {
namespace {

const char* const kHaltPollPath = "/sys/module/haltpoll/parameters/guest_halt_poll_ns";

// The held value, in a fixed buffer so that the signal handler reads no
// std::string; empty when nothing is held.
char g_restore[32] = {};

// With open/write only, so that the signal handler may call it.
bool WriteHaltPoll(const char* ns, size_t len) {
  int fd = ::open(kHaltPollPath, O_WRONLY);
  if (fd < 0) return false;
  bool ok = ::write(fd, ns, len) == ssize_t(len);
  return ::close(fd) == 0 && ok;
}

std::string FirstLine(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

}  // namespace

int64_t IdleEntries() {
  int64_t total = 0;
  bool any = false;
  for (int cpu = 0;; ++cpu) {
    const std::string dir = "/sys/devices/system/cpu/cpu" + std::to_string(cpu) + "/cpuidle/";
    for (int state = 0;; ++state) {
      const std::string sdir = dir + "state" + std::to_string(state) + "/";
      std::ifstream usage(sdir + "usage");
      if (!usage) {
        if (state == 0) return any ? total : -1;  // no such CPU (or no cpuidle)
        break;
      }
      int64_t u = 0;
      if (!(usage >> u) || FirstLine(sdir + "name") == "POLL") continue;
      total += u;
      any = true;
    }
  }
}

std::string IdleGovernor() { return FirstLine("/sys/devices/system/cpu/cpuidle/current_governor_ro"); }

std::string HaltPollNs() { return FirstLine(kHaltPollPath); }

bool HoldHaltPoll() {
  const std::string now = HaltPollNs();
  if (now.empty() || now.size() >= sizeof g_restore || !WriteHaltPoll(now.data(), now.size())) {
    return false;
  }
  now.copy(g_restore, now.size());
  std::atexit(RestoreHaltPoll);
  for (int sig : {SIGINT, SIGTERM}) {
    std::signal(sig, [](int) {
      RestoreHaltPoll();
      std::_Exit(130);
    });
  }
  return true;
}

bool SetHaltPollNs(const std::string& ns) { return WriteHaltPoll(ns.data(), ns.size()); }

void RestoreHaltPoll() {
  size_t len = 0;
  while (len < sizeof g_restore && g_restore[len] != '\0') ++len;
  if (len > 0) WriteHaltPoll(g_restore, len);
}

}  // namespace flowstate::bench

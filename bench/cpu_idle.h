// What the CPUs' idle states cost a benchmark that sleeps between calls.
//
// IdleEntries() counts how often the CPUs have entered an idle state that
// halts them (cpuidle's per-state counters in sysfs, the spinning POLL state
// left out). On a virtual machine each such entry that a request ends is an
// exit to the host and back: tens of microseconds where the guest does not
// poll before it halts, which KVM's haltpoll governor does for up to
// guest_halt_poll_ns (the kernel's default is 200000; 0 turns it off).
//
// HoldHaltPoll() lets a benchmark change that setting for part of its run:
// it remembers the machine's value and puts it back when the process exits
// or gets SIGINT/SIGTERM. Not thread-safe: call these from the benchmark's
// main thread.
#ifndef FLOWSTATE_BENCH_CPU_IDLE_H_
#define FLOWSTATE_BENCH_CPU_IDLE_H_

#include <cstdint>
#include <string>

namespace flowstate::bench {

// The CPUs' halting idle entries so far, summed; -1 without cpuidle in sysfs.
int64_t IdleEntries();

// The cpuidle governor ("haltpoll", "menu", ...); "" where sysfs has none.
std::string IdleGovernor();

// haltpoll's guest_halt_poll_ns as written in sysfs; "" where it is absent.
std::string HaltPollNs();

// Remembers the current guest_halt_poll_ns for RestoreHaltPoll and puts it
// back at exit and on SIGINT/SIGTERM. False (nothing held) where the
// setting is absent or not writable (not root).
bool HoldHaltPoll();

// Writes guest_halt_poll_ns; REQUIRES: HoldHaltPoll() returned true.
bool SetHaltPollNs(const std::string& ns);

// Puts the held value back; does nothing when none is held.
void RestoreHaltPoll();

}  // namespace flowstate::bench

#endif  // FLOWSTATE_BENCH_CPU_IDLE_H_

// Test-only ops for the distributed tests, registered in the test binary
// and in test_task_main (the master places them on other tasks, so both
// sides must know them).
//
// _TestBlock(x: float) -> y: float: waits until its step is cancelled (then
// fails CANCELLED) or `seconds` pass (then outputs x); signals "started" so a
// test knows the step reached it.
// _TestFailOnTask(x: float) -> y: float: fails INVALID_ARGUMENT naming
// itself, after `delay_ms`.
#ifndef FLOWSTATE_TESTS_DISTRIBUTED_TEST_OPS_H_
#define FLOWSTATE_TESTS_DISTRIBUTED_TEST_OPS_H_

namespace flowstate::testing {

void RegisterDistributedTestOps();
// _TestBlock kernels that started waiting in this process.
int BlocksStarted();

}  // namespace flowstate::testing

#endif  // FLOWSTATE_TESTS_DISTRIBUTED_TEST_OPS_H_

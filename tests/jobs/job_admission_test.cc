// Device-aware admission (jobs/job_manager.h): at most max_running jobs per
// device, FIFO per device; a job on CPU:1 does not wait behind a job on
// CPU:0, and both make progress at once.
#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <string>
#include <thread>

#include "devices/device_pool.h"
#include "jobs/job_manager.h"
#include "tests/jobs/job_store_fixture.h"
#include "tests/server/server_test_util.h"

namespace flowstate {
namespace {

using namespace std::chrono_literals;

// Two CPU devices of one intra-op thread each, shared by the tests.
DevicePool* TwoDevicePool() {
  static DevicePool* pool = [] {
    DevicePoolOptions o;
    o.num_cpu_devices = 2;
    o.intra_op_threads = 1;
    return DevicePool::Create(o).value().release();
  }();
  return pool;
}

// server_test::JobJson(epochs) (4 steps an epoch) on `device`.
std::string JobOn(const std::string& device, int epochs, const std::string& name) {
  std::string j = server_test::JobJson(epochs, name);
  return j.replace(j.find("\"seed\""), 0, "\"devices\": [\"" + device + "\"], ");
}

class JobAdmissionTest : public server_test::JobStoreFixture {
 protected:
  JobAdmissionTest() : JobStoreFixture("flowstate_admission") {}

  JobManager* NewManager(int max_running, int workers) {
    JobManagerOptions o;
    o.devices = TwoDevicePool();
    o.data_root = (dir_ / "data").string();
    o.max_running = max_running;
    o.workers = workers;
    managers_.push_back(std::make_unique<JobManager>(o));
    return managers_.back().get();
  }
};

TEST_F(JobAdmissionTest, AJobOnCpu1DoesNotWaitBehindOneOnCpu0) {
  // One running slot per device and one worker: before admission was
  // per device, the second job waited QUEUED until the first finished.
  JobManager* m = NewManager(/*max_running=*/1, /*workers=*/1);
  std::string a = m->Submit(JobOn("CPU:0", 100000, "long")).value().id;  // 400000 steps
  ASSERT_GT(WaitFor(m, a, [](const JobInfo& j) { return j.step > 0; }).step, 0);

  JobInfo b = m->Submit(JobOn("CPU:1", 5, "short")).value();  // 20 steps
  // Submit admits before it returns (its answer is the job as queued).
  EXPECT_EQ(JobStateName(m->Get(b.id).value().state), "RUNNING") << "admitted at once: CPU:1 has a free slot";
  // A third job on CPU:0 still waits for the first one's slot.
  JobInfo c = m->Submit(JobOn("CPU:0", 1, "waits")).value();
  EXPECT_EQ(JobStateName(m->Get(c.id).value().state), "QUEUED");
  std::map<std::string, std::vector<std::string>> by_device = m->RunningJobsByDevice();
  EXPECT_EQ(by_device[TwoDevicePool()->devices()[0]->name()], std::vector<std::string>{a});
  EXPECT_EQ(by_device[TwoDevicePool()->devices()[1]->name()], std::vector<std::string>{b.id});

  const int64_t a_before = m->Get(a).value().step;
  JobInfo b_done = WaitFor(m, b.id, [](const JobInfo& j) { return IsTerminal(j.state); });
  ASSERT_EQ(JobStateName(b_done.state), "SUCCEEDED") << b_done.error;
  EXPECT_EQ(b_done.step, 20);
  // The first job neither finished nor stopped: both trained at once
  // (round robin over the one worker: the long job stepped too).
  JobInfo a_now = m->Get(a).value();
  EXPECT_EQ(JobStateName(a_now.state), "RUNNING");
  EXPECT_LT(a_now.step, a_now.total_steps);
  EXPECT_GE(a_now.step, a_before + 10) << "the long job must step while the short one runs";
  EXPECT_EQ(JobStateName(m->Get(c.id).value().state), "QUEUED");

  // Cancelling the first job frees CPU:0 for the queued one.
  ASSERT_TRUE(m->Cancel(a).ok());
  JobInfo c_done = WaitFor(m, c.id, [](const JobInfo& j) { return IsTerminal(j.state); });
  EXPECT_EQ(JobStateName(c_done.state), "SUCCEEDED") << c_done.error;
}

TEST_F(JobAdmissionTest, QueuedJobsKeepTheirOrderPerDevice) {
  // A job waiting for both devices keeps a later single-device job off
  // CPU:1 even when CPU:1 is free: no starvation of wide jobs.
  JobManager* m = NewManager(/*max_running=*/1, /*workers=*/2);
  std::string a = m->Submit(JobOn("CPU:0", 100000, "long")).value().id;
  ASSERT_GT(WaitFor(m, a, [](const JobInfo& j) { return j.step > 0; }).step, 0);
  std::string wide = server_test::JobJson(1, "wide");
  wide.replace(wide.find("\"seed\""), 0, "\"devices\": [\"CPU:0\", \"CPU:1\"], ");
  JobInfo w = m->Submit(wide).value();
  JobInfo later = m->Submit(JobOn("CPU:1", 1, "later")).value();
  EXPECT_EQ(JobStateName(m->Get(w.id).value().state), "QUEUED");
  EXPECT_EQ(JobStateName(m->Get(later.id).value().state), "QUEUED")
      << "CPU:1 is kept for the earlier wide job";
  ASSERT_TRUE(m->Cancel(a).ok());
  for (const std::string& id : {w.id, later.id}) {
    JobInfo done = WaitFor(m, id, [](const JobInfo& j) { return IsTerminal(j.state); });
    EXPECT_EQ(JobStateName(done.state), "SUCCEEDED") << id << ": " << done.error;
  }
  EXPECT_LE(m->Get(w.id).value().finished, m->Get(later.id).value().started)
      << "one slot on CPU:1: the later job starts after the wide one";
}

TEST_F(JobAdmissionTest, TwoWorkersStepJobsOnBothDevices) {
  // Two jobs per device, two workers: every job makes progress, and jobs
  // on different devices finish although a long one keeps CPU:0 busy.
  JobManager* m = NewManager(/*max_running=*/2, /*workers=*/2);
  std::string a = m->Submit(JobOn("CPU:0", 100000, "long")).value().id;
  std::string b = m->Submit(JobOn("CPU:0", 5, "b")).value().id;
  std::string c = m->Submit(JobOn("CPU:1", 5, "c")).value().id;
  std::string d = m->Submit(JobOn("CPU:1", 5, "d")).value().id;
  for (const std::string& id : {b, c, d}) {
    JobInfo done = WaitFor(m, id, [](const JobInfo& j) { return IsTerminal(j.state); });
    EXPECT_EQ(JobStateName(done.state), "SUCCEEDED") << id << ": " << done.error;
  }
  JobInfo long_job = m->Get(a).value();
  EXPECT_EQ(JobStateName(long_job.state), "RUNNING");
  EXPECT_GT(long_job.step, 0);
}

}  // namespace
}  // namespace flowstate

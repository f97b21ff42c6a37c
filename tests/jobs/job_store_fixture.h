// PRIVATE to the tests of JobManager over a checkpoint store
// (job_lifecycle_test.cc, job_persistence_test.cc): JobStoreFixture owns a
// temporary directory (data/points.csv as the data root; db/ for the Store
// the test opens itself into store_) and the managers a test makes
// (managers_). TearDown ends the managers first, then closes the store,
// then removes the directory. One fixture object per test, used from the
// test's thread.
#ifndef FLOWSTATE_TESTS_JOBS_JOB_STORE_FIXTURE_H_
#define FLOWSTATE_TESTS_JOBS_JOB_STORE_FIXTURE_H_

#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "checkpoints/store.h"
#include "jobs/job_manager.h"
#include "tests/server/server_test_util.h"

namespace flowstate::server_test {

class JobStoreFixture : public ::testing::Test {
 protected:
  // `dir_prefix` names the test's temporary directory (FreshTestDir).
  explicit JobStoreFixture(std::string dir_prefix) : dir_prefix_(std::move(dir_prefix)) {}

  void SetUp() override { dir_ = FreshTestDirWithPoints(dir_prefix_); }
  void TearDown() override {
    managers_.clear();
    store_.reset();
    std::filesystem::remove_all(dir_);
  }

  // Polls the job until `pred` holds or 60 s have passed; returns its last
  // info either way (the caller's expectation then fails with it).
  static JobInfo WaitFor(JobManager* m, const std::string& id,
                         const std::function<bool(const JobInfo&)>& pred) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    for (;;) {
      JobInfo j = m->Get(id).value();
      if (pred(j) || std::chrono::steady_clock::now() > deadline) return j;
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }

  std::filesystem::path dir_;
  std::unique_ptr<checkpoints::Store> store_;
  std::vector<std::unique_ptr<JobManager>> managers_;

 private:
  std::string dir_prefix_;
};

}  // namespace flowstate::server_test

#endif  // FLOWSTATE_TESTS_JOBS_JOB_STORE_FIXTURE_H_

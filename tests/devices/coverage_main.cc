// main() of devices_test. With FLOWSTATE_CHECK_KERNEL_COVERAGE=1 (the
// devices_kernel_coverage ctest, which runs every test in one process) it
// fails unless every registered CPU kernel was run by the op tests.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <iostream>

#include "tests/util/op_test_util.h"

namespace {

class CoverageCheck : public ::testing::Environment {
 public:
  void TearDown() override {
    std::vector<std::string> ran = flowstate::test::ExercisedKernels();
    std::vector<std::string> missing;
    for (const std::string& k : flowstate::test::RegisteredCpuKernels()) {
      if (!std::binary_search(ran.begin(), ran.end(), k)) missing.push_back(k);
    }
    for (const std::string& k : missing) std::cerr << "kernel never tested: " << k << "\n";
    EXPECT_TRUE(missing.empty()) << missing.size() << " registered CPU kernel(s) have no test";
  }
};

}  // namespace

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  const char* check = std::getenv("FLOWSTATE_CHECK_KERNEL_COVERAGE");
  if (check != nullptr && std::string(check) == "1") {
    ::testing::AddGlobalTestEnvironment(new CoverageCheck());
  }
  return RUN_ALL_TESTS();
}

// main() of gradients_test. With FLOWSTATE_CHECK_GRADIENT_COVERAGE=1 (the
// gradients_coverage ctest, which runs every test in one process) it fails
// unless every op with a registered gradient function went through the
// finite-difference check (CheckGradient) at least once.
#include <gtest/gtest.h>

#include <cstdlib>
#include <iostream>
#include <string>

#include "graph/gradients.h"
#include "tests/gradients/gradient_check_util.h"

namespace {

class CoverageCheck : public ::testing::Environment {
 public:
  void TearDown() override {
    const std::set<std::string>& checked = flowstate::test::CheckedOps();
    std::vector<std::string> missing;
    for (const std::string& op : flowstate::GradientRegistry::Global()->Ops()) {
      if (!checked.count(op)) missing.push_back(op);
    }
    for (const std::string& op : missing) std::cerr << "gradient never checked: " << op << "\n";
    EXPECT_TRUE(missing.empty()) << missing.size()
                                 << " op(s) with a gradient have no finite-difference check";
  }
};

}  // namespace

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  const char* check = std::getenv("FLOWSTATE_CHECK_GRADIENT_COVERAGE");
  if (check != nullptr && std::string(check) == "1") {
    ::testing::AddGlobalTestEnvironment(new CoverageCheck());
  }
  return RUN_ALL_TESTS();
}

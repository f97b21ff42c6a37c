// Helpers shared by the checkpoint store's tests (store_test.cc,
// store_disk_full_test.cc): TempDir, a fresh directory under the system's
// temporary directory, owned by the object and removed with everything in
// it when the object goes. Header-only; one TempDir per thread.
#ifndef FLOWSTATE_TESTS_CHECKPOINTS_STORE_TEST_UTIL_H_
#define FLOWSTATE_TESTS_CHECKPOINTS_STORE_TEST_UTIL_H_

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <string>
#include <system_error>

namespace flowstate::checkpoints::store_test {

class TempDir {
 public:
  // <temp>/<prefix>_XXXXXX, made by mkdtemp.
  explicit TempDir(const std::string& prefix = "flowstate_store_test") {
    std::string tmpl = (std::filesystem::temp_directory_path() / (prefix + "_XXXXXX")).string();
    char* p = ::mkdtemp(tmpl.data());
    EXPECT_NE(p, nullptr);
    path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

}  // namespace flowstate::checkpoints::store_test

#endif  // FLOWSTATE_TESTS_CHECKPOINTS_STORE_TEST_UTIL_H_

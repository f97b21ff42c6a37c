// TempDir, shared by the tests that need a scratch directory (checkpoint
// store, input pipeline): a fresh directory under the system's temporary
// directory, made by mkdtemp, owned by the object and removed with
// everything in it when the object goes. Header-only; not copyable; one
// object per thread.
#ifndef FLOWSTATE_TESTS_UTIL_TEMP_DIR_H_
#define FLOWSTATE_TESTS_UTIL_TEMP_DIR_H_

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <string>
#include <system_error>

namespace flowstate::test_util {

class TempDir {
 public:
  // <temp>/<prefix>_XXXXXX.
  explicit TempDir(const std::string& prefix = "flowstate_test") {
    std::string tmpl = (std::filesystem::temp_directory_path() / (prefix + "_XXXXXX")).string();
    char* made = ::mkdtemp(tmpl.data());
    EXPECT_NE(made, nullptr) << "mkdtemp failed";
    path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::string& path() const { return path_; }
  // path()/name.
  std::string Join(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

}  // namespace flowstate::test_util

#endif  // FLOWSTATE_TESTS_UTIL_TEMP_DIR_H_

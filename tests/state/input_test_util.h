// Helpers for the input-pipeline tests: a temporary directory that removes
// itself, and writers of small IDX and CSV files (plain or gzipped).
// Not thread-safe; one test at a time.
#ifndef FLOWSTATE_TESTS_STATE_INPUT_TEST_UTIL_H_
#define FLOWSTATE_TESTS_STATE_INPUT_TEST_UTIL_H_

#include <zlib.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "tests/util/temp_dir.h"

namespace flowstate::testing_input {

// TempDir is the shared one (tests/util/temp_dir.h).
using ::flowstate::test_util::TempDir;

inline void WriteFile(const std::string& path, const std::string& bytes, bool gzip = false) {
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  if (gzip) {
    gzFile f = gzopen(path.c_str(), "wb");
    ASSERT_NE(f, nullptr) << path;
    ASSERT_EQ(gzwrite(f, bytes.data(), unsigned(bytes.size())), int(bytes.size()));
    ASSERT_EQ(gzclose(f), Z_OK);
  } else {
    std::ofstream out(path, std::ios::binary);
    out.write(bytes.data(), std::streamsize(bytes.size()));
    ASSERT_TRUE(out.good()) << path;
  }
}

inline std::string ReadRaw(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

inline void AppendBigEndian(std::string* out, uint64_t v, int bytes) {
  for (int i = bytes - 1; i >= 0; --i) out->push_back(char((v >> (8 * i)) & 0xff));
}

// The header of an IDX file of element type `code` and `dims`.
inline std::string IdxHeader(uint8_t code, const std::vector<uint32_t>& dims) {
  std::string s = {0, 0, char(code), char(dims.size())};
  for (uint32_t d : dims) AppendBigEndian(&s, d, 4);
  return s;
}

// An IDX file of `code` holding `values` (each `width` bytes, big-endian).
template <typename Bits>
std::string IdxFile(uint8_t code, const std::vector<uint32_t>& dims,
                    const std::vector<Bits>& values) {
  std::string s = IdxHeader(code, dims);
  for (Bits v : values) AppendBigEndian(&s, uint64_t(v), int(sizeof(Bits)));
  return s;
}

}  // namespace flowstate::testing_input

#endif  // FLOWSTATE_TESTS_STATE_INPUT_TEST_UTIL_H_

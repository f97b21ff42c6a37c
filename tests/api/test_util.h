// Helpers shared by the api/ tests.
#ifndef FLOWSTATE_TESTS_API_TEST_UTIL_H_
#define FLOWSTATE_TESTS_API_TEST_UTIL_H_

#include <gtest/gtest.h>

#include <string>

#include "graph/status.h"

namespace flowstate::api::test {

// Asserts that `s` failed with `code`, naming `node`, with a message that
// starts with `prefix` (the JSON path and the start of the reason).
inline void ExpectError(const Status& s, Code code, const std::string& prefix,
                        const std::string& node = "") {
  ASSERT_FALSE(s.ok()) << "expected an error starting with: " << prefix;
  EXPECT_EQ(s.code(), code) << s.ToString();
  EXPECT_EQ(s.message().substr(0, prefix.size()), prefix) << s.ToString();
  EXPECT_EQ(s.node(), node) << s.ToString();
}

template <typename T>
void ExpectError(const StatusOr<T>& r, Code code, const std::string& prefix,
                 const std::string& node = "") {
  ExpectError(r.status(), code, prefix, node);
}

template <typename T>
void ExpectInvalid(const StatusOr<T>& r, const std::string& prefix, const std::string& node = "") {
  ExpectError(r.status(), Code::kInvalidArgument, prefix, node);
}

}  // namespace flowstate::api::test

#endif  // FLOWSTATE_TESTS_API_TEST_UTIL_H_

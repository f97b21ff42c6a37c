// server/auth.h: the one bearer-token rule of both frontends, form by form.
// (frontend_limits_test.cc sends the same forms to the real REST and gRPC
// servers and checks that both answer alike.)
#include "server/auth.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace flowstate {
namespace {

using Outcome = BearerCheck::Outcome;

BearerCheck Check(std::vector<std::string_view> values) {
  return CheckBearerToken(values, {"s3cret", "other-token"});
}

TEST(BearerToken, TheRuleFormByForm) {
  struct Case {
    std::vector<std::string_view> values;
    Outcome want;
  };
  const Case cases[] = {
      {{"Bearer s3cret"}, Outcome::kOk},
      {{"Bearer other-token"}, Outcome::kOk},
      {{"bearer s3cret"}, Outcome::kOk},
      {{"BEARER s3cret"}, Outcome::kOk},
      {{"Bearer   s3cret"}, Outcome::kOk},     // 1*SP (RFC 7235)
      {{"Bearer\ts3cret"}, Outcome::kOk},
      {{"  Bearer s3cret  "}, Outcome::kOk},   // surrounding white space
      {{"Bearer s3cret\t"}, Outcome::kOk},
      {{}, Outcome::kMissing},
      {{"Bearer s3cret", "Bearer s3cret"}, Outcome::kMalformed},  // two values, both right
      {{"Bearer wrong", "Bearer s3cret"}, Outcome::kMalformed},   // one right of two
      {{"Bearer"}, Outcome::kMalformed},
      {{"Bearer "}, Outcome::kMalformed},
      {{""}, Outcome::kMalformed},
      {{"Basic czNjcmV0"}, Outcome::kMalformed},
      {{"Bearers3cret"}, Outcome::kMalformed},
      {{"s3cret"}, Outcome::kMalformed},
      {{"Bearer s3cret extra"}, Outcome::kMalformed},
      {{"Bearer s3cret,other-token"}, Outcome::kMalformed},
      {{"Bearer s3cret, Bearer other-token"}, Outcome::kMalformed},  // a joined pair
      {{"Bearer wrong"}, Outcome::kInvalid},
      {{"Bearer s3cre"}, Outcome::kInvalid},
      {{"Bearer s3cret0"}, Outcome::kInvalid},
      {{"Bearer S3CRET"}, Outcome::kInvalid},  // the token is case-sensitive
  };
  for (const Case& c : cases) {
    std::string shown;
    for (std::string_view v : c.values) shown += "[" + std::string(v) + "]";
    BearerCheck r = Check(c.values);
    EXPECT_EQ(int(r.outcome), int(c.want)) << shown;
    if (c.want == Outcome::kOk) {
      EXPECT_TRUE(r.status.ok()) << shown;
    } else {
      EXPECT_EQ(r.status.code(), Code::kUnauthenticated) << shown;
      EXPECT_EQ(r.status.message().find("s3cret"), std::string::npos) << r.status.message();
    }
  }
}

TEST(BearerToken, MessagesSayWhatWasWrong) {
  EXPECT_NE(Check({}).status.message().find("missing credentials"), std::string::npos);
  EXPECT_NE(Check({"Bearer a", "Bearer b"}).status.message().find("2 Authorization values"),
            std::string::npos);
  EXPECT_NE(Check({"Basic x"}).status.message().find("not a bearer token"), std::string::npos);
  EXPECT_NE(Check({"Bearer a b"}).status.message().find("exactly one token"), std::string::npos);
  EXPECT_EQ(Check({"Bearer nope"}).status.message(), "the bearer token is not valid");
}

TEST(BearerToken, NoTokensConfiguredLetsEverythingPass) {
  EXPECT_TRUE(CheckBearerToken({}, {}).ok());
  EXPECT_TRUE(CheckBearerToken({"Basic x", "junk"}, {}).ok());
}

TEST(BearerToken, ConstantTimeEqualsComparesWholeStrings) {
  EXPECT_TRUE(ConstantTimeEquals("abc", "abc"));
  EXPECT_TRUE(ConstantTimeEquals("", ""));
  EXPECT_FALSE(ConstantTimeEquals("abc", "abd"));
  EXPECT_FALSE(ConstantTimeEquals("abc", "ab"));
  EXPECT_FALSE(ConstantTimeEquals("ab", "abc"));
  EXPECT_FALSE(ConstantTimeEquals(std::string_view("a\0", 2), "a"));
}

}  // namespace
}  // namespace flowstate

// The nesting limit of client JSON: CheckJsonDepth's
// scan, and every parser of the codec refusing a document deeper than
// MaxJsonDepth() -- whether its fast reader or nlohmann's parser would have
// read it -- with INVALID_ARGUMENT naming the limit and its configuration key.
#include <gtest/gtest.h>

#include <string>

#include "api/json_codec.h"

namespace flowstate::api {
namespace {

std::string Nested(int depth, const std::string& inner = "") {
  return std::string(size_t(depth), '[') + inner + std::string(size_t(depth), ']');
}

// The process-wide limit for one test, restored after it.
class ScopedJsonDepth {
 public:
  explicit ScopedJsonDepth(int depth) : saved_(MaxJsonDepth()) {
    EXPECT_TRUE(SetMaxJsonDepth(depth).ok());
  }
  ~ScopedJsonDepth() { (void)SetMaxJsonDepth(saved_); }

 private:
  int saved_;
};

void ExpectTooDeep(const Status& s, const std::string& what) {
  EXPECT_EQ(s.code(), Code::kInvalidArgument) << what << ": " << s.ToString();
  EXPECT_NE(s.message().find("JSON nesting deeper than " + std::to_string(MaxJsonDepth()) +
                             " levels"),
            std::string::npos)
      << what << ": " << s.message();
  EXPECT_NE(s.message().find("limits.max_json_depth"), std::string::npos) << s.message();
}

TEST(JsonDepth, TheDefaultIsProtobufsRecursionLimit) {
  EXPECT_EQ(MaxJsonDepth(), 100);
  EXPECT_EQ(kDefaultMaxJsonDepth, 100);
}

TEST(JsonDepth, CheckCountsLevelsAndNamesTheByte) {
  EXPECT_TRUE(CheckJsonDepth(Nested(3), "", 3).ok());
  EXPECT_TRUE(CheckJsonDepth("1", "", 1).ok());
  EXPECT_TRUE(CheckJsonDepth("", "", 1).ok());
  Status s = CheckJsonDepth(Nested(4), "body", 3);
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_EQ(s.message(),
            "body: JSON nesting deeper than 3 levels (at byte 3); the limit is limits.max_json_depth");
  // Objects and arrays alike; siblings do not add up.
  EXPECT_TRUE(CheckJsonDepth(R"({"a": [1, {"b": 2}], "c": [[], []]})", "", 3).ok());
  EXPECT_FALSE(CheckJsonDepth(R"({"a": [1, {"b": [[]]}]})", "", 3).ok());
  EXPECT_EQ(CheckJsonDepth(R"({"a": {"b": {"c": {}}}})", "", 3).message(),
            "JSON nesting deeper than 3 levels (at byte 18); the limit is limits.max_json_depth");
}

TEST(JsonDepth, BracketsInsideStringsDoNotCount) {
  EXPECT_TRUE(CheckJsonDepth(R"(["[[[[", "{{{{"])", "", 1).ok());
  // An escaped quote does not end the string; an escaped backslash does not
  // escape the quote after it.
  EXPECT_TRUE(CheckJsonDepth(R"(["a\"[[[[", "b"])", "", 1).ok());
  EXPECT_FALSE(CheckJsonDepth(R"(["a\\", [[[1]]]])", "", 1).ok());
  EXPECT_TRUE(CheckJsonDepth(R"({"k\\": "\\\"[["})", "", 1).ok());
}

TEST(JsonDepth, MalformedTextPassesUnlessTooDeep) {
  // A parser stops at a stray closing bracket, so what follows it is never
  // read: the scan stops there too.
  EXPECT_TRUE(CheckJsonDepth("]" + Nested(500), "", 2).ok());
  EXPECT_TRUE(CheckJsonDepth("[1]]" + Nested(500), "", 2).ok());
  // Unclosed: still measured.
  EXPECT_FALSE(CheckJsonDepth(std::string(500, '['), "", 2).ok());
  // An unterminated string hides the rest.
  EXPECT_TRUE(CheckJsonDepth("[\"" + std::string(500, '['), "", 2).ok());
}

TEST(JsonDepth, EveryParserRefusesDeepDocumentsAtTheLimit) {
  for (int limit : {5, 100}) {
    ScopedJsonDepth scoped(limit);
    // At the limit: read (and then judged on its content).
    EXPECT_EQ(ParseTensorJson(Nested(limit - 1, "1")).status().message().find("nesting"),
              std::string::npos);
    for (const std::string& deep :
         {Nested(limit + 1), Nested(100000), Nested(limit + 1, "\"\\u00e9\"")}) {
      ExpectTooDeep(ParseTensorJson(deep).status(), "tensor");
      ExpectTooDeep(ParseGraphJson(deep).status(), "graph");
      ExpectTooDeep(ParseRunRequestJson("{\"feeds\": {\"x\": " + deep + "}}").status(), "run");
      ExpectTooDeep(
          ParsePredictRequestJson("{\"inputs\": {\"x\": " + deep + "}, \"fetches\": []}").status(),
          "predict");
      ExpectTooDeep(ParseGraphRequestJson("{\"graph\": " + deep + "}", "a session").status(),
                    "session");
      ExpectTooDeep(ParseRunOutputsJson("{\"outputs\": {\"y\": " + deep + "}}").status(),
                    "outputs");
      EXPECT_EQ(StatusFromJson(deep).code(), Code::kUnknown);
    }
    // The message's path is the parser's.
    Status s = ParseTensorJson(Nested(limit + 1), std::nullopt, "feeds.x").status();
    EXPECT_EQ(s.message(), "feeds.x: JSON nesting deeper than " + std::to_string(limit) +
                               " levels (at byte " + std::to_string(limit) +
                               "); the limit is limits.max_json_depth");
  }
}

TEST(JsonDepth, TheLimitIsProcessWideAndChecked) {
  EXPECT_EQ(SetMaxJsonDepth(0).code(), Code::kInvalidArgument);
  EXPECT_EQ(SetMaxJsonDepth(kMaxJsonDepthCeiling + 1).code(), Code::kInvalidArgument);
  EXPECT_EQ(MaxJsonDepth(), kDefaultMaxJsonDepth);
  {
    ScopedJsonDepth scoped(kMaxJsonDepthCeiling);
    // The deepest document the ceiling lets through is read without
    // trouble (the tensor reader then refuses its rank).
    Status s = ParseTensorJson(Nested(kMaxJsonDepthCeiling - 1, "1")).status();
    EXPECT_EQ(s.code(), Code::kInvalidArgument);
    EXPECT_EQ(s.message().find("nesting"), std::string::npos) << s.message();
    EXPECT_TRUE(ParseGraphJson("{\"nodes\": []}").ok());
  }
  EXPECT_EQ(MaxJsonDepth(), kDefaultMaxJsonDepth);
}

}  // namespace
}  // namespace flowstate::api

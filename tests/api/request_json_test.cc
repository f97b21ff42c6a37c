#include <gtest/gtest.h>

#include "api/json_codec.h"
#include "tests/api/test_util.h"

namespace flowstate::api {
namespace {

using test::ExpectError;
using test::ExpectInvalid;

TEST(RunRequestJson, ParsesAFullBody) {
  StatusOr<RunRequest> r = ParseRunRequestJson(R"({
      "feeds": {"x": [[1, 2], [3, 4]],
                "y:0": {"dtype": "uint8", "shape": [2], "b64": "AQI="},
                "a": {"dtype": "float64", "shape": [], "data": [0.5]}},
      "fetches": ["loss", "logits:1"],
      "targets": ["train"],
      "encoding": "nested"})");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->feeds.size(), 3u);
  // In the order of the body, not sorted.
  EXPECT_EQ(r->feeds[0].first, "x");
  EXPECT_EQ(r->feeds[1].first, "y:0");
  EXPECT_EQ(r->feeds[2].first, "a");
  EXPECT_TRUE(TensorsEqual(r->feeds[0].second,
                           Tensor::FromVector<int32_t>({1, 2, 3, 4}, TensorShape({2, 2}))));
  EXPECT_TRUE(TensorsEqual(r->feeds[1].second, Tensor::FromVector<uint8_t>({1, 2})));
  EXPECT_TRUE(TensorsEqual(r->feeds[2].second, Tensor::Scalar<double>(0.5)));
  EXPECT_EQ(r->fetches, (std::vector<std::string>{"loss", "logits:1"}));
  EXPECT_EQ(r->targets, std::vector<std::string>{"train"});
  EXPECT_EQ(r->encoding, Encoding::kNested);
}

TEST(RunRequestJson, EverythingIsOptional) {
  for (const char* json :
       {"{}", R"({"feeds": null, "fetches": null, "targets": null, "encoding": null})"}) {
    StatusOr<RunRequest> r = ParseRunRequestJson(json);
    ASSERT_TRUE(r.ok()) << json << ": " << r.status().ToString();
    EXPECT_TRUE(r->feeds.empty());
    EXPECT_TRUE(r->fetches.empty());
    EXPECT_TRUE(r->targets.empty());
    EXPECT_EQ(r->encoding, Encoding::kData);
  }
}

TEST(RunRequestJson, Errors) {
  const std::pair<const char*, const char*> cases[] = {
      {"[]", "expected a run request (an object), got an array"},
      {R"({"feed": {}})", "feed: unknown field (a run request has \"feeds\", \"fetches\", "
                          "\"targets\", \"encoding\", \"trace\", \"timeout_ms\", \"step_tag\")"},
      {R"({"trace": "yes"})", "trace: expected a bool"},
      {R"({"timeout_ms": -1})", "timeout_ms: must be >= 0"},
      {R"({"timeout_ms": 1.5})", "timeout_ms: expected an integer"},
      {R"({"feeds": []})", "feeds: expected an object of named tensors, got an array"},
      {R"({"feeds": {"^x": 1}})", "feeds[\"^x\"]: bad name: '^x' is a control input"},
      {R"({"feeds": {"x:": 1}})", "feeds[\"x:\"]: bad name: malformed input 'x:'"},
      {R"({"feeds": {"x": [[1, 2], [3]]}})", "feeds.x[1]: expected 2 elements like feeds.x[0]"},
      {R"({"feeds": {"x:0": [[1, 2], [3]]}})",
       "feeds[\"x:0\"][1]: expected 2 elements like feeds[\"x:0\"][0], got 1"},
      {R"({"feeds": {"x": {"dtype": "uint8", "shape": [1], "data": [256]}}})",
       "feeds.x.data[0]: 256 is out of range for uint8"},
      {R"({"fetches": "loss"})", "fetches: expected a list of strings, got \"loss\""},
      {R"({"fetches": ["loss", 3]})", "fetches[1]: expected a string, got 3"},
      {R"({"fetches": ["loss:"]})", "fetches[0]: malformed input 'loss:'"},
      {R"({"fetches": ["^train"]})", "fetches[0]: '^train' is a control input, not a tensor"},
      {R"({"targets": ["a:0"]})", "targets[0]: node name 'a:0' has a character other than"},
      {R"({"encoding": "xml"})", "encoding: unknown encoding 'xml' (expected \"data\", \"b64\", "
                                 "\"nested\" or \"binary\")"},
      {R"({"encoding": 1})", "encoding: expected a string, got 1"},
      {"{", "malformed JSON: parse error at line 1"},
  };
  for (const auto& [json, error] : cases) {
    SCOPED_TRACE(json);
    ExpectInvalid(ParseRunRequestJson(json), error);
  }
  ExpectInvalid(ParseRunRequestJson(R"({"fetches": [1]})", "body"),
                "body.fetches[0]: expected a string, got 1");
  ExpectError(ParseRunRequestJson(R"({"feeds": {"x": [1, 2, 3]}})", "", 8),
              Code::kResourceExhausted, "feeds.x: a tensor of int32[3] takes 12 bytes");
}

TEST(RunRequestJson, RoundTrips) {
  RunRequest r;
  r.feeds = {{"x", Tensor::FromVector<float>({1.5f, -2}, TensorShape({1, 2}))},
             {"labels:0", Tensor::FromVector<int32_t>({3})}};
  r.fetches = {"loss", "acc:0"};
  r.targets = {"train_op"};
  r.encoding = Encoding::kB64;
  for (Encoding e : {Encoding::kData, Encoding::kB64, Encoding::kNested}) {
    std::string json = RunRequestToJson(r, e);
    StatusOr<RunRequest> back = ParseRunRequestJson(json);
    ASSERT_TRUE(back.ok()) << back.status().ToString() << "\n" << json;
    ASSERT_EQ(back->feeds.size(), 2u);
    for (size_t i = 0; i < 2; ++i) {
      EXPECT_EQ(back->feeds[i].first, r.feeds[i].first);
      EXPECT_TRUE(TensorsEqual(back->feeds[i].second, r.feeds[i].second)) << json;
    }
    EXPECT_EQ(back->fetches, r.fetches);
    EXPECT_EQ(back->targets, r.targets);
    EXPECT_EQ(back->encoding, Encoding::kB64);
    EXPECT_FALSE(back->trace);
    EXPECT_EQ(back->timeout_ms, 0);
  }
  r.timeout_ms = 250;
  StatusOr<RunRequest> timed = ParseRunRequestJson(RunRequestToJson(r, Encoding::kData));
  ASSERT_TRUE(timed.ok()) << timed.status().ToString();
  EXPECT_EQ(timed->timeout_ms, 250);
  // Nested feeds of a dtype a reader would not infer back (float64, int64,
  // uint8) are written with their dtype, so the body reads back the same
  // (a float64 3.3e95 once came back as an out-of-range float32).
  RunRequest wide;
  wide.feeds = {{"d", Tensor::FromVector<double>({1, 2.4, 3.3333333333333335e+95})},
                {"i", Tensor::FromVector<int64_t>({7})},
                {"u", Tensor::FromVector<uint8_t>({255})}};
  const std::string nested = RunRequestToJson(wide, Encoding::kNested);
  StatusOr<RunRequest> wide_back = ParseRunRequestJson(nested);
  ASSERT_TRUE(wide_back.ok()) << wide_back.status().ToString() << "\n" << nested;
  for (size_t i = 0; i < wide.feeds.size(); ++i) {
    EXPECT_TRUE(TensorsEqual(wide_back->feeds[i].second, wide.feeds[i].second)) << nested;
  }
  r.trace = true;
  StatusOr<RunRequest> traced = ParseRunRequestJson(RunRequestToJson(r));
  ASSERT_TRUE(traced.ok()) << traced.status().ToString();
  EXPECT_TRUE(traced->trace);
}

TEST(RunOutputsJson, SerializesInOrder) {
  NamedTensors out = {{"loss", Tensor::Scalar<float>(0.5f)},
                      {"y:1", Tensor::FromVector<int64_t>({1, 2})}};
  EXPECT_EQ(RunOutputsToJson(out, Encoding::kData),
            R"({"outputs":{"loss":{"dtype":"float32","shape":[],"data":[0.5]},)"
            R"("y:1":{"dtype":"int64","shape":[2],"data":[1,2]}}})");
  EXPECT_EQ(RunOutputsToJson(out, Encoding::kNested), R"({"outputs":{"loss":0.5,"y:1":[1,2]}})");
  EXPECT_EQ(RunOutputsToJson({}, Encoding::kData), R"({"outputs":{}})");
  for (Encoding e : {Encoding::kData, Encoding::kB64}) {
    StatusOr<NamedTensors> back = ParseRunOutputsJson(RunOutputsToJson(out, e));
    ASSERT_TRUE(back.ok()) << back.status().ToString();
    ASSERT_EQ(back->size(), 2u);
    EXPECT_EQ((*back)[1].first, "y:1");
    EXPECT_TRUE(TensorsEqual((*back)[0].second, out[0].second));
    EXPECT_TRUE(TensorsEqual((*back)[1].second, out[1].second));
  }
  ExpectInvalid(ParseRunOutputsJson("{}"), "missing \"outputs\"");
  ExpectInvalid(ParseRunOutputsJson(R"({"outputs": {"y": [1, [2]]}})", "response"),
                "response.outputs.y[1]: expected a scalar like response.outputs.y[0]");
}

TEST(StatusJson, ErrorBodies) {
  EXPECT_EQ(StatusToJson(InvalidArgument("graph.nodes[3].op: unknown op 'Foo'", "d")),
            R"({"error":{"code":"INVALID_ARGUMENT",)"
            R"("message":"graph.nodes[3].op: unknown op 'Foo'","node":"d"}})");
  EXPECT_EQ(StatusToJson(NotFound("no session 'abc'")),
            R"({"error":{"code":"NOT_FOUND","message":"no session 'abc'","node":""}})");
  // Quotes, control characters and stray bytes are escaped into valid JSON.
  EXPECT_EQ(StatusToJson(Internal("a \"b\"\n\t\x01 \xff \xc3\xa9", "n\\")),
            "{\"error\":{\"code\":\"INTERNAL\",\"message\":\"a \\\"b\\\"\\n\\t\\u0001 \\ufffd "
            "\xc3\xa9\",\"node\":\"n\\\\\"}}");
  for (int c = 1; c <= int(Code::kUnauthenticated); ++c) {
    Status s(Code(c), "message " + std::to_string(c), c % 2 ? "node" : "");
    EXPECT_EQ(StatusFromJson(StatusToJson(s)), s) << s.ToString();
  }
  EXPECT_TRUE(StatusFromJson(StatusToJson(Status())).ok());
  Status bad = StatusFromJson("<html>");
  EXPECT_EQ(bad.code(), Code::kUnknown);
  EXPECT_EQ(bad.message().substr(0, 21), "malformed error body:");
  EXPECT_EQ(StatusFromJson(R"({"error": {"code": "NOPE"}})").code(), Code::kUnknown);
  EXPECT_EQ(StatusFromJson(R"({"errors": {}})").code(), Code::kUnknown);
}

TEST(StatusJson, HttpStatuses) {
  const std::pair<Code, int> expected[] = {
      {Code::kOk, 200},
      {Code::kCancelled, 499},
      {Code::kUnknown, 500},
      {Code::kInvalidArgument, 400},
      {Code::kDeadlineExceeded, 504},
      {Code::kNotFound, 404},
      {Code::kAlreadyExists, 409},
      {Code::kPermissionDenied, 403},
      {Code::kResourceExhausted, 413},
      {Code::kFailedPrecondition, 400},
      {Code::kAborted, 409},
      {Code::kOutOfRange, 400},
      {Code::kUnimplemented, 501},
      {Code::kInternal, 500},
      {Code::kUnavailable, 503},
      {Code::kDataLoss, 500},
      {Code::kUnauthenticated, 401},
  };
  for (const auto& [code, http] : expected) {
    EXPECT_EQ(HttpStatusFor(code), http) << CodeName(code);
  }
  EXPECT_EQ(HttpStatusFor(Code::kResourceExhausted, 429), 429);
  EXPECT_EQ(HttpStatusFor(Code::kNotFound, 429), 404);
}

TEST(EncodingNames, RoundTrip) {
  for (Encoding e : {Encoding::kData, Encoding::kB64, Encoding::kNested}) {
    StatusOr<Encoding> back = EncodingFromString(EncodingName(e));
    ASSERT_TRUE(back.ok());
    EXPECT_EQ(*back, e);
  }
  EXPECT_FALSE(EncodingFromString("json").ok());
}

}  // namespace
}  // namespace flowstate::api

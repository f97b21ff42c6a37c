// Binary bodies (api/json_codec.h, "Binary bodies"): a run or predict request
// whose tensors follow the JSON as raw bytes, and the binary run response.
#include <gtest/gtest.h>

#include <cstring>
#include <string>

#include "api/json_codec.h"
#include "tests/api/test_util.h"

namespace flowstate::api {
namespace {

using test::ExpectInvalid;

// 8 bytes of length, the JSON, then `bytes`.
std::string Body(const std::string& json, const std::string& bytes) {
  std::string out;
  uint64_t n = json.size();
  for (int i = 0; i < 8; ++i) out.push_back(char((n >> (8 * i)) & 0xff));
  return out + json + bytes;
}

std::string BytesOf(const Tensor& t) {
  return std::string(static_cast<const char*>(t.raw_data()), t.TotalBytes());
}

StatusOr<RunRequest> ParseBinaryRun(const std::string& body) {
  FS_ASSIGN_OR_RETURN(BinaryBody b, SplitBinaryBody(body));
  return ParseRunRequestJson(b.json, "", kDefaultMaxTensorBytes, nullptr, b.tensor_bytes);
}

TEST(BinaryBody, FeedsPointIntoTheBytesAfterTheJson) {
  const Tensor x = Tensor::FromVector<float>({1.5f, -2.f, 3.25f, 0.f, 7.f, 8.f}, TensorShape({2, 3}));
  const Tensor ids = Tensor::FromVector<int64_t>({5, 1LL << 40});
  const Tensor flags = Tensor::FromVector<bool>({true, false, true});
  // x at 0, 8 bytes of padding, ids, flags; a JSON feed beside them.
  const std::string bytes = BytesOf(x) + std::string(8, '\0') + BytesOf(ids) + BytesOf(flags);
  const std::string json = R"({"feeds": {
      "x": {"dtype": "float32", "shape": [2, 3], "data_offsets": [0, 24]},
      "ids": {"dtype": "int64", "shape": [2], "data_offsets": [32, 48]},
      "flags": {"dtype": "bool", "shape": [3], "data_offsets": [48, 51]},
      "lr": 0.5,
      "none": {"dtype": "float32", "shape": [0, 4], "data_offsets": [51, 51]}},
    "fetches": ["y"], "encoding": "binary"})";
  StatusOr<RunRequest> r = ParseBinaryRun(Body(json, bytes));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->feeds.size(), 5u);
  EXPECT_TRUE(TensorsEqual(r->feeds[0].second, x));
  EXPECT_TRUE(TensorsEqual(r->feeds[1].second, ids));
  EXPECT_TRUE(TensorsEqual(r->feeds[2].second, flags));
  EXPECT_TRUE(TensorsEqual(r->feeds[3].second, Tensor::Scalar<float>(0.5f)));
  EXPECT_EQ(r->feeds[4].second.shape(), TensorShape({0, 4}));
  EXPECT_TRUE(r->binary_outputs);
  EXPECT_EQ(r->encoding, Encoding::kData);
  // A predict request reads them the same way.
  // (The views point into the body: it must outlive them.)
  const std::string predict = Body(R"({"inputs": {"x": {"dtype": "float32",
      "shape": [2, 3], "data_offsets": [0, 24]}}, "fetches": ["y"]})", bytes);
  StatusOr<BinaryBody> b = SplitBinaryBody(predict);
  ASSERT_TRUE(b.ok());
  StatusOr<PredictRequest> p =
      ParsePredictRequestJson(b->json, "", kDefaultMaxTensorBytes, nullptr, b->tensor_bytes);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_TRUE(TensorsEqual(p->inputs[0].second, x));
  EXPECT_FALSE(p->binary_outputs);
}

TEST(BinaryBody, BadFramesAndOffsetsAreRefusedNamingTheField) {
  ExpectInvalid(SplitBinaryBody("1234"), "a binary body (application/x-flowstate-tensors) begins "
                                        "with 8 bytes that give the JSON's length; this one has 4");
  std::string huge(8, '\xff');
  ExpectInvalid(SplitBinaryBody(huge + "{}"), "a binary body's JSON is 18446744073709551615 bytes "
                                             "long, but only 2 bytes follow its length");
  const std::string bytes(16, '\x01');
  const std::pair<const char*, const char*> cases[] = {
      {R"({"feeds": {"x": {"dtype": "float32", "shape": [4], "data_offsets": [0, 17]}}})",
       "feeds.x.data_offsets[1]: expected a byte offset from 0 to 16"},
      {R"({"feeds": {"x": {"dtype": "float32", "shape": [4], "data_offsets": [-1, 15]}}})",
       "feeds.x.data_offsets[0]: expected a byte offset from 0 to 16"},
      {R"({"feeds": {"x": {"dtype": "float32", "shape": [4], "data_offsets": [8, 4]}}})",
       "feeds.x.data_offsets: ends (4) before it begins (8)"},
      {R"({"feeds": {"x": {"dtype": "float32", "shape": [3], "data_offsets": [0, 16]}}})",
       "feeds.x.data_offsets: spans 16 bytes, but a float32[3] tensor has 12"},
      {R"({"feeds": {"x": {"dtype": "float32", "shape": [4], "data_offsets": [0]}}})",
       "feeds.x.data_offsets: expected [begin, end], got"},
      {R"({"feeds": {"x": {"shape": [4], "data_offsets": [0, 16]}}})",
       "feeds.x: a \"data_offsets\" tensor needs a \"dtype\""},
      {R"({"feeds": {"x": {"dtype": "bool", "shape": [2], "data_offsets": [0, 2]}}})",
       ""},  // bytes of 1: valid bools
      {R"({"feeds": {"x": {"dtype": "float32", "shape": [4], "data_offsets": [0, 16],
                          "b64": "AAAA"}}})",
       "feeds.x: has more than one of \"data\", \"b64\" and \"data_offsets\""},
  };
  for (const auto& [json, want] : cases) {
    StatusOr<RunRequest> r = ParseBinaryRun(Body(json, bytes));
    if (std::string(want).empty()) {
      EXPECT_TRUE(r.ok()) << json << ": " << r.status().ToString();
    } else {
      ExpectInvalid(r, want);
    }
  }
  // A bool byte other than 0 or 1.
  ExpectInvalid(ParseBinaryRun(Body(R"({"feeds": {"x": {"dtype": "bool", "shape": [1],
                                    "data_offsets": [0, 1]}}})", "\x07")),
                "feeds.x.data_offsets: byte 0 is 7, not a bool (0 or 1)");
  // Over the tensor limit: refused before the tensor is allocated.
  const std::string body = Body(
      R"({"feeds": {"x": {"dtype": "float32", "shape": [4], "data_offsets": [0, 16]}}})", bytes);
  StatusOr<BinaryBody> b = SplitBinaryBody(body);
  ASSERT_TRUE(b.ok());
  StatusOr<RunRequest> r = ParseRunRequestJson(b->json, "", 8, nullptr, b->tensor_bytes);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kResourceExhausted) << r.status().ToString();
}

TEST(BinaryBody, OutputsRoundTripAlignedAndWithATrace) {
  const NamedTensors outputs = {
      {"loss", Tensor::Scalar<float>(0.25f)},
      {"logits:1", Tensor::FromVector<double>({1.0, -2.0, 3.0}, TensorShape({3, 1}))},
      {"empty", Tensor::FromVector<int32_t>({}, TensorShape({0}))},
      {"ids", Tensor::FromVector<int64_t>({7, 8})},
  };
  const std::string body = RunOutputsToBinary(outputs, R"({"traceEvents": []})");
  StatusOr<BinaryBody> b = SplitBinaryBody(body);
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_EQ((8 + b->json.size()) % 64, 0u) << "the tensor bytes begin on a multiple of 64";
  EXPECT_NE(b->json.find(R"("trace":{"traceEvents": []})"), std::string_view::npos) << b->json;
  EXPECT_NE(b->json.find(R"("ids":{"dtype":"int64","shape":[2],"data_offsets":[128,144]})"),
            std::string_view::npos)
      << "each tensor begins on a multiple of 64: " << b->json;
  StatusOr<NamedTensors> back = ParseRunOutputsBinary(body);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  ASSERT_EQ(back->size(), outputs.size());
  for (size_t i = 0; i < outputs.size(); ++i) {
    EXPECT_EQ((*back)[i].first, outputs[i].first);
    EXPECT_TRUE(TensorsEqual((*back)[i].second, outputs[i].second)) << outputs[i].first;
  }
  // No outputs: a valid body of its JSON alone.
  StatusOr<NamedTensors> none = ParseRunOutputsBinary(RunOutputsToBinary({}));
  ASSERT_TRUE(none.ok()) << none.status().ToString();
  EXPECT_TRUE(none->empty());
}

TEST(BinaryBody, ARequestWritesBinaryAsItsEncoding) {
  RunRequest r;
  r.fetches = {"y"};
  r.binary_outputs = true;
  StatusOr<RunRequest> back = ParseRunRequestJson(RunRequestToJson(r));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_TRUE(back->binary_outputs);
}

}  // namespace
}  // namespace flowstate::api

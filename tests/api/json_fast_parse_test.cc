// The codec's fast JSON reader against nlohmann's parser: on every document
// it accepts it must build the same DOM (types included: unsigned, integer,
// float), and it must leave to nlohmann everything it cannot be sure of.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "api/json_codec.h"
#include "api/json_internal.h"

namespace flowstate::api::internal {
namespace {

// Same types and values, recursively, objects in the same order.
void ExpectSame(const Json& a, const Json& b, const std::string& where) {
  ASSERT_EQ(a.type(), b.type()) << where << ": " << a.dump() << " vs " << b.dump();
  if (a.is_array()) {
    ASSERT_EQ(a.size(), b.size()) << where;
    for (size_t i = 0; i < a.size(); ++i) ExpectSame(a[i], b[i], where + "[" + std::to_string(i) + "]");
  } else if (a.is_object()) {
    ASSERT_EQ(a.size(), b.size()) << where;
    auto ib = b.begin();
    for (auto ia = a.begin(); ia != a.end(); ++ia, ++ib) {
      ASSERT_EQ(ia.key(), ib.key()) << where;
      ExpectSame(*ia, *ib, where + "." + ia.key());
    }
  } else if (a.is_number_float()) {
    // Bit for bit (NaN cannot come from JSON text).
    ASSERT_EQ(a.get<double>(), b.get<double>()) << where;
    ASSERT_EQ(std::signbit(a.get<double>()), std::signbit(b.get<double>())) << where;
  } else {
    ASSERT_EQ(a, b) << where;
  }
}

void ExpectFastMatches(const std::string& text) {
  Json fast;
  ASSERT_TRUE(FastParseJson(text, &fast)) << "left to nlohmann: " << text.substr(0, 200);
  Json slow = Json::parse(text);
  ExpectSame(fast, slow, text.substr(0, 80));
}

void ExpectLeftToNlohmann(const std::string& text) {
  Json out = "untouched";
  EXPECT_FALSE(FastParseJson(text, &out)) << text;
  EXPECT_EQ(out, Json("untouched")) << text;
}

TEST(JsonFastParseTest, PlainDocumentsMatchNlohmann) {
  for (const char* text : {
           "0", "-0", "1", "-1", "123456789012345678", "-123456789012345678", "0.5", "-0.0",
           "1e5", "1E-5", "2.5e+3", "1.7976931348623157e308", "4.9e-324", "0.1", "3.14159",
           "true", "false", "null", "\"\"", "\"abc def\"", "[]", "{}", "[[]]", "[{}]",
           " \t\r\n[ 1 , 2 ,3 ] \n", R"({"a": 1, "b": [1, 2.0, -3], "c": {"d": null}})",
           R"({"z": 1, "a": 2})", R"({"a": 1, "a": 2, "b": 3})", R"({"a": [1], "a": "x"})",
           R"({"inputs": {"x": {"dtype": "float32", "shape": [2, 2], "data": [1, 2.5, -3e2, 0]}},
               "fetches": ["logits", "y:1"], "encoding": "b64"})",
           "[[1, 2], [3, 4], [5, 6]]", "[true, false, null, \"x\", 1, -1, 1.5]",
       }) {
    ExpectFastMatches(text);
  }
}

TEST(JsonFastParseTest, RandomNumbersMatchNlohmannBitForBit) {
  constexpr int64_t kE18 = 1000000000000000000;
  std::mt19937_64 rng(7);
  std::string text = "[";
  for (int i = 0; i < 20000; ++i) {
    if (i) text += ",";
    switch (i % 5) {
      // Integers of up to 18 digits (longer ones are nlohmann's to read).
      case 0: text += std::to_string((int64_t(rng()) >> (rng() % 64)) % kE18); break;
      case 1: text += std::to_string((rng() >> (rng() % 64)) % uint64_t(kE18)); break;
      case 2: {
        double d;
        uint64_t bits = rng();
        std::memcpy(&d, &bits, sizeof d);
        if (!std::isfinite(d)) d = 1.25;
        char buf[64];
        std::snprintf(buf, sizeof buf, "%.17g", d);
        text += buf;
        if (text.find_first_of(".eE", text.rfind(',') + 1) == std::string::npos) text += ".0";
        break;
      }
      case 3: {
        char buf[64];
        std::snprintf(buf, sizeof buf, "%.9g", std::uniform_real_distribution<float>(-1, 1)(rng));
        text += buf;
        break;
      }
      default: text += std::to_string(rng() % 256); break;
    }
  }
  text += "]";
  ExpectFastMatches(text);
}

TEST(JsonFastParseTest, LeavesWhatItIsNotSureOfToNlohmann) {
  for (const char* text : {
           // Malformed: nlohmann gives the error message.
           "", " ", "[", "[1,]", "[,1]", "{\"a\"}", "{\"a\":}", "{\"a\":1,}", "{a:1}", "01",
           "-", "1.", ".5", "1e", "1e+", "+1", "[1 2]", "{\"a\":1 \"b\":2}", "[1]x", "tru",
           "nul", "\"abc", "NaN", "[Infinity]", "'a'", "[1]]",
           // Valid, but nlohmann decides: escapes, UTF-8, huge or out-of-range numbers.
           "\"a\\nb\"", "\"\\u00e9\"", "\"\xc3\xa9\"", "1234567890123456789", "-1234567890123456789",
           "18446744073709551616", "1e999", "-1e999", "1e-400", "\"a\tb\"",
       }) {
    ExpectLeftToNlohmann(text);
  }
  std::string deep(100, '[');
  deep += std::string(100, ']');
  ExpectLeftToNlohmann(deep);
}

TEST(JsonFastParseTest, CodecResultsAndErrorsAreTheSameEitherWay) {
  // A tensor body the fast reader takes, and the same with an escape in a
  // key (left to nlohmann): the same tensor.
  StatusOr<Tensor> a = ParseTensorJson(R"({"dtype": "uint8", "shape": [3], "data": [1, 2, 255]})");
  StatusOr<Tensor> b = ParseTensorJson(R"({"dtyp\u0065": "uint8", "shape": [3], "data": [1, 2, 255]})");
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_EQ(a->dtype(), DataType::kUInt8);
  EXPECT_EQ(b->dtype(), DataType::kUInt8);
  EXPECT_EQ(a->data<uint8_t>()[2], 255);
  EXPECT_EQ(b->data<uint8_t>()[2], 255);
  // An out-of-range element is found by the codec after either reader.
  StatusOr<Tensor> c = ParseTensorJson(R"({"dtype": "uint8", "shape": [2], "data": [1, 256]})");
  EXPECT_FALSE(c.ok());
  EXPECT_EQ(c.status().message(), "tensor.data[1]: 256 is out of range for uint8");
  // Malformed text keeps nlohmann's message.
  StatusOr<Tensor> d = ParseTensorJson("[1, 2");
  EXPECT_FALSE(d.ok());
  EXPECT_EQ(d.status().message().rfind("tensor: malformed JSON: parse error at line 1", 0), 0u)
      << d.status().message();
}

// Packed tensor data (FastParseJson with pack_tensor_data): a run or predict
// request's tensors come out as TensorFromJson makes them from nlohmann's
// DOM -- the same dtype, shape and bytes, or the same error -- for random
// "data" arrays of every number form, with and without a dtype, of the
// right or the wrong length, with now and then an element that is not a
// number (the array is then read as a DOM).
TEST(JsonFastParseTest, PackedTensorDataReadsAsTheDomWould) {
  std::mt19937_64 rng(20261203);
  const char* kDtypes[] = {"float32", "float64", "int32", "int64", "uint8", "int8",
                           "uint64", "bool", "float16", "bfloat16", nullptr};
  const char* kNumbers[] = {"0", "-0", "1", "7", "255", "256", "-1", "-129", "2147483647",
                            "2147483648", "-2147483649", "9007199254740993", "123456789012345678",
                            "1.5", "-2.25", "2.0", "1e3", "1E-3", "-0.0", "3.4e38", "3.5e38",
                            "1e-46", "65504", "65520", "1e300", "0.1", "12.5e1"};
  const char* kOthers[] = {"true", "false", "null", "\"NaN\"", "\"Infinity\"", "[1]", "{}",
                           "\"x\""};
  int packed_ok = 0, errors = 0;
  for (int iter = 0; iter < 3000; ++iter) {
    const char* dtype = kDtypes[rng() % (sizeof kDtypes / sizeof *kDtypes)];
    int n = 1 + int(rng() % 40);
    std::string data = "[";
    for (int i = 0; i < n; ++i) {
      if (i) data += rng() % 4 == 0 ? " , " : ",";
      if (rng() % 60 == 0) {
        data += kOthers[rng() % (sizeof kOthers / sizeof *kOthers)];
      } else if (rng() % 3 == 0) {
        data += std::to_string(int64_t(rng() % 200) - 100);
      } else {
        data += kNumbers[rng() % (sizeof kNumbers / sizeof *kNumbers)];
      }
    }
    data += "]";
    int dims = rng() % 8 == 0 ? n + 1 : n;  // now and then the wrong length
    std::string tensor = std::string("{") + (dtype ? "\"dtype\": \"" + std::string(dtype) + "\", " : "") +
                         "\"shape\": [" + std::to_string(dims) + "], \"data\": " + data + "}";
    const bool run = iter % 2 == 0;
    std::string body = run ? R"({"feeds": {"x": )" + tensor + R"(}, "fetches": ["y"]})"
                           : R"({"fetches": ["y"], "inputs": {"x": )" + tensor + "}}";
    JsonPath root("");
    JsonPath map = root.Key(run ? "feeds" : "inputs");  // a JsonPath points to its parent
    JsonPath where = map.Key("x");
    StatusOr<Tensor> want = TensorFromJson(Json::parse(tensor), std::nullopt, where, size_t(1) << 20);
    StatusOr<Tensor> got = [&]() -> StatusOr<Tensor> {
      if (run) {
        StatusOr<RunRequest> r = ParseRunRequestJson(body);
        if (!r.ok()) return r.status();
        return r->feeds.at(0).second;
      }
      StatusOr<PredictRequest> r = ParsePredictRequestJson(body);
      if (!r.ok()) return r.status();
      return r->inputs.at(0).second;
    }();
    ASSERT_EQ(got.ok(), want.ok()) << body << "\n"
                                   << (got.ok() ? want.status() : got.status()).ToString();
    if (!want.ok()) {
      ++errors;
      ASSERT_EQ(got.status().ToString(), want.status().ToString()) << body;
      continue;
    }
    ++packed_ok;
    ASSERT_EQ(got->dtype(), want->dtype()) << body;
    ASSERT_EQ(got->shape(), want->shape()) << body;
    ASSERT_EQ(got->TotalBytes(), want->TotalBytes());
    if (want->TotalBytes() > 0) {  // an empty tensor's data is null
      ASSERT_EQ(std::memcmp(got->raw_data(), want->raw_data(), want->TotalBytes()), 0) << body;
    }
  }
  // Both outcomes were exercised.
  EXPECT_GT(packed_ok, 300);
  EXPECT_GT(errors, 300);
}

// Only tensor data is packed: the same arrays elsewhere in a request, or in
// a document that is not a request, stay arrays.
TEST(JsonFastParseTest, OnlyTensorDataIsPacked) {
  Json v;
  ASSERT_TRUE(FastParseJson(R"({"feeds": {"x": {"shape": [2], "data": [1, 2]}, "y": [3, 4]},
                                "data": [5, 6], "fetches": []})",
                            &v, /*pack_tensor_data=*/true));
  EXPECT_TRUE(v["feeds"]["x"]["data"].is_binary());
  EXPECT_TRUE(v["feeds"]["x"]["shape"].is_array());
  EXPECT_TRUE(v["feeds"]["y"].is_array());  // the nested form
  EXPECT_TRUE(v["data"].is_array());
  std::vector<PackedNumber> numbers = UnpackNumbers(v["feeds"]["x"]["data"]);
  ASSERT_EQ(numbers.size(), 2u);
  EXPECT_EQ(numbers[1].ToJson(), Json(2));
  ASSERT_TRUE(FastParseJson(R"({"feeds": {"x": {"data": [1, 2]}}})", &v));
  EXPECT_TRUE(v["feeds"]["x"]["data"].is_array());  // not asked to pack
  ASSERT_TRUE(FastParseJson(R"({"feeds": {"x": {"data": [1, true]}}})", &v, true));
  EXPECT_TRUE(v["feeds"]["x"]["data"].is_array());  // not numbers only
}

TEST(JsonFastParseTest, DocumentsOfAnyDepthAreReleased) {
  // Nested arrays and objects, and a nesting far deeper than the fast
  // release goes (the rest is nlohmann's, which needs no stack): none
  // crashes, and what a Document held is gone with it. (The deepest
  // document the nesting limit lets through.)
  {
    Document doc;
    ASSERT_TRUE(ParseJsonText(R"({"a": [[1, 2], {"b": [3, [4, 5]]}], "c": "x"})", JsonPath(""),
                              doc.get()).ok());
    EXPECT_EQ((*doc)["a"][1]["b"][1][1], 5);
  }
  const int saved = MaxJsonDepth();
  ASSERT_TRUE(SetMaxJsonDepth(kMaxJsonDepthCeiling).ok());
  std::string deep(kMaxJsonDepthCeiling, '[');
  deep += std::string(kMaxJsonDepthCeiling, ']');
  {
    Document doc;
    ASSERT_TRUE(ParseJsonText(deep, JsonPath(""), doc.get()).ok());
    EXPECT_TRUE(doc->is_array());
  }
  ASSERT_TRUE(SetMaxJsonDepth(saved).ok());
}

}  // namespace
}  // namespace flowstate::api::internal

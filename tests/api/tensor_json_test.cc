#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include "api/base64.h"
#include "api/json_codec.h"
#include "graph/tensor.h"
#include "tests/api/test_util.h"

namespace flowstate::api {
namespace {

using test::ExpectError;
using test::ExpectInvalid;

constexpr Encoding kEncodings[] = {Encoding::kData, Encoding::kB64, Encoding::kNested};

// A tensor of `dtype` with bit patterns from `rng`: every finite value,
// infinities, zeros of both signs and subnormals can appear; NaNs are the
// canonical quiet NaN (the only one JSON carries).
Tensor RandomTensor(DataType dtype, const TensorShape& shape, uint64_t seed) {
  Tensor t(dtype, shape);
  std::mt19937_64 rng(seed);
  DispatchDataType(dtype, [&]<typename T>() {
    T* d = t.data<T>();
    for (int64_t i = 0; i < t.num_elements(); ++i) {
      if constexpr (std::is_same_v<T, bool>) {
        d[i] = (rng() & 1) != 0;
      } else {
        uint64_t bits = rng();
        std::memcpy(static_cast<void*>(&d[i]), &bits, sizeof(T));
        if constexpr (std::is_floating_point_v<T>) {
          if (std::isnan(d[i])) d[i] = std::numeric_limits<T>::quiet_NaN();
        } else if constexpr (!std::is_integral_v<T>) {  // Half, BFloat16
          if (std::isnan(float(d[i]))) d[i] = T(std::numeric_limits<float>::quiet_NaN());
        }
      }
    }
  });
  return t;
}

void ExpectRoundTrip(const Tensor& t, Encoding e) {
  std::string json = TensorToJson(t, e);
  // A nested array carries no dtype: the reader supplies it.
  StatusOr<Tensor> back = ParseTensorJson(json, t.dtype());
  ASSERT_TRUE(back.ok()) << back.status().ToString() << "\n" << json.substr(0, 300);
  EXPECT_TRUE(TensorsEqual(t, *back))
      << DataTypeName(t.dtype()) << " " << EncodingName(e) << ": " << t.DebugString() << " vs "
      << back->DebugString();
  if (e != Encoding::kNested) {
    StatusOr<Tensor> self_typed = ParseTensorJson(json);
    ASSERT_TRUE(self_typed.ok()) << self_typed.status().ToString();
    EXPECT_TRUE(TensorsEqual(t, *self_typed));
  }
}

TEST(TensorJson, RoundTripsEveryDtypeAndEncoding) {
  const TensorShape shapes[] = {TensorShape(), TensorShape({7}), TensorShape({2, 3}),
                                TensorShape({1, 2, 1, 3}), TensorShape({0}), TensorShape({2, 0})};
  uint64_t seed = 1;
  for (DataType dtype : AllDataTypes()) {
    for (const TensorShape& shape : shapes) {
      Tensor t = RandomTensor(dtype, shape, seed++);
      for (Encoding e : kEncodings) {
        SCOPED_TRACE(std::string(DataTypeName(dtype)) + shape.ToString() + " " +
                     std::string(EncodingName(e)));
        ExpectRoundTrip(t, e);
      }
    }
  }
}

TEST(TensorJson, RoundTripsManyFloats) {
  for (DataType dtype : {DataType::kFloat32, DataType::kFloat64, DataType::kInt64}) {
    Tensor t = RandomTensor(dtype, TensorShape({20000}), 99);
    for (Encoding e : kEncodings) ExpectRoundTrip(t, e);
  }
}

TEST(TensorJson, RoundTripsEveryHalfAndBFloat16Value) {
  for (DataType dtype : {DataType::kFloat16, DataType::kBFloat16}) {
    Tensor t(dtype, TensorShape({65536}));
    auto* bits = static_cast<uint16_t*>(t.raw_data());
    for (uint32_t i = 0; i < 65536; ++i) bits[i] = uint16_t(i);
    // NaNs read back as the canonical quiet NaN: write them so.
    const float nan = std::numeric_limits<float>::quiet_NaN();
    for (uint32_t i = 0; i < 65536; ++i) {
      if (std::isnan(t.ElementAsDouble(i))) {
        bits[i] = dtype == DataType::kFloat16 ? Half(nan).bits : BFloat16(nan).bits;
      }
    }
    for (Encoding e : kEncodings) ExpectRoundTrip(t, e);
  }
}

TEST(TensorJson, FloatThatDoubleRoundingWouldBreak) {
  // Its shortest decimal, 7.038531e-26, read as a double and then rounded to
  // float lands one ulp off; the codec corrects that.
  Tensor t = Tensor::FromVector<float>({7.0385307e-26f});
  EXPECT_EQ(TensorToJson(t, Encoding::kNested), "[7.038531e-26]");
  ExpectRoundTrip(t, Encoding::kData);
  ExpectRoundTrip(t, Encoding::kNested);
}

TEST(TensorJson, PrintsShortestFloatsAlwaysAsFloats) {
  EXPECT_EQ(TensorToJson(Tensor::FromVector<float>({0.1f, 1.0f, -2.5f, 1e10f, -0.0f}),
                         Encoding::kNested),
            "[0.1,1.0,-2.5,1e+10,-0.0]");
  EXPECT_EQ(TensorToJson(Tensor::Scalar<double>(0.1), Encoding::kNested), "0.1");
  EXPECT_EQ(TensorToJson(Tensor::FromVector<float>({1, 2.5, 3, 4}, TensorShape({2, 2})),
                         Encoding::kData),
            R"({"dtype":"float32","shape":[2,2],"data":[1.0,2.5,3.0,4.0]})");
  EXPECT_EQ(TensorToJson(Tensor::FromVector<int32_t>({1, -2}), Encoding::kB64),
            R"({"dtype":"int32","shape":[2],"b64":"AQAAAP7///8="})");
  EXPECT_EQ(TensorToJson(Tensor::FromVector<bool>({true, false}), Encoding::kNested),
            "[true,false]");
  EXPECT_EQ(TensorToJson(Tensor(DataType::kFloat32, TensorShape({2, 0})), Encoding::kNested),
            "[[],[]]");
  EXPECT_EQ(TensorToJson(Tensor(), Encoding::kData), "null");
}

TEST(TensorJson, NonFiniteFloatsAreStrings) {
  const float inf = std::numeric_limits<float>::infinity();
  Tensor t = Tensor::FromVector<float>({std::numeric_limits<float>::quiet_NaN(), inf, -inf});
  EXPECT_EQ(TensorToJson(t, Encoding::kNested), R"(["NaN","Infinity","-Infinity"])");
  StatusOr<Tensor> back = ParseTensorJson(R"(["nan", "inf", "-INFINITY", "+Inf", 1])");
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->dtype(), DataType::kFloat32);
  EXPECT_TRUE(std::isnan(back->flat<float>()[0]));
  EXPECT_EQ(back->flat<float>()[1], inf);
  EXPECT_EQ(back->flat<float>()[2], -inf);
  EXPECT_EQ(back->flat<float>()[3], inf);
  EXPECT_EQ(back->flat<float>()[4], 1.0f);
  ExpectInvalid(ParseTensorJson(R"(["NaN"])", DataType::kInt32),
                "tensor[0]: expected an integer (dtype int32), got \"NaN\"");
}

TEST(TensorJson, InfersDtypes) {
  struct Case {
    const char* json;
    DataType dtype;
    TensorShape shape;
  } cases[] = {
      {"[[1, 2], [3, 4]]", DataType::kInt32, TensorShape({2, 2})},
      {"[1, 2.5]", DataType::kFloat32, TensorShape({2})},
      {"[1.0]", DataType::kFloat32, TensorShape({1})},
      {"[1e3]", DataType::kFloat32, TensorShape({1})},
      {"[true, false]", DataType::kBool, TensorShape({2})},
      {"[1, 3000000000]", DataType::kInt64, TensorShape({2})},
      {"[-2147483649]", DataType::kInt64, TensorShape({1})},
      {"[]", DataType::kFloat32, TensorShape({0})},
      {"[[], []]", DataType::kFloat32, TensorShape({2, 0})},
      {"5", DataType::kInt32, TensorShape()},
      {"\"NaN\"", DataType::kFloat32, TensorShape()},
      {"false", DataType::kBool, TensorShape()},
      {R"({"shape": [2], "data": [1, 2]})", DataType::kInt32, TensorShape({2})},
      {R"({"shape": [1], "data": [0.5]})", DataType::kFloat32, TensorShape({1})},
  };
  for (const Case& c : cases) {
    StatusOr<Tensor> t = ParseTensorJson(c.json);
    ASSERT_TRUE(t.ok()) << c.json << ": " << t.status().ToString();
    EXPECT_EQ(t->dtype(), c.dtype) << c.json;
    EXPECT_EQ(t->shape(), c.shape) << c.json;
  }
  StatusOr<Tensor> t = ParseTensorJson("[[1, 2], [3, 4]]");
  ASSERT_TRUE(t.ok());
  EXPECT_TRUE(TensorsEqual(*t, Tensor::FromVector<int32_t>({1, 2, 3, 4}, TensorShape({2, 2}))));
}

TEST(TensorJson, ExpectedDtypeConvertsValues) {
  StatusOr<Tensor> t = ParseTensorJson("[[1, 2], [3, 4.5]]", DataType::kFloat64);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_TRUE(TensorsEqual(*t, Tensor::FromVector<double>({1, 2, 3, 4.5}, TensorShape({2, 2}))));
  // An integral float is an integer.
  t = ParseTensorJson("[2.0, -0.0, 255]", DataType::kUInt8);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_TRUE(TensorsEqual(*t, Tensor::FromVector<uint8_t>({2, 0, 255})));
  t = ParseTensorJson("[-9223372036854775808, 9223372036854775807]", DataType::kInt64);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(t->flat<int64_t>()[0], std::numeric_limits<int64_t>::min());
  EXPECT_EQ(t->flat<int64_t>()[1], std::numeric_limits<int64_t>::max());
  t = ParseTensorJson("[65504, 0.1]", DataType::kFloat16);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(float(t->flat<Half>()[0]), 65504.0f);
  EXPECT_EQ(t->flat<Half>()[1].bits, Half(0.1f).bits);
  t = ParseTensorJson(R"({"dtype": "bfloat16", "shape": [1], "data": [3]})");
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(float(t->flat<BFloat16>()[0]), 3.0f);
  // kInvalid expects nothing.
  t = ParseTensorJson("[1, 2]", DataType::kInvalid);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(t->dtype(), DataType::kInt32);
  // The object may omit a dtype the caller expects.
  t = ParseTensorJson(R"({"shape": [1], "b64": "AQ=="})", DataType::kUInt8);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(t->flat<uint8_t>()[0], 1);
}

// A JSON tensor ParseTensorJson refuses, and the message it must give.
struct InvalidCase {
  const char* json;
  std::optional<DataType> dtype;  // nullopt: from the JSON
  const char* error;
};

template <size_t N>
void ExpectEachInvalid(const InvalidCase (&cases)[N]) {
  for (const InvalidCase& c : cases) {
    SCOPED_TRACE(c.json);
    ExpectInvalid(ParseTensorJson(c.json, c.dtype), c.error);
  }
}

TEST(TensorJson, RejectsValuesOutOfRange) {
  const InvalidCase cases[] = {
      {"[1, 300]", DataType::kUInt8,
       "tensor[1]: 300 is out of range for uint8"},
      {"[[1, -1]]", DataType::kUInt8,
       "tensor[0][1]: -1 is out of range for uint8"},
      {"[[1, 2], [3, 1.5]]", DataType::kInt32,
       "tensor[1][1]: expected an integer (dtype int32), got 1.5"},
      {"[2147483648]", DataType::kInt32,
       "tensor[0]: 2147483648 is out of range for int32"},
      {"[9223372036854775808]", DataType::kInt64,
       "tensor[0]: 9223372036854775808 is out of range for int64"},
      {"[1e19]", DataType::kInt64,
       "tensor[0]: 1e+19 is out of range for int64"},
      {"[1e39]", std::nullopt,
       "tensor[0]: 1e+39 is out of range for float32"},
      {"1e999", DataType::kFloat64,
       "tensor: malformed JSON: number overflow parsing '1e999'"},
      {"[70000]", DataType::kFloat16,
       "tensor[0]: 70000 is out of range for float16"},
      {"[3.4e38]", DataType::kBFloat16,
       "tensor[0]: 3.4e+38 is out of range for bfloat16"},
      {"[true, 1]", DataType::kInt32,
       "tensor[0]: expected an integer (dtype int32), got true"},
      {"[0, 1]", DataType::kBool,
       "tensor[0]: expected a bool (dtype bool), got 0"},
      {R"({"dtype": "float32", "shape": [2], "data": [1, "x"]})", std::nullopt,
       "tensor.data[1]: expected a number (dtype float32), got \"x\""},
      {R"({"dtype": "int32", "shape": [2], "data": [1, [2]]})", std::nullopt,
       "tensor.data[1]: expected an integer (dtype int32), got an array"},
  };
  ExpectEachInvalid(cases);
}

TEST(TensorJson, RejectsRaggedAndMixedArrays) {
  const InvalidCase cases[] = {
      {"[[1, 2], [3]]", std::nullopt,
       "tensor[1]: expected 2 elements like tensor[0], got 1"},
      {"[[1, 2], 3]", std::nullopt,
       "tensor[1]: expected an array of 2 elements like tensor[0], got 3"},
      {"[1, [2]]", std::nullopt,
       "tensor[1]: expected a scalar like tensor[0], got an array"},
      {"[[[1], [2]], [[3], [4, 5]]]", std::nullopt,
       "tensor[1][1]: expected 1 elements like tensor[0][0], got 2"},
      {"[[], [1]]", std::nullopt,
       "tensor[1]: expected 0 elements like tensor[0]"},
      {"[true, 1]", std::nullopt,
       "tensor[1]: expected a bool like tensor[0], got 1"},
      {"[[1, 2], [false, 3]]", std::nullopt,
       "tensor[1][0]: expected a number like tensor[0][0], got false"},
      {R"([1, "a"])", std::nullopt,
       "tensor[1]: expected a number or a bool, got \"a\""},
      {"[1, null]", std::nullopt,
       "tensor[1]: expected a number or a bool, got null"},
      {"[1, {}]", DataType::kFloat32,
       "tensor[1]: expected a number (dtype float32), got an object"},
      {"[[[[[[[[[1]]]]]]]]]", std::nullopt,
       "tensor: the nested array has more than the maximum 8 dimensions"},
      {"null", std::nullopt,
       "tensor: expected a tensor"},
  };
  ExpectEachInvalid(cases);
  ExpectInvalid(ParseTensorJson("[[1, 2], [3]]", std::nullopt, "feeds.x"),
                "feeds.x[1]: expected 2 elements like feeds.x[0], got 1");
}

TEST(TensorJson, RejectsMalformedObjects) {
  ExpectInvalid(ParseTensorJson(R"({"dtype": "float32", "shape": [2, 2], "data": [1, 2, 3]})"),
                "tensor.data: expected 4 values for shape [2, 2], got 3");
  ExpectInvalid(ParseTensorJson(R"({"dtype": "float32", "data": [1]})"),
                "tensor: missing \"shape\"");
  ExpectInvalid(ParseTensorJson(R"({"dtype": "float32", "shape": [1], "data": [1], "colour": 1})"),
                "tensor.colour: unknown field (a tensor has \"dtype\", \"shape\", \"data\", "
                "\"b64\", \"data_offsets\")");
  ExpectInvalid(ParseTensorJson(R"({"dtype": "uint8", "shape": [1], "data": [1], "b64": "AQ=="})"),
                "tensor: has more than one of \"data\", \"b64\" and \"data_offsets\"; give one");
  ExpectInvalid(ParseTensorJson(R"({"dtype": "uint8", "shape": [1]})"),
                "tensor: needs \"data\" (the values), \"b64\" (the bytes) or, in a binary body, "
                "\"data_offsets\"");
  ExpectInvalid(ParseTensorJson(R"({"dtype": "uint8", "shape": [1], "data_offsets": [0, 1]})"),
                "tensor.data_offsets: only a binary body (Content-Type "
                "application/x-flowstate-tensors) has tensor bytes to point into");
  ExpectInvalid(ParseTensorJson(R"({"dtype": "float33", "shape": [1], "data": [1]})"),
                "tensor.dtype: unknown dtype 'float33'");
  ExpectInvalid(ParseTensorJson(R"({"dtype": 1, "shape": [1], "data": [1]})"),
                "tensor.dtype: expected a dtype name, got 1");
  ExpectInvalid(ParseTensorJson(R"({"dtype": "int32", "shape": [2, -1], "data": [1]})"),
                "tensor.shape[1]: expected a dimension (an int >= 0), got -1");
  ExpectInvalid(ParseTensorJson(R"({"dtype": "int32", "shape": 2, "data": [1, 2]})"),
                "tensor.shape: expected a shape (an array of dimensions), got 2");
  ExpectInvalid(ParseTensorJson(R"({"shape": [1,1,1,1,1,1,1,1,1], "data": [1]})"),
                "tensor.shape: shape has rank 9");
  ExpectInvalid(ParseTensorJson(R"({"dtype": "int32", "shape": [1], "data": 1})"),
                "tensor.data: expected an array of values, got 1");
  ExpectInvalid(ParseTensorJson(R"({"dtype": "int32", "shape": [2], "data": [1, 2]})",
                                DataType::kFloat32),
                "tensor.dtype: the tensor is int32 but float32 is expected here");
  ExpectInvalid(ParseTensorJson("[1, 2"), "tensor: malformed JSON: parse error at line 1");
  ExpectInvalid(ParseTensorJson(""), "tensor: malformed JSON");
}

TEST(TensorJson, RejectsBadB64) {
  ExpectInvalid(ParseTensorJson(R"({"dtype": "float32", "shape": [2], "b64": "AACAPw=="})"),
                "tensor.b64: decodes to 4 bytes, but a float32[2] tensor has 8");
  ExpectInvalid(ParseTensorJson(R"({"shape": [1], "b64": "AQ=="})"),
                "tensor: a \"b64\" tensor needs a \"dtype\"");
  ExpectInvalid(ParseTensorJson(R"({"dtype": "uint8", "shape": [2], "b64": "A!I="})"),
                "tensor.b64: malformed base64: character 1 is not a base64 digit");
  ExpectInvalid(ParseTensorJson(R"({"dtype": "uint8", "shape": [3], "b64": "AQI"})"),
                "tensor.b64: decodes to 2 bytes, but a uint8[3] tensor has 3");
  ExpectInvalid(ParseTensorJson(R"({"dtype": "uint8", "shape": [2], "b64": "AQIDB"})"),
                "tensor.b64: malformed base64");
  ExpectInvalid(ParseTensorJson(R"({"dtype": "uint8", "shape": [2], "b64": 5})"),
                "tensor.b64: expected a base64 string, got 5");
  ExpectInvalid(ParseTensorJson(R"({"dtype": "bool", "shape": [2], "b64": "AQI="})"),
                "tensor.b64: byte 1 is 2, not a bool (0 or 1)");
}

TEST(TensorJson, UnpaddedAndUrlSafeB64) {
  StatusOr<Tensor> t = ParseTensorJson(R"({"dtype": "uint8", "shape": [3], "b64": "-_8"})");
  // "-_8" is 18 bits: 2 bytes, not 3.
  ExpectInvalid(t, "tensor.b64: decodes to 2 bytes");
  t = ParseTensorJson(R"({"dtype": "uint8", "shape": [2], "b64": "-_8"})");
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_TRUE(TensorsEqual(*t, Tensor::FromVector<uint8_t>({0xfb, 0xff})));
}

TEST(TensorJson, SizeLimit) {
  ExpectError(ParseTensorJson("[1, 2, 3]", std::nullopt, "tensor", 8), Code::kResourceExhausted,
              "tensor: a tensor of int32[3] takes 12 bytes, more than the limit of 8 bytes");
  EXPECT_TRUE(ParseTensorJson("[1, 2]", std::nullopt, "tensor", 8).ok());
  ExpectError(ParseTensorJson(R"({"dtype": "float64", "shape": [1000000000], "data": [1]})",
                              std::nullopt, "feeds.x"),
              Code::kResourceExhausted,
              "feeds.x: a tensor of float64[1000000000] takes 8000000000 bytes");
  ExpectError(ParseTensorJson(R"({"dtype": "uint8", "shape": [4611686018427387904, 4],
                                  "b64": ""})"),
              Code::kInvalidArgument, "tensor.shape: shape has too many elements");
  ExpectError(ParseTensorJson(R"({"dtype": "int64", "shape": [1152921504606846976, 4],
                                  "b64": ""})"),
              Code::kResourceExhausted, "tensor: a tensor of int64[1152921504606846976, 4] takes "
                                        "more than 2^64 bytes");
  ExpectError(ParseTensorJson(R"({"dtype": "uint8", "shape": [9], "b64": "AAAAAAAAAAAA"})",
                              std::nullopt, "tensor", 8),
              Code::kResourceExhausted, "tensor: a tensor of uint8[9] takes 9 bytes");
}

TEST(Base64, Rfc4648Vectors) {
  const std::pair<const char*, const char*> vectors[] = {
      {"", ""},         {"f", "Zg=="},         {"fo", "Zm8="},        {"foo", "Zm9v"},
      {"foob", "Zm9vYg=="}, {"fooba", "Zm9vYmE="}, {"foobar", "Zm9vYmFy"}};
  for (const auto& [plain, encoded] : vectors) {
    EXPECT_EQ(Base64Encode(plain), encoded);
    for (std::string text : {std::string(encoded), std::string(encoded).substr(
                                                       0, std::string(encoded).find('='))}) {
      StatusOr<size_t> n = Base64DecodedSize(text);
      ASSERT_TRUE(n.ok()) << text;
      ASSERT_EQ(*n, std::strlen(plain)) << text;
      std::string out(*n, '\0');
      ASSERT_TRUE(Base64Decode(text, out.data(), out.size()).ok()) << text;
      EXPECT_EQ(out, plain);
    }
  }
  EXPECT_FALSE(Base64DecodedSize("Zg=").ok());
  EXPECT_FALSE(Base64DecodedSize("Z===").ok());
  EXPECT_FALSE(Base64DecodedSize("Zm9vY").ok());
  char buf[2];
  EXPECT_FALSE(Base64Decode("Z=g=", buf, 1).ok());  // '=' inside
  EXPECT_FALSE(Base64Decode("Zm 9", buf, 2).ok());
}

TEST(Base64, AllByteValues) {
  std::string bytes;
  for (int i = 0; i < 256; ++i) bytes.push_back(char(i));
  for (size_t len = 0; len < 10; ++len) {
    std::string in = bytes.substr(len) + bytes.substr(0, len);
    std::string text = Base64Encode(in.substr(0, 250 + len % 3));
    std::string out(*Base64DecodedSize(text), '\0');
    ASSERT_TRUE(Base64Decode(text, out.data(), out.size()).ok());
    EXPECT_EQ(out, in.substr(0, 250 + len % 3));
  }
}

}  // namespace
}  // namespace flowstate::api

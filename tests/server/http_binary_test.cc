// Binary bodies over REST (api/json_codec.h, "Binary bodies"; README, "Large
// tensors"): a run whose feeds follow the JSON as raw bytes, its binary
// answer, and the errors of a bad frame -- 400 naming the field, nothing run.
#include <cstring>

#include "tests/server/http_routes_fixture.h"

namespace flowstate {
namespace http_routes_test {
namespace {

std::string Frame(const std::string& json, const std::string& bytes) {
  std::string out;
  uint64_t n = json.size();
  for (int i = 0; i < 8; ++i) out.push_back(char((n >> (8 * i)) & 0xff));
  return out + json + bytes;
}

std::string FloatBytes(std::initializer_list<float> values) {
  std::string out(values.size() * sizeof(float), '\0');
  std::memcpy(out.data(), std::data(values), out.size());
  return out;
}

class HttpBinaryTest : public HttpRoutesTest {
 protected:
  HttpResponse Binary(const std::string& target, const std::string& body,
                      const std::string& content_type = "application/x-flowstate-tensors") {
    HttpRequest r;
    r.method = "POST";
    r.target = target;
    r.body = body;
    r.headers.emplace("content-type", content_type);
    return HandleRequest(r, ctx_);
  }
};

TEST_F(HttpBinaryTest, ARunFeedsRawBytesAndAnswersInBinary) {
  const std::string id = CreateSession();
  const std::string feeds =
      R"({"feeds": {"x": {"dtype": "float32", "shape": [3], "data_offsets": [0, 12]}},
          "fetches": ["y"], "encoding": "binary"})";
  // The media type's case and parameters do not matter.
  for (const char* type : {"application/x-flowstate-tensors", "Application/X-Flowstate-Tensors; v=1"}) {
    HttpResponse r = Binary("/v1/sessions/" + id + "/run", Frame(feeds, FloatBytes({1, 2, 3})), type);
    ASSERT_EQ(r.status, 200) << r.body;
    EXPECT_EQ(r.content_type, "application/x-flowstate-tensors");
    StatusOr<api::NamedTensors> out = api::ParseRunOutputsBinary(r.body);
    ASSERT_TRUE(out.ok()) << out.status().ToString();
    ASSERT_EQ(out->size(), 1u);
    EXPECT_EQ((*out)[0].first, "y");
    EXPECT_TRUE(TensorsEqual((*out)[0].second, Tensor::FromVector<float>({2, 4, 6})));
  }
  // A binary request may ask for JSON, and a JSON request for binary.
  HttpResponse r = Binary("/v1/sessions/" + id + "/run",
                          Frame(R"({"feeds": {"x": {"dtype": "float32", "shape": [1],
                                    "data_offsets": [0, 4]}}, "fetches": ["y"], "encoding": "nested"})",
                                FloatBytes({5})));
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.content_type, "application/json");
  EXPECT_EQ(Json::parse(r.body), Json::parse(R"({"outputs": {"y": [10.0]}})"));
  r = Do("POST", "/v1/sessions/" + id + "/run",
         R"({"feeds": {"x": [1.5]}, "fetches": ["y"], "encoding": "binary"})");
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.content_type, "application/x-flowstate-tensors");
  StatusOr<api::NamedTensors> out = api::ParseRunOutputsBinary(r.body);
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  EXPECT_TRUE(TensorsEqual((*out)[0].second, Tensor::FromVector<float>({3})));
}

TEST_F(HttpBinaryTest, BadFramesAre400NamingTheFieldAndRunNothing) {
  const std::string id = CreateSession();
  const std::string run = "/v1/sessions/" + id + "/run";
  struct Case {
    std::string body;
    int status;
    const char* message;
  };
  const Case cases[] = {
      {"1234", 400, "a binary body (application/x-flowstate-tensors) begins with 8 bytes"},
      {Frame("", ""), 400, "the request has no body; expected a run request"},
      {Frame(R"({"feeds": {"x": {"dtype": "float32", "shape": [3], "data_offsets": [0, 16]}}})",
             FloatBytes({1, 2, 3, 4})),
       400, "feeds.x.data_offsets: spans 16 bytes, but a float32[3] tensor has 12"},
      {Frame(R"({"feeds": {"x": {"dtype": "float32", "shape": [3], "data_offsets": [4, 16]}}})",
             FloatBytes({1, 2})),
       400, "feeds.x.data_offsets[1]: expected a byte offset from 0 to 8"},
      // Over the route's tensor limit (1024 bytes here): 413, nothing allocated.
      {Frame(R"({"feeds": {"x": {"dtype": "float32", "shape": [512], "data_offsets": [0, 2048]}}})",
             std::string(2048, '\0')),
       413, "feeds.x:"},
      // A feed of the wrong dtype: the session refuses it, naming it.
      {Frame(R"({"feeds": {"x": {"dtype": "int32", "shape": [1], "data_offsets": [0, 4]}},
                 "fetches": ["y"]})", std::string(4, '\0')),
       400, ""},
  };
  for (const Case& c : cases) {
    HttpResponse r = Binary(run, c.body);
    EXPECT_EQ(r.status, c.status) << c.message << ": " << r.body;
    EXPECT_NE(r.content_type, "application/x-flowstate-tensors");
    EXPECT_NE(ErrorOf(r).message().find(c.message), std::string::npos)
        << "want '" << c.message << "' in: " << ErrorOf(r).message();
  }
  // The JSON form of a binary tensor, outside a binary body.
  HttpResponse r = Do("POST", run, R"({"feeds": {"x": {"dtype": "float32", "shape": [1],
                                       "data_offsets": [0, 4]}}, "fetches": ["y"]})");
  EXPECT_EQ(r.status, 400) << r.body;
  EXPECT_NE(ErrorOf(r).message().find("feeds.x.data_offsets: only a binary body"), std::string::npos)
      << ErrorOf(r).message();
  // The session is as it was.
  r = Do("POST", run, kRun);
  ASSERT_EQ(r.status, 200) << r.body;
}

}  // namespace
}  // namespace http_routes_test
}  // namespace flowstate

// The OpenAPI description (api/openapi.json) against the router's table
// (RouteTable, server/rest/http_routes.h): a route without a description,
// or a description without a route, fails. Operations marked
// "x-flowstate-pending" (routes of branches not merged yet) may lack their
// route; once the route exists, the marker must go. Also: GET
// /v1/openapi.json serves the embedded document without a token.
// tests/openapi/ validates the document itself with an OpenAPI validator.
#include "api/openapi.h"

#include <map>
#include <regex>
#include <set>

#include "tests/server/http_routes_fixture.h"

namespace flowstate {
namespace http_routes_test {
namespace {

// "/v1/jobs/{id}/traces/{step}" -> "/v1/jobs/{}/traces/{}": the router and
// the description may name their parameters differently.
std::string Normalize(const std::string& path) {
  static const std::regex param(R"(\{[^}/]*\})");
  return std::regex_replace(path, param, "{}");
}

std::string Upper(std::string s) {
  for (char& c : s) c = char(std::toupper(static_cast<unsigned char>(c)));
  return s;
}

struct Described {
  bool pending = false;
};

// (METHOD, normalized path) -> how the description has it.
std::map<std::pair<std::string, std::string>, Described> DescribedOperations(const Json& doc) {
  static const std::set<std::string> kMethods = {"get", "put", "post", "delete", "options", "head",
                                                 "patch", "trace"};
  std::map<std::pair<std::string, std::string>, Described> out;
  for (const auto& [path, item] : doc.at("paths").items()) {
    for (const auto& [method, op] : item.items()) {
      if (!kMethods.count(method)) continue;  // "parameters", "summary", ...
      Described d;
      d.pending = op.value("x-flowstate-pending", false);
      out[{Upper(method), Normalize(path)}] = d;
    }
  }
  return out;
}

TEST(OpenApi, IsOpenApi3WithPathsAndComponents) {
  Json doc = Json::parse(api::OpenApiJson());
  ASSERT_TRUE(doc.contains("openapi"));
  EXPECT_EQ(doc["openapi"].get<std::string>().rfind("3.", 0), 0u);
  EXPECT_TRUE(doc["paths"].is_object());
  EXPECT_TRUE(doc["components"]["schemas"].contains("Error"));
  EXPECT_TRUE(doc["components"]["securitySchemes"].contains("bearerAuth"));
}

// What differs between the description and the router, one line each.
std::vector<std::string> Mismatches(const Json& doc, const std::vector<RouteMethod>& routes) {
  std::vector<std::string> out;
  std::map<std::pair<std::string, std::string>, Described> described = DescribedOperations(doc);
  std::set<std::pair<std::string, std::string>> routed;
  for (const RouteMethod& r : routes) {
    const std::pair<std::string, std::string> key{r.method, Normalize(r.path)};
    routed.insert(key);
    auto it = described.find(key);
    if (it == described.end()) {
      out.push_back(r.method + " " + r.path + " has no description in api/openapi.json");
    } else if (it->second.pending) {
      out.push_back(r.method + " " + r.path +
                    " is routed now: drop its \"x-flowstate-pending\" in api/openapi.json");
    }
  }
  for (const auto& [key, d] : described) {
    if (d.pending || routed.count(key)) continue;
    out.push_back(key.first + " " + key.second +
                  " is described in api/openapi.json but the router has no such route");
  }
  return out;
}

TEST(OpenApi, DescribesEveryRouteOfTheRouterAndNoOther) {
  const std::vector<RouteMethod> routes = RouteTable();
  EXPECT_GE(routes.size(), 20u) << "RouteTable() lists the whole table";
  for (const std::string& m : Mismatches(Json::parse(api::OpenApiJson()), routes)) ADD_FAILURE() << m;
}

// The check itself sees each kind of mismatch.
TEST(OpenApi, TheCheckSeesEachKindOfMismatch) {
  const Json doc = Json::parse(api::OpenApiJson());
  const std::vector<RouteMethod> routes = RouteTable();
  Json missing = doc;
  missing["paths"].erase("/v1/jobs/{id}/predict");
  EXPECT_EQ(Mismatches(missing, routes),
            std::vector<std::string>{"POST /v1/jobs/{id}/predict has no description in api/openapi.json"});
  Json extra = doc;
  extra["paths"]["/v1/nothing/{x}"] = Json::parse(R"({"get": {"responses": {}}})");
  EXPECT_EQ(Mismatches(extra, routes),
            std::vector<std::string>{"GET /v1/nothing/{} is described in api/openapi.json but the router "
                                     "has no such route"});
  Json pending = doc;
  pending["paths"]["/v1/ops"]["get"]["x-flowstate-pending"] = true;
  EXPECT_EQ(Mismatches(pending, routes),
            std::vector<std::string>{"GET /v1/ops is routed now: drop its \"x-flowstate-pending\" in "
                                     "api/openapi.json"});
}

TEST_F(HttpRoutesTest, OpenApiIsServedWithoutAToken) {
  ctx_.options.tokens = {"s3cret"};
  HttpResponse r = Do("GET", "/v1/openapi.json");
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.content_type, "application/json");
  EXPECT_EQ(r.body, std::string(api::OpenApiJson()));
  EXPECT_EQ(Json::parse(r.body)["info"]["title"], "Flowstate REST API");
  EXPECT_EQ(Do("POST", "/v1/openapi.json").status, 405);
  // Closed when the configuration says so.
  ctx_.options.open_routes = {"/healthz"};
  EXPECT_EQ(Do("GET", "/v1/openapi.json").status, 401);
  EXPECT_EQ(Do("GET", "/v1/openapi.json", "", "Bearer s3cret").status, 200);
}

}  // namespace
}  // namespace http_routes_test
}  // namespace flowstate

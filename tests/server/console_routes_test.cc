// The web console's routes (GET / and /console/{file}, server/rest/http_routes.cc):
// the embedded files with their types, ETags and Content-Security-Policy,
// 304 for a cached copy, served without a token while the API needs one,
// and a bundle that references nothing outside the server.
#include <regex>

#include "tests/server/http_routes_fixture.h"
#include "web/console_assets.h"

namespace flowstate {
namespace http_routes_test {
namespace {

// Every console test but this one's first half needs the console built in.
#define SKIP_WITHOUT_CONSOLE() \
  if (!web::ConsoleBuiltIn()) GTEST_SKIP() << "configured with -DFLOWSTATE_WEB_CONSOLE=OFF"

TEST_F(HttpRoutesTest, ConsolePageAndFilesAreServedFromTheBinary) {
  if (!web::ConsoleBuiltIn()) {
    HttpResponse r = Do("GET", "/");
    EXPECT_EQ(r.status, 404);
    EXPECT_NE(ErrorOf(r).message().find("FLOWSTATE_WEB_CONSOLE=OFF"), std::string::npos) << r.body;
  }
  SKIP_WITHOUT_CONSOLE();
  struct Case {
    const char* target;
    const char* type;
    const char* must_contain;
  };
  for (const Case& c : {Case{"/", "text/html; charset=utf-8", "<script defer src=\"/console/console.js\">"},
                        Case{"/console/console.js", "text/javascript; charset=utf-8", "uPlot"},
                        Case{"/console/console.css", "text/css; charset=utf-8", ".u-legend"},
                        Case{"/console/index.html", "text/html; charset=utf-8", "<title>Flowstate"}}) {
    HttpResponse r = Do("GET", c.target);
    ASSERT_EQ(r.status, 200) << c.target << ": " << r.body;
    EXPECT_EQ(r.content_type, c.type) << c.target;
    EXPECT_NE(r.body.find(c.must_contain), std::string::npos) << c.target;
    EXPECT_EQ(Header(r, "Cache-Control"), "no-cache");
    EXPECT_EQ(Header(r, "X-Content-Type-Options"), "nosniff");
    const std::string csp = Header(r, "Content-Security-Policy");
    EXPECT_NE(csp.find("default-src 'none'"), std::string::npos) << csp;
    EXPECT_NE(csp.find("script-src 'self'"), std::string::npos) << csp;
    EXPECT_NE(csp.find("connect-src 'self'"), std::string::npos) << csp;
    // The ETag is the file's: a copy the browser holds is answered 304, empty.
    const std::string etag = Header(r, "ETag");
    EXPECT_TRUE(std::regex_match(etag, std::regex("\"[0-9a-f]{16}\""))) << etag;
    HttpRequest again;
    again.method = "GET";
    again.target = c.target;
    again.headers.emplace("if-none-match", etag);
    HttpResponse cached = HandleRequest(again, ctx_);
    EXPECT_EQ(cached.status, 304) << c.target;
    EXPECT_TRUE(cached.body.empty());
    EXPECT_EQ(Header(cached, "ETag"), etag);
    again.headers = {{"if-none-match", "\"0000000000000000\""}};
    EXPECT_EQ(HandleRequest(again, ctx_).status, 200) << c.target;
  }
  EXPECT_EQ(Do("GET", "/?tab=jobs").status, 200);  // the query is the page's
  EXPECT_NE(Header(Do("GET", "/"), "ETag"), Header(Do("GET", "/console/console.js"), "ETag"));
}

TEST_F(HttpRoutesTest, ConsoleUnknownFilesAndMethods) {
  SKIP_WITHOUT_CONSOLE();
  HttpResponse r = Do("GET", "/console/secrets.json");
  EXPECT_EQ(r.status, 404);
  EXPECT_EQ(ErrorOf(r).code(), Code::kNotFound);
  EXPECT_NE(ErrorOf(r).message().find("'secrets.json'"), std::string::npos) << r.body;
  EXPECT_EQ(Do("GET", "/console/%2e%2e%2fweb%2fconsole_assets.h").status, 404);
  EXPECT_EQ(Do("GET", "/console").status, 404);
  EXPECT_EQ(Do("GET", "/console/a/b").status, 404);
  r = Do("POST", "/", "{}");
  EXPECT_EQ(r.status, 405);
  EXPECT_EQ(Header(r, "Allow"), "GET");
  EXPECT_EQ(RouteTemplateFor("/"), "/");
  EXPECT_EQ(RouteTemplateFor("/console/console.js"), "/console/{id}");
}

// The page holds no data: it is public whatever auth.open_routes says,
// while every API call it makes needs the token.
TEST_F(HttpRoutesTest, ConsoleIsPublicButItsApiCallsNeedTheToken) {
  SKIP_WITHOUT_CONSOLE();
  ctx_.options.tokens = {"s3cret"};
  ctx_.options.open_routes = {};
  for (const char* target : {"/", "/console/console.js", "/console/console.css"}) {
    EXPECT_EQ(Do("GET", target).status, 200) << target;
    HttpRequest head;
    head.method = "GET";
    head.target = target;
    EXPECT_EQ(CheckHead(head, ctx_), HeadVerdict::kReadUnauthenticated) << target;
  }
  EXPECT_EQ(Do("GET", "/console/nope.js").status, 404);
  EXPECT_EQ(Do("GET", "/v1/jobs").status, 401);
  EXPECT_EQ(Do("GET", "/v1/jobs", "", "Bearer s3cret").status, 200);
  EXPECT_EQ(Do("POST", "/", "{}").status, 405);
}

// Nothing is fetched from elsewhere at run time: no absolute URL in the
// page or the styles, and no network call to another origin in the code.
TEST_F(HttpRoutesTest, ConsoleReferencesNothingOutsideTheServer) {
  SKIP_WITHOUT_CONSOLE();
  for (const char* name : {"index.html", "console.css"}) {
    const web::ConsoleAsset* a = web::FindConsoleAsset(name);
    ASSERT_NE(a, nullptr) << name;
    std::string body(a->body);
    EXPECT_EQ(body.find("http:"), std::string::npos) << name;
    EXPECT_EQ(body.find("https:"), std::string::npos) << name;
    EXPECT_EQ(body.find("//"), std::string::npos) << name;  // protocol-relative URLs
    EXPECT_EQ(body.find("@import"), std::string::npos) << name;
  }
  const web::ConsoleAsset* js = web::FindConsoleAsset("console.js");
  ASSERT_NE(js, nullptr);
  std::string body(js->body);
  EXPECT_EQ(body.find("innerHTML"), std::string::npos) << "server strings go in as text";
  EXPECT_EQ(body.find("new EventSource"), std::string::npos) << "it could not send the token";
  EXPECT_EQ(body.find("fetch('http"), std::string::npos);
  EXPECT_EQ(body.find("fetch(\"http"), std::string::npos);
}

}  // namespace
}  // namespace http_routes_test
}  // namespace flowstate

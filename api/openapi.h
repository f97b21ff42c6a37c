// The OpenAPI 3 description of the REST API (api/openapi.json), compiled
// into the binary at build time: what GET /v1/openapi.json serves and what
// tests/server/openapi_test.cc checks against the router's table
// (server/rest/http_routes.h, RouteTable) and tests/openapi/ validates with
// an OpenAPI validator from npm.
//
// Operations marked "x-flowstate-pending": true describe routes that are
// written on another branch and not in this router yet; the router check
// skips them while they are absent and fails once they exist (drop the
// marker then).
//
// Immutable data; thread-safe.
#ifndef FLOWSTATE_API_OPENAPI_H_
#define FLOWSTATE_API_OPENAPI_H_

#include <string_view>

namespace flowstate::api {

// The document, JSON text (UTF-8), as api/openapi.json holds it.
std::string_view OpenApiJson();

}  // namespace flowstate::api

#endif  // FLOWSTATE_API_OPENAPI_H_

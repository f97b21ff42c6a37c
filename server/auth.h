// The bearer-token check that both frontends share (server/API.md,
// "Authentication"): the REST frontend hands it the values of a request's
// Authorization headers, the gRPC frontend those of its "authorization"
// metadata, and both answer what it says, so an odd form gets the same
// answer over either.
//
// The rule, for a server with tokens configured:
//   - exactly one Authorization value (none: missing; two or more:
//     refused, even if one of them is right);
//   - surrounding white space (SP, HTAB) of the value is ignored;
//   - the scheme "Bearer", in any case, then one or more SP/HTAB, then the
//     token: one word, no white space or comma in it, not empty;
//   - the token equals one of the configured tokens, compared in time that
//     depends on the lengths only, and against every configured token.
// With no tokens configured every request passes.
//
// Pure functions; thread-safe.
#ifndef FLOWSTATE_SERVER_AUTH_H_
#define FLOWSTATE_SERVER_AUTH_H_

#include <string>
#include <string_view>
#include <vector>

#include "graph/status.h"

namespace flowstate {

struct BearerCheck {
  enum class Outcome {
    kOk,        // authenticated (or no tokens configured)
    kMissing,   // no Authorization value at all
    kMalformed, // several values, another scheme, or not exactly one token
    kInvalid,   // a well-formed bearer token that is not one of the tokens
  };
  Outcome outcome = Outcome::kOk;
  // OK, or UNAUTHENTICATED with a message that says what was wrong (never
  // the token sent).
  Status status;
  bool ok() const { return outcome == Outcome::kOk; }
};

// `values`: every Authorization header (REST) or "authorization" metadata
// value (gRPC) of the request, in the order sent. `tokens`: the configured
// tokens; empty turns authentication off.
BearerCheck CheckBearerToken(const std::vector<std::string_view>& values,
                             const std::vector<std::string>& tokens);

// Compares in time that depends on the lengths only, not on where the
// strings differ.
bool ConstantTimeEquals(std::string_view a, std::string_view b);

}  // namespace flowstate

#endif  // FLOWSTATE_SERVER_AUTH_H_

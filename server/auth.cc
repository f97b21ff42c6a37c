#include "server/auth.h"

#include <algorithm>
#include <cctype>

namespace flowstate {
namespace {

bool IsSpace(char c) { return c == ' ' || c == '\t'; }

std::string_view Trim(std::string_view s) {
  while (!s.empty() && IsSpace(s.front())) s.remove_prefix(1);
  while (!s.empty() && IsSpace(s.back())) s.remove_suffix(1);
  return s;
}

BearerCheck Refuse(BearerCheck::Outcome outcome, std::string message) {
  BearerCheck r;
  r.outcome = outcome;
  r.status = Unauthenticated(std::move(message));
  return r;
}

// HTTP header names are case-insensitive; gRPC metadata keys are lower-case.
constexpr const char* kHowTo = "send one \"authorization: Bearer <token>\" header (gRPC: metadata)";

}  // namespace

bool ConstantTimeEquals(std::string_view a, std::string_view b) {
  size_t n = std::max(a.size(), b.size());
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < n; ++i) {
    unsigned char x = i < a.size() ? static_cast<unsigned char>(a[i]) : 0;
    unsigned char y = i < b.size() ? static_cast<unsigned char>(b[i]) : 0;
    diff |= x ^ y;
  }
  return diff == 0;
}

BearerCheck CheckBearerToken(const std::vector<std::string_view>& values,
                             const std::vector<std::string>& tokens) {
  using Outcome = BearerCheck::Outcome;
  if (tokens.empty()) return BearerCheck();
  if (values.empty()) {
    return Refuse(Outcome::kMissing, std::string("missing credentials: ") + kHowTo);
  }
  if (values.size() > 1) {
    return Refuse(Outcome::kMalformed, "the request has " + std::to_string(values.size()) +
                                           " Authorization values; " + kHowTo);
  }
  std::string_view v = Trim(values[0]);
  constexpr std::string_view kScheme = "bearer";
  const bool bearer =
      v.size() >= kScheme.size() && (v.size() == kScheme.size() || IsSpace(v[kScheme.size()])) &&
      std::equal(kScheme.begin(), kScheme.end(), v.begin(), [](char s, char c) {
        return s == std::tolower(static_cast<unsigned char>(c));
      });
  if (!bearer) {
    return Refuse(Outcome::kMalformed,
                  std::string("the Authorization value is not a bearer token; ") + kHowTo);
  }
  std::string_view token = Trim(v.substr(kScheme.size()));
  if (token.empty() || std::any_of(token.begin(), token.end(),
                                   [](char c) { return IsSpace(c) || c == ','; })) {
    return Refuse(Outcome::kMalformed,
                  std::string("the Authorization value must hold exactly one token after "
                              "\"Bearer\"; ") + kHowTo);
  }
  bool match = false;
  for (const std::string& t : tokens) match |= ConstantTimeEquals(token, t);  // no early exit
  if (!match) return Refuse(Outcome::kInvalid, "the bearer token is not valid");
  return BearerCheck();
}

}  // namespace flowstate

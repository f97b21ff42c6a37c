// Hand-written base64: see base64.h for why there is no library behind it.
#include "api/base64.h"

#include <array>
#include <cstdint>

namespace flowstate::api {
namespace {

constexpr char kAlphabet[] =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

// Sextet value of each byte, or -1. Both the standard and the URL-safe
// alphabet decode.
constexpr std::array<int8_t, 256> MakeDecodeTable() {
  std::array<int8_t, 256> t{};
  for (auto& v : t) v = -1;
  for (int i = 0; i < 64; ++i) t[static_cast<uint8_t>(kAlphabet[i])] = static_cast<int8_t>(i);
  t[static_cast<uint8_t>('-')] = 62;
  t[static_cast<uint8_t>('_')] = 63;
  return t;
}
constexpr std::array<int8_t, 256> kDecode = MakeDecodeTable();

size_t PaddingOf(std::string_view text) {
  size_t pad = 0;
  while (pad < text.size() && text[text.size() - 1 - pad] == '=') ++pad;
  return pad;
}

}  // namespace

void Base64Encode(const void* data, size_t n, std::string* out) {
  const auto* p = static_cast<const uint8_t*>(data);
  out->reserve(out->size() + (n + 2) / 3 * 4);
  size_t i = 0;
  for (; i + 3 <= n; i += 3) {
    uint32_t v = uint32_t(p[i]) << 16 | uint32_t(p[i + 1]) << 8 | p[i + 2];
    out->push_back(kAlphabet[v >> 18]);
    out->push_back(kAlphabet[(v >> 12) & 63]);
    out->push_back(kAlphabet[(v >> 6) & 63]);
    out->push_back(kAlphabet[v & 63]);
  }
  if (i < n) {
    uint32_t v = uint32_t(p[i]) << 16 | (i + 1 < n ? uint32_t(p[i + 1]) << 8 : 0);
    out->push_back(kAlphabet[v >> 18]);
    out->push_back(kAlphabet[(v >> 12) & 63]);
    out->push_back(i + 1 < n ? kAlphabet[(v >> 6) & 63] : '=');
    out->push_back('=');
  }
}

std::string Base64Encode(std::string_view bytes) {
  std::string out;
  Base64Encode(bytes.data(), bytes.size(), &out);
  return out;
}

StatusOr<size_t> Base64DecodedSize(std::string_view text) {
  size_t pad = PaddingOf(text);
  if (pad > 2 || (pad > 0 && text.size() % 4 != 0)) {
    return InvalidArgument("malformed base64: bad '=' padding");
  }
  size_t body = text.size() - pad;
  if (body % 4 == 1) {
    return InvalidArgument("malformed base64: " + std::to_string(text.size()) +
                           " characters cannot encode whole bytes");
  }
  size_t rem = body % 4;
  return body / 4 * 3 + (rem == 0 ? 0 : rem - 1);
}

Status Base64Decode(std::string_view text, void* out, size_t n) {
  auto* dst = static_cast<uint8_t*>(out);
  size_t body = text.size() - PaddingOf(text);
  size_t o = 0;
  uint32_t acc = 0;
  int bits = 0;
  for (size_t i = 0; i < body; ++i) {
    int8_t v = kDecode[static_cast<uint8_t>(text[i])];
    if (v < 0) {
      return InvalidArgument("malformed base64: character " + std::to_string(i) +
                             " is not a base64 digit");
    }
    acc = (acc << 6) | uint32_t(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      if (o < n) dst[o] = static_cast<uint8_t>(acc >> bits);
      ++o;
      acc &= (1u << bits) - 1;
    }
  }
  if (o != n) {
    return InvalidArgument("malformed base64: decodes to " + std::to_string(o) +
                           " bytes, expected " + std::to_string(n));
  }
  return Status();
}

}  // namespace flowstate::api

// Base64 (RFC 4648) for the "b64" tensor encoding of the JSON API.
//
// Written by hand: no Debian-packaged C++ base64 library is in our
// dependency set (DEPENDENCIES.md), and the codec is ~100 lines. Encoding
// emits the standard alphabet with '=' padding. Decoding accepts the
// standard and the URL-safe alphabet ('-' and '_' for '+' and '/'), with or
// without padding; it rejects whitespace and any other character.
//
// Pure functions, thread-safe.
#ifndef FLOWSTATE_API_BASE64_H_
#define FLOWSTATE_API_BASE64_H_

#include <cstddef>
#include <string>
#include <string_view>

#include "graph/status.h"

namespace flowstate::api {

// Appends the base64 text of bytes [data, data + n) to *out.
void Base64Encode(const void* data, size_t n, std::string* out);
std::string Base64Encode(std::string_view bytes);

// The number of bytes `text` decodes to. INVALID_ARGUMENT when its length
// (or its padding) cannot be base64; the characters are checked by Decode.
StatusOr<size_t> Base64DecodedSize(std::string_view text);

// Decodes `text` into [out, out + n). REQUIRES: n == *Base64DecodedSize(text).
// INVALID_ARGUMENT naming the offset of the first character that is not
// base64.
Status Base64Decode(std::string_view text, void* out, size_t n);

}  // namespace flowstate::api

#endif  // FLOWSTATE_API_BASE64_H_

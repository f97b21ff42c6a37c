// FastParseJson (json_internal.h): a one-pass reader for the plain JSON that
// request bodies are made of -- numbers, unescaped ASCII strings, arrays and
// objects -- into the same nlohmann DOM that nlohmann's own parser builds.
//
// Written by hand because nlohmann's parser spends ~150 ns on each number of
// a tensor (its lexer copies every character into a token buffer and calls
// strtod/strtoull): a 28x28 image as JSON numbers took ~120 us, more than the
// MLP that predicts on it. Here a number is validated against the JSON
// grammar in place; an integer's digits are summed as they are checked, a
// float is converted by std::from_chars (exactly rounded, as strtod is).
// Asked to (pack_tensor_data), it reads the "data" arrays of a run or
// predict request's tensors into PackedNumbers instead of a DOM node each.
//
// It never decides anything nlohmann would decide differently: whatever it
// does not handle for certain -- an escape, a byte >= 0x80 (UTF-8 to
// validate), an integer of more than 18 digits, a number from_chars calls
// out of range, nesting deeper than kMaxDepth (or the caller's limit, which
// the caller then reports), any syntax error -- makes it
// return false, and the caller parses the text again with nlohmann, whose
// result and error messages then stand. A test compares the two readers on
// many documents.
#include <algorithm>
#include <charconv>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

#include "api/json_internal.h"

namespace flowstate::api::internal {
namespace {

constexpr int kMaxDepth = 64;  // the deepest it recurses, whatever the limit

// Where a value sits in a run or predict request, for packing tensor data:
// the root, the value of its "feeds" or "inputs", a tensor in that, or the
// "data" of such a tensor. kOther everywhere else.
enum class Place { kOther, kRequest, kTensorMap, kTensor, kData };

Place PlaceOf(Place parent, std::string_view key) {
  switch (parent) {
    case Place::kRequest:
      return key == "feeds" || key == "inputs" ? Place::kTensorMap : Place::kOther;
    case Place::kTensorMap: return Place::kTensor;
    case Place::kTensor: return key == "data" ? Place::kData : Place::kOther;
    default: return Place::kOther;
  }
}

class FastReader {
 public:
  FastReader(std::string_view text, bool pack, int max_depth)
      : p_(text.data()),
        end_(text.data() + text.size()),
        pack_(pack),
        max_depth_(std::min(kMaxDepth, max_depth)) {}

  bool Document(Json* out) {
    SkipSpace();
    if (!Value(out, 0, pack_ ? Place::kRequest : Place::kOther)) return false;
    SkipSpace();
    return p_ == end_;
  }

 private:
  // True when a number may begin here ('-' or a digit).
  bool AtNumber() const { return p_ < end_ && (*p_ == '-' || (*p_ >= '0' && *p_ <= '9')); }

  void SkipSpace() {
    while (p_ < end_ && (*p_ == ' ' || *p_ == '\n' || *p_ == '\r' || *p_ == '\t')) ++p_;
  }

  bool Literal(const char* word, size_t n) {
    if (size_t(end_ - p_) < n || std::memcmp(p_, word, n) != 0) return false;
    p_ += n;
    return true;
  }

  bool Value(Json* out, int depth, Place place = Place::kOther) {
    if (p_ == end_) return false;
    switch (*p_) {
      case '{': return Object(out, depth + 1, place);
      case '[':
        if (place == Place::kData && depth < max_depth_ && Packed(out)) return true;
        return Array(out, depth + 1);
      case '"': {
        std::string_view s;
        if (!String(&s)) return false;
        *out = std::string(s);
        return true;
      }
      case 't':
        if (!Literal("true", 4)) return false;
        *out = true;
        return true;
      case 'f':
        if (!Literal("false", 5)) return false;
        *out = false;
        return true;
      case 'n':
        if (!Literal("null", 4)) return false;
        *out = nullptr;
        return true;
      default: return Number([out](auto x) { *out = x; });
    }
  }

  // A string without escapes or non-ASCII bytes; *s is its content.
  bool String(std::string_view* s) {
    const char* start = ++p_;  // after '"'
    while (p_ < end_) {
      unsigned char c = static_cast<unsigned char>(*p_);
      if (c == '"') {
        *s = std::string_view(start, size_t(p_ - start));
        ++p_;
        return true;
      }
      if (c == '\\' || c < 0x20 || c >= 0x80) return false;
      ++p_;
    }
    return false;
  }

  // -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?, passed to put() as a
  // double, int64_t or uint64_t (the number type nlohmann would give it).
  template <typename Put>
  bool Number(const Put& put) {
    const char* start = p_;
    bool negative = false;
    if (p_ < end_ && *p_ == '-') {
      negative = true;
      ++p_;
    }
    const char* digits = p_;
    if (p_ == end_ || *p_ < '0' || *p_ > '9') return false;
    uint64_t magnitude = 0;  // exact up to 19 digits; used for up to 18
    if (*p_ == '0') {
      ++p_;
    } else {
      while (p_ < end_ && *p_ >= '0' && *p_ <= '9') {
        magnitude = magnitude * 10 + uint64_t(*p_++ - '0');
      }
    }
    const size_t int_digits = size_t(p_ - digits);
    bool is_float = false;
    if (p_ < end_ && *p_ == '.') {
      is_float = true;
      ++p_;
      const char* frac = p_;
      while (p_ < end_ && *p_ >= '0' && *p_ <= '9') ++p_;
      if (p_ == frac) return false;
    }
    if (p_ < end_ && (*p_ == 'e' || *p_ == 'E')) {
      is_float = true;
      ++p_;
      if (p_ < end_ && (*p_ == '+' || *p_ == '-')) ++p_;
      const char* exp = p_;
      while (p_ < end_ && *p_ >= '0' && *p_ <= '9') ++p_;
      if (p_ == exp) return false;
    }
    if (is_float) {
      double d = 0;
      auto [ptr, ec] = std::from_chars(start, p_, d);
      if (ec != std::errc() || ptr != p_) return false;  // out of range: nlohmann decides
      put(d);
      return true;
    }
    if (int_digits > 18) return false;  // near the 64-bit limits: nlohmann decides
    // Below 10^18 < 2^63 the digits' value is exact either way.
    if (negative) {
      put(-int64_t(magnitude));  // nlohmann: a negative integer is number_integer...
    } else {
      put(magnitude);  // ...and a non-negative one number_unsigned
    }
    return true;
  }

  bool Array(Json* out, int depth) {
    if (depth > max_depth_) return false;
    ++p_;  // '['
    *out = Json::array();
    SkipSpace();
    if (p_ < end_ && *p_ == ']') {
      ++p_;
      return true;
    }
    // Count the elements of a flat array of scalars first so that a
    // tensor's values are placed without regrowing the vector.
    Json::array_t& elements = out->get_ref<Json::array_t&>();
    elements.reserve(EstimateElements());
    for (;;) {
      SkipSpace();
      if (AtNumber()) {
        // A number goes straight into its place: no temporary to move.
        if (!Number([&](auto x) { elements.emplace_back(x); })) return false;
      } else {
        elements.emplace_back();
        if (!Value(&elements.back(), depth)) return false;
      }
      SkipSpace();
      if (p_ == end_) return false;
      if (*p_ == ',') {
        ++p_;
        continue;
      }
      if (*p_ != ']') return false;
      ++p_;
      return true;
    }
  }

  // 1 + the commas before the first ']', '[' or '{' (a hint only).
  size_t EstimateElements() const {
    size_t n = 1;
    for (const char* q = p_; q < end_; ++q) {
      char c = *q;
      if (c == ',') ++n;
      else if (c == ']' || c == '[' || c == '{' || c == '"') break;
    }
    return n;
  }

  // A non-empty array of numbers only, as PackedNumbers in a binary value;
  // false, with nothing read, for any other array (Array reads it then).
  bool Packed(Json* out) {
    const char* start = p_;
    ++p_;  // '['
    std::vector<PackedNumber> numbers;
    numbers.reserve(EstimateElements());
    for (;;) {
      SkipSpace();
      PackedNumber n;
      bool ok = AtNumber() &&
                Number([&n](auto x) {
                  using X = decltype(x);
                  if constexpr (std::is_same_v<X, double>) {
                    n.kind = PackedNumber::Kind::kFloat;
                    n.d = x;
                  } else if constexpr (std::is_same_v<X, int64_t>) {
                    n.kind = PackedNumber::Kind::kInteger;
                    n.i = x;
                  } else {
                    n.kind = PackedNumber::Kind::kUnsigned;
                    n.u = x;
                  }
                });
      if (!ok) break;
      numbers.push_back(n);
      SkipSpace();
      if (p_ < end_ && *p_ == ',') {
        ++p_;
        continue;
      }
      if (p_ < end_ && *p_ == ']') {
        ++p_;
        std::vector<uint8_t> bytes(numbers.size() * sizeof(PackedNumber));
        std::memcpy(bytes.data(), numbers.data(), bytes.size());
        *out = Json::binary(std::move(bytes));
        return true;
      }
      break;
    }
    p_ = start;
    return false;
  }

  bool Object(Json* out, int depth, Place place = Place::kOther) {
    if (depth > max_depth_) return false;
    ++p_;  // '{'
    *out = Json::object();
    SkipSpace();
    if (p_ < end_ && *p_ == '}') {
      ++p_;
      return true;
    }
    for (;;) {
      SkipSpace();
      if (p_ == end_ || *p_ != '"') return false;
      std::string_view key;
      if (!String(&key)) return false;
      SkipSpace();
      if (p_ == end_ || *p_ != ':') return false;
      ++p_;
      SkipSpace();
      Json v;
      if (!Value(&v, depth, PlaceOf(place, key))) return false;
      // As nlohmann's parser: a repeated key keeps its first place and
      // takes the last value.
      (*out)[std::string(key)] = std::move(v);
      SkipSpace();
      if (p_ == end_) return false;
      if (*p_ == ',') {
        ++p_;
        continue;
      }
      if (*p_ != '}') return false;
      ++p_;
      return true;
    }
  }

  const char* p_;
  const char* end_;
  const bool pack_;
  const int max_depth_;
};

}  // namespace

namespace {

// Deeper than this (only a document nlohmann parsed can be), the rest is
// left to ~basic_json, which needs no stack depth.
constexpr int kMaxReleaseDepth = 64;

void ReleaseArrays(Json* v, int depth) {
  if (depth > kMaxReleaseDepth) return;
  if (v->is_array()) {
    Json::array_t elements;
    elements.swap(v->get_ref<Json::array_t&>());
    for (Json& e : elements) {
      if (e.is_structured()) ReleaseArrays(&e, depth + 1);
    }
    // `elements` goes as a plain vector: its scalars need no stack.
  } else if (v->is_object()) {
    for (auto& item : v->items()) {
      if (item.value().is_structured()) ReleaseArrays(&item.value(), depth + 1);
    }
  }
}

}  // namespace

Document::~Document() { ReleaseArrays(&value_, 0); }

std::vector<PackedNumber> UnpackNumbers(const Json& v) {
  const Json::binary_t& bytes = v.get_binary();
  std::vector<PackedNumber> numbers(bytes.size() / sizeof(PackedNumber));
  std::memcpy(numbers.data(), bytes.data(), numbers.size() * sizeof(PackedNumber));
  return numbers;
}

bool FastParseJson(std::string_view text, Json* out, bool pack_tensor_data, int max_depth) {
  FastReader reader(text, pack_tensor_data, max_depth);
  Json v;
  if (!reader.Document(&v)) return false;
  *out = std::move(v);
  return true;
}

}  // namespace flowstate::api::internal

// Paths, errors, scalar conversions and the low-level writers shared by the
// JSON codec (json_internal.h).
#include <algorithm>
#include <atomic>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "api/json_internal.h"

namespace flowstate::api::internal {
namespace {

bool IsIdentifier(std::string_view s) {
  if (s.empty() || std::isdigit(static_cast<unsigned char>(s[0]))) return false;
  return std::all_of(s.begin(), s.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_';
  });
}

bool EqualsIgnoreCase(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) ==
                  std::tolower(static_cast<unsigned char>(y));
         });
}

// "NaN", "Infinity", "-inf", ... (any case, optional sign).
std::optional<double> NonFiniteFromString(std::string_view s) {
  bool negative = false;
  if (!s.empty() && (s[0] == '-' || s[0] == '+')) {
    negative = s[0] == '-';
    s.remove_prefix(1);
  }
  if (EqualsIgnoreCase(s, "nan")) return std::numeric_limits<double>::quiet_NaN();
  if (EqualsIgnoreCase(s, "inf") || EqualsIgnoreCase(s, "infinity")) {
    return negative ? -std::numeric_limits<double>::infinity()
                    : std::numeric_limits<double>::infinity();
  }
  return std::nullopt;
}

// Length of the valid UTF-8 sequence at s[i], or 0.
size_t Utf8SequenceLength(std::string_view s, size_t i) {
  auto byte = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  unsigned char c = byte(i);
  size_t n = c >= 0xf0 ? 4 : c >= 0xe0 ? 3 : c >= 0xc2 ? 2 : 0;
  if (n == 0 || c > 0xf4 || i + n > s.size()) return 0;
  for (size_t k = 1; k < n; ++k) {
    if ((byte(i + k) & 0xc0) != 0x80) return 0;
  }
  unsigned char c1 = byte(i + 1);
  if (c == 0xe0 && c1 < 0xa0) return 0;  // overlong
  if (c == 0xed && c1 >= 0xa0) return 0;  // surrogate
  if (c == 0xf0 && c1 < 0x90) return 0;  // overlong
  if (c == 0xf4 && c1 >= 0x90) return 0;  // above U+10FFFF
  return n;
}

template <typename F>
void AppendFloating(F v, std::string* out) {
  if (std::isnan(v)) {
    out->append("\"NaN\"");
  } else if (std::isinf(v)) {
    out->append(v > 0 ? "\"Infinity\"" : "\"-Infinity\"");
  } else {
    char buf[40];
    auto r = std::to_chars(buf, buf + sizeof(buf), v);
    std::string_view text(buf, size_t(r.ptr - buf));
    out->append(text);
    // Keep it a float for a reader that infers dtypes: 2 -> 2.0.
    if (text.find_first_of(".e") == std::string_view::npos) out->append(".0");
  }
}

}  // namespace

std::string JsonPath::ToString() const {
  std::vector<const JsonPath*> chain;
  for (const JsonPath* p = this; p != nullptr; p = p->parent_) chain.push_back(p);
  std::string s(chain.back()->key_);
  for (auto it = chain.rbegin() + 1; it != chain.rend(); ++it) {
    const JsonPath* p = *it;
    if (p->index_ >= 0) {
      s += "[" + std::to_string(p->index_) + "]";
    } else {
      AppendPathKey(p->key_, &s);
    }
  }
  return s;
}

void AppendPathKey(std::string_view key, std::string* path) {
  if (IsIdentifier(key)) {
    if (!path->empty()) path->push_back('.');
    path->append(key);
  } else {
    path->push_back('[');
    AppendJsonString(key, path);
    path->push_back(']');
  }
}

Status PathError(const std::string& path, std::string_view message, std::string_view node) {
  std::string m = path.empty() ? std::string(message) : path + ": " + std::string(message);
  return InvalidArgument(std::move(m), std::string(node));
}

Status PathError(const JsonPath& path, std::string_view message, std::string_view node) {
  return PathError(path.ToString(), message, node);
}

std::string DescribeValue(const Json& v) {
  switch (v.type()) {
    case Json::value_t::null: return "null";
    case Json::value_t::boolean: return v.get<bool>() ? "true" : "false";
    case Json::value_t::number_integer: return std::to_string(v.get<int64_t>());
    case Json::value_t::number_unsigned: return std::to_string(v.get<uint64_t>());
    case Json::value_t::number_float: {
      double d = v.get<double>();
      if (!std::isfinite(d)) return "a number too large to represent";
      std::string s;
      AppendDouble(d, &s);
      return s;
    }
    case Json::value_t::string: {
      std::string_view s = v.get_ref<const std::string&>();
      bool cut = s.size() > 32;
      if (cut) {
        size_t n = 32;
        while (n > 0 && (static_cast<unsigned char>(s[n]) & 0xc0) == 0x80) --n;
        s = s.substr(0, n);
      }
      std::string out;
      AppendJsonString(s, &out);
      if (cut) out.insert(out.size() - 1, "...");
      return out;
    }
    case Json::value_t::array: return "an array";
    case Json::value_t::object: return "an object";
    default: return "an unsupported value";
  }
}

int64_t TooDeepAt(std::string_view text, int max_depth) {
  // Only brackets and strings matter; a string is skipped whole (an escaped
  // quote does not end it). A closing bracket with nothing open ends the
  // scan: every parser stops at that error before reading further.
  int depth = 0;
  const char* const begin = text.data();
  const char* p = begin;
  const char* const end = begin + text.size();
  while (p < end) {
    switch (*p++) {
      case '[':
      case '{':
        if (++depth > max_depth) return int64_t(p - 1 - begin);
        break;
      case ']':
      case '}':
        if (--depth < 0) return -1;
        break;
      case '"':
        while (p < end) {
          char c = *p++;
          if (c == '"') break;
          if (c == '\\' && p < end) ++p;
        }
        break;
      default: break;
    }
  }
  return -1;
}

Status TooDeepError(const std::string& path, int max_depth, int64_t at) {
  return PathError(path, "JSON nesting deeper than " + std::to_string(max_depth) +
                             " levels (at byte " + std::to_string(at) +
                             "); the limit is limits.max_json_depth");
}

Status ParseJsonText(std::string_view text, const JsonPath& path, Json* out,
                     bool pack_tensor_data) {
  // The fast reader goes no deeper than the limit; whatever it leaves to
  // nlohmann is measured first (nlohmann's parser is not recursive, but what
  // the codec does with the document is).
  const int max_depth = MaxJsonDepth();
  if (FastParseJson(text, out, pack_tensor_data, max_depth)) return Status();
  if (int64_t at = TooDeepAt(text, max_depth); at >= 0) {
    return TooDeepError(path.ToString(), max_depth, at);
  }
  try {
    *out = Json::parse(text.begin(), text.end());
    return Status();
  } catch (const Json::exception& e) {
    // "[json.exception.parse_error.101] parse error at line 1, column 2: ..."
    std::string_view what = e.what();
    size_t close = what.find("] ");
    if (what.starts_with("[json.exception.") && close != std::string_view::npos) {
      what.remove_prefix(close + 2);
    }
    return PathError(path, "malformed JSON: " + std::string(what));
  }
}

const Json* FindField(const Json& object, std::string_view key) {
  auto it = object.find(key);
  return it == object.end() || it->is_null() ? nullptr : &*it;
}

Status CheckObject(const Json& v, const JsonPath& path, std::string_view what,
                   std::initializer_list<std::string_view> allowed, std::string_view node) {
  if (!v.is_object()) {
    return PathError(path, "expected " + std::string(what) + " (an object), got " +
                               DescribeValue(v), node);
  }
  for (auto it = v.begin(); it != v.end(); ++it) {
    if (std::find(allowed.begin(), allowed.end(), it.key()) != allowed.end()) continue;
    std::string fields;
    for (std::string_view f : allowed) {
      fields += fields.empty() ? "\"" : ", \"";
      fields += std::string(f) + "\"";
    }
    return PathError(path.Key(it.key()),
                     "unknown field (" + std::string(what) + " has " + fields + ")", node);
  }
  return Status();
}

namespace {

// A number of the document as a PackedNumber; false for anything else.
bool AsNumber(const Json& v, PackedNumber* p) {
  if (v.is_number_unsigned()) {
    p->kind = PackedNumber::Kind::kUnsigned;
    p->u = v.get<uint64_t>();
  } else if (v.is_number_integer()) {
    p->kind = PackedNumber::Kind::kInteger;
    p->i = v.get<int64_t>();
  } else if (v.is_number_float()) {
    p->kind = PackedNumber::Kind::kFloat;
    p->d = v.get<double>();
  } else {
    return false;
  }
  return true;
}

}  // namespace

Json PackedNumber::ToJson() const {
  switch (kind) {
    case Kind::kUnsigned: return Json(u);
    case Kind::kInteger: return Json(i);
    case Kind::kFloat: break;
  }
  return Json(d);
}

ScalarError NumberToInteger(const PackedNumber& v, int64_t lo, int64_t hi, int64_t* out) {
  int64_t i = 0;
  switch (v.kind) {
    case PackedNumber::Kind::kUnsigned:
      if (hi < 0 || v.u > uint64_t(hi)) return ScalarError::kOutOfRange;
      i = int64_t(v.u);
      break;
    case PackedNumber::Kind::kInteger:
      i = v.i;
      break;
    case PackedNumber::Kind::kFloat: {
      double d = v.d;
      if (!std::isfinite(d)) return ScalarError::kOutOfRange;
      if (d != std::trunc(d)) return ScalarError::kNotInteger;
      if (d < -0x1p63 || d >= 0x1p63) return ScalarError::kOutOfRange;
      i = int64_t(d);
      break;
    }
  }
  if (i < lo || i > hi) return ScalarError::kOutOfRange;
  *out = i;
  return ScalarError::kNone;
}

ScalarError JsonToInteger(const Json& v, int64_t lo, int64_t hi, int64_t* out) {
  PackedNumber p;
  if (!AsNumber(v, &p)) return ScalarError::kWrongType;
  return NumberToInteger(p, lo, hi, out);
}

ScalarError NumberToDouble(const PackedNumber& v, double* out) {
  switch (v.kind) {
    case PackedNumber::Kind::kUnsigned: *out = double(v.u); break;
    case PackedNumber::Kind::kInteger: *out = double(v.i); break;
    case PackedNumber::Kind::kFloat:
      *out = v.d;
      if (!std::isfinite(*out)) return ScalarError::kOutOfRange;
      break;
  }
  return ScalarError::kNone;
}

ScalarError JsonToDouble(const Json& v, double* out) {
  PackedNumber p;
  if (AsNumber(v, &p)) return NumberToDouble(p, out);
  if (v.is_string()) {
    std::optional<double> d = NonFiniteFromString(v.get_ref<const std::string&>());
    if (!d) return ScalarError::kWrongType;
    *out = *d;
    return ScalarError::kNone;
  }
  return ScalarError::kWrongType;
}

StatusOr<int64_t> ReadInt(const Json& v, const JsonPath& path, std::string_view what) {
  int64_t i = 0;
  switch (JsonToInteger(v, std::numeric_limits<int64_t>::min(),
                        std::numeric_limits<int64_t>::max(), &i)) {
    case ScalarError::kNone: return i;
    case ScalarError::kOutOfRange:
      return PathError(path, DescribeValue(v) + " is out of range for " + std::string(what));
    default:
      return PathError(path, "expected " + std::string(what) + ", got " + DescribeValue(v));
  }
}

StatusOr<double> ReadFloat(const Json& v, const JsonPath& path, std::string_view what) {
  double d = 0;
  switch (JsonToDouble(v, &d)) {
    case ScalarError::kNone: return d;
    case ScalarError::kOutOfRange:
      return PathError(path, DescribeValue(v) + " is out of range for " + std::string(what));
    default:
      return PathError(path, "expected " + std::string(what) + ", got " + DescribeValue(v));
  }
}

StatusOr<std::string> ReadString(const Json& v, const JsonPath& path) {
  if (!v.is_string()) return PathError(path, "expected a string, got " + DescribeValue(v));
  return v.get<std::string>();
}

Status ReadStringField(const Json& object, const JsonPath& path, std::string_view key,
                       std::string* out, bool required) {
  const Json* v = FindField(object, key);
  if (v == nullptr) return required ? PathError(path.Key(key), "is required") : Status();
  FS_ASSIGN_OR_RETURN(*out, ReadString(*v, path.Key(key)));
  return Status();
}

Status ReadIntField(const Json& object, const JsonPath& path, std::string_view key, int64_t* out,
                    int64_t min_value, bool required) {
  const Json* v = FindField(object, key);
  if (v == nullptr) return required ? PathError(path.Key(key), "is required") : Status();
  FS_ASSIGN_OR_RETURN(int64_t i, ReadInt(*v, path.Key(key), "an integer"));
  if (i < min_value) return PathError(path.Key(key), "must be >= " + std::to_string(min_value));
  *out = i;
  return Status();
}

Status ReadNumberField(const Json& object, const JsonPath& path, std::string_view key,
                       double* out) {
  const Json* v = FindField(object, key);
  if (v == nullptr) return Status();
  if (!v->is_number()) return PathError(path.Key(key), "expected a number, got " + DescribeValue(*v));
  *out = v->get<double>();
  return Status();
}

Status ReadNumberField(const Json& object, const JsonPath& path, std::string_view key,
                       std::optional<double>* out) {
  double d = 0;
  if (FindField(object, key) == nullptr) return Status();
  FS_RETURN_IF_ERROR(ReadNumberField(object, path, key, &d));
  *out = d;
  return Status();
}

Status ReadBoolField(const Json& object, const JsonPath& path, std::string_view key, bool* out) {
  const Json* v = FindField(object, key);
  if (v == nullptr) return Status();
  if (!v->is_boolean()) return PathError(path.Key(key), "expected a bool, got " + DescribeValue(*v));
  *out = v->get<bool>();
  return Status();
}

Status ReadBoolField(const Json& object, const JsonPath& path, std::string_view key,
                     std::optional<bool>* out) {
  bool b = false;
  if (FindField(object, key) == nullptr) return Status();
  FS_RETURN_IF_ERROR(ReadBoolField(object, path, key, &b));
  *out = b;
  return Status();
}

StatusOr<DataType> ReadDataType(const Json& v, const JsonPath& path) {
  if (!v.is_string()) return PathError(path, "expected a dtype name, got " + DescribeValue(v));
  StatusOr<DataType> t = DataTypeFromString(v.get_ref<const std::string&>());
  if (!t.ok()) return PathError(path, t.status().message());
  return *t;
}

StatusOr<PartialShape> ReadPartialShape(const Json& v, const JsonPath& path) {
  auto unknown = [](const Json& x) {
    return x.is_null() || (x.is_string() && x.get_ref<const std::string&>() == "?");
  };
  if (unknown(v)) return PartialShape::Unknown();
  if (!v.is_array()) {
    return PathError(path, "expected a shape (an array of dimensions, or null for an unknown "
                           "rank), got " + DescribeValue(v));
  }
  if (v.size() > size_t(kMaxRank)) {
    return PathError(path, "a shape of rank " + std::to_string(v.size()) +
                               " is more than the maximum rank " + std::to_string(kMaxRank));
  }
  std::vector<int64_t> dims;
  for (size_t i = 0; i < v.size(); ++i) {
    int64_t d = -1;
    if (!unknown(v[i]) &&
        JsonToInteger(v[i], -1, std::numeric_limits<int64_t>::max(), &d) != ScalarError::kNone) {
      return PathError(path.Index(int64_t(i)),
                       "expected a dimension (an int >= 0, or -1 for unknown), got " +
                           DescribeValue(v[i]));
    }
    dims.push_back(d);
  }
  return PartialShape(std::move(dims));
}

void AppendJsonString(std::string_view s, std::string* out) {
  static constexpr char kHex[] = "0123456789abcdef";
  out->reserve(out->size() + s.size() + 2);
  out->push_back('"');
  for (size_t i = 0; i < s.size();) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    if (c >= 0x80) {
      // Valid UTF-8 as is; a stray byte (a message quoting a malformed body)
      // as U+FFFD, so the output is always valid JSON.
      size_t n = Utf8SequenceLength(s, i);
      if (n == 0) {
        out->append("\\ufffd");
        ++i;
      } else {
        out->append(s.substr(i, n));
        i += n;
      }
      continue;
    }
    switch (c) {
      case '"': out->append("\\\""); break;
      case '\\': out->append("\\\\"); break;
      case '\b': out->append("\\b"); break;
      case '\f': out->append("\\f"); break;
      case '\n': out->append("\\n"); break;
      case '\r': out->append("\\r"); break;
      case '\t': out->append("\\t"); break;
      default:
        if (c < 0x20) {
          out->append("\\u00");
          out->push_back(kHex[c >> 4]);
          out->push_back(kHex[c & 15]);
        } else {
          out->push_back(char(c));
        }
    }
    ++i;
  }
  out->push_back('"');
}

void AppendInt(int64_t v, std::string* out) {
  char buf[24];
  auto r = std::to_chars(buf, buf + sizeof(buf), v);
  out->append(buf, r.ptr);
}

void AppendFloat(float v, std::string* out) { AppendFloating(v, out); }
void AppendDouble(double v, std::string* out) { AppendFloating(v, out); }

float NarrowToFloat(double d) {
  float f = static_cast<float>(d);
  if (double(f) == d) return f;
  float other = std::nextafter(f, d > double(f) ? std::numeric_limits<float>::infinity()
                                                : -std::numeric_limits<float>::infinity());
  // Sums of two floats and halving them are exact in double.
  if ((double(f) + double(other)) / 2 != d || std::isinf(other)) return f;
  auto reads_as_d = [d](float x) {
    char buf[40];
    auto r = std::to_chars(buf, buf + sizeof(buf), x);
    double back = 0;
    std::from_chars(buf, r.ptr, back);
    return back == d;
  };
  return reads_as_d(other) && !reads_as_d(f) ? other : f;
}

}  // namespace flowstate::api::internal

namespace flowstate::api {
namespace {
std::atomic<int> g_max_json_depth{kDefaultMaxJsonDepth};
}  // namespace

Status SetMaxJsonDepth(int depth) {
  if (depth < 1 || depth > kMaxJsonDepthCeiling) {
    return InvalidArgument("the JSON nesting limit must be in [1, " +
                           std::to_string(kMaxJsonDepthCeiling) + "], got " +
                           std::to_string(depth));
  }
  g_max_json_depth.store(depth, std::memory_order_relaxed);
  return Status();
}

int MaxJsonDepth() { return g_max_json_depth.load(std::memory_order_relaxed); }

Status CheckJsonDepth(std::string_view json, std::string_view path, int max_depth) {
  int64_t at = internal::TooDeepAt(json, max_depth);
  return at < 0 ? Status() : internal::TooDeepError(std::string(path), max_depth, at);
}

}  // namespace flowstate::api

// PRIVATE to api/: the nlohmann/json-based pieces the codec's .cc files
// share, for codecs of bigger documents (job files) that hold graphs and
// tensors as sub-documents and should not print and re-parse them. Never
// include this header outside api/: api's public headers are JSON-library
// free (json_codec.h).
//
// JsonPath is how errors name values. A child path refers to its parent and
// to its key, so build children inline (`Parse(v, path.Key("attrs"))`) or
// from a named parent that outlives them; building one costs no allocation,
// the text is only made for an error.
#ifndef FLOWSTATE_API_JSON_INTERNAL_H_
#define FLOWSTATE_API_JSON_INTERNAL_H_

#include <nlohmann/json.hpp>

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <optional>
#include <string>
#include <string_view>

#include "api/json_codec.h"
#include "graph/attr_value.h"
#include "graph/status.h"
#include "graph/tensor.h"

namespace flowstate::api::internal {

// Objects keep the order of the document (feeds, error order).
using Json = nlohmann::ordered_json;

class JsonPath {
 public:
  explicit JsonPath(std::string_view root) : key_(root) {}
  JsonPath Key(std::string_view key) const { return JsonPath(this, key, -1); }
  JsonPath Index(int64_t i) const { return JsonPath(this, {}, i); }
  // "graph.nodes[3].attrs.value", "feeds[\"x:0\"]"; "" for an empty root.
  std::string ToString() const;

 private:
  JsonPath(const JsonPath* parent, std::string_view key, int64_t index)
      : parent_(parent), key_(key), index_(index) {}
  const JsonPath* parent_ = nullptr;
  std::string_view key_;  // the root's text for the root
  int64_t index_ = -1;    // >= 0 for an array element
};

// Appends `key` to a path text: ".key", or ["key"] when not an identifier.
void AppendPathKey(std::string_view key, std::string* path);

// INVALID_ARGUMENT "<path>: <message>" (just the message for an empty path).
Status PathError(const JsonPath& path, std::string_view message, std::string_view node = "");
Status PathError(const std::string& path, std::string_view message, std::string_view node = "");

// A JSON value in error messages: a number or bool as written, a string
// quoted (cut after 32 bytes), else "null", "an array" or "an object".
std::string DescribeValue(const Json& v);

// Parses `text` into *out; INVALID_ARGUMENT naming `path` and the parser's
// position on malformed text, or the nesting limit (MaxJsonDepth()) on text
// that nests deeper. Tries FastParseJson first (with `pack_tensor_data` as
// given).
Status ParseJsonText(std::string_view text, const JsonPath& path, Json* out,
                     bool pack_tensor_data = false);

// CheckJsonDepth's scan: the offset of the first bracket that opens level
// max_depth + 1, or -1 (also for text that is malformed before that).
int64_t TooDeepAt(std::string_view text, int max_depth);
// CheckJsonDepth's error for that offset.
Status TooDeepError(const std::string& path, int max_depth, int64_t at);

// One number of a packed tensor "data" array: the number type nlohmann's
// parser would have given it, and its value.
struct PackedNumber {
  enum class Kind : uint8_t { kUnsigned, kInteger, kFloat };
  Kind kind = Kind::kUnsigned;
  union {
    uint64_t u = 0;
    int64_t i;
    double d;
  };
  Json ToJson() const;  // the element nlohmann would have made
};

// The fast reader for plain documents (json_fast_parse.cc): true with *out
// exactly what nlohmann's parser would make of `text`, or false -- *out
// untouched -- for anything it leaves to nlohmann (escapes, non-ASCII
// strings, huge integers, out-of-range numbers, nesting deeper than 64 levels
// or `max_depth`, and every malformed text).
//
// With `pack_tensor_data`, for a run or predict request -- {"feeds" or
// "inputs": {name: {..., "data": [numbers]}}} -- a "data" array made only of
// numbers is read straight into PackedNumbers, held in the document as a
// binary value (which JSON text never yields); TensorFromJson reads that as
// the array it was, with the same results and messages, without a DOM node
// per number. Everything else is as without it.
bool FastParseJson(std::string_view text, Json* out, bool pack_tensor_data = false,
                   int max_depth = kDefaultMaxJsonDepth);
// The numbers of a packed array (REQUIRES: v.is_binary(), from FastParseJson).
std::vector<PackedNumber> UnpackNumbers(const Json& v);

// A parsed request document that is destroyed faster than ~basic_json:
// nlohmann moves every array's elements to a heap stack before destroying
// them, one by one (~30 ns per number with its assertions on); this frees
// arrays as plain vectors, deepest first. Use it for documents that hold
// tensors.
class Document {
 public:
  Document() = default;
  Document(const Document&) = delete;
  Document& operator=(const Document&) = delete;
  ~Document();
  Json& operator*() { return value_; }
  Json* operator->() { return &value_; }
  Json* get() { return &value_; }

 private:
  Json value_;
};

// A view's text (views_json.cc): compact, with invalid UTF-8 in a string
// replaced, never thrown on.
std::string DumpJson(const Json& j);
// A view's time: RFC 3339 text (FormatRfc3339), null for none (<= 0).
Json TimeJson(double seconds_since_epoch);

// The member `key` of an object, or nullptr when absent or null (optional
// fields treat null as absent).
const Json* FindField(const Json& object, std::string_view key);

// Fails unless v is an object whose keys are all in `allowed`; `what` names
// the object in the message ("a graph", "a node").
Status CheckObject(const Json& v, const JsonPath& path, std::string_view what,
                   std::initializer_list<std::string_view> allowed,
                   std::string_view node = "");

// Scalar conversions without messages, shared by attrs and tensor elements.
enum class ScalarError : uint8_t { kNone, kWrongType, kNotInteger, kOutOfRange };
// An integer in [lo, hi]; an integral float (2.0) counts.
ScalarError JsonToInteger(const Json& v, int64_t lo, int64_t hi, int64_t* out);
ScalarError NumberToInteger(const PackedNumber& v, int64_t lo, int64_t hi, int64_t* out);
// A number, or one of the non-finite strings ("NaN", "-Infinity", ...).
// kOutOfRange for a number the parser overflowed (1e999).
ScalarError JsonToDouble(const Json& v, double* out);
ScalarError NumberToDouble(const PackedNumber& v, double* out);

// Scalars. Integers accept integral floats (2.0); floats accept integers and
// the non-finite strings. `what` is the expected thing in messages ("an
// int", "a float"). Errors: "<path>: expected <what>, got <type or value>",
// "<path>: <value> is out of range for <what>".
StatusOr<int64_t> ReadInt(const Json& v, const JsonPath& path, std::string_view what = "an int");
StatusOr<double> ReadFloat(const Json& v, const JsonPath& path, std::string_view what = "a float");
StatusOr<std::string> ReadString(const Json& v, const JsonPath& path);
StatusOr<DataType> ReadDataType(const Json& v, const JsonPath& path);
// A partial shape: [2, -1] (null or "?" for a dim), or null / "?".
StatusOr<PartialShape> ReadPartialShape(const Json& v, const JsonPath& path);

// Members of an object by key, for documents with optional fields (a job
// spec, a stored job view). Absent or null leaves *out as it is (its
// default); with `required`, absence is "<path>.<key>: is required". Type
// errors: "<path>.<key>: expected a string (an integer, a number, a bool),
// got <value>". Integers accept integral floats; below `min_value` is
// "must be >= <min_value>". Numbers must be JSON numbers (no "NaN").
Status ReadStringField(const Json& object, const JsonPath& path, std::string_view key,
                       std::string* out, bool required = false);
Status ReadIntField(const Json& object, const JsonPath& path, std::string_view key, int64_t* out,
                    int64_t min_value = std::numeric_limits<int64_t>::min(),
                    bool required = false);
Status ReadNumberField(const Json& object, const JsonPath& path, std::string_view key,
                       double* out);
Status ReadNumberField(const Json& object, const JsonPath& path, std::string_view key,
                       std::optional<double>* out);
Status ReadBoolField(const Json& object, const JsonPath& path, std::string_view key, bool* out);
Status ReadBoolField(const Json& object, const JsonPath& path, std::string_view key,
                     std::optional<bool>* out);

// Tensors, graphs and named tensor maps held in a parsed document.
// `tensor_bytes`: a binary body's bytes after its JSON, which tensors of the
// form {"data_offsets": [begin, end]} point into; nullptr for a JSON body
// (that form is then an error).
StatusOr<Tensor> TensorFromJson(const Json& v, std::optional<DataType> dtype,
                                const JsonPath& path, size_t max_bytes,
                                const std::string_view* tensor_bytes = nullptr);
StatusOr<GraphDef> GraphFromJson(const Json& v, const JsonPath& path,
                                 const GraphJsonOptions& options);
// One plain node of a graph (name, op, inputs, attrs, device) into *node.
Status ReadNode(const Json& v, const JsonPath& path, const OpRegistry& registry, size_t max_bytes,
                NodeDef* node);
// A {"op": "While"} or {"op": "If"} node (control_flow_json.cc).
bool IsCompactControlFlowNode(const Json& v);
// Lowers nodes[i] for each i of `compact` to raw control-flow ops appended
// to *graph, which holds the graph's other nodes. Errors name the node,
// inside a function by its full name ("w/body/matmul").
Status LowerControlFlowNodes(const Json& nodes, const JsonPath& nodes_path,
                             const std::vector<size_t>& compact, const OpRegistry& registry,
                             size_t max_bytes, GraphDef* graph);
// {name: tensor}; names must parse as TensorIds without '^'.
StatusOr<NamedTensors> NamedTensorsFromJson(const Json& v, const JsonPath& path,
                                            size_t max_bytes, const FeedDtypes& dtypes = nullptr,
                                            const std::string_view* tensor_bytes = nullptr);

// Writers: append JSON text to *out.
void AppendJsonString(std::string_view s, std::string* out);  // quoted, escaped
void AppendInt(int64_t v, std::string* out);
void AppendFloat(float v, std::string* out);    // shortest; "NaN" etc. quoted
void AppendDouble(double v, std::string* out);  // shortest; "NaN" etc. quoted
void AppendTensorJson(const Tensor& t, Encoding encoding, std::string* out);
void AppendGraphJson(const GraphDef& graph, Encoding tensor_encoding, std::string* out);
// With `self_describing`, a tensor whose dtype a reader without a graph
// would not infer back from its nested form (float64, int64, uint8,
// float16 ...: only float32, int32 and bool are) is written in the data
// form instead, with its dtype: what request writers need.
void AppendNamedTensors(const NamedTensors& tensors, Encoding encoding, std::string* out,
                        bool self_describing = false);

// The float nearest to the decimal a JSON number was read from, given the
// double the parser made of it. Plain (float)d differs when d lies exactly
// between two floats (decimal -> double -> float rounds twice): this picks
// the float whose shortest decimal form reads as d, so every float printed
// by AppendFloat reads back exactly (e.g. 7.038531e-26f). REQUIRES: d is
// finite and within float range.
float NarrowToFloat(double d);

}  // namespace flowstate::api::internal

#endif  // FLOWSTATE_API_JSON_INTERNAL_H_

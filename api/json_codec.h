// The JSON codec of the REST API: request and response bodies to and from
// the engine's own types (GraphDef, Tensor, Status), in the forms DESIGN.md
// gives.
//
// Every function takes and returns JSON *text*; no JSON library type appears
// here (nlohmann/json is used privately in the .cc files). Every error is
// INVALID_ARGUMENT -- RESOURCE_EXHAUSTED for a tensor over the size limit --
// and its message starts with the JSON path of the offending value, under a
// prefix the caller chooses so that it reads naturally inside a bigger
// document:
//
//   graph.nodes[3].attrs.transpose_a: expected a bool, got an integer
//   feeds["x:0"][1]: expected 3 elements (like feeds["x:0"][0]), got 2
//
// When the error lies inside a graph node whose name is known, Status::node()
// is that name. Keys that are not identifiers are written ["like this"].
//
// Tensors in JSON take one of three encodings (Encoding below):
//   nested  [[1, 2], [3, 4]]                       dtype from context
//   data    {"dtype": "float32", "shape": [2, 2], "data": [1, 2, 3, 4]}
//   b64     {"dtype": "float32", "shape": [2, 2], "b64": "AACAPwAAAEA..."}
// ("b64": the raw little-endian bytes, row-major.) Where no dtype is given or
// expected, it is inferred from the values: bool for true/false, float32 when
// any number has a fraction or exponent ("1.0", "1e3") or is one of the
// strings below, int32 for integers -- int64 when one does not fit int32.
// Non-finite floats are the JSON strings "NaN", "Infinity", "-Infinity" (on
// input also "nan", "inf", "-inf", "+Infinity" and the like, any case).
// A value that does not fit the dtype (300 for uint8, 1.5 for int32, 1e39
// for float32) is an error; an integral float (2.0) is accepted for an
// integer dtype. Floats are printed in the shortest form that reads back to
// the same value, always with a '.' or an exponent.
//
// Duplicate keys in an object: the last one wins. Every parser here first
// checks the document's nesting depth (CheckJsonDepth below), so that no
// recursive reader, copy or printer of it can run out of stack. All
// functions are pure and thread-safe; the one process-wide setting is the
// depth limit, SetMaxJsonDepth.
#ifndef FLOWSTATE_API_JSON_CODEC_H_
#define FLOWSTATE_API_JSON_CODEC_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "graph/attr_value.h"
#include "graph/gradients.h"
#include "graph/op_def.h"
#include "graph/status.h"
#include "graph/tensor.h"
#include "graph/types.h"

namespace flowstate::api {

// The largest tensor a request may carry unless the caller says otherwise.
inline constexpr size_t kDefaultMaxTensorBytes = size_t{64} << 20;  // 64 MiB

// ---------------------------------------------------------------------------
// Nesting depth.
//
// A document whose arrays and objects nest deeper than the limit is refused
// before anything is built from it: `[[[...]]]` 50,000 deep is ~100 KiB, and
// any recursive walk of it overflows a thread's stack. The root array or
// object is level 1. The limit is process-wide (an atomic): it protects the
// process's stacks, it applies to every reader of client JSON alike -- this
// codec, job specs, checkpoint metadata -- and `flowstate serve` sets it once
// at startup from the configuration key limits.max_json_depth.
inline constexpr int kDefaultMaxJsonDepth = 100;  // protobuf's default recursion limit
inline constexpr int kMaxJsonDepthCeiling = 10000;  // what SetMaxJsonDepth accepts at most
// INVALID_ARGUMENT unless 1 <= depth <= kMaxJsonDepthCeiling.
Status SetMaxJsonDepth(int depth);
int MaxJsonDepth();

// OK unless `json` nests deeper than `max_depth` (default: MaxJsonDepth());
// then INVALID_ARGUMENT "<path>: JSON nesting deeper than 100 levels (at byte
// 4711); the limit is limits.max_json_depth". One linear pass that counts
// brackets outside strings, with no allocation; malformed text passes unless
// it is too deep (the parser then reports what is wrong with it). For
// readers of client JSON outside this codec (json::parse does not recurse,
// but copying, printing and comparing a parsed document do).
Status CheckJsonDepth(std::string_view json, std::string_view path = "",
                      int max_depth = MaxJsonDepth());

enum class Encoding : uint8_t { kData, kB64, kNested };
std::string_view EncodingName(Encoding encoding);  // "data", "b64", "nested"
StatusOr<Encoding> EncodingFromString(std::string_view name);

// ---------------------------------------------------------------------------
// Tensors.

// Parses one tensor in any of the three encodings. `dtype`, when given (and
// not kInvalid), is the dtype the tensor must have: it types a nested array or a "data" object
// without "dtype", and an object whose "dtype" differs is an error. `path`
// prefixes error messages. A tensor of more than `max_bytes` bytes is
// RESOURCE_EXHAUSTED (checked before its memory is allocated).
StatusOr<Tensor> ParseTensorJson(std::string_view json,
                                 std::optional<DataType> dtype = std::nullopt,
                                 std::string_view path = "tensor",
                                 size_t max_bytes = kDefaultMaxTensorBytes);

// REQUIRES: t.IsInitialized() (an uninitialized tensor prints as null).
// kNested loses the dtype, and the shape of a tensor with a 0 dimension
// other than the last ([0, 3] prints as []); kData and kB64 are exact except
// that every NaN reads back as the canonical quiet NaN under kData.
std::string TensorToJson(const Tensor& t, Encoding encoding = Encoding::kData);

// ---------------------------------------------------------------------------
// Graphs: {"nodes": [{"name", "op", "inputs", "attrs", "device"}, ...]}.

struct GraphJsonOptions {
  // Where attr kinds come from. nullptr: OpRegistry::Global().
  const OpRegistry* registry = nullptr;
  // The largest tensor attr accepted. Default: kDefaultMaxTensorBytes.
  size_t max_tensor_bytes = kDefaultMaxTensorBytes;
};

// Parses a graph. "nodes" may be absent (an empty graph); "name" and "op"
// are required, "inputs" (strings: "x", "x:1", "^x"), "attrs" and "device"
// optional (null is the same as absent). Any other field is an error, as is
// an op the registry does not know or an attr the op does not declare.
//
// Attr values are read by the kind the OpDef declares:
//   int 3 | float 0.5 (an int is accepted) | bool | string | type "float32"
//   shape [2, -1] (-1, null or "?" for an unknown dimension; null or "?" for
//         an unknown rank) | tensor (any encoding, see below)
//   list(int) [1, 2] | list(float) | list(string) | list(type) | list(shape)
// A tensor attr takes its dtype from a sibling "dtype" attr when the node
// has one; when the op declares a "dtype" type attr that the node omits
// (Const without "dtype"), the tensor's dtype -- given or inferred -- is set
// as that attr. Attrs named "_..." (runtime annotations) are not declared by
// ops; they are read by JSON type: string, bool, int, float, or a list of
// ints (also []), floats or strings.
//
// Control flow: a node {"op": "While", "name", "loop_vars", "cond", "body",
// "parallel_iterations", "device"} or {"op": "If", "name", "pred", "inputs",
// "then", "else", "device"} is lowered to the raw control-flow ops by
// graph/control_flow_builders.h's WhileLoop and Cond; cond, body, then and else
// are functions {"args": [names], "nodes": [...], "output": name} (a
// While's cond) or {..., "outputs": [names]}. A function's node "n" becomes
// "<name>/body/n" (cond, then, else likewise), and errors about it name it
// so; an input inside a function names an arg, a node of the function, of
// the enclosing one, up to the graph's (README, "Conditionals and loops").
//
// The codec checks each value's form, not the graph: duplicate names,
// dangling inputs, dtype constraints and shapes are Graph::Create's to check.
StatusOr<GraphDef> ParseGraphJson(std::string_view json, std::string_view path = "graph",
                                  const GraphJsonOptions& options = {});

// The JSON form ParseGraphJson reads; tensor attrs in `tensor_encoding`,
// except that kNested falls back to kData for a tensor it cannot carry
// exactly (no matching "dtype" attr beside it, or a 0 dimension before the
// last).
// Round-trips: ParseGraphJson(GraphToJson(g)) == g for every graph of
// registered ops whose attrs have the declared kinds (runtime "_" attrs
// round-trip when they hold a string, bool, int, float or a non-empty list of
// ints, floats or strings, or an empty list(int)).
std::string GraphToJson(const GraphDef& graph, Encoding tensor_encoding = Encoding::kData);

// ---------------------------------------------------------------------------
// Session runs (POST /v1/sessions/{id}/run):
//   {"feeds": {name: tensor}, "fetches": [...], "targets": [...],
//    "encoding": "data" | "b64" | "nested"}  ->  {"outputs": {name: tensor}}

using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

struct RunRequest {
  NamedTensors feeds;                // in the order of the body
  std::vector<std::string> fetches;  // "x" or "x:1"
  std::vector<std::string> targets;  // node names
  Encoding encoding = Encoding::kData;  // of the outputs
  // "encoding": "binary": the outputs as a binary body (RunOutputsToBinary;
  // `encoding` then stays kData).
  bool binary_outputs = false;
  // "trace": true: the response carries the step's trace as Chrome trace
  // JSON ("trace": {...}, api/views_json.h StepTraceToChromeJson).
  bool trace = false;
  // "timeout_ms": the step's deadline; a step still running then (waiting
  // on a queue, say) fails DEADLINE_EXCEEDED. 0 (the default): none.
  int64_t timeout_ms = 0;
  // "step_tag": the client's name for the step, by which it may cancel it
  // (POST /v1/sessions/{id}/cancel) while it runs. "": none.
  std::string step_tag;
};

// The dtype the graph expects for a feed (or a predict input) `name`
// ("x", "x:0"), when the caller knows it (a session's or a job's
// Placeholder): a nested array, which carries no dtype, is read as that
// dtype ("dtype from context"); without one (null function, or nullopt) it
// is inferred as above. A tensor object keeps its own "dtype".
using FeedDtypes = std::function<std::optional<DataType>(const std::string& name)>;

// Every field is optional (null is the same as absent). Feed names and
// fetches must parse as TensorIds without '^'; targets must be valid node
// names. A feed's dtype comes from its tensor object, from `dtypes` (nested
// arrays), or is inferred (the session checks feeds against the
// Placeholders). Each feed is limited to `max_tensor_bytes`.
// `tensor_bytes`: a binary body's bytes after the JSON (SplitBinaryBody),
// which feeds of the form {"data_offsets": [begin, end]} point into; nullopt
// for a JSON body.
StatusOr<RunRequest> ParseRunRequestJson(std::string_view json, std::string_view path = "",
                                         size_t max_tensor_bytes = kDefaultMaxTensorBytes,
                                         const FeedDtypes& dtypes = nullptr,
                                         std::optional<std::string_view> tensor_bytes = std::nullopt);
// The body ParseRunRequestJson reads (for clients and tests); feeds in
// `feed_encoding`, except that a nested feed whose dtype would not be
// inferred back (only float32, int32 and bool are) is written with its
// dtype in the data form, so the body reads back as the same request.
std::string RunRequestToJson(const RunRequest& request,
                             Encoding feed_encoding = Encoding::kData);

// Job predictions (POST /v1/jobs/{id}/predict):
//   {"inputs": {name: tensor}, "fetches": [...], "encoding": ...}
// "fetches" is required (at least the field; [] is allowed), "inputs" and
// "encoding" optional; names are checked as for a run request. `what` names
// the body in messages ("a predict request"). Each input is limited to
// `max_tensor_bytes`.
struct PredictRequest {
  NamedTensors inputs;               // in the order of the body
  std::vector<std::string> fetches;  // "x" or "x:1"
  Encoding encoding = Encoding::kData;  // of the outputs
  bool binary_outputs = false;          // "encoding": "binary", as for a run
};
StatusOr<PredictRequest> ParsePredictRequestJson(
    std::string_view json, std::string_view path = "",
    size_t max_tensor_bytes = kDefaultMaxTensorBytes, const FeedDtypes& dtypes = nullptr,
    std::optional<std::string_view> tensor_bytes = std::nullopt);

// A body holding one graph, {"graph": {"nodes": [...]}} (POST /v1/sessions
// and /extend): the document is parsed once (the graph is not re-printed).
// `what` names the body in messages ("a session"); errors inside the graph
// read "graph.nodes[2]...".
StatusOr<GraphDef> ParseGraphRequestJson(std::string_view json, std::string_view what,
                                         const GraphJsonOptions& options = {});

// POST /v1/sessions/{id}/cancel: {"step_tag": "..."} -> the tag.
StatusOr<std::string> ParseCancelStepJson(std::string_view json);

// POST /v1/gradients: {"graph": {"nodes": [...]}, "y": "loss", "xs": ["w",
// "b"], "prefix": "gradients"} (prefix optional), and its answer
// {"prefix": "gradients", "nodes": [the added nodes], "gradients": [{"dense":
// "gradients/...:0"} | {"indices": ..., "values": ..., "dense_shape": ...} |
// null, one per x]} (graph/gradients.h GradientsOfGraph).
struct GradientsRequest {
  GraphDef graph;
  std::string y;
  std::vector<std::string> xs;
  std::string prefix = "gradients";
};
StatusOr<GradientsRequest> ParseGradientsRequestJson(std::string_view json,
                                                     const GraphJsonOptions& options = {});
std::string GradientsToJson(const GraphDef& added, const std::string& prefix,
                            const std::vector<Gradient>& grads);

// {"outputs": {name: tensor, ...}} in the order given; with a non-empty
// `trace_json` (a JSON object: a traced run's Chrome trace), also
// "trace": that object.
std::string RunOutputsToJson(const NamedTensors& outputs, Encoding encoding,
                             std::string_view trace_json = {});
// The inverse, for clients and tests ({"outputs": ...}, nothing else).
StatusOr<NamedTensors> ParseRunOutputsJson(std::string_view json, std::string_view path = "",
                                           size_t max_tensor_bytes = kDefaultMaxTensorBytes);

// ---------------------------------------------------------------------------
// Binary bodies (Content-Type application/x-flowstate-tensors): a run or
// predict request, or their response, whose tensors travel as raw bytes
// after the JSON instead of inside it -- safetensors' layout:
//   8 bytes: n, unsigned little-endian | n bytes: the JSON document | the tensor bytes
// The JSON is the ordinary request or response; a tensor in it may take the
// form {"dtype", "shape", "data_offsets": [begin, end]}: bytes [begin, end)
// of the tensor bytes, little-endian, row-major (the other forms stay
// allowed). A request, JSON or binary, asks for a binary response with
// "encoding": "binary". Why: a 64 MiB feed costs no base64 and no JSON
// numbers, and a client can send an array's memory as it is (README,
// "Large tensors").
inline constexpr std::string_view kTensorsContentType = "application/x-flowstate-tensors";

struct BinaryBody {
  std::string_view json;          // the JSON document
  std::string_view tensor_bytes;  // what follows it
};
// INVALID_ARGUMENT when the body is shorter than its 8-byte length, or the
// length runs past the body's end. Views into `body`.
StatusOr<BinaryBody> SplitBinaryBody(std::string_view body);

// {"outputs": {name: {"dtype", "shape", "data_offsets"}}[, "trace": {...}]}
// as a binary body, tensors one after the other in the order given (each
// begins on a multiple of 64 bytes, so that a reader may view it in place).
// REQUIRES: every output IsInitialized().
std::string RunOutputsToBinary(const NamedTensors& outputs, std::string_view trace_json = {});
// The inverse, for tests ({"outputs": ...}; a "trace" is skipped).
StatusOr<NamedTensors> ParseRunOutputsBinary(std::string_view body,
                                             size_t max_tensor_bytes = kDefaultMaxTensorBytes);

// ---------------------------------------------------------------------------
// Errors.

// {"error": {"code": "INVALID_ARGUMENT", "message": "...", "node": "..."}};
// "node" is "" when the status names no node. REQUIRES: !status.ok() (an OK
// status gives code "OK").
std::string StatusToJson(const Status& status);
// The inverse, for clients: the Status an error body describes; UNKNOWN,
// with the reason, when `json` is not such a body.
Status StatusFromJson(std::string_view json);

// The HTTP status of a response carrying an error of `code`:
//   OK 200; INVALID_ARGUMENT, FAILED_PRECONDITION, OUT_OF_RANGE 400;
//   UNAUTHENTICATED 401; PERMISSION_DENIED 403; NOT_FOUND 404;
//   ALREADY_EXISTS, ABORTED 409; CANCELLED 499 (client closed request);
//   UNIMPLEMENTED 501; UNAVAILABLE 503; DEADLINE_EXCEEDED 504; others 500.
// RESOURCE_EXHAUSTED gives `resource_exhausted_status`: 413 (payload too
// large) by default, since that is what this codec reports it for; a caller
// reporting a quota or rate limit passes 429.
int HttpStatusFor(Code code, int resource_exhausted_status = 413);

}  // namespace flowstate::api

#endif  // FLOWSTATE_API_JSON_CODEC_H_

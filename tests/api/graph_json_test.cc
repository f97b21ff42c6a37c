#include <gtest/gtest.h>

#include <cmath>

#include "api/json_codec.h"
#include "graph/graph.h"
#include "tests/api/test_util.h"

namespace flowstate::api {
namespace {

using test::ExpectError;
using test::ExpectInvalid;

// A registry with one op declaring an attr of every kind (the global
// registry has no list(float), list(string), list(type) or list(shape)).
const OpRegistry* KindsRegistry() {
  static const OpRegistry* r = [] {
    auto* reg = new OpRegistry();
    reg->Register(OpDefBuilder("AllKinds")
                      .Attr("i: int").Attr("f: float").Attr("b: bool").Attr("s: string")
                      .Attr("t: type").Attr("sh: shape").Attr("v: tensor")
                      .Attr("li: list(int)").Attr("lf: list(float)").Attr("ls: list(string)")
                      .Attr("lt: list(type)").Attr("lsh: list(shape)"))
        .CheckOk();
    return reg;
  }();
  return r;
}

StatusOr<GraphDef> ParseKinds(const std::string& attrs) {
  return ParseGraphJson(R"({"nodes": [{"name": "k", "op": "AllKinds", "attrs": )" + attrs + "}]}",
                        "graph", GraphJsonOptions{KindsRegistry()});
}

void ExpectGraphsEqual(const GraphDef& a, const GraphDef& b) {
  ASSERT_EQ(a.nodes.size(), b.nodes.size());
  for (size_t i = 0; i < a.nodes.size(); ++i) {
    const NodeDef& x = a.nodes[i];
    const NodeDef& y = b.nodes[i];
    EXPECT_EQ(x.name, y.name);
    EXPECT_EQ(x.op, y.op);
    EXPECT_EQ(x.inputs, y.inputs);
    EXPECT_EQ(x.device, y.device);
    ASSERT_EQ(x.attrs.size(), y.attrs.size()) << x.name;
    for (const auto& [name, value] : x.attrs) {
      auto it = y.attrs.find(name);
      ASSERT_NE(it, y.attrs.end()) << x.name << "." << name;
      EXPECT_TRUE(value == it->second)
          << x.name << "." << name << ": " << value.DebugString() << " vs "
          << it->second.DebugString();
    }
  }
}

void ExpectRoundTrip(const GraphDef& g, const GraphJsonOptions& options = {}) {
  for (Encoding e : {Encoding::kData, Encoding::kB64, Encoding::kNested}) {
    std::string json = GraphToJson(g, e);
    StatusOr<GraphDef> back = ParseGraphJson(json, "graph", options);
    ASSERT_TRUE(back.ok()) << back.status().ToString() << "\n" << json;
    ExpectGraphsEqual(g, *back);
  }
}

TEST(GraphJson, ReadsEveryAttrKind) {
  StatusOr<GraphDef> g = ParseKinds(R"({
      "i": -3, "f": 0.25, "b": true, "s": "hello \"you\"", "t": "float64", "sh": [2, -1],
      "v": {"dtype": "int64", "shape": [2], "data": [1, 2]},
      "li": [1, 2, 3], "lf": [0.5, 1, "-Infinity"], "ls": ["a", "b"],
      "lt": ["int32", "bool"], "lsh": [[1], null, [], [-1, 3]]})");
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  ASSERT_EQ(g->nodes.size(), 1u);
  const AttrMap& a = g->nodes[0].attrs;
  EXPECT_EQ(a.at("i").i(), -3);
  EXPECT_EQ(a.at("f").f(), 0.25);
  EXPECT_TRUE(a.at("b").b());
  EXPECT_EQ(a.at("s").s(), "hello \"you\"");
  EXPECT_EQ(a.at("t").type(), DataType::kFloat64);
  EXPECT_EQ(a.at("sh").shape(), PartialShape({2, -1}));
  EXPECT_TRUE(TensorsEqual(a.at("v").tensor(), Tensor::FromVector<int64_t>({1, 2})));
  EXPECT_EQ(a.at("li").ints(), (std::vector<int64_t>{1, 2, 3}));
  EXPECT_EQ(a.at("lf").floats(), (std::vector<double>{0.5, 1, -INFINITY}));
  EXPECT_EQ(a.at("ls").strings(), (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(a.at("lt").types(), (std::vector<DataType>{DataType::kInt32, DataType::kBool}));
  EXPECT_EQ(a.at("lsh").shapes(), (std::vector<PartialShape>{PartialShape({1}),
                                                             PartialShape::Unknown(),
                                                             PartialShape(std::vector<int64_t>{}),
                                                             PartialShape({-1, 3})}));
  ExpectRoundTrip(*g, GraphJsonOptions{KindsRegistry()});
}

TEST(GraphJson, LenientForms) {
  // An int is a float; an integral float is an int; null or "?" is an
  // unknown shape or dimension; empty lists of every kind.
  StatusOr<GraphDef> g = ParseKinds(R"({"i": 2.0, "f": 3, "sh": "?",
      "li": [], "lf": [], "ls": [], "lt": [], "lsh": [["?", null, 4]]})");
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  const AttrMap& a = g->nodes[0].attrs;
  EXPECT_EQ(a.at("i").kind(), AttrKind::kInt);
  EXPECT_EQ(a.at("i").i(), 2);
  EXPECT_EQ(a.at("f").kind(), AttrKind::kFloat);
  EXPECT_EQ(a.at("f").f(), 3.0);
  EXPECT_FALSE(a.at("sh").shape().rank_known());
  EXPECT_EQ(a.at("lf").kind(), AttrKind::kFloatList);
  EXPECT_EQ(a.at("lt").kind(), AttrKind::kTypeList);
  EXPECT_EQ(a.at("lsh").shapes()[0], PartialShape({-1, -1, 4}));
  ExpectRoundTrip(*g, GraphJsonOptions{KindsRegistry()});
  // NaN floats.
  g = ParseKinds(R"({"f": "NaN"})");
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  EXPECT_TRUE(std::isnan(g->nodes[0].attrs.at("f").f()));
}

TEST(GraphJson, RejectsAttrsOfTheWrongKind) {
  const std::pair<const char*, const char*> cases[] = {
      {R"({"i": "3"})", "graph.nodes[0].attrs.i: expected an int, got \"3\""},
      {R"({"i": 1.5})", "graph.nodes[0].attrs.i: expected an int, got 1.5"},
      {R"({"i": 1e30})", "graph.nodes[0].attrs.i: 1e+30 is out of range for an int"},
      {R"({"f": true})", "graph.nodes[0].attrs.f: expected a float, got true"},
      {R"({"f": "fast"})", "graph.nodes[0].attrs.f: expected a float, got \"fast\""},
      {R"({"b": 1})", "graph.nodes[0].attrs.b: expected a bool, got 1"},
      {R"({"s": 3})", "graph.nodes[0].attrs.s: expected a string, got 3"},
      {R"({"t": "float33"})", "graph.nodes[0].attrs.t: unknown dtype 'float33'"},
      {R"({"t": 1})", "graph.nodes[0].attrs.t: expected a dtype name, got 1"},
      {R"({"sh": [2, -2]})", "graph.nodes[0].attrs.sh[1]: expected a dimension"},
      {R"({"sh": 5})", "graph.nodes[0].attrs.sh: expected a shape"},
      {R"({"sh": [1,1,1,1,1,1,1,1,1]})", "graph.nodes[0].attrs.sh: a shape of rank 9"},
      {R"({"v": [[1], [2, 3]]})", "graph.nodes[0].attrs.v[1]: expected 1 elements like "
                                  "graph.nodes[0].attrs.v[0], got 2"},
      {R"({"v": null})", "graph.nodes[0].attrs.v: expected a tensor"},
      {R"({"li": 5})", "graph.nodes[0].attrs.li: expected a list of ints, got 5"},
      {R"({"li": [1, 1.5]})", "graph.nodes[0].attrs.li[1]: expected an int, got 1.5"},
      {R"({"lf": ["x"]})", "graph.nodes[0].attrs.lf[0]: expected a float, got \"x\""},
      {R"({"ls": ["a", 1]})", "graph.nodes[0].attrs.ls[1]: expected a string, got 1"},
      {R"({"lt": ["int32", 5]})", "graph.nodes[0].attrs.lt[1]: expected a dtype name, got 5"},
      {R"({"lsh": [[1], 3]})", "graph.nodes[0].attrs.lsh[1]: expected a shape"},
      {R"({"lsh": {}})", "graph.nodes[0].attrs.lsh: expected a list of shapes, got an object"},
      {R"({"nope": 1})", "graph.nodes[0].attrs.nope: op AllKinds has no attr 'nope' (it has: "
                         "i, f, b, s, t, sh, v, li, lf, ls, lt, lsh)"},
      {R"([1])", "graph.nodes[0].attrs: expected an object of attrs, got an array"},
  };
  for (const auto& [attrs, error] : cases) {
    SCOPED_TRACE(attrs);
    ExpectInvalid(ParseKinds(attrs), error, "k");
  }
}

TEST(GraphJson, ConstTakesItsDtypeFromTheDtypeAttr) {
  StatusOr<GraphDef> g = ParseGraphJson(R"({"nodes": [
      {"name": "c", "op": "Const", "attrs": {"dtype": "float32", "value": [[1, 2], [3, 4]]}},
      {"name": "d", "op": "Const", "attrs": {"value": [1.5, 2], "dtype": "float64"}}]})");
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  EXPECT_TRUE(TensorsEqual(g->nodes[0].attrs.at("value").tensor(),
                           Tensor::FromVector<float>({1, 2, 3, 4}, TensorShape({2, 2}))));
  EXPECT_TRUE(TensorsEqual(g->nodes[1].attrs.at("value").tensor(),
                           Tensor::FromVector<double>({1.5, 2})));
  EXPECT_TRUE(Graph::Create(*g).ok());

  ExpectInvalid(ParseGraphJson(R"({"nodes": [
      {"name": "c", "op": "Const", "attrs": {"dtype": "uint8", "value": [1, 300]}}]})"),
                "graph.nodes[0].attrs.value[1]: 300 is out of range for uint8", "c");
  ExpectInvalid(ParseGraphJson(R"({"nodes": [
      {"name": "c", "op": "Const", "attrs": {"dtype": "int32", "value": [1.5]}}]})"),
                "graph.nodes[0].attrs.value[0]: expected an integer (dtype int32), got 1.5", "c");
  ExpectInvalid(ParseGraphJson(R"({"nodes": [{"name": "c", "op": "Const", "attrs": {
      "dtype": "float32", "value": {"dtype": "int32", "shape": [], "data": [1]}}}]})"),
                "graph.nodes[0].attrs.value.dtype: the tensor is int32 but float32 is expected",
                "c");
  ExpectInvalid(ParseGraphJson(R"({"nodes": [
      {"name": "c", "op": "Const", "attrs": {"dtype": "float31", "value": [1]}}]})"),
                "graph.nodes[0].attrs.dtype: unknown dtype 'float31'", "c");
}

TEST(GraphJson, ConstWithoutDtypeInfersAndSetsIt) {
  struct Case {
    const char* value;
    DataType dtype;
  } cases[] = {{"[[1, 2], [3, 4]]", DataType::kInt32},
               {"[1.5, 2]", DataType::kFloat32},
               {"[true]", DataType::kBool},
               {"7", DataType::kInt32},
               {R"({"dtype": "uint8", "shape": [2], "b64": "AQI="})", DataType::kUInt8}};
  for (const Case& c : cases) {
    StatusOr<GraphDef> g = ParseGraphJson(
        std::string(R"({"nodes": [{"name": "c", "op": "Const", "attrs": {"value": )") + c.value +
        "}}]}");
    ASSERT_TRUE(g.ok()) << c.value << ": " << g.status().ToString();
    const AttrMap& a = g->nodes[0].attrs;
    ASSERT_TRUE(a.contains("dtype")) << c.value;
    EXPECT_EQ(a.at("dtype").type(), c.dtype) << c.value;
    EXPECT_EQ(a.at("value").tensor().dtype(), c.dtype) << c.value;
    EXPECT_TRUE(Graph::Create(*g).ok()) << c.value;
  }
}

TEST(GraphJson, InternalAttrsByJsonType) {
  StatusOr<GraphDef> g = ParseGraphJson(R"({"nodes": [{"name": "n", "op": "NoOp", "attrs": {
      "_class": ["loc:@w"], "_n": 3, "_f": 0.5, "_b": true, "_s": "x", "_li": [1, 2],
      "_lf": [1, 2.5], "_e": []}}]})");
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  const AttrMap& a = g->nodes[0].attrs;
  EXPECT_EQ(a.at("_class").strings(), std::vector<std::string>{"loc:@w"});
  EXPECT_EQ(a.at("_n").i(), 3);
  EXPECT_EQ(a.at("_f").f(), 0.5);
  EXPECT_TRUE(a.at("_b").b());
  EXPECT_EQ(a.at("_s").s(), "x");
  EXPECT_EQ(a.at("_li").ints(), (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(a.at("_lf").floats(), (std::vector<double>{1, 2.5}));
  EXPECT_EQ(a.at("_e").kind(), AttrKind::kIntList);
  ExpectRoundTrip(*g);
  EXPECT_TRUE(Graph::Create(*g).ok());

  ExpectInvalid(ParseGraphJson(R"({"nodes": [{"name": "n", "op": "NoOp",
      "attrs": {"_bad": {"a": 1}}}]})"),
                "graph.nodes[0].attrs._bad: expected a string, bool, number, or a list", "n");
  ExpectInvalid(ParseGraphJson(R"({"nodes": [{"name": "n", "op": "NoOp",
      "attrs": {"_mixed": [1, "a"]}}]})"),
                "graph.nodes[0].attrs._mixed: expected a string, bool, number, or a list", "n");
}

TEST(GraphJson, StructuralErrorsNameThePathAndTheNode) {
  struct Case {
    const char* json;
    const char* error;
    const char* node;
  } cases[] = {
      {"[]", "graph: expected a graph (an object), got an array", ""},
      {R"({"nodes": [], "edges": []})",
       "graph.edges: unknown field (a graph has \"nodes\")", ""},
      {R"({"nodes": {}})", "graph.nodes: expected a list of nodes, got an object", ""},
      {R"({"nodes": [3]})", "graph.nodes[0]: expected a node (an object), got 3", ""},
      {R"({"nodes": [{"op": "NoOp"}]})", "graph.nodes[0]: missing \"name\"", ""},
      {R"({"nodes": [{"name": 5, "op": "NoOp"}]})",
       "graph.nodes[0].name: expected a string, got 5", ""},
      {R"({"nodes": [{"name": "a", "op": "NoOp"}, {"name": "b"}]})",
       "graph.nodes[1]: missing \"op\"", "b"},
      {R"({"nodes": [{"name": "a", "op": ["NoOp"]}]})",
       "graph.nodes[0].op: expected a string, got an array", "a"},
      {R"({"nodes": [{"name": "a", "op": "NoOp"}, {"name": "b", "op": "NoOp"},
                     {"name": "c", "op": "NoOp"}, {"name": "d", "op": "Foo"}]})",
       "graph.nodes[3].op: unknown op 'Foo'", "d"},
      {R"({"nodes": [{"name": "a", "op": "NoOp", "colour": "red"}]})",
       "graph.nodes[0].colour: unknown field (a node has \"name\", \"op\", \"inputs\", "
       "\"attrs\", \"device\")", "a"},
      {R"({"nodes": [{"name": "a", "op": "Neg", "inputs": "x"}]})",
       "graph.nodes[0].inputs: expected a list of input names, got \"x\"", "a"},
      {R"({"nodes": [{"name": "a", "op": "Add", "inputs": ["x", 1]}]})",
       "graph.nodes[0].inputs[1]: expected a string (\"x\", \"x:1\" or \"^x\"), got 1", "a"},
      {R"({"nodes": [{"name": "a", "op": "Neg", "inputs": ["x:"]}]})",
       "graph.nodes[0].inputs[0]: malformed input 'x:'", "a"},
      {R"({"nodes": [{"name": "a", "op": "Neg", "inputs": ["^"]}]})",
       "graph.nodes[0].inputs[0]: malformed control input '^'", "a"},
      {R"({"nodes": [{"name": "a", "op": "NoOp", "device": 0}]})",
       "graph.nodes[0].device: expected a string, got 0", "a"},
      {R"({"nodes": [{"name": "a", "op": "NoOp"}, {"name": "b", "op": "NoOp"},
                     {"name": "c", "op": "NoOp"}, {"name": "mm", "op": "MatMul",
                      "inputs": ["a", "b"], "attrs": {"transpose_a": 1}}]})",
       "graph.nodes[3].attrs.transpose_a: expected a bool, got 1", "mm"},
      {R"({"nodes": [{"name": "mm", "op": "MatMul", "attrs": {"transpose": true}}]})",
       "graph.nodes[0].attrs.transpose: op MatMul has no attr 'transpose' (it has: T, "
       "transpose_a, transpose_b)", "mm"},
      {R"({"nodes": [)", "graph: malformed JSON: parse error at line 1, column 12", ""},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.json);
    ExpectInvalid(ParseGraphJson(c.json), c.error, c.node);
  }
}

TEST(GraphJson, PathPrefixAndSizeLimit) {
  const char* json = R"({"nodes": [{"name": "c", "op": "Const", "attrs": {"value": [1, 2, 3]}},
                                   {"name": "x", "op": "Nope"}]})";
  ExpectInvalid(ParseGraphJson(json, "job.graph"), "job.graph.nodes[1].op: unknown op 'Nope'", "x");
  ExpectInvalid(ParseGraphJson(json, ""), "nodes[1].op: unknown op 'Nope'", "x");
  GraphJsonOptions small;
  small.max_tensor_bytes = 8;
  ExpectError(ParseGraphJson(json, "graph", small), Code::kResourceExhausted,
              "graph.nodes[0].attrs.value: a tensor of int32[3] takes 12 bytes", "c");
}

TEST(GraphJson, EmptyGraphsAndNullFields) {
  for (const char* json : {"{}", R"({"nodes": null})", R"({"nodes": []})"}) {
    StatusOr<GraphDef> g = ParseGraphJson(json);
    ASSERT_TRUE(g.ok()) << json << ": " << g.status().ToString();
    EXPECT_TRUE(g->nodes.empty());
  }
  StatusOr<GraphDef> g = ParseGraphJson(
      R"({"nodes": [{"name": "a", "op": "NoOp", "inputs": null, "attrs": null, "device": null}]})");
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  EXPECT_TRUE(g->nodes[0].inputs.empty());
  EXPECT_TRUE(g->nodes[0].attrs.empty());
  EXPECT_EQ(GraphToJson(GraphDef()), R"({"nodes":[]})");
  EXPECT_EQ(GraphToJson(*g), "{\"nodes\":[\n{\"name\":\"a\",\"op\":\"NoOp\",\"inputs\":[],"
                             "\"attrs\":{}}\n]}");
}

// The MLP of DESIGN.md's training job: uint8 images are cast, flattened by a
// Reshape whose shape is a Const, multiplied by a Variable and biased.
constexpr const char* kMlp = R"({"nodes": [
  {"name": "x", "op": "Placeholder", "attrs": {"dtype": "uint8", "shape": [-1, 28, 28]}},
  {"name": "xf", "op": "Cast", "inputs": ["x"], "attrs": {"DstT": "float32"}},
  {"name": "flat_shape", "op": "Const", "attrs": {"value": [-1, 784]}},
  {"name": "flat", "op": "Reshape", "inputs": ["xf", "flat_shape"]},
  {"name": "w", "op": "Variable", "attrs": {"dtype": "float32", "shape": [784, 10]},
   "device": "/job:worker/task:0/device:CPU:0"},
  {"name": "w_shape", "op": "Const", "attrs": {"dtype": "int32",
   "value": {"dtype": "int32", "shape": [2], "b64": "EAMAAAoAAAA="}}},
  {"name": "w_init", "op": "RandomNormal", "inputs": ["w_shape"],
   "attrs": {"dtype": "float32", "seed": 42, "stddev": 0.01}},
  {"name": "w_assign", "op": "Assign", "inputs": ["w", "w_init"]},
  {"name": "b", "op": "Variable", "attrs": {"dtype": "float32", "shape": [10]}},
  {"name": "b_assign", "op": "Assign", "inputs": ["b", "b_zero"]},
  {"name": "b_zero", "op": "Const", "attrs": {"dtype": "float32",
   "value": {"dtype": "float32", "shape": [10], "data": [0,0,0,0,0,0,0,0,0,0]}}},
  {"name": "init", "op": "NoOp", "inputs": ["^w_assign", "^b_assign"]},
  {"name": "mm", "op": "MatMul", "inputs": ["flat", "w"], "attrs": {"transpose_a": false}},
  {"name": "logits", "op": "Add", "inputs": ["mm", "b"], "device": "CPU:0"}
]})";

TEST(GraphJson, MlpParsesAndValidates) {
  StatusOr<GraphDef> g = ParseGraphJson(kMlp);
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  ASSERT_EQ(g->nodes.size(), 14u);
  EXPECT_EQ(g->nodes[2].attrs.at("dtype").type(), DataType::kInt32);  // inferred
  EXPECT_EQ(g->nodes[4].device, "/job:worker/task:0/device:CPU:0");
  EXPECT_EQ(g->nodes[6].attrs.at("stddev").f(), 0.01);
  EXPECT_TRUE(TensorsEqual(g->nodes[5].attrs.at("value").tensor(),
                           Tensor::FromVector<int32_t>({784, 10})));
  EXPECT_EQ(g->nodes[11].inputs, (std::vector<std::string>{"^w_assign", "^b_assign"}));

  StatusOr<Graph> graph = Graph::Create(*g);
  ASSERT_TRUE(graph.ok()) << graph.status().ToString();
  const Node* logits = graph->FindNode("logits");
  ASSERT_NE(logits, nullptr);
  EXPECT_EQ(logits->output_type(0), DataType::kFloat32);
  EXPECT_EQ(logits->output_shape(0), PartialShape({-1, 10}));
  EXPECT_EQ(graph->FindNode("flat")->output_shape(0), PartialShape({-1, 784}));

  // Both the parsed and the resolved (defaults and type attrs filled in)
  // definitions round-trip, and the resolved one validates again.
  ExpectRoundTrip(*g);
  GraphDef resolved = graph->ToGraphDef();
  ExpectRoundTrip(resolved);
  StatusOr<GraphDef> again = ParseGraphJson(GraphToJson(resolved));
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_TRUE(Graph::Create(*again).ok());
}

TEST(GraphJson, RoundTripsGraphsBuiltInCpp) {
  GraphDef g;
  NodeDef c;
  c.name = "weird \"name\"\n\xc3\xa9";
  c.op = "Const";
  c.attrs["dtype"] = AttrValue(DataType::kFloat16);
  c.attrs["value"] = AttrValue(Tensor::FromVector<Half>({Half(1.5f), Half(-0.1f)}));
  c.device = "/device:GPU:0";
  g.nodes.push_back(c);
  NodeDef p;
  p.name = "p";
  p.op = "Placeholder";
  p.attrs["dtype"] = AttrValue(DataType::kBFloat16);
  p.attrs["shape"] = AttrValue(PartialShape::Unknown());
  g.nodes.push_back(p);
  NodeDef s;
  s.name = "s";
  s.op = "Squeeze";
  s.inputs = {"p:0", "^" + c.name};
  s.attrs["axis"] = AttrValue(std::vector<int64_t>{});
  s.attrs["_xla"] = AttrValue(1.0);  // printed as 1.0, so read back as a float
  g.nodes.push_back(s);
  NodeDef e;  // a nested [] would lose the 3
  e.name = "e";
  e.op = "Const";
  e.attrs["dtype"] = AttrValue(DataType::kFloat32);
  e.attrs["value"] = AttrValue(Tensor(DataType::kFloat32, TensorShape({0, 3})));
  g.nodes.push_back(e);
  ExpectRoundTrip(g);
}

TEST(GraphJson, NestedTensorAttrsOnlyWhereExact) {
  GraphDef g;
  NodeDef c;
  c.name = "c";
  c.op = "Const";
  c.attrs["dtype"] = AttrValue(DataType::kFloat32);
  c.attrs["value"] = AttrValue(Tensor::FromVector<float>({1, 2}, TensorShape({1, 2})));
  g.nodes.push_back(c);
  c.name = "mismatch";  // Graph::Create would refuse it; the codec keeps it
  c.attrs["dtype"] = AttrValue(DataType::kInt32);
  g.nodes.push_back(c);
  std::string json = GraphToJson(g, Encoding::kNested);
  EXPECT_NE(json.find(R"("dtype":"float32","value":[[1.0,2.0]])"), std::string::npos) << json;
  EXPECT_NE(json.find(R"("dtype":"int32","value":{"dtype":"float32","shape":[1,2],"data":)"),
            std::string::npos)
      << json;
}

}  // namespace
}  // namespace flowstate::api

// The gRPC frontend's conversions (api/proto_convert.h): tensors and graphs
// round-trip, and bad input is refused as the JSON codec refuses it, with
// the path of the field.
#include "api/proto_convert.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "api/json_codec.h"

namespace flowstate::proto_convert {
namespace {

// Asserts that `s` failed with `code`, naming `node`, with a message that
// starts with `prefix`.
void ExpectError(const Status& s, Code code, const std::string& prefix,
                 const std::string& node = "") {
  ASSERT_FALSE(s.ok()) << "expected an error starting with: " << prefix;
  EXPECT_EQ(s.code(), code) << s.ToString();
  EXPECT_EQ(s.message().substr(0, prefix.size()), prefix) << s.ToString();
  EXPECT_EQ(s.node(), node) << s.ToString();
}
template <typename T>
void ExpectInvalid(const StatusOr<T>& r, const std::string& prefix, const std::string& node = "") {
  ExpectError(r.status(), Code::kInvalidArgument, prefix, node);
}

constexpr size_t kLimit = size_t{1} << 20;

pb::Tensor Proto(const std::string& dtype, std::vector<int64_t> shape, std::string content) {
  pb::Tensor t;
  t.set_dtype(dtype);
  for (int64_t d : shape) t.add_shape(d);
  t.set_content(std::move(content));
  return t;
}

template <typename T>
std::string Bytes(const std::vector<T>& v) {
  std::string s(v.size() * sizeof(T), '\0');
  if (!v.empty()) std::memcpy(s.data(), v.data(), s.size());
  return s;
}

void ExpectTensorRoundTrip(const Tensor& t) {
  pb::Tensor p;
  TensorToProto(t, &p);
  EXPECT_EQ(p.dtype(), DataTypeName(t.dtype()));
  EXPECT_EQ(p.content().size(), t.TotalBytes());
  StatusOr<Tensor> back = TensorFromProto(p, "t", kLimit);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_TRUE(TensorsEqual(t, *back)) << t.DebugString() << " vs " << back->DebugString();
}

TEST(GrpcConvertTensor, EveryDtypeRoundTrips) {
  ExpectTensorRoundTrip(Tensor::FromVector<float>({1.5f, -2, std::nanf(""), INFINITY},
                                                  TensorShape({2, 2})));
  ExpectTensorRoundTrip(Tensor::FromVector<double>({1e300, -0.0, 3}, TensorShape({3})));
  ExpectTensorRoundTrip(Tensor::FromVector<int32_t>({1, -2, 3, 4, 5, 6}, TensorShape({2, 1, 3})));
  ExpectTensorRoundTrip(Tensor::FromVector<int64_t>({std::numeric_limits<int64_t>::min(), 7}));
  ExpectTensorRoundTrip(Tensor::FromVector<uint8_t>({0, 255, 7}));
  ExpectTensorRoundTrip(Tensor::FromVector<bool>({true, false, true}));
  ExpectTensorRoundTrip(Tensor::FromVector<Half>({Half(1.5f), Half(-2.0f)}));
  ExpectTensorRoundTrip(Tensor::FromVector<BFloat16>({BFloat16(3.0f)}));
  ExpectTensorRoundTrip(Tensor::Scalar<float>(42));
  ExpectTensorRoundTrip(Tensor(DataType::kFloat32, TensorShape({0, 3})));
}

TEST(GrpcConvertTensor, ContentIsLittleEndianRowMajor) {
  StatusOr<Tensor> t = TensorFromProto(
      Proto("int32", {2, 2}, std::string("\x01\0\0\0\x02\0\0\0\x03\0\0\0\x00\x01\0\0", 16)), "t",
      kLimit);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(t->shape(), TensorShape({2, 2}));
  EXPECT_EQ(t->data<int32_t>()[0], 1);
  EXPECT_EQ(t->data<int32_t>()[2], 3);
  EXPECT_EQ(t->data<int32_t>()[3], 256);
  // Aliases, as in JSON.
  EXPECT_TRUE(TensorFromProto(Proto("float", {}, Bytes<float>({1})), "t", kLimit).ok());
}

TEST(GrpcConvertTensor, BadDtypeIsRefusedNamingTheField) {
  ExpectInvalid(TensorFromProto(Proto("float33", {1}, Bytes<float>({1})), "feeds.x", kLimit),
                "feeds.x.dtype: unknown dtype 'float33'");
  ExpectInvalid(TensorFromProto(Proto("", {1}, Bytes<float>({1})), "t", kLimit),
                "t.dtype: missing");
  ExpectInvalid(TensorFromProto(Proto("invalid", {}, ""), "t", kLimit), "t.dtype: unknown dtype");
}

TEST(GrpcConvertTensor, BadShapeIsRefusedNamingTheDimension) {
  ExpectInvalid(TensorFromProto(Proto("float32", {2, -3}, ""), "t", kLimit),
                "t.shape[1]: expected a dimension (an int >= 0), got -3");
  ExpectInvalid(TensorFromProto(Proto("uint8", {1, 1, 1, 1, 1, 1, 1, 1, 1}, "x"), "t", kLimit),
                "t.shape: shape has rank 9");
  int64_t big = int64_t{1} << 40;
  ExpectInvalid(TensorFromProto(Proto("uint8", {big, big}, ""), "t", kLimit),
                "t.shape: shape has too many elements");
}

TEST(GrpcConvertTensor, ContentOfTheWrongSizeIsRefused) {
  ExpectInvalid(TensorFromProto(Proto("float32", {2, 2}, std::string(12, '\0')), "t", kLimit),
                "t.content: has 12 bytes, but a float32[2, 2] tensor has 16");
  ExpectInvalid(TensorFromProto(Proto("int64", {}, std::string(9, '\0')), "t", kLimit),
                "t.content: has 9 bytes, but a int64[] tensor has 8");
  ExpectInvalid(TensorFromProto(Proto("bool", {3}, std::string("\x01\x02\x00", 3)), "t", kLimit),
                "t.content: byte 1 is 2, not a bool (0 or 1)");
}

TEST(GrpcConvertTensor, OverTheLimitIsResourceExhaustedBeforeAllocating) {
  StatusOr<Tensor> t = TensorFromProto(Proto("float32", {1024, 1024}, ""), "feeds.x", kLimit);
  ExpectError(t.status(), Code::kResourceExhausted,
              "feeds.x: a tensor of float32[1024, 1024] takes 4194304 bytes, more than the "
              "limit of 1048576 bytes");
}

TEST(GrpcConvertTensor, NamedTensorsAreSortedAndNamesChecked) {
  TensorMap m;
  m["z"] = Proto("float32", {}, Bytes<float>({1}));
  m["a:1"] = Proto("int32", {}, Bytes<int32_t>({2}));
  StatusOr<NamedTensors> named = NamedTensorsFromProto(m, "feeds", kLimit);
  ASSERT_TRUE(named.ok()) << named.status().ToString();
  ASSERT_EQ(named->size(), 2u);
  EXPECT_EQ((*named)[0].first, "a:1");
  EXPECT_EQ((*named)[1].first, "z");

  m["^c"] = Proto("float32", {}, Bytes<float>({1}));
  ExpectInvalid(NamedTensorsFromProto(m, "feeds", kLimit),
                "feeds[\"^c\"]: bad name: '^c' is a control input");
  m.erase("^c");
  m["b"] = Proto("float32", {2}, Bytes<float>({1}));
  ExpectInvalid(NamedTensorsFromProto(m, "feeds", kLimit),
                "feeds.b.content: has 4 bytes, but a float32[2] tensor has 8");

  NamedTensors out{{"y:0", Tensor::Scalar<int64_t>(3)}};
  TensorMap back;
  NamedTensorsToProto(out, &back);
  ASSERT_EQ(back.count("y:0"), 1u);
  EXPECT_EQ(back.at("y:0").dtype(), "int64");
}

TEST(GrpcConvertTensor, FetchesAndTargetsAreCheckedAsInRest) {
  StringList names;
  names.Add("x");
  names.Add("y:1");
  ASSERT_TRUE(TensorNamesFromProto(names, "fetches").ok());
  names.Add("^z");
  ExpectInvalid(TensorNamesFromProto(names, "fetches"),
                "fetches[2]: '^z' is a control input, not a tensor");
  StringList targets;
  targets.Add("train");
  targets.Add("bad name");
  ExpectInvalid(NodeNamesFromProto(targets, "targets"), "targets[1]: node name 'bad name'");
  // The same messages as the JSON codec's.
  StatusOr<api::RunRequest> rest =
      api::ParseRunRequestJson(R"({"fetches": ["x", "y:1", "^z"]})");
  ASSERT_FALSE(rest.ok());
  EXPECT_EQ(rest.status().message(), TensorNamesFromProto(names, "fetches").status().message());
}

// --- Graphs.

// A registry with one op declaring an attr of every kind.
const OpRegistry* KindsRegistry() {
  static const OpRegistry* r = [] {
    auto* reg = new OpRegistry();
    reg->Register(OpDefBuilder("AllKinds")
                      .Attr("i: int").Attr("f: float").Attr("b: bool").Attr("s: string")
                      .Attr("t: type").Attr("sh: shape").Attr("v: tensor")
                      .Attr("li: list(int)").Attr("lf: list(float)").Attr("ls: list(string)")
                      .Attr("lt: list(type)").Attr("lsh: list(shape)"))
        .CheckOk();
    reg->Register(OpDefBuilder("Konst").Output("output: dtype").Attr("dtype: type")
                      .Attr("value: tensor"))
        .CheckOk();
    reg->Register(OpDefBuilder("Pass").Input("x: float32").Output("y: float32")).CheckOk();
    return reg;
  }();
  return r;
}

GraphOptions Kinds() {
  GraphOptions o;
  o.registry = KindsRegistry();
  o.max_tensor_bytes = kLimit;
  return o;
}

GraphDef AllKindsGraph() {
  NodeDef k;
  k.name = "k";
  k.op = "AllKinds";
  k.device = "/device:CPU:0";
  k.inputs = {"a", "b:1", "^c"};
  k.attrs["i"] = AttrValue(int64_t{-7});
  k.attrs["f"] = AttrValue(0.25);
  k.attrs["b"] = AttrValue(true);
  k.attrs["s"] = AttrValue("hello");
  k.attrs["t"] = AttrValue(DataType::kInt64);
  k.attrs["sh"] = AttrValue(PartialShape({-1, 784}));
  k.attrs["v"] = AttrValue(Tensor::FromVector<float>({1, 2, 3, 4}, TensorShape({2, 2})));
  k.attrs["li"] = AttrValue(std::vector<int64_t>{1, 2});
  k.attrs["lf"] = AttrValue(std::vector<double>{0.5, -1});
  k.attrs["ls"] = AttrValue(std::vector<std::string>{"a", ""});
  k.attrs["lt"] = AttrValue(std::vector<DataType>{DataType::kBool, DataType::kUInt8});
  k.attrs["lsh"] = AttrValue(std::vector<PartialShape>{PartialShape(), PartialShape({3})});
  k.attrs["_class"] = AttrValue("loc:@x");
  NodeDef c;
  c.name = "c";
  c.op = "Konst";
  c.attrs["dtype"] = AttrValue(DataType::kInt32);
  c.attrs["value"] = AttrValue(Tensor::FromVector<int32_t>({5}));
  GraphDef g;
  g.nodes = {k, c};
  return g;
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
      EXPECT_TRUE(value == it->second) << x.name << "." << name << ": " << value.DebugString()
                                       << " vs " << it->second.DebugString();
    }
  }
}

TEST(GrpcConvertGraph, EveryAttrKindRoundTrips) {
  GraphDef g = AllKindsGraph();
  pb::GraphDef p;
  GraphToProto(g, &p);
  ASSERT_EQ(p.nodes_size(), 2);
  EXPECT_EQ(p.nodes(0).attrs().at("sh").shape().dims_size(), 2);
  EXPECT_TRUE(p.nodes(0).attrs().at("lsh").shapes().values(0).unknown_rank());
  StatusOr<GraphDef> back = GraphFromProto(p, "graph", Kinds());
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  ExpectGraphsEqual(g, *back);
  // And it is the graph the JSON codec reads from the same description.
  StatusOr<GraphDef> json =
      api::ParseGraphJson(api::GraphToJson(g), "graph", api::GraphJsonOptions{KindsRegistry()});
  ASSERT_TRUE(json.ok()) << json.status().ToString();
  ExpectGraphsEqual(*json, *back);
}

TEST(GrpcConvertGraph, RequestsTakeJsonTextOrStructuredGraphs) {
  GraphDef g = AllKindsGraph();
  pb::CreateSessionRequest structured;
  GraphToProto(g, structured.mutable_graph());
  pb::CreateSessionRequest text;
  text.set_graph_json(api::GraphToJson(g));
  StatusOr<GraphDef> a = GraphFromRequest(structured, Kinds());
  StatusOr<GraphDef> b = GraphFromRequest(text, Kinds());
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  ExpectGraphsEqual(*a, *b);
  // Neither: refused, as REST refuses a body without "graph"; an empty
  // structured graph is an empty graph.
  ExpectInvalid(GraphFromRequest(pb::ExtendSessionRequest(), Kinds()), "graph: missing");
  pb::ExtendSessionRequest empty;
  empty.mutable_graph();
  StatusOr<GraphDef> none = GraphFromRequest(empty, Kinds());
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->nodes.empty());
  // JSON errors are the JSON codec's, under "graph" as in REST.
  text.set_graph_json(R"({"nodes": [{"name": "n", "op": "Nope"}]})");
  ExpectInvalid(GraphFromRequest(text, Kinds()), "graph.nodes[0].op: unknown op 'Nope'", "n");
  text.set_graph_json("{");
  ExpectInvalid(GraphFromRequest(text, Kinds()), "graph: malformed JSON");
}

pb::GraphDef OneNode(const std::string& name, const std::string& op) {
  pb::GraphDef g;
  pb::NodeDef* n = g.add_nodes();
  n->set_name(name);
  n->set_op(op);
  return g;
}

TEST(GrpcConvertGraph, BadNodesAreRefusedNamingTheNode) {
  ExpectInvalid(GraphFromProto(OneNode("", "Pass"), "graph", Kinds()),
                "graph.nodes[0]: missing \"name\"");
  ExpectInvalid(GraphFromProto(OneNode("n", ""), "graph", Kinds()),
                "graph.nodes[0]: missing \"op\"", "n");
  ExpectInvalid(GraphFromProto(OneNode("n", "Nope"), "graph", Kinds()),
                "graph.nodes[0].op: unknown op 'Nope'", "n");

  pb::GraphDef g = OneNode("n", "Pass");
  g.mutable_nodes(0)->add_inputs("x");
  g.mutable_nodes(0)->add_inputs("x:");
  ExpectInvalid(GraphFromProto(g, "graph", Kinds()), "graph.nodes[0].inputs[1]: ", "n");

  g = OneNode("n", "Pass");
  (*g.mutable_nodes(0)->mutable_attrs())["T"].set_type("float32");
  ExpectInvalid(GraphFromProto(g, "graph", Kinds()),
                "graph.nodes[0].attrs.T: op Pass has no attr 'T' (it has: none)", "n");
}

TEST(GrpcConvertGraph, AttrValuesMustHaveTheDeclaredKind) {
  auto with = [](const std::string& attr, const pb::AttrValue& v) {
    pb::GraphDef g = OneNode("k", "AllKinds");
    (*g.mutable_nodes(0)->mutable_attrs())[attr] = v;
    return GraphFromProto(g, "graph", Kinds());
  };
  pb::AttrValue v;
  v.set_s("x");
  ExpectInvalid(with("i", v), "graph.nodes[0].attrs.i: attr 'i' of op AllKinds is of kind int",
                "k");
  ExpectInvalid(with("i", pb::AttrValue()), "graph.nodes[0].attrs.i: no value set", "k");
  v.set_type("float99");
  ExpectInvalid(with("t", v), "graph.nodes[0].attrs.t.type: unknown dtype 'float99'", "k");
  v.mutable_shape()->add_dims(-2);
  ExpectInvalid(with("sh", v), "graph.nodes[0].attrs.sh.shape.dims[0]: expected a dimension", "k");
  v.mutable_tensor()->set_dtype("float32");
  ExpectInvalid(with("i", v), "graph.nodes[0].attrs.i: attr 'i' of op AllKinds is of kind int, "
                              "not a tensor", "k");
  v.set_i(3);
  ExpectInvalid(with("v", v), "graph.nodes[0].attrs.v: attr 'v' of op AllKinds is a tensor", "k");
  *v.mutable_tensor() = Proto("float32", {2}, std::string(4, '\0'));
  ExpectInvalid(with("v", v), "graph.nodes[0].attrs.v.tensor.content: has 4 bytes", "k");
  *v.mutable_tensor() = Proto("float32", {1024, 1024}, "");
  ExpectError(with("v", v).status(), Code::kResourceExhausted,
              "graph.nodes[0].attrs.v.tensor: a tensor of float32[1024, 1024]", "k");

  // Conversions that lose nothing are made, as in JSON.
  v.set_i(2);
  StatusOr<GraphDef> g = with("f", v);
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  EXPECT_EQ(g->nodes[0].attrs.at("f").kind(), AttrKind::kFloat);
  v.mutable_ints();  // an empty list
  g = with("lsh", v);
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  EXPECT_EQ(g->nodes[0].attrs.at("lsh").kind(), AttrKind::kShapeList);
}

TEST(GrpcConvertGraph, TensorAttrsAgreeWithTheDtypeAttr) {
  pb::GraphDef g = OneNode("c", "Konst");
  auto& attrs = *g.mutable_nodes(0)->mutable_attrs();
  *attrs["value"].mutable_tensor() = Proto("int32", {1}, Bytes<int32_t>({5}));
  // No "dtype": the tensor's is set.
  StatusOr<GraphDef> ok = GraphFromProto(g, "graph", Kinds());
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_EQ(ok->nodes[0].attrs.at("dtype").type(), DataType::kInt32);
  // A different "dtype": refused.
  attrs["dtype"].set_type("float32");
  ExpectInvalid(GraphFromProto(g, "graph", Kinds()),
                "graph.nodes[0].attrs.value.tensor.dtype: the tensor is int32 but float32 is "
                "expected here",
                "c");
}

// --- Responses and statuses.

TEST(GrpcConvertStatus, CodesMapOneToOneWithTheNodeInTheMessage) {
  for (int c = 1; c <= int(Code::kUnauthenticated); ++c) {
    Status s(Code(c), "boom", c % 2 ? "layer/w" : "");
    ::grpc::Status g = ToGrpcStatus(s);
    EXPECT_EQ(int(g.error_code()), c);
    EXPECT_EQ(g.error_message(), c % 2 ? "boom [node: layer/w]" : "boom");
    Status back = FromGrpcStatus(g);
    EXPECT_EQ(back.code(), s.code());
    EXPECT_EQ(back.message(), "boom");
    EXPECT_EQ(back.node(), s.node());
  }
  EXPECT_TRUE(ToGrpcStatus(Status()).ok());
  EXPECT_TRUE(FromGrpcStatus(::grpc::Status::OK).ok());
  EXPECT_EQ(::grpc::StatusCode::UNAUTHENTICATED,
            ToGrpcStatus(Unauthenticated("x")).error_code());
  EXPECT_EQ(::grpc::StatusCode::INVALID_ARGUMENT,
            ToGrpcStatus(InvalidArgument("x")).error_code());
}

TEST(GrpcConvertJob, FieldsMirrorTheRestJob) {
  JobInfo j;
  j.id = "job-3";
  j.name = "fashion-mlp";
  j.state = JobState::kRunning;
  j.epoch = 1;
  j.epochs = 3;
  j.step = 612;
  j.total_steps = 1407;
  j.loss = 0.37;
  j.examples_per_sec = 15234.5;
  j.metrics = {{"accuracy", 0.871}};
  j.created = 1796310191.2044;  // 2026-12-02T17:03:11.204Z
  j.started = 1796310191.4199;
  pb::Job p;
  JobToProto(j, &p);
  EXPECT_EQ(p.job_id(), "job-3");
  EXPECT_EQ(p.state(), "RUNNING");
  EXPECT_EQ(p.total_steps(), 1407);
  EXPECT_DOUBLE_EQ(p.metrics().at("accuracy"), 0.871);
  EXPECT_EQ(p.created().seconds(), 1796310191);
  EXPECT_EQ(p.created().nanos(), 204000000);  // milliseconds, as REST prints
  EXPECT_EQ(p.started().nanos(), 420000000);
  EXPECT_FALSE(p.has_finished());  // REST's null
  EXPECT_FALSE(p.has_eta_seconds());  // unknown (-1): REST's null
  EXPECT_EQ(p.placement_size(), 0);
  j.eta_seconds = 42.5;
  j.placement = {{"/job:worker/task:0", true}, {"/job:worker/task:1", false}};
  p.Clear();
  JobToProto(j, &p);
  EXPECT_DOUBLE_EQ(p.eta_seconds(), 42.5);
  ASSERT_EQ(p.placement_size(), 2);  // where each replica runs, as REST's "placement"
  EXPECT_EQ(p.placement(1).device(), "/job:worker/task:1");
  EXPECT_TRUE(p.placement(0).alive());
  EXPECT_FALSE(p.placement(1).alive());

  JobEvent e;
  e.kind = JobEvent::Kind::kEval;
  e.info = j;
  e.time = 1796310200.5;
  pb::JobEvent pe;
  JobEventToProto(e, &pe);
  EXPECT_EQ(pe.kind(), "eval");
  EXPECT_EQ(pe.job().name(), "fashion-mlp");
  EXPECT_EQ(pe.time().seconds(), 1796310200);
  EXPECT_EQ(pe.time().nanos(), 500000000);
}

TEST(GrpcConvertJob, OpsAndDevices) {
  OpInfo op;
  op.name = "MatMul";
  op.inputs = {{"a", "T"}, {"b", "T"}};
  op.outputs = {{"product", "T"}};
  op.attrs = {{"transpose_a", "bool", "false", {}}, {"T", "type", "", {"float32", "float64"}}};
  op.devices = {"CPU"};
  pb::Op p;
  OpToProto(op, &p);
  EXPECT_EQ(p.inputs_size(), 2);
  EXPECT_EQ(p.outputs(0).name(), "product");
  EXPECT_TRUE(p.attrs(0).has_default_value());
  EXPECT_EQ(p.attrs(0).default_value(), "false");
  EXPECT_FALSE(p.attrs(1).has_default_value());  // required
  EXPECT_EQ(p.attrs(1).allowed_size(), 2);

  DeviceInfo d;
  d.name = "/job:localhost/task:0/device:CPU:0";
  d.type = "CPU";
  d.bytes_in_use = 10;
  d.bytes_limit = 100;
  d.bytes_cached = 7;
  d.running_jobs = 2;
  d.jobs = {"job-1", "job-4"};
  pb::Device pd;
  DeviceToProto(d, &pd);
  EXPECT_EQ(pd.type(), "CPU");
  EXPECT_EQ(pd.memory().bytes_in_use(), 10);
  EXPECT_EQ(pd.memory().bytes_limit(), 100);
  EXPECT_EQ(pd.memory().bytes_cached(), 7);
  EXPECT_EQ(pd.running_jobs(), 2);
  ASSERT_EQ(pd.jobs_size(), 2);
  EXPECT_EQ(pd.jobs(1), "job-4");
}

}  // namespace
}  // namespace flowstate::proto_convert

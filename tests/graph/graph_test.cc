#include "graph/graph.h"

#include <gtest/gtest.h>

#include "graph/op_builders.h"
#include "graph/scope.h"
#include "graph/subgraph.h"

namespace flowstate {
namespace {

NodeDef N(std::string name, std::string op, std::vector<std::string> inputs = {},
          AttrMap attrs = {}) {
  NodeDef n;
  n.name = std::move(name);
  n.op = std::move(op);
  n.inputs = std::move(inputs);
  n.attrs = std::move(attrs);
  return n;
}

NodeDef FloatConst(std::string name, float v) {
  return N(std::move(name), "Const", {},
           {{"value", AttrValue(Tensor::Scalar(v))}, {"dtype", AttrValue(DataType::kFloat32)}});
}

NodeDef Ph(std::string name, DataType t, PartialShape s = PartialShape()) {
  return N(std::move(name), "Placeholder", {}, {{"dtype", AttrValue(t)}, {"shape", AttrValue(s)}});
}

// Asserts that building `g` fails with `code`, naming `node`, with a message
// containing `text`.
void ExpectError(const GraphDef& g, Code code, const std::string& node, const std::string& text) {
  StatusOr<Graph> r = Graph::Create(g);
  ASSERT_FALSE(r.ok()) << "expected an error mentioning '" << text << "'";
  EXPECT_EQ(r.status().code(), code) << r.status().ToString();
  EXPECT_EQ(r.status().node(), node) << r.status().ToString();
  EXPECT_NE(r.status().message().find(text), std::string::npos) << r.status().ToString();
  EXPECT_NE(r.status().message().find(node), std::string::npos)
      << "the message should name the node: " << r.status().ToString();
}

TEST(Graph, ResolvesTypeAttrsAndShapes) {
  GraphDef g;
  g.nodes = {Ph("x", DataType::kFloat32, PartialShape({-1, 3})), FloatConst("one", 1),
             N("y", "Add", {"x", "one"})};
  StatusOr<Graph> r = Graph::Create(g);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const Node* y = r->FindNode("y");
  ASSERT_NE(y, nullptr);
  EXPECT_EQ(y->attrs().at("T").type(), DataType::kFloat32);
  EXPECT_EQ(y->output_type(0), DataType::kFloat32);
  EXPECT_EQ(y->output_shape(0), PartialShape({-1, 3}));
  // Topological order puts inputs first.
  std::vector<int> pos(r->num_nodes());
  for (int i = 0; i < r->num_nodes(); ++i) pos[r->topo_order()[i]] = i;
  EXPECT_LT(pos[r->FindNode("x")->id()], pos[y->id()]);
  EXPECT_LT(pos[r->FindNode("one")->id()], pos[y->id()]);
}

TEST(Graph, UnknownOp) {
  GraphDef g;
  g.nodes = {N("a", "NoSuchOp")};
  ExpectError(g, Code::kInvalidArgument, "a", "unknown op 'NoSuchOp'");
}

TEST(Graph, DuplicateName) {
  GraphDef g;
  g.nodes = {FloatConst("a", 1), FloatConst("a", 2)};
  ExpectError(g, Code::kInvalidArgument, "a", "duplicate node name");
}

TEST(Graph, UnknownInput) {
  GraphDef g;
  g.nodes = {FloatConst("a", 1), N("b", "Neg", {"nope"})};
  ExpectError(g, Code::kInvalidArgument, "b", "'nope'");
}

TEST(Graph, WrongArity) {
  GraphDef g;
  g.nodes = {FloatConst("a", 1), N("b", "Add", {"a"})};
  ExpectError(g, Code::kInvalidArgument, "b", "expects 2 data input(s), got 1");
  g.nodes = {FloatConst("a", 1), N("b", "Neg", {"a", "a"})};
  ExpectError(g, Code::kInvalidArgument, "b", "expects 1 data input(s), got 2");
}

TEST(Graph, OutputIndexOutOfRange) {
  GraphDef g;
  g.nodes = {FloatConst("a", 1), N("b", "Neg", {"a:3"})};
  ExpectError(g, Code::kInvalidArgument, "b", "has 1 output(s)");
}

TEST(Graph, DtypeMismatch) {
  GraphDef g;
  g.nodes = {FloatConst("a", 1), Ph("i", DataType::kInt32), N("b", "Add", {"a", "i"})};
  ExpectError(g, Code::kInvalidArgument, "b", "has dtype int32 but argument 'y' expects float32");
}

TEST(Graph, DtypeNotAllowedByOp) {
  GraphDef g;
  g.nodes = {Ph("i", DataType::kInt32), N("e", "Exp", {"i"})};
  ExpectError(g, Code::kInvalidArgument, "e", "does not support");
}

// Constant ids out of an embedding table are refused when the graph is
// built (a 400 over the API), not when a step runs.
TEST(Graph, GatherWithConstantIndicesOutOfRangeIsRefused) {
  Scope root;
  Output table = ops::Variable(root.WithOpName("table"), TensorShape({10, 4}), DataType::kFloat32);
  ops::Generic(root.WithOpName("lookup"), "Gather",
               {table, ops::Const(root, Tensor::FromVector<int64_t>({3, 9, 10, -1}))});
  ExpectError(root.graph_def(), Code::kInvalidArgument, "lookup",
              "indices[2] = 10 is not in [0, 10) (dimension 0 of params [10, 4])");
  Scope ok;
  Output t2 = ops::Variable(ok.WithOpName("table"), TensorShape({10, 4}), DataType::kFloat32);
  ops::Generic(ok.WithOpName("lookup"), "Gather",
               {t2, ops::Const(ok, Tensor::FromVector<int32_t>({0, 9}))});
  EXPECT_TRUE(Graph::Create(ok.graph_def()).ok());
}

TEST(Graph, Cycle) {
  GraphDef g;
  g.nodes = {FloatConst("a", 1), N("b", "Add", {"a", "c"}), N("c", "Neg", {"b"}),
             N("d", "Neg", {"c"})};
  StatusOr<Graph> r = Graph::Create(g);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kInvalidArgument);
  EXPECT_NE(r.status().message().find("cycle"), std::string::npos);
  // The named node lies on the cycle (b or c), not merely after it (d).
  EXPECT_TRUE(r.status().node() == "b" || r.status().node() == "c") << r.status().ToString();
}

TEST(Graph, ControlCycle) {
  GraphDef g;
  g.nodes = {N("a", "NoOp", {"^b"}), N("b", "NoOp", {"^a"})};
  StatusOr<Graph> r = Graph::Create(g);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("cycle"), std::string::npos);
}

TEST(Graph, MissingAttrAndUnknownAttr) {
  GraphDef g;
  g.nodes = {N("p", "Placeholder")};
  ExpectError(g, Code::kInvalidArgument, "p", "missing required attr 'dtype'");
  g.nodes = {FloatConst("a", 1), N("b", "Neg", {"a"}, {{"colour", AttrValue(int64_t(3))}})};
  ExpectError(g, Code::kInvalidArgument, "b", "unknown attr 'colour'");
  g.nodes = {FloatConst("a", 1), FloatConst("c", 1),
             N("m", "MatMul", {"a", "c"}, {{"transpose_a", AttrValue(int64_t(3))}})};
  ExpectError(g, Code::kInvalidArgument, "m", "attr 'transpose_a'");
}

TEST(Graph, ShapeFunctionErrorsNameTheNode) {
  GraphDef g;
  g.nodes = {Ph("a", DataType::kFloat32, PartialShape({2, 3})),
             Ph("b", DataType::kFloat32, PartialShape({4, 5})), N("m", "MatMul", {"a", "b"})};
  ExpectError(g, Code::kInvalidArgument, "m", "inner dimensions differ");
  g.nodes = {Ph("a", DataType::kFloat32, PartialShape({2, 3})),
             Ph("b", DataType::kFloat32, PartialShape({4})), N("s", "Add", {"a", "b"})};
  ExpectError(g, Code::kInvalidArgument, "s", "cannot be broadcast");
}

TEST(Graph, RefInputMustBeAVariable) {
  GraphDef g;
  g.nodes = {FloatConst("a", 1), FloatConst("b", 2), N("as", "Assign", {"a", "b"})};
  ExpectError(g, Code::kInvalidArgument, "as", "must be a variable");
}

TEST(Graph, MalformedInputStrings) {
  for (const char* bad : {"a:", "a:x", ":1", "^", "a:-1"}) {
    GraphDef g;
    g.nodes = {FloatConst("a", 1), N("b", "Neg", {bad})};
    StatusOr<Graph> r = Graph::Create(g);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.status().node(), "b") << bad;
  }
}

TEST(Graph, DataInputAfterControlInputIsRejected) {
  GraphDef g;
  g.nodes = {FloatConst("a", 1), FloatConst("c", 1), N("b", "Add", {"a", "^c", "a"})};
  ExpectError(g, Code::kInvalidArgument, "b", "follows a control input");
}

TEST(Graph, BadNodeName) {
  GraphDef g;
  g.nodes = {FloatConst("a b", 1)};
  StatusOr<Graph> r = Graph::Create(g);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().node(), "a b");
}

TEST(Graph, ListArgsInferTheirLength) {
  GraphDef g;
  g.nodes = {FloatConst("a", 1), FloatConst("b", 2), FloatConst("c", 3),
             N("s", "AddN", {"a", "b", "c"})};
  StatusOr<Graph> r = Graph::Create(g);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->FindNode("s")->attrs().at("N").i(), 3);
}

TEST(Graph, ConstantsDriveShapeInference) {
  Scope root;
  Output x = ops::Placeholder(root.WithOpName("x"), DataType::kFloat32, PartialShape({-1, 28, 28}));
  Output r = ops::Reshape(root.WithOpName("r"), x, std::vector<int32_t>{-1, 784});
  Output t = ops::Transpose(root.WithOpName("t"), r, std::vector<int32_t>{1, 0});
  Output s = ops::Sum(root.WithOpName("s"), t, std::vector<int32_t>{1}, true);
  StatusOr<Graph> g = Graph::Create(root.graph_def());
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  EXPECT_EQ(g->FindNode("r")->output_shape(0), PartialShape({-1, 784}));
  EXPECT_EQ(g->FindNode("t")->output_shape(0), PartialShape({784, -1}));
  EXPECT_EQ(g->FindNode("s")->output_shape(0), PartialShape({784, 1}));
  // The helper constant is named after its op.
  EXPECT_NE(g->FindNode("r/shape"), nullptr);
}

TEST(Scope, UniqueNamesAndSubScopes) {
  Scope root;
  Output a = ops::Const(root, 1.0f);
  Output b = ops::Const(root, 2.0f);
  Output c = ops::Const(root.NewSubScope("layer").WithOpName("w"), 3.0f);
  Output d = ops::Const(root.WithOpName("Const_1"), 4.0f);  // taken by b
  EXPECT_EQ(a.node, "Const");
  EXPECT_EQ(b.node, "Const_1");
  EXPECT_EQ(c.node, "layer/w");
  EXPECT_NE(d.node, "Const_1");
  std::string noop = ops::NoOp(root.WithDevice("/device:CPU:1"), {a.node});
  const NodeDef& nd = root.graph_def().nodes.back();
  EXPECT_EQ(nd.name, noop);
  EXPECT_EQ(nd.device, "/device:CPU:1");
  EXPECT_EQ(nd.inputs, std::vector<std::string>{"^Const"});
}

// ---- Pruning ---------------------------------------------------------------

Graph MakeGraph(const GraphDef& g) {
  StatusOr<Graph> r = Graph::Create(g);
  r.status().CheckOk();
  return std::move(r).value();
}

bool Has(const PrunedGraph& p, const std::string& name) {
  for (const NodeDef& n : p.graph.nodes) {
    if (n.name == name) return true;
  }
  return false;
}

TEST(Prune, KeepsOnlyWhatFetchesNeed) {
  GraphDef g;
  g.nodes = {Ph("x", DataType::kFloat32), FloatConst("a", 1), N("y", "Add", {"x", "a"}),
             N("unused", "Neg", {"a"}), N("z", "Neg", {"y"})};
  Graph graph = MakeGraph(g);
  StatusOr<PrunedGraph> p = PruneForSignature(graph, {{"x"}, {"z"}, {}});
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_TRUE(Has(*p, "y"));
  EXPECT_TRUE(Has(*p, "z"));
  EXPECT_TRUE(Has(*p, "a"));
  EXPECT_FALSE(Has(*p, "unused"));
  EXPECT_FALSE(Has(*p, "x"));  // replaced by an _Arg
  int args = 0, rets = 0;
  for (const NodeDef& n : p->graph.nodes) {
    args += n.op == "_Arg";
    rets += n.op == "_Retval";
  }
  EXPECT_EQ(args, 1);
  EXPECT_EQ(rets, 1);
  EXPECT_TRUE(Graph::Create(p->graph).ok());
}

TEST(Prune, FeedingCutsTheGraph) {
  GraphDef g;
  g.nodes = {Ph("x", DataType::kFloat32), N("y", "Neg", {"x"}), N("z", "Neg", {"y"})};
  Graph graph = MakeGraph(g);
  // Feeding y: x is not needed, so it need not be fed.
  StatusOr<PrunedGraph> p = PruneForSignature(graph, {{"y"}, {"z"}, {}});
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_FALSE(Has(*p, "x"));
  EXPECT_FALSE(Has(*p, "y"));
}

TEST(Prune, Errors) {
  GraphDef g;
  g.nodes = {Ph("x", DataType::kFloat32), N("y", "Neg", {"x"})};
  Graph graph = MakeGraph(g);
  auto missing = PruneForSignature(graph, {{}, {"y"}, {}});
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), Code::kInvalidArgument);
  EXPECT_EQ(missing.status().node(), "x");
  EXPECT_NE(missing.status().message().find("must be fed"), std::string::npos);

  auto unknown = PruneForSignature(graph, {{"x"}, {"nope"}, {}});
  EXPECT_EQ(unknown.status().code(), Code::kNotFound);
  auto bad_index = PruneForSignature(graph, {{"x"}, {"y:2"}, {}});
  EXPECT_EQ(bad_index.status().code(), Code::kInvalidArgument);
  auto twice = PruneForSignature(graph, {{"x", "x:0"}, {"y"}, {}});
  EXPECT_EQ(twice.status().code(), Code::kInvalidArgument);
  auto target = PruneForSignature(graph, {{"x"}, {}, {"ghost"}});
  EXPECT_EQ(target.status().code(), Code::kNotFound);
}

TEST(Prune, TargetsPullInControlDependencies) {
  GraphDef g;
  g.nodes = {N("a", "NoOp"), N("b", "NoOp", {"^a"}), N("c", "NoOp")};
  Graph graph = MakeGraph(g);
  auto p = PruneForSignature(graph, {{}, {}, {"b"}});
  ASSERT_TRUE(p.ok());
  EXPECT_TRUE(Has(*p, "a"));
  EXPECT_TRUE(Has(*p, "b"));
  EXPECT_FALSE(Has(*p, "c"));
}

}  // namespace
}  // namespace flowstate

// Partitioned variables (graph/partitioned_variables.h) run in Sessions: the
// routed lookup equals the unpartitioned Gather (mod and div, 1..5 parts,
// parts that do not divide the rows, duplicate ids, an empty batch, 2-D
// ids); the logical read is the table; training a small embedding model
// partitioned gives the unpartitioned model's variables and slots (SGD and
// Adam); parts placed on the two CPU devices of a process; Assign and
// Scatter* of the whole table write the parts; bad uses refused naming the
// node.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "devices/device_pool.h"
#include "graph/control_flow_builders.h"
#include "graph/initializers.h"
#include "graph/op_builders.h"
#include "graph/partitioned_variables.h"
#include "graph/scope.h"
#include "graph/training_graph.h"
#include "scheduler/session.h"

namespace flowstate {
namespace {

using Named = std::vector<std::pair<std::string, Tensor>>;

DevicePool* Pool() {
  static DevicePool* p = [] {
    DevicePoolOptions o;
    o.num_cpu_devices = 2;
    o.intra_op_threads = 2;
    return DevicePool::Create(o).value().release();
  }();
  return p;
}

Tensor RandomTable(int64_t rows, int64_t cols, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1, 1);
  Tensor t(DataType::kFloat32, TensorShape({rows, cols}));
  for (int64_t i = 0; i < rows * cols; ++i) t.data<float>()[i] = u(rng);
  return t;
}

// Adds "set/<v>" = Assign(v, placeholder "set/<v>/value") for each variable,
// so that a test can write any variable's value.
GraphDef WithSetters(GraphDef g, const std::vector<std::string>& vars) {
  Scope root(std::move(g));
  for (const std::string& v : vars) {
    Output value = ops::Placeholder(root.WithOpName("set/" + v + "/value"), DataType::kFloat32);
    ops::Assign(root.WithOpName("set/" + v), Output(v), value, /*validate_shape=*/true);
  }
  return root.graph_def();
}

Status SetValues(Session* s, const Named& values) {
  Named feeds;
  std::vector<std::string> targets;
  for (const auto& [name, t] : values) {
    feeds.emplace_back("set/" + name + "/value", t);
    targets.push_back("set/" + name);
  }
  std::vector<Tensor> out;
  return s->Run(feeds, {}, targets, &out);
}

// A table "T" of `rows` x `cols` and Gather "emb" of it at placeholder "ids".
GraphDef LookupGraph(int64_t rows, int64_t cols, int64_t partitions, const std::string& strategy,
                     DataType id_type, const PartialShape& ids_shape,
                     std::vector<std::string> devices = {}) {
  Scope root;
  ops::PartitionAttrs pa;
  pa.partitions = partitions;
  pa.strategy = strategy;
  pa.devices = std::move(devices);
  ops::PartitionedVariable(root.WithOpName("T"), PartialShape({rows, cols}), DataType::kFloat32, pa);
  Output ids = ops::Placeholder(root.WithOpName("ids"), id_type, ids_shape);
  ops::Gather(root.WithOpName("emb"), Output("T"), ids);
  return root.graph_def();
}

// A session over the lookup graph, its table set to `table`.
std::unique_ptr<Session> LookupSession(const Tensor& table, int64_t partitions,
                                       const std::string& strategy, DataType id_type,
                                       const PartialShape& ids_shape,
                                       std::vector<std::string> devices = {}) {
  GraphDef g = LookupGraph(table.dim(0), table.dim(1), partitions, strategy, id_type, ids_shape,
                           devices);
  StatusOr<GraphDef> expanded = ExpandPartitionedVariables(g);
  EXPECT_TRUE(expanded.ok()) << expanded.status().ToString();
  if (!expanded.ok()) return nullptr;
  std::vector<PartitionedVariable> tables = FindPartitionedVariables(*expanded);
  StatusOr<Named> parts = SplitLogical({{"T", table}}, tables);
  EXPECT_TRUE(parts.ok()) << parts.status().ToString();
  std::vector<std::string> vars;
  for (const auto& [name, t] : *parts) vars.push_back(name);
  SessionOptions so;
  so.devices = Pool();
  StatusOr<std::unique_ptr<Session>> s = Session::Create(WithSetters(*expanded, vars), so);
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  if (!s.ok()) return nullptr;
  Status st = SetValues(s->get(), *parts);
  EXPECT_TRUE(st.ok()) << st.ToString();
  return std::move(s).value();
}

Tensor Ids(DataType t, const std::vector<int64_t>& v, const TensorShape& shape) {
  Tensor out(t, shape);
  for (size_t i = 0; i < v.size(); ++i) {
    if (t == DataType::kInt32) {
      out.data<int32_t>()[i] = int32_t(v[i]);
    } else {
      out.data<int64_t>()[i] = v[i];
    }
  }
  return out;
}

void ExpectRows(const Tensor& got, const Tensor& table, const std::vector<int64_t>& ids,
                const std::string& what) {
  const int64_t cols = table.dim(1);
  ASSERT_EQ(got.num_elements(), int64_t(ids.size()) * cols) << what;
  for (size_t i = 0; i < ids.size(); ++i) {
    for (int64_t c = 0; c < cols; ++c) {
      ASSERT_EQ(got.data<float>()[int64_t(i) * cols + c], table.data<float>()[ids[i] * cols + c])
          << what << " id " << i;
    }
  }
}

TEST(PartitionedVariables, LayoutMapsEveryRowOnceAndBack) {
  for (auto strategy : {PartitionStrategy::kMod, PartitionStrategy::kDiv}) {
    for (int64_t rows : {1, 5, 7, 12}) {
      for (int64_t P = 1; P <= std::min<int64_t>(rows, 5); ++P) {
        PartitionLayout l{rows, P, strategy};
        int64_t total = 0;
        for (int64_t p = 0; p < P; ++p) total += l.PartRows(p);
        EXPECT_EQ(total, rows);
        for (int64_t r = 0; r < rows; ++r) {
          auto [p, local] = l.Locate(r);
          ASSERT_LT(p, P);
          ASSERT_LT(local, l.PartRows(p));
          EXPECT_EQ(l.LogicalRow(p, local), r);
        }
      }
    }
  }
  // div: contiguous, the first rows % P parts one longer (TensorFlow's).
  PartitionLayout d{7, 3, PartitionStrategy::kDiv};
  EXPECT_EQ(d.PartRows(0), 3);
  EXPECT_EQ(d.PartRows(2), 2);
  EXPECT_EQ(d.Locate(3), std::make_pair(int64_t{1}, int64_t{0}));
  EXPECT_EQ(d.Locate(6), std::make_pair(int64_t{2}, int64_t{1}));
}

TEST(PartitionedVariables, SplitThenAssembleIsTheTable) {
  Tensor table = RandomTable(7, 3, 1);
  for (const char* strategy : {"mod", "div"}) {
    for (int64_t P = 2; P <= 5; ++P) {
      GraphDef g = ExpandPartitionedVariables(
                       LookupGraph(7, 3, P, strategy, DataType::kInt32, PartialShape({-1})))
                       .value();
      std::vector<PartitionedVariable> tables = FindPartitionedVariables(g);
      ASSERT_EQ(tables.size(), 1u);
      EXPECT_EQ(tables[0].name, "T");
      EXPECT_EQ(int64_t(tables[0].parts.size()), P);
      Named parts = SplitLogical({{"x", table}, {"T", table}}, tables).value();
      ASSERT_EQ(int64_t(parts.size()), P + 1);
      EXPECT_EQ(parts[1].first, "T/part_0");
      Named back = AssembleLogical(parts, tables).value();
      ASSERT_EQ(back.size(), 2u);
      EXPECT_EQ(back[1].first, "T");
      EXPECT_TRUE(back[1].second.shape() == table.shape());
      for (int64_t i = 0; i < 21; ++i) {
        ASSERT_EQ(back[1].second.data<float>()[i], table.data<float>()[i]) << strategy << P;
      }
      // Some parts but not all: refused, naming the table.
      parts.pop_back();
      StatusOr<Named> half = AssembleLogical(parts, tables);
      EXPECT_FALSE(half.ok());
      EXPECT_NE(half.status().message().find("'T'"), std::string::npos);
    }
  }
}

TEST(PartitionedVariables, RoutedLookupEqualsTheUnpartitionedGather) {
  Tensor table = RandomTable(7, 3, 2);
  const std::vector<int64_t> ids = {6, 0, 3, 3, 1, 5, 6, 2, 4, 0};
  for (const char* strategy : {"mod", "div"}) {
    for (int64_t P = 1; P <= 5; ++P) {
      for (DataType it : {DataType::kInt32, DataType::kInt64}) {
        std::string what = std::string(strategy) + " P=" + std::to_string(P) + " " +
                           std::string(DataTypeName(it));
        auto s = LookupSession(table, P, strategy, it, PartialShape({-1}));
        ASSERT_NE(s, nullptr) << what;
        std::vector<Tensor> out;
        Status st = s->Run({{"ids", Ids(it, ids, TensorShape({int64_t(ids.size())}))}},
                           {"emb", "T"}, {}, &out);
        ASSERT_TRUE(st.ok()) << what << ": " << st.ToString();
        EXPECT_TRUE(out[0].shape() == TensorShape({10, 3})) << out[0].shape().ToString();
        ExpectRows(out[0], table, ids, what);
        // Reading the variable gives the logical table.
        ExpectRows(out[1], table, {0, 1, 2, 3, 4, 5, 6}, what + " read");
        // An empty batch.
        st = s->Run({{"ids", Ids(it, {}, TensorShape({0}))}}, {"emb"}, {}, &out);
        ASSERT_TRUE(st.ok()) << what << ": " << st.ToString();
        EXPECT_TRUE(out[0].shape() == TensorShape({0, 3})) << out[0].shape().ToString();
      }
    }
  }
}

// The routed lookup keeps the static shape a Gather would have (ids.shape
// + the row's) when the ids' shape is known, and still runs.
TEST(PartitionedVariables, RoutedLookupKeepsAKnownShape) {
  for (const PartialShape& ids : {PartialShape({5}), PartialShape({2, 3}), PartialShape({-1})}) {
    StatusOr<GraphDef> expanded =
        ExpandPartitionedVariables(LookupGraph(10, 4, 3, "mod", DataType::kInt32, ids));
    ASSERT_TRUE(expanded.ok()) << expanded.status().ToString();
    StatusOr<Graph> g = Graph::Create(*expanded);
    ASSERT_TRUE(g.ok()) << g.status().ToString();
    const PartialShape& out = g->FindNode("emb")->output_shape(0);
    if (ids.IsFullyDefined()) {
      std::vector<int64_t> want = ids.dims();
      want.push_back(4);
      EXPECT_EQ(out.ToString(), PartialShape(want).ToString());
    } else {
      EXPECT_EQ(out.ToString(), PartialShape({-1, 4}).ToString());
    }
  }
  const Tensor table = RandomTable(10, 4, 5);
  auto s = LookupSession(table, 3, "div", DataType::kInt32, PartialShape({5}));
  ASSERT_NE(s, nullptr);
  std::vector<Tensor> out;
  Status st = s->Run({{"ids", Ids(DataType::kInt32, {9, 0, 4, 4, 7}, TensorShape({5}))}}, {"emb"}, {}, &out);
  ASSERT_TRUE(st.ok()) << st.ToString();
  ExpectRows(out[0], table, {9, 0, 4, 4, 7}, "ids [5]");
}

TEST(PartitionedVariables, RoutedLookupOfTwoDimensionalIds) {
  Tensor table = RandomTable(7, 3, 3);
  auto s = LookupSession(table, 3, "div", DataType::kInt32, PartialShape({-1, -1}));
  ASSERT_NE(s, nullptr);
  std::vector<Tensor> out;
  const std::vector<int64_t> ids = {1, 6, 6, 0, 2, 5};
  ASSERT_TRUE(s->Run({{"ids", Ids(DataType::kInt32, ids, TensorShape({2, 3}))}}, {"emb"}, {}, &out)
                  .ok());
  EXPECT_TRUE(out[0].shape() == TensorShape({2, 3, 3})) << out[0].shape().ToString();
  ExpectRows(out[0], table, ids, "2-D ids");
}

TEST(PartitionedVariables, AnIdOutOfRangeNamesTheLookupAndTheFirstBadIndex) {
  Tensor table = RandomTable(7, 3, 4);
  auto s = LookupSession(table, 3, "mod", DataType::kInt32, PartialShape({-1}));
  ASSERT_NE(s, nullptr);
  std::vector<Tensor> out;
  Status st = s->Run({{"ids", Ids(DataType::kInt32, {1, 7, -1}, TensorShape({3}))}}, {"emb"}, {},
                     &out);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.code(), Code::kInvalidArgument) << st.ToString();
  EXPECT_NE(st.ToString().find("emb"), std::string::npos) << st.ToString();
  EXPECT_NE(st.message().find("indices[1] = 7 is not in [0, 7)"), std::string::npos)
      << st.ToString();
  EXPECT_NE(st.message().find("'T'"), std::string::npos) << st.ToString();
}

TEST(PartitionedVariables, PartsOnTheTwoCpuDevicesOfAProcess) {
  Tensor table = RandomTable(9, 2, 5);
  const std::vector<int64_t> ids = {8, 1, 2, 7};
  for (bool spread : {false, true}) {
    std::vector<std::string> devices;
    if (spread) devices = {"/device:CPU:0", "/device:CPU:1"};
    auto s = LookupSession(table, 4, "mod", DataType::kInt32, PartialShape({-1}), devices);
    ASSERT_NE(s, nullptr);
    std::vector<Tensor> out;
    RunStats stats;
    ASSERT_TRUE(s->Run({{"ids", Ids(DataType::kInt32, ids, TensorShape({4}))}}, {"emb"}, {}, &out,
                       &stats)
                    .ok());
    ExpectRows(out[0], table, ids, spread ? "spread" : "one device");
    // Parts 0 and 2 on CPU:0, 1 and 3 on CPU:1: the step runs on both.
    EXPECT_EQ(stats.num_partitions, spread ? 2 : 1);
  }
  // The parts carry their devices.
  GraphDef g = ExpandPartitionedVariables(LookupGraph(9, 2, 3, "mod", DataType::kInt32,
                                                      PartialShape({-1}),
                                                      {"/device:CPU:0", "/device:CPU:1"}))
                   .value();
  std::map<std::string, std::string> device;
  for (const NodeDef& n : g.nodes) device[n.name] = n.device;
  EXPECT_EQ(device["T/part_0"], "/device:CPU:0");
  EXPECT_EQ(device["T/part_1"], "/device:CPU:1");
  EXPECT_EQ(device["T/part_2"], "/device:CPU:0");
}

TEST(PartitionedVariables, BadPartitionsAreRefusedNamingTheAttr) {
  struct Case {
    PartialShape shape;
    int64_t partitions;
    std::string strategy;
    std::string want;
  };
  for (const Case& c : std::vector<Case>{
           {PartialShape({5, 2}), 6, "mod", "partitions: 6 partitions for a table of 5 rows"},
           {PartialShape({5, 2}), 0, "mod", "partitions: must be >= 1, got 0"},
           {PartialShape({5, 2}), -2, "mod", "partitions: must be >= 1, got -2"},
           {PartialShape({-1, 2}), 2, "mod", "partitions: 2 partitions need a variable whose first"},
           {PartialShape({5, 2}), 2, "range", "partition_strategy: unknown partition strategy"}}) {
    Scope root;
    root.WithOpName("T").AddNode("T", "Variable", {},
                                 {{"shape", AttrValue(c.shape)},
                                  {"dtype", AttrValue(DataType::kFloat32)},
                                  {"partitions", AttrValue(c.partitions)},
                                  {"partition_strategy", AttrValue(c.strategy)}});
    StatusOr<GraphDef> g = ExpandPartitionedVariables(root.graph_def());
    ASSERT_FALSE(g.ok()) << c.want;
    EXPECT_EQ(g.status().node(), "T");
    EXPECT_NE(g.status().message().find(c.want), std::string::npos) << g.status().ToString();
  }
}

TEST(PartitionedVariables, ReferenceUsesAndOtherAxesAreRefused) {
  {
    Scope root;
    root.WithOpName("T").AddNode("T", "Variable", {},
                                 {{"shape", AttrValue(PartialShape({4, 2}))},
                                  {"dtype", AttrValue(DataType::kFloat32)},
                                  {"partitions", AttrValue(int64_t{2})}});
    root.WithOpName("add").AddNode("add", "AssignAdd", {"T", ops::Fill(root, {4, 2}, ops::Const(root, 1.f)).name()}, {});
    StatusOr<GraphDef> g = ExpandPartitionedVariables(root.graph_def());
    ASSERT_FALSE(g.ok());
    EXPECT_EQ(g.status().node(), "add");
    EXPECT_NE(g.status().message().find("by reference"), std::string::npos) << g.status().ToString();
  }
  {
    Scope root;
    root.WithOpName("T").AddNode("T", "Variable", {},
                                 {{"shape", AttrValue(PartialShape({4, 2}))},
                                  {"dtype", AttrValue(DataType::kFloat32)},
                                  {"partitions", AttrValue(int64_t{2})}});
    ops::Assign(root.WithOpName("reshape"), Output("T"), ops::Fill(root, {3, 2}, ops::Const(root, 1.f)),
                /*validate_shape=*/false);
    StatusOr<GraphDef> g = ExpandPartitionedVariables(root.graph_def());
    ASSERT_FALSE(g.ok());
    EXPECT_EQ(g.status().node(), "reshape");
    EXPECT_NE(g.status().message().find("keeps its shape"), std::string::npos) << g.status().ToString();
  }
  {
    Scope root;
    root.WithOpName("T").AddNode("T", "Variable", {},
                                 {{"shape", AttrValue(PartialShape({4, 2}))},
                                  {"dtype", AttrValue(DataType::kFloat32)},
                                  {"partitions", AttrValue(int64_t{2})}});
    ops::Gather(root.WithOpName("cols"), Output("T"), ops::Const(root, std::vector<int32_t>{1}), 1);
    StatusOr<GraphDef> g = ExpandPartitionedVariables(root.graph_def());
    ASSERT_FALSE(g.ok());
    EXPECT_EQ(g.status().node(), "cols");
    EXPECT_NE(g.status().message().find("axis 0 only"), std::string::npos) << g.status().ToString();
  }
}

// Writes of the whole table by reference go to its parts: Assign sets each
// part's rows, ScatterUpdate/Add/Sub route their indices; the write's
// output, and the table read afterwards, are the logical values.
TEST(PartitionedVariables, AssignAndScatterWriteTheParts) {
  for (auto [P, strategy] : std::vector<std::pair<int64_t, std::string>>{{2, "mod"}, {3, "div"}}) {
    const std::string what = strategy + " P=" + std::to_string(P);
    Scope root;
    ops::PartitionAttrs pa;
    pa.partitions = P;
    pa.strategy = strategy;
    ops::PartitionedVariable(root.WithOpName("T"), PartialShape({7, 2}), DataType::kFloat32, pa);
    Output value = ops::Placeholder(root.WithOpName("value"), DataType::kFloat32, PartialShape({7, 2}));
    ops::Assign(root.WithOpName("set"), Output("T"), value);
    Output idx = ops::Placeholder(root.WithOpName("idx"), DataType::kInt64, PartialShape({-1}));
    Output upd = ops::Placeholder(root.WithOpName("upd"), DataType::kFloat32, PartialShape({-1, 2}));
    for (const char* op : {"ScatterAdd", "ScatterSub", "ScatterUpdate"}) {
      root.WithOpName(op).AddNode(op, op, {"T", idx.name(), upd.name()}, {});
    }
    StatusOr<GraphDef> expanded = ExpandPartitionedVariables(root.graph_def());
    ASSERT_TRUE(expanded.ok()) << what << ": " << expanded.status().ToString();
    SessionOptions so;
    so.devices = Pool();
    StatusOr<std::unique_ptr<Session>> s = Session::Create(*expanded, so);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    std::vector<Tensor> out;
    Tensor table = RandomTable(7, 2, 4);
    Status st = (*s)->Run({{"value", table}}, {"set"}, {}, &out);
    ASSERT_TRUE(st.ok()) << what << ": " << st.ToString();
    ExpectRows(out[0], table, {0, 1, 2, 3, 4, 5, 6}, what + " Assign's output");
    ASSERT_TRUE((*s)->Run({}, {"T"}, {}, &out).ok());
    ExpectRows(out[0], table, {0, 1, 2, 3, 4, 5, 6}, what + " after Assign");
    // ScatterAdd at rows 6, 1, 6 (repeated ones add up), then ScatterSub
    // and ScatterUpdate at 3.
    Tensor want = table.DeepCopy();
    const std::vector<int64_t> rows = {6, 1, 6};
    Tensor updates(DataType::kFloat32, TensorShape({3, 2}));
    for (int i = 0; i < 6; ++i) updates.data<float>()[i] = float(i + 1);
    for (size_t i = 0; i < rows.size(); ++i) {
      for (int c = 0; c < 2; ++c) want.data<float>()[rows[i] * 2 + c] += updates.data<float>()[i * 2 + c];
    }
    st = (*s)->Run({{"idx", Tensor::FromVector<int64_t>(rows)}, {"upd", updates}}, {"ScatterAdd"}, {}, &out);
    ASSERT_TRUE(st.ok()) << what << ": " << st.ToString();
    for (int64_t k = 0; k < 14; ++k) {
      EXPECT_NEAR(out[0].data<float>()[k], want.data<float>()[k], 1e-6) << what << " ScatterAdd [" << k << "]";
    }
    Tensor one = Tensor::FromVector<float>({10.f, 20.f}, TensorShape({1, 2}));
    want.data<float>()[6] -= 10.f;
    want.data<float>()[7] -= 20.f;
    st = (*s)->Run({{"idx", Tensor::FromVector<int64_t>({3})}, {"upd", one}}, {"ScatterSub"}, {}, &out);
    ASSERT_TRUE(st.ok()) << what << ": " << st.ToString();
    want.data<float>()[6] = 10.f;
    want.data<float>()[7] = 20.f;
    st = (*s)->Run({{"idx", Tensor::FromVector<int64_t>({3})}, {"upd", one}}, {"ScatterUpdate"}, {}, &out);
    ASSERT_TRUE(st.ok()) << what << ": " << st.ToString();
    ASSERT_TRUE((*s)->Run({}, {"T"}, {}, &out).ok());
    for (int64_t k = 0; k < 14; ++k) {
      EXPECT_NEAR(out[0].data<float>()[k], want.data<float>()[k], 1e-6) << what << " at the end [" << k << "]";
    }
    // An index outside the table fails naming the write.
    st = (*s)->Run({{"idx", Tensor::FromVector<int64_t>({7})}, {"upd", one}}, {"ScatterAdd"}, {}, &out);
    ASSERT_FALSE(st.ok()) << what;
    EXPECT_NE(st.message().find("ScatterAdd"), std::string::npos) << st.ToString();
  }
}

// A Gather added by Session::Extend is routed too (the logical read marks
// the table).
TEST(PartitionedVariables, ExtendRoutesANewLookup) {
  Tensor table = RandomTable(6, 2, 6);
  auto s = LookupSession(table, 4, "div", DataType::kInt32, PartialShape({-1}));
  ASSERT_NE(s, nullptr);
  Scope more;
  ops::Gather(more.WithOpName("emb2"), Output("T"), ops::Const(more, std::vector<int32_t>{5, 0}));
  ASSERT_TRUE(s->Extend(more.graph_def()).ok());
  std::shared_ptr<const Graph> g = s->graph();
  ASSERT_NE(g->FindNode("emb2/route"), nullptr) << "not routed";
  std::vector<Tensor> out;
  ASSERT_TRUE(s->Run({}, {"emb2"}, {}, &out).ok());
  ExpectRows(out[0], table, {5, 0}, "extended");
}

// The training graph of an embedding model, with the table "T" in
// `partitions` parts; with `in_loop`, the lookup is inside a while loop of
// three iterations that sums the rows of ids, ids + 1 and ids + 2 (at most
// row 10).
TrainingGraph EmbeddingModel(int64_t partitions, const std::string& strategy,
                             OptimizerOptions::Kind kind, int64_t w_partitions = 1,
                             bool in_loop = false) {
  Scope root;
  root.WithOpName("T").AddNode("T", "Variable", {},
                               {{"shape", AttrValue(PartialShape({11, 4}))},
                                {"dtype", AttrValue(DataType::kFloat32)},
                                {"init", AttrValue("normal")},
                                {"init_stddev", AttrValue(0.5)},
                                {"partitions", AttrValue(partitions)},
                                {"partition_strategy", AttrValue(strategy)}});
  root.WithOpName("w").AddNode("w", "Variable", {},
                               {{"shape", AttrValue(PartialShape({4, 1}))},
                                {"dtype", AttrValue(DataType::kFloat32)},
                                {"init", AttrValue("glorot_uniform")},
                                {"partitions", AttrValue(w_partitions)}});
  Output ids = ops::Placeholder(root.WithOpName("ids"), DataType::kInt32, PartialShape({-1}));
  Output y = ops::Placeholder(root.WithOpName("y"), DataType::kFloat32, PartialShape({-1, 1}));
  Output rows;
  if (!in_loop) {
    rows = ops::Gather(root.WithOpName("emb"), Output("T"), ids);
  } else {
    Output zeros = ops::Mul(root, ops::Gather(root, Output("T"), ids), ops::Const(root, 0.0f));
    StatusOr<std::vector<Output>> r = ops::WhileLoop(
        root.WithOpName("steps"),
        [](const Scope& s, const std::vector<Output>& v) -> StatusOr<Output> {
          return ops::Less(s, v[0], ops::Const(s, 3));
        },
        [&](const Scope& s, const std::vector<Output>& v) -> StatusOr<std::vector<Output>> {
          Output shifted = ops::Generic(s, "Minimum", {ops::Add(s, ids, v[0]), ops::Const(s, 10)})[0];
          Output looked = ops::Gather(s.WithOpName("emb"), Output("T"), shifted);
          return std::vector<Output>{ops::Add(s, v[0], ops::Const(s, 1)), ops::Add(s, v[1], looked)};
        },
        {ops::Const(root, 0), zeros});
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    if (!r.ok()) return TrainingGraph();
    rows = (*r)[1];
  }
  Output pred = ops::MatMul(root, rows, Output("w"));
  ops::Mean(root.WithOpName("loss"), ops::Square(root, ops::Sub(root, pred, y)),
            std::vector<int32_t>{});
  TrainingGraphSpec spec;
  spec.graph = root.graph_def();
  spec.loss = "loss";
  spec.optimizer.kind = kind;
  spec.optimizer.learning_rate = kind == OptimizerOptions::Kind::kAdam ? 0.05 : 0.2;
  spec.seed = 3;
  StatusOr<TrainingGraph> tg = BuildTrainingGraph(spec);
  EXPECT_TRUE(tg.ok()) << tg.status().ToString();
  return tg.ok() ? std::move(tg).value() : TrainingGraph();
}

struct Trained {
  Named values;  // logical names
};

// Initializes, sets the model variables to `start` (logical), trains.
Named Train(const TrainingGraph& tg, const Named& start, int steps, Named* initial = nullptr) {
  SessionOptions so;
  so.devices = Pool();
  auto s = Session::Create(WithSetters(tg.graph, tg.model_variables), so);
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  if (!s.ok()) return {};
  std::vector<Tensor> out;
  EXPECT_TRUE((*s)->Run({}, {}, {tg.init_op, tg.optimizer_init}, &out).ok());
  auto read = [&](const std::vector<std::string>& vars) {
    std::vector<Tensor> v;
    Status st = (*s)->Run({}, vars, {}, &v);
    EXPECT_TRUE(st.ok()) << st.ToString();
    Named named;
    for (size_t i = 0; i < vars.size() && i < v.size(); ++i) named.emplace_back(vars[i], v[i]);
    return AssembleLogical(named, tg.partitioned).value();
  };
  if (initial != nullptr) *initial = read(tg.model_variables);
  if (!start.empty()) {
    Status st = SetValues(s->get(), SplitLogical(start, tg.partitioned).value());
    EXPECT_TRUE(st.ok()) << st.ToString();
  }
  std::mt19937 rng(9);
  for (int k = 0; k < steps; ++k) {
    std::vector<int32_t> ids;
    std::vector<float> y;
    for (int i = 0; i < 6; ++i) {
      ids.push_back(int32_t(rng() % 11));
      y.push_back(float(ids.back() % 3) - 1);
    }
    ids.push_back(ids[0]);  // a duplicate
    y.push_back(y[0]);
    Status st = (*s)->Run({{"ids", Tensor::FromVector(ids)},
                           {"y", Tensor::FromVector(y, TensorShape({int64_t(y.size()), 1}))}},
                          {}, {tg.train_op}, &out);
    EXPECT_TRUE(st.ok()) << st.ToString();
  }
  return read(tg.variables);
}

TEST(PartitionedVariables, TrainingEqualsTheUnpartitionedModel) {
  for (auto kind : {OptimizerOptions::Kind::kSgd, OptimizerOptions::Kind::kAdam}) {
    TrainingGraph plain = EmbeddingModel(1, "mod", kind);
    ASSERT_TRUE(plain.partitioned.empty());
    Named start;
    Named want = Train(plain, {}, 12, &start);
    ASSERT_FALSE(want.empty());
    for (auto [P, strategy] : std::vector<std::pair<int64_t, std::string>>{
             {2, "mod"}, {3, "mod"}, {3, "div"}, {4, "div"}, {5, "mod"}}) {
      TrainingGraph tg = EmbeddingModel(P, strategy, kind);
      std::string what = strategy + " P=" + std::to_string(P) + " kind " + std::to_string(int(kind));
      // The parts, and with Adam their slots, are logical tables.
      ASSERT_FALSE(tg.partitioned.empty()) << what;
      EXPECT_EQ(tg.partitioned[0].name, "T");
      if (kind == OptimizerOptions::Kind::kAdam) {
        ASSERT_EQ(tg.partitioned.size(), 3u) << what;
        EXPECT_EQ(tg.partitioned[1].name, "optimizer/T/adam_m");
        EXPECT_EQ(tg.partitioned[2].name, "optimizer/T/adam_v");
      }
      Named got = Train(tg, start, 12);
      ASSERT_EQ(got.size(), want.size()) << what;
      for (size_t i = 0; i < want.size(); ++i) {
        ASSERT_EQ(got[i].first, want[i].first) << what;
        const Tensor& a = got[i].second;
        const Tensor& b = want[i].second;
        ASSERT_TRUE(a.shape() == b.shape()) << what << " " << want[i].first;
        if (a.dtype() != DataType::kFloat32) continue;  // the step count
        for (int64_t k = 0; k < a.num_elements(); ++k) {
          ASSERT_NEAR(a.data<float>()[k], b.data<float>()[k], 1e-5)
              << what << " " << want[i].first << "[" << k << "]";
        }
      }
    }
  }
}

// A lookup inside a while loop (the table read through the loop's Enter) is
// routed there, each part entering the loop on its own, and the model
// trains as the unpartitioned one does.
TEST(PartitionedVariables, ALookupInsideALoopTrainsAlike) {
  for (auto kind : {OptimizerOptions::Kind::kSgd, OptimizerOptions::Kind::kAdam}) {
    TrainingGraph plain = EmbeddingModel(1, "mod", kind, 1, /*in_loop=*/true);
    ASSERT_FALSE(plain.train_op.empty());
    Named start;
    Named want = Train(plain, {}, 8, &start);
    ASSERT_FALSE(want.empty());
    for (auto [P, strategy] : std::vector<std::pair<int64_t, std::string>>{{2, "mod"}, {3, "div"}}) {
      TrainingGraph tg = EmbeddingModel(P, strategy, kind, 1, /*in_loop=*/true);
      // Routed inside the loop: each part enters it on its own (the table
      // is not read whole).
      std::map<std::string, const NodeDef*> nodes;
      for (const NodeDef& n : tg.graph.nodes) nodes[n.name] = &n;
      ASSERT_TRUE(nodes.count("steps/body/emb/route")) << "the lookup in the loop is not routed";
      for (int64_t p = 0; p < P; ++p) {
        const NodeDef* gather = nodes["steps/body/emb/part_" + std::to_string(p)];
        ASSERT_NE(gather, nullptr);
        const NodeDef* enter = nodes[gather->inputs[0]];
        ASSERT_NE(enter, nullptr) << gather->inputs[0];
        EXPECT_EQ(enter->op, "Enter");
        EXPECT_EQ(enter->inputs[0], "T/part_" + std::to_string(p));
      }
      const std::string what = strategy + " P=" + std::to_string(P) + " kind " + std::to_string(int(kind));
      ASSERT_FALSE(tg.partitioned.empty()) << what;
      Named got = Train(tg, start, 8);
      ASSERT_EQ(got.size(), want.size()) << what;
      for (size_t i = 0; i < want.size(); ++i) {
        const Tensor& a = got[i].second;
        const Tensor& b = want[i].second;
        ASSERT_TRUE(a.shape() == b.shape()) << what << " " << want[i].first;
        if (a.dtype() != DataType::kFloat32) continue;
        for (int64_t k = 0; k < a.num_elements(); ++k) {
          ASSERT_NEAR(a.data<float>()[k], b.data<float>()[k], 1e-5)
              << what << " " << want[i].first << "[" << k << "]";
        }
      }
    }
  }
}

// A partitioned variable read whole (the MatMul's weights): its parts get
// dense gradients through the logical read and train as the unpartitioned
// variable does.
TEST(PartitionedVariables, ADenseUseTrainsAlike) {
  for (auto kind : {OptimizerOptions::Kind::kSgd, OptimizerOptions::Kind::kAdam}) {
    TrainingGraph plain = EmbeddingModel(1, "mod", kind);
    Named start;
    Named want = Train(plain, {}, 8, &start);
    TrainingGraph tg = EmbeddingModel(2, "div", kind, /*w_partitions=*/3);
    ASSERT_EQ(tg.partitioned.at(1).name, "w");
    Named got = Train(tg, start, 8);
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < want.size(); ++i) {
      ASSERT_EQ(got[i].first, want[i].first);
      if (got[i].second.dtype() != DataType::kFloat32) continue;
      for (int64_t k = 0; k < got[i].second.num_elements(); ++k) {
        ASSERT_NEAR(got[i].second.data<float>()[k], want[i].second.data<float>()[k], 1e-5)
            << want[i].first << "[" << k << "]";
      }
    }
  }
}

// Each part is updated by its own sparse update: no part is densified.
TEST(PartitionedVariables, EachPartHasItsOwnSparseUpdate) {
  TrainingGraph tg = EmbeddingModel(3, "mod", OptimizerOptions::Kind::kAdam);
  std::map<std::string, int> sparse_updates;
  for (const NodeDef& n : tg.graph.nodes) {
    if (n.op == "SparseApplyAdam") ++sparse_updates[n.inputs[0]];
    if (n.op == "ApplyAdam") {
      EXPECT_EQ(n.inputs[0], "w") << "a part densified";
    }
    EXPECT_NE(n.op, "UnsortedSegmentSum") << n.name << ": a gradient densified";
  }
  EXPECT_EQ(sparse_updates.size(), 3u);
  for (int p = 0; p < 3; ++p) EXPECT_EQ(sparse_updates["T/part_" + std::to_string(p)], 1) << p;
}

}  // namespace
}  // namespace flowstate

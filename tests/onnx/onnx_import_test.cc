// The ONNX importer (api/onnx/onnx_import.h): bad input is refused with an
// error naming the node, field or opset; small models import and run. The
// models are built with ONNX's own protobuf classes (onnx_proto), which
// only the tests and api/onnx/ link.
#include "api/onnx/onnx_import.h"

#include <gtest/gtest.h>
#include <onnx/onnx_pb.h>

#include <cmath>
#include <map>
#include <set>
#include <filesystem>
#include <fstream>

#include "devices/device_pool.h"
#include "scheduler/session.h"
#include "tests/onnx/onnx_test_models.h"

namespace flowstate {
namespace {

namespace fs = std::filesystem;

using onnx_test::AddInitializer;
using onnx_test::AddNode;
using onnx_test::AddValue;
using onnx_test::NewModel;

// x [batch, 2] -> Gemm(w [2, 3], b [3]) -> Relu -> y [batch, 3]
onnx::ModelProto Mlp(int opset = 13) {
  onnx::ModelProto m = NewModel(opset);
  onnx::GraphProto* g = m.mutable_graph();
  AddValue(g->mutable_input(), "x", {-1, 2});
  AddValue(g->mutable_output(), "y", {-1, 3});
  AddInitializer(g, "w", {2, 3}, {1, -1, 0.5f, 2, 1, -0.5f});
  AddInitializer(g, "b", {3}, {0.5f, 0, -1});
  AddNode(g, "fc", "Gemm", {"x", "w", "b"}, {"h"});
  AddNode(g, "act", "Relu", {"h"}, {"y"});
  return m;
}

std::string Bytes(const onnx::ModelProto& m) { return m.SerializeAsString(); }

DevicePool* Pool() {
  static DevicePool* pool = [] {
    DevicePoolOptions o;
    o.intra_op_threads = 1;
    return DevicePool::Create(o).value().release();
  }();
  return pool;
}

std::vector<float> RunMlp(const ImportedModel& m) {
  SessionOptions so;
  so.devices = Pool();
  so.inter_op_threads = 1;
  auto s = Session::Create(m.graph, so);
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  std::vector<Tensor> out;
  if (!m.init_op.empty()) {
    Status st = (*s)->Run({}, {}, {m.init_op}, &out);
    EXPECT_TRUE(st.ok()) << st.ToString();
  }
  Tensor x = Tensor::FromVector<float>({1, 2, -1, 0}, TensorShape({2, 2}));
  Status st = (*s)->Run({{m.inputs[0].tensor, x}}, {m.outputs[0].tensor}, {}, &out);
  EXPECT_TRUE(st.ok()) << st.ToString();
  if (!st.ok()) return {};
  auto f = out[0].flat<float>();
  return std::vector<float>(f.begin(), f.end());
}

TEST(OnnxImport, MlpWithVariablesStartsFromTheFileValues) {
  StatusOr<ImportedModel> m = ImportOnnx(Bytes(Mlp()));
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  ASSERT_EQ(m->inputs.size(), 1u);
  EXPECT_EQ(m->inputs[0].onnx_name, "x");
  EXPECT_EQ(m->inputs[0].shape, PartialShape({-1, 2}));
  ASSERT_EQ(m->variables.size(), 2u);
  EXPECT_FALSE(m->init_op.empty());
  EXPECT_EQ(m->opset, 13);
  // [1, 2] x w + b = [5.5, 1, -1.5] -> relu; [-1, 0] -> [-0.5, 1, -1.5] -> relu
  std::vector<float> want = {5.5f, 1, 0, 0, 1, 0};
  EXPECT_EQ(RunMlp(*m), want);
}

TEST(OnnxImport, MlpWithConstants) {
  OnnxImportOptions o;
  o.initializers_as_constants = true;
  StatusOr<ImportedModel> m = ImportOnnx(Bytes(Mlp()), o);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_TRUE(m->variables.empty());
  EXPECT_TRUE(m->init_op.empty());
  std::vector<float> want = {5.5f, 1, 0, 0, 1, 0};
  EXPECT_EQ(RunMlp(*m), want);
}

TEST(OnnxImport, TruncatedFileIsRefused) {
  std::string bytes = Bytes(Mlp());
  for (size_t cut : {bytes.size() / 2, bytes.size() - 3, size_t(5)}) {
    StatusOr<ImportedModel> m = ImportOnnx(bytes.substr(0, cut));
    ASSERT_FALSE(m.ok()) << "cut at " << cut;
    EXPECT_EQ(m.status().code(), Code::kInvalidArgument) << m.status().ToString();
  }
  EXPECT_EQ(ImportOnnx("").status().code(), Code::kInvalidArgument);
}

TEST(OnnxImport, BytesThatAreNotAModelAreRefused) {
  for (std::string bytes : {std::string("not a model at all, just text\n"),
                            std::string("\x89PNG\r\n\x1a\n\0\0\0\rIHDR", 16),
                            std::string("{\"graph\": {\"nodes\": []}}")}) {
    StatusOr<ImportedModel> m = ImportOnnx(bytes);
    ASSERT_FALSE(m.ok());
    EXPECT_EQ(m.status().code(), Code::kInvalidArgument) << m.status().ToString();
    EXPECT_NE(m.status().message().find("ONNX model"), std::string::npos)
        << m.status().ToString();
  }
}

TEST(OnnxImport, UnsupportedOpNamesNodeAndOp) {
  onnx::ModelProto m = Mlp();
  onnx::GraphProto* g = m.mutable_graph();
  g->mutable_node(1)->set_op_type("Det");  // a valid ONNX op Flowstate lacks
  g->mutable_node(1)->set_name("determinant");
  StatusOr<ImportedModel> r = ImportOnnx(Bytes(m));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kUnimplemented) << r.status().ToString();
  EXPECT_EQ(r.status().node(), "determinant");
  EXPECT_NE(r.status().message().find("'determinant' (Det)"), std::string::npos)
      << r.status().ToString();
}

TEST(OnnxImport, UnsupportedAttributeValueNamesTheAttribute) {
  onnx::ModelProto ln = NewModel(17);
  onnx::GraphProto* g = ln.mutable_graph();
  AddValue(g->mutable_input(), "x", {1, 2, 2});
  AddValue(g->mutable_output(), "y", {1, 2, 2});
  AddInitializer(g, "scale", {2}, {1, 1});
  onnx::NodeProto* n = AddNode(g, "norm", "LayerNormalization", {"x", "scale"}, {"y"});
  auto* t = n->add_attribute();
  t->set_name("stash_type");
  t->set_type(onnx::AttributeProto::INT);
  t->set_i(10);  // float16 statistics
  StatusOr<ImportedModel> r = ImportOnnx(Bytes(ln));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kUnimplemented) << r.status().ToString();
  EXPECT_EQ(r.status().node(), "norm");
  EXPECT_NE(r.status().message().find("'norm' (LayerNormalization): attribute 'stash_type'"),
            std::string::npos)
      << r.status().ToString();
}

// BatchNormalization's own training mode (training_mode = 1), outside a
// job: the batch's statistics, as ONNX defines it.
TEST(OnnxImport, BatchNormTrainingModeUsesTheBatchStatistics) {
  onnx::ModelProto bn = NewModel(15);
  onnx::GraphProto* g = bn.mutable_graph();
  AddValue(g->mutable_input(), "x", {2, 1, 1, 1});
  AddValue(g->mutable_output(), "y", {2, 1, 1, 1});
  AddInitializer(g, "scale", {1}, {2});
  AddInitializer(g, "bias", {1}, {1});
  AddInitializer(g, "mean", {1}, {100});
  AddInitializer(g, "var", {1}, {100});
  onnx::NodeProto* n = AddNode(g, "norm", "BatchNormalization", {"x", "scale", "bias", "mean", "var"},
                               {"y"});
  auto* t = n->add_attribute();
  t->set_name("training_mode");
  t->set_type(onnx::AttributeProto::INT);
  t->set_i(1);
  OnnxImportOptions o;
  o.initializers_as_constants = true;
  StatusOr<ImportedModel> r = ImportOnnx(Bytes(bn), o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  SessionOptions so;
  so.devices = Pool();
  auto s = Session::Create(r->graph, so);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  std::vector<Tensor> out;
  Tensor x = Tensor::FromVector<float>({1, 3}, TensorShape({2, 1, 1, 1}));
  ASSERT_TRUE((*s)->Run({{r->inputs[0].tensor, x}}, {r->outputs[0].tensor}, {}, &out).ok());
  // Batch mean 2, biased variance 1: (x - 2) / sqrt(1 + 1e-5) * 2 + 1.
  auto y = out[0].flat<float>();
  EXPECT_NEAR(y[0], -1, 1e-4);
  EXPECT_NEAR(y[1], 3, 1e-4);
}

TEST(OnnxImport, OpsetOutsideTheRangeIsNamed) {
  for (int opset : {9, 18}) {
    StatusOr<ImportedModel> r = ImportOnnx(Bytes(Mlp(opset)));
    ASSERT_FALSE(r.ok()) << opset;
    EXPECT_EQ(r.status().code(), Code::kInvalidArgument);
    EXPECT_NE(r.status().message().find("opset " + std::to_string(opset)), std::string::npos)
        << r.status().ToString();
  }
  onnx::ModelProto none = Mlp();
  none.clear_opset_import();
  StatusOr<ImportedModel> r = ImportOnnx(Bytes(none));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("opset_import"), std::string::npos) << r.status().ToString();
}

TEST(OnnxImport, OlderOpsetIsUpgradedWhenAsked) {
  OnnxImportOptions o;
  o.upgrade_older_opsets = true;
  o.initializers_as_constants = true;
  StatusOr<ImportedModel> m = ImportOnnx(Bytes(Mlp(9)), o);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ(m->opset, 9);
  std::vector<float> want = {5.5f, 1, 0, 0, 1, 0};
  EXPECT_EQ(RunMlp(*m), want);
}

TEST(OnnxImport, CycleIsRefusedNamingTheNode) {
  onnx::ModelProto m = NewModel();
  onnx::GraphProto* g = m.mutable_graph();
  AddValue(g->mutable_input(), "x", {2});
  AddValue(g->mutable_output(), "y", {2});
  AddNode(g, "first", "Add", {"x", "loop_back"}, {"y"});
  AddNode(g, "second", "Relu", {"y"}, {"loop_back"});
  StatusOr<ImportedModel> r = ImportOnnx(Bytes(m));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kInvalidArgument);
  EXPECT_NE(r.status().message().find("loop_back"), std::string::npos) << r.status().ToString();
}

TEST(OnnxImport, MissingInitializerIsNamed) {
  onnx::ModelProto m = Mlp();
  m.mutable_graph()->mutable_initializer()->RemoveLast();  // "b"
  StatusOr<ImportedModel> r = ImportOnnx(Bytes(m));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kInvalidArgument);
  EXPECT_NE(r.status().message().find("'b'"), std::string::npos) << r.status().ToString();
}

TEST(OnnxImport, WrongInitializerSizeIsNamed) {
  onnx::ModelProto m = Mlp();
  m.mutable_graph()->mutable_initializer(0)->add_float_data(7);  // "w": 7 values for [2, 3]
  StatusOr<ImportedModel> r = ImportOnnx(Bytes(m));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("'w'"), std::string::npos) << r.status().ToString();
}

class ExternalData : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() /
            ("onnx_external_" + std::to_string(::getpid()) + "_" +
             ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(root_);
    fs::create_directories(root_ / "model");
    outside_ = root_.string() + "_outside.bin";
    std::vector<float> w = {1, -1, 0.5f, 2, 1, -0.5f};
    std::ofstream(root_ / "model" / "w.bin", std::ios::binary)
        .write(reinterpret_cast<const char*>(w.data()), sizeof(float) * w.size());
    std::ofstream(outside_, std::ios::binary)
        .write(reinterpret_cast<const char*>(w.data()), sizeof(float) * w.size());
  }
  void TearDown() override {
    fs::remove_all(root_);
    fs::remove(outside_);
  }
  // The MLP with "w" stored as external data at `location`.
  std::string Model(const std::string& location) {
    onnx::ModelProto m = Mlp();
    onnx::TensorProto* w = m.mutable_graph()->mutable_initializer(0);
    w->clear_float_data();
    w->set_data_location(onnx::TensorProto::EXTERNAL);
    auto* kv = w->add_external_data();
    kv->set_key("location");
    kv->set_value(location);
    return Bytes(m);
  }
  StatusOr<ImportedModel> Import(const std::string& location) {
    OnnxImportOptions o;
    o.external_data_dir = (root_ / "model").string();
    o.data_root = root_.string();
    return ImportOnnx(Model(location), o);
  }
  fs::path root_;
  std::string outside_;
};

TEST_F(ExternalData, ReadBeneathTheRoot) {
  StatusOr<ImportedModel> m = Import("w.bin");
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  std::vector<float> want = {5.5f, 1, 0, 0, 1, 0};
  EXPECT_EQ(RunMlp(*m), want);
}

TEST_F(ExternalData, DotDotIsRefused) {
  StatusOr<ImportedModel> m = Import("../../" + fs::path(outside_).filename().string());
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), Code::kInvalidArgument);
  EXPECT_NE(m.status().message().find("'w'"), std::string::npos) << m.status().ToString();
  EXPECT_NE(m.status().message().find(".."), std::string::npos) << m.status().ToString();
}

TEST_F(ExternalData, AbsolutePathIsRefused) {
  StatusOr<ImportedModel> m = Import(outside_);
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("relative"), std::string::npos) << m.status().ToString();
}

TEST_F(ExternalData, SymlinkEscapingTheRootIsRefused) {
  fs::create_symlink(outside_, root_ / "model" / "link.bin");
  StatusOr<ImportedModel> m = Import("link.bin");
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("outside the data root"), std::string::npos)
      << m.status().ToString();
}

TEST_F(ExternalData, RefusedWithoutAFolder) {
  StatusOr<ImportedModel> m = ImportOnnx(Model("w.bin"));
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("'w'"), std::string::npos) << m.status().ToString();
}

TEST_F(ExternalData, ShortFileIsRefused) {
  std::ofstream(root_ / "model" / "short.bin", std::ios::binary).write("abcd", 4);
  StatusOr<ImportedModel> m = Import("short.bin");
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("'w'"), std::string::npos) << m.status().ToString();
}

// The Transpose nodes of activations that a fetch of `tensor` runs: those
// reachable from it.
int TransposesReaching(const GraphDef& g, const std::string& tensor) {
  std::map<std::string, const NodeDef*> by_name;
  for (const NodeDef& n : g.nodes) by_name[n.name] = &n;
  std::set<std::string> seen;
  std::vector<std::string> todo = {ParseTensorId(tensor).value().node};
  int count = 0;
  while (!todo.empty()) {
    std::string name = todo.back();
    todo.pop_back();
    if (!seen.insert(name).second || by_name.count(name) == 0) continue;
    const NodeDef& n = *by_name[name];
    if (n.op == "Transpose") {
      // Of an activation, not of a filter (a Const or Variable, OIHW -> HWIO).
      auto in = by_name.find(ParseTensorId(n.inputs[0]).value().node);
      if (in == by_name.end() || (in->second->op != "Const" && in->second->op != "Variable")) ++count;
    }
    for (const std::string& in : n.inputs) {
      todo.push_back(in[0] == '^' ? in.substr(1) : ParseTensorId(in).value().node);
    }
  }
  return count;
}

// An NCHW residual block as PyTorch exports it: Conv, Relu, Conv, Add (the
// skip), Clip(0, 6), MaxPool. Every convolution and pool runs NHWC; the
// element-wise ops between them move through the layout changes, so a step
// transposes only the block's input and its output (6 before).
TEST(OnnxImport, AnNchwBlockTransposesOnlyAtItsEnds) {
  onnx::ModelProto m = NewModel(13);
  onnx::GraphProto* g = m.mutable_graph();
  AddValue(g->mutable_input(), "x", {1, 2, 4, 4});
  AddValue(g->mutable_output(), "y", {1, 2, 2, 2});
  std::vector<float> w(2 * 2 * 3 * 3);
  for (size_t i = 0; i < w.size(); ++i) w[i] = float(int(i % 7) - 3) * 0.1f;
  AddInitializer(g, "w1", {2, 2, 3, 3}, w);
  AddInitializer(g, "w2", {2, 2, 3, 3}, w);
  AddInitializer(g, "lo", {}, {0});
  AddInitializer(g, "hi", {}, {6});
  auto ints = [](onnx::NodeProto* n, const char* name, std::vector<int64_t> v) {
    auto* a = n->add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto::INTS);
    for (int64_t x : v) a->add_ints(x);
  };
  auto conv = [&](const char* name, const char* in, const char* filt, const char* out) {
    onnx::NodeProto* n = AddNode(g, name, "Conv", {in, filt}, {out});
    ints(n, "kernel_shape", {3, 3});
    ints(n, "pads", {1, 1, 1, 1});
  };
  conv("c1", "x", "w1", "h1");
  AddNode(g, "relu", "Relu", {"h1"}, {"r1"});
  conv("c2", "r1", "w2", "h2");
  AddNode(g, "skip", "Add", {"h2", "h1"}, {"s"});
  AddNode(g, "six", "Clip", {"s", "lo", "hi"}, {"c"});
  onnx::NodeProto* pool = AddNode(g, "pool", "MaxPool", {"c"}, {"y"});
  ints(pool, "kernel_shape", {2, 2});
  ints(pool, "strides", {2, 2});
  StatusOr<ImportedModel> imported = ImportOnnx(Bytes(m));
  ASSERT_TRUE(imported.ok()) << imported.status().ToString();
  EXPECT_EQ(TransposesReaching(imported->graph, imported->outputs[0].tensor), 2);
}

TEST(OnnxImport, SupportedOpsTableIsSortedAndCoversTheCommonOps) {
  std::vector<OnnxOpSupport> ops = SupportedOnnxOps();
  std::set<std::string> names;
  for (const auto& o : ops) {
    EXPECT_LE(o.since, o.until) << o.op;
    names.insert(o.op);
  }
  for (const char* op : {"Gemm", "MatMul", "Conv", "BatchNormalization", "Softmax", "Reshape",
                         "LayerNormalization", "Gather", "Slice", "Erf"}) {
    EXPECT_TRUE(names.count(op)) << op;
  }
}

}  // namespace
}  // namespace flowstate

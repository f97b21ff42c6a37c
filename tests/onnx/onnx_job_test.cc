// Training jobs of ONNX models (jobs/onnx_model.h): a job given as
// "model": {"onnx": ...} starts exactly from the file's weights, trains
// BatchNormalization in training mode (batch statistics, running ones moved
// with the node's momentum) and evaluates it in inference mode, and every
// mistake in the job's "model" is refused naming the field. The models are
// built with ONNX's protobuf classes.
#include <gtest/gtest.h>
#include <onnx/onnx_pb.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>

#include "api/job_spec.h"
#include "devices/device_pool.h"
#include "jobs/training_job.h"
#include "tests/onnx/onnx_test_models.h"

namespace flowstate {
namespace {

namespace fs = std::filesystem;

DevicePool* Pool() {
  static DevicePool* pool = [] {
    DevicePoolOptions o;
    o.intra_op_threads = 1;
    return DevicePool::Create(o).value().release();
  }();
  return pool;
}

using onnx_test::AddFloatAttr;
using onnx_test::AddInitializer;
using onnx_test::AddNode;
using onnx_test::AddValue;

// The file's values.
const std::vector<float> kScale = {1.5f, 0.5f}, kBias = {0.1f, -0.2f};
const std::vector<float> kMean = {2.0f, -1.0f}, kVar = {4.0f, 0.25f};
const std::vector<float> kW = {0.3f, -0.2f, 0.1f, -0.4f, 0.25f, 0.05f};  // [2, 3]
const std::vector<float> kB = {0.01f, -0.02f, 0.03f};
constexpr float kEps = 1e-5f, kMomentum = 0.9f;

// input [batch, 2] -> BatchNormalization -> Gemm [2, 3] -> logits [batch, 3];
// with `dropout`, a Dropout in training mode (ratio 0.5) after the Gemm
// whose mask is a second graph output.
std::string Model(bool dropout = false) {
  onnx::ModelProto m = onnx_test::NewModel(13);
  onnx::GraphProto* g = m.mutable_graph();
  AddValue(g->mutable_input(), "input", {-1, 2});
  AddValue(g->mutable_output(), "logits", {-1, 3});
  AddInitializer(g, "bn.weight", {2}, kScale);
  AddInitializer(g, "bn.bias", {2}, kBias);
  AddInitializer(g, "bn.running_mean", {2}, kMean);
  AddInitializer(g, "bn.running_var", {2}, kVar);
  AddInitializer(g, "fc.weight", {2, 3}, kW);
  AddInitializer(g, "fc.bias", {3}, kB);
  onnx::NodeProto* bn = AddNode(g, "bn", "BatchNormalization",
                                {"input", "bn.weight", "bn.bias", "bn.running_mean", "bn.running_var"},
                                {"normed"});
  AddFloatAttr(bn, "epsilon", kEps);
  AddFloatAttr(bn, "momentum", kMomentum);
  if (!dropout) {
    AddNode(g, "fc", "Gemm", {"normed", "fc.weight", "fc.bias"}, {"logits"});
    return m.SerializeAsString();
  }
  AddNode(g, "fc", "Gemm", {"normed", "fc.weight", "fc.bias"}, {"pre"});
  // As PyTorch exports them: Constant nodes.
  onnx::NodeProto* ratio = AddNode(g, "ratio_value", "Constant", {}, {"ratio"});
  auto* rv = ratio->add_attribute();
  rv->set_name("value");
  rv->set_type(onnx::AttributeProto::TENSOR);
  rv->mutable_t()->set_data_type(onnx::TensorProto::FLOAT);
  rv->mutable_t()->add_float_data(0.5f);
  onnx::NodeProto* training = AddNode(g, "training_value", "Constant", {}, {"training"});
  auto* tv = training->add_attribute();
  tv->set_name("value");
  tv->set_type(onnx::AttributeProto::TENSOR);
  tv->mutable_t()->set_data_type(onnx::TensorProto::BOOL);
  tv->mutable_t()->add_int32_data(1);
  AddNode(g, "drop", "Dropout", {"pre", "ratio", "training"}, {"logits", "mask"});
  onnx::ValueInfoProto* mask = g->add_output();
  mask->set_name("mask");
  auto* mt = mask->mutable_type()->mutable_tensor_type();
  mt->set_elem_type(onnx::TensorProto::BOOL);
  mt->mutable_shape()->add_dim()->set_dim_param("batch");
  mt->mutable_shape()->add_dim()->set_dim_value(3);
  return m.SerializeAsString();
}

struct Row {
  float a, b;
  int label;
};

class OnnxJob : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("flowstate_onnx_job_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_ / "models");
    std::ofstream(dir_ / "models" / "bn_mlp.onnx", std::ios::binary) << Model();
    std::mt19937 rng(7);
    std::normal_distribution<float> na(2.0f, 2.0f), nb(-1.0f, 0.5f);
    std::ofstream csv(dir_ / "rows.csv");
    csv << "a,b,label\n";
    for (int i = 0; i < 240; ++i) {
      Row r{na(rng), nb(rng), 0};
      r.label = r.a - 2 > 0 ? (r.b + 1 > 0 ? 2 : 1) : 0;
      rows_.push_back(r);
      csv << r.a << "," << r.b << "," << r.label << "\n";
    }
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string Job(const std::string& model, int epochs = 1, const std::string& extra = "") {
    return R"({"model": )" + model + R"(,
      "optimizer": {"type": "sgd", "learning_rate": 0.5},
      "input": {"format": "csv", "files": {"x": "rows.csv", "y": "rows.csv"},
                "columns": {"x": ["a", "b"], "y": {"columns": ["label"], "dtype": "int32"}},
                "batch_size": 16, "shuffle": false, "epochs": )" + std::to_string(epochs) + R"(},
      "eval": {"files": {"x": "rows.csv", "y": "rows.csv"}, "metrics": ["loss", "accuracy"]}
      )" + extra + "}";
  }
  static std::string DefaultModel() {
    return R"({"onnx": "models/bn_mlp.onnx", "inputs": {"x": "input"}, "labels": "y"})";
  }

  StatusOr<std::unique_ptr<TrainingJob>> Make(const std::string& json, ModelReader read = {}) {
    FS_ASSIGN_OR_RETURN(JobSpec spec, ParseJobSpec(json));
    TrainingJobOptions o;
    o.data_root = dir_.string();
    o.devices = Pool();
    o.read_model = std::move(read);
    return TrainingJob::Create(spec, o);
  }

  // The model's mean cross entropy and accuracy over every row, in
  // inference mode, from the file's values.
  std::pair<double, double> FileModelLossAndAccuracy() const {
    double loss = 0, right = 0;
    for (const Row& r : rows_) {
      double x[2] = {r.a, r.b}, n[2], z[3];
      for (int c = 0; c < 2; ++c) n[c] = (x[c] - kMean[c]) / std::sqrt(kVar[c] + kEps) * kScale[c] + kBias[c];
      for (int k = 0; k < 3; ++k) z[k] = n[0] * kW[k] + n[1] * kW[3 + k] + kB[k];
      double mx = std::max({z[0], z[1], z[2]}), s = 0;
      for (double v : z) s += std::exp(v - mx);
      loss += -(z[r.label] - mx - std::log(s));
      int best = int(std::max_element(z, z + 3) - z);
      right += best == r.label ? 1 : 0;
    }
    return {loss / double(rows_.size()), right / double(rows_.size())};
  }

  fs::path dir_;
  std::vector<Row> rows_;
};

TEST_F(OnnxJob, StartsFromTheFileWeightsAndEvaluatesInInferenceMode) {
  StatusOr<std::unique_ptr<TrainingJob>> j = Make(Job(DefaultModel()));
  ASSERT_TRUE(j.ok()) << j.status().ToString();
  ASSERT_TRUE((*j)->Start().ok());
  StatusOr<std::map<std::string, double>> m = (*j)->Evaluate();
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  auto [loss, accuracy] = FileModelLossAndAccuracy();
  EXPECT_NEAR(m->at("loss"), loss, 1e-5 * loss);
  EXPECT_NEAR(m->at("accuracy"), accuracy, 1e-6);
}

TEST_F(OnnxJob, BatchNormTrainsOnBatchStatisticsAndMovesTheRunningOnes) {
  StatusOr<std::unique_ptr<TrainingJob>> j = Make(Job(DefaultModel()));
  ASSERT_TRUE(j.ok()) << j.status().ToString();
  ASSERT_TRUE((*j)->Start().ok());
  StatusOr<StepResult> r = (*j)->Step();
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  // The first batch (16 rows, not shuffled): its statistics.
  double mean[2] = {0, 0}, var[2] = {0, 0};
  for (int i = 0; i < 16; ++i) {
    mean[0] += rows_[i].a / 16.0;
    mean[1] += rows_[i].b / 16.0;
  }
  for (int i = 0; i < 16; ++i) {
    var[0] += (rows_[i].a - mean[0]) * (rows_[i].a - mean[0]);
    var[1] += (rows_[i].b - mean[1]) * (rows_[i].b - mean[1]);
  }
  // The step's loss: normalized by the batch's (biased) variance.
  double loss = 0;
  for (int i = 0; i < 16; ++i) {
    double x[2] = {rows_[i].a, rows_[i].b}, n[2], z[3];
    for (int c = 0; c < 2; ++c) n[c] = (x[c] - mean[c]) / std::sqrt(var[c] / 16 + kEps) * kScale[c] + kBias[c];
    for (int k = 0; k < 3; ++k) z[k] = n[0] * kW[k] + n[1] * kW[3 + k] + kB[k];
    double mx = std::max({z[0], z[1], z[2]}), s = 0;
    for (double v : z) s += std::exp(v - mx);
    loss += -(z[rows_[i].label] - mx - std::log(s)) / 16;
  }
  EXPECT_NEAR(r->loss, loss, 1e-5 * loss);
  StatusOr<std::vector<std::pair<std::string, Tensor>>> values = (*j)->ModelValues();
  ASSERT_TRUE(values.ok()) << values.status().ToString();
  std::map<std::string, Tensor> by_name(values->begin(), values->end());
  ASSERT_TRUE(by_name.count("bn.running_mean")) << "variables are named after the initializers";
  auto rm = by_name.at("bn.running_mean").flat<float>();
  auto rv = by_name.at("bn.running_var").flat<float>();
  for (int c = 0; c < 2; ++c) {
    // PyTorch's rule: the running variance moves towards the unbiased one.
    EXPECT_NEAR(rm[c], kMomentum * kMean[c] + (1 - kMomentum) * mean[c], 1e-5) << "channel " << c;
    EXPECT_NEAR(rv[c], kMomentum * kVar[c] + (1 - kMomentum) * var[c] / 15, 1e-4) << "channel " << c;
  }
}

TEST_F(OnnxJob, TrainingLearns) {
  StatusOr<std::unique_ptr<TrainingJob>> j = Make(Job(DefaultModel(), 20));
  ASSERT_TRUE(j.ok()) << j.status().ToString();
  ASSERT_TRUE((*j)->Start().ok());
  StatusOr<std::map<std::string, double>> before = (*j)->Evaluate();
  ASSERT_TRUE(before.ok());
  for (;;) {
    StatusOr<StepResult> r = (*j)->Step();
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    if (r->done) break;
  }
  StatusOr<std::map<std::string, double>> after = (*j)->Evaluate();
  ASSERT_TRUE(after.ok());
  EXPECT_LT(after->at("loss"), 0.5 * before->at("loss"));
  EXPECT_GT(after->at("accuracy"), 0.9);
}

// A Dropout exported in training mode drops in training and is the
// identity in evaluation, its mask output then all true.
TEST_F(OnnxJob, DropoutTrainsAndEvaluatesAsTheIdentity) {
  std::ofstream(dir_ / "models" / "dropout.onnx", std::ios::binary) << Model(true);
  StatusOr<std::unique_ptr<TrainingJob>> j = Make(Job(
      R"({"onnx": "models/dropout.onnx", "inputs": {"x": "input"}, "labels": "y", "output": "logits"})"));
  ASSERT_TRUE(j.ok()) << j.status().ToString();
  Status started = (*j)->Start();
  ASSERT_TRUE(started.ok()) << started.ToString();
  StatusOr<std::map<std::string, double>> m = (*j)->Evaluate();
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  auto [loss, accuracy] = FileModelLossAndAccuracy();
  EXPECT_NEAR(m->at("loss"), loss, 1e-5 * loss) << "evaluation drops nothing";
  std::vector<Tensor> out;
  Tensor x = Tensor::FromVector<float>({1, 2, 3, 4}, TensorShape({2, 2}));
  ASSERT_TRUE((*j)->Predict({{"x", x}}, {"mask"}, &out).ok());
  for (bool b : out[0].flat<bool>()) EXPECT_TRUE(b);
  StatusOr<StepResult> r = (*j)->Step();
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(std::isfinite(r->loss));
}

TEST_F(OnnxJob, AnUploadedModelIsReadThroughTheReader) {
  std::string model = R"({"onnx": "m-1", "inputs": {"x": "input"}, "labels": "y"})";
  int reads = 0;
  StatusOr<std::unique_ptr<TrainingJob>> j = Make(Job(model), [&](const std::string& id) -> StatusOr<std::string> {
    ++reads;
    if (id == "m-1") return Model();
    return NotFound("no model " + id);
  });
  ASSERT_TRUE(j.ok()) << j.status().ToString();
  EXPECT_EQ(reads, 1);
  StatusOr<std::unique_ptr<TrainingJob>> none = Make(Job(R"({"onnx": "m-2", "inputs": {"x": "input"}, "labels": "y"})"),
                                                     [](const std::string& id) -> StatusOr<std::string> {
                                                       return NotFound("no model " + id);
                                                     });
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.status().code(), Code::kInvalidArgument);
  EXPECT_NE(none.status().message().find("model.onnx: there is no uploaded model 'm-2'"), std::string::npos)
      << none.status().ToString();
}

TEST_F(OnnxJob, MistakesAreRefusedNamingTheField) {
  fs::create_directories(dir_ / ".." / "outside_onnx_job");
  std::ofstream(dir_ / ".." / "outside_onnx_job" / "m.onnx", std::ios::binary) << Model();
  fs::create_symlink(dir_ / ".." / "outside_onnx_job" / "m.onnx", dir_ / "models" / "link.onnx");
  std::ofstream(dir_ / "models" / "junk.onnx") << "not a model";
  struct Case {
    std::string model, want;
  } cases[] = {
      {R"({"onnx": "models/none.onnx", "inputs": {"x": "input"}, "labels": "y"})", "model.onnx"},
      {R"({"onnx": "models/junk.onnx", "inputs": {"x": "input"}, "labels": "y"})",
       "model.onnx: the bytes are not an ONNX model"},
      {R"({"onnx": "models/link.onnx", "inputs": {"x": "input"}, "labels": "y"})", "model.onnx"},
      {R"({"onnx": "../outside_onnx_job/m.onnx", "inputs": {"x": "input"}, "labels": "y"})", "model.onnx"},
      {R"({"onnx": "m-9", "inputs": {"x": "input"}, "labels": "y"})", "keeps no uploaded models"},
      {R"({"onnx": "models/bn_mlp.onnx", "inputs": {"x": "image"}, "labels": "y"})",
       "model.inputs.x: the ONNX model has no input 'image' (its inputs: 'input')"},
      {R"({"onnx": "models/bn_mlp.onnx", "inputs": {"z": "input"}, "labels": "y"})",
       "input.files.x: field 'x' is neither one of model.inputs nor model.labels"},
      {R"({"onnx": "models/bn_mlp.onnx", "inputs": {"x": "input"}, "labels": "y", "output": "probs"})",
       "model.output: the ONNX model has no output 'probs' (its outputs: 'logits')"},
      {R"({"onnx": "models/bn_mlp.onnx", "inputs": {"x": {"input": "input", "scale": "big"}}, "labels": "y"})",
       "model.inputs.x.scale"},
      {R"({"onnx": "models/bn_mlp.onnx", "inputs": {"x": "input"}, "labels": "y", "loss": "hinge"})",
       "model.loss: unknown loss \"hinge\""},
      {R"({"onnx": "models/bn_mlp.onnx", "inputs": {"x": "input"}})", "model.labels: is required"},
      {R"({"onnx": "models/bn_mlp.onnx", "inputs": {"x": "input"}, "labels": "x"})",
       "model.labels: field \"x\" is also one of \"inputs\""},
  };
  for (const Case& c : cases) {
    StatusOr<std::unique_ptr<TrainingJob>> j = Make(Job(c.model));
    ASSERT_FALSE(j.ok()) << c.model;
    EXPECT_NE(j.status().ToString().find(c.want), std::string::npos)
        << c.model << "\n  got: " << j.status().ToString();
  }
  // "graph" and "model" together, "loss" beside "model".
  StatusOr<JobSpec> both = ParseJobSpec(R"({"graph": {"nodes": []}, "model": )" + DefaultModel() +
                                        R"(, "optimizer": {"type": "sgd"}, "input": {"files": {"x": "a"}}})");
  ASSERT_FALSE(both.ok());
  EXPECT_NE(both.status().message().find("either \"graph\" or \"model\""), std::string::npos);
  StatusOr<JobSpec> loss = ParseJobSpec(Job(DefaultModel(), 1, R"(, "loss": "l")"));
  ASSERT_FALSE(loss.ok());
  EXPECT_NE(loss.status().message().find("loss: is set by \"model\""), std::string::npos)
      << loss.status().ToString();
  fs::remove_all(dir_ / ".." / "outside_onnx_job");
}

}  // namespace
}  // namespace flowstate

#include "api/job_spec.h"

#include <gtest/gtest.h>

#include <fstream>
#include <set>
#include <sstream>

#include "jobs/training_job.h"

namespace flowstate {
namespace {

std::string ReadFile(const std::string& path) {
  std::ifstream f(path);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

std::string ExampleJob(const char* name) {
  return ReadFile(std::string(FLOWSTATE_SOURCE_DIR) + "/examples/jobs/" + name);
}

// A small valid job, edited by each test.
std::string Job(const std::string& replace_from = "", const std::string& replace_to = "") {
  std::string j = R"({
    "name": "tiny",
    "graph": {"nodes": [
      {"name": "x", "op": "Placeholder", "attrs": {"dtype": "float32", "shape": [-1, 2]}},
      {"name": "y", "op": "Placeholder", "attrs": {"dtype": "float32", "shape": [-1, 1]}},
      {"name": "w", "op": "Variable", "attrs": {"dtype": "float32", "shape": [2, 1], "init": "zeros"}},
      {"name": "p", "op": "MatMul", "inputs": ["x", "w"]},
      {"name": "d", "op": "Sub", "inputs": ["p", "y"]},
      {"name": "sq", "op": "Square", "inputs": ["d"]},
      {"name": "axes", "op": "Const", "attrs": {"dtype": "int32", "value": []}},
      {"name": "loss", "op": "Mean", "inputs": ["sq", "axes"]}
    ]},
    "loss": "loss",
    "optimizer": {"type": "sgd", "learning_rate": 0.1},
    "input": {"format": "csv", "files": {"x": "t.csv", "y": "t.csv"},
              "columns": {"x": [0, 1], "y": [2]}, "batch_size": 4}
  })";
  if (!replace_from.empty()) {
    size_t p = j.find(replace_from);
    EXPECT_NE(p, std::string::npos) << replace_from;
    if (p != std::string::npos) j.replace(p, replace_from.size(), replace_to);
  }
  return j;
}

void ExpectPathError(const std::string& json, const std::string& path_and_text) {
  StatusOr<JobSpec> j = ParseJobSpec(json);
  ASSERT_FALSE(j.ok()) << "expected: " << path_and_text;
  EXPECT_EQ(j.status().code(), Code::kInvalidArgument);
  EXPECT_NE(j.status().message().find(path_and_text), std::string::npos) << j.status().ToString();
}

TEST(JobSpec, ParsesTheExampleJobs) {
  for (const char* f : {"fashion_mlp.json", "fashion_cnn.json", "fashion_lstm.json"}) {
    StatusOr<JobSpec> j = ParseJobSpec(ExampleJob(f));
    ASSERT_TRUE(j.ok()) << f << ": " << j.status().ToString();
    EXPECT_EQ(j->loss, "loss");
    EXPECT_EQ(j->optimizer.kind, OptimizerOptions::Kind::kAdam);
    EXPECT_EQ(j->input.batch_size, 128);
    ASSERT_TRUE(j->eval.has_value());
    EXPECT_EQ(j->eval->metrics, (std::vector<std::string>{"accuracy", "loss"}));
    StatusOr<TrainingGraph> g = BuildTrainingGraph(*j);
    ASSERT_TRUE(g.ok()) << f << ": " << g.status().ToString();
    EXPECT_FALSE(g->train_op.empty());
    EXPECT_GE(g->trainable.size(), 4u);
  }
}

// The recommender example: its ids come from CSV columns as int32, and both
// embedding tables are updated sparsely (lazy Adam), nothing densified.
TEST(JobSpec, RecommenderExampleUpdatesItsTablesSparsely) {
  StatusOr<JobSpec> j = ParseJobSpec(ExampleJob("recommender.json"));
  ASSERT_TRUE(j.ok()) << j.status().ToString();
  EXPECT_EQ(j->input.format, "csv");
  for (const char* c : {"user", "item", "y"}) {
    ASSERT_EQ(j->input.columns.count(c), 1u) << c;
    EXPECT_EQ(j->input.columns.at(c).dtype, "int32") << c;
  }
  ASSERT_TRUE(j->eval.has_value());
  EXPECT_EQ(j->eval->files.at("user"), "clicks/test.csv");
  EXPECT_EQ(j->eval->columns.at("user").dtype, "int32") << "eval inherits the columns";
  StatusOr<TrainingGraph> g = BuildTrainingGraph(*j);
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  std::multiset<std::string> ops;
  for (const NodeDef& n : g->graph.nodes) ops.insert(n.op);
  EXPECT_EQ(ops.count("SparseApplyAdam"), 2u);
  EXPECT_EQ(ops.count("ApplyAdam"), 4u) << "the MLP's weights and biases";
  EXPECT_EQ(ops.count("UnsortedSegmentSum"), 0u) << "nothing densified";
}

// One default per optimizer kind, the same from C++ (OptimizerOptions) and
// from a JSON job (once, AdaGrad's epsilon was 1e-8 from C++ and 1e-7
// from JSON; RMSProp's momentum 0.9 and 0).
TEST(JobSpec, OptimizerDefaultsAreTheSameFromCppAndJson) {
  struct Case {
    const char* type;
    OptimizerOptions::Kind kind;
    double epsilon, momentum;
  };
  for (const Case& c : {Case{"adagrad", OptimizerOptions::Kind::kAdaGrad, 1e-7, 0.9},
                        Case{"adam", OptimizerOptions::Kind::kAdam, 1e-8, 0.9},
                        Case{"rmsprop", OptimizerOptions::Kind::kRmsProp, 1e-8, 0.0},
                        Case{"momentum", OptimizerOptions::Kind::kMomentum, 1e-8, 0.9}}) {
    StatusOr<JobSpec> job = ParseJobSpec(Job(R"("type": "sgd")", std::string(R"("type": ")") + c.type + "\""));
    ASSERT_TRUE(job.ok()) << c.type << ": " << job.status().ToString();
    OptimizerOptions cpp;
    cpp.kind = c.kind;
    EXPECT_EQ(EffectiveEpsilon(job->optimizer), c.epsilon) << c.type;
    EXPECT_EQ(EffectiveEpsilon(cpp), c.epsilon) << c.type;
    EXPECT_EQ(EffectiveMomentum(job->optimizer), c.momentum) << c.type;
    EXPECT_EQ(EffectiveMomentum(cpp), c.momentum) << c.type;
  }
  // A value set in the job wins.
  StatusOr<JobSpec> set = ParseJobSpec(Job(R"("type": "sgd")", R"("type": "adagrad", "epsilon": 0.001)"));
  ASSERT_TRUE(set.ok()) << set.status().ToString();
  EXPECT_EQ(EffectiveEpsilon(set->optimizer), 0.001);
}

// An embedding lookup's sparse gradient goes to SparseApplyAdam unless the
// job sets "sparse_updates": false (then densified into ApplyAdam).
TEST(JobSpec, SparseUpdatesOfAnEmbedding) {
  const std::string embedding = R"({
    "name": "emb",
    "graph": {"nodes": [
      {"name": "ids", "op": "Placeholder", "attrs": {"dtype": "int32", "shape": [-1]}},
      {"name": "y", "op": "Placeholder", "attrs": {"dtype": "float32", "shape": [-1, 4]}},
      {"name": "table", "op": "Variable",
       "attrs": {"dtype": "float32", "shape": [1000, 4], "init": "uniform"}},
      {"name": "rows", "op": "Gather", "inputs": ["table", "ids"]},
      {"name": "d", "op": "Sub", "inputs": ["rows", "y"]},
      {"name": "sq", "op": "Square", "inputs": ["d"]},
      {"name": "axes", "op": "Const", "attrs": {"dtype": "int32", "value": []}},
      {"name": "loss", "op": "Mean", "inputs": ["sq", "axes"]}
    ]},
    "loss": "loss",
    "optimizer": {"type": "adam", "learning_rate": 0.1OPTIONS},
    "input": {"format": "csv", "files": {"ids": "t.csv", "y": "t.csv"},
              "columns": {"ids": [0], "y": [1, 2, 3, 4]}, "batch_size": 4}
  })";
  auto ops_of = [&](const std::string& options) {
    std::string j = embedding;
    j.replace(j.find("OPTIONS"), 7, options);
    StatusOr<JobSpec> spec = ParseJobSpec(j);
    EXPECT_TRUE(spec.ok()) << spec.status().ToString();
    std::multiset<std::string> ops;
    if (!spec.ok()) return ops;
    StatusOr<TrainingGraph> g = BuildTrainingGraph(*spec);
    EXPECT_TRUE(g.ok()) << g.status().ToString();
    if (!g.ok()) return ops;
    for (const NodeDef& n : g->graph.nodes) ops.insert(n.op);
    return ops;
  };
  std::multiset<std::string> sparse = ops_of("");
  EXPECT_EQ(sparse.count("SparseApplyAdam"), 1u);
  EXPECT_EQ(sparse.count("ApplyAdam"), 0u);
  EXPECT_EQ(sparse.count("UnsortedSegmentSum"), 0u) << "nothing densified";
  std::multiset<std::string> dense = ops_of(R"(, "sparse_updates": false)");
  EXPECT_EQ(dense.count("SparseApplyAdam"), 0u);
  EXPECT_EQ(dense.count("ApplyAdam"), 1u);
  ExpectPathError(Job("\"learning_rate\": 0.1", "\"learning_rate\": 0.1, \"sparse_updates\": 1"),
                  "optimizer.sparse_updates");
}

TEST(JobSpec, ErrorsNameTheJsonPath) {
  ExpectPathError(Job("\"learning_rate\": 0.1", "\"learning_rate\": -1"),
                  "optimizer.learning_rate: must be > 0");
  ExpectPathError(Job("\"type\": \"sgd\"", "\"type\": \"sgdd\""), "optimizer.type: unknown optimizer");
  ExpectPathError(Job("\"batch_size\": 4", "\"batch_size\": 0"), "input.batch_size: must be >= 1");
  ExpectPathError(Job("\"batch_size\": 4", "\"batch_size\": \"4\""), "input.batch_size: expected an integer");
  ExpectPathError(Job("\"name\": \"tiny\"", "\"nmae\": \"tiny\""), "nmae: unknown field");
  ExpectPathError(Job("\"loss\": \"loss\",", ""), "loss: is required");
  ExpectPathError(Job("\"format\": \"csv\"", "\"format\": \"parquet\""), "input.format");
  ExpectPathError(Job("\"op\": \"MatMul\"", "\"op\": \"MatMull\""), "graph.nodes[3]");
  ExpectPathError("{not json", "malformed JSON");
}

TEST(JobSpec, CheckpointPolicyAndInitFrom) {
  const std::string input_end = "\"batch_size\": 4}";
  StatusOr<JobSpec> j = ParseJobSpec(
      Job(input_end, input_end + R"(, "checkpoint": {"every_steps": 50, "every_seconds": 2.5, "keep": 2},
                         "init_from": {"job": "job-3", "step": 400})"));
  ASSERT_TRUE(j.ok()) << j.status().ToString();
  EXPECT_EQ(j->checkpoint.every_steps, 50);
  EXPECT_EQ(j->checkpoint.every_seconds, 2.5);
  EXPECT_EQ(j->checkpoint.keep, 2);
  ASSERT_TRUE(j->init_from.has_value());
  EXPECT_EQ(j->init_from->job, "job-3");
  EXPECT_EQ(j->init_from->step, 400);
  // Defaults: no policy (on demand, pause, cancel, shutdown only), keep 3.
  j = ParseJobSpec(Job());
  ASSERT_TRUE(j.ok());
  EXPECT_EQ(j->checkpoint.every_steps, 0);
  EXPECT_EQ(j->checkpoint.keep, 3);
  EXPECT_FALSE(j->init_from.has_value());

  auto with = [&](const std::string& extra) { return Job(input_end, input_end + ", " + extra); };
  ExpectPathError(with(R"("checkpoint": {"every_steps": -1})"), "checkpoint.every_steps: must be >= 0");
  ExpectPathError(with(R"("checkpoint": {"every_seconds": "often"})"),
                  "checkpoint.every_seconds: expected a number");
  ExpectPathError(with(R"("checkpoint": {"every_seconds": -2})"), "checkpoint.every_seconds: must be >= 0");
  ExpectPathError(with(R"("checkpoint": {"keep": 0})"), "checkpoint.keep: must be >= 1");
  ExpectPathError(with(R"("checkpoint": {"evry_steps": 5})"), "checkpoint.evry_steps: unknown field");
  ExpectPathError(with(R"("checkpoint": 5)"), "checkpoint: expected a checkpoint policy (an object)");
  ExpectPathError(with(R"("init_from": {"step": 3})"), "init_from.job: is required");
  ExpectPathError(with(R"("init_from": {"job": "job-1"})"), "init_from.step: is required");
  ExpectPathError(with(R"("init_from": {"job": "job-1", "step": -3})"), "init_from.step: must be >= 0");
  ExpectPathError(with(R"("init_from": {"job": 7, "step": 3})"), "init_from.job: expected a string");
  ExpectPathError(with(R"("init_from": {"job": "job-1", "step": 3, "x": 1})"), "init_from.x: unknown field");
}

TEST(JobSpec, TrainingGraphErrors) {
  auto build = [](const std::string& json) {
    StatusOr<JobSpec> j = ParseJobSpec(json);
    EXPECT_TRUE(j.ok()) << j.status().ToString();
    return BuildTrainingGraph(*j).status();
  };
  Status s = build(Job("\"loss\": \"loss\"", "\"loss\": \"nope\""));
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_NE(s.message().find("loss:"), std::string::npos) << s.ToString();
  s = build(Job("\"loss\": \"loss\"", "\"loss\": \"sq\""));  // not a scalar
  EXPECT_NE(s.message().find("must be a scalar"), std::string::npos) << s.ToString();
  s = build(Job("\"files\": {\"x\": \"t.csv\"", "\"files\": {\"xx\": \"t.csv\""));
  EXPECT_NE(s.message().find("input.files.xx"), std::string::npos) << s.ToString();
  s = build(Job(", \"init\": \"zeros\"", ""));
  EXPECT_NE(s.message().find("'w' declares no initializer"), std::string::npos) << s.ToString();
  EXPECT_EQ(s.node(), "w");
  s = build(Job("\"init\": \"zeros\"", "\"init\": \"zeroes\""));
  EXPECT_NE(s.message().find("unknown initializer"), std::string::npos) << s.ToString();
}

// An eval set in the same CSV layout as the input need not repeat its
// columns, header and delimiter; one that gives its own columns replaces them.
TEST(JobSpec, EvalInheritsTheInputsCsvLayout) {
  const std::string with_delim = Job(R"("batch_size": 4})",
                                     R"("batch_size": 4, "header": false, "delimiter": ";"},
      "eval": {"files": {"x": "e.csv", "y": "e.csv"}, "metrics": ["loss"]})");
  StatusOr<JobSpec> j = ParseJobSpec(with_delim);
  ASSERT_TRUE(j.ok()) << j.status().ToString();
  ASSERT_TRUE(j->eval.has_value());
  EXPECT_EQ(j->eval->format, "csv");
  EXPECT_EQ(j->eval->batch_size, 4);
  ASSERT_EQ(j->eval->columns.size(), 2u);
  EXPECT_EQ(j->eval->columns.at("x").indices, (std::vector<int>{0, 1}));
  EXPECT_EQ(j->eval->columns.at("y").indices, (std::vector<int>{2}));
  EXPECT_EQ(j->eval->header, std::optional<bool>(false));
  EXPECT_EQ(j->eval->delimiter, ';');

  StatusOr<JobSpec> own = ParseJobSpec(Job(R"("batch_size": 4})", R"("batch_size": 4},
      "eval": {"files": {"x": "e.csv", "y": "e.csv"}, "columns": {"x": [1, 2], "y": [0]},
               "metrics": ["loss"]})"));
  ASSERT_TRUE(own.ok()) << own.status().ToString();
  ASSERT_EQ(own->eval->columns.size(), 2u);
  EXPECT_EQ(own->eval->columns.at("x").indices, (std::vector<int>{1, 2}));
  EXPECT_EQ(own->eval->columns.at("y").indices, (std::vector<int>{0}));
}

TEST(JobSpec, OnNanIsFailUnlessSkipStep) {
  StatusOr<JobSpec> j = ParseJobSpec(Job());
  ASSERT_TRUE(j.ok()) << j.status().ToString();
  EXPECT_EQ(j->on_nan, OnNan::kFail);
  j = ParseJobSpec(Job("\"name\": \"tiny\"", "\"name\": \"tiny\", \"on_nan\": \"skip_step\""));
  ASSERT_TRUE(j.ok()) << j.status().ToString();
  EXPECT_EQ(j->on_nan, OnNan::kSkipStep);
  ExpectPathError(Job("\"name\": \"tiny\"", "\"name\": \"tiny\", \"on_nan\": \"ignore\""),
                  "on_nan: expected \"fail\" or \"skip_step\"");
  ExpectPathError(Job("\"name\": \"tiny\"", "\"name\": \"tiny\", \"on_nan\": 1"), "on_nan: expected a string");
}

}  // namespace
}  // namespace flowstate

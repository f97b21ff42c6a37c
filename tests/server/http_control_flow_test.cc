// The compact While and If nodes of the JSON graph form over REST: lowered
// by the server to the raw control-flow ops, run through sessions, trained
// through (a job whose loss depends on its variables through a While), and
// bad ones refused with a 400 naming the node inside the body.
#include "tests/server/http_routes_fixture.h"

namespace flowstate {
namespace http_routes_test {
namespace {

// sum = 1 + ... + n, and a count of the iterations whose i is odd through
// an If inside the body.
constexpr const char* kWhileGraph = R"({"graph": {"nodes": [
    {"name": "n", "op": "Placeholder", "attrs": {"dtype": "int32", "shape": []}},
    {"name": "one", "op": "Const", "attrs": {"value": 1}},
    {"name": "zero", "op": "Const", "attrs": {"value": 0}},
    {"name": "loop", "op": "While", "loop_vars": ["one", "zero", "zero"],
     "parallel_iterations": 4,
     "cond": {"args": ["i", "s", "odd"], "output": "le",
              "nodes": [{"name": "le", "op": "LessEqual", "inputs": ["i", "n"]}]},
     "body": {"args": ["i", "s", "odd"], "outputs": ["next_i", "next_s", "count.merged:0"],
              "nodes": [
                {"name": "next_i", "op": "Add", "inputs": ["i", "one"]},
                {"name": "next_s", "op": "Add", "inputs": ["s", "i"]},
                {"name": "two", "op": "Const", "attrs": {"value": 2}},
                {"name": "half", "op": "Div", "inputs": ["i", "two"]},
                {"name": "twice", "op": "Mul", "inputs": ["half", "two"]},
                {"name": "is_odd", "op": "NotEqual", "inputs": ["twice", "i"]},
                {"name": "count.merged", "op": "If", "pred": "is_odd", "inputs": ["odd"],
                 "then": {"args": ["c"], "outputs": ["inc"],
                          "nodes": [{"name": "inc", "op": "Add", "inputs": ["c", "one"]}]},
                 "else": {"args": ["c"], "outputs": ["c"]}}]}},
    {"name": "total", "op": "Identity", "inputs": ["loop:1"]}]}})";

TEST_F(HttpRoutesTest, WhileAndIfNodesAreLoweredAndRun) {
  HttpResponse r = Do("POST", "/v1/sessions", kWhileGraph);
  ASSERT_EQ(r.status, 201) << r.body;
  const std::string id = Json::parse(r.body)["session_id"];
  for (int n : {0, 1, 10, 101}) {
    r = Do("POST", "/v1/sessions/" + id + "/run",
           R"({"feeds": {"n": )" + std::to_string(n) +
               R"(}, "fetches": ["total", "loop:0", "loop:2"], "encoding": "nested"})");
    ASSERT_EQ(r.status, 200) << r.body;
    Json out = Json::parse(r.body)["outputs"];
    EXPECT_EQ(out["total"], n * (n + 1) / 2) << n;
    EXPECT_EQ(out["loop:0"], std::max(n, 0) + 1) << n;
    EXPECT_EQ(out["loop:2"], (n + 1) / 2) << n;
  }
  // The lowered nodes are ordinary nodes of the session's graph, but one
  // inside the loop has a value per iteration: fetching it is refused.
  r = Do("POST", "/v1/sessions/" + id + "/run",
         R"({"feeds": {"n": 3}, "fetches": ["loop/body/next_s"]})");
  EXPECT_EQ(r.status, 400) << r.body;
  EXPECT_EQ(ErrorOf(r).node(), "loop/body/next_s") << r.body;
  EXPECT_NE(ErrorOf(r).message().find("inside loop 'loop'"), std::string::npos) << r.body;
}

TEST_F(HttpRoutesTest, IfTakesEachBranch) {
  HttpResponse r = Do("POST", "/v1/sessions", R"({"graph": {"nodes": [
      {"name": "x", "op": "Placeholder", "attrs": {"dtype": "float32", "shape": []}},
      {"name": "p", "op": "Placeholder", "attrs": {"dtype": "bool", "shape": []}},
      {"name": "c", "op": "If", "pred": "p", "inputs": ["x"],
       "then": {"args": ["v"], "outputs": ["sq", "v"],
                "nodes": [{"name": "sq", "op": "Square", "inputs": ["v"]}]},
       "else": {"args": ["v"], "outputs": ["neg", "x"],
                "nodes": [{"name": "neg", "op": "Neg", "inputs": ["v"]}]}}]}})");
  ASSERT_EQ(r.status, 201) << r.body;
  const std::string id = Json::parse(r.body)["session_id"];
  for (bool p : {true, false}) {
    r = Do("POST", "/v1/sessions/" + id + "/run",
           std::string(R"({"feeds": {"x": 3.0, "p": )") + (p ? "true" : "false") +
               R"(}, "fetches": ["c:0", "c:1"], "encoding": "nested"})");
    ASSERT_EQ(r.status, 200) << r.body;
    Json out = Json::parse(r.body)["outputs"];
    EXPECT_EQ(out["c:0"], p ? 9.0 : -3.0);
    EXPECT_EQ(out["c:1"], 3.0);
  }
}

TEST_F(HttpRoutesTest, BadWhileAndIfNodesAre400NamingTheNodeInside) {
  struct Case {
    const char* nodes;
    const char* node;
    const char* words;
  } cases[] = {
      // An op error inside a body names the node by its full name.
      {R"({"name": "rnn/while", "op": "While", "loop_vars": ["a"],
           "cond": {"args": ["v"], "output": "lt",
                    "nodes": [{"name": "lt", "op": "Less", "inputs": ["v", "a"]}]},
           "body": {"args": ["v"], "outputs": ["matmul"],
                    "nodes": [{"name": "matmul", "op": "MatMul", "inputs": ["v", "v"]}]}})",
       "rnn/while/body/matmul", "must be matrices"},
      // An unknown input inside the cond.
      {R"({"name": "w", "op": "While", "loop_vars": ["a"],
           "cond": {"args": ["v"], "output": "lt",
                    "nodes": [{"name": "lt", "op": "Less", "inputs": ["v", "nowhere"]}]},
           "body": {"args": ["v"], "outputs": ["v"]}})",
       "w/cond/lt", "nowhere"},
      // Mismatched loop variables: two vars, one body output.
      {R"({"name": "w", "op": "While", "loop_vars": ["a", "a"],
           "cond": {"args": ["v", "u"], "output": "lt",
                    "nodes": [{"name": "lt", "op": "Less", "inputs": ["v", "a"]}]},
           "body": {"args": ["v", "u"], "outputs": ["v"]}})",
       "w", "returned 1 value(s) for 2 loop variable(s)"},
      // Args that do not match the loop variables.
      {R"({"name": "w", "op": "While", "loop_vars": ["a"],
           "cond": {"args": ["v", "u"], "output": "v"},
           "body": {"args": ["v"], "outputs": ["v"]}})",
       "w", "names 2 argument(s) for 1 value(s)"},
      // A loop variable whose dtype changes.
      {R"({"name": "w", "op": "While", "loop_vars": ["a"],
           "cond": {"args": ["v"], "output": "lt",
                    "nodes": [{"name": "lt", "op": "Less", "inputs": ["v", "a"]}]},
           "body": {"args": ["v"], "outputs": ["cast"],
                    "nodes": [{"name": "cast", "op": "Cast", "inputs": ["v"],
                               "attrs": {"DstT": "int32"}}]}})",
       "w/next_0", "dtype"},
      // An unknown op inside a branch; an unknown field of an If.
      {R"({"name": "c", "op": "If", "pred": "p", "inputs": [],
           "then": {"outputs": ["k"], "nodes": [{"name": "k", "op": "Nope"}]},
           "else": {"outputs": ["a"]}})",
       "c/then/k", "unknown op"},
      {R"({"name": "c", "op": "If", "pred": "p", "colour": 1,
           "then": {"outputs": ["a"]}, "else": {"outputs": ["a"]}})",
       "c", "unknown field"},
      // parallel_iterations over the limit (a slot per iteration in flight).
      {R"({"name": "w", "op": "While", "loop_vars": ["a"], "parallel_iterations": 10000000000,
           "cond": {"args": ["v"], "output": "lt",
                    "nodes": [{"name": "lt", "op": "Less", "inputs": ["v", "a"]}]},
           "body": {"args": ["v"], "outputs": ["v"]}})",
       "w", "parallel_iterations must be in [1, 65536]"},
      {R"({"name": "e", "op": "Enter", "inputs": ["a"],
           "attrs": {"frame_name": "f", "parallel_iterations": 1000000000}})",
       "e", "over the limit of 65536"},
      // Raw ops: a NextIteration without a loop, an Exit outside a frame.
      {R"({"name": "next", "op": "NextIteration", "inputs": ["a"]},
          {"name": "m", "op": "Merge", "inputs": ["a", "next"]})",
       "next", "outside any loop"},
      {R"({"name": "out", "op": "Exit", "inputs": ["a"]})", "out", "outside any loop"},
  };
  for (const Case& c : cases) {
    std::string body = std::string(R"({"graph": {"nodes": [
        {"name": "a", "op": "Const", "attrs": {"value": 1.0}},
        {"name": "p", "op": "Const", "attrs": {"value": true}},)") +
                       c.nodes + "]}}";
    HttpResponse r = Do("POST", "/v1/sessions", body);
    EXPECT_EQ(r.status, 400) << c.nodes << " -> " << r.body;
    Status s = ErrorOf(r);
    EXPECT_EQ(s.node(), c.node) << r.body;
    EXPECT_NE(s.message().find(c.words), std::string::npos) << s.message();
  }
  EXPECT_EQ(service_->num_sessions(), 0);
}

// A job whose prediction is a While: three iterations of
// acc <- tanh(0.5 * acc) + x w, trained through POST /v1/jobs on the points
// (target 2a - 3b). The gradient of w flows back through every iteration;
// the loss falls well below its start, and predict runs the loop with the
// trained w.
TEST_F(HttpRoutesTest, AJobTrainsThroughAWhileNode) {
  const std::string job = R"({
    "name": "loop-line",
    "graph": {"nodes": [
      {"name": "x", "op": "Placeholder", "attrs": {"dtype": "float32", "shape": [-1, 2]}},
      {"name": "target", "op": "Placeholder", "attrs": {"dtype": "float32", "shape": [-1]}},
      {"name": "w", "op": "Variable", "attrs": {"dtype": "float32", "shape": [2, 1], "init": "zeros"}},
      {"name": "xw", "op": "MatMul", "inputs": ["x", "w"]},
      {"name": "acc0", "op": "ZerosLike", "inputs": ["xw"]},
      {"name": "i0", "op": "Const", "attrs": {"dtype": "int32", "value": 0}},
      {"name": "n", "op": "Const", "attrs": {"dtype": "int32", "value": 3}},
      {"name": "loop", "op": "While", "loop_vars": ["i0", "acc0"],
       "cond": {"args": ["i", "acc"], "output": "more",
                "nodes": [{"name": "more", "op": "Less", "inputs": ["i", "n"]}]},
       "body": {"args": ["i", "acc"], "outputs": ["next_i", "next_acc"],
                "nodes": [{"name": "one", "op": "Const", "attrs": {"dtype": "int32", "value": 1}},
                          {"name": "next_i", "op": "Add", "inputs": ["i", "one"]},
                          {"name": "half", "op": "Const", "attrs": {"dtype": "float32", "value": 0.5}},
                          {"name": "damped", "op": "Mul", "inputs": ["acc", "half"]},
                          {"name": "squashed", "op": "Tanh", "inputs": ["damped"]},
                          {"name": "step", "op": "MatMul", "inputs": ["x", "w"]},
                          {"name": "next_acc", "op": "Add", "inputs": ["squashed", "step"]}]}},
      {"name": "flat", "op": "Const", "attrs": {"dtype": "int32", "value": [-1]}},
      {"name": "pred", "op": "Reshape", "inputs": ["loop:1", "flat"]},
      {"name": "err", "op": "SquaredDifference", "inputs": ["pred", "target"]},
      {"name": "axes", "op": "Const", "attrs": {"dtype": "int32", "value": []}},
      {"name": "loss", "op": "Mean", "inputs": ["err", "axes"]}
    ]},
    "loss": "loss",
    "optimizer": {"type": "adam", "learning_rate": 0.05},
    "input": {"format": "csv", "files": {"x": "points.csv", "target": "points.csv"},
              "columns": {"x": ["a", "b"], "target": ["target"]}, "batch_size": 16, "epochs": 40},
    "seed": 1
  })";
  HttpResponse r = Do("POST", "/v1/jobs", job);
  ASSERT_EQ(r.status, 201) << r.body;
  JobInfo done = WaitFor("job-1", JobState::kSucceeded);
  ASSERT_EQ(JobStateName(done.state), JobStateName(JobState::kSucceeded)) << done.error;
  // Untrained (w = 0) the loss is the mean of (2a - 3b)^2, about 4.3.
  EXPECT_LT(done.loss, 0.1);
  r = Do("POST", "/v1/jobs/job-1/predict",
         R"({"inputs": {"x": [[0.5, -0.5]]}, "fetches": ["pred"], "encoding": "nested"})");
  ASSERT_EQ(r.status, 200) << r.body;
  const double pred = Json::parse(r.body)["outputs"]["pred"][0].get<double>();
  EXPECT_NEAR(pred, 2 * 0.5 - 3 * -0.5, 0.3) << r.body;
}

}  // namespace
}  // namespace http_routes_test
}  // namespace flowstate

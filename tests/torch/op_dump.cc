// torch_op_dump: runs ops and their symbolic gradients on given inputs, for
// the PyTorch differential test (torch_diff.py, which writes the request,
// recomputes everything with PyTorch and compares).
//
//   torch_op_dump REQUEST.json RESULT.json [--threads N]
//   torch_op_dump --gradient-ops        (prints the ops that have gradients)
//
// REQUEST: {"cases": [{"name": "...", "node": {"op": "Conv2D", "attrs": {...}},
//                      "inputs": [tensor, ...], "outputs": [0, ...],
//                      "variables": [3, 4], "stateful": false}, ...]}
// with node attrs as in a graph's JSON and tensors in the API's
// {"dtype", "shape", "data"} form. For each case it builds the graph of the
// gradient check (tests/gradients/gradient_check_util.h): the loss
// L = sum_k sum(y_k * W_k) with fixed weights W_k, and dL/dx for every
// floating input that is not a variable. RESULT: {"results": [{"name",
// "outputs": [...], "weights": [...], "checked": [input indices],
// "grads": [tensor or null, ...]} or {"name", "error": "..."}]}.
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "api/json_codec.h"
#include "graph/gradients.h"
#include "tests/gradients/gradient_check_util.h"

namespace flowstate::test {
namespace {

using Json = nlohmann::json;

StatusOr<GradCheck> ParseCase(const Json& c) {
  GradCheck g;
  Json node = c.at("node");
  node["name"] = "op";
  Json graph = {{"nodes", Json::array({node})}};
  StatusOr<GraphDef> def = api::ParseGraphJson(graph.dump(), "node");
  if (!def.ok()) return def.status();
  g.op = def->nodes[0].op;
  g.attrs = def->nodes[0].attrs;
  for (const Json& t : c.at("inputs")) {
    StatusOr<Tensor> v = api::ParseTensorJson(t.dump());
    if (!v.ok()) return v.status();
    g.inputs.push_back(*v);
  }
  if (c.contains("outputs")) g.outputs = c["outputs"].get<std::vector<int>>();
  if (c.contains("variables")) g.variables = c["variables"].get<std::vector<int>>();
  if (c.contains("stateful")) g.stateful = c["stateful"].get<bool>();
  return g;
}

Json RunCase(const Json& c) {
  Json r = {{"name", c.value("name", "")}};
  auto fail = [&r](const Status& s) {
    r["error"] = s.ToString();
    return r;
  };
  StatusOr<GradCheck> g = ParseCase(c);
  if (!g.ok()) return fail(g.status());
  StatusOr<std::unique_ptr<OpUnderTest>> op = OpUnderTest::Build(*g, false);
  if (!op.ok()) return fail(op.status());
  StatusOr<std::vector<Tensor>> grads = (*op)->Gradients();
  if (!grads.ok()) return fail(grads.status());
  Json outputs = Json::array(), weights = Json::array(), gs = Json::array();
  for (const Tensor& t : (*op)->outputs()) outputs.push_back(Json::parse(api::TensorToJson(t)));
  for (const Tensor& t : (*op)->weights()) weights.push_back(Json::parse(api::TensorToJson(t)));
  for (const Tensor& t : *grads) gs.push_back(t.IsInitialized() ? Json::parse(api::TensorToJson(t)) : Json());
  r["outputs"] = outputs;
  r["weights"] = weights;
  r["checked"] = (*op)->checked();
  r["grads"] = gs;
  return r;
}

int Main(int argc, char** argv) {
  if (argc == 2 && std::string(argv[1]) == "--gradient-ops") {
    for (const std::string& op : GradientRegistry::Global()->Ops()) std::cout << op << "\n";
    return 0;
  }
  if (argc != 3 && !(argc == 5 && std::string(argv[3]) == "--threads")) {
    std::cerr << "usage: torch_op_dump REQUEST.json RESULT.json [--threads N]\n"
                 "       torch_op_dump --gradient-ops\n";
    return 2;
  }
  if (argc == 5) SetIntraOpThreads(std::atoi(argv[4]));
  std::ifstream in(argv[1]);
  if (!in) {
    std::cerr << "cannot read " << argv[1] << "\n";
    return 2;
  }
  Json request = Json::parse(in, nullptr, false);
  if (request.is_discarded() || !request.contains("cases")) {
    std::cerr << argv[1] << ": not a request (JSON with \"cases\")\n";
    return 2;
  }
  Json results = Json::array();
  try {
    for (const Json& c : request["cases"]) results.push_back(RunCase(c));
  } catch (const Json::exception& e) {
    std::cerr << argv[1] << ": malformed case: " << e.what() << "\n";
    return 2;
  }
  std::ofstream out(argv[2]);
  out << Json{{"results", results}}.dump() << "\n";
  return out.good() ? 0 : 1;
}

}  // namespace
}  // namespace flowstate::test

int main(int argc, char** argv) { return flowstate::test::Main(argc, argv); }

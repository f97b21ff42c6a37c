#include "graph/initializers.h"

#include <cmath>

#include "graph/graph.h"
#include "graph/op_builders.h"
#include "graph/partitioned_variables.h"

namespace flowstate {

const std::vector<std::string>& InitializerNames() {
  static const std::vector<std::string>* names = new std::vector<std::string>{
      "zeros",          "ones",         "constant",       "uniform",  "normal",
      "truncated_normal", "glorot_uniform", "glorot_normal", "he_normal", "he_uniform"};
  return *names;
}

int64_t DeriveSeed(uint64_t graph_seed, const std::string& name) {
  uint64_t h = 1469598103934665603ull ^ (graph_seed * 0x9e3779b97f4a7c15ull);
  for (unsigned char c : name) {
    h ^= c;
    h *= 1099511628211ull;
  }
  h ^= h >> 29;
  int64_t s = int64_t(h & 0x7fffffffffffffffull);
  return s == 0 ? 1 : s;
}

namespace {

Output ScalarOf(const Scope& s, DataType t, double v) {
  if (t == DataType::kFloat64) return ops::Const(s, v);
  if (t == DataType::kFloat32) return ops::Const(s, float(v));
  return ops::Cast(s, ops::Const(s, v), t);
}

}  // namespace

StatusOr<InitializerResult> AddVariableInitializers(const Scope& scope, uint64_t graph_seed) {
  FS_ASSIGN_OR_RETURN(Graph g, Graph::Create(scope.graph_def()));
  InitializerResult result;
  std::vector<std::string> assigns;
  Scope is = scope.NewSubScope("init");
  for (int id : g.topo_order()) {
    const Node& n = g.node(id);
    if (n.op() != "Variable") continue;
    const AttrMap& a = n.attrs();
    const std::string& init = a.at("init").s();
    if (init.empty()) {
      result.without_init.push_back(n.name());
      continue;
    }
    DataType t = a.at("dtype").type();
    const PartialShape& shape = a.at("shape").shape();
    auto fail = [&](const std::string& why) {
      return InvalidArgument("variable '" + n.name() + "': " + why, n.name());
    };
    if (!shape.IsFullyDefined()) return fail("init needs a fully defined shape, got " + shape.ToString());
    std::vector<int32_t> dims(shape.dims().begin(), shape.dims().end());
    Scope vs = is.NewSubScope(n.name());
    Output value;
    int64_t seed = a.at("seed").i();
    ops::RandomAttrs ra;
    ra.dtype = t;
    ra.seed = seed != 0 ? seed : int64_t(graph_seed & 0x7fffffffffffffffull) | 1;
    // An explicit seed replaces the graph's in both halves of the op's seed.
    ra.seed2 = DeriveSeed(seed != 0 ? uint64_t(seed) : graph_seed, n.name());
    bool floating = t == DataType::kFloat32 || t == DataType::kFloat64;
    // Fans as Keras computes them, of the logical table for a part of a
    // partitioned variable.
    std::vector<int64_t> fans(dims.begin(), dims.end());
    auto logical = a.find(kLogicalShapeAttr);
    if (logical != a.end() && logical->second.kind() == AttrKind::kIntList) {
      fans = logical->second.ints();
    }
    double fan_in = 1, fan_out = 1;
    if (fans.size() == 1) {
      fan_in = fan_out = double(fans[0]);
    } else if (fans.size() >= 2) {
      double receptive = 1;
      for (size_t i = 0; i + 2 < fans.size(); ++i) receptive *= double(fans[i]);
      fan_in = double(fans[fans.size() - 2]) * receptive;
      fan_out = double(fans[fans.size() - 1]) * receptive;
    }
    if (init == "zeros" || init == "ones" || init == "constant") {
      double v = init == "zeros" ? 0 : init == "ones" ? 1 : a.at("init_value").f();
      value = ops::Fill(vs, dims, ScalarOf(vs, t, v));
    } else if (!floating) {
      return fail("initializer '" + init + "' needs a float32 or float64 variable");
    } else if (init == "uniform") {
      value = ops::RandomUniform(vs, dims, ra, a.at("init_minval").f(), a.at("init_maxval").f());
    } else if (init == "normal") {
      value = ops::RandomNormal(vs, dims, ra, a.at("init_mean").f(), a.at("init_stddev").f());
    } else if (init == "truncated_normal") {
      value = ops::TruncatedNormal(vs, dims, ra, a.at("init_mean").f(), a.at("init_stddev").f());
    } else if (init == "glorot_uniform") {
      double limit = std::sqrt(6.0 / (fan_in + fan_out));
      value = ops::RandomUniform(vs, dims, ra, -limit, limit);
    } else if (init == "glorot_normal") {
      // Truncated at two standard deviations, so scaled as Keras does.
      value = ops::TruncatedNormal(vs, dims, ra, 0, std::sqrt(2.0 / (fan_in + fan_out)) / .87962566103423978);
    } else if (init == "he_normal") {
      value = ops::TruncatedNormal(vs, dims, ra, 0, std::sqrt(2.0 / fan_in) / .87962566103423978);
    } else if (init == "he_uniform") {
      double limit = std::sqrt(6.0 / fan_in);
      value = ops::RandomUniform(vs, dims, ra, -limit, limit);
    } else {
      std::string names;
      for (const auto& k : InitializerNames()) names += (names.empty() ? "" : ", ") + k;
      return fail("unknown initializer '" + init + "' (expected one of " + names + ")");
    }
    assigns.push_back(ops::Assign(vs.WithOpName("assign"), Output(n.name()), value).node);
    result.initialized.push_back(n.name());
  }
  result.init_op = ops::NoOp(is.WithOpName("all"), assigns);
  return result;
}

}  // namespace flowstate

// Variable initializers by attr (graph/initializers.h): values and
// statistics of each, fans of matrices and convolution filters, seeding, the
// JSON form of a job's graph, and the errors.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <map>

#include "api/json_codec.h"
#include "devices/device_pool.h"
#include "graph/initializers.h"
#include "graph/op_builders.h"
#include "graph/scope.h"
#include "scheduler/session.h"

namespace flowstate {
namespace {

DevicePool* Pool() {
  static DevicePool* p = DevicePool::Create(DevicePoolOptions{}).value().release();
  return p;
}

// A Variable node with an `init` attr (and extra attrs).
void AddVariable(Scope& root, const std::string& name, std::vector<int64_t> shape,
                 const std::string& init, AttrMap extra = {}, DataType dtype = DataType::kFloat32) {
  NodeDef n;
  n.name = name;
  n.op = "Variable";
  n.attrs = {{"dtype", AttrValue(dtype)}, {"shape", AttrValue(PartialShape(shape))},
             {"init", AttrValue(init)}};
  for (auto& [k, v] : extra) n.attrs[k] = v;
  root.mutable_graph_def()->nodes.push_back(n);
}

// Runs the initializers and returns every variable's value.
std::map<std::string, Tensor> Initialize(const Scope& root, uint64_t seed,
                                         const std::vector<std::string>& names) {
  StatusOr<InitializerResult> r = AddVariableInitializers(root, seed);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  if (!r.ok()) return {};
  SessionOptions o;
  o.devices = Pool();
  auto s = Session::Create(root.graph_def(), o);
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  std::vector<Tensor> out;
  EXPECT_TRUE((*s)->Run({}, {}, {r->init_op}, &out).ok());
  EXPECT_TRUE((*s)->Run({}, names, {}, &out).ok());
  std::map<std::string, Tensor> m;
  for (size_t i = 0; i < names.size(); ++i) m[names[i]] = out[i];
  return m;
}

struct Stats {
  double mean = 0, stddev = 0, min = 1e300, max = -1e300;
};
Stats Of(const Tensor& t) {
  Stats s;
  const float* p = t.data<float>();
  const int64_t n = t.num_elements();
  for (int64_t i = 0; i < n; ++i) {
    s.mean += p[i];
    s.min = std::min(s.min, double(p[i]));
    s.max = std::max(s.max, double(p[i]));
  }
  s.mean /= double(n);
  for (int64_t i = 0; i < n; ++i) s.stddev += (p[i] - s.mean) * (p[i] - s.mean);
  s.stddev = std::sqrt(s.stddev / double(n));
  return s;
}

TEST(Initializers, ConstantsAreExact) {
  Scope root;
  AddVariable(root, "z", {3, 2}, "zeros");
  AddVariable(root, "o", {4}, "ones");
  AddVariable(root, "c", {2, 2}, "constant", {{"init_value", AttrValue(0.25)}});
  AddVariable(root, "i", {3}, "constant", {{"init_value", AttrValue(7.0)}}, DataType::kInt32);
  auto v = Initialize(root, 1, {"z", "o", "c", "i"});
  for (float x : v["z"].flat<float>()) EXPECT_EQ(x, 0.0f);
  for (float x : v["o"].flat<float>()) EXPECT_EQ(x, 1.0f);
  for (float x : v["c"].flat<float>()) EXPECT_EQ(x, 0.25f);
  for (int32_t x : v["i"].flat<int32_t>()) EXPECT_EQ(x, 7);
}

TEST(Initializers, RandomDistributionsHaveTheirStatistics) {
  Scope root;
  AddVariable(root, "u", {200, 100}, "uniform",
              {{"init_minval", AttrValue(-0.5)}, {"init_maxval", AttrValue(1.5)}});
  AddVariable(root, "n", {200, 100}, "normal",
              {{"init_mean", AttrValue(0.3)}, {"init_stddev", AttrValue(2.0)}});
  AddVariable(root, "t", {200, 100}, "truncated_normal",
              {{"init_mean", AttrValue(-1.0)}, {"init_stddev", AttrValue(0.5)}});
  auto v = Initialize(root, 7, {"u", "n", "t"});
  Stats u = Of(v["u"]), n = Of(v["n"]), t = Of(v["t"]);
  EXPECT_GE(u.min, -0.5);
  EXPECT_LT(u.max, 1.5);
  EXPECT_NEAR(u.mean, 0.5, 0.02);
  EXPECT_NEAR(u.stddev, 2.0 / std::sqrt(12.0), 0.01);
  EXPECT_NEAR(n.mean, 0.3, 0.05);
  EXPECT_NEAR(n.stddev, 2.0, 0.04);
  EXPECT_GE(t.min, -1.0 - 2 * 0.5);  // cut at two standard deviations
  EXPECT_LE(t.max, -1.0 + 2 * 0.5);
  EXPECT_NEAR(t.mean, -1.0, 0.01);
  EXPECT_NEAR(t.stddev, 0.5 * 0.8796, 0.01);
}

TEST(Initializers, FanBasedScalesOfMatricesAndFilters) {
  Scope root;
  AddVariable(root, "gu", {256, 128}, "glorot_uniform");
  AddVariable(root, "gn", {256, 128}, "glorot_normal");
  AddVariable(root, "hn", {5, 5, 32, 64}, "he_normal");  // fan_in = 5 * 5 * 32
  AddVariable(root, "hu", {3, 3, 16, 8}, "he_uniform");  // fan_in = 144
  auto v = Initialize(root, 3, {"gu", "gn", "hn", "hu"});
  const double glorot_limit = std::sqrt(6.0 / (256 + 128));
  Stats gu = Of(v["gu"]), gn = Of(v["gn"]), hn = Of(v["hn"]), hu = Of(v["hu"]);
  EXPECT_GE(gu.min, -glorot_limit);
  EXPECT_LE(gu.max, glorot_limit);
  EXPECT_GT(gu.max, 0.98 * glorot_limit);
  EXPECT_NEAR(gu.stddev, glorot_limit / std::sqrt(3.0), 0.01 * glorot_limit);
  EXPECT_NEAR(gn.stddev, std::sqrt(2.0 / (256 + 128)), 0.03 * std::sqrt(2.0 / 384));
  EXPECT_NEAR(hn.stddev, std::sqrt(2.0 / 800), 0.03 * std::sqrt(2.0 / 800));
  EXPECT_LE(hn.max, 2 * std::sqrt(2.0 / 800) / 0.8796 + 1e-6);
  const double he_limit = std::sqrt(6.0 / 144);
  EXPECT_LE(hu.max, he_limit);
  EXPECT_GE(hu.min, -he_limit);
  EXPECT_NEAR(hu.mean, 0, 0.05 * he_limit);
}

bool SameBits(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() &&
         std::memcmp(a.data<float>(), b.data<float>(), size_t(a.num_elements()) * 4) == 0;
}

TEST(Initializers, SeededByGraphSeedAndName) {
  auto build = [](uint64_t seed, int64_t b_seed) {
    Scope root;
    AddVariable(root, "a", {8, 8}, "glorot_uniform");
    AddVariable(root, "b", {8, 8}, "glorot_uniform",
                b_seed ? AttrMap{{"seed", AttrValue(b_seed)}} : AttrMap{});
    return Initialize(root, seed, {"a", "b"});
  };
  auto first = build(42, 0), again = build(42, 0), other = build(43, 0);
  EXPECT_TRUE(SameBits(first["a"], again["a"]));
  EXPECT_TRUE(SameBits(first["b"], again["b"]));
  EXPECT_FALSE(SameBits(first["a"], first["b"]));  // the name enters the seed
  EXPECT_FALSE(SameBits(first["a"], other["a"]));
  // An explicit seed on the variable replaces the graph's.
  auto explicit1 = build(42, 99), explicit2 = build(43, 99);
  EXPECT_FALSE(SameBits(explicit1["b"], first["b"]));
  EXPECT_TRUE(SameBits(explicit1["a"], first["a"]));
  // ... whatever the graph's seed: b is the same under seeds 42 and 43, a is not.
  EXPECT_TRUE(SameBits(explicit1["b"], explicit2["b"]));
  EXPECT_FALSE(SameBits(explicit1["a"], explicit2["a"]));
  // The derived seed depends on the graph seed and on the name.
  EXPECT_NE(DeriveSeed(42, "b"), DeriveSeed(43, "b"));
  EXPECT_NE(DeriveSeed(42, "a"), DeriveSeed(42, "b"));
}

TEST(Initializers, ByAttrInTheGraphsJsonForm) {
  auto g = api::ParseGraphJson(R"({"nodes": [
      {"name": "w", "op": "Variable",
       "attrs": {"dtype": "float32", "shape": [784, 10], "init": "glorot_uniform"}},
      {"name": "b", "op": "Variable",
       "attrs": {"dtype": "float32", "shape": [10], "init": "constant", "init_value": 0.5}},
      {"name": "k", "op": "Variable", "attrs": {"dtype": "float32", "shape": [2]}}]})");
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  Scope root;
  *root.mutable_graph_def() = *g;
  StatusOr<InitializerResult> r = AddVariableInitializers(root, 1);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->initialized, (std::vector<std::string>{"w", "b"}));
  EXPECT_EQ(r->without_init, std::vector<std::string>{"k"});
  auto v = Initialize(root, 1, {"w", "b"});
  for (float x : v["b"].flat<float>()) EXPECT_EQ(x, 0.5f);
  EXPECT_LE(Of(v["w"]).max, std::sqrt(6.0 / 794));
}

TEST(Initializers, ErrorsNameTheVariable) {
  {
    Scope root;
    AddVariable(root, "layer/w", {2, 2}, "glorot_uniformm");
    StatusOr<InitializerResult> r = AddVariableInitializers(root, 1);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), Code::kInvalidArgument);
    EXPECT_NE(r.status().message().find("layer/w"), std::string::npos) << r.status().ToString();
    EXPECT_NE(r.status().message().find("glorot_uniformm"), std::string::npos);
    EXPECT_NE(r.status().message().find("he_normal"), std::string::npos);  // lists the names
  }
  {
    Scope root;
    AddVariable(root, "steps", {3}, "normal", {}, DataType::kInt32);
    StatusOr<InitializerResult> r = AddVariableInitializers(root, 1);
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.status().message().find("steps"), std::string::npos) << r.status().ToString();
  }
  {
    Scope root;
    AddVariable(root, "open", {-1, 3}, "zeros");
    StatusOr<InitializerResult> r = AddVariableInitializers(root, 1);
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.status().message().find("fully defined"), std::string::npos)
        << r.status().ToString();
  }
}

}  // namespace
}  // namespace flowstate

// Kernel states (OpKernel::SaveState/RestoreState) exported from and
// imported into sessions: the random streams of a session continue in
// another one exactly where they stopped.
#include <gtest/gtest.h>

#include "graph/op_builders.h"
#include "graph/scope.h"
#include "scheduler/session.h"

namespace flowstate {
namespace {

DevicePool* Pool() {
  static DevicePool* pool = [] {
    DevicePoolOptions o;
    o.num_cpu_devices = 1;
    o.intra_op_threads = 1;
    return DevicePool::Create(o).value().release();
  }();
  return pool;
}

std::unique_ptr<Session> NewSession(const GraphDef& g) {
  SessionOptions o;
  o.devices = Pool();
  o.inter_op_threads = 1;
  return Session::Create(g, o).value();
}

GraphDef RandomGraph(int64_t seed) {
  Scope root;
  ops::RandomAttrs a;
  a.seed = seed;
  a.seed2 = seed ? 11 : 0;
  Output r = ops::RandomUniform(root.WithOpName("r"), {3, 5}, a);
  ops::Identity(root.WithOpName("id"), r);
  ops::Const(root.WithOpName("c"), 1.0f);
  return root.graph_def();
}

Tensor Draw(Session* s) {
  std::vector<Tensor> out;
  Status st = s->Run({}, {"id"}, {}, &out);
  st.CheckOk();
  return out[0];
}

void ExpectContinues(int64_t seed) {
  GraphDef g = RandomGraph(seed);
  auto a = NewSession(g);
  for (int i = 0; i < 3; ++i) Draw(a.get());
  StatusOr<std::map<std::string, std::string>> states = a->ExportKernelStates();
  ASSERT_TRUE(states.ok()) << states.status().ToString();
  ASSERT_EQ(states->size(), 1u);
  ASSERT_TRUE(states->count("r"));
  Tensor a4 = Draw(a.get()), a5 = Draw(a.get());

  auto b = NewSession(g);
  ASSERT_TRUE(b->ImportKernelStates(*states).ok());
  // Before its kernel is built the imported state is what the session exports.
  EXPECT_EQ(b->ExportKernelStates().value(), *states);
  Tensor b4 = Draw(b.get()), b5 = Draw(b.get());
  EXPECT_TRUE(TensorsEqual(a4, b4));
  EXPECT_TRUE(TensorsEqual(a5, b5));
  EXPECT_FALSE(TensorsEqual(a4, a5));

  // Without the import, a fresh session starts the stream over (seeded) or
  // draws another one (unseeded): either way not where `a` stopped.
  auto c = NewSession(g);
  EXPECT_FALSE(TensorsEqual(Draw(c.get()), a4));
}

TEST(KernelState, SeededStreamContinuesInAnotherSession) { ExpectContinues(42); }

TEST(KernelState, UnseededStreamContinuesToo) { ExpectContinues(0); }

TEST(KernelState, ImportIntoABuiltKernelRewindsIt) {
  auto s = NewSession(RandomGraph(7));
  Draw(s.get());
  auto saved = s->ExportKernelStates().value();
  Tensor second = Draw(s.get());
  Draw(s.get());
  ASSERT_TRUE(s->ImportKernelStates(saved).ok());
  EXPECT_TRUE(TensorsEqual(Draw(s.get()), second));
}

TEST(KernelState, StatelessKernelsExportNothing) {
  auto s = NewSession(RandomGraph(7));
  std::vector<Tensor> out;
  ASSERT_TRUE(s->Run({}, {"c"}, {}, &out).ok());
  EXPECT_TRUE(s->ExportKernelStates().value().empty());
}

TEST(KernelState, BadImportsNameTheNode) {
  auto s = NewSession(RandomGraph(7));
  Status st = s->ImportKernelStates({{"nope", "x"}});
  EXPECT_EQ(st.code(), Code::kInvalidArgument);
  EXPECT_NE(st.message().find("'nope'"), std::string::npos) << st.ToString();
  st = s->ImportKernelStates({{"c", "x"}});
  EXPECT_EQ(st.code(), Code::kInvalidArgument);
  EXPECT_NE(st.message().find("'c'"), std::string::npos) << st.ToString();

  // A built kernel refuses bytes it does not understand.
  Draw(s.get());
  st = s->ImportKernelStates({{"r", "philox4x32 1 2"}});
  EXPECT_EQ(st.code(), Code::kInvalidArgument);
  EXPECT_NE(st.message().find("'r'"), std::string::npos) << st.ToString();

  // A kernel built later refuses it when it is built: the step fails.
  auto fresh = NewSession(RandomGraph(7));
  ASSERT_TRUE(fresh->ImportKernelStates({{"r", "garbage"}}).ok());
  std::vector<Tensor> out;
  st = fresh->Run({}, {"id"}, {}, &out);
  EXPECT_EQ(st.code(), Code::kInvalidArgument);
  EXPECT_NE(st.message().find("'r'"), std::string::npos) << st.ToString();
}

}  // namespace
}  // namespace flowstate

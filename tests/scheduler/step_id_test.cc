#include "scheduler/step_id.h"

#include <gtest/gtest.h>

#include <set>
#include <thread>

#include "graph/op_builders.h"
#include "graph/scope.h"
#include "scheduler/session.h"

namespace flowstate {
namespace {

TEST(LocalStepIdSource, UniqueAcrossThreads) {
  LocalStepIdSource ids;
  constexpr int kThreads = 4, kEach = 10000;
  std::vector<std::vector<int64_t>> got(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kEach; ++i) got[t].push_back(ids.Next());
    });
  }
  for (auto& t : threads) t.join();
  std::set<int64_t> all;
  for (const auto& v : got) all.insert(v.begin(), v.end());
  EXPECT_EQ(all.size(), size_t(kThreads * kEach));
  EXPECT_EQ(*all.begin(), 1);
  EXPECT_EQ(*all.rbegin(), kThreads * kEach);
}

std::unique_ptr<Session> NewSession(DevicePool* pool, StepIdSource* ids) {
  Scope root;
  ops::Const(root.WithOpName("c"), 1.0f);
  SessionOptions o;
  o.devices = pool;
  o.inter_op_threads = 1;
  o.step_ids = ids;
  return Session::Create(root.graph_def(), o).value();
}

int64_t RunStep(Session* s) {
  std::vector<Tensor> out;
  RunStats stats;
  s->Run({}, {"c"}, {}, &out, &stats).CheckOk();
  return stats.step_id;
}

TEST(StepIdSource, SessionsSharingOneSourceNeverReuseAnId) {
  DevicePoolOptions po;
  po.intra_op_threads = 1;
  auto pool = DevicePool::Create(po).value();
  // A master's source, counting from 100.
  LocalStepIdSource master(100);
  auto a = NewSession(pool.get(), &master);
  auto b = NewSession(pool.get(), &master);
  EXPECT_EQ(RunStep(a.get()), 100);
  EXPECT_EQ(RunStep(b.get()), 101);
  EXPECT_EQ(RunStep(a.get()), 102);
  EXPECT_EQ(master.Next(), 103);
  // Without one, each session counts from 1.
  auto own = NewSession(pool.get(), nullptr);
  EXPECT_EQ(RunStep(own.get()), 1);
  EXPECT_EQ(RunStep(own.get()), 2);
}

}  // namespace
}  // namespace flowstate

#include "scheduler/collective.h"
#include "scheduler/local_step_race.h"
#include "scheduler/replica_comm.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <functional>
#include <future>
#include <random>
#include <thread>

namespace flowstate {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

using Group = std::vector<std::unique_ptr<InProcessCollective>>;

// Runs fn(rank) on one thread per rank and returns each rank's status. Every
// wait is bounded: a rank still running after `limit` fails the test, and
// the group is aborted so that its thread ends.
std::vector<Status> RunRanks(Group& group, const std::function<Status(int)>& fn,
                             std::chrono::seconds limit = 30s) {
  const int n = int(group.size());
  std::vector<std::promise<Status>> promises(n);
  std::vector<std::future<Status>> futures;
  for (auto& p : promises) futures.push_back(p.get_future());
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] { promises[r].set_value(fn(r)); });
  }
  const auto until = Clock::now() + limit;
  bool hung = false;
  for (auto& f : futures) hung |= f.wait_until(until) != std::future_status::ready;
  if (hung) {
    ADD_FAILURE() << "a rank did not finish in time";
    group[0]->Abort(Internal("the test gave up"));
  }
  for (auto& t : threads) t.join();
  std::vector<Status> out;
  for (auto& f : futures) out.push_back(f.get());
  return out;
}

Collective::Deadline In(std::chrono::milliseconds d) { return Clock::now() + d; }

template <typename T>
void SumAndMean() {
  constexpr int kRanks = 4;
  Group group = InProcessCollective::Create(kRanks);
  std::vector<std::vector<Tensor>> data(kRanks);
  for (int r = 0; r < kRanks; ++r) {
    // Tensor 0: [r+1, 10(r+1), 100(r+1)]; tensor 1: a scalar 2r.
    data[r] = {Tensor::FromVector<T>({T(r + 1), T(10 * (r + 1)), T(100 * (r + 1))}),
               Tensor::Scalar<T>(T(2 * r))};
  }
  auto sums = RunRanks(group, [&](int r) {
    return group[r]->AllReduce(&data[r], ReduceOp::kSum, In(10s));
  });
  for (int r = 0; r < kRanks; ++r) {
    ASSERT_TRUE(sums[r].ok()) << sums[r].ToString();
    EXPECT_TRUE(TensorsEqual(data[r][0], Tensor::FromVector<T>({T(10), T(100), T(1000)})))
        << data[r][0].DebugString();
    EXPECT_EQ(data[r][1].scalar<T>(), T(12));
  }
  auto means = RunRanks(group, [&](int r) {
    return group[r]->AllReduce(&data[r], ReduceOp::kMean, In(10s));
  });
  for (int r = 0; r < kRanks; ++r) {
    ASSERT_TRUE(means[r].ok()) << means[r].ToString();
    // Every rank held the sums: their mean is the sums.
    EXPECT_TRUE(TensorsEqual(data[r][0], Tensor::FromVector<T>({T(10), T(100), T(1000)})));
    EXPECT_EQ(data[r][1].scalar<T>(), T(12));
  }
}

TEST(InProcessCollective, SumAndMeanFloat32) { SumAndMean<float>(); }
TEST(InProcessCollective, SumAndMeanFloat64) { SumAndMean<double>(); }
TEST(InProcessCollective, SumAndMeanInt32) { SumAndMean<int32_t>(); }
TEST(InProcessCollective, SumAndMeanInt64) { SumAndMean<int64_t>(); }

TEST(InProcessCollective, MeanDividesByTheNumberOfRanks) {
  Group group = InProcessCollective::Create(4);
  std::vector<std::vector<Tensor>> f(4), i(4);
  for (int r = 0; r < 4; ++r) {
    f[r] = {Tensor::Scalar<float>(float(r))};  // 0+1+2+3 = 6
    i[r] = {Tensor::Scalar<int32_t>(r)};
  }
  auto s = RunRanks(group, [&](int r) {
    Status a = group[r]->AllReduce(&f[r], ReduceOp::kMean, In(10s));
    if (!a.ok()) return a;
    return group[r]->AllReduce(&i[r], ReduceOp::kMean, In(10s));
  });
  for (int r = 0; r < 4; ++r) {
    ASSERT_TRUE(s[r].ok()) << s[r].ToString();
    EXPECT_EQ(f[r][0].scalar<float>(), 1.5f);
    EXPECT_EQ(i[r][0].scalar<int32_t>(), 1);  // 6 / 4, truncated
  }
}

TEST(InProcessCollective, ResultIsInRankOrderWhateverTheArrivalOrder) {
  constexpr int kRanks = 4, kElems = 4099;
  // Values whose float32 sum depends on the order of the additions.
  std::vector<std::vector<float>> values(kRanks, std::vector<float>(kElems));
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> mag(-8, 8);
  for (auto& v : values) {
    for (float& x : v) x = std::ldexp(mag(rng), int(rng() % 40) - 20);
  }
  values[0][0] = 1e8f, values[1][0] = 1.0f, values[2][0] = -1e8f, values[3][0] = 1.0f;
  std::vector<float> want(kElems);
  for (int j = 0; j < kElems; ++j) {
    float acc = values[0][j];
    for (int r = 1; r < kRanks; ++r) acc += values[r][j];
    want[j] = acc;
  }
  EXPECT_EQ(want[0], 1.0f);  // ((1e8 + 1) - 1e8) + 1 in float32

  std::vector<std::vector<int>> orders = {{0, 1, 2, 3}, {3, 2, 1, 0}, {2, 0, 3, 1}, {1, 3, 0, 2}};
  Group group = InProcessCollective::Create(kRanks);
  for (const auto& order : orders) {
    std::vector<std::vector<Tensor>> data(kRanks);
    for (int r = 0; r < kRanks; ++r) data[r] = {Tensor::FromVector<float>(values[r])};
    auto s = RunRanks(group, [&](int r) {
      // Arrive in `order`, 20 ms apart.
      int pos = int(std::find(order.begin(), order.end(), r) - order.begin());
      std::this_thread::sleep_for(pos * 20ms);
      return group[r]->AllReduce(&data[r], ReduceOp::kSum, In(10s));
    });
    for (int r = 0; r < kRanks; ++r) {
      ASSERT_TRUE(s[r].ok()) << s[r].ToString();
      ASSERT_EQ(std::memcmp(data[r][0].data<float>(), want.data(), kElems * sizeof(float)), 0)
          << "rank " << r << ", order starting with " << order[0];
    }
  }
}

TEST(InProcessCollective, MismatchesAreInvalidArgumentNamingTheRank) {
  struct Case {
    const char* what;
    std::function<std::vector<Tensor>(int)> tensors;
    std::string expect;
  };
  std::vector<Case> cases = {
      {"count",
       [](int r) {
         std::vector<Tensor> v = {Tensor::Scalar<float>(1)};
         if (r == 2) v.push_back(Tensor::Scalar<float>(1));
         return v;
       },
       "rank 2 passed 2 tensors, rank 0 passed 1"},
      {"dtype",
       [](int r) {
         return std::vector<Tensor>{r == 1 ? Tensor::Scalar<double>(1) : Tensor::Scalar<float>(1)};
       },
       "rank 1: tensor 0 is float64[], rank 0's is float32[]"},
      {"shape",
       [](int r) {
         return std::vector<Tensor>{r == 2 ? Tensor::FromVector<float>({1, 2})
                                           : Tensor::FromVector<float>({1, 2, 3})};
       },
       "rank 2: tensor 0 is float32[2], rank 0's is float32[3]"},
      {"dtype not reducible",
       [](int) { return std::vector<Tensor>{Tensor::Scalar<bool>(true)}; },
       "tensor 0 of rank 0 is bool[]"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    Group group = InProcessCollective::Create(3);
    std::vector<std::vector<Tensor>> data(3);
    for (int r = 0; r < 3; ++r) data[r] = c.tensors(r);
    auto s = RunRanks(group, [&](int r) {
      return group[r]->AllReduce(&data[r], ReduceOp::kSum, In(10s));
    });
    for (int r = 0; r < 3; ++r) {
      EXPECT_EQ(s[r].code(), Code::kInvalidArgument) << s[r].ToString();
      EXPECT_NE(s[r].message().find(c.expect), std::string::npos) << s[r].ToString();
      EXPECT_TRUE(TensorsEqual(data[r][0], c.tensors(r)[0]));  // unchanged
    }
  }
}

TEST(InProcessCollective, AMissingRankIsDeadlineExceededForEveryone) {
  Group group = InProcessCollective::Create(3);
  std::vector<std::vector<Tensor>> data(3);
  for (int r = 0; r < 3; ++r) data[r] = {Tensor::Scalar<float>(float(r))};
  const auto start = Clock::now();
  auto s = RunRanks(group, [&](int r) {
    if (r == 2) return Status();  // never arrives
    return group[r]->AllReduce(&data[r], ReduceOp::kSum, In(200ms));
  });
  const auto took = Clock::now() - start;
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(s[r].code(), Code::kDeadlineExceeded) << s[r].ToString();
    EXPECT_NE(s[r].message().find("rank(s) 2 did not join"), std::string::npos) << s[r].ToString();
    EXPECT_EQ(data[r][0].scalar<float>(), float(r));
  }
  EXPECT_GE(took, 200ms);
  EXPECT_LT(took, 10s);
  // The late rank joins the failed round and hears of it at once...
  const auto late = Clock::now();
  Status l = group[2]->AllReduce(&data[2], ReduceOp::kSum, In(10s));
  EXPECT_EQ(l.code(), Code::kDeadlineExceeded) << l.ToString();
  EXPECT_LT(Clock::now() - late, 5s);
  // ... and the next round works for everyone.
  auto next = RunRanks(group, [&](int r) {
    return group[r]->AllReduce(&data[r], ReduceOp::kSum, In(10s));
  });
  for (int r = 0; r < 3; ++r) {
    ASSERT_TRUE(next[r].ok()) << next[r].ToString();
    EXPECT_EQ(data[r][0].scalar<float>(), 3.0f);
  }
}

TEST(InProcessCollective, AbortFailsPendingAndLaterCallsAtOnce) {
  Group group = InProcessCollective::Create(3);
  std::vector<std::vector<Tensor>> data(3);
  for (int r = 0; r < 3; ++r) data[r] = {Tensor::Scalar<float>(1)};
  const auto start = Clock::now();
  auto s = RunRanks(group, [&](int r) {
    if (r == 2) {  // instead of joining, aborts the group
      std::this_thread::sleep_for(100ms);
      group[2]->Abort(Unavailable("replica 2 lost its device"));
      return Status();
    }
    return group[r]->AllReduce(&data[r], ReduceOp::kSum, In(60s));
  });
  EXPECT_LT(Clock::now() - start, 30s);  // long before the deadline
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(s[r].code(), Code::kUnavailable) << s[r].ToString();
    EXPECT_EQ(s[r].message(), "replica 2 lost its device");
    EXPECT_EQ(data[r][0].scalar<float>(), 1.0f);
  }
  for (int r = 0; r < 3; ++r) {
    Status later = group[r]->AllReduce(&data[r], ReduceOp::kSum, In(60s));
    EXPECT_EQ(later.code(), Code::kUnavailable) << later.ToString();
  }
}

TEST(InProcessCollective, ConsecutiveRounds) {
  constexpr int kRanks = 3, kRounds = 100;
  Group group = InProcessCollective::Create(kRanks);
  auto s = RunRanks(group, [&](int r) {
    for (int k = 0; k < kRounds; ++k) {
      std::vector<Tensor> v = {Tensor::FromVector<int64_t>({k, int64_t(r)})};
      FS_RETURN_IF_ERROR(group[r]->AllReduce(&v, ReduceOp::kSum, In(10s)));
      if (v[0].flat<int64_t>()[0] != kRanks * k || v[0].flat<int64_t>()[1] != 0 + 1 + 2) {
        return Internal("round " + std::to_string(k) + " of rank " + std::to_string(r) +
                        " got " + v[0].DebugString());
      }
    }
    return Status();
  });
  for (const Status& st : s) EXPECT_TRUE(st.ok()) << st.ToString();
}

TEST(InProcessCollective, ASharedBufferIsReplacedNotOverwritten) {
  Group group = InProcessCollective::Create(2);
  Tensor kept = Tensor::FromVector<float>({1, 2});
  std::vector<std::vector<Tensor>> data = {{kept}, {Tensor::FromVector<float>({10, 20})}};
  const void* own = data[1][0].raw_data();
  auto s = RunRanks(group, [&](int r) {
    return group[r]->AllReduce(&data[r], ReduceOp::kSum, In(10s));
  });
  ASSERT_TRUE(s[0].ok() && s[1].ok());
  EXPECT_TRUE(TensorsEqual(kept, Tensor::FromVector<float>({1, 2})));  // untouched
  EXPECT_TRUE(TensorsEqual(data[0][0], Tensor::FromVector<float>({11, 22})));
  EXPECT_TRUE(TensorsEqual(data[1][0], Tensor::FromVector<float>({11, 22})));
  EXPECT_EQ(data[1][0].raw_data(), own);  // unshared: written in place
}

TEST(InProcessCollective, OneRankIsTheIdentity) {
  Group group = InProcessCollective::Create(1);
  std::vector<Tensor> v = {Tensor::FromVector<double>({1.5, -2})};
  ASSERT_TRUE(group[0]->AllReduce(&v, ReduceOp::kMean, In(1s)).ok());
  EXPECT_TRUE(TensorsEqual(v[0], Tensor::FromVector<double>({1.5, -2})));
  EXPECT_EQ(group[0]->rank(), 0);
  EXPECT_EQ(group[0]->size(), 1);
}

// The one encoding of a replica's group in a graph: what ToNode writes,
// FromNode reads back; a node without an attribute is refused naming it.
// AllGather: every rank's rows in rank order, bit for bit, whatever each
// rank has (none included); ranks whose rows differ in more than the first
// dimension are refused.
TEST(InProcessCollective, AllGatherConcatenatesTheRanksRowsInRankOrder) {
  constexpr int kRanks = 3;
  Group group = InProcessCollective::Create(kRanks);
  const std::vector<int64_t> rows = {2, 0, 3};
  std::vector<std::vector<Tensor>> data(kRanks);
  for (int r = 0; r < kRanks; ++r) {
    std::vector<int64_t> ids;
    std::vector<float> values;
    for (int64_t i = 0; i < rows[r]; ++i) {
      ids.push_back(100 * r + i);
      values.push_back(float(r));
      values.push_back(float(r) + 0.1f * float(i));
    }
    data[r] = {Tensor::FromVector<int64_t>(ids, TensorShape({rows[r]})),
               Tensor::FromVector<float>(values, TensorShape({rows[r], 2}))};
  }
  auto st = RunRanks(group, [&](int r) { return group[r]->AllGather(&data[r], In(10s)); });
  const Tensor want_ids = Tensor::FromVector<int64_t>({0, 1, 200, 201, 202}, TensorShape({5}));
  for (int r = 0; r < kRanks; ++r) {
    ASSERT_TRUE(st[r].ok()) << st[r].ToString();
    EXPECT_TRUE(TensorsEqual(data[r][0], want_ids)) << data[r][0].DebugString();
    ASSERT_EQ(data[r][1].shape(), TensorShape({5, 2}));
    const float* v = data[r][1].data<float>();
    EXPECT_EQ(v[2], 0.0f);
    EXPECT_EQ(v[3], 0.1f);
    EXPECT_EQ(v[4], 2.0f);
    EXPECT_EQ(v[9], 2.0f + 0.1f * 2.0f);
  }
  // Values of another width on rank 1: every rank fails, naming it.
  for (int r = 0; r < kRanks; ++r) {
    data[r] = {Tensor::FromVector<float>({1, 2}, r == 1 ? TensorShape({1, 2}) : TensorShape({2, 1}))};
  }
  st = RunRanks(group, [&](int r) { return group[r]->AllGather(&data[r], In(10s)); });
  for (int r = 0; r < kRanks; ++r) {
    EXPECT_EQ(st[r].code(), Code::kInvalidArgument) << st[r].ToString();
  }
  // A scalar has no rows.
  std::vector<Tensor> scalar = {Tensor::Scalar<float>(1)};
  EXPECT_EQ(group[0]->AllGather(&scalar, In(1s)).code(), Code::kInvalidArgument);
}

TEST(ReplicaGroupSpec, RoundTripsThroughTheNodeAndNamesAMissingAttribute) {
  ReplicaGroupSpec s;
  s.group.kind = "gloo";
  s.group.store_address = "10.0.0.1:50051";
  s.group.prefix = "job-7/m2";
  s.group.rank = 2;
  s.group.size = 3;
  s.group.timeout = std::chrono::milliseconds(1234);
  s.group.host = "10.0.0.3";
  s.comm = "replicas";
  s.num_buckets = 4;
  s.allreduce_timeout = std::chrono::milliseconds(5678);
  s.contributors = 2;
  NodeDef n = s.ToNode("_replica_comm_2", "/job:worker/task:2/device:CPU:0");
  EXPECT_EQ(n.op, "_CreateReplicaComm");
  EXPECT_EQ(n.device, "/job:worker/task:2/device:CPU:0");
  StatusOr<ReplicaGroupSpec> back = ReplicaGroupSpec::FromNode(n);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->group.kind, "gloo");
  EXPECT_EQ(back->group.store_address, "10.0.0.1:50051");
  EXPECT_EQ(back->group.prefix, "job-7/m2");
  EXPECT_EQ(back->group.rank, 2);
  EXPECT_EQ(back->group.size, 3);
  EXPECT_EQ(back->group.timeout.count(), 1234);
  EXPECT_EQ(back->group.host, "10.0.0.3");
  EXPECT_EQ(back->comm, "replicas");
  EXPECT_EQ(back->num_buckets, 4);
  EXPECT_EQ(back->allreduce_timeout.count(), 5678);
  EXPECT_EQ(back->contributors, 2);
  n.attrs.erase("prefix");
  back = ReplicaGroupSpec::FromNode(n);
  ASSERT_FALSE(back.ok());
  EXPECT_EQ(back.status().code(), Code::kInvalidArgument);
  EXPECT_NE(back.status().message().find("'prefix'"), std::string::npos) << back.status().ToString();
  EXPECT_NE(back.status().message().find("_replica_comm_2"), std::string::npos);
  n.attrs["prefix"] = AttrValue(int64_t(3));  // of another kind
  EXPECT_FALSE(ReplicaGroupSpec::FromNode(n).ok());
}

// The race of replicas in one process: the first arrivals with examples
// take the places and every replica gets the same members; a late one is
// dropped and counted; when fewer have examples than places, the last
// arrival decides with those; nobody waits past the deadline.
TEST(LocalStepRace, FirstArrivalsTakeThePlacesAndEveryoneLearnsThem) {
  LocalStepRace race(3, 2);
  auto in = [](int ms) { return std::chrono::steady_clock::now() + std::chrono::milliseconds(ms); };
  // Step 0: rank 2 first (it waits for a second), then rank 0; rank 1 late.
  auto first = std::async(std::launch::async, [&] { return race.Decide(0, 2, true, in(5000)); });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(first.wait_for(std::chrono::milliseconds(0)), std::future_status::timeout);
  StatusOr<bool> decided = race.Decided(0);
  ASSERT_TRUE(decided.ok());
  EXPECT_FALSE(*decided);
  StatusOr<StepRace::Decision> d0 = race.Decide(0, 0, true, in(5000));
  ASSERT_TRUE(d0.ok()) << d0.status().ToString();
  EXPECT_TRUE(d0->contributes);
  EXPECT_EQ(d0->members, (std::vector<int>{0, 2}));
  StatusOr<StepRace::Decision> d2 = first.get();
  ASSERT_TRUE(d2.ok());
  EXPECT_TRUE(d2->contributes);
  EXPECT_EQ(d2->members, (std::vector<int>{0, 2}));
  EXPECT_TRUE(*race.Decided(0));
  StatusOr<StepRace::Decision> d1 = race.Decide(0, 1, true, in(5000));
  ASSERT_TRUE(d1.ok());
  EXPECT_FALSE(d1->contributes);
  EXPECT_EQ(d1->members, (std::vector<int>{0, 2}));
  EXPECT_EQ(*race.Dropped(), (std::vector<int64_t>{0, 1, 0}));
  ASSERT_TRUE(race.End(0).ok());
  // Step 1, an epoch's last: only rank 1 has examples; the last arrival
  // decides, with rank 1 alone, and nobody is dropped.
  auto a = std::async(std::launch::async, [&] { return race.Decide(1, 1, true, in(5000)); });
  auto b = std::async(std::launch::async, [&] { return race.Decide(1, 0, false, in(5000)); });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(a.wait_for(std::chrono::milliseconds(0)), std::future_status::timeout);
  StatusOr<StepRace::Decision> c = race.Decide(1, 2, false, in(5000));
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->members, (std::vector<int>{1}));
  EXPECT_TRUE(a.get()->contributes);
  EXPECT_FALSE(b.get()->contributes);
  EXPECT_EQ(*race.Dropped(), (std::vector<int64_t>{0, 1, 0}));
  // Step 2: alone, rank 0 waits for a decision that never comes, until its deadline.
  StatusOr<StepRace::Decision> alone = race.Decide(2, 0, true, in(50));
  ASSERT_FALSE(alone.ok());
  EXPECT_EQ(alone.status().code(), Code::kDeadlineExceeded) << alone.status().ToString();
}

}  // namespace
}  // namespace flowstate

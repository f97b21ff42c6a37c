// GlooCollective with its ranks as threads of this process, over Gloo's TCP
// transport on loopback and a real CollectiveStoreService: the results
// against InProcessCollective (every dtype, sum and mean, sizes 0, 1, odd and
// large, many rounds), determinism, mismatches, deadlines, Abort, Rebuild.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <functional>
#include <future>
#include <random>
#include <thread>

#include "distributed/collective_store.h"
#include "distributed/gloo_collective.h"
#include "scheduler/collective.h"

namespace flowstate {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;
using Group = std::vector<std::unique_ptr<GlooCollective>>;

class GlooCollectiveTest : public ::testing::Test {
 protected:
  void SetUp() override {
    StatusOr<int> port = store_.Start("127.0.0.1", 0);
    ASSERT_TRUE(port.ok()) << port.status().ToString();
    address_ = "127.0.0.1:" + std::to_string(*port);
  }

  GlooCollectiveOptions Options(const std::string& prefix, int rank, int size) {
    GlooCollectiveOptions o;
    o.store_address = address_;
    o.prefix = prefix;
    o.rank = rank;
    o.size = size;
    o.timeout = milliseconds(10000);
    return o;
  }

  // The ranks `ranks` of a group of `size` under `prefix`, created at once.
  std::vector<StatusOr<std::unique_ptr<GlooCollective>>> CreateRanks(const std::string& prefix,
                                                                     int size, std::vector<int> ranks,
                                                                     int timeout_ms = 10000) {
    std::vector<std::future<StatusOr<std::unique_ptr<GlooCollective>>>> f;
    for (int r : ranks) {
      GlooCollectiveOptions o = Options(prefix, r, size);
      o.timeout = milliseconds(timeout_ms);
      f.push_back(std::async(std::launch::async, [o] { return GlooCollective::Create(o); }));
    }
    std::vector<StatusOr<std::unique_ptr<GlooCollective>>> out;
    for (auto& x : f) {
      EXPECT_EQ(x.wait_for(std::chrono::seconds(30)), std::future_status::ready);
      out.push_back(x.get());
    }
    return out;
  }

  Group MakeGroup(const std::string& prefix, int size) {
    std::vector<int> ranks;
    for (int r = 0; r < size; ++r) ranks.push_back(r);
    Group g;
    for (auto& c : CreateRanks(prefix, size, ranks)) {
      EXPECT_TRUE(c.ok()) << c.status().ToString();
      if (c.ok()) g.push_back(*std::move(c));
    }
    return g;
  }

  CollectiveStoreService store_;
  std::string address_;
};

// Runs fn(rank) on one thread per rank; returns the statuses (bounded: a
// rank that does not return within 60 s fails the test).
std::vector<Status> OnEveryRank(int size, const std::function<Status(int)>& fn) {
  std::vector<std::future<Status>> f;
  for (int r = 0; r < size; ++r) f.push_back(std::async(std::launch::async, fn, r));
  std::vector<Status> out;
  for (int r = 0; r < size; ++r) {
    if (f[r].wait_for(std::chrono::seconds(60)) != std::future_status::ready) {
      ADD_FAILURE() << "rank " << r << " did not return within 60 s";
      std::abort();  // a hung rank: nothing else can be trusted
    }
    out.push_back(f[r].get());
  }
  return out;
}

Clock::time_point In(int ms) { return Clock::now() + milliseconds(ms); }

// Rank r of a group of three sums {r, 1}: OK when every rank got {3, 3}.
Status SumOfRankIndices(GlooCollective* c, int r) {
  std::vector<Tensor> ts = {Tensor::FromVector<int32_t>({r, 1})};
  Status s = c->AllReduce(&ts, ReduceOp::kSum, In(10000));
  if (s.ok() && (ts[0].data<int32_t>()[0] != 3 || ts[0].data<int32_t>()[1] != 3)) {
    return Internal("wrong sum " + ts[0].DebugString());
  }
  return s;
}

// Rank r's input: deterministic pseudo-random values of `dtype`.
Tensor Input(DataType dtype, const TensorShape& shape, int rank, int salt) {
  Tensor t(dtype, shape);
  std::mt19937 gen(rank * 7919 + salt);
  std::uniform_real_distribution<double> u(-100, 100);
  for (int64_t i = 0; i < t.num_elements(); ++i) {
    const double v = u(gen);
    switch (dtype) {
      case DataType::kFloat32: t.data<float>()[i] = float(v); break;
      case DataType::kFloat64: t.data<double>()[i] = v; break;
      case DataType::kInt32: t.data<int32_t>()[i] = int32_t(v * 1000); break;
      case DataType::kInt64: t.data<int64_t>()[i] = int64_t(v * 1e9); break;
      default: break;
    }
  }
  return t;
}

bool SameBytes(const Tensor& a, const Tensor& b) {
  // An empty tensor may have no buffer: memcmp must not see its null.
  return a.dtype() == b.dtype() && a.shape() == b.shape() &&
         (a.TotalBytes() == 0 || std::memcmp(a.raw_data(), b.raw_data(), a.TotalBytes()) == 0);
}

// Reference results from InProcessCollective for the same inputs.
std::vector<std::vector<Tensor>> Reference(const std::vector<std::vector<Tensor>>& inputs, ReduceOp op) {
  const int n = int(inputs.size());
  auto group = InProcessCollective::Create(n);
  std::vector<std::vector<Tensor>> out(n);
  for (int r = 0; r < n; ++r) {
    for (const Tensor& t : inputs[r]) out[r].push_back(t.DeepCopy());
  }
  auto st = OnEveryRank(n, [&](int r) { return group[r]->AllReduce(&out[r], op, In(30000)); });
  for (const Status& s : st) EXPECT_TRUE(s.ok()) << s.ToString();
  return out;
}

TEST_F(GlooCollectiveTest, EveryDtypeSumAndMeanMatchInProcess) {
  const std::vector<TensorShape> shapes = {TensorShape({0}), TensorShape({1}), TensorShape({7, 3}),
                                           TensorShape({1000003})};
  for (int n : {2, 3}) {
    Group g = MakeGroup("every-dtype-" + std::to_string(n), n);
    ASSERT_EQ(int(g.size()), n);
    int salt = 0;
    for (DataType dtype : {DataType::kFloat32, DataType::kFloat64, DataType::kInt32, DataType::kInt64}) {
      for (const TensorShape& shape : shapes) {
        for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMean}) {
          ++salt;
          std::vector<std::vector<Tensor>> in(n);
          for (int r = 0; r < n; ++r) in[r].push_back(Input(dtype, shape, r, salt));
          std::vector<std::vector<Tensor>> expect = Reference(in, op);
          std::vector<std::vector<Tensor>> got(n);
          for (int r = 0; r < n; ++r) got[r].push_back(in[r][0].DeepCopy());
          auto st = OnEveryRank(n, [&](int r) { return g[r]->AllReduce(&got[r], op, In(30000)); });
          const std::string what = std::string(DataTypeName(dtype)) + shape.ToString() +
                                   (op == ReduceOp::kSum ? " sum" : " mean") + " n=" + std::to_string(n);
          for (int r = 0; r < n; ++r) {
            ASSERT_TRUE(st[r].ok()) << what << ": " << st[r].ToString();
            // Every rank holds the same bytes.
            EXPECT_TRUE(SameBytes(got[r][0], got[0][0])) << what << " rank " << r;
          }
          const bool exact = dtype == DataType::kInt32 || dtype == DataType::kInt64 || n <= 2;
          if (exact) {
            EXPECT_TRUE(SameBytes(got[0][0], expect[0][0])) << what;
          } else {
            for (int64_t i = 0; i < got[0][0].num_elements(); ++i) {
              const double a = got[0][0].ElementAsDouble(i), b = expect[0][0].ElementAsDouble(i);
              ASSERT_NEAR(a, b, 1e-4 * std::max(1.0, std::abs(b))) << what << " element " << i;
            }
          }
        }
      }
    }
  }
}

TEST_F(GlooCollectiveTest, ManyRoundsOfMixedListsAndDeterministicAcrossRuns) {
  const int n = 3, rounds = 40;
  auto run = [&](const std::string& prefix) {
    Group g = MakeGroup(prefix, n);
    std::vector<std::vector<Tensor>> last(n);
    auto st = OnEveryRank(n, [&](int r) -> Status {
      for (int k = 0; k < rounds; ++k) {
        std::vector<Tensor> ts = {Input(DataType::kFloat32, TensorShape({k * 37 + 1}), r, k),
                                  Input(DataType::kInt64, TensorShape({3}), r, k),
                                  Input(DataType::kFloat32, TensorShape({5, 5}), r, k + 1000),
                                  Input(DataType::kFloat64, TensorShape({k % 4}), r, k)};
        std::vector<Tensor> copy;
        for (const Tensor& t : ts) copy.push_back(t);  // shared: replaced, not overwritten
        Status s = g[r]->AllReduce(&ts, k % 2 ? ReduceOp::kMean : ReduceOp::kSum, In(30000));
        if (!s.ok()) return s;
        // The callers' other references keep the inputs.
        if (!SameBytes(copy[1], Input(DataType::kInt64, TensorShape({3}), r, k))) {
          return Internal("a shared input was overwritten");
        }
        last[r] = ts;
      }
      return Status();
    });
    for (const Status& s : st) EXPECT_TRUE(s.ok()) << s.ToString();
    return last;
  };
  auto a = run("rounds-a");
  auto b = run("rounds-b");
  for (int r = 0; r < n; ++r) {
    ASSERT_EQ(a[r].size(), 4u);
    for (size_t i = 0; i < 4; ++i) {
      EXPECT_TRUE(SameBytes(a[r][i], b[r][i])) << "rank " << r << " tensor " << i;
      EXPECT_TRUE(SameBytes(a[r][i], a[0][i])) << "rank " << r << " tensor " << i;
    }
  }
  // The int64 tensor is exact: the mean (round 39 is odd) of the ranks' inputs.
  std::vector<std::vector<Tensor>> in(n);
  for (int r = 0; r < n; ++r) in[r].push_back(Input(DataType::kInt64, TensorShape({3}), r, rounds - 1));
  EXPECT_TRUE(SameBytes(a[0][1], Reference(in, ReduceOp::kMean)[0][0]));
}

TEST_F(GlooCollectiveTest, MismatchFailsEveryRankNamingBothSidesAndTheGroupGoesOn) {
  const int n = 3;
  Group g = MakeGroup("mismatch", n);
  // Rank 2 passes another shape.
  auto st = OnEveryRank(n, [&](int r) {
    std::vector<Tensor> ts = {Tensor(DataType::kFloat32, TensorShape({r == 2 ? 3 : 2}))};
    return g[r]->AllReduce(&ts, ReduceOp::kSum, In(10000));
  });
  for (int r = 0; r < n; ++r) {
    EXPECT_EQ(st[r].code(), Code::kInvalidArgument) << st[r].ToString();
    EXPECT_NE(st[r].message().find("rank 2: tensor 0 is float32[3], rank 0's is float32[2]"),
              std::string::npos)
        << st[r].message();
    EXPECT_EQ(st[r].message(), st[0].message());
  }
  // Another count, another op, a dtype all-reduce does not take.
  st = OnEveryRank(n, [&](int r) {
    std::vector<Tensor> ts(r == 1 ? 2 : 1, Tensor(DataType::kInt32, TensorShape({4})));
    return g[r]->AllReduce(&ts, ReduceOp::kSum, In(10000));
  });
  for (int r = 0; r < n; ++r) {
    EXPECT_EQ(st[r].code(), Code::kInvalidArgument);
    EXPECT_NE(st[r].message().find("rank 1 passed 2 tensors, rank 0 passed 1"), std::string::npos)
        << st[r].message();
  }
  st = OnEveryRank(n, [&](int r) {
    std::vector<Tensor> ts = {Tensor(DataType::kInt32, TensorShape({4}))};
    return g[r]->AllReduce(&ts, r == 1 ? ReduceOp::kMean : ReduceOp::kSum, In(10000));
  });
  for (int r = 0; r < n; ++r) {
    EXPECT_NE(st[r].message().find("rank 1 asks for another reduction"), std::string::npos)
        << st[r].message();
  }
  st = OnEveryRank(n, [&](int r) {
    std::vector<Tensor> ts = {Tensor(DataType::kBool, TensorShape({4}))};
    return g[r]->AllReduce(&ts, ReduceOp::kSum, In(10000));
  });
  for (int r = 0; r < n; ++r) {
    EXPECT_EQ(st[r].code(), Code::kInvalidArgument);
    EXPECT_NE(st[r].message().find("tensor 0 of rank 0 is bool[4]"), std::string::npos)
        << st[r].message();
  }
  // The group still works.
  st = OnEveryRank(n, [&](int r) { return SumOfRankIndices(g[r].get(), r); });
  for (const Status& s : st) EXPECT_TRUE(s.ok()) << s.ToString();
}

// A round that repeats the last round's call starts its ring before the
// headers arrive (gloo_collective.h). A rank that changes its call then must
// still fail the round on every rank, with its own tensors untouched, and
// keep the group usable; and a rank that does not come must still be named.
TEST_F(GlooCollectiveTest, RepeatedCallsStartAtOnceYetAMismatchOrALateRankIsStillCaught) {
  const int n = 3;
  Group g = MakeGroup("repeat", n);
  // Two dtypes, one packed (two float32 tensors) and one single (int64).
  auto call = [](int r, int salt, int64_t f32) {
    return std::vector<Tensor>{Input(DataType::kFloat32, TensorShape({f32}), r, salt),
                               Input(DataType::kInt64, TensorShape({5}), r, salt),
                               Input(DataType::kFloat32, TensorShape({3}), r, salt + 1)};
  };
  auto steady = [&](int salt) {
    std::vector<std::vector<Tensor>> in(n), got(n);
    for (int r = 0; r < n; ++r) {
      in[r] = call(r, salt, 1000);
      for (const Tensor& t : in[r]) got[r].push_back(t.DeepCopy());
    }
    auto st = OnEveryRank(n, [&](int r) { return g[r]->AllReduce(&got[r], ReduceOp::kSum, In(10000)); });
    auto want = Reference(in, ReduceOp::kSum);
    for (int r = 0; r < n; ++r) {
      ASSERT_TRUE(st[r].ok()) << st[r].ToString();
      for (size_t i = 0; i < got[r].size(); ++i) {
        // The int64 sum is exact; float32 at n = 3 sums in ring order.
        if (got[r][i].dtype() == DataType::kInt64) {
          EXPECT_TRUE(SameBytes(got[r][i], want[r][i])) << "rank " << r << " tensor " << i;
        } else {
          for (int64_t k = 0; k < got[r][i].num_elements(); ++k) {
            ASSERT_NEAR(got[r][i].data<float>()[k], want[r][i].data<float>()[k], 1e-3);
          }
        }
        EXPECT_TRUE(SameBytes(got[r][i], got[0][i])) << "rank " << r << " tensor " << i;
      }
    }
  };
  for (int salt = 0; salt < 4; ++salt) steady(salt);  // rounds 1-3 speculate

  // Rank 2 changes a shape while ranks 0 and 1 repeat theirs: they have
  // started the ring; rank 2 joins it with zeros; all fail. Rank 2's tensors
  // and the packed ones (float32) are untouched; a repeating rank's int64,
  // reduced in place, is undefined (gloo_collective.h).
  std::vector<std::vector<Tensor>> in(n), got(n);
  for (int r = 0; r < n; ++r) {
    in[r] = call(r, 9, r == 2 ? 999 : 1000);
    for (const Tensor& t : in[r]) got[r].push_back(t.DeepCopy());
  }
  auto st = OnEveryRank(n, [&](int r) { return g[r]->AllReduce(&got[r], ReduceOp::kSum, In(10000)); });
  for (int r = 0; r < n; ++r) {
    EXPECT_EQ(st[r].code(), Code::kInvalidArgument) << st[r].ToString();
    EXPECT_NE(st[r].message().find("rank 2: tensor 0 is float32[999], rank 0's is float32[1000]"),
              std::string::npos)
        << st[r].message();
    for (size_t i = 0; i < got[r].size(); ++i) {
      if (r != 2 && got[r][i].dtype() == DataType::kInt64) continue;
      EXPECT_TRUE(SameBytes(got[r][i], in[r][i])) << "rank " << r << " tensor " << i << " changed";
    }
  }
  steady(10);  // the group goes on, and speculates again
  // Rank 0 alone repeats; 1 and 2 agree on a new call among themselves.
  st = OnEveryRank(n, [&](int r) {
    std::vector<Tensor> ts = call(r, 11, r == 0 ? 1000 : 7);
    return g[r]->AllReduce(&ts, ReduceOp::kSum, In(10000));
  });
  for (int r = 0; r < n; ++r) {
    EXPECT_NE(st[r].message().find("rank 1: tensor 0 is float32[7], rank 0's is float32[1000]"),
              std::string::npos)
        << st[r].ToString();
  }
  // Everyone changes the call together: no speculation, and it works.
  st = OnEveryRank(n, [&](int r) { return SumOfRankIndices(g[r].get(), r); });
  for (const Status& s : st) EXPECT_TRUE(s.ok()) << s.ToString();

  // Rank 2 does not come to a repeated round: ranks 0 and 1 are in the ring
  // at once, and still name it when the deadline passes.
  st = OnEveryRank(2, [&](int r) {
    std::vector<Tensor> ts = {Tensor::FromVector<int32_t>({r, 1})};
    return g[r]->AllReduce(&ts, ReduceOp::kSum, In(500));
  });
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(st[r].code(), Code::kDeadlineExceeded) << st[r].ToString();
    EXPECT_NE(st[r].message().find("rank(s) 2 did not join"), std::string::npos) << st[r].message();
    EXPECT_EQ(g[r]->failed_ranks(), std::vector<int>{2});
  }
}

TEST_F(GlooCollectiveTest, ALateRankIsNamedByTheDeadlineAndFailsAtOnceWhenItComes) {
  const int n = 3;
  Group g = MakeGroup("late", n);
  const auto start = Clock::now();
  auto st = OnEveryRank(2, [&](int r) {
    std::vector<Tensor> ts = {Tensor::FromVector<float>({1, 2})};
    return g[r]->AllReduce(&ts, ReduceOp::kSum, In(500));
  });
  const double took = std::chrono::duration<double>(Clock::now() - start).count();
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(st[r].code(), Code::kDeadlineExceeded) << st[r].ToString();
    EXPECT_NE(st[r].message().find("rank(s) 2 did not join"), std::string::npos) << st[r].message();
    EXPECT_EQ(g[r]->failed_ranks(), std::vector<int>{2});
  }
  EXPECT_LT(took, 5.0);
  // Rank 2 comes late: it fails at once, with the same cause.
  const auto late = Clock::now();
  std::vector<Tensor> ts = {Tensor::FromVector<float>({1, 2})};
  Status s = g[2]->AllReduce(&ts, ReduceOp::kSum, In(20000));
  EXPECT_EQ(s.code(), Code::kDeadlineExceeded) << s.ToString();
  EXPECT_NE(s.message().find("rank(s) 2 did not join"), std::string::npos) << s.message();
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - late).count(), 5.0);
  // Later calls fail at once with the same status.
  EXPECT_EQ(g[0]->AllReduce(&ts, ReduceOp::kSum, In(20000)), st[0]);
}

TEST_F(GlooCollectiveTest, AbortWakesARankBlockedInAllReduce) {
  Group g = MakeGroup("abort", 2);
  auto blocked = std::async(std::launch::async, [&] {
    std::vector<Tensor> ts = {Tensor::FromVector<float>({1})};
    return g[0]->AllReduce(&ts, ReduceOp::kSum, In(30000));
  });
  std::this_thread::sleep_for(milliseconds(200));
  const auto start = Clock::now();
  g[0]->Abort(Aborted("the step was aborted"));
  ASSERT_EQ(blocked.wait_for(std::chrono::seconds(2)), std::future_status::ready)
      << "AllReduce did not return promptly after Abort";
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - start).count(), 1.0);
  Status s = blocked.get();
  EXPECT_EQ(s.code(), Code::kAborted) << s.ToString();
  EXPECT_EQ(s.message(), "the step was aborted");
  // The other rank's next call fails at once naming who closed the group.
  std::vector<Tensor> ts = {Tensor::FromVector<float>({1})};
  const auto t1 = Clock::now();
  s = g[1]->AllReduce(&ts, ReduceOp::kSum, In(30000));
  EXPECT_EQ(s.code(), Code::kAborted) << s.ToString();
  EXPECT_NE(s.message().find("rank 0 closed the group: the step was aborted"), std::string::npos)
      << s.message();
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - t1).count(), 3.0);
  // A group of one reduces nothing; abort before any call: the call fails at
  // once with the abort's status.
  Group h = MakeGroup("abort-first", 1);
  std::vector<Tensor> one = {Tensor::FromVector<float>({2, 3})};
  ASSERT_TRUE(h[0]->AllReduce(&one, ReduceOp::kMean, In(1000)).ok());
  EXPECT_EQ(one[0].data<float>()[1], 3.0f);
  h[0]->Abort(Status());
  EXPECT_EQ(h[0]->AllReduce(&ts, ReduceOp::kSum, In(1000)).code(), Code::kCancelled);
}

// A peer's failure record ends the round of the others although its
// connections stay open (rank 2 never calls; only its record says it gave
// up): each rank's watchdog finds it in the store within failure_poll.
// Without it the round waits for its deadline. It is the safety net for a
// closed connection Gloo does not report (a send it queued after a failed
// write is never woken when that connection fails).
TEST_F(GlooCollectiveTest, APeerFailureRecordEndsTheRoundThoughItsConnectionsStayOpen) {
  Group g = MakeGroup("record", 3);
  const auto start = Clock::now();
  auto rounds = std::async(std::launch::async, [&] {
    return OnEveryRank(2, [&](int r) {
      std::vector<Tensor> ts = {Tensor::FromVector<float>({1, 2, 3})};
      return g[r]->AllReduce(&ts, ReduceOp::kSum, In(30000));
    });
  });
  std::this_thread::sleep_for(milliseconds(300));
  auto client = CollectiveStoreClient::Connect(address_);
  ASSERT_TRUE(client->Set("record", "fail/2",
                          std::to_string(int(Code::kAborted)) + "\n2\nits step was aborted", In(2000))
                  .ok());
  ASSERT_EQ(rounds.wait_for(std::chrono::seconds(5)), std::future_status::ready)
      << "the round did not end within 5 s of the failure record";
  std::vector<Status> st = rounds.get();
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - start).count(), 3.0);
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(st[r].code(), Code::kAborted) << st[r].ToString();
    EXPECT_NE(st[r].message().find("rank 2 closed the group: its step was aborted"), std::string::npos)
        << st[r].message();
  }
}

// Backup replicas' calls: rounds of two of four ranks, while a third rank
// takes no part and receives the result from one of them later; the group's
// own rounds go on afterwards; bad members are refused naming them.
TEST_F(GlooCollectiveTest, SubgroupRoundsAndTransfersLeaveTheOtherRanksOut) {
  Group g = MakeGroup("among", 4);
  ASSERT_EQ(g.size(), 4u);
  EXPECT_TRUE(g[0]->supports_subgroups());
  const std::vector<Tensor> base = {Input(DataType::kFloat32, TensorShape({1000, 3}), 0, 1),
                                    Input(DataType::kFloat64, TensorShape({7}), 0, 2),
                                    Input(DataType::kInt64, TensorShape({5}), 0, 3)};
  auto input = [&](int r) {
    std::vector<Tensor> ts;
    for (size_t i = 0; i < base.size(); ++i) ts.push_back(Input(base[i].dtype(), base[i].shape(), r, int(i)));
    return ts;
  };
  // Rounds 0..5 among {1, 3} and then {0, 1, 3}; rank 2 takes no part and
  // receives each round's result from rank 1, after the others are done
  // (rank 1 sends them in order from a thread of its own, as ReplicaComm
  // does: a send completes when its receiver asks for it).
  std::vector<std::vector<std::vector<Tensor>>> results(4);
  const std::vector<std::vector<int>> members = {{1, 3}, {0, 1, 3}};
  auto st = OnEveryRank(4, [&](int r) -> Status {
    for (uint32_t round = 0; round < 6; ++round) {
      const std::vector<int>& m = members[round % 2];
      if (!std::binary_search(m.begin(), m.end(), r)) continue;
      std::vector<Tensor> ts = input(r);
      FS_RETURN_IF_ERROR(g[r]->AllReduceAmong(&ts, m, round, In(10000)));
      results[r].push_back(ts);
    }
    return Status();
  });
  for (const Status& s : st) ASSERT_TRUE(s.ok()) << s.ToString();
  ASSERT_EQ(results[1].size(), 6u);
  auto sender = std::async(std::launch::async, [&]() -> Status {
    for (uint32_t round = 0; round < 6; ++round) {
      FS_RETURN_IF_ERROR(g[1]->Send(results[1][round], 2, round, In(10000)));
    }
    return Status();
  });
  std::vector<std::vector<Tensor>> received(6);
  for (uint32_t round = 0; round < 6; ++round) {
    received[round] = input(2);  // its own buffers, overwritten
    Status s = g[2]->Recv(&received[round], 1, round, In(10000));
    ASSERT_TRUE(s.ok()) << s.ToString();
  }
  ASSERT_EQ(sender.wait_for(std::chrono::seconds(30)), std::future_status::ready);
  ASSERT_TRUE(sender.get().ok());
  for (int round = 0; round < 6; ++round) {
    // The reference: the members' inputs summed in process.
    const std::vector<int>& m = members[round % 2];
    std::vector<std::vector<Tensor>> in;
    for (int r : m) in.push_back(input(r));
    std::vector<std::vector<Tensor>> ref = Reference(in, ReduceOp::kSum);
    for (int r : m) {
      // Its result of this round: the rounds it took part in so far.
      int index = 0;
      for (int q = 0; q < round; ++q) {
        const std::vector<int>& mq = members[q % 2];
        index += std::binary_search(mq.begin(), mq.end(), r) ? 1 : 0;
      }
      const std::vector<Tensor>& got = results[r][size_t(index)];
      // Every member got the same bytes; integers are exact, floats within
      // a rounding of the in-process order.
      EXPECT_TRUE(SameBytes(got[0], results[1][size_t(round)][0])) << "round " << round;
      EXPECT_TRUE(SameBytes(got[2], ref[0][2])) << "round " << round << " rank " << r;
      for (int i : {0, 1}) {
        for (int64_t e = 0; e < got[i].num_elements(); ++e) {
          ASSERT_NEAR(got[i].ElementAsDouble(e), ref[0][i].ElementAsDouble(e), 1e-3) << "round " << round;
        }
      }
    }
    // Rank 2 got rank 1's bytes exactly.
    for (size_t i = 0; i < base.size(); ++i) {
      EXPECT_TRUE(SameBytes(received[size_t(round)][i], results[1][size_t(round)][i])) << "round " << round;
    }
  }
  // The group's own rounds still work.
  st = OnEveryRank(4, [&](int r) {
    std::vector<Tensor> ts = {Tensor::FromVector<int32_t>({r})};
    Status s = g[r]->AllReduce(&ts, ReduceOp::kSum, In(10000));
    if (s.ok() && ts[0].data<int32_t>()[0] != 6) return Internal("wrong sum " + ts[0].DebugString());
    return s;
  });
  for (const Status& s : st) EXPECT_TRUE(s.ok()) << s.ToString();
  // Members that do not include the caller, or do not increase: refused.
  std::vector<Tensor> ts = input(0);
  Status bad = g[0]->AllReduceAmong(&ts, {1, 3}, 99, In(1000));
  EXPECT_EQ(bad.code(), Code::kInvalidArgument) << bad.ToString();
  EXPECT_NE(bad.message().find("1, 3"), std::string::npos) << bad.ToString();
  bad = g[0]->AllReduceAmong(&ts, {3, 0}, 99, In(1000));
  EXPECT_EQ(bad.code(), Code::kInvalidArgument) << bad.ToString();
  bad = g[0]->Send(ts, 0, 99, In(1000));
  EXPECT_EQ(bad.code(), Code::kInvalidArgument) << bad.ToString();
}

// A receiver that waits for a sender that never sends is woken by Abort.
TEST_F(GlooCollectiveTest, AbortWakesARankBlockedInRecv) {
  Group g = MakeGroup("recv-abort", 2);
  ASSERT_EQ(g.size(), 2u);
  auto blocked = std::async(std::launch::async, [&] {
    std::vector<Tensor> ts = {Tensor(DataType::kFloat32, TensorShape({16}))};
    return g[1]->Recv(&ts, 0, 7, In(30000));
  });
  std::this_thread::sleep_for(milliseconds(100));
  EXPECT_EQ(blocked.wait_for(milliseconds(0)), std::future_status::timeout);
  g[1]->Abort(Cancelled("stop waiting"));
  ASSERT_EQ(blocked.wait_for(std::chrono::seconds(10)), std::future_status::ready);
  Status s = blocked.get();
  EXPECT_EQ(s.code(), Code::kCancelled) << s.ToString();
}

// Backup replicas give up a step whose contributor stalls: a subgroup
// round or a receive of an abandoned tag returns ABORTED at once, with the
// caller's tensors as they were, and the group goes on; the late peer's
// data lands in the parked buffers, never in a later call's.
TEST_F(GlooCollectiveTest, AnAbandonedRoundOrReceiveEndsAtOnceAndTheGroupGoesOn) {
  Group g = MakeGroup("abandon", 3);
  ASSERT_EQ(g.size(), 3u);
  const Tensor big = Input(DataType::kFloat32, TensorShape({300000}), 0, 1);  // several segments
  // Rank 0 waits in round 7 among {0, 1}; rank 1 does not come.
  auto waiting = std::async(std::launch::async, [&] {
    std::vector<Tensor> ts = {big.DeepCopy(), Tensor::FromVector<int64_t>({1, 2})};
    Status s = g[0]->AllReduceAmong(&ts, {0, 1}, 7, In(30000));
    const bool untouched = SameBytes(ts[0], big) && ts[1].data<int64_t>()[1] == 2;
    return std::make_pair(s, untouched);
  });
  std::this_thread::sleep_for(milliseconds(200));
  ASSERT_EQ(waiting.wait_for(milliseconds(0)), std::future_status::timeout);
  const auto abandoned_at = Clock::now();
  g[0]->Abandon(7);
  ASSERT_EQ(waiting.wait_for(std::chrono::seconds(10)), std::future_status::ready);
  auto [s0, untouched] = waiting.get();
  EXPECT_LT(Clock::now() - abandoned_at, std::chrono::seconds(2));
  EXPECT_EQ(s0.code(), Code::kAborted) << s0.ToString();
  EXPECT_NE(s0.message().find("abandoned"), std::string::npos) << s0.ToString();
  EXPECT_TRUE(untouched);
  // Rank 1 comes late to round 7: it gets part of rank 0's data and waits
  // for the rest, until it gives the round up too.
  auto late = std::async(std::launch::async, [&] {
    std::vector<Tensor> ts = {Input(DataType::kFloat32, TensorShape({300000}), 1, 1),
                              Tensor::FromVector<int64_t>({3, 4})};
    return g[1]->AllReduceAmong(&ts, {0, 1}, 7, In(30000));
  });
  std::this_thread::sleep_for(milliseconds(200));
  g[1]->Abandon(7);
  ASSERT_EQ(late.wait_for(std::chrono::seconds(10)), std::future_status::ready);
  EXPECT_EQ(late.get().code(), Code::kAborted);
  // A tag abandoned before its call: ABORTED at once.
  std::vector<Tensor> ts = {Tensor::FromVector<float>({1})};
  g[2]->Abandon(8);
  EXPECT_EQ(g[2]->AllReduceAmong(&ts, {1, 2}, 8, In(30000)).code(), Code::kAborted);
  EXPECT_EQ(g[2]->Recv(&ts, 0, 8, In(30000)).code(), Code::kAborted);
  // A receive nobody sends to, given up; its sender comes late and lands
  // in the parked buffer.
  auto recv = std::async(std::launch::async, [&] {
    std::vector<Tensor> r = {Tensor::FromVector<float>({-1, -1, -1})};
    Status s = g[2]->Recv(&r, 0, 9, In(30000));
    return std::make_pair(s, r[0].data<float>()[0] == -1);
  });
  std::this_thread::sleep_for(milliseconds(100));
  g[2]->Abandon(9);
  ASSERT_EQ(recv.wait_for(std::chrono::seconds(10)), std::future_status::ready);
  auto [sr, kept] = recv.get();
  EXPECT_EQ(sr.code(), Code::kAborted) << sr.ToString();
  EXPECT_TRUE(kept);
  ASSERT_TRUE(g[0]->Send({Tensor::FromVector<float>({5, 5, 5})}, 2, 9, In(10000)).ok());
  // The group goes on: rounds of every rank, of a subgroup, and transfers,
  // with exact results.
  auto st = OnEveryRank(3, [&](int r) -> Status {
    FS_RETURN_IF_ERROR(SumOfRankIndices(g[r].get(), r));
    std::vector<Tensor> x = {Input(DataType::kFloat32, TensorShape({300000}), r, 1)};
    if (r < 2) {
      FS_RETURN_IF_ERROR(g[r]->AllReduceAmong(&x, {0, 1}, 10, In(10000)));
      const Tensor a = Input(DataType::kFloat32, TensorShape({300000}), 0, 1);
      const Tensor b = Input(DataType::kFloat32, TensorShape({300000}), 1, 1);
      for (int64_t e = 0; e < x[0].num_elements(); ++e) {
        if (x[0].data<float>()[e] != a.data<float>()[e] + b.data<float>()[e]) {
          return Internal("wrong sum at " + std::to_string(e));
        }
      }
    }
    if (r == 0) return g[0]->Send({Tensor::FromVector<float>({1, 2, 3})}, 2, 11, In(10000));
    if (r == 2) {
      std::vector<Tensor> y = {Tensor::FromVector<float>({0, 0, 0})};
      FS_RETURN_IF_ERROR(g[2]->Recv(&y, 0, 11, In(10000)));
      if (y[0].data<float>()[2] != 3) return Internal("wrong transfer " + y[0].DebugString());
    }
    return Status();
  });
  for (const Status& s : st) EXPECT_TRUE(s.ok()) << s.ToString();
}

// AllGather over Gloo: the same concatenation as in one process, rows of
// several sizes (none on one rank), over many rounds of changing sizes.
TEST_F(GlooCollectiveTest, AllGatherMatchesInProcessOverRoundsOfChangingRows) {
  Group g = MakeGroup("allgather", 3);
  ASSERT_EQ(g.size(), 3u);
  auto rows = [](int round, int r) { return int64_t((round * 7 + r * 5) % 6); };  // 0..5
  auto input = [&](int round, int r) {
    const int64_t n = rows(round, r);
    std::vector<Tensor> ts = {Input(DataType::kInt64, TensorShape({n}), r, round),
                              Input(DataType::kFloat32, TensorShape({n, 64}), r, round + 100)};
    return ts;
  };
  for (int round = 0; round < 6; ++round) {
    std::vector<std::vector<Tensor>> got(3);
    auto st = OnEveryRank(3, [&](int r) {
      got[r] = input(round, r);
      return g[r]->AllGather(&got[r], In(10000));
    });
    for (const Status& s : st) ASSERT_TRUE(s.ok()) << s.ToString();
    for (int k = 0; k < 2; ++k) {
      // The reference: the ranks' tensors one after the other.
      int64_t total = 0;
      for (int r = 0; r < 3; ++r) total += rows(round, r);
      ASSERT_EQ(got[0][k].shape().dim(0), total) << "round " << round;
      size_t at = 0;
      for (int r = 0; r < 3; ++r) {
        const Tensor mine = input(round, r)[k];
        if (mine.TotalBytes() == 0) continue;  // no rows: no buffer (a null data pointer)
        EXPECT_EQ(std::memcmp(static_cast<const char*>(got[0][k].raw_data()) + at, mine.raw_data(),
                              mine.TotalBytes()),
                  0)
            << "round " << round << " tensor " << k << " rank " << r;
        at += mine.TotalBytes();
      }
      for (int r = 1; r < 3; ++r) EXPECT_TRUE(SameBytes(got[r][k], got[0][k])) << "round " << round;
    }
  }
}

TEST_F(GlooCollectiveTest, RendezvousNamesTheRanksThatDidNotCome) {
  const auto start = Clock::now();
  auto c = CreateRanks("absent", 3, {0, 1}, 500);
  for (auto& x : c) {
    ASSERT_FALSE(x.ok());
    EXPECT_EQ(x.status().code(), Code::kDeadlineExceeded);
    EXPECT_NE(x.status().message().find("rank(s) 2 did not join the group of 3"), std::string::npos)
        << x.status().message();
  }
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - start).count(), 5.0);
  GlooCollectiveOptions bad = Options("x", 3, 3);
  EXPECT_EQ(GlooCollective::Create(bad).status().code(), Code::kInvalidArgument);
  bad = Options("", 0, 1);
  EXPECT_EQ(GlooCollective::Create(bad).status().code(), Code::kInvalidArgument);
}

TEST_F(GlooCollectiveTest, SurvivorsRebuildUnderANewPrefix) {
  Group g = MakeGroup("rebuild", 3);
  auto st = OnEveryRank(2, [&](int r) {
    std::vector<Tensor> ts = {Tensor::FromVector<float>({1})};
    return g[r]->AllReduce(&ts, ReduceOp::kSum, In(300));
  });
  ASSERT_EQ(st[0].code(), Code::kDeadlineExceeded);
  // Ranks 0 and 2 go on (say rank 1 is the one the job drops).
  EXPECT_EQ(g[0]->Rebuild("rebuild", {0, 2}).status().code(), Code::kInvalidArgument);
  EXPECT_EQ(g[1]->Rebuild("rebuild/1", {0, 2}).status().code(), Code::kInvalidArgument);
  std::vector<int> members = {0, 2};
  std::vector<std::unique_ptr<GlooCollective>> next(2);
  st = OnEveryRank(2, [&](int i) -> Status {
    FS_ASSIGN_OR_RETURN(next[i], g[members[i]]->Rebuild("rebuild/1", members));
    if (next[i]->rank() != i || next[i]->size() != 2) return Internal("wrong rank or size");
    std::vector<Tensor> ts = {Tensor::FromVector<double>({1.5, double(i)})};
    FS_RETURN_IF_ERROR(next[i]->AllReduce(&ts, ReduceOp::kMean, In(10000)));
    if (ts[0].data<double>()[0] != 1.5 || ts[0].data<double>()[1] != 0.5) {
      return Internal("wrong mean " + ts[0].DebugString());
    }
    return Status();
  });
  for (const Status& s : st) EXPECT_TRUE(s.ok()) << s.ToString();
  store_.DropPrefix("rebuild");
  EXPECT_EQ(store_.num_prefixes(), 0);
}

}  // namespace
}  // namespace flowstate

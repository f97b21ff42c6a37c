// The collective store over loopback gRPC: Set/Get/Wait, Add, a Wait's
// timeout naming the missing keys, prefix isolation, the caps, DropPrefix,
// Gloo's Store interface over it (GlooStore), and the backup-replica race
// of ranks in several processes (StoreStepRace).
#include <gloo/common/error.h>
#include <gloo/rendezvous/store.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <future>
#include <thread>

#include "distributed/collective_store.h"
#include "distributed/gloo_store.h"
#include "distributed/store_step_race.h"

namespace flowstate {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

struct StoreFixture {
  explicit StoreFixture(const CollectiveStoreOptions& o = {}) : service(o) {
    StatusOr<int> port = service.Start("127.0.0.1", 0);
    EXPECT_TRUE(port.ok()) << port.status().ToString();
    client = CollectiveStoreClient::Connect("127.0.0.1:" + std::to_string(port.ok() ? *port : 0));
  }
  Clock::time_point In(int ms) const { return Clock::now() + milliseconds(ms); }
  CollectiveStoreService service;
  std::shared_ptr<CollectiveStoreClient> client;
};

TEST(CollectiveStore, SetGetAndWait) {
  StoreFixture f;
  ASSERT_TRUE(f.client->Set("p", "a", "1", f.In(5000)).ok());
  StatusOr<std::string> v = f.client->Get("p", "a", f.In(5000));
  ASSERT_TRUE(v.ok()) << v.status().ToString();
  EXPECT_EQ(*v, "1");
  EXPECT_EQ(f.client->Get("p", "b", f.In(5000)).status().code(), Code::kNotFound);
  EXPECT_TRUE(f.client->Wait("p", {"a"}, f.In(5000)).ok());
  // A Wait is answered when its last key is set.
  auto waiting = std::async(std::launch::async, [&] { return f.client->Wait("p", {"a", "b", "c"}, f.In(10000)); });
  std::this_thread::sleep_for(milliseconds(100));
  ASSERT_TRUE(f.client->Set("p", "b", "2", f.In(5000)).ok());
  EXPECT_EQ(waiting.wait_for(std::chrono::milliseconds(200)), std::future_status::timeout);
  ASSERT_TRUE(f.client->Set("p", "c", "3", f.In(5000)).ok());
  ASSERT_EQ(waiting.wait_for(std::chrono::seconds(5)), std::future_status::ready);
  EXPECT_TRUE(waiting.get().ok());
  EXPECT_EQ(f.service.num_keys("p"), 3);
}

TEST(CollectiveStore, AddIsAtomicAndAnswersWaits) {
  StoreFixture f;
  StatusOr<int64_t> v = f.client->Add("p", "n", 0, f.In(5000));
  ASSERT_TRUE(v.ok()) << v.status().ToString();
  EXPECT_EQ(*v, 0);  // unset: 0
  // 4 threads x 25 adds: every ticket 1..100 is handed out once.
  std::vector<std::future<std::vector<int64_t>>> adders;
  for (int t = 0; t < 4; ++t) {
    adders.push_back(std::async(std::launch::async, [&] {
      std::vector<int64_t> got;
      for (int i = 0; i < 25; ++i) {
        StatusOr<int64_t> x = f.client->Add("p", "n", 1, f.In(5000));
        EXPECT_TRUE(x.ok()) << x.status().ToString();
        got.push_back(x.ok() ? *x : -1);
      }
      return got;
    }));
  }
  std::vector<int64_t> all;
  for (auto& a : adders) {
    for (int64_t x : a.get()) all.push_back(x);
  }
  std::sort(all.begin(), all.end());
  for (int i = 0; i < 100; ++i) EXPECT_EQ(all[i], i + 1);
  EXPECT_EQ(*f.client->Get("p", "n", f.In(5000)), "100");
  v = f.client->Add("p", "n", -40, f.In(5000));
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(*v, 60);
  // A Wait on a key is answered by the Add that sets it.
  auto waiting = std::async(std::launch::async, [&] { return f.client->Wait("p", {"m"}, f.In(10000)); });
  std::this_thread::sleep_for(milliseconds(100));
  ASSERT_TRUE(f.client->Add("p", "m", 7, f.In(5000)).ok());
  ASSERT_EQ(waiting.wait_for(std::chrono::seconds(5)), std::future_status::ready);
  EXPECT_TRUE(waiting.get().ok());
  // Not a number: refused, and the value is unchanged.
  ASSERT_TRUE(f.client->Set("p", "text", "12abc", f.In(5000)).ok());
  v = f.client->Add("p", "text", 1, f.In(5000));
  EXPECT_EQ(v.status().code(), Code::kInvalidArgument) << v.status().ToString();
  EXPECT_NE(v.status().message().find("\"text\""), std::string::npos) << v.status().message();
  EXPECT_EQ(*f.client->Get("p", "text", f.In(5000)), "12abc");
}

// Three ranks of a group with one backup replica: the first two to arrive
// at a step contribute and every rank learns who they are; the third is
// dropped; a straggler's wait ends as soon as the step is decided without
// it; End forgets the step.
TEST(StoreStepRace, FirstArrivalsContributeAndLateOnesAreDropped) {
  StoreFixture f;
  CollectiveGroupSpec spec;
  spec.kind = "gloo";
  spec.store_address = f.client->address();
  spec.prefix = "job-1/m0";
  spec.size = 3;
  spec.timeout = milliseconds(5000);
  std::vector<std::unique_ptr<StoreStepRace>> race;
  for (int r = 0; r < 3; ++r) {
    spec.rank = r;
    race.push_back(std::make_unique<StoreStepRace>(spec, 2));
  }
  // Rank 2 straggles: nothing decided within 100 ms.
  StatusOr<bool> decided = race[2]->WaitDecidedWithout(0, 2, milliseconds(100));
  ASSERT_TRUE(decided.ok()) << decided.status().ToString();
  EXPECT_FALSE(*decided);
  StatusOr<bool> is = race[0]->Decided(0);
  ASSERT_TRUE(is.ok()) << is.status().ToString();
  EXPECT_FALSE(*is);
  auto straggler = std::async(std::launch::async, [&] {
    const auto start = Clock::now();
    StatusOr<bool> d = race[2]->WaitDecidedWithout(0, 2, milliseconds(10000));
    return std::make_pair(d, std::chrono::duration<double>(Clock::now() - start).count());
  });
  // Rank 1 arrives first and waits for the second contributor.
  auto first = std::async(std::launch::async, [&] { return race[1]->Decide(0, 1, true, f.In(5000)); });
  std::this_thread::sleep_for(milliseconds(100));
  EXPECT_EQ(first.wait_for(milliseconds(0)), std::future_status::timeout);
  EXPECT_EQ(straggler.wait_for(milliseconds(0)), std::future_status::timeout);  // one of two
  StatusOr<StepRace::Decision> a = race[0]->Decide(0, 0, true, f.In(5000));
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_TRUE(a->contributes);
  EXPECT_EQ(a->members, (std::vector<int>{0, 1}));
  StatusOr<StepRace::Decision> b = first.get();
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_TRUE(b->contributes);
  EXPECT_EQ(b->members, (std::vector<int>{0, 1}));
  auto [d, took] = straggler.get();
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_TRUE(*d);  // decided without rank 2: it abandons the step
  EXPECT_LT(took, 5.0);
  is = race[2]->Decided(0);
  ASSERT_TRUE(is.ok());
  EXPECT_TRUE(*is);
  // It arrives without examples then: the same decision, not dropped twice.
  StatusOr<StepRace::Decision> c = race[2]->Decide(0, 2, false, f.In(5000));
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_FALSE(c->contributes);
  EXPECT_EQ(c->members, (std::vector<int>{0, 1}));
  StatusOr<std::vector<int64_t>> dropped = race[0]->Dropped();
  ASSERT_TRUE(dropped.ok()) << dropped.status().ToString();
  EXPECT_EQ(*dropped, (std::vector<int64_t>{0, 0, 1}));
  ASSERT_TRUE(race[0]->End(0).ok());
  EXPECT_EQ(f.service.num_keys("job-1/m0/race/0"), 0);

  // Step 1: rank 2 arrives first with examples, rank 0 second, rank 1 late
  // with examples: dropped, and told who contributed.
  a = race[2]->Decide(1, 2, true, f.In(100));
  EXPECT_FALSE(a.ok());  // alone it waits: nobody decides within 100 ms
  b = race[0]->Decide(1, 0, true, f.In(5000));
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_EQ(b->members, (std::vector<int>{0, 2}));
  c = race[1]->Decide(1, 1, true, f.In(5000));
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_FALSE(c->contributes);
  EXPECT_EQ(c->members, (std::vector<int>{0, 2}));
  dropped = race[1]->Dropped();
  ASSERT_TRUE(dropped.ok());
  EXPECT_EQ(*dropped, (std::vector<int64_t>{0, 1, 1}));
  ASSERT_TRUE(race[0]->End(1).ok());

  // Step 2, an epoch's last: only rank 0 has examples. It cannot fill two
  // places, so the step is decided when the last rank arrives, with rank 0
  // alone.
  auto r0 = std::async(std::launch::async, [&] { return race[0]->Decide(2, 0, true, f.In(5000)); });
  auto r1 = std::async(std::launch::async, [&] { return race[1]->Decide(2, 1, false, f.In(5000)); });
  std::this_thread::sleep_for(milliseconds(100));
  EXPECT_EQ(r0.wait_for(milliseconds(0)), std::future_status::timeout);
  c = race[2]->Decide(2, 2, false, f.In(5000));
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->members, (std::vector<int>{0}));
  a = r0.get();
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_TRUE(a->contributes);
  EXPECT_EQ(a->members, (std::vector<int>{0}));
  ASSERT_TRUE(r1.get().ok());
  dropped = race[2]->Dropped();
  ASSERT_TRUE(dropped.ok());
  EXPECT_EQ(*dropped, (std::vector<int64_t>{0, 1, 1}));  // nobody with examples was dropped
  ASSERT_TRUE(race[0]->End(2).ok());
  // Step 3: rank 1 comes alone and waits at most 150 ms for another (its
  // settle_after): it decides the step with itself; ranks that come later,
  // with examples or not, read that and the one with examples is dropped.
  const auto before_settle = std::chrono::steady_clock::now();
  a = race[1]->Decide(3, 1, true, f.In(5000), std::chrono::milliseconds(150));
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_GE(std::chrono::steady_clock::now() - before_settle, std::chrono::milliseconds(150));
  EXPECT_TRUE(a->contributes);
  EXPECT_EQ(a->members, (std::vector<int>{1}));
  b = race[0]->Decide(3, 0, true, f.In(5000), std::chrono::milliseconds(150));
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_FALSE(b->contributes);  // its arrival filled the places, but the step was settled
  EXPECT_EQ(b->members, (std::vector<int>{1}));
  c = race[2]->Decide(3, 2, false, f.In(5000));
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->members, (std::vector<int>{1}));
  dropped = race[2]->Dropped();
  ASSERT_TRUE(dropped.ok());
  EXPECT_EQ(*dropped, (std::vector<int64_t>{1, 1, 1}));
  // Settling outcomes: the first proposal wins, later ones read it.
  StatusOr<StepRace::Outcome> o = race[0]->OutcomeOf(3);
  ASSERT_TRUE(o.ok());
  EXPECT_EQ(*o, StepRace::Outcome::kOpen);
  o = race[1]->Settle(3, StepRace::Outcome::kAbandoned, f.In(5000));
  ASSERT_TRUE(o.ok()) << o.status().ToString();
  EXPECT_EQ(*o, StepRace::Outcome::kAbandoned);
  o = race[0]->Settle(3, StepRace::Outcome::kDone, f.In(5000));
  ASSERT_TRUE(o.ok());
  EXPECT_EQ(*o, StepRace::Outcome::kAbandoned);
  o = race[2]->OutcomeOf(3);
  ASSERT_TRUE(o.ok());
  EXPECT_EQ(*o, StepRace::Outcome::kAbandoned);
  ASSERT_TRUE(race[0]->End(3).ok());
  // The membership's end drops the counters too.
  EXPECT_EQ(f.service.DropPrefix("job-1/m0"), 1);
  EXPECT_EQ(f.service.num_prefixes(), 0);
}

TEST(StoreStepRace, AnUnreachableStoreIsAnErrorNamingIt) {
  CollectiveGroupSpec spec;
  spec.kind = "gloo";
  spec.store_address = "127.0.0.1:1";
  spec.prefix = "job-1/m0";
  spec.size = 2;
  spec.timeout = milliseconds(300);
  StoreStepRace race(spec, 1);
  StatusOr<StepRace::Decision> a = race.Decide(0, 0, true, Clock::now() + milliseconds(300));
  ASSERT_FALSE(a.ok());
  EXPECT_NE(a.status().message().find("127.0.0.1:1"), std::string::npos) << a.status().ToString();
  EXPECT_NE(a.status().message().find("backup replicas"), std::string::npos) << a.status().ToString();
}

TEST(CollectiveStore, WaitTimesOutNamingTheMissingKeys) {
  StoreFixture f;
  ASSERT_TRUE(f.client->Set("p", "here", "x", f.In(5000)).ok());
  std::vector<std::string> missing;
  const auto start = Clock::now();
  Status s = f.client->Wait("p", {"here", "gone/1", "gone/2"}, f.In(300), &missing);
  const double took = std::chrono::duration<double>(Clock::now() - start).count();
  EXPECT_EQ(s.code(), Code::kDeadlineExceeded) << s.ToString();
  EXPECT_NE(s.message().find("gone/1, gone/2"), std::string::npos) << s.message();
  EXPECT_EQ(missing, (std::vector<std::string>{"gone/1", "gone/2"}));
  EXPECT_GE(took, 0.25);
  EXPECT_LT(took, 2.0);
}

TEST(CollectiveStore, PrefixesAreIsolated) {
  StoreFixture f;
  ASSERT_TRUE(f.client->Set("job/1", "k", "one", f.In(5000)).ok());
  ASSERT_TRUE(f.client->Set("job/2", "k", "two", f.In(5000)).ok());
  EXPECT_EQ(*f.client->Get("job/1", "k", f.In(5000)), "one");
  EXPECT_EQ(*f.client->Get("job/2", "k", f.In(5000)), "two");
  EXPECT_EQ(f.client->Wait("job/3", {"k"}, f.In(100)).code(), Code::kDeadlineExceeded);
}

TEST(CollectiveStore, CapsRefuseAndChangeNothing) {
  CollectiveStoreOptions o;
  o.max_keys = 2;
  o.max_bytes = 100;
  o.max_prefixes = 2;
  StoreFixture f(o);
  ASSERT_TRUE(f.client->Set("p", "a", "1", f.In(5000)).ok());
  ASSERT_TRUE(f.client->Set("p", "b", "2", f.In(5000)).ok());
  Status s = f.client->Set("p", "c", "3", f.In(5000));
  EXPECT_EQ(s.code(), Code::kResourceExhausted);
  EXPECT_NE(s.message().find("prefix \"p\" holds 2 keys"), std::string::npos) << s.message();
  EXPECT_EQ(f.client->Get("p", "c", f.In(5000)).status().code(), Code::kNotFound);
  // Overwriting an existing key is within the key cap; the byte cap holds.
  EXPECT_TRUE(f.client->Set("p", "a", "11", f.In(5000)).ok());
  s = f.client->Set("p", "a", std::string(200, 'x'), f.In(5000));
  EXPECT_EQ(s.code(), Code::kResourceExhausted);
  EXPECT_EQ(*f.client->Get("p", "a", f.In(5000)), "11");
  EXPECT_EQ(f.service.num_bytes("p"), (1 + 2) + (1 + 1));  // a=11, b=2
  ASSERT_TRUE(f.client->Set("q", "a", "1", f.In(5000)).ok());
  s = f.client->Set("r", "a", "1", f.In(5000));
  EXPECT_EQ(s.code(), Code::kResourceExhausted);
  EXPECT_NE(s.message().find("2 prefixes held"), std::string::npos) << s.message();
  EXPECT_EQ(f.service.num_prefixes(), 2);
}

TEST(CollectiveStore, DropPrefixForgetsItsMembershipsAndFailsTheirWaits) {
  StoreFixture f;
  ASSERT_TRUE(f.client->Set("job/1", "k", "v", f.In(5000)).ok());
  ASSERT_TRUE(f.client->Set("job/1/m0", "k", "v", f.In(5000)).ok());
  ASSERT_TRUE(f.client->Set("job/10", "k", "v", f.In(5000)).ok());
  auto waiting = std::async(std::launch::async, [&] { return f.client->Wait("job/1/m0", {"never"}, f.In(20000)); });
  std::this_thread::sleep_for(milliseconds(100));
  EXPECT_TRUE(f.client->DropPrefix("job/1", f.In(5000)).ok());
  ASSERT_EQ(waiting.wait_for(std::chrono::seconds(5)), std::future_status::ready);
  Status s = waiting.get();
  EXPECT_EQ(s.code(), Code::kAborted) << s.ToString();
  EXPECT_NE(s.message().find("dropped"), std::string::npos);
  EXPECT_EQ(f.service.num_prefixes(), 1);
  EXPECT_EQ(f.client->Get("job/1", "k", f.In(5000)).status().code(), Code::kNotFound);
  EXPECT_TRUE(f.client->Get("job/10", "k", f.In(5000)).ok());
  EXPECT_EQ(f.service.DropPrefix("job/10"), 1);
  EXPECT_EQ(f.service.num_prefixes(), 0);
}

TEST(CollectiveStore, ShutdownAnswersPendingWaits) {
  auto f = std::make_unique<StoreFixture>();
  auto client = f->client;
  auto waiting = std::async(std::launch::async, [&] {
    return client->Wait("p", {"never"}, Clock::now() + std::chrono::seconds(20));
  });
  std::this_thread::sleep_for(milliseconds(100));
  f->service.Shutdown();
  ASSERT_EQ(waiting.wait_for(std::chrono::seconds(5)), std::future_status::ready);
  EXPECT_EQ(waiting.get().code(), Code::kUnavailable);
}

TEST(CollectiveStore, UnreachableStoreFailsByTheDeadline) {
  auto client = CollectiveStoreClient::Connect("127.0.0.1:1");
  const auto start = Clock::now();
  Status s = client->Set("p", "k", "v", Clock::now() + milliseconds(300));
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("127.0.0.1:1"), std::string::npos) << s.ToString();
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - start).count(), 3.0);
}

TEST(GlooStore, GlooStoreInterfaceOverTheService) {
  StoreFixture f;
  std::shared_ptr<::gloo::rendezvous::Store> sa = NewGlooStore(f.client, "g", milliseconds(2000));
  std::shared_ptr<::gloo::rendezvous::Store> sb = NewGlooStore(f.client, "h", milliseconds(2000));
  ::gloo::rendezvous::Store& a = *sa;
  ::gloo::rendezvous::Store& b = *sb;
  a.set("k", {'x', 'y'});
  EXPECT_EQ(a.get("k"), (std::vector<char>{'x', 'y'}));
  a.wait({"k"});
  const auto start = Clock::now();
  EXPECT_THROW(b.wait({"k"}, milliseconds(200)), ::gloo::IoException);  // another prefix
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - start).count(), 2.0);
  // get waits for the key.
  auto later = std::async(std::launch::async, [&] { return b.get("late"); });
  std::this_thread::sleep_for(milliseconds(100));
  b.set("late", {'1'});
  ASSERT_EQ(later.wait_for(std::chrono::seconds(5)), std::future_status::ready);
  EXPECT_EQ(later.get(), std::vector<char>{'1'});
}

}  // namespace
}  // namespace flowstate

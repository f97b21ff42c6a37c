// InputPipeline: batching, epochs, shuffling, positions and shutdown.
#include "state/input_pipeline.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <future>
#include <set>
#include <thread>
#include <vector>

namespace flowstate {
namespace {

// n examples: "id" int64 [n] = i, "x" float32 [n, 3] = 10 i + j.
Dataset Range(int64_t n) {
  std::vector<int64_t> ids(static_cast<size_t>(n));
  std::vector<float> x(size_t(n) * 3);
  for (int64_t i = 0; i < n; ++i) {
    ids[size_t(i)] = i;
    for (int j = 0; j < 3; ++j) x[size_t(i * 3 + j)] = float(10 * i + j);
  }
  StatusOr<Dataset> d = Dataset::Make(
      {{"id", Tensor::FromVector(ids)}, {"x", Tensor::FromVector(x, TensorShape({n, 3}))}});
  d.status().CheckOk();
  return *d;
}

InputPipelineOptions Options(int64_t batch_size, int64_t epochs, bool shuffle = false,
                             uint64_t seed = 0) {
  InputPipelineOptions o;
  o.batch_size = batch_size;
  o.epochs = epochs;
  o.shuffle = shuffle;
  o.seed = seed;
  return o;
}

std::unique_ptr<InputPipeline> Make(const Dataset& d, const InputPipelineOptions& o,
                                    PipelinePosition start = {}) {
  StatusOr<std::unique_ptr<InputPipeline>> p = InputPipeline::Create(d, o, start);
  EXPECT_TRUE(p.ok()) << p.status().ToString();
  return p.ok() ? std::move(p).value() : nullptr;
}

std::vector<int64_t> Ids(const Batch& b) {
  auto f = b.components.at("id").flat<int64_t>();
  return {f.begin(), f.end()};
}

// Every batch until OUT_OF_RANGE (at most `limit`).
std::vector<Batch> Drain(InputPipeline* p, int limit = 100000) {
  std::vector<Batch> out;
  for (int i = 0; i < limit; ++i) {
    StatusOr<Batch> b = p->Next();
    if (!b.ok()) {
      EXPECT_EQ(b.status().code(), Code::kOutOfRange) << b.status().ToString();
      break;
    }
    out.push_back(std::move(b).value());
  }
  return out;
}

// Waits (without a deadline assertion) until the producer has filled the
// queue; the pipeline's own waits are condition variables, this is a test.
void WaitForPrefetch(const InputPipeline& p, int n) {
  for (int i = 0; i < 20000 && p.ready_batches() < n; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ASSERT_EQ(p.ready_batches(), n);
}

void ExpectSameBatch(const Batch& a, const Batch& b) {
  EXPECT_EQ(a.epoch, b.epoch);
  EXPECT_EQ(a.offset, b.offset);
  EXPECT_EQ(a.step, b.step);
  EXPECT_EQ(a.size, b.size);
  ASSERT_EQ(a.components.size(), b.components.size());
  for (const auto& [name, t] : a.components) {
    EXPECT_TRUE(TensorsEqual(t, b.components.at(name))) << name << " at step " << a.step;
  }
}

TEST(InputPipeline, BatchesKeepTheLastPartialBatch) {
  auto p = Make(Range(10), Options(4, 1));
  EXPECT_EQ(p->batches_per_epoch(), 3);
  std::vector<Batch> b = Drain(p.get());
  ASSERT_EQ(b.size(), 3u);
  EXPECT_EQ(Ids(b[0]), (std::vector<int64_t>{0, 1, 2, 3}));
  EXPECT_EQ(Ids(b[2]), (std::vector<int64_t>{8, 9}));
  EXPECT_EQ(b[2].size, 2);
  EXPECT_EQ(b[2].offset, 8);
  EXPECT_EQ(b[2].step, 2);
  // Components keep their dtype and example shape.
  const Tensor& x = b[1].components.at("x");
  EXPECT_EQ(x.dtype(), DataType::kFloat32);
  EXPECT_EQ(x.shape(), TensorShape({4, 3}));
  EXPECT_EQ(x.flat<float>()[0], 40.0f);
  EXPECT_EQ(x.flat<float>()[11], 72.0f);
  EXPECT_EQ(b[2].components.at("x").shape(), TensorShape({2, 3}));
  // OUT_OF_RANGE is sticky.
  EXPECT_EQ(p->Next().status().code(), Code::kOutOfRange);
  EXPECT_EQ(p->Next().status().code(), Code::kOutOfRange);
  EXPECT_EQ(p->position(), (PipelinePosition{1, 0}));
}

TEST(InputPipeline, DropRemainderAndEpochs) {
  InputPipelineOptions o = Options(4, 3);
  o.drop_remainder = true;
  auto p = Make(Range(10), o);
  EXPECT_EQ(p->batches_per_epoch(), 2);
  std::vector<Batch> b = Drain(p.get());
  ASSERT_EQ(b.size(), 6u);
  for (size_t i = 0; i < b.size(); ++i) {
    EXPECT_EQ(b[i].size, 4);
    EXPECT_EQ(b[i].epoch, int64_t(i / 2));
    EXPECT_EQ(b[i].step, int64_t(i));
    EXPECT_EQ(Ids(b[i]).front(), int64_t(i % 2) * 4);
  }
  EXPECT_EQ(p->position(), (PipelinePosition{3, 0}));
}

TEST(InputPipeline, UnboundedEpochsAndPositionAdvance) {
  auto p = Make(Range(10), Options(4, 0));
  EXPECT_EQ(p->position(), (PipelinePosition{0, 0}));
  std::vector<PipelinePosition> expected = {{0, 4}, {0, 8}, {1, 0}, {1, 4}};
  for (const PipelinePosition& pos : expected) {
    ASSERT_TRUE(p->Next().ok());
    EXPECT_EQ(p->position(), pos) << p->position().ToString();
  }
  for (int i = 0; i < 200; ++i) ASSERT_TRUE(p->Next().ok());
  EXPECT_EQ(p->position().epoch, 68);
}

TEST(InputPipeline, BatchesDoNotShareTheDatasetBuffers) {
  Dataset d = Range(8);
  auto p = Make(d, Options(8, 2));
  StatusOr<Batch> b = p->Next();
  ASSERT_TRUE(b.ok());
  EXPECT_FALSE(b->components.at("id").SharesBufferWith(*d.Find("id")));
  b->components.at("id").flat<int64_t>()[0] = 99;
  EXPECT_EQ(Ids(*p->Next())[0], 0);
}

TEST(InputPipeline, ShuffleIsSeededAndEachEpochAPermutation) {
  const int64_t n = 50;
  auto order = [&](uint64_t seed) {
    auto p = Make(Range(n), Options(7, 3, /*shuffle=*/true, seed));
    std::vector<std::vector<int64_t>> epochs(3);
    for (const Batch& b : Drain(p.get())) {
      std::vector<int64_t> ids = Ids(b);
      epochs[size_t(b.epoch)].insert(epochs[size_t(b.epoch)].end(), ids.begin(), ids.end());
    }
    return epochs;
  };
  const auto a = order(42);
  EXPECT_EQ(a, order(42));
  EXPECT_NE(a, order(43));
  std::vector<int64_t> identity(n);
  for (int64_t i = 0; i < n; ++i) identity[size_t(i)] = i;
  for (int e = 0; e < 3; ++e) {
    std::vector<int64_t> sorted = a[e];
    std::sort(sorted.begin(), sorted.end());
    EXPECT_EQ(sorted, identity) << "epoch " << e;
    EXPECT_NE(a[e], identity) << "epoch " << e;
    // Any epoch's order is available without replaying the ones before.
    EXPECT_EQ(a[e], EpochOrder(n, true, 42, e));
  }
  EXPECT_NE(a[0], a[1]);
  EXPECT_EQ(EpochOrder(5, false, 42, 3), (std::vector<int64_t>{0, 1, 2, 3, 4}));
  // Rows move together: x follows id.
  auto p = Make(Range(n), Options(n, 1, true, 7));
  Batch b = *p->Next();
  for (int64_t i = 0; i < n; ++i) {
    EXPECT_EQ(b.components.at("x").flat<float>()[size_t(i * 3 + 2)],
              float(10 * Ids(b)[size_t(i)] + 2));
  }
}

TEST(InputPipeline, MaxExamplesUsesTheFirstExamples) {
  InputPipelineOptions o = Options(4, 2, true, 1);
  o.max_examples = 10;
  auto p = Make(Range(100), o);
  EXPECT_EQ(p->examples_per_epoch(), 10);
  std::vector<Batch> b = Drain(p.get());
  ASSERT_EQ(b.size(), 6u);
  std::multiset<int64_t> seen;
  for (const Batch& batch : b) {
    for (int64_t id : Ids(batch)) seen.insert(id);
  }
  EXPECT_EQ(seen.size(), 20u);
  for (int64_t i = 0; i < 10; ++i) EXPECT_EQ(seen.count(i), 2u) << i;
  // Larger than the dataset: all of it.
  o.max_examples = 1000;
  EXPECT_EQ(Make(Range(100), o)->examples_per_epoch(), 100);
}

TEST(InputPipeline, InvalidOptionsAreRefused) {
  const Dataset d = Range(10);
  auto code = [&](InputPipelineOptions o, PipelinePosition start = {}) {
    return InputPipeline::Create(d, o, start).status().code();
  };
  EXPECT_EQ(code(Options(0, 1)), Code::kInvalidArgument);
  EXPECT_EQ(code(Options(4, -1)), Code::kInvalidArgument);
  InputPipelineOptions o = Options(4, 1);
  o.prefetch = -1;
  EXPECT_EQ(code(o), Code::kInvalidArgument);
  o = Options(11, 1);
  o.drop_remainder = true;  // no batch at all
  EXPECT_EQ(code(o), Code::kInvalidArgument);
  o = Options(4, 1);
  o.max_examples = 0;
  EXPECT_EQ(code(o), Code::kInvalidArgument);
  o.max_examples = -2;
  EXPECT_EQ(code(o), Code::kInvalidArgument);
  EXPECT_EQ(InputPipeline::Create(Dataset(), Options(4, 1)).status().code(),
            Code::kInvalidArgument);
  // Starts: not a batch boundary, negative, past the end.
  EXPECT_EQ(code(Options(4, 2), {0, 3}), Code::kInvalidArgument);
  EXPECT_EQ(code(Options(4, 2), {0, 11}), Code::kInvalidArgument);
  EXPECT_EQ(code(Options(4, 2), {-1, 0}), Code::kInvalidArgument);
  EXPECT_EQ(code(Options(4, 2), {2, 4}), Code::kInvalidArgument);
  EXPECT_EQ(code(Options(4, 2), {3, 0}), Code::kInvalidArgument);
  EXPECT_EQ(code(Options(4, 2), {1, 10}), Code::kOk);  // == {2, 0}: the end
  EXPECT_EQ(code(Options(4, 0), {1000, 8}), Code::kOk);
}

TEST(InputPipeline, StartAtTheEndIsOutOfRange) {
  auto p = Make(Range(10), Options(4, 2), {1, 10});
  EXPECT_EQ(p->position(), (PipelinePosition{2, 0}));
  EXPECT_EQ(p->Next().status().code(), Code::kOutOfRange);
}

// Restoring at any position a run reported yields that run's remaining
// batches, for every prefetch depth, with prefetched batches outstanding.
TEST(InputPipeline, RestoredPositionYieldsTheSameBatches) {
  const Dataset d = Range(23);
  for (bool drop : {false, true}) {
    for (int prefetch : {0, 1, 4}) {
      SCOPED_TRACE("drop_remainder " + std::to_string(drop) + ", prefetch " +
                   std::to_string(prefetch));
      InputPipelineOptions o = Options(5, 3, /*shuffle=*/true, /*seed=*/99);
      o.drop_remainder = drop;
      o.prefetch = prefetch;
      auto original = Make(d, o);
      const int total = 3 * (drop ? 4 : 5);
      std::vector<PipelinePosition> positions;
      std::vector<Batch> reference;
      while (true) {
        if (prefetch > 0 && !reference.empty() && reference.size() % 3 == 0) {
          // The producer is ahead; position() must not count its batches.
          WaitForPrefetch(*original, std::min(prefetch, total - int(reference.size())));
        }
        positions.push_back(original->position());
        StatusOr<Batch> b = original->Next();
        if (!b.ok()) break;
        reference.push_back(std::move(b).value());
      }
      ASSERT_EQ(reference.size(), size_t(total));
      for (size_t k = 0; k < positions.size(); ++k) {
        EXPECT_EQ(positions[k].offset, k < reference.size() ? reference[k].offset : 0);
        auto restored = Make(d, o, positions[k]);
        ASSERT_NE(restored, nullptr);
        EXPECT_EQ(restored->position(), positions[k]);
        std::vector<Batch> rest = Drain(restored.get());
        ASSERT_EQ(rest.size(), reference.size() - k) << "restored at " << positions[k].ToString();
        for (size_t i = 0; i < rest.size(); ++i) ExpectSameBatch(rest[i], reference[k + i]);
      }
    }
  }
}

TEST(InputPipeline, RestoreMidEpochOfALaterEpoch) {
  const Dataset d = Range(40);
  InputPipelineOptions o = Options(8, 0, true, 5);
  auto original = Make(d, o);
  for (int i = 0; i < 17; ++i) ASSERT_TRUE(original->Next().ok());
  const PipelinePosition saved = original->position();
  EXPECT_EQ(saved, (PipelinePosition{3, 16}));
  WaitForPrefetch(*original, o.prefetch);
  EXPECT_EQ(original->position(), saved);
  auto restored = Make(d, o, saved);
  for (int i = 0; i < 12; ++i) {
    StatusOr<Batch> a = original->Next();
    StatusOr<Batch> b = restored->Next();
    ASSERT_TRUE(a.ok() && b.ok());
    ExpectSameBatch(*a, *b);
  }
  EXPECT_EQ(original->position(), restored->position());
}

TEST(InputPipeline, DestroyWhileTheProducerIsBlockedOnAFullQueue) {
  InputPipelineOptions o = Options(2, 0);
  o.prefetch = 2;
  auto p = Make(Range(10), o);
  WaitForPrefetch(*p, 2);
  // The producer is blocked: 5 batches an epoch, yet the queue stays at 2.
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(p->ready_batches(), 2);
  // The destructor joins the blocked producer, promptly (a hung join would
  // fail here, not stall the suite).
  auto destroyed = std::async(std::launch::async, [&] { p.reset(); });
  ASSERT_EQ(destroyed.wait_for(std::chrono::seconds(10)), std::future_status::ready)
      << "destroying the pipeline did not return: its blocked producer was not woken";
  EXPECT_EQ(p, nullptr);
  // And without ever waiting: also joined promptly.
  auto again = std::async(std::launch::async, [&] { Make(Range(10), o).reset(); });
  ASSERT_EQ(again.wait_for(std::chrono::seconds(10)), std::future_status::ready);
}

TEST(InputPipeline, CancelWakesABlockedConsumer) {
  InputPipelineOptions o = Options(1, 0);
  o.prefetch = 1;
  auto p = Make(Range(1000), o);
  std::thread consumer([&] {
    while (true) {
      StatusOr<Batch> b = p->Next();
      if (!b.ok()) {
        EXPECT_EQ(b.status().code(), Code::kCancelled);
        break;
      }
    }
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(5));
  p->Cancel();
  consumer.join();
  EXPECT_EQ(p->Next().status().code(), Code::kCancelled);
  p->Cancel();  // idempotent
}

TEST(InputPipeline, DebugStringNamesTheSetup) {
  auto p = Make(Range(10), Options(4, 2, true, 3));
  const std::string s = p->DebugString();
  EXPECT_NE(s.find("batch_size 4"), std::string::npos) << s;
  EXPECT_NE(s.find("seed 3"), std::string::npos) << s;
  EXPECT_NE(s.find("epoch 0, offset 0"), std::string::npos) << s;
}

}  // namespace
}  // namespace flowstate

#include "devices/caching_allocator.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <mutex>
#include <random>
#include <thread>
#include <unordered_map>
#include <vector>

#include "devices/cpu/cpu_device.h"
#include "devices/device.h"
#include "graph/tensor.h"

namespace flowstate {
namespace {

// A base allocator that records every live block, optionally refusing to
// hold more than `limit` bytes. Thread-safe.
class CountingAllocator final : public Allocator {
 public:
  explicit CountingAllocator(int64_t limit = 0) : limit_(limit) {}
  std::string_view Name() const override { return "counting"; }
  void* Allocate(size_t bytes, size_t alignment) override {
    std::lock_guard<std::mutex> l(mu_);
    if (limit_ > 0 && live_bytes_ + int64_t(bytes) > limit_) return nullptr;
    void* p = HostAllocator()->Allocate(bytes, alignment);
    live_[p] = bytes;
    live_bytes_ += int64_t(bytes);
    ++allocs_;
    return p;
  }
  void Deallocate(void* ptr, size_t bytes) override {
    std::lock_guard<std::mutex> l(mu_);
    auto it = live_.find(ptr);
    ASSERT_NE(it, live_.end()) << "freed a block the base never made";
    EXPECT_EQ(it->second, bytes) << "freed with another size than allocated";
    live_bytes_ -= int64_t(it->second);
    live_.erase(it);
    ++frees_;
    HostAllocator()->Deallocate(ptr, bytes);
  }
  int64_t live_blocks() const {
    std::lock_guard<std::mutex> l(mu_);
    return int64_t(live_.size());
  }
  int64_t live_bytes() const {
    std::lock_guard<std::mutex> l(mu_);
    return live_bytes_;
  }
  int64_t allocs() const {
    std::lock_guard<std::mutex> l(mu_);
    return allocs_;
  }
  int64_t frees() const {
    std::lock_guard<std::mutex> l(mu_);
    return frees_;
  }
  ~CountingAllocator() override { EXPECT_TRUE(live_.empty()) << live_.size() << " block(s) leaked"; }

 private:
  mutable std::mutex mu_;
  int64_t limit_;
  std::unordered_map<void*, size_t> live_;
  int64_t live_bytes_ = 0, allocs_ = 0, frees_ = 0;
};

constexpr size_t kKiB = 1024;

TEST(CachingAllocator, SizeClassesAreFourPerPowerOfTwo) {
  CountingAllocator base;
  CachingAllocator a("test", &base);
  EXPECT_EQ(a.PooledSize(100), 100u);  // small: not pooled, not rounded
  EXPECT_EQ(a.PooledSize(4095), 4095u);
  EXPECT_EQ(a.PooledSize(4096), 4096u);
  EXPECT_EQ(a.PooledSize(4097), 5120u);
  EXPECT_EQ(a.PooledSize(6000), 6144u);
  EXPECT_EQ(a.PooledSize(8192), 8192u);
  EXPECT_EQ(a.PooledSize(8193), 10240u);
  EXPECT_EQ(a.PooledSize(256 * kKiB), 256 * kKiB);        // 128x512 floats
  EXPECT_EQ(a.PooledSize(128 * 784 * 4), 448 * kKiB);    // 128x784 floats
  for (size_t b = 4096; b < (size_t{64} << 20); b = b * 9 / 8 + 1) {
    size_t s = a.PooledSize(b);
    EXPECT_GE(s, b);
    EXPECT_LE(s, b + b / 4) << b;  // at most 25% lost to rounding
    EXPECT_EQ(a.PooledSize(s), s) << b;  // a class size is its own class
  }
}

TEST(CachingAllocator, ReusesAFreedBlockOfTheSameClass) {
  CountingAllocator base;
  CachingAllocator a("test", &base);
  void* p = a.Allocate(10000, 64);
  ASSERT_NE(p, nullptr);
  std::memset(p, 1, 10000);
  a.Deallocate(p, 10000);
  EXPECT_EQ(base.live_blocks(), 1);  // kept, not freed
  EXPECT_EQ(a.Stats().bytes_cached, 10240);
  void* q = a.Allocate(9000, 64);  // same class (10 KiB)
  EXPECT_EQ(q, p);
  EXPECT_EQ(base.allocs(), 1);
  EXPECT_EQ(a.Stats().bytes_cached, 0);
  void* r = a.Allocate(20000, 64);  // another class: a fresh block
  EXPECT_NE(r, p);
  EXPECT_EQ(base.allocs(), 2);
  CachingAllocator::CacheStats s = a.GetCacheStats();
  EXPECT_EQ(s.hits, 1);
  EXPECT_EQ(s.misses, 2);
  a.Deallocate(q, 9000);
  a.Deallocate(r, 20000);
  EXPECT_EQ(a.GetCacheStats().blocks_cached, 2);
}

TEST(CachingAllocator, SmallBlocksGoStraightToTheBase) {
  CountingAllocator base;
  CachingAllocator a("test", &base);
  void* p = a.Allocate(100, 64);
  EXPECT_EQ(base.live_bytes(), 100);
  a.Deallocate(p, 100);
  EXPECT_EQ(base.live_blocks(), 0);
  EXPECT_EQ(a.Stats().bytes_cached, 0);
  EXPECT_EQ(a.GetCacheStats().hits + a.GetCacheStats().misses, 0);
}

TEST(CachingAllocator, CachedBytesStayWithinTheBound) {
  CountingAllocator base;
  CachingAllocator a("test", &base, 64 * kKiB);
  std::vector<void*> blocks;
  for (int i = 0; i < 10; ++i) blocks.push_back(a.Allocate(16 * kKiB, 64));
  for (void* p : blocks) a.Deallocate(p, 16 * kKiB);
  CachingAllocator::CacheStats s = a.GetCacheStats();
  EXPECT_EQ(s.bytes_cached, int64_t(64 * kKiB));
  EXPECT_EQ(s.blocks_cached, 4);
  EXPECT_EQ(s.releases, 6);
  EXPECT_EQ(base.live_blocks(), 4);
  // A block larger than the whole bound is never pooled or rounded.
  void* big = a.Allocate(100 * kKiB, 64);
  EXPECT_EQ(base.live_bytes(), int64_t(64 * kKiB + 100 * kKiB));
  a.Deallocate(big, 100 * kKiB);
  EXPECT_EQ(base.live_blocks(), 4);
}

TEST(CachingAllocator, ZeroBoundCachesNothing) {
  CountingAllocator base;
  CachingAllocator a("test", &base, 0);
  void* p = a.Allocate(1 << 20, 64);
  a.Deallocate(p, 1 << 20);
  EXPECT_EQ(base.live_blocks(), 0);
  EXPECT_EQ(base.allocs(), 1);
}

TEST(CachingAllocator, HonoursAlignment) {
  CountingAllocator base;
  CachingAllocator a("test", &base);
  for (size_t align = 8; align <= CachingAllocator::kPooledAlignment; align *= 2) {
    for (size_t bytes : {size_t{64}, size_t{5000}, size_t{300 * kKiB}}) {
      // Twice: a fresh block, then (for pooled sizes) a reused one.
      for (int round = 0; round < 2; ++round) {
        void* p = a.Allocate(bytes, align);
        ASSERT_NE(p, nullptr);
        EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % align, 0u) << bytes << " " << align;
        a.Deallocate(p, bytes);
      }
    }
  }
  // Pooled sizes refuse alignments above a page; small ones go to the base.
  EXPECT_EQ(a.Allocate(5000, 8192), nullptr);
  void* p = a.Allocate(64, 8192);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 8192, 0u);
  a.Deallocate(p, 64);
}

TEST(CachingAllocator, DestructionAndReleaseGiveEverythingBack) {
  CountingAllocator base;
  {
    CachingAllocator a("test", &base);
    std::vector<std::pair<void*, size_t>> blocks;
    for (size_t b = 4096; b < (size_t{4} << 20); b = b * 3 / 2) {
      blocks.push_back({a.Allocate(b, 64), b});
      blocks.push_back({a.Allocate(b, 64), b});
    }
    for (auto [p, b] : blocks) a.Deallocate(p, b);
    EXPECT_EQ(base.live_blocks(), int64_t(blocks.size()));
    EXPECT_EQ(a.Stats().bytes_cached, base.live_bytes());
    a.ReleaseCached();
    EXPECT_EQ(base.live_blocks(), 0);
    EXPECT_EQ(a.Stats().bytes_cached, 0);
    EXPECT_EQ(a.GetCacheStats().blocks_cached, 0);
    for (auto& [p, b] : blocks) p = a.Allocate(b, 64);
    for (auto [p, b] : blocks) a.Deallocate(p, b);
    EXPECT_GT(base.live_blocks(), 0);
  }
  EXPECT_EQ(base.live_blocks(), 0);  // the destructor freed the cache
  EXPECT_EQ(base.allocs(), base.frees());
}

TEST(CachingAllocator, EmptiesTheCacheWhenTheBaseRefuses) {
  CountingAllocator base(/*limit=*/256 * kKiB);
  CachingAllocator a("test", &base);
  std::vector<void*> blocks;
  for (int i = 0; i < 4; ++i) blocks.push_back(a.Allocate(64 * kKiB, 64));
  EXPECT_EQ(a.Allocate(64 * kKiB, 64), nullptr);  // the base is full, nothing cached
  for (void* p : blocks) a.Deallocate(p, 64 * kKiB);
  // Another class: the cached 64 KiB blocks are given back to make room.
  void* p = a.Allocate(200 * kKiB, 64);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(a.Stats().bytes_cached, 0);
  a.Deallocate(p, 200 * kKiB);
}

TEST(CachingAllocator, ConcurrentAllocateAndFree) {
  CountingAllocator base;
  {
    CachingAllocator a("test", &base, 8 << 20);
    constexpr int kThreads = 4, kIters = 20000;
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&a, t] {
        std::mt19937 rng(t);
        const size_t sizes[] = {64, 4096, 5000, 100 * kKiB, 256 * kKiB, 300 * kKiB};
        struct Live {
          unsigned char* p;
          size_t bytes;
          unsigned char tag;
        };
        std::vector<Live> live;
        for (int i = 0; i < kIters; ++i) {
          if (live.size() < 8 && (live.empty() || rng() % 2 == 0)) {
            size_t b = sizes[rng() % 6];
            auto* p = static_cast<unsigned char*>(a.Allocate(b, 64));
            ASSERT_NE(p, nullptr);
            ASSERT_EQ(reinterpret_cast<uintptr_t>(p) % 64, 0u);
            unsigned char tag = static_cast<unsigned char>(rng());
            // The first and last bytes and one in the middle: enough to see
            // a block handed to two owners at once.
            p[0] = p[b / 2] = p[b - 1] = tag;
            live.push_back({p, b, tag});
          } else {
            size_t k = rng() % live.size();
            Live l = live[k];
            ASSERT_EQ(l.p[0], l.tag);
            ASSERT_EQ(l.p[l.bytes / 2], l.tag);
            ASSERT_EQ(l.p[l.bytes - 1], l.tag);
            a.Deallocate(l.p, l.bytes);
            live[k] = live.back();
            live.pop_back();
          }
        }
        for (const Live& l : live) a.Deallocate(l.p, l.bytes);
      });
    }
    for (std::thread& th : threads) th.join();
    CachingAllocator::CacheStats s = a.GetCacheStats();
    EXPECT_LE(s.bytes_cached, 8 << 20);
    EXPECT_EQ(s.bytes_cached, base.live_bytes());  // nothing is in use
    EXPECT_GT(s.hits, s.misses);
  }
  EXPECT_EQ(base.live_blocks(), 0);
}

TEST(CachingAllocator, TrackingAllocatorAboveItCountsTensorBytes) {
  CountingAllocator base;
  CachingAllocator cache("cache", &base);
  TrackingAllocator tracking("dev", &cache, /*bytes_limit=*/1 << 20);
  void* p = tracking.Allocate(5000, 64);
  AllocatorStats s = tracking.Stats();
  EXPECT_EQ(s.bytes_in_use, 5000);  // what was asked for, not the class size
  EXPECT_EQ(s.bytes_cached, 0);
  tracking.Deallocate(p, 5000);
  s = tracking.Stats();
  EXPECT_EQ(s.bytes_in_use, 0);
  EXPECT_EQ(s.peak_bytes_in_use, 5000);
  EXPECT_EQ(s.bytes_cached, 5120);
  // The limit applies to bytes in use; cached blocks do not count against it.
  void* q = tracking.Allocate(1 << 20, 64);
  EXPECT_NE(q, nullptr);
  EXPECT_EQ(tracking.Allocate(1, 64), nullptr);
  tracking.Deallocate(q, 1 << 20);
}

TEST(CachingAllocator, CpuDeviceBoundsItsCache) {
  DeviceName n;
  n.type = "CPU";
  n.id = 0;
  EXPECT_EQ(CpuDevice(n, 1, 0).cache()->max_cached_bytes(),
            CachingAllocator::kDefaultMaxCachedBytes);
  EXPECT_EQ(CpuDevice(n, 1, 64 << 20).cache()->max_cached_bytes(), 16 << 20);
  EXPECT_EQ(CpuDevice(n, 1, 64 << 20, 1 << 20).cache()->max_cached_bytes(), 1 << 20);
  CpuDevice d(n, 1, 0, 0);
  EXPECT_EQ(d.cache()->max_cached_bytes(), 0);
  {
    Tensor t = Tensor::Allocate(d.allocator(), DataType::kFloat32, TensorShape({128, 512})).value();
    EXPECT_EQ(d.allocator()->Stats().bytes_in_use, 128 * 512 * 4);
  }
  EXPECT_EQ(d.allocator()->Stats().bytes_cached, 0);
  CpuDevice e(n, 1, 0);
  {
    Tensor t = Tensor::Allocate(e.allocator(), DataType::kFloat32, TensorShape({128, 512})).value();
  }
  EXPECT_EQ(e.allocator()->Stats().bytes_in_use, 0);
  EXPECT_EQ(e.allocator()->Stats().bytes_cached, 128 * 512 * 4);
}

}  // namespace
}  // namespace flowstate

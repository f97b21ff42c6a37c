#include "devices/caching_allocator.h"
#include "graph/mutex.h"

#include <algorithm>
#include <bit>

namespace flowstate {
namespace {

// Pooled sizes stop at 1 TiB, which bounds the number of classes.
constexpr int64_t kMaxPooledBytes = int64_t{1} << 40;
constexpr int kMinPooledLog2 = 12;  // log2(kMinPooledBytes)
static_assert(size_t{1} << kMinPooledLog2 == CachingAllocator::kMinPooledBytes);

// A size in (2^m, 2^(m+1)] rounds up to a multiple of 2^(m-2): 1.25, 1.5,
// 1.75 or 2 times 2^m. REQUIRES: bytes >= kMinPooledBytes.
struct Class {
  int index;
  size_t size;
};
Class ClassOf(size_t bytes) {
  size_t n = bytes - 1;
  int msb = std::bit_width(n) - 1;  // >= kMinPooledLog2 - 1
  int shift = msb - 2;
  size_t q = n >> shift;  // in [4, 7]
  return {(msb - (kMinPooledLog2 - 1)) * 4 + int(q) - 7, (q + 1) << shift};
}

// The size of the blocks of class `index` (the inverse of ClassOf).
size_t ClassSize(int index) {
  int msb = (index + 3) / 4 + (kMinPooledLog2 - 1);
  size_t q = size_t((index + 3) % 4) + 4;
  return (q + 1) << (msb - 2);
}

}  // namespace

CachingAllocator::CachingAllocator(std::string name, Allocator* base, int64_t max_cached_bytes)
    : name_(std::move(name)),
      base_(base),
      max_cached_(std::clamp<int64_t>(max_cached_bytes, 0, kMaxPooledBytes)) {
  if (max_cached_ >= int64_t(kMinPooledBytes)) {
    classes_ = std::make_unique<SizeClass[]>(size_t(ClassOf(size_t(max_cached_)).index) + 1);
  } else {
    max_cached_ = 0;
  }
}

CachingAllocator::~CachingAllocator() { ReleaseCached(); }

size_t CachingAllocator::PooledSize(size_t bytes) const {
  return Pooled(bytes) ? ClassOf(bytes).size : bytes;
}

void* CachingAllocator::AllocateFromBase(size_t bytes, size_t alignment) {
  void* p = base_->Allocate(bytes, alignment);
  if (p == nullptr && cached_bytes_.load(std::memory_order_relaxed) > 0) {
    ReleaseCached();
    p = base_->Allocate(bytes, alignment);
  }
  return p;
}

void* CachingAllocator::Allocate(size_t bytes, size_t alignment) {
  if (!Pooled(bytes)) return AllocateFromBase(bytes, alignment);
  if (alignment > kPooledAlignment) return nullptr;
  Class c = ClassOf(bytes);
  SizeClass& sc = classes_[size_t(c.index)];
  void* p = nullptr;
  {
    MutexLock l(sc.mu);
    if (!sc.free.empty()) {
      p = sc.free.back();
      sc.free.pop_back();
    }
  }
  if (p != nullptr) {
    cached_bytes_.fetch_sub(int64_t(c.size), std::memory_order_relaxed);
    cached_blocks_.fetch_sub(1, std::memory_order_relaxed);
    hits_.fetch_add(1, std::memory_order_relaxed);
    return p;
  }
  misses_.fetch_add(1, std::memory_order_relaxed);
  return AllocateFromBase(c.size, kPooledAlignment);
}

void CachingAllocator::Deallocate(void* ptr, size_t bytes) {
  if (ptr == nullptr) return;
  if (!Pooled(bytes)) {
    base_->Deallocate(ptr, bytes);
    return;
  }
  Class c = ClassOf(bytes);
  // Reserve room in the bound first, so that concurrent frees cannot
  // overshoot it together.
  int64_t now = cached_bytes_.fetch_add(int64_t(c.size), std::memory_order_relaxed) +
                int64_t(c.size);
  if (now > max_cached_) {
    cached_bytes_.fetch_sub(int64_t(c.size), std::memory_order_relaxed);
    releases_.fetch_add(1, std::memory_order_relaxed);
    base_->Deallocate(ptr, c.size);
    return;
  }
  SizeClass& sc = classes_[size_t(c.index)];
  {
    MutexLock l(sc.mu);
    sc.free.push_back(ptr);
  }
  cached_blocks_.fetch_add(1, std::memory_order_relaxed);
}

void CachingAllocator::ReleaseCached() {
  if (classes_ == nullptr) return;
  int n = ClassOf(size_t(max_cached_)).index + 1;
  std::vector<void*> blocks;
  for (int i = 0; i < n; ++i) {
    SizeClass& sc = classes_[size_t(i)];
    {
      MutexLock l(sc.mu);
      if (sc.free.empty()) continue;
      blocks.swap(sc.free);
    }
    size_t size = ClassSize(i);
    for (void* p : blocks) base_->Deallocate(p, size);
    cached_bytes_.fetch_sub(int64_t(size * blocks.size()), std::memory_order_relaxed);
    cached_blocks_.fetch_sub(int64_t(blocks.size()), std::memory_order_relaxed);
    blocks.clear();
  }
}

AllocatorStats CachingAllocator::Stats() const {
  AllocatorStats s;
  s.bytes_cached = cached_bytes_.load(std::memory_order_relaxed);
  return s;
}

CachingAllocator::CacheStats CachingAllocator::GetCacheStats() const {
  CacheStats s;
  s.bytes_cached = cached_bytes_.load(std::memory_order_relaxed);
  s.blocks_cached = cached_blocks_.load(std::memory_order_relaxed);
  s.hits = hits_.load(std::memory_order_relaxed);
  s.misses = misses_.load(std::memory_order_relaxed);
  s.releases = releases_.load(std::memory_order_relaxed);
  return s;
}

}  // namespace flowstate

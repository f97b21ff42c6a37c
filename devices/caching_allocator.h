// CachingAllocator: a buffer pool in front of another allocator. Blocks of
// kMinPooledBytes and more are rounded up to a size class (four classes per
// power of two, so at most 25% is lost to rounding) and, when freed, kept on
// that class's free list to be handed out again instead of being returned
// to the base allocator. That saves the page faults a fresh large block
// costs on every training step (glibc gives blocks above its mmap threshold
// back to the kernel). The cache holds at most max_cached_bytes; a freed
// block that would take it past that goes back to the base allocator.
// Smaller blocks, and blocks larger than max_cached_bytes, go straight to
// the base allocator.
//
// Ownership: the base allocator must outlive this. The destructor returns
// every cached block to the base; blocks still in use at that point must
// not be deallocated afterwards (as with any allocator, it must outlive
// the buffers it made).
//
// Thread-safe: each size class has its own mutex, held only to push or pop
// one pointer; the cached-byte count is an atomic.
#ifndef FLOWSTATE_DEVICES_CACHING_ALLOCATOR_H_
#define FLOWSTATE_DEVICES_CACHING_ALLOCATOR_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "graph/allocator.h"
#include "graph/mutex.h"

namespace flowstate {

class CachingAllocator final : public Allocator {
 public:
  // Blocks below this size are not pooled.
  static constexpr size_t kMinPooledBytes = 4096;
  // Every pooled block is aligned to this (a page); Allocate refuses larger
  // alignments for pooled sizes (returns nullptr).
  static constexpr size_t kPooledAlignment = 4096;
  // The default bound on cached bytes.
  static constexpr int64_t kDefaultMaxCachedBytes = int64_t{256} << 20;

  // `base` must outlive this. max_cached_bytes 0 turns caching off (every
  // call goes to the base).
  CachingAllocator(std::string name, Allocator* base,
                   int64_t max_cached_bytes = kDefaultMaxCachedBytes);
  ~CachingAllocator() override;
  CachingAllocator(const CachingAllocator&) = delete;
  CachingAllocator& operator=(const CachingAllocator&) = delete;

  std::string_view Name() const override { return name_; }
  // A pooled size is served from its class's free list when it has a block,
  // else from the base (at the class's size); if the base refuses, the cache
  // is emptied and the base asked once more.
  void* Allocate(size_t bytes, size_t alignment) override;
  void Deallocate(void* ptr, size_t bytes) override;
  // bytes_cached is the only figure filled in here (devices count the
  // tensors' bytes in a TrackingAllocator above this one).
  AllocatorStats Stats() const override;

  struct CacheStats {
    int64_t bytes_cached = 0;  // in free lists, at class sizes
    int64_t blocks_cached = 0;
    int64_t hits = 0;          // pooled allocations served from a free list
    int64_t misses = 0;        // pooled allocations that went to the base
    int64_t releases = 0;      // freed pooled blocks given back to the base
  };
  CacheStats GetCacheStats() const;

  // Gives every cached block back to the base allocator.
  void ReleaseCached();

  int64_t max_cached_bytes() const { return max_cached_; }

  // The size a request of `bytes` is rounded up to; `bytes` itself when it
  // is not pooled. Exposed for tests.
  size_t PooledSize(size_t bytes) const;

 private:
  struct alignas(64) SizeClass {
    Mutex mu;
    std::vector<void*> free ABSL_GUARDED_BY(mu);
  };

  // Whether blocks of `bytes` go through the free lists.
  bool Pooled(size_t bytes) const {
    return bytes >= kMinPooledBytes && int64_t(bytes) <= max_cached_;
  }
  void* AllocateFromBase(size_t bytes, size_t alignment);

  std::string name_;
  Allocator* base_;
  int64_t max_cached_;
  std::unique_ptr<SizeClass[]> classes_;  // indexed by ClassIndex(bytes)
  std::atomic<int64_t> cached_bytes_{0};
  std::atomic<int64_t> cached_blocks_{0};
  std::atomic<int64_t> hits_{0};
  std::atomic<int64_t> misses_{0};
  std::atomic<int64_t> releases_{0};
};

}  // namespace flowstate

#endif  // FLOWSTATE_DEVICES_CACHING_ALLOCATOR_H_

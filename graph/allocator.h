// Allocator: where tensor memory comes from.
//
// An Allocator hands out aligned blocks and takes them back; devices/ wraps
// one per device to track bytes in use and the peak. Implementations must be
// thread-safe: kernels of concurrent steps allocate at the same time. The
// allocator of a Tensor's buffer must outlive the buffer.
#ifndef FLOWSTATE_GRAPH_ALLOCATOR_H_
#define FLOWSTATE_GRAPH_ALLOCATOR_H_

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace flowstate {

// Every tensor buffer is aligned to this many bytes (a cache line, and the
// widest vector register of AVX-512).
inline constexpr size_t kTensorAlignment = 64;

struct AllocatorStats {
  int64_t bytes_in_use = 0;
  int64_t peak_bytes_in_use = 0;
  int64_t num_allocs = 0;
  int64_t bytes_limit = 0;  // 0: no limit
  // Freed blocks an allocator keeps for reuse (not in use by any tensor, not
  // counted in bytes_in_use); see devices/caching_allocator.h.
  int64_t bytes_cached = 0;
};

class Allocator {
 public:
  virtual ~Allocator() = default;
  virtual std::string_view Name() const = 0;
  // Returns nullptr when the memory is not available. REQUIRES: alignment is
  // a power of two.
  virtual void* Allocate(size_t bytes, size_t alignment) = 0;
  // REQUIRES: ptr came from Allocate(bytes, ...) of this allocator.
  virtual void Deallocate(void* ptr, size_t bytes) = 0;
  virtual AllocatorStats Stats() const { return {}; }
};

// The process-wide host allocator (aligned operator new, no tracking).
// Never destroyed.
Allocator* HostAllocator();

}  // namespace flowstate

#endif  // FLOWSTATE_GRAPH_ALLOCATOR_H_

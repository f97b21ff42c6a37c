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

// The process-wide host allocator (posix_memalign, no tracking). Never
// destroyed.
//
// Blocks of at least HostHugePageMinBytes() are aligned to 2 MiB and, on
// Linux, advised to the kernel as transparent huge pages (MADV_HUGEPAGE):
// a big embedding table and its optimizer slots, read at random rows, then
// take a TLB miss per 2 MiB instead of per 4 KiB page (BENCHMARKS.md,
// "Sparse embeddings"). Where the kernel's THP setting is "never" the advice
// does nothing; where memory is fragmented the first touch of such a block
// may wait for the kernel to compact memory.
Allocator* HostAllocator();

// The default of HostHugePageMinBytes(): 64 MiB.
inline constexpr size_t kDefaultHugePageMinBytes = size_t{64} << 20;
// The size from which host blocks are advised as huge pages; 0: none.
// Thread-safe (an atomic); set once at start-up, from the configuration's
// devices.huge_pages_min_bytes. Blocks already allocated keep their advice.
size_t HostHugePageMinBytes();
void SetHostHugePageMinBytes(size_t bytes);

// Advises the whole pages of [p, p + bytes) as transparent huge pages, when
// `bytes` is at least 4 MiB and huge pages are not turned off
// (HostHugePageMinBytes() is not 0): for a large
// buffer that another allocator made (a request body, a response string)
// before it is first written, so that writing it faults once per 2 MiB
// instead of once per 4 KiB. Advice only; does nothing elsewhere than Linux.
void AdviseHostHugePages(void* p, size_t bytes);

}  // namespace flowstate

#endif  // FLOWSTATE_GRAPH_ALLOCATOR_H_

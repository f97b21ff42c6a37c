#include "graph/allocator.h"

#include <atomic>
#include <cstdint>
#include <cstdlib>

#ifdef __linux__
#include <sys/mman.h>
#include <unistd.h>
#endif

namespace flowstate {
namespace {

constexpr size_t kHugePageBytes = size_t{2} << 20;

std::atomic<size_t>& HugePageMinBytes() {
  static std::atomic<size_t> bytes{kDefaultHugePageMinBytes};
  return bytes;
}

class HostAllocatorImpl final : public Allocator {
 public:
  std::string_view Name() const override { return "host"; }
  void* Allocate(size_t bytes, size_t alignment) override {
    if (alignment < sizeof(void*)) alignment = sizeof(void*);
    void* p = nullptr;
    const size_t huge_from = HostHugePageMinBytes();
    if (huge_from > 0 && bytes >= huge_from && alignment <= kHugePageBytes) {
      if (posix_memalign(&p, kHugePageBytes, bytes) != 0) return nullptr;
#ifdef __linux__
      // Advice only: refused (EINVAL without THP), the block stays usable.
      (void)madvise(p, bytes, MADV_HUGEPAGE);
#endif
      return p;
    }
    if (posix_memalign(&p, alignment, bytes == 0 ? 1 : bytes) != 0) return nullptr;
    return p;
  }
  void Deallocate(void* ptr, size_t bytes) override { std::free(ptr); }
};

}  // namespace

size_t HostHugePageMinBytes() { return HugePageMinBytes().load(std::memory_order_relaxed); }

void SetHostHugePageMinBytes(size_t bytes) {
  HugePageMinBytes().store(bytes, std::memory_order_relaxed);
}

void AdviseHostHugePages(void* p, size_t bytes) {
  if (p == nullptr || HostHugePageMinBytes() == 0 || bytes < 2 * kHugePageBytes) return;
#ifdef __linux__
  const uintptr_t page = uintptr_t(sysconf(_SC_PAGESIZE));
  const uintptr_t begin = (uintptr_t(p) + page - 1) / page * page;
  const uintptr_t end = (uintptr_t(p) + bytes) / page * page;
  if (end > begin) (void)madvise(reinterpret_cast<void*>(begin), end - begin, MADV_HUGEPAGE);
#endif
}

Allocator* HostAllocator() {
  static Allocator* a = new HostAllocatorImpl();
  return a;
}

}  // namespace flowstate

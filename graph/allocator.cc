#include "graph/allocator.h"

#include <cstdlib>

namespace flowstate {
namespace {

class HostAllocatorImpl final : public Allocator {
 public:
  std::string_view Name() const override { return "host"; }
  void* Allocate(size_t bytes, size_t alignment) override {
    if (alignment < sizeof(void*)) alignment = sizeof(void*);
    void* p = nullptr;
    if (posix_memalign(&p, alignment, bytes == 0 ? 1 : bytes) != 0) return nullptr;
    return p;
  }
  void Deallocate(void* ptr, size_t bytes) override { std::free(ptr); }
};

}  // namespace

Allocator* HostAllocator() {
  static Allocator* a = new HostAllocatorImpl();
  return a;
}

}  // namespace flowstate

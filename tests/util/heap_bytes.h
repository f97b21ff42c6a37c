// The bytes the process's heap (malloc/new) holds for live blocks now, the
// same measure under every build: glibc's own count (mallinfo2: the arenas'
// blocks in use plus the mmap'd ones) in a plain build, the sanitizer's
// allocator's count under AddressSanitizer or ThreadSanitizer, which
// replace malloc (their count leaves out ASan's quarantine of freed blocks
// and their own metadata, which the resident size of the process includes:
// a bound on RSS measures the sanitizer there, not the code under test).
// Tensors whose allocator maps its own memory are not in it; their bytes
// are the allocator's Stats(). Header-only; thread-safe.
#ifndef FLOWSTATE_TESTS_UTIL_HEAP_BYTES_H_
#define FLOWSTATE_TESTS_UTIL_HEAP_BYTES_H_

#include <malloc.h>

#include <cstddef>
#include <cstdint>

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define FLOWSTATE_TEST_SANITIZER_HEAP 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer) || \
    __has_feature(memory_sanitizer)
#define FLOWSTATE_TEST_SANITIZER_HEAP 1
#endif
#endif

#if defined(FLOWSTATE_TEST_SANITIZER_HEAP)
// sanitizer/allocator_interface.h (not shipped with every compiler's
// headers); every sanitizer runtime that replaces malloc exports it.
extern "C" size_t __sanitizer_get_current_allocated_bytes();
#endif

namespace flowstate::test {

inline int64_t HeapBytesInUse() {
#if defined(FLOWSTATE_TEST_SANITIZER_HEAP)
  return int64_t(__sanitizer_get_current_allocated_bytes());
#else
  const struct mallinfo2 m = mallinfo2();
  return int64_t(m.uordblks + m.hblkhd);
#endif
}

}  // namespace flowstate::test

#endif  // FLOWSTATE_TESTS_UTIL_HEAP_BYTES_H_

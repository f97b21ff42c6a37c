// One libFuzzer target per entry of entries.h: fuzz/CMakeLists.txt builds
// this file once for each, with FLOWSTATE_FUZZ_ENTRY naming the entry.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "fuzz/entries.h"

#ifndef FLOWSTATE_FUZZ_ENTRY
#error "FLOWSTATE_FUZZ_ENTRY must name an entry of fuzz/entries.h"
#endif

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  (void)flowstate::fuzz::FLOWSTATE_FUZZ_ENTRY(
      std::string_view(reinterpret_cast<const char*>(data), size));
  return 0;
}

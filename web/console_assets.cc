#include "web/console_assets.h"

namespace flowstate::web {
namespace internal {
// Written by web/bundle.cmake into the build tree (console_assets_data.cc).
extern const ConsoleAsset kConsoleAssets[];
extern const size_t kNumConsoleAssets;
}  // namespace internal

const ConsoleAsset* FindConsoleAsset(std::string_view name) {
  for (size_t i = 0; i < internal::kNumConsoleAssets; ++i) {
    if (internal::kConsoleAssets[i].name == name) return &internal::kConsoleAssets[i];
  }
  return nullptr;
}

bool ConsoleBuiltIn() { return internal::kNumConsoleAssets > 0; }

}  // namespace flowstate::web

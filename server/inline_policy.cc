#include "server/inline_policy.h"
#include "graph/mutex.h"

namespace flowstate {

bool InlinePolicy::BeginInline(const std::string& key, size_t body_bytes) {
  if (options_.threshold.count() <= 0 || options_.max_inline <= 0) return false;
  MutexLock l(mu_);
  if (inline_now_ >= options_.max_inline) return false;
  auto it = last_.find(key);
  if (it == last_.end() || it->second.took >= options_.threshold) return false;
  if (body_bytes > 2 * it->second.body_bytes + 4096) return false;
  ++inline_now_;
  return true;
}

void InlinePolicy::Finish(const std::string& key, size_t body_bytes,
                          std::chrono::nanoseconds took, bool inlined) {
  MutexLock l(mu_);
  if (inlined) --inline_now_;
  auto it = last_.find(key);
  if (it != last_.end()) {
    it->second = {took, body_bytes};
    return;
  }
  if (last_.size() >= options_.max_keys) last_.clear();
  last_.emplace(key, Last{took, body_bytes});
}

int InlinePolicy::inline_now() const {
  MutexLock l(mu_);
  return inline_now_;
}

}  // namespace flowstate

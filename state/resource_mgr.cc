#include "state/resource_mgr.h"
#include "graph/mutex.h"

namespace flowstate {

Status ResourceMgr::Delete(const std::string& container, const std::string& name) {
  MutexLock l(mu_);
  if (resources_.erase(std::make_pair(Container(container), name)) == 0) {
    return NotFound("no resource '" + name + "' in container '" + Container(container) + "'");
  }
  return Status();
}

void ResourceMgr::Cleanup(const std::string& container) {
  MutexLock l(mu_);
  std::string c = Container(container);
  for (auto it = resources_.begin(); it != resources_.end();) {
    it = it->first.first == c ? resources_.erase(it) : std::next(it);
  }
}

std::vector<ResourceMgr::Item> ResourceMgr::List() const {
  MutexLock l(mu_);
  std::vector<Item> out;
  for (const auto& [key, r] : resources_) out.push_back(Item{key.first, key.second, r});
  return out;
}

}  // namespace flowstate

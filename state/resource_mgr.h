// ResourceMgr: the state that outlives a step — variables, and later queues
// and readers — held in containers of named resources. A session (or a
// training job) owns one; every kernel that touches state finds its resource
// here by (container, name), so all executables of a session share it.
//
// Resources are reference counted (std::shared_ptr); Delete() drops the
// manager's reference while kernels may still hold theirs. Thread-safe.
#ifndef FLOWSTATE_STATE_RESOURCE_MGR_H_
#define FLOWSTATE_STATE_RESOURCE_MGR_H_

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "graph/mutex.h"
#include "graph/status.h"

namespace flowstate {

class ResourceBase {
 public:
  virtual ~ResourceBase() = default;
  // "Variable float32[784, 512]" etc.
  virtual std::string DebugString() const = 0;
};

class ResourceMgr {
 public:
  // The container used when a node names none.
  static constexpr const char* kDefaultContainer = "default";

  ResourceMgr() = default;
  ResourceMgr(const ResourceMgr&) = delete;
  ResourceMgr& operator=(const ResourceMgr&) = delete;

  // Returns the resource, creating it with `create` when absent.
  // INVALID_ARGUMENT when a resource of another type has that name.
  template <typename T>
  StatusOr<std::shared_ptr<T>> LookupOrCreate(
      const std::string& container, const std::string& name,
      const std::function<StatusOr<std::shared_ptr<T>>()>& create) {
    MutexLock l(mu_);
    auto key = std::make_pair(Container(container), name);
    auto it = resources_.find(key);
    if (it != resources_.end()) return Cast<T>(it->second, name);
    StatusOr<std::shared_ptr<T>> r = create();
    if (!r.ok()) return r.status();
    resources_.emplace(key, *r);
    return r;
  }

  // NOT_FOUND when absent; INVALID_ARGUMENT for another type.
  template <typename T>
  StatusOr<std::shared_ptr<T>> Lookup(const std::string& container, const std::string& name) const {
    MutexLock l(mu_);
    auto it = resources_.find(std::make_pair(Container(container), name));
    if (it == resources_.end()) {
      return NotFound("no resource '" + name + "' in container '" + Container(container) + "'");
    }
    return Cast<T>(it->second, name);
  }

  // NOT_FOUND when absent.
  Status Delete(const std::string& container, const std::string& name);
  // Drops every resource of a container.
  void Cleanup(const std::string& container);

  struct Item {
    std::string container;
    std::string name;
    std::shared_ptr<ResourceBase> resource;
  };
  // A snapshot of every resource, sorted by (container, name).
  std::vector<Item> List() const;

 private:
  static std::string Container(const std::string& c) { return c.empty() ? kDefaultContainer : c; }
  template <typename T>
  static StatusOr<std::shared_ptr<T>> Cast(const std::shared_ptr<ResourceBase>& r,
                                           const std::string& name) {
    auto t = std::dynamic_pointer_cast<T>(r);
    if (!t) {
      return InvalidArgument("resource '" + name + "' is a " + r->DebugString() +
                             ", not the kind asked for");
    }
    return t;
  }

  mutable Mutex mu_;
  std::map<std::pair<std::string, std::string>, std::shared_ptr<ResourceBase>> resources_;
};

}  // namespace flowstate

#endif  // FLOWSTATE_STATE_RESOURCE_MGR_H_

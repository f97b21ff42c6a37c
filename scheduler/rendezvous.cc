#include "scheduler/rendezvous.h"
#include "graph/mutex.h"

#include <cstdio>
#include <random>
#include <vector>

namespace flowstate {

LocalRendezvous::~LocalRendezvous() { StartAbort(Cancelled("the step ended")); }

Status LocalRendezvous::Send(const std::string& key, const Tensor& value) {
  DoneCallback waiter;
  {
    MutexLock l(mu_);
    if (!aborted_.ok()) return aborted_;
    Item& item = table_[key];
    if (item.has_value) return AlreadyExists("tensor '" + key + "' was sent twice in one step");
    if (item.waiter) {
      waiter = std::move(item.waiter);
      table_.erase(key);
    } else {
      item.has_value = true;
      item.value = value;
    }
  }
  if (waiter) waiter(Status(), value);
  return Status();
}

void LocalRendezvous::RecvAsync(const std::string& key, DoneCallback done) {
  Tensor value;
  Status status;
  {
    MutexLock l(mu_);
    if (!aborted_.ok()) {
      status = aborted_;
    } else {
      auto it = table_.find(key);
      if (it != table_.end() && it->second.has_value) {
        value = std::move(it->second.value);
        table_.erase(it);
      } else {
        Item& item = table_[key];
        if (item.waiter) {
          status = AlreadyExists("tensor '" + key + "' is received twice in one step");
        } else {
          item.waiter = std::move(done);
          return;
        }
      }
    }
  }
  done(status, value);
}

void LocalRendezvous::StartAbort(const Status& status) {
  std::vector<DoneCallback> waiters;
  Status aborted;
  {
    MutexLock l(mu_);
    if (!aborted_.ok()) return;
    aborted_ = status.ok() ? Cancelled("aborted") : status;
    aborted = aborted_;
    for (auto& [key, item] : table_) {
      if (item.waiter) waiters.push_back(std::move(item.waiter));
    }
    table_.clear();
  }
  for (auto& w : waiters) w(aborted, Tensor());
}

std::string CreateRendezvousKey(std::string_view src_device, uint64_t src_incarnation,
                                std::string_view dst_device, std::string_view name) {
  char inc[17];
  std::snprintf(inc, sizeof(inc), "%016llx", static_cast<unsigned long long>(src_incarnation));
  std::string key;
  key.reserve(src_device.size() + dst_device.size() + name.size() + 19);
  key.append(src_device).append(1, ';').append(inc).append(1, ';');
  key.append(dst_device).append(1, ';').append(name);
  return key;
}

uint64_t ProcessIncarnation() {
  static const uint64_t incarnation = [] {
    std::random_device rd;
    uint64_t v = 0;
    while (v == 0) v = (uint64_t(rd()) << 32) ^ uint64_t(rd());
    return v;
  }();
  return incarnation;
}

RendezvousMgr::RendezvousMgr(Factory factory) : factory_(std::move(factory)) {}

RendezvousMgr::~RendezvousMgr() {
  std::unordered_map<int64_t, std::shared_ptr<Rendezvous>> steps;
  {
    MutexLock l(mu_);
    steps.swap(steps_);
  }
  for (auto& [id, r] : steps) r->StartAbort(Cancelled("the rendezvous manager is gone"));
}

std::shared_ptr<Rendezvous> RendezvousMgr::Find(int64_t step_id) {
  MutexLock l(mu_);
  std::shared_ptr<Rendezvous>& r = steps_[step_id];
  if (r == nullptr) r = factory_ ? factory_(step_id) : std::make_shared<LocalRendezvous>();
  return r;
}

void RendezvousMgr::Cleanup(int64_t step_id) {
  std::shared_ptr<Rendezvous> r;  // released outside the lock
  MutexLock l(mu_);
  auto it = steps_.find(step_id);
  if (it == steps_.end()) return;
  r = std::move(it->second);
  steps_.erase(it);
}

void RendezvousMgr::AbortStep(int64_t step_id, const Status& status) {
  // Waiters run outside the lock: they may call back into the manager.
  Find(step_id)->StartAbort(status);
}

int RendezvousMgr::num_steps() const {
  MutexLock l(mu_);
  return int(steps_.size());
}

}  // namespace flowstate

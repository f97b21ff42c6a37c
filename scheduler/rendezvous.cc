#include "scheduler/rendezvous.h"

#include <vector>

namespace flowstate {

Rendezvous::~Rendezvous() { StartAbort(Cancelled("the step ended")); }

Status Rendezvous::Send(const std::string& key, const Tensor& value) {
  DoneCallback waiter;
  {
    std::lock_guard<std::mutex> l(mu_);
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

void Rendezvous::RecvAsync(const std::string& key, DoneCallback done) {
  Tensor value;
  Status status;
  {
    std::lock_guard<std::mutex> l(mu_);
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

void Rendezvous::StartAbort(const Status& status) {
  std::vector<DoneCallback> waiters;
  {
    std::lock_guard<std::mutex> l(mu_);
    if (!aborted_.ok()) return;
    aborted_ = status.ok() ? Cancelled("aborted") : status;
    for (auto& [key, item] : table_) {
      if (item.waiter) waiters.push_back(std::move(item.waiter));
    }
    table_.clear();
  }
  for (auto& w : waiters) w(status, Tensor());
}

}  // namespace flowstate

#include "distributed/gloo_store.h"

#include <gloo/common/error.h>
#include <gloo/rendezvous/store.h>

#include <vector>

#include "distributed/collective_store.h"

namespace flowstate {
namespace {

class GlooStore final : public ::gloo::rendezvous::Store {
 public:
  GlooStore(std::shared_ptr<CollectiveStoreClient> client, std::string prefix,
            std::chrono::milliseconds timeout);

  void set(const std::string& key, const std::vector<char>& data) override;
  std::vector<char> get(const std::string& key) override;
  void wait(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) override;

 private:
  std::shared_ptr<CollectiveStoreClient> client_;
  const std::string prefix_;
  const std::chrono::milliseconds timeout_;
};

GlooStore::GlooStore(std::shared_ptr<CollectiveStoreClient> client, std::string prefix,
                     std::chrono::milliseconds timeout)
    : client_(std::move(client)), prefix_(std::move(prefix)), timeout_(timeout) {}

void GlooStore::set(const std::string& key, const std::vector<char>& data) {
  Status s = client_->Set(prefix_, key, std::string(data.begin(), data.end()),
                          std::chrono::steady_clock::now() + timeout_);
  if (!s.ok()) throw ::gloo::IoException(s.ToString());
}

std::vector<char> GlooStore::get(const std::string& key) {
  wait({key}, timeout_);
  StatusOr<std::string> v = client_->Get(prefix_, key, std::chrono::steady_clock::now() + timeout_);
  if (!v.ok()) throw ::gloo::IoException(v.status().ToString());
  return std::vector<char>(v->begin(), v->end());
}

void GlooStore::wait(const std::vector<std::string>& keys) { wait(keys, timeout_); }

void GlooStore::wait(const std::vector<std::string>& keys,
                     const std::chrono::milliseconds& timeout) {
  Status s = client_->Wait(prefix_, keys, std::chrono::steady_clock::now() + timeout);
  if (!s.ok()) throw ::gloo::IoException(s.ToString());
}

}  // namespace

std::shared_ptr<::gloo::rendezvous::Store> NewGlooStore(std::shared_ptr<CollectiveStoreClient> client,
                                                        std::string prefix,
                                                        std::chrono::milliseconds timeout) {
  return std::make_shared<GlooStore>(std::move(client), std::move(prefix), timeout);
}

}  // namespace flowstate

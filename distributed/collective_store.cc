#include "distributed/collective_store.h"

#include <grpcpp/grpcpp.h>

#include <charconv>
#include <map>
#include <set>
#include <thread>

#include "api/proto_convert.h"
#include "api/worker.grpc.pb.h"
#include "graph/mutex.h"

namespace flowstate {

namespace wpb = ::flowstate::worker::v1;

namespace {

constexpr const char* kMissingKeysMetadata = "flowstate-missing-keys-bin";

std::string Join(const std::vector<std::string>& v, const std::string& sep) {
  std::string out;
  for (const std::string& s : v) out += (out.empty() ? "" : sep) + s;
  return out;
}

bool Under(const std::string& prefix, const std::string& candidate) {
  return candidate == prefix ||
         (candidate.size() > prefix.size() && candidate.compare(0, prefix.size(), prefix) == 0 &&
          candidate[prefix.size()] == '/');
}

}  // namespace

// ---------------------------------------------------------------------------
// The service.

class CollectiveStoreService::Impl final : public wpb::CollectiveStore::CallbackService {
 public:
  explicit Impl(const CollectiveStoreOptions& o) : options_(o) {
    timer_ = std::thread([this] { TimerLoop(); });
  }
  ~Impl() override { Shutdown(); }

  struct Prefix {
    std::map<std::string, std::string> kv;
    int64_t bytes = 0;
  };
  // A pending Wait, answered exactly once (under mu_: `done`).
  struct Waiter {
    std::string prefix;
    std::vector<std::string> keys;
    std::chrono::steady_clock::time_point deadline;
    ::grpc::CallbackServerContext* ctx = nullptr;
    ::grpc::ServerUnaryReactor* reactor = nullptr;
    bool done = false;
  };
  using Answer = std::pair<std::shared_ptr<Waiter>, ::grpc::Status>;

  class WaitReactor final : public ::grpc::ServerUnaryReactor {
   public:
    WaitReactor(Impl* impl, std::shared_ptr<Waiter> w) : impl_(impl), w_(std::move(w)) {}
    void OnCancel() override {
      std::vector<Answer> answers;
      {
        MutexLock l(impl_->mu_);
        if (!w_->done) {
          w_->done = true;
          answers.emplace_back(w_, ::grpc::Status(::grpc::StatusCode::CANCELLED, "cancelled"));
        }
      }
      Impl::Send(answers);
    }
    void OnDone() override { delete this; }

   private:
    Impl* impl_;
    std::shared_ptr<Waiter> w_;
  };

  static void Send(std::vector<Answer>& answers) {
    for (auto& [w, s] : answers) w->reactor->Finish(s);
    answers.clear();
  }

  // The keys of `w` not set now.
  std::vector<std::string> MissingLocked(const Waiter& w) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    std::vector<std::string> missing;
    auto it = prefixes_.find(w.prefix);
    for (const std::string& k : w.keys) {
      if (it == prefixes_.end() || !it->second.kv.count(k)) missing.push_back(k);
    }
    return missing;
  }

  ::grpc::ServerUnaryReactor* Set(::grpc::CallbackServerContext* ctx,
                                  const wpb::StoreSetRequest* req,
                                  wpb::StoreSetResponse* resp) override {
    auto* r = ctx->DefaultReactor();
    std::vector<Answer> answers;
    ::grpc::Status s;
    {
      MutexLock l(mu_);
      auto it = prefixes_.find(req->prefix());
      const std::string* held = nullptr;
      if (req->if_absent() && it != prefixes_.end()) {
        auto k = it->second.kv.find(req->key());
        if (k != it->second.kv.end()) held = &k->second;
      }
      if (held != nullptr) {
        resp->set_value(*held);  // the first writer's
      } else {
        s = DoSetLocked(req->prefix(), req->key(), req->value(), &answers);
        if (s.ok()) {
          resp->set_value(req->value());
          resp->set_set(true);
        }
      }
    }
    Send(answers);
    r->Finish(s);
    return r;
  }

  ::grpc::ServerUnaryReactor* Add(::grpc::CallbackServerContext* ctx,
                                  const wpb::StoreAddRequest* req,
                                  wpb::StoreAddResponse* resp) override {
    auto* r = ctx->DefaultReactor();
    std::vector<Answer> answers;
    ::grpc::Status s;
    {
      MutexLock l(mu_);
      int64_t value = 0;
      auto it = prefixes_.find(req->prefix());
      if (it != prefixes_.end()) {
        auto k = it->second.kv.find(req->key());
        if (k != it->second.kv.end()) {
          const std::string& old = k->second;
          auto [end, ec] = std::from_chars(old.data(), old.data() + old.size(), value);
          if (ec != std::errc() || end != old.data() + old.size()) {
            s = ::grpc::Status(::grpc::StatusCode::INVALID_ARGUMENT,
                               "collective store: key \"" + req->key() + "\" of prefix \"" +
                                   req->prefix() + "\" does not hold an integer; cannot add to it");
          }
        }
      }
      if (s.ok()) {
        value += req->delta();
        s = DoSetLocked(req->prefix(), req->key(), std::to_string(value), &answers);
        if (s.ok()) resp->set_value(value);
      }
    }
    Send(answers);
    r->Finish(s);
    return r;
  }

  ::grpc::Status DoSetLocked(const std::string& prefix, const std::string& key,
                             const std::string& value, std::vector<Answer>* answers)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (shutdown_) return ::grpc::Status(::grpc::StatusCode::UNAVAILABLE, "the store is stopping");
    if (prefix.empty()) {
      return ::grpc::Status(::grpc::StatusCode::INVALID_ARGUMENT, "collective store: empty prefix");
    }
    auto it = prefixes_.find(prefix);
    if (it == prefixes_.end() && int(prefixes_.size()) >= options_.max_prefixes) {
      return ::grpc::Status(::grpc::StatusCode::RESOURCE_EXHAUSTED,
                            "collective store: " + std::to_string(prefixes_.size()) +
                                " prefixes held (the cap); drop finished memberships before "
                                "starting prefix \"" + prefix + "\"");
    }
    Prefix& p = prefixes_[prefix];
    auto old = p.kv.find(key);
    const int64_t delta = int64_t(value.size()) + (old == p.kv.end() ? int64_t(key.size())
                                                                     : -int64_t(old->second.size()));
    std::string error;
    if (old == p.kv.end() && int(p.kv.size()) >= options_.max_keys) {
      error = "holds " + std::to_string(p.kv.size()) + " keys (the cap)";
    } else if (p.bytes + delta > options_.max_bytes) {
      error = "would hold " + std::to_string(p.bytes + delta) + " bytes (the cap is " +
              std::to_string(options_.max_bytes) + ")";
    }
    if (!error.empty()) {
      if (p.kv.empty()) prefixes_.erase(prefix);
      return ::grpc::Status(::grpc::StatusCode::RESOURCE_EXHAUSTED,
                            "collective store: prefix \"" + prefix + "\" " + error +
                                "; key \"" + key + "\" not set");
    }
    p.kv[key] = value;
    p.bytes += delta;
    // Answer the Waits of this prefix that have every key now.
    auto wit = waiting_.find(prefix);
    if (wit != waiting_.end()) {
      auto& list = wit->second;
      for (size_t i = 0; i < list.size();) {
        if (!list[i]->done && MissingLocked(*list[i]).empty()) {
          list[i]->done = true;
          answers->emplace_back(list[i], ::grpc::Status::OK);
        }
        if (list[i]->done) {
          list[i] = list.back();
          list.pop_back();
          --num_waits_;
        } else {
          ++i;
        }
      }
      if (list.empty()) waiting_.erase(wit);
    }
    return ::grpc::Status::OK;
  }

  ::grpc::ServerUnaryReactor* Get(::grpc::CallbackServerContext* ctx,
                                  const wpb::StoreGetRequest* req,
                                  wpb::StoreGetResponse* resp) override {
    auto* r = ctx->DefaultReactor();
    MutexLock l(mu_);
    auto it = prefixes_.find(req->prefix());
    if (it != prefixes_.end()) {
      auto k = it->second.kv.find(req->key());
      if (k != it->second.kv.end()) {
        resp->set_value(k->second);
        r->Finish(::grpc::Status::OK);
        return r;
      }
    }
    r->Finish(::grpc::Status(::grpc::StatusCode::NOT_FOUND,
                             "collective store: key \"" + req->key() + "\" of prefix \"" +
                                 req->prefix() + "\" is not set"));
    return r;
  }

  ::grpc::ServerUnaryReactor* Wait(::grpc::CallbackServerContext* ctx,
                                   const wpb::StoreWaitRequest* req,
                                   wpb::StoreWaitResponse*) override {
    auto w = std::make_shared<Waiter>();
    w->prefix = req->prefix();
    w->keys.assign(req->keys().begin(), req->keys().end());
    w->deadline = std::chrono::steady_clock::now() +
                  std::chrono::milliseconds(std::max<int64_t>(0, req->timeout_ms()));
    w->ctx = ctx;
    auto* r = new WaitReactor(this, w);
    w->reactor = r;
    MutexLock l(mu_);
    if (shutdown_) {
      r->Finish(::grpc::Status(::grpc::StatusCode::UNAVAILABLE, "the store is stopping"));
    } else if (MissingLocked(*w).empty()) {
      r->Finish(::grpc::Status::OK);
    } else if (num_waits_ >= options_.max_waits) {
      r->Finish(::grpc::Status(::grpc::StatusCode::RESOURCE_EXHAUSTED,
                               "collective store: " + std::to_string(num_waits_) +
                                   " Waits pending (the cap)"));
    } else if (req->timeout_ms() <= 0) {
      r->Finish(Expired(*w));
    } else {
      waiting_[w->prefix].push_back(w);
      ++num_waits_;
      by_deadline_.emplace(w->deadline, w);
      timer_cv_.NotifyOne();
    }
    return r;
  }

  // DEADLINE_EXCEEDED naming the missing keys.
  ::grpc::Status Expired(const Waiter& w) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    std::vector<std::string> missing = MissingLocked(w);
    std::string joined;
    for (const std::string& k : missing) joined += k + '\0';
    if (!joined.empty()) joined.pop_back();
    w.ctx->AddTrailingMetadata(kMissingKeysMetadata, joined);
    return ::grpc::Status(::grpc::StatusCode::DEADLINE_EXCEEDED,
                          "collective store: key(s) " + Join(missing, ", ") + " of prefix \"" +
                              w.prefix + "\" not set within the wait's timeout");
  }

  ::grpc::ServerUnaryReactor* DropPrefix(::grpc::CallbackServerContext* ctx,
                                         const wpb::StoreDropPrefixRequest* req,
                                         wpb::StoreDropPrefixResponse*) override {
    auto* r = ctx->DefaultReactor();
    Drop(req->prefix());
    r->Finish(::grpc::Status::OK);
    return r;
  }

  int Drop(const std::string& prefix) {
    std::vector<Answer> answers;
    int dropped = 0;
    {
      MutexLock l(mu_);
      for (auto it = prefixes_.lower_bound(prefix); it != prefixes_.end() && it->first.compare(0, prefix.size(), prefix) == 0;) {
        if (Under(prefix, it->first)) {
          it = prefixes_.erase(it);
          ++dropped;
        } else {
          ++it;
        }
      }
      for (auto it = waiting_.lower_bound(prefix); it != waiting_.end() && it->first.compare(0, prefix.size(), prefix) == 0;) {
        if (!Under(prefix, it->first)) {
          ++it;
          continue;
        }
        for (auto& w : it->second) {
          if (w->done) continue;
          w->done = true;
          answers.emplace_back(w, ::grpc::Status(::grpc::StatusCode::ABORTED,
                                                 "collective store: prefix \"" + w->prefix +
                                                     "\" was dropped (its membership ended)"));
        }
        num_waits_ -= int(it->second.size());
        it = waiting_.erase(it);
      }
    }
    Send(answers);
    return dropped;
  }

  void TimerLoop() {
    MutexLock l(mu_);
    while (!shutdown_) {
      if (by_deadline_.empty()) {
        timer_cv_.Wait(mu_);
        continue;
      }
      auto first = by_deadline_.begin();
      if (first->first > std::chrono::steady_clock::now()) {
        timer_cv_.WaitUntil(mu_, first->first);
        continue;
      }
      std::shared_ptr<Waiter> w = first->second.lock();
      by_deadline_.erase(first);
      if (w == nullptr) continue;
      std::vector<Answer> answers;
      if (!w->done) {
        w->done = true;
        answers.emplace_back(w, Expired(*w));
      }
      auto wit = waiting_.find(w->prefix);
      if (wit != waiting_.end()) {
        auto& list = wit->second;
        for (size_t i = 0; i < list.size(); ++i) {
          if (list[i] == w) {
            list[i] = list.back();
            list.pop_back();
            --num_waits_;
            break;
          }
        }
        if (list.empty()) waiting_.erase(wit);
      }
      l.Unlock();
      Send(answers);
      l.Lock();
    }
  }

  void Shutdown() {
    std::vector<Answer> answers;
    {
      MutexLock l(mu_);
      if (shutdown_) return;
      shutdown_ = true;
      for (auto& [p, list] : waiting_) {
        for (auto& w : list) {
          if (w->done) continue;
          w->done = true;
          answers.emplace_back(w, ::grpc::Status(::grpc::StatusCode::UNAVAILABLE,
                                                 "the collective store is stopping"));
        }
      }
      waiting_.clear();
      num_waits_ = 0;
      timer_cv_.NotifyAll();
    }
    Send(answers);
    if (timer_.joinable()) timer_.join();
    if (server_ != nullptr) server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  }

  const CollectiveStoreOptions options_;
  mutable Mutex mu_;
  CondVar timer_cv_;
  bool shutdown_ ABSL_GUARDED_BY(mu_) = false;
  std::map<std::string, Prefix> prefixes_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::vector<std::shared_ptr<Waiter>>> waiting_ ABSL_GUARDED_BY(mu_);
  std::multimap<std::chrono::steady_clock::time_point, std::weak_ptr<Waiter>> by_deadline_ ABSL_GUARDED_BY(mu_);
  int num_waits_ ABSL_GUARDED_BY(mu_) = 0;
  std::thread timer_;
  std::unique_ptr<::grpc::Server> server_;
};

CollectiveStoreService::CollectiveStoreService(const CollectiveStoreOptions& options)
    : impl_(std::make_unique<Impl>(options)) {}

CollectiveStoreService::~CollectiveStoreService() { Shutdown(); }

void CollectiveStoreService::RegisterOn(::grpc::ServerBuilder* builder) {
  builder->RegisterService(impl_.get());
}

StatusOr<int> CollectiveStoreService::Start(const std::string& host, int port) {
  ::grpc::ServerBuilder builder;
  int bound = 0;
  builder.AddListeningPort(host + ":" + std::to_string(port), ::grpc::InsecureServerCredentials(),
                           &bound);
  RegisterOn(&builder);
  impl_->server_ = builder.BuildAndStart();
  if (impl_->server_ == nullptr || bound == 0) {
    return Unavailable("collective store: cannot listen on " + host + ":" + std::to_string(port));
  }
  return bound;
}

void CollectiveStoreService::Shutdown() { impl_->Shutdown(); }

int CollectiveStoreService::DropPrefix(const std::string& prefix) { return impl_->Drop(prefix); }

int CollectiveStoreService::num_prefixes() const {
  MutexLock l(impl_->mu_);
  return int(impl_->prefixes_.size());
}

int CollectiveStoreService::num_keys(const std::string& prefix) const {
  MutexLock l(impl_->mu_);
  auto it = impl_->prefixes_.find(prefix);
  return it == impl_->prefixes_.end() ? 0 : int(it->second.kv.size());
}

int64_t CollectiveStoreService::num_bytes(const std::string& prefix) const {
  MutexLock l(impl_->mu_);
  auto it = impl_->prefixes_.find(prefix);
  return it == impl_->prefixes_.end() ? 0 : it->second.bytes;
}

// ---------------------------------------------------------------------------
// The client.

class CollectiveStoreClient::Impl {
 public:
  explicit Impl(const std::string& address)
      : address_(address),
        stub_(wpb::CollectiveStore::NewStub(
            ::grpc::CreateChannel(address, ::grpc::InsecureChannelCredentials()))) {}

  void Prepare(::grpc::ClientContext* ctx, Deadline deadline) const {
    auto left = deadline - std::chrono::steady_clock::now();
    ctx->set_deadline(std::chrono::system_clock::now() +
                      std::max<std::chrono::steady_clock::duration>(left, std::chrono::milliseconds(1)));
    ctx->set_wait_for_ready(true);
  }
  Status Convert(const ::grpc::Status& s, const std::string& what) const {
    if (s.ok()) return Status();
    Status st = proto_convert::FromGrpcStatus(s);
    if (s.error_code() == ::grpc::StatusCode::UNAVAILABLE ||
        (s.error_code() == ::grpc::StatusCode::DEADLINE_EXCEEDED &&
         s.error_message() == "Deadline Exceeded")) {
      // gRPC's own: the store did not answer in time.
      return Status(st.code(), "collective store at " + address_ + " (" + what + "): " + st.message());
    }
    return st;
  }

  const std::string address_;
  std::unique_ptr<wpb::CollectiveStore::Stub> stub_;
};

CollectiveStoreClient::CollectiveStoreClient(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
CollectiveStoreClient::~CollectiveStoreClient() = default;

std::shared_ptr<CollectiveStoreClient> CollectiveStoreClient::Connect(const std::string& address) {
  return std::shared_ptr<CollectiveStoreClient>(
      new CollectiveStoreClient(std::make_unique<Impl>(address)));
}

const std::string& CollectiveStoreClient::address() const { return impl_->address_; }

Status CollectiveStoreClient::Set(const std::string& prefix, const std::string& key,
                                  const std::string& value, Deadline deadline) {
  return SetKey(prefix, key, value, false, deadline).status();
}

StatusOr<CollectiveStoreClient::Claim> CollectiveStoreClient::SetIfAbsent(
    const std::string& prefix, const std::string& key, const std::string& value,
    Deadline deadline) {
  return SetKey(prefix, key, value, true, deadline);
}

StatusOr<CollectiveStoreClient::Claim> CollectiveStoreClient::SetKey(
    const std::string& prefix, const std::string& key, const std::string& value, bool if_absent,
    Deadline deadline) {
  ::grpc::ClientContext ctx;
  impl_->Prepare(&ctx, deadline);
  wpb::StoreSetRequest req;
  req.set_prefix(prefix);
  req.set_key(key);
  req.set_value(value);
  req.set_if_absent(if_absent);
  wpb::StoreSetResponse resp;
  Status s = impl_->Convert(impl_->stub_->Set(&ctx, req, &resp),
                            "set " + key + (if_absent ? " if absent" : ""));
  if (!s.ok()) return s;
  return Claim{std::move(*resp.mutable_value()), resp.set()};
}

StatusOr<std::string> CollectiveStoreClient::Get(const std::string& prefix, const std::string& key,
                                                 Deadline deadline) {
  ::grpc::ClientContext ctx;
  impl_->Prepare(&ctx, deadline);
  wpb::StoreGetRequest req;
  req.set_prefix(prefix);
  req.set_key(key);
  wpb::StoreGetResponse resp;
  Status s = impl_->Convert(impl_->stub_->Get(&ctx, req, &resp), "get " + key);
  if (!s.ok()) return s;
  return std::move(*resp.mutable_value());
}

Status CollectiveStoreClient::Wait(const std::string& prefix, const std::vector<std::string>& keys,
                                   Deadline deadline, std::vector<std::string>* missing) {
  ::grpc::ClientContext ctx;
  // The server answers at `deadline`; the call's own deadline leaves it time
  // to say which keys are missing.
  impl_->Prepare(&ctx, deadline + std::chrono::seconds(2));
  wpb::StoreWaitRequest req;
  req.set_prefix(prefix);
  for (const std::string& k : keys) req.add_keys(k);
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
      deadline - std::chrono::steady_clock::now());
  req.set_timeout_ms(std::max<int64_t>(0, left.count()));
  wpb::StoreWaitResponse resp;
  ::grpc::Status gs = impl_->stub_->Wait(&ctx, req, &resp);
  if (missing != nullptr) {
    missing->clear();
    if (gs.error_code() == ::grpc::StatusCode::DEADLINE_EXCEEDED) {
      auto md = ctx.GetServerTrailingMetadata();
      auto it = md.find(kMissingKeysMetadata);
      if (it != md.end()) {
        std::string all(it->second.data(), it->second.size());
        size_t start = 0;
        while (start <= all.size() && !all.empty()) {
          size_t end = all.find('\0', start);
          if (end == std::string::npos) end = all.size();
          missing->push_back(all.substr(start, end - start));
          start = end + 1;
        }
      } else {
        *missing = keys;  // no answer from the store: nothing is known to be set
      }
    }
  }
  return impl_->Convert(gs, "wait");
}

StatusOr<int64_t> CollectiveStoreClient::Add(const std::string& prefix, const std::string& key,
                                             int64_t delta, Deadline deadline) {
  ::grpc::ClientContext ctx;
  impl_->Prepare(&ctx, deadline);
  wpb::StoreAddRequest req;
  req.set_prefix(prefix);
  req.set_key(key);
  req.set_delta(delta);
  wpb::StoreAddResponse resp;
  Status s = impl_->Convert(impl_->stub_->Add(&ctx, req, &resp), "add " + key);
  if (!s.ok()) return s;
  return resp.value();
}

Status CollectiveStoreClient::DropPrefix(const std::string& prefix, Deadline deadline) {
  ::grpc::ClientContext ctx;
  impl_->Prepare(&ctx, deadline);
  wpb::StoreDropPrefixRequest req;
  req.set_prefix(prefix);
  wpb::StoreDropPrefixResponse resp;
  return impl_->Convert(impl_->stub_->DropPrefix(&ctx, req, &resp), "drop prefix");
}

}  // namespace flowstate

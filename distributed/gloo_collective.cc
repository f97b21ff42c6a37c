#include "distributed/gloo_collective.h"

#include <gloo/common/error.h>
#include <gloo/context.h>
#include <gloo/transport/tcp/address.h>
#include <gloo/transport/tcp/device.h>
#include <gloo/transport/unbound_buffer.h>
#include <gloo/types.h>

#include <dirent.h>
#include <signal.h>
#include <sys/socket.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <condition_variable>
#include <cstring>
#include <map>
#include <mutex>
#include <set>
#include <thread>
#include <type_traits>

#include "distributed/collective_signature.h"
#include "distributed/collective_store.h"
#include "distributed/store_step_race.h"
#include "scheduler/reduce_loops.h"

// --- The one thing this file needs from Gloo that Gloo does not expose.
//
// Gloo (this 2022 snapshot) has no abort. What it does itself when a wait
// times out is tcp::Context::signalException(msg): every pending operation
// of every pair fails with `msg` and the connections close (the peers see
// them close). Abort does the same. The function is exported by libgloo but
// declared in tcp/context.h, which Debian's libgloo-dev cannot compile (it
// includes gloo/common/memory.h, not packaged); so it is declared here by
// its symbol, a non-virtual member function called with the tcp::Context
// (whose primary base, at offset 0, is the transport::Context we hold) as
// `this`. A libgloo without it fails to link, not at run time.
namespace flowstate_gloo_abi {
void SignalException(void* tcp_context, const std::string& msg) __asm__(
    "_ZN4gloo9transport3tcp7Context15signalExceptionERKNSt7__cxx1112basic_stringIcSt11"
    "char_traitsIcESaIcEEE");
}  // namespace flowstate_gloo_abi

namespace flowstate {
namespace {

namespace gt = ::gloo::transport::tcp;
using namespace collective_signature;  // Header, Signature, Hash, Decode, Check
using Clock = std::chrono::steady_clock;

// The gloo::Context of a group: its transport context is the one we
// connected ourselves (Impl::Connect).
class MeshContext final : public ::gloo::Context {
 public:
  MeshContext(int rank, int size) : ::gloo::Context(rank, size) {}
  void SetTransport(std::shared_ptr<::gloo::transport::Device> device,
                    std::shared_ptr<::gloo::transport::Context> transport) {
    device_ = std::move(device);
    transportContext_ = std::move(transport);
  }
  // Fails every pending operation with `msg` and closes the connections.
  void Signal(const std::string& msg) {
    if (transportContext_ != nullptr) flowstate_gloo_abi::SignalException(transportContext_.get(), msg);
  }
};

constexpr const char* kClosedByUs = "flowstate: the group was closed by this rank";

std::chrono::milliseconds Left(Clock::time_point deadline) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
  return std::max(left, std::chrono::milliseconds(1));
}

std::string RankList(const std::vector<int>& ranks) {
  std::string out;
  for (int r : ranks) out += (out.empty() ? "" : ", ") + std::to_string(r);
  return out;
}

// A failure record in the store ("fail/<rank>"): code, blamed ranks, message.
std::string EncodeRecord(const Status& s, const std::vector<int>& failed) {
  return std::to_string(int(s.code())) + "\n" + RankList(failed) + "\n" + s.message();
}
Status DecodeRecord(const std::string& v, std::vector<int>* failed) {
  size_t a = v.find('\n'), b = a == std::string::npos ? a : v.find('\n', a + 1);
  if (b == std::string::npos) return Internal("a malformed failure record: " + v);
  std::string ranks = v.substr(a + 1, b - a - 1);
  for (size_t i = 0; i < ranks.size();) {
    failed->push_back(std::atoi(ranks.c_str() + i));
    size_t c = ranks.find(',', i);
    if (c == std::string::npos) break;
    i = c + 1;
  }
  return Status(Code(std::atoi(v.c_str())), v.substr(b + 1));
}

// Peer p's failure record as this rank's status: the peer's own cause as
// it wrote it, or for an abort of its own (CANCELLED, ABORTED, INTERNAL)
// the same prefixed "rank p closed the group: ".
Status PeerRecord(int p, const std::string& record, std::vector<int>* failed) {
  Status s = DecodeRecord(record, failed);
  if (s.ok()) s = Cancelled("the group was closed");
  if (s.code() == Code::kCancelled || s.code() == Code::kAborted || s.code() == Code::kInternal) {
    s = Status(s.code(), "rank " + std::to_string(p) + " closed the group: " + s.message());
  }
  return s;
}

// Whether `message` names `address` ("[10.0.0.1]:123" is not "...:1234").
bool Names(const std::string& message, const std::string& address) {
  for (size_t at = message.find(address); at != std::string::npos;
       at = message.find(address, at + 1)) {
    const size_t end = at + address.size();
    if (end >= message.size() || !std::isdigit(static_cast<unsigned char>(message[end]))) return true;
  }
  return false;
}

constexpr DataType kDtypes[] = {DataType::kFloat32, DataType::kFloat64, DataType::kInt32,
                                DataType::kInt64};

// What a round threw: a timeout of ours or a failed connection.
struct RoundError {
  bool timeout = false;
  std::string message;
};

}  // namespace

// ---------------------------------------------------------------------------

class GlooCollective::Impl {
 public:
  // What a group's members share and a rebuilt group reuses.
  struct Endpoint {
    std::shared_ptr<CollectiveStoreClient> store;
    std::shared_ptr<::gloo::transport::Device> device;
    GlooCollectiveOptions options;
  };

  Impl(std::shared_ptr<Endpoint> ep, std::string prefix, int rank, int size)
      : ep_(std::move(ep)), prefix_(std::move(prefix)), rank_(rank), size_(size) {}
  ~Impl() {
    {
      std::lock_guard<std::mutex> l(mu_);
      stop_watch_ = true;
    }
    watch_cv_.notify_all();
    if (watchdog_.joinable()) watchdog_.join();
  }

  // Publishes this rank's addresses, waits for the others', connects.
  Status Connect(Clock::time_point deadline) {
    ctx_ = std::make_shared<MeshContext>(rank_, size_);
    peer_addresses_.assign(size_, {});
    if (size_ == 1) return Status();
    std::shared_ptr<::gloo::transport::Context> tc;
    std::string mine;
    try {
      tc = ep_->device->createContext(rank_, size_);
      // A pair's connect waits up to 5x this for its peer.
      tc->setTimeout(std::max(std::chrono::milliseconds(100), Left(deadline) / 5));
      for (int i = 0; i < size_; ++i) {
        if (i == rank_) continue;
        std::vector<char> a = tc->createPair(i)->address().bytes();
        mine.append(a.begin(), a.end());
      }
    } catch (const std::exception& e) {
      return Unavailable("collective " + prefix_ + ": rank " + std::to_string(rank_) +
                         " cannot listen: " + e.what());
    }
    FS_RETURN_IF_ERROR(ep_->store->Set(prefix_, "addr/" + std::to_string(rank_), mine, deadline));
    std::vector<std::string> keys, missing;
    for (int i = 0; i < size_; ++i) {
      if (i != rank_) keys.push_back("addr/" + std::to_string(i));
    }
    Status s = ep_->store->Wait(prefix_, keys, deadline, &missing);
    if (s.code() == Code::kDeadlineExceeded && !missing.empty()) {
      std::vector<int> ranks;
      for (const std::string& k : missing) ranks.push_back(std::atoi(k.c_str() + 5));
      failed_ = ranks;
      return DeadlineExceeded("collective " + prefix_ + ": rank(s) " + RankList(ranks) +
                              " did not join the group of " + std::to_string(size_) +
                              " by the deadline");
    }
    FS_RETURN_IF_ERROR(s);
    for (int i = 0; i < size_; ++i) {
      if (i == rank_) continue;
      StatusOr<std::string> all = ep_->store->Get(prefix_, "addr/" + std::to_string(i), deadline);
      FS_RETURN_IF_ERROR(all.status());
      const size_t each = all->size() / size_t(size_ - 1);
      const size_t at = size_t(rank_ > i ? rank_ - 1 : rank_) * each;
      if (each == 0 || all->size() % size_t(size_ - 1) != 0) {
        return Internal("collective " + prefix_ + ": rank " + std::to_string(i) +
                        " published malformed addresses");
      }
      try {
        std::vector<char> bytes(all->begin() + at, all->begin() + at + each);
        peer_addresses_[i].push_back(gt::Address(bytes).str());
        tc->getPair(i)->connect(bytes);
      } catch (const std::exception& e) {
        failed_ = {i};
        return Unavailable("collective " + prefix_ + ": rank " + std::to_string(rank_) +
                           " cannot connect to rank " + std::to_string(i) + ": " + e.what());
      }
    }
    NamePeers(tc.get());
    ctx_->SetTransport(ep_->device, tc);
    watchdog_ = std::thread([this] { Watch(); });
    return Status();
  }

  // The watchdog (GlooCollectiveOptions::failure_poll): while a round lasts,
  // looks for a peer's failure record every failure_poll and aborts the
  // group with it.
  void Watch() {
    const auto every = std::max(std::chrono::milliseconds(10), ep_->options.failure_poll);
    std::unique_lock<std::mutex> l(mu_);
    for (;;) {
      watch_cv_.wait(l, [&] { return stop_watch_ || round_active_; });
      if (stop_watch_) return;
      const int64_t round = active_round_;
      const bool ended = watch_cv_.wait_for(l, every, [&] {
        return stop_watch_ || !round_active_ || active_round_ != round || !broken_.ok();
      });
      if (ended) {
        // A broken group's round ends by itself (its waits were woken).
        watch_cv_.wait(l, [&] { return stop_watch_ || !round_active_ || active_round_ != round; });
        continue;
      }
      l.unlock();
      std::vector<int> failed;
      Status peer = PeerFailure(&failed);
      if (!peer.ok()) Abort(peer, failed);
      l.lock();
    }
  }

  // The first peer failure record in the store, as the status to fail with
  // (and the ranks it blames in *failed), as Fail reads one; OK when there
  // is none (or the store cannot say now).
  Status PeerFailure(std::vector<int>* failed) {
    for (int p = 0; p < size_; ++p) {
      if (p == rank_) continue;
      StatusOr<std::string> rec = ep_->store->Get(prefix_, "fail/" + std::to_string(p),
                                                  Clock::now() + std::chrono::milliseconds(200));
      if (!rec.ok()) continue;
      return PeerRecord(p, *rec, failed);
    }
    return Status();
  }

  // The unbound buffers of the round in progress, registered for as long as
  // they live: Abort wakes their waits. REQUIRES (remove): before the
  // buffer is destroyed.
  void AddLive(::gloo::transport::UnboundBuffer* b) {
    std::lock_guard<std::mutex> l(mu_);
    live_.insert(b);
    if (!broken_.ok()) {
      b->abortWaitSend();
      b->abortWaitRecv();
    }
  }
  void RemoveLive(::gloo::transport::UnboundBuffer* b) {
    std::lock_guard<std::mutex> l(mu_);
    live_.erase(b);
  }
  // An unbound buffer of this round over [ptr, ptr + bytes), live while it is.
  struct LiveBuffer {
    LiveBuffer(Impl* impl, void* ptr, size_t bytes)
        : impl(impl), buf(impl->ctx_->createUnboundBuffer(ptr, bytes)) {
      impl->AddLive(buf.get());
    }
    ~LiveBuffer() { impl->RemoveLive(buf.get()); }
    LiveBuffer(const LiveBuffer&) = delete;
    LiveBuffer& operator=(const LiveBuffer&) = delete;
    ::gloo::transport::UnboundBuffer* operator->() const { return buf.get(); }
    Impl* impl;
    std::unique_ptr<::gloo::transport::UnboundBuffer> buf;
  };

  // Gloo's errors name a pair's peer by address: the one it published when
  // this rank connected to it, but the peer's own (ephemeral) end when the
  // peer connected to this rank. Those connections are the sockets of this
  // process whose local address is the address this rank published for
  // that pair; their peer names are what the errors will say.
  void NamePeers(::gloo::transport::Context* tc) {
    std::map<std::string, int> listening;
    for (int p = 0; p < size_; ++p) {
      if (p != rank_) listening[tc->getPair(p)->address().str()] = p;
    }
    DIR* dir = opendir("/proc/self/fd");
    if (dir == nullptr) return;
    while (dirent* e = readdir(dir)) {
      const int fd = std::atoi(e->d_name);
      if (fd <= 2 || fd == dirfd(dir)) continue;
      sockaddr_storage local{}, peer{};
      socklen_t ll = sizeof(local), pl = sizeof(peer);
      if (getsockname(fd, reinterpret_cast<sockaddr*>(&local), &ll) != 0) continue;
      if (local.ss_family != AF_INET && local.ss_family != AF_INET6) continue;
      auto it = listening.find(gt::Address(reinterpret_cast<sockaddr*>(&local), ll).str());
      if (it == listening.end()) continue;
      if (getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &pl) != 0) continue;
      peer_addresses_[it->second].push_back(gt::Address(reinterpret_cast<sockaddr*>(&peer), pl).str());
    }
    closedir(dir);
  }

  Status AllReduce(std::vector<Tensor>* tensors, ReduceOp op, Clock::time_point deadline);
  void Abort(const Status& status, const std::vector<int>& failed = {}) {
    {
      std::lock_guard<std::mutex> l(mu_);
      if (!broken_.ok()) return;
      broken_ = status.ok() ? Cancelled("the collective was aborted") : status;
      failed_ = failed;
    }
    CloseGroup();
    // Gloo does not signal every pending operation when a connection fails
    // (a send it queued after a failed write): wake the round's waits here.
    std::lock_guard<std::mutex> l(mu_);
    for (::gloo::transport::UnboundBuffer* b : live_) {
      b->abortWaitSend();
      b->abortWaitRecv();
    }
  }

  // Posts this rank's failure record and closes every connection, so that
  // every peer fails promptly (and finds out why). Once.
  void CloseGroup() {
    Status s;
    std::vector<int> failed;
    {
      std::lock_guard<std::mutex> l(mu_);
      if (closed_) return;
      closed_ = true;
      s = broken_;
      failed = failed_;
    }
    // Wake this rank's blocked call first; a peer that sees the connection
    // close waits `failure_grace` for the record.
    if (size_ > 1 && ctx_ != nullptr) ctx_->Signal(kClosedByUs);
    {
      std::lock_guard<std::mutex> l(mu_);
      signalled_ = true;
    }
    signalled_cv_.notify_all();
    if (size_ > 1) {
      (void)ep_->store->Set(prefix_, "fail/" + std::to_string(rank_), EncodeRecord(s, failed),
                            Clock::now() + std::chrono::milliseconds(500));
    }
  }

  // The group's failure, once whoever broke it has closed every connection
  // (`l` holds mu_). Until then Gloo may still signal this round's pending
  // buffers, which the caller frees when the round returns.
  Status Closed(std::unique_lock<std::mutex>* l) {
    signalled_cv_.wait(*l, [&] { return signalled_; });
    return broken_;
  }

  // The group failed in `round`: the status to report (the first cause).
  Status Fail(int64_t round, const RoundError& e, const std::vector<int>& late);

  // --- One round's steps; gloo exceptions propagate.

  // The headers of a round: one receive buffer per peer, so that after a
  // failure it is known exactly whose arrived. Not movable (Gloo holds
  // pointers into it).
  struct HeaderExchange {
    std::vector<Header> in;  // per rank
    Header out;
    std::vector<std::unique_ptr<LiveBuffer>> recv;  // per rank
    std::unique_ptr<LiveBuffer> send;
    std::vector<bool> arrived;
  };
  void PostHeaders(const Header& mine, HeaderExchange* x, uint64_t slot);
  void WaitHeaders(HeaderExchange* x, Clock::time_point deadline);
  // After a timeout (the group is closed then): the ranks whose header never
  // arrived. Only then: a wait that times out closes every connection, which
  // the peers would take for this rank's failure.
  std::vector<int> Late(HeaderExchange* x);

  // One dtype's share of a round: the tensors of that dtype (their indices)
  // reduced into `out`, which is one of them when `in_place`.
  struct Reduced {
    std::vector<size_t> idx;
    Tensor out;
    bool in_place = false;
  };
  // Runs the ring of every dtype of `tensors` (tags from `base`): a dtype's
  // only tensor is reduced in its own buffer when nobody else holds it;
  // the other tensors are left untouched, and Commit moves the results
  // into them.
  void Reduce(const std::vector<Tensor>& tensors, ReduceOp op, Clock::time_point deadline,
              uint64_t base, std::vector<Reduced>* out);
  void Commit(std::vector<Tensor>* tensors, std::vector<Reduced>* reduced);
  // Takes part in a ring over buffers of `totals` elements per dtype with
  // zeros, and drops the result: what a rank whose call differs does in a
  // round others started speculatively, so that theirs ends.
  void JoinWithZeros(const std::array<int64_t, 4>& totals, Clock::time_point deadline,
                     uint64_t base);
  void Ring(DataType dtype, const void* input, Tensor* out, ReduceOp op, uint32_t tag,
            Clock::time_point deadline);
  // The ring all-reduce (sum) of n elements of `elem` bytes at `data`, in
  // place, over this round's own buffers (LiveBuffer).
  void RingSum(void* data, size_t n, size_t elem, void (*sum)(void*, const void*, const void*, size_t),
               uint32_t tag, Clock::time_point deadline);
  void ExchangeSignatures(const std::vector<int64_t>& mine, const std::vector<Header>& headers,
                          std::vector<std::vector<int64_t>>* all, Clock::time_point deadline,
                          uint64_t slot);
  Tensor Scratch(DataType dtype, const TensorShape& shape);
  void Recycle(Tensor t);

  std::shared_ptr<Endpoint> ep_;
  const std::string prefix_;
  const int rank_, size_;
  std::shared_ptr<MeshContext> ctx_;
  // Per rank: what Gloo's errors call its end of our connection.
  std::vector<std::vector<std::string>> peer_addresses_;
  int64_t next_round_ = 0;                      // the caller's thread only
  // The last round every rank completed: its signature and elements per
  // dtype. A round with the same signature starts its ring speculatively,
  // while the headers are in flight (AllReduce). The caller's thread only.
  bool have_last_ = false;
  std::vector<int64_t> last_sig_;
  uint64_t last_hash_ = 0;
  std::array<int64_t, 4> last_totals_{};
  std::map<std::pair<DataType, int64_t>, Tensor> spare_;  // the caller's thread only

  mutable std::mutex mu_;
  Status broken_;             // GUARDED_BY(mu_): sticky once set
  std::vector<int> failed_;   // GUARDED_BY(mu_)
  bool closed_ = false;       // GUARDED_BY(mu_)
  bool signalled_ = false;    // GUARDED_BY(mu_): CloseGroup closed the connections
  std::condition_variable signalled_cv_;
  std::set<::gloo::transport::UnboundBuffer*> live_;  // GUARDED_BY(mu_): the round's buffers
  bool round_active_ = false;  // GUARDED_BY(mu_): a round is in progress
  int64_t active_round_ = -1;  // GUARDED_BY(mu_): its number
  bool stop_watch_ = false;    // GUARDED_BY(mu_)
  std::condition_variable watch_cv_;  // round_active_, active_round_, stop_watch_, broken_
  std::thread watchdog_;       // Watch(); started by Connect (groups of more than one)
  std::vector<char> ring_tmp_;  // Ring's receive segments; the caller's thread only
};

void GlooCollective::Impl::PostHeaders(const Header& mine, HeaderExchange* x, uint64_t slot) {
  x->in.assign(size_, Header());
  x->in[rank_] = mine;
  x->out = mine;
  x->arrived.assign(size_, false);
  x->arrived[rank_] = true;
  x->recv.resize(size_);
  for (int p = 0; p < size_; ++p) {
    if (p == rank_) continue;
    x->recv[p] = std::make_unique<LiveBuffer>(this, &x->in[p], sizeof(Header));
    (*x->recv[p])->recv(p, slot);
  }
  x->send = std::make_unique<LiveBuffer>(this, &x->out, sizeof(Header));
  for (int p = 0; p < size_; ++p) {
    if (p != rank_) (*x->send)->send(p, slot);
  }
}

void GlooCollective::Impl::WaitHeaders(HeaderExchange* x, Clock::time_point deadline) {
  for (int p = 0; p < size_; ++p) {
    if (p == rank_) continue;
    if (!(*x->recv[p])->waitRecv(nullptr, Left(deadline))) throw ::gloo::IoException("aborted");
    x->arrived[p] = true;
  }
  for (int i = 1; i < size_; ++i) {
    if (!(*x->send)->waitSend(nullptr, Left(deadline))) throw ::gloo::IoException("aborted");
  }
}

std::vector<int> GlooCollective::Impl::Late(HeaderExchange* x) {
  std::vector<int> late;
  for (int p = 0; p < size_; ++p) {
    if (x->arrived.empty() || x->arrived[p]) continue;
    // A receive that completed returns at once; one that did not throws the
    // group's failure (or times out at once, which fails the group anyway).
    try {
      if (x->recv[p] != nullptr && (*x->recv[p])->waitRecv(nullptr, std::chrono::milliseconds(1))) {
        x->arrived[p] = true;
        continue;
      }
    } catch (const std::exception&) {
    }
    late.push_back(p);
  }
  return late;
}

void GlooCollective::Impl::ExchangeSignatures(const std::vector<int64_t>& mine,
                                              const std::vector<Header>& headers,
                                              std::vector<std::vector<int64_t>>* all,
                                              Clock::time_point deadline, uint64_t slot) {
  std::vector<size_t> offset(size_ + 1, 0);
  for (int p = 0; p < size_; ++p) {
    offset[p + 1] = offset[p] + std::min<uint64_t>(headers[p].sig_bytes, 1 << 20);
  }
  std::vector<char> in(std::max<size_t>(offset[size_], 8));
  std::vector<int64_t> out = mine;
  LiveBuffer send(this, out.data(), out.size() * 8);
  LiveBuffer recv(this, in.data(), in.size());
  int expect = 0;
  for (int p = 0; p < size_; ++p) {
    if (p == rank_ || offset[p + 1] == offset[p]) continue;
    recv->recv(p, slot, offset[p], offset[p + 1] - offset[p]);
    ++expect;
  }
  const int sends = out.empty() ? 0 : size_ - 1;
  for (int p = 0; p < size_ && sends > 0; ++p) {
    if (p != rank_) send->send(p, slot);
  }
  for (int i = 0; i < expect; ++i) {
    if (!recv->waitRecv(nullptr, Left(deadline))) throw ::gloo::IoException("aborted");
  }
  for (int i = 0; i < sends; ++i) {
    if (!send->waitSend(nullptr, Left(deadline))) throw ::gloo::IoException("aborted");
  }
  all->assign(size_, {});
  for (int p = 0; p < size_; ++p) {
    (*all)[p].resize((offset[p + 1] - offset[p]) / 8);
    std::memcpy((*all)[p].data(), in.data() + offset[p], (*all)[p].size() * 8);
  }
  (*all)[rank_] = mine;
}

Tensor GlooCollective::Impl::Scratch(DataType dtype, const TensorShape& shape) {
  auto it = spare_.find({dtype, shape.num_elements()});
  if (it != spare_.end()) {
    Tensor t = std::move(it->second);
    spare_.erase(it);
    if (t.RefCountIsOne()) {
      if (t.shape() == shape) return t;
      StatusOr<Tensor> r = t.Reshaped(shape);
      if (r.ok()) {
        t = Tensor();
        return *std::move(r);
      }
    }
  }
  return Tensor(dtype, shape);
}

void GlooCollective::Impl::Recycle(Tensor t) {
  if (!t.IsInitialized() || !t.RefCountIsOne() || t.num_elements() == 0) return;
  if (spare_.size() >= 8) spare_.erase(spare_.begin());
  spare_[{t.dtype(), t.num_elements()}] = std::move(t);
}

Status GlooCollective::Impl::Fail(int64_t round, const RoundError& e,
                                  const std::vector<int>& late) {
  const std::string where =
      "all-reduce round " + std::to_string(round) + " of " + prefix_ + " (rank " +
      std::to_string(rank_) + "): ";
  {
    std::unique_lock<std::mutex> l(mu_);
    if (!broken_.ok()) return Closed(&l);  // aborted: the abort's status
  }
  Status s;
  std::vector<int> failed;
  // The peer whose connection failed (Gloo's message names its address).
  std::vector<int> closed;
  std::map<int, std::string> why;
  if (e.message.find(kClosedByUs) == std::string::npos) {
    for (int p = 0; p < size_ && closed.empty(); ++p) {
      for (const std::string& a : peer_addresses_[p]) {
        if (Names(e.message, a)) {
          closed.push_back(p);
          why[p] = e.message;
          break;
        }
      }
    }
  }
  if (!closed.empty()) {
    // A peer that failed wrote why before closing; one that wrote nothing
    // within the grace is gone.
    std::vector<std::string> keys, missing;
    for (int p : closed) keys.push_back("fail/" + std::to_string(p));
    Status w = ep_->store->Wait(prefix_, keys, Clock::now() + ep_->options.failure_grace, &missing);
    std::vector<int> gone;
    for (const std::string& k : missing) gone.push_back(std::atoi(k.c_str() + 5));
    if (!w.ok() && w.code() != Code::kDeadlineExceeded) gone = closed;  // the store is gone too
    if (!gone.empty()) {
      std::string detail;
      for (int p : gone) {
        std::string m = why[p];
        size_t cut = m.rfind("] ");
        detail += (detail.empty() ? "" : "; ") + (cut == std::string::npos ? m : m.substr(cut + 2));
      }
      failed = gone;
      s = Unavailable(where + "rank(s) " + RankList(gone) + " left the group (" + detail + ")");
    } else {
      for (int p : closed) {
        StatusOr<std::string> rec =
            ep_->store->Get(prefix_, "fail/" + std::to_string(p), Clock::now() + std::chrono::milliseconds(500));
        if (!rec.ok()) continue;
        s = PeerRecord(p, *rec, &failed);
        break;
      }
    }
  }
  if (s.ok() && e.timeout) {
    failed = late;
    s = late.empty() ? DeadlineExceeded(where + "the ring did not finish by the deadline (" + e.message + ")")
                     : DeadlineExceeded(where + "rank(s) " + RankList(late) +
                                        " did not join by the deadline");
  }
  if (s.ok()) s = Unavailable(where + e.message);
  {
    std::unique_lock<std::mutex> l(mu_);
    if (!broken_.ok()) return Closed(&l);
    broken_ = s;
    failed_ = failed;
  }
  CloseGroup();
  return s;
}

void GlooCollective::Impl::Ring(DataType dtype, const void* input, Tensor* out, ReduceOp op,
                                uint32_t tag, Clock::time_point deadline) {
  if (input != nullptr && input != out->raw_data()) out->CopyFromBytes(input, out->TotalBytes());
  const size_t n = size_t(out->num_elements());
  DispatchDataType(dtype, [&]<typename T>() {
    if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double> ||
                  std::is_same_v<T, int32_t> || std::is_same_v<T, int64_t>) {
      RingSum(out->data<T>(), n, sizeof(T), &reduce_loops::Sum<T>, tag, deadline);
      if (op == ReduceOp::kMean && size_ > 1) reduce_loops::Divide<T>(out->data<T>(), n, T(size_));
    }
  });
}

void GlooCollective::Impl::RingSum(void* data, size_t n, size_t elem,
                                   void (*sum)(void*, const void*, const void*, size_t),
                                   uint32_t tag, Clock::time_point deadline) {
  const int p = size_;
  if (p == 1 || n == 0) return;
  // Chunk c of p: elements [n * c / p, n * (c + 1) / p), sent in segments:
  // at least two a chunk (one is reduced while the next arrives), at most
  // kSegmentBytes each (Gloo's own ring cuts the same way). Every rank cuts
  // alike, so a segment sent is a segment received.
  constexpr size_t kSegmentBytes = size_t(1) << 20;
  auto chunk = [&](int c) {
    c = ((c % p) + p) % p;
    return std::pair<size_t, size_t>(n * size_t(c) / size_t(p), n * size_t(c + 1) / size_t(p));
  };
  size_t widest = 0;
  for (int c = 0; c < p; ++c) widest = std::max(widest, chunk(c).second - chunk(c).first);
  const size_t segments = std::max<size_t>(2, (widest * elem + kSegmentBytes - 1) / kSegmentBytes);
  const size_t seg = std::max<size_t>(1, (widest + segments - 1) / segments);
  const int right = (rank_ + 1) % p, left = (rank_ + p - 1) % p;
  const uint64_t slot = ::gloo::Slot::build(0x41, tag);
  char* base = static_cast<char*>(data);
  if (ring_tmp_.size() < widest * elem) ring_tmp_.resize(widest * elem);
  LiveBuffer out(this, data, n * elem);
  LiveBuffer tmp(this, ring_tmp_.data(), widest * elem);
  auto wait_recv = [&](LiveBuffer& b) {
    if (!b->waitRecv(nullptr, Left(deadline))) throw ::gloo::IoException("aborted");
  };
  auto wait_send = [&](LiveBuffer& b) {
    if (!b->waitSend(nullptr, Left(deadline))) throw ::gloo::IoException("aborted");
  };
  // Posts the sends of chunk `c` to the right; returns how many.
  auto send_chunk = [&](int c) {
    const auto [lo, hi] = chunk(c);
    int k = 0;
    for (size_t at = lo; at < hi; at += seg, ++k) out->send(right, slot, at * elem, std::min(seg, hi - at) * elem);
    return k;
  };
  // Reduce-scatter: after step s rank r holds chunk r - s - 1 summed over
  // s + 2 ranks; at the end chunk r + 1 over all of them.
  for (int s = 0; s < p - 1; ++s) {
    const auto [lo, hi] = chunk(rank_ - s - 1);
    for (size_t at = lo; at < hi; at += seg) tmp->recv(left, slot, (at - lo) * elem, std::min(seg, hi - at) * elem);
    const int sends = send_chunk(rank_ - s);
    for (size_t at = lo; at < hi; at += seg) {
      wait_recv(tmp);  // segments arrive in order (one connection, one slot)
      const size_t len = std::min(seg, hi - at);
      sum(base + at * elem, base + at * elem, ring_tmp_.data() + (at - lo) * elem, len);
    }
    for (int k = 0; k < sends; ++k) wait_send(out);
  }
  // Allgather: the summed chunks go round, received in place.
  for (int s = 0; s < p - 1; ++s) {
    const auto [lo, hi] = chunk(rank_ - s);
    int recvs = 0;
    for (size_t at = lo; at < hi; at += seg, ++recvs) out->recv(left, slot, at * elem, std::min(seg, hi - at) * elem);
    const int sends = send_chunk(rank_ + 1 - s);
    for (int k = 0; k < recvs; ++k) wait_recv(out);
    for (int k = 0; k < sends; ++k) wait_send(out);
  }
}

void GlooCollective::Impl::Reduce(const std::vector<Tensor>& tensors, ReduceOp op,
                                  Clock::time_point deadline, uint64_t base,
                                  std::vector<Reduced>* out) {
  out->clear();
  for (int d = 0; d < 4; ++d) {
    const DataType dtype = kDtypes[d];
    Reduced r;
    int64_t total = 0;
    for (size_t i = 0; i < tensors.size(); ++i) {
      if (tensors[i].dtype() == dtype) {
        r.idx.push_back(i);
        total += tensors[i].num_elements();
      }
    }
    if (total == 0) continue;
    const bool single = r.idx.size() == 1;
    const Tensor& first = tensors[r.idx[0]];
    r.in_place = single && first.RefCountIsOne();
    r.out = r.in_place ? first
            : single   ? Scratch(dtype, first.shape())
                       : Scratch(dtype, TensorShape({total}));
    if (!single) {
      char* at = static_cast<char*>(r.out.raw_data());
      for (size_t i : r.idx) {
        std::memcpy(at, tensors[i].raw_data(), tensors[i].TotalBytes());
        at += tensors[i].TotalBytes();
      }
    }
    Ring(dtype, single && !r.in_place ? first.raw_data() : nullptr, &r.out, op,
         uint32_t(base + 2 + d), deadline);
    out->push_back(std::move(r));
  }
}

void GlooCollective::Impl::Commit(std::vector<Tensor>* tensors, std::vector<Reduced>* reduced) {
  for (Reduced& r : *reduced) {
    if (r.in_place) continue;  // the tensor holds the result
    if (r.idx.size() == 1) {
      Tensor old = std::move((*tensors)[r.idx[0]]);
      (*tensors)[r.idx[0]] = std::move(r.out);
      Recycle(std::move(old));
      continue;
    }
    const char* at = static_cast<const char*>(r.out.raw_data());
    for (size_t i : r.idx) {
      Tensor& t = (*tensors)[i];
      if (!t.RefCountIsOne()) t = Tensor(t.dtype(), t.shape());  // another holds it
      t.CopyFromBytes(at, t.TotalBytes());
      at += t.TotalBytes();
    }
    Recycle(std::move(r.out));
  }
  reduced->clear();
}

void GlooCollective::Impl::JoinWithZeros(const std::array<int64_t, 4>& totals,
                                         Clock::time_point deadline, uint64_t base) {
  for (int d = 0; d < 4; ++d) {
    if (totals[d] == 0) continue;
    Tensor zeros = Scratch(kDtypes[d], TensorShape({totals[d]}));
    std::memset(zeros.raw_data(), 0, zeros.TotalBytes());
    Ring(kDtypes[d], nullptr, &zeros, ReduceOp::kSum, uint32_t(base + 2 + d), deadline);
    Recycle(std::move(zeros));
  }
}

Status GlooCollective::Impl::AllReduce(std::vector<Tensor>* tensors, ReduceOp op,
                                       Clock::time_point deadline) {
  {
    std::lock_guard<std::mutex> l(mu_);
    if (!broken_.ok()) return broken_;
  }
  const int64_t round = next_round_++;
  std::vector<int64_t> sig = Signature(*tensors, op);
  // The watchdog looks for a peer's failure while the round lasts.
  {
    std::lock_guard<std::mutex> l(mu_);
    round_active_ = true;
    active_round_ = round;
  }
  watch_cv_.notify_all();
  struct RoundEnds {
    Impl* self;
    ~RoundEnds() {
      {
        std::lock_guard<std::mutex> l(self->mu_);
        self->round_active_ = false;
      }
      self->watch_cv_.notify_all();
    }
  } round_ends{this};
  // One rank: the sum and the mean of its own tensors, if the call is valid.
  if (size_ == 1) return Check(round, {Decode(sig)});
  Header mine;
  mine.round = uint64_t(round);
  mine.op = uint32_t(op);
  mine.count = uint32_t(tensors->size());
  mine.hash = Hash(sig);
  mine.sig_bytes = sig.size() * 8;

  // Slots: ours use a prefix byte apart from Gloo's collectives (1-8).
  const uint64_t base = uint64_t(round) * 8;
  auto slot = [&](int k) { return uint64_t(::gloo::Slot::build(0x40, uint32_t(base + k))); };
  auto fail = [&](const std::exception& e, HeaderExchange* x) {
    const bool timeout = std::string(e.what()).find("Timed out") != std::string::npos;
    return Fail(round, {timeout, e.what()}, timeout && x != nullptr ? Late(x) : std::vector<int>{});
  };
  // A training step makes the same call every round. Then the ring does not
  // wait for the headers: it starts at once on the last round's layout (in
  // place where the tensor is ours alone, as in every round), and the
  // headers are checked when it ends. A rank whose call differs sees a header equal to
  // the last round's and joins that ring with zeros; then every rank finds
  // the mismatch, and nothing packed or replaced is committed.
  const bool speculate = have_last_ && sig == last_sig_;
  HeaderExchange hx;
  std::vector<Reduced> reduced;
  try {
    PostHeaders(mine, &hx, slot(0));
    if (speculate) Reduce(*tensors, op, deadline, base, &reduced);
    WaitHeaders(&hx, deadline);
  } catch (const std::exception& e) {
    return fail(e, &hx);
  }
  const std::vector<Header>& headers = hx.in;
  bool same = true;
  bool someone_speculated = false;
  for (const Header& h : headers) {
    same = same && h.round == mine.round && h.hash == mine.hash && h.count == mine.count &&
           h.op == mine.op && h.sig_bytes == mine.sig_bytes;
    someone_speculated = someone_speculated || (have_last_ && h.hash == last_hash_);
  }
  if (!same) {
    for (Reduced& r : reduced) Recycle(std::move(r.out));
    for (int p = 1; p < size_; ++p) {
      if (headers[p].round != headers[0].round) {
        // Not a caller's mismatch: the group lost count. Fatal.
        return Fail(round, {false, "rank " + std::to_string(p) + " is at all-reduce round " +
                                       std::to_string(headers[p].round) + ", rank 0 at " +
                                       std::to_string(headers[0].round)}, {});
      }
    }
    std::vector<std::vector<int64_t>> sigs;
    try {
      if (someone_speculated && !speculate) JoinWithZeros(last_totals_, deadline, base);
      ExchangeSignatures(sig, headers, &sigs, deadline, slot(1));
    } catch (const std::exception& e) {
      return fail(e, nullptr);
    }
    std::vector<Call> calls;
    for (const auto& s : sigs) calls.push_back(Decode(s));
    Status s = Check(round, calls);
    if (!s.ok()) return s;
    return InvalidArgument("all-reduce round " + std::to_string(round) +
                           ": the ranks' calls differ (their signatures' hashes do)");
  }
  if (!speculate) {
    // Every rank made the same call: validity is the same everywhere.
    Status valid = Check(round, {Decode(sig)});
    if (!valid.ok()) return valid;
    try {
      Reduce(*tensors, op, deadline, base, &reduced);
    } catch (const std::exception& e) {
      return fail(e, nullptr);
    }
  }
  if (!speculate) {  // a new call: the rounds that repeat it speculate
    last_totals_ = {};
    for (const Tensor& t : *tensors) {
      for (int d = 0; d < 4; ++d) last_totals_[d] += t.dtype() == kDtypes[d] ? t.num_elements() : 0;
    }
    have_last_ = true;
    last_sig_ = std::move(sig);
    last_hash_ = mine.hash;
  }
  Commit(tensors, &reduced);
  return Status();
}

// ---------------------------------------------------------------------------

GlooCollective::GlooCollective(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

GlooCollective::~GlooCollective() {
  if (impl_ != nullptr) impl_->Abort(Cancelled("the collective was destroyed"));
}

StatusOr<std::unique_ptr<GlooCollective>> GlooCollective::Create(const GlooCollectiveOptions& o) {
  if (o.size < 1 || o.rank < 0 || o.rank >= o.size) {
    return InvalidArgument("collective: rank " + std::to_string(o.rank) + " of a group of " +
                           std::to_string(o.size) + " (rank must be in [0, size))");
  }
  if (o.prefix.empty()) return InvalidArgument("collective: an empty prefix");
  if (o.store_address.empty()) return InvalidArgument("collective: no store address");
  const auto deadline = Clock::now() + o.timeout;
  // Gloo writes to its sockets with plain writev: a peer that is gone would
  // kill this process with SIGPIPE instead of failing the round.
  static std::once_flag ignore_sigpipe;
  std::call_once(ignore_sigpipe, [] { signal(SIGPIPE, SIG_IGN); });
  auto ep = std::make_shared<Impl::Endpoint>();
  ep->options = o;
  ep->store = CollectiveStoreClient::Connect(o.store_address);
  if (o.size > 1) {
    try {
      gt::attr attr;
      if (!o.interface.empty()) {
        attr.iface = o.interface;
      } else {
        attr.hostname = o.host;
      }
      ep->device = gt::CreateDevice(attr);
    } catch (const std::exception& e) {
      return InvalidArgument("collective: cannot use " +
                             (o.interface.empty() ? "host " + o.host : "interface " + o.interface) +
                             " for the transport: " + e.what());
    }
  }
  auto impl = std::make_unique<Impl>(ep, o.prefix, o.rank, o.size);
  FS_RETURN_IF_ERROR(impl->Connect(deadline));
  return std::unique_ptr<GlooCollective>(new GlooCollective(std::move(impl)));
}

StatusOr<std::unique_ptr<GlooCollective>> GlooCollective::Rebuild(
    const std::string& prefix, const std::vector<int>& members) const {
  auto it = std::find(members.begin(), members.end(), impl_->rank_);
  if (it == members.end()) {
    return InvalidArgument("collective: rank " + std::to_string(impl_->rank_) +
                           " is not among the members of the rebuilt group (" +
                           RankList(members) + ")");
  }
  for (size_t i = 1; i < members.size(); ++i) {
    if (members[i] <= members[i - 1]) {
      return InvalidArgument("collective: the members of a rebuilt group must increase (" +
                             RankList(members) + ")");
    }
  }
  if (prefix.empty() || prefix == impl_->prefix_) {
    return InvalidArgument("collective: a rebuilt group needs a new prefix (not \"" + prefix + "\")");
  }
  auto ep = impl_->ep_;
  if (ep->device == nullptr && members.size() > 1) {
    return InvalidArgument("collective: a group of one cannot grow by Rebuild");
  }
  auto impl = std::make_unique<Impl>(ep, prefix, int(it - members.begin()), int(members.size()));
  FS_RETURN_IF_ERROR(impl->Connect(Clock::now() + ep->options.timeout));
  return std::unique_ptr<GlooCollective>(new GlooCollective(std::move(impl)));
}

int GlooCollective::rank() const { return impl_->rank_; }
int GlooCollective::size() const { return impl_->size_; }
const std::string& GlooCollective::prefix() const { return impl_->prefix_; }

std::vector<int> GlooCollective::failed_ranks() const {
  std::lock_guard<std::mutex> l(impl_->mu_);
  return impl_->failed_;
}

Status GlooCollective::AllReduce(std::vector<Tensor>* tensors, ReduceOp op, Deadline deadline) {
  return impl_->AllReduce(tensors, op, deadline);
}

void GlooCollective::Abort(const Status& status) { impl_->Abort(status); }

void RegisterGlooCollectiveFactory() {
  RegisterStoreStepRaceFactory();  // backup replicas of gloo groups race in their store
  RegisterCollectiveFactory(
      "gloo", [](const CollectiveGroupSpec& spec) -> StatusOr<std::unique_ptr<Collective>> {
        GlooCollectiveOptions o;
        o.store_address = spec.store_address;
        o.prefix = spec.prefix;
        o.rank = spec.rank;
        o.size = spec.size;
        o.timeout = spec.timeout;
        if (!spec.host.empty()) o.host = spec.host;
        StatusOr<std::unique_ptr<GlooCollective>> c = GlooCollective::Create(o);
        if (!c.ok()) return c.status();
        return std::unique_ptr<Collective>(std::move(c).value());
      });
}

}  // namespace flowstate

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

#include <cctype>
#include <exception>
#include <cstring>

#include "distributed/gloo_collective_internal.h"
#include "distributed/store_step_race.h"
#include "graph/mutex.h"

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

namespace gloo_internal {

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

}  // namespace gloo_internal

namespace {

using namespace collective_signature;  // Signature, Hash, Decode, Check, Call
using Clock = std::chrono::steady_clock;

}  // namespace

GlooCollective::Impl::~Impl() {
  {
    MutexLock l(mu_);
    stop_watch_ = true;
  }
  watch_cv_.NotifyAll();
  if (watchdog_.joinable()) watchdog_.join();
  std::vector<Parked> parked;  // their buffers unregister themselves (mu_)
  {
    MutexLock l(mu_);
    parked.swap(parked_);
  }
  parked.clear();
  std::vector<std::unique_ptr<::gloo::transport::UnboundBuffer>> dead;
  {
    MutexLock l(mu_);
    dead.swap(dead_);
  }
}

Status GlooCollective::Impl::Connect(Clock::time_point deadline) {
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
    {
      MutexLock l(mu_);
      failed_ = ranks;
    }
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
      peer_addresses_[i].push_back(::gloo::transport::tcp::Address(bytes).str());
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

void GlooCollective::Impl::Watch() {
  const auto every = std::max(std::chrono::milliseconds(10), ep_->options.failure_poll);
  MutexLock l(mu_);
  for (;;) {
    while (!stop_watch_ && !round_active_) watch_cv_.Wait(mu_);
    if (stop_watch_) return;
    const int64_t round = active_round_;
    const auto poll = std::chrono::steady_clock::now() + every;
    auto ended = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return stop_watch_ || !round_active_ || active_round_ != round || !broken_.ok();
    };
    while (!ended() && watch_cv_.WaitUntil(mu_, poll)) {
    }
    if (ended()) {
      // A broken group's round ends by itself (its waits were woken).
      while (!stop_watch_ && round_active_ && active_round_ == round) watch_cv_.Wait(mu_);
      continue;
    }
    l.Unlock();
    std::vector<int> failed;
    Status peer = PeerFailure(&failed);
    if (!peer.ok()) Abort(peer, failed);
    l.Lock();
  }
}

Status GlooCollective::Impl::PeerFailure(std::vector<int>* failed) {
  for (int p = 0; p < size_; ++p) {
    if (p == rank_) continue;
    StatusOr<std::string> rec = ep_->store->Get(prefix_, "fail/" + std::to_string(p),
                                                Clock::now() + std::chrono::milliseconds(200));
    if (!rec.ok()) continue;
    return PeerRecord(p, *rec, failed);
  }
  return Status();
}

void GlooCollective::Impl::NamePeers(::gloo::transport::Context* tc) {
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
    auto it = listening.find(::gloo::transport::tcp::Address(reinterpret_cast<sockaddr*>(&local), ll).str());
    if (it == listening.end()) continue;
    if (getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &pl) != 0) continue;
    peer_addresses_[it->second].push_back(::gloo::transport::tcp::Address(reinterpret_cast<sockaddr*>(&peer), pl).str());
  }
  closedir(dir);
}

void GlooCollective::Impl::Abort(const Status& status, const std::vector<int>& failed) {
  {
    MutexLock l(mu_);
    if (!broken_.ok()) return;
    broken_ = status.ok() ? Cancelled("the collective was aborted") : status;
    failed_ = failed;
  }
  CloseGroup();
  // Gloo does not signal every pending operation when a connection fails
  // (a send it queued after a failed write): wake the round's waits here.
  MutexLock l(mu_);
  for (const auto& [b, tag] : live_) {
    b->abortWaitSend();
    b->abortWaitRecv();
  }
}

void GlooCollective::Impl::Abandon(uint32_t tag) {
  MutexLock l(mu_);
  if (!abandoned_.insert(tag).second) return;
  if (abandoned_.size() > 4096) abandoned_.erase(abandoned_.begin());
  for (const auto& [b, t] : live_) {
    if (t != int64_t(tag)) continue;
    b->abortWaitSend();
    b->abortWaitRecv();
  }
}

void GlooCollective::Impl::Await(LiveBuffer& b, bool recv, Clock::time_point deadline,
                                 int64_t tag) {
  for (;;) {
    if (recv ? b->waitRecv(nullptr, Left(deadline)) : b->waitSend(nullptr, Left(deadline))) return;
    if (tag < 0) throw ::gloo::IoException("aborted");
    MutexLock l(mu_);
    if (!broken_.ok()) throw ::gloo::IoException("aborted");
    if (abandoned_.count(uint32_t(tag))) throw Abandoned{};
    // Woken for nothing of ours: wait on.
  }
}

void GlooCollective::Impl::Park(Parked parked) {
  size_t n = 0;
  {
    MutexLock l(mu_);
    parked_.push_back(std::move(parked));
    n = parked_.size();
  }
  if (n > kMaxParked) {
    Abort(Unavailable("collective " + prefix_ + ": " + std::to_string(n) +
                      " abandoned rounds hold buffers (at most " + std::to_string(kMaxParked) +
                      "); the group must be rebuilt"));
  }
}

void GlooCollective::Impl::CloseGroup() {
  Status s;
  std::vector<int> failed;
  {
    MutexLock l(mu_);
    if (closed_) return;
    closed_ = true;
    s = broken_;
    failed = failed_;
  }
  // Wake this rank's blocked call first; a peer that sees the connection
  // close waits `failure_grace` for the record.
  if (size_ > 1 && ctx_ != nullptr) ctx_->Signal(kClosedByUs);
  {
    MutexLock l(mu_);
    signalled_ = true;
  }
  signalled_cv_.NotifyAll();
  if (size_ > 1) {
    (void)ep_->store->Set(prefix_, "fail/" + std::to_string(rank_), EncodeRecord(s, failed),
                          Clock::now() + std::chrono::milliseconds(500));
  }
}

void GlooCollective::Impl::AddLive(::gloo::transport::UnboundBuffer* b, int64_t tag) {
  MutexLock l(mu_);
  live_[b] = tag;
  if (!broken_.ok() || (tag >= 0 && abandoned_.count(uint32_t(tag)))) {
    b->abortWaitSend();
    b->abortWaitRecv();
  }
}

GlooCollective::Impl::LiveBuffer::LiveBuffer(Impl* impl, void* ptr, size_t bytes, int64_t tag)
    : impl(impl), buf(impl->ctx_->createUnboundBuffer(ptr, bytes)) {
  impl->AddLive(buf.get(), tag);
}

GlooCollective::Impl::LiveBuffer::~LiveBuffer() { impl->Release(std::move(buf)); }

void GlooCollective::Impl::Release(std::unique_ptr<::gloo::transport::UnboundBuffer> b) {
  MutexLock l(mu_);
  live_.erase(b.get());
  // A failed round's sends may still complete on Gloo's thread, which then
  // signals the buffer (TSan saw ~UnboundBuffer race that signal when a
  // peer's task was stopped mid-round).
  if (std::uncaught_exceptions() > 0 || !broken_.ok()) dead_.push_back(std::move(b));
}

GlooCollective::Impl::ActiveRound::ActiveRound(Impl* self, int64_t round) : self(self) {
  {
    MutexLock l(self->mu_);
    self->round_active_ = true;
    self->active_round_ = round;
  }
  self->watch_cv_.NotifyAll();
}

GlooCollective::Impl::ActiveRound::~ActiveRound() {
  {
    MutexLock l(self->mu_);
    self->round_active_ = false;
  }
  self->watch_cv_.NotifyAll();
}

std::string GlooCollective::Impl::RankList(const std::vector<int>& ranks) {
  std::string out;
  for (int r : ranks) out += (out.empty() ? "" : ", ") + std::to_string(r);
  return out;
}

std::string GlooCollective::Impl::EncodeRecord(const Status& s, const std::vector<int>& failed) {
  return std::to_string(int(s.code())) + "\n" + RankList(failed) + "\n" + s.message();
}

Status GlooCollective::Impl::DecodeRecord(const std::string& v, std::vector<int>* failed) {
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

Status GlooCollective::Impl::PeerRecord(int p, const std::string& record, std::vector<int>* failed) {
  Status s = DecodeRecord(record, failed);
  if (s.ok()) s = Cancelled("the group was closed");
  if (s.code() == Code::kCancelled || s.code() == Code::kAborted || s.code() == Code::kInternal) {
    s = Status(s.code(), "rank " + std::to_string(p) + " closed the group: " + s.message());
  }
  return s;
}


bool GlooCollective::Impl::Names(const std::string& message, const std::string& address) {
  for (size_t at = message.find(address); at != std::string::npos;
       at = message.find(address, at + 1)) {
    const size_t end = at + address.size();
    if (end >= message.size() || !std::isdigit(static_cast<unsigned char>(message[end]))) return true;
  }
  return false;
}


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
    // An empty vector's data() may be null: no memcpy for 0 bytes.
    if (!(*all)[p].empty()) std::memcpy((*all)[p].data(), in.data() + offset[p], (*all)[p].size() * 8);
  }
  (*all)[rank_] = mine;
}


Status GlooCollective::Impl::Fail(int64_t round, const RoundError& e,
                                  const std::vector<int>& late) {
  const std::string where =
      "all-reduce round " + std::to_string(round) + " of " + prefix_ + " (rank " +
      std::to_string(rank_) + "): ";
  {
    MutexLock l(mu_);
    if (!broken_.ok()) return Closed();  // aborted: the abort's status
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
    MutexLock l(mu_);
    if (!broken_.ok()) return Closed();
    broken_ = s;
    failed_ = failed;
  }
  CloseGroup();
  return s;
}
Status GlooCollective::Impl::AllReduce(std::vector<Tensor>* tensors, ReduceOp op,
                                       Clock::time_point deadline) {
  {
    MutexLock l(mu_);
    if (!broken_.ok()) return broken_;
  }
  const int64_t round = next_round_++;
  std::vector<int64_t> sig = Signature(*tensors, op);
  // The watchdog looks for a peer's failure while the round lasts.
  ActiveRound active(this, round);
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
  auto slot = [&](int k) { return uint64_t(::gloo::Slot::build(kRoundSlot, uint32_t(base + k))); };
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
      ::gloo::transport::tcp::attr attr;
      if (!o.interface.empty()) {
        attr.iface = o.interface;
      } else {
        attr.hostname = o.host;
      }
      ep->device = ::gloo::transport::tcp::CreateDevice(attr);
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
                           Impl::RankList(members) + ")");
  }
  for (size_t i = 1; i < members.size(); ++i) {
    if (members[i] <= members[i - 1]) {
      return InvalidArgument("collective: the members of a rebuilt group must increase (" +
                             Impl::RankList(members) + ")");
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
  MutexLock l(impl_->mu_);
  return impl_->failed_;
}

Status GlooCollective::AllReduce(std::vector<Tensor>* tensors, ReduceOp op, Deadline deadline) {
  return impl_->AllReduce(tensors, op, deadline);
}

void GlooCollective::Abort(const Status& status) { impl_->Abort(status); }

Status GlooCollective::AllReduceAmong(std::vector<Tensor>* tensors, const std::vector<int>& members,
                                      uint32_t tag, Deadline deadline) {
  return impl_->AllReduceAmong(tensors, members, tag, deadline);
}

Status GlooCollective::Send(const std::vector<Tensor>& tensors, int to, uint32_t tag,
                            Deadline deadline) {
  return impl_->Send(tensors, to, tag, deadline);
}

Status GlooCollective::Recv(std::vector<Tensor>* tensors, int from, uint32_t tag,
                            Deadline deadline) {
  return impl_->Recv(tensors, from, tag, deadline);
}

void GlooCollective::Abandon(uint32_t tag) { impl_->Abandon(tag); }

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

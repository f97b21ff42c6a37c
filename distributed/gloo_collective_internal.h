// GlooCollective's internals (distributed/gloo_collective.h), shared by the
// files that implement it: gloo_collective.cc (the group: rendezvous,
// failures, the checked all-reduce round) and gloo_ring.cc (the ring itself,
// subgroup rounds, point-to-point transfers, scratch buffers). Not for any
// other file. Gloo's headers stay in those .cc files; here its types are
// only named.
//
// Thread safety: as gloo_collective.h says; fields say what guards them.
#ifndef FLOWSTATE_DISTRIBUTED_GLOO_COLLECTIVE_INTERNAL_H_
#define FLOWSTATE_DISTRIBUTED_GLOO_COLLECTIVE_INTERNAL_H_

#include <algorithm>
#include <array>
#include <chrono>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "distributed/collective_signature.h"
#include "distributed/collective_store.h"
#include "distributed/gloo_collective.h"
#include "graph/mutex.h"


// Gloo's types, only by name: the files that implement GlooCollective
// include Gloo's headers themselves.
namespace gloo::transport {
class Context;
class Device;
class UnboundBuffer;
}  // namespace gloo::transport

namespace flowstate {
namespace gloo_internal {
class MeshContext;  // gloo_collective.cc
}  // namespace gloo_internal

class GlooCollective::Impl {
 public:
  using Clock = std::chrono::steady_clock;
  using Header = collective_signature::Header;
  using MeshContext = gloo_internal::MeshContext;

  // What Abort tells Gloo's pending operations (and Fail recognises).
  static constexpr const char* kClosedByUs = "flowstate: the group was closed by this rank";
  // The prefixes of our Gloo slots, apart from Gloo's own collectives (1-8):
  // a round's headers and signatures, its rings, the rings of subgroup
  // rounds, transfers between two ranks.
  static constexpr uint8_t kRoundSlot = 0x40, kRingSlot = 0x41, kAmongSlot = 0x42,
                           kTransferSlot = 0x43;
  // The dtypes a round reduces, one ring each, in this order.
  static constexpr DataType kDtypes[] = {DataType::kFloat32, DataType::kFloat64,
                                         DataType::kInt32, DataType::kInt64};
  // What a wait of an abandoned round throws (Abandon): not a failure.
  struct Abandoned {};
  // What a round threw: a timeout of ours or a failed connection.
  struct RoundError {
    bool timeout = false;
    std::string message;
  };
  // The time left until `deadline`, at least 1 ms (Gloo's waits take a timeout).
  static std::chrono::milliseconds Left(Clock::time_point deadline) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    return std::max(left, std::chrono::milliseconds(1));
  }
  static std::string RankList(const std::vector<int>& ranks);
  // A failure record in the store ("fail/<rank>"): code, blamed ranks, message.
  static std::string EncodeRecord(const Status& s, const std::vector<int>& failed);
  static Status DecodeRecord(const std::string& v, std::vector<int>* failed);
  // Peer p's failure record as this rank's status: the peer's own cause as
  // it wrote it, or for an abort of its own (CANCELLED, ABORTED, INTERNAL)
  // the same prefixed "rank p closed the group: ".
  static Status PeerRecord(int p, const std::string& record, std::vector<int>* failed);
  // Whether `message` names `address` ("[10.0.0.1]:123" is not "...:1234").
  static bool Names(const std::string& message, const std::string& address);

  // What a group's members share and a rebuilt group reuses.
  struct Endpoint {
    std::shared_ptr<CollectiveStoreClient> store;
    std::shared_ptr<::gloo::transport::Device> device;
    GlooCollectiveOptions options;
  };

  Impl(std::shared_ptr<Endpoint> ep, std::string prefix, int rank, int size)
      : ep_(std::move(ep)), prefix_(std::move(prefix)), rank_(rank), size_(size) {}
  ~Impl();

  // Publishes this rank's addresses, waits for the others', connects.
  Status Connect(Clock::time_point deadline);

  // The watchdog (GlooCollectiveOptions::failure_poll): while a round lasts,
  // looks for a peer's failure record every failure_poll and aborts the
  // group with it.
  void Watch();

  // The first peer failure record in the store, as the status to fail with
  // (and the ranks it blames in *failed), as Fail reads one; OK when there
  // is none (or the store cannot say now).
  Status PeerFailure(std::vector<int>* failed);

  // The unbound buffers of the round in progress, registered for as long as
  // they live, with the tag that abandons them (-1: none): Abort wakes their
  // waits, Abandon those of its tag.
  void AddLive(::gloo::transport::UnboundBuffer* b, int64_t tag);
  // Unregisters `b` and destroys it, unless its round failed (the group is
  // broken, or an exception is unwinding the round): Gloo's threads may
  // still complete its pending operations, so it is kept until the group
  // goes (dead_).
  void Release(std::unique_ptr<::gloo::transport::UnboundBuffer> b);
  // An unbound buffer of this round over [ptr, ptr + bytes), live while it
  // is; `tag` >= 0: Abandon(tag) wakes its waits.
  struct LiveBuffer {
    LiveBuffer(Impl* impl, void* ptr, size_t bytes, int64_t tag = -1);
    ~LiveBuffer();
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
  void NamePeers(::gloo::transport::Context* tc);

  Status AllReduce(std::vector<Tensor>* tensors, ReduceOp op, Clock::time_point deadline);
  void Abort(const Status& status, const std::vector<int>& failed = {});

  // Posts this rank's failure record and closes every connection, so that
  // every peer fails promptly (and finds out why). Once.
  void CloseGroup();

  // The group's failure, once whoever broke it has closed every connection
  // Until then Gloo may still signal this round's pending buffers, which the
  // caller frees when the round returns.
  Status Closed() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    while (!signalled_) signalled_cv_.Wait(mu_);
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
  // Runs the ring of every dtype of `tensors` (tags from `base`) over the
  // group, or over `members` only (a subgroup round, AllReduceAmong): a
  // dtype's only tensor is reduced in its own buffer when nobody else holds
  // it; the other tensors are left untouched, and Commit moves the results
  // into them.
  // `in_place` false: every dtype is reduced in a buffer of the
  // collective's (a subgroup round, which may be abandoned and parked).
  void Reduce(const std::vector<Tensor>& tensors, ReduceOp op, Clock::time_point deadline,
              uint64_t base, std::vector<Reduced>* out,
              const std::vector<int>* members = nullptr, bool in_place = true);
  // `recycle` false: a tensor replaced by its result is dropped, not kept
  // as scratch (it may come from a device's allocator).
  void Commit(std::vector<Tensor>* tensors, std::vector<Reduced>* reduced, bool recycle = true);
  // Takes part in a ring over buffers of `totals` elements per dtype with
  // zeros, and drops the result: what a rank whose call differs does in a
  // round others started speculatively, so that theirs ends.
  void JoinWithZeros(const std::array<int64_t, 4>& totals, Clock::time_point deadline,
                     uint64_t base);
  void Ring(DataType dtype, const void* input, Tensor* out, ReduceOp op, uint32_t tag,
            Clock::time_point deadline, const std::vector<int>* members = nullptr);
  // The ring all-reduce (sum) of n elements of `elem` bytes at `data`, in
  // place, over this round's own buffers (LiveBuffer), among every rank of
  // the group or `members` (increasing; their own slots, apart from the
  // group's rounds).
  void RingSum(void* data, size_t n, size_t elem, void (*sum)(void*, const void*, const void*, size_t),
               uint32_t tag, Clock::time_point deadline, const std::vector<int>* members = nullptr);
  // AllReduceAmong, Send and Recv (gloo_collective.h).
  Status AllReduceAmong(std::vector<Tensor>* tensors, const std::vector<int>& members,
                        uint32_t tag, Clock::time_point deadline);
  Status Send(const std::vector<Tensor>& tensors, int to, uint32_t tag, Clock::time_point deadline);
  Status Recv(std::vector<Tensor>* tensors, int from, uint32_t tag, Clock::time_point deadline);
  // Gives up the calls of `tag` (gloo_collective.h).
  void Abandon(uint32_t tag);
  bool IsAbandoned(uint32_t tag) const;
  // What an abandoned call returns: ABORTED naming it.
  Status AbandonedStatus(const char* what, uint32_t tag) const;
  // Waits for a receive (or send) of `b` to complete. A wait that is woken
  // throws: Abandoned when `tag` >= 0 was abandoned, else the group's
  // failure (gloo::IoException).
  void Await(LiveBuffer& b, bool recv, Clock::time_point deadline, int64_t tag);
  // What an abandoned call had posted (Gloo may still write into it, or
  // read from it, when a late peer comes): kept until the group goes. The
  // buffers go before the memory they cover.
  struct Parked {
    std::vector<Tensor> tensors;
    std::vector<char> bytes;
    std::vector<std::unique_ptr<LiveBuffer>> buffers;
  };
  // At most this many abandoned calls are parked; the next fails the group
  // (the job rebuilds it, which frees them).
  static constexpr size_t kMaxParked = 64;
  void Park(Parked parked);
  // Marks a round in progress for the watchdog while it lives.
  struct ActiveRound {
    ActiveRound(Impl* self, int64_t round);
    ~ActiveRound();
    Impl* self;
  };
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

  mutable Mutex mu_;
  Status broken_ ABSL_GUARDED_BY(mu_);             // sticky once set
  std::vector<int> failed_ ABSL_GUARDED_BY(mu_);
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
  bool signalled_ ABSL_GUARDED_BY(mu_) = false;    // CloseGroup closed the connections
  CondVar signalled_cv_;
  // The live buffers and the tags that abandon them.
  std::map<::gloo::transport::UnboundBuffer*, int64_t> live_ ABSL_GUARDED_BY(mu_);
  std::set<uint32_t> abandoned_ ABSL_GUARDED_BY(mu_);  // tags (the most recent 4096)
  bool round_active_ ABSL_GUARDED_BY(mu_) = false;  // a round is in progress
  int64_t active_round_ ABSL_GUARDED_BY(mu_) = -1;  // its number
  bool stop_watch_ ABSL_GUARDED_BY(mu_) = false;
  CondVar watch_cv_;  // round_active_, active_round_, stop_watch_, broken_
  std::thread watchdog_;       // Watch(); started by Connect (groups of more than one)
  std::vector<char> ring_tmp_;  // Ring's receive segments; the caller's thread only
  // The tag of the AllReduceAmong in progress (-1: none); the caller's thread only.
  int64_t among_tag_ = -1;
  // Buffers of failed rounds (Release), and of abandoned calls (Park). Last:
  // destroyed first, while the context and mu_ still are.
  std::vector<std::unique_ptr<::gloo::transport::UnboundBuffer>> dead_ ABSL_GUARDED_BY(mu_);
  std::vector<Parked> parked_ ABSL_GUARDED_BY(mu_);
};

}  // namespace flowstate

#endif  // FLOWSTATE_DISTRIBUTED_GLOO_COLLECTIVE_INTERNAL_H_

// GlooCollective: scheduler/'s Collective for one rank of a group of
// processes, over Gloo's TCP transport (the ring all-reduce of
// gloo/allreduce.h), with the group's rendezvous in a collective store
// (distributed/collective_store.h, served by the master task).
//
//   GlooCollectiveOptions o;
//   o.store_address = "10.0.0.1:50051";  // a CollectiveStoreService
//   o.prefix = "job-7/m0";               // one per membership
//   o.rank = 1; o.size = 3; o.host = "10.0.0.2";
//   StatusOr<std::unique_ptr<GlooCollective>> c = GlooCollective::Create(o);
//
// Create publishes this rank's transport addresses under the prefix, waits
// for every other rank's (DEADLINE_EXCEEDED naming the ranks that did not
// come by `timeout`) and connects to each.
//
// Each AllReduce is a round (k-th call of every rank): every rank sends every
// other a small header (round, op, count, a hash of the dtypes and shapes);
// a mismatch fails the round on every rank with INVALID_ARGUMENT naming the
// first rank that differs from rank 0 and both sides (the group stays
// usable); a rank that has not joined by the deadline fails it with
// DEADLINE_EXCEEDED naming it. Then one ring all-reduce per dtype: a dtype's
// only tensor is reduced in its own buffer when nobody else holds it (no
// copy), else into a buffer of the collective's that replaces it; several
// tensors of a dtype are packed into one buffer and copied back. The first
// round, and a round whose call differs from the last completed one's, waits
// for the headers before its ring, so a mismatch or a late rank is found
// before any tensor is touched. A round that repeats the last completed call
// (every training step) starts its ring at once, while the headers are in
// flight; a rank whose call differs then joins that ring with zeros and
// every rank fails the round as above: the differing rank's tensors are
// untouched, the repeating ranks' tensors reduced in place are left
// undefined. So is any tensor reduced in place when the group fails during
// a ring (a peer gone, a deadline, an abort; the group is dead then).
//
// Reduction order (what "deterministic" means here): Gloo's ring splits the
// buffer into one chunk per rank; chunk c is summed starting at rank c-1 and
// going down the ring, ((x[c-1] + x[c-2]) + ...) + x[c] (indices mod n), and
// every rank receives that same sum. So for a given group size and the same
// list of dtypes and shapes the result is bit-identical on every rank and
// across runs; it equals rank order ((x0 + x1) + x2)... for integers always
// and for floats at n <= 2, not for floats at n >= 3 (InProcessCollective
// sums in rank order). Integers wrap on overflow. A mean divides the sum by
// n (truncating integers).
//
// Failures. A failed round kills the group (Gloo's contexts cannot be
// reused): this call and every later one fail with the same status, and the
// job makes a new group with Rebuild (new prefix, the ranks still alive).
// Before giving up a rank writes its failure into the store and closes its
// connections, so every rank of the group fails promptly, with the first
// cause: UNAVAILABLE naming a rank whose process is gone (its connections
// closed with no failure written), DEADLINE_EXCEEDED naming ranks that did not
// join, or the status of a rank that aborted. failed_ranks() lists the ranks
// the failure blames.
//
// Create ignores SIGPIPE for the whole process (Gloo writes to its sockets
// without MSG_NOSIGNAL; a peer that is gone must fail a round, not kill the
// process), as `flowstate serve` does anyway.
//
// The ring is ours (Gloo's transport, its unbound buffers): reduce-scatter
// then allgather, each chunk in segments so that a received segment is
// reduced while the next arrives. Owning the round's buffers lets Abort
// wake every wait of the round, which Gloo's own allreduce cannot offer.
//
// Subgroup rounds and receives can be given up (Abandon, from any thread:
// what backup replicas do with a step whose contributor stalls): the call
// returns ABORTED and the group goes on. Those calls therefore reduce and
// receive in buffers of the collective's (one copy in, none out), and an
// abandoned call's buffers stay registered with Gloo, parked, until the
// group goes (a late peer may still write into them); a group with more
// than 64 parked calls fails, and the job rebuilds it. Tags are never
// reused, so late data cannot meet a later call.
//
// Thread safety: AllReduce, AllReduceAmong and Recv are called by one
// thread at a time; Send (on another thread), Abandon, Abort and the
// accessors from any thread. Abort closes the group's connections and wakes
// every wait of the round in progress at once. A watchdog thread per group
// (GlooCollectiveOptions::failure_poll) aborts a long round when a peer's
// failure record appears. The destructor aborts and joins the watchdog (if
// a call is running, the caller must not destroy the object under it).
#ifndef FLOWSTATE_DISTRIBUTED_GLOO_COLLECTIVE_H_
#define FLOWSTATE_DISTRIBUTED_GLOO_COLLECTIVE_H_

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "graph/status.h"
#include "scheduler/collective.h"

namespace flowstate {

struct GlooCollectiveOptions {
  std::string store_address;  // "host:port" of a CollectiveStoreService
  std::string prefix;         // the membership's keys; unique per membership
  int rank = 0;
  int size = 1;
  // Bounds the rendezvous of Create and Rebuild.
  std::chrono::milliseconds timeout{30000};
  // The address (or host name) the transport listens on and peers connect
  // to; `interface` ("eth0"), when set, wins over it.
  std::string host = "127.0.0.1";
  std::string interface;
  // After a peer's connection closed: how long to wait for its failure
  // record before calling it gone.
  std::chrono::milliseconds failure_grace{1000};
  // While a round lasts longer than this, the store is checked this often
  // for a peer's failure record, and the group fails when one is there: a
  // peer that closed the group is noticed even when its closed connection
  // is not (Gloo leaves a send that it queued after a failed write waiting
  // when the connection then fails).
  std::chrono::milliseconds failure_poll{250};
};

class GlooCollective final : public Collective {
 public:
  // REQUIRES: 0 <= rank < size; a non-empty prefix and store address.
  static StatusOr<std::unique_ptr<GlooCollective>> Create(const GlooCollectiveOptions& options);

  // A new group of `members` (ranks of this group, this one among them, in
  // increasing order: they become ranks 0..members.size()-1) under `prefix`,
  // reusing this group's store client and transport device. Every member
  // must call it with the same arguments.
  StatusOr<std::unique_ptr<GlooCollective>> Rebuild(const std::string& prefix,
                                                    const std::vector<int>& members) const;

  ~GlooCollective() override;

  int rank() const override;
  int size() const override;
  Status AllReduce(std::vector<Tensor>* tensors, ReduceOp op, Deadline deadline) override;
  void Abort(const Status& status) override;
  // Subgroup rounds (a ring over the members only, on the group's
  // connections) and transfers (scheduler/collective.h). A failure kills the
  // group as a failed round does.
  bool supports_subgroups() const override { return true; }
  Status AllReduceAmong(std::vector<Tensor>* tensors, const std::vector<int>& members,
                        uint32_t tag, Deadline deadline) override;
  Status Send(const std::vector<Tensor>& tensors, int to, uint32_t tag, Deadline deadline) override;
  Status Recv(std::vector<Tensor>* tensors, int from, uint32_t tag, Deadline deadline) override;
  void Abandon(uint32_t tag) override;

  const std::string& prefix() const;
  // The ranks the group's failure blames (gone, unreachable or late); empty
  // while the group works or when it failed otherwise (an abort).
  std::vector<int> failed_ranks() const;

  class Impl;

 private:
  explicit GlooCollective(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Registers GlooCollective as the collective factory "gloo"
// (scheduler/collective.h: what a task's _CreateReplicaComm kernels make),
// and StoreStepRace as the backup-replica race of "gloo" groups.
// Idempotent; every process that runs replicas across processes calls it.
void RegisterGlooCollectiveFactory();

}  // namespace flowstate

#endif  // FLOWSTATE_DISTRIBUTED_GLOO_COLLECTIVE_H_

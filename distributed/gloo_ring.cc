// GlooCollective's ring (distributed/gloo_collective_internal.h): the ring
// all-reduce over the group or a subgroup of it, its scratch buffers, and
// point-to-point transfers of tensors between two ranks.
#include <gloo/common/error.h>
#include <gloo/transport/unbound_buffer.h>
#include <gloo/types.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <string>
#include <type_traits>

#include "distributed/gloo_collective_internal.h"
#include "graph/mutex.h"
#include "scheduler/reduce_loops.h"

namespace flowstate {

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

void GlooCollective::Impl::Ring(DataType dtype, const void* input, Tensor* out, ReduceOp op,
                                uint32_t tag, Clock::time_point deadline,
                                const std::vector<int>* members) {
  if (input != nullptr && input != out->raw_data()) out->CopyFromBytes(input, out->TotalBytes());
  const size_t n = size_t(out->num_elements());
  DispatchDataType(dtype, [&]<typename T>() {
    if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double> ||
                  std::is_same_v<T, int32_t> || std::is_same_v<T, int64_t>) {
      RingSum(out->data<T>(), n, sizeof(T), &reduce_loops::Sum<T>, tag, deadline, members);
      const int ranks = members != nullptr ? int(members->size()) : size_;
      if (op == ReduceOp::kMean && ranks > 1) reduce_loops::Divide<T>(out->data<T>(), n, T(ranks));
    }
  });
}

void GlooCollective::Impl::RingSum(void* data, size_t n, size_t elem,
                                   void (*sum)(void*, const void*, const void*, size_t),
                                   uint32_t tag, Clock::time_point deadline,
                                   const std::vector<int>* members) {
  // Positions on the ring: ranks of the group, or indices into `members`.
  const int p = members != nullptr ? int(members->size()) : size_;
  const int me = members != nullptr
                     ? int(std::find(members->begin(), members->end(), rank_) - members->begin())
                     : rank_;
  auto rank_at = [&](int i) { return members != nullptr ? (*members)[size_t(i)] : i; };
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
  const int right = rank_at((me + 1) % p), left = rank_at((me + p - 1) % p);
  const uint64_t slot = ::gloo::Slot::build(members != nullptr ? kAmongSlot : kRingSlot, tag);
  // A subgroup round may be abandoned (its caller's tag).
  const int64_t abandon_tag = members != nullptr ? among_tag_ : -1;
  char* base = static_cast<char*>(data);
  if (ring_tmp_.size() < widest * elem) ring_tmp_.resize(widest * elem);
  auto out = std::make_unique<LiveBuffer>(this, data, n * elem, abandon_tag);
  auto tmp = std::make_unique<LiveBuffer>(this, ring_tmp_.data(), widest * elem, abandon_tag);
  auto wait_recv = [&](LiveBuffer& b) { Await(b, true, deadline, abandon_tag); };
  auto wait_send = [&](LiveBuffer& b) { Await(b, false, deadline, abandon_tag); };
  // Posts the sends of chunk `c` to the right; returns how many.
  auto send_chunk = [&](int c) {
    const auto [lo, hi] = chunk(c);
    int k = 0;
    for (size_t at = lo; at < hi; at += seg, ++k) (*out)->send(right, slot, at * elem, std::min(seg, hi - at) * elem);
    return k;
  };
  try {
    // Reduce-scatter: after step s rank r holds chunk r - s - 1 summed over
    // s + 2 ranks; at the end chunk r + 1 over all of them.
    for (int s = 0; s < p - 1; ++s) {
      const auto [lo, hi] = chunk(me - s - 1);
      for (size_t at = lo; at < hi; at += seg) (*tmp)->recv(left, slot, (at - lo) * elem, std::min(seg, hi - at) * elem);
      const int sends = send_chunk(me - s);
      for (size_t at = lo; at < hi; at += seg) {
        wait_recv(*tmp);  // segments arrive in order (one connection, one slot)
        const size_t len = std::min(seg, hi - at);
        sum(base + at * elem, base + at * elem, ring_tmp_.data() + (at - lo) * elem, len);
      }
      for (int k = 0; k < sends; ++k) wait_send(*out);
    }
    // Allgather: the summed chunks go round, received in place.
    for (int s = 0; s < p - 1; ++s) {
      const auto [lo, hi] = chunk(me - s);
      int recvs = 0;
      for (size_t at = lo; at < hi; at += seg, ++recvs) (*out)->recv(left, slot, at * elem, std::min(seg, hi - at) * elem);
      const int sends = send_chunk(me + 1 - s);
      for (int k = 0; k < recvs; ++k) wait_recv(*out);
      for (int k = 0; k < sends; ++k) wait_send(*out);
    }
  } catch (const Abandoned&) {
    // A late peer may still reach these buffers (the caller parks `data`).
    Parked parked;
    parked.bytes = std::move(ring_tmp_);
    ring_tmp_ = std::vector<char>();
    parked.buffers.push_back(std::move(out));
    parked.buffers.push_back(std::move(tmp));
    Park(std::move(parked));
    throw;
  }
}

void GlooCollective::Impl::Reduce(const std::vector<Tensor>& tensors, ReduceOp op,
                                  Clock::time_point deadline, uint64_t base,
                                  std::vector<Reduced>* out, const std::vector<int>* members,
                                  bool in_place) {
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
    r.in_place = in_place && single && first.RefCountIsOne();
    r.out = r.in_place ? first
            : single   ? Scratch(dtype, first.shape())
                       : Scratch(dtype, TensorShape({total}));
    if (!single) {
      // An empty tensor has no buffer (its data is null): nothing to copy,
      // and memcpy must not be handed the null pointer even for 0 bytes.
      char* at = static_cast<char*>(r.out.raw_data());
      for (size_t i : r.idx) {
        const size_t n = tensors[i].TotalBytes();
        if (n == 0) continue;
        std::memcpy(at, tensors[i].raw_data(), n);
        at += n;
      }
    }
    try {
      Ring(dtype, single && !r.in_place ? first.raw_data() : nullptr, &r.out, op,
           uint32_t(base + 2 + d), deadline, members);
    } catch (...) {
      // A late peer of an abandoned round, or the pair of a failed one
      // (Gloo's thread may still receive into it after the ring threw:
      // TSan saw a recv write a freed buffer when a task was stopped
      // mid-round), may reach the ring's memory: it stays with the
      // collective (in place, the caller's buffer: a reference keeps it).
      Parked parked;
      parked.tensors.push_back(std::move(r.out));
      Park(std::move(parked));
      throw;
    }
    out->push_back(std::move(r));
  }
}

void GlooCollective::Impl::Commit(std::vector<Tensor>* tensors, std::vector<Reduced>* reduced,
                                  bool recycle) {
  for (Reduced& r : *reduced) {
    if (r.in_place) continue;  // the tensor holds the result
    if (r.idx.size() == 1) {
      Tensor old = std::move((*tensors)[r.idx[0]]);
      (*tensors)[r.idx[0]] = std::move(r.out);
      if (recycle) Recycle(std::move(old));
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


namespace {

// What a subgroup round or a transfer may carry (the dtypes Reduce sums).
Status CheckDtypes(const std::vector<Tensor>& tensors, const char* what) {
  for (size_t i = 0; i < tensors.size(); ++i) {
    const DataType t = tensors[i].dtype();
    if (t != DataType::kFloat32 && t != DataType::kFloat64 && t != DataType::kInt32 &&
        t != DataType::kInt64) {
      return InvalidArgument(std::string(what) + ": tensor " + std::to_string(i) + " is " +
                             std::string(DataTypeName(t)) +
                             "; float32, float64, int32 and int64 travel");
    }
  }
  return Status();
}

}  // namespace

Status GlooCollective::Impl::AllReduceAmong(std::vector<Tensor>* tensors,
                                            const std::vector<int>& members, uint32_t tag,
                                            Clock::time_point deadline) {
  {
    MutexLock l(mu_);
    if (!broken_.ok()) return broken_;
  }
  bool valid = !members.empty() && members.front() >= 0 && members.back() < size_ &&
               std::find(members.begin(), members.end(), rank_) != members.end();
  for (size_t i = 1; i < members.size() && valid; ++i) valid = members[i] > members[i - 1];
  if (!valid) {
    return InvalidArgument("all-reduce among ranks " + RankList(members) + " of " + prefix_ +
                           ": the members must increase, lie in [0, " + std::to_string(size_) +
                           ") and include this rank (" + std::to_string(rank_) + ")");
  }
  FS_RETURN_IF_ERROR(CheckDtypes(*tensors, "all-reduce among ranks"));
  if (IsAbandoned(tag)) return AbandonedStatus("all-reduce among ranks", tag);
  ActiveRound active(this, -1 - int64_t(tag));  // the watchdog looks for failures meanwhile
  std::vector<Reduced> reduced;
  struct AmongTag {  // the ring's waits may be abandoned while this call lasts
    AmongTag(int64_t* at, uint32_t tag) : at(at) { *at = tag; }
    ~AmongTag() { *at = -1; }
    int64_t* at;
  } among_tag(&among_tag_, tag);
  try {
    // In buffers of the collective's: the ring of an abandoned round parks
    // its own (Reduce); the dtypes reduced before it are done with Gloo.
    Reduce(*tensors, ReduceOp::kSum, deadline, uint64_t(tag) * 8, &reduced, &members,
           /*in_place=*/false);
  } catch (const Abandoned&) {
    return AbandonedStatus("all-reduce among ranks", tag);
  } catch (const std::exception& e) {
    const bool timeout = std::string(e.what()).find("Timed out") != std::string::npos;
    return Fail(int64_t(tag), {timeout, e.what()}, {});
  }
  Commit(tensors, &reduced, /*recycle=*/false);
  return Status();
}

bool GlooCollective::Impl::IsAbandoned(uint32_t tag) const {
  MutexLock l(mu_);
  return abandoned_.count(tag) > 0;
}

Status GlooCollective::Impl::AbandonedStatus(const char* what, uint32_t tag) const {
  return Aborted(std::string(what) + " with tag " + std::to_string(tag) + " of " + prefix_ +
                 " (rank " + std::to_string(rank_) + ") was abandoned");
}

Status GlooCollective::Impl::Send(const std::vector<Tensor>& tensors, int to, uint32_t tag,
                                  Clock::time_point deadline) {
  {
    MutexLock l(mu_);
    if (!broken_.ok()) return broken_;
  }
  if (to < 0 || to >= size_ || to == rank_) {
    return InvalidArgument("send to rank " + std::to_string(to) + " of " + prefix_ + " (rank " +
                           std::to_string(rank_) + " of " + std::to_string(size_) + ")");
  }
  FS_RETURN_IF_ERROR(CheckDtypes(tensors, "send"));
  const uint64_t slot = ::gloo::Slot::build(kTransferSlot, tag);
  try {
    // One message a tensor, in order on the pair's slot (as Recv posts them).
    std::vector<std::unique_ptr<LiveBuffer>> sent;
    for (const Tensor& t : tensors) {
      if (t.TotalBytes() == 0) continue;
      sent.push_back(std::make_unique<LiveBuffer>(this, const_cast<void*>(t.raw_data()), t.TotalBytes()));
      (*sent.back())->send(to, slot);
    }
    for (auto& b : sent) {
      if (!(*b)->waitSend(nullptr, Left(deadline))) throw ::gloo::IoException("aborted");
    }
  } catch (const std::exception& e) {
    const bool timeout = std::string(e.what()).find("Timed out") != std::string::npos;
    return Fail(int64_t(tag), {timeout, e.what()}, timeout ? std::vector<int>{to} : std::vector<int>{});
  }
  return Status();
}

Status GlooCollective::Impl::Recv(std::vector<Tensor>* tensors, int from, uint32_t tag,
                                  Clock::time_point deadline) {
  {
    MutexLock l(mu_);
    if (!broken_.ok()) return broken_;
  }
  if (from < 0 || from >= size_ || from == rank_) {
    return InvalidArgument("receive from rank " + std::to_string(from) + " of " + prefix_ +
                           " (rank " + std::to_string(rank_) + " of " + std::to_string(size_) + ")");
  }
  FS_RETURN_IF_ERROR(CheckDtypes(*tensors, "receive"));
  if (IsAbandoned(tag)) return AbandonedStatus("receive", tag);
  const uint64_t slot = ::gloo::Slot::build(kTransferSlot, tag);
  // Into buffers of the collective's, which an abandoned receive keeps.
  std::vector<Tensor> into;
  into.reserve(tensors->size());
  for (const Tensor& t : *tensors) into.emplace_back(t.dtype(), t.shape());
  std::vector<std::unique_ptr<LiveBuffer>> posted;
  try {
    for (Tensor& t : into) {
      if (t.TotalBytes() == 0) continue;
      posted.push_back(std::make_unique<LiveBuffer>(this, t.raw_data(), t.TotalBytes(), int64_t(tag)));
      (*posted.back())->recv(from, slot);
    }
    for (auto& b : posted) Await(*b, true, deadline, int64_t(tag));
  } catch (const Abandoned&) {
    Parked parked;
    parked.tensors = std::move(into);
    parked.buffers = std::move(posted);
    Park(std::move(parked));
    return AbandonedStatus("receive", tag);
  } catch (const std::exception& e) {
    // The sender may still write into the posted buffers: they stay too.
    Parked parked;
    parked.tensors = std::move(into);
    parked.buffers = std::move(posted);
    Park(std::move(parked));
    const bool timeout = std::string(e.what()).find("Timed out") != std::string::npos;
    return Fail(int64_t(tag), {timeout, e.what()}, timeout ? std::vector<int>{from} : std::vector<int>{});
  }
  *tensors = std::move(into);
  return Status();
}

}  // namespace flowstate

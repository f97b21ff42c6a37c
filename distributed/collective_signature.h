// PRIVATE to distributed/'s collectives: what each rank of an all-reduce
// round says about its call before any data moves, and the check that every
// rank's call agrees with rank 0's. GlooCollective exchanges a 32-byte
// Header (round, op, count, hash of the signature) and, when the hashes
// differ, the whole signatures, so a mismatch fails the round on every rank
// naming both sides instead of hanging. Plain functions; thread-safe.
#ifndef FLOWSTATE_DISTRIBUTED_COLLECTIVE_SIGNATURE_H_
#define FLOWSTATE_DISTRIBUTED_COLLECTIVE_SIGNATURE_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "graph/status.h"
#include "graph/tensor.h"
#include "scheduler/collective.h"

namespace flowstate::collective_signature {

// The dtypes an all-reduce takes: float32, float64, int32, int64.
bool Supported(DataType t);

// The call of one rank for one round: what every rank compares.
struct Header {
  uint64_t round = 0;
  uint32_t op = 0;
  uint32_t count = 0;
  uint64_t hash = 0;
  uint64_t sig_bytes = 0;
};
static_assert(sizeof(Header) == 32);

// [op, count, then per tensor: dtype, rank, dims...] as int64 words.
std::vector<int64_t> Signature(const std::vector<Tensor>& tensors, ReduceOp op);
// FNV-1a over the words.
uint64_t Hash(const std::vector<int64_t>& words);

// A decoded signature: the op and each tensor's description.
struct Call {
  int64_t op = 0;
  std::vector<std::pair<DataType, std::string>> tensors;  // dtype, "float32[2, 3]"
};
Call Decode(const std::vector<int64_t>& sig);

// INVALID_ARGUMENT naming the first rank whose call differs from rank 0's (as
// InProcessCollective words it); OK when the calls agree and are valid.
Status Check(int64_t round, const std::vector<Call>& calls);

}  // namespace flowstate::collective_signature

#endif  // FLOWSTATE_DISTRIBUTED_COLLECTIVE_SIGNATURE_H_

#include "distributed/collective_signature.h"

#include <algorithm>

namespace flowstate::collective_signature {

bool Supported(DataType t) {
  return t == DataType::kFloat32 || t == DataType::kFloat64 || t == DataType::kInt32 ||
         t == DataType::kInt64;
}

std::vector<int64_t> Signature(const std::vector<Tensor>& tensors, ReduceOp op) {
  std::vector<int64_t> sig = {int64_t(op), int64_t(tensors.size())};
  for (const Tensor& t : tensors) {
    sig.push_back(t.IsInitialized() ? int64_t(t.dtype()) : 0);
    sig.push_back(t.IsInitialized() ? t.rank() : 0);
    if (t.IsInitialized()) {
      for (int64_t d : t.shape().dims()) sig.push_back(d);
    }
  }
  return sig;
}

uint64_t Hash(const std::vector<int64_t>& words) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a
  for (int64_t w : words) {
    for (int i = 0; i < 8; ++i) {
      h ^= (uint64_t(w) >> (8 * i)) & 0xff;
      h *= 1099511628211ull;
    }
  }
  return h;
}

Call Decode(const std::vector<int64_t>& sig) {
  Call c;
  if (sig.size() < 2) return c;
  c.op = sig[0];
  size_t at = 2;
  for (int64_t i = 0; i < sig[1] && at + 1 < sig.size() + 1; ++i) {
    if (at + 2 > sig.size()) break;
    DataType t = DataType(sig[at]);
    int64_t rank = sig[at + 1];
    at += 2;
    if (t == DataType::kInvalid) {
      c.tensors.emplace_back(t, "an empty tensor");
      continue;
    }
    std::vector<int64_t> dims(sig.begin() + at, sig.begin() + std::min(sig.size(), size_t(at + rank)));
    at += rank;
    c.tensors.emplace_back(t, std::string(DataTypeName(t)) + TensorShape(dims).ToString());
  }
  return c;
}

Status Check(int64_t round, const std::vector<Call>& calls) {
  const std::string where = "all-reduce round " + std::to_string(round) + ": ";
  const Call& first = calls[0];
  for (size_t i = 0; i < first.tensors.size(); ++i) {
    if (!Supported(first.tensors[i].first)) {
      return InvalidArgument(where + "tensor " + std::to_string(i) + " of rank 0 is " +
                             first.tensors[i].second +
                             "; all-reduce takes float32, float64, int32 and int64");
    }
  }
  for (size_t r = 1; r < calls.size(); ++r) {
    const Call& mine = calls[r];
    const std::string who = where + "rank " + std::to_string(r);
    if (mine.op != first.op) {
      return InvalidArgument(who + " asks for another reduction (sum or mean) than rank 0");
    }
    if (mine.tensors.size() != first.tensors.size()) {
      return InvalidArgument(who + " passed " + std::to_string(mine.tensors.size()) +
                             " tensors, rank 0 passed " + std::to_string(first.tensors.size()));
    }
    for (size_t i = 0; i < first.tensors.size(); ++i) {
      if (mine.tensors[i] != first.tensors[i]) {
        return InvalidArgument(who + ": tensor " + std::to_string(i) + " is " +
                               mine.tensors[i].second + ", rank 0's is " + first.tensors[i].second);
      }
    }
  }
  return Status();
}

}  // namespace flowstate::collective_signature

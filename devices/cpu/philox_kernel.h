// PhiloxKernel: the base of the CPU kernels that draw from a Philox4x32-10
// stream (the random ops, Dropout). It owns the stream's key and stream word
// (set once from the seed attrs) and the next unused block, which each
// Compute claims with one atomic fetch_add, and it saves and restores that
// state for checkpoints (OpKernel::SaveState/RestoreState, as
// PhiloxStreamState text). Thread-safe as the claim is; RestoreState runs
// between steps.
#ifndef FLOWSTATE_DEVICES_CPU_PHILOX_KERNEL_H_
#define FLOWSTATE_DEVICES_CPU_PHILOX_KERNEL_H_

#include <atomic>
#include <cstdint>
#include <string>

#include "devices/cpu/philox.h"
#include "devices/op_kernel.h"

namespace flowstate::internal {

class PhiloxKernel : public OpKernel {
 public:
  using OpKernel::OpKernel;

  bool HasState() const override { return true; }
  Status SaveState(std::string* state) const override {
    PhiloxStreamState st;
    st.key = key_;
    st.stream = stream_;
    st.next_block = next_block_.load(std::memory_order_relaxed);
    *state = st.Encode();
    return Status();
  }
  Status RestoreState(const std::string& state) override {
    PhiloxStreamState st;
    if (!PhiloxStreamState::Decode(state, &st)) {
      return InvalidArgument(type_string() + " node '" + name() +
                                 "': the saved random state is not a Philox stream state",
                             name());
    }
    key_ = st.key;
    stream_ = st.stream;
    next_block_.store(st.next_block, std::memory_order_relaxed);
    return Status();
  }

 protected:
  // The key from `seed`, the stream word from `seed2`.
  void SetSeeds(int64_t seed, int64_t seed2) {
    key_ = {uint32_t(uint64_t(seed)), uint32_t(uint64_t(seed) >> 32)};
    stream_ = uint64_t(seed2);
  }
  // Claims `n` consecutive blocks; returns the first.
  uint64_t ClaimBlocks(uint64_t n) { return next_block_.fetch_add(n, std::memory_order_relaxed); }

  Philox4x32::Key key_ = {0, 0};
  uint64_t stream_ = 0;

 private:
  std::atomic<uint64_t> next_block_{0};
};

}  // namespace flowstate::internal

#endif  // FLOWSTATE_DEVICES_CPU_PHILOX_KERNEL_H_

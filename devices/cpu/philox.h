// Philox4x32-10, the counter-based random number generator of Salmon,
// Moraes, Dror and Shaw, "Parallel Random Numbers: As Easy as 1, 2, 3"
// (SC 2011): ten rounds of a keyed bijection on a 128-bit counter. Output
// block i depends only on (key, counter i), so any range of blocks can be
// generated independently and in any order — which is what lets the random
// kernels split a tensor across threads and still produce the same numbers
// for any thread count.
//
// The multipliers and the Weyl key increments below are the paper's
// (Table 2 and section 3.3; also Random123's philox.h):
//   M0 = 0xD2511F53, M1 = 0xCD9E8D57, W0 = 0x9E3779B9 (golden ratio),
//   W1 = 0xBB67AE85 (sqrt(3) - 1).
// Pure functions of their arguments; thread-safe.
#ifndef FLOWSTATE_DEVICES_CPU_PHILOX_H_
#define FLOWSTATE_DEVICES_CPU_PHILOX_H_

#include <array>
#include <cstdint>
#include <cstdio>
#include <string>

namespace flowstate::internal {

class Philox4x32 {
 public:
  using Block = std::array<uint32_t, 4>;
  using Key = std::array<uint32_t, 2>;

  static constexpr uint32_t kM0 = 0xD2511F53u;
  static constexpr uint32_t kM1 = 0xCD9E8D57u;
  static constexpr uint32_t kW0 = 0x9E3779B9u;
  static constexpr uint32_t kW1 = 0xBB67AE85u;
  static constexpr int kRounds = 10;

  // The 4 x 32 random bits of `counter` under `key`.
  static constexpr Block Generate(Block counter, Key key) {
    for (int r = 0; r < kRounds; ++r) {
      if (r > 0) {
        key[0] += kW0;
        key[1] += kW1;
      }
      const uint64_t p0 = uint64_t(kM0) * counter[0];
      const uint64_t p1 = uint64_t(kM1) * counter[2];
      counter = {uint32_t(p1 >> 32) ^ counter[1] ^ key[0], uint32_t(p1),
                 uint32_t(p0 >> 32) ^ counter[3] ^ key[1], uint32_t(p0)};
    }
    return counter;
  }

  // Blocks for counters {first + i * step (64 bits), high} with i in [0, n),
  // n <= kBatch, as four arrays of words (word k of block i in out[k][i]):
  // the same numbers as Generate, laid out so the rounds vectorize.
  static constexpr int kBatch = 16;
  static void GenerateBatch(uint64_t first, uint64_t step, uint64_t high, Key key, int n,
                            uint32_t (&out)[4][kBatch]) {
    uint32_t c0[kBatch], c1[kBatch], c2[kBatch], c3[kBatch];
    for (int i = 0; i < kBatch; ++i) {
      const uint64_t c = first + uint64_t(i) * step;
      c0[i] = uint32_t(c);
      c1[i] = uint32_t(c >> 32);
      c2[i] = uint32_t(high);
      c3[i] = uint32_t(high >> 32);
    }
    for (int r = 0; r < kRounds; ++r) {
      if (r > 0) {
        key[0] += kW0;
        key[1] += kW1;
      }
      for (int i = 0; i < kBatch; ++i) {
        const uint64_t p0 = uint64_t(kM0) * c0[i];
        const uint64_t p1 = uint64_t(kM1) * c2[i];
        const uint32_t n0 = uint32_t(p1 >> 32) ^ c1[i] ^ key[0];
        const uint32_t n2 = uint32_t(p0 >> 32) ^ c3[i] ^ key[1];
        c1[i] = uint32_t(p1);
        c3[i] = uint32_t(p0);
        c0[i] = n0;
        c2[i] = n2;
      }
    }
    for (int i = 0; i < n; ++i) {
      out[0][i] = c0[i];
      out[1][i] = c1[i];
      out[2][i] = c2[i];
      out[3][i] = c3[i];
    }
  }
};

// Known-answer vectors of Random123 (kat_vectors, philox4x32 10 rounds).
static_assert(Philox4x32::Generate({0, 0, 0, 0}, {0, 0}) ==
              Philox4x32::Block{0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u});
static_assert(Philox4x32::Generate({0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u},
                                   {0xa4093822u, 0x299f31d0u}) ==
              Philox4x32::Block{0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u});
static_assert(Philox4x32::Generate({~0u, ~0u, ~0u, ~0u}, {~0u, ~0u}) ==
              Philox4x32::Block{0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu});

// The saved state of a kernel that draws from one Philox stream (its key,
// the stream word, and the next unused block): what OpKernel::SaveState of
// the random kernels writes, as text "philox4x32 <key0> <key1> <stream>
// <next_block>". Decode returns false for anything else.
struct PhiloxStreamState {
  Philox4x32::Key key = {0, 0};
  uint64_t stream = 0;
  uint64_t next_block = 0;

  std::string Encode() const {
    return "philox4x32 " + std::to_string(key[0]) + " " + std::to_string(key[1]) + " " +
           std::to_string(stream) + " " + std::to_string(next_block);
  }
  static bool Decode(const std::string& text, PhiloxStreamState* out) {
    unsigned long long k0 = 0, k1 = 0, st = 0, nb = 0;
    int used = 0;
    if (std::sscanf(text.c_str(), "philox4x32 %llu %llu %llu %llu%n", &k0, &k1, &st, &nb, &used) != 4 ||
        size_t(used) != text.size() || k0 > 0xffffffffull || k1 > 0xffffffffull) {
      return false;
    }
    out->key = {uint32_t(k0), uint32_t(k1)};
    out->stream = st;
    out->next_block = nb;
    return true;
  }
};

}  // namespace flowstate::internal

#endif  // FLOWSTATE_DEVICES_CPU_PHILOX_H_

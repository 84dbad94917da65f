// Activation packing shared by the GEMMs that keep two tokens per 512-bit register (gemm_q8_0,
// gemm_q6_K): token 2p fills half 0 of pair p, token 2p + 1 half 1, and the half of a missing last
// token is cleared. The pairs are packed across the pool.
#pragma once
#include <cstdint>

#include "kernels/threadpool.h"

namespace agentkv {

// pack(token, half, pair) writes a token's half; clear(half, pair) zeroes one.
template <class Pack, class Clear>
void pack_token_pairs(ThreadPool& pool, int64_t n_tokens, const Pack& pack, const Clear& clear) {
  const int64_t n_pairs = (n_tokens + 1) / 2;
  pool.parallel_for(n_pairs, [&](int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; ++p) {
      for (int half = 0; half < 2; ++half) {
        const int64_t t = 2 * p + half;
        if (t < n_tokens) {
          pack(t, half, p);
        } else {
          clear(half, p);
        }
      }
    }
  });
}

}  // namespace agentkv

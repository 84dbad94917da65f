// Orthonormal Walsh-Hadamard rotation of KV rows, with optional random signs: the rotation that
// makes quantized K/V keep outliers (docs/quant-types.md, "KV rotation"). Attention scores are
// unchanged by an orthonormal rotation applied to both Q and K; rotated V gives a rotated output,
// turned back by the inverse.
#pragma once
#include <cstdint>
#include <vector>

namespace agentkv {

// R = H_n * diag(signs) / sqrt(n) on each block of n consecutive elements (n a power of two).
// With all signs +1 this is llama.cpp's rotation bit for bit (ggml's FWHT: scale first, then the
// butterflies u + v, u - v for spans 1, 2, 4, ...; every element sees the same operations
// whatever the SIMD width, so the result does not depend on it).
struct HadamardRotation {
  int64_t block = 0;          // 0: no rotation
  std::vector<float> signs;   // `block` entries of +-1; empty = all +1

  bool active() const { return block > 0; }
  // x (n elements, n a multiple of block) -> R x, in place.
  void apply(float* x, int64_t n) const;
  // x -> R^T x, in place (R^-1: H is symmetric, signs are their own inverse).
  void apply_inverse(float* x, int64_t n) const;
};

// The signs for a seed: all +1 for seed 0 (llama.cpp's plain Hadamard), else a fixed function of
// the seed (SplitMix64 bits), the same on every machine.
std::vector<float> hadamard_signs(uint64_t seed, int64_t block);

// The FWHT of one block (n a power of two), scaled by 1/sqrt(n) first as ggml does.
void fwht_block(float* x, int64_t n);

}  // namespace agentkv

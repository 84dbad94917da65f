#include "kernels/hadamard.h"

#include <cmath>
#include <stdexcept>

namespace agentkv {

void fwht_block(float* x, int64_t n) {
  const float scale = 1.0f / std::sqrt(static_cast<float>(n));
  for (int64_t j = 0; j < n; ++j) x[j] *= scale;
  for (int64_t len = 1; len < n; len <<= 1)
    for (int64_t i = 0; i < n; i += 2 * len)
      for (int64_t j = i; j < i + len; ++j) {
        const float u = x[j], v = x[j + len];
        x[j] = u + v;
        x[j + len] = u - v;
      }
}

void HadamardRotation::apply(float* x, int64_t n) const {
  if (block <= 0) return;
  if (n % block != 0) throw std::invalid_argument("Hadamard rotation: row width is not a multiple of the block");
  for (int64_t b = 0; b < n; b += block) {
    if (!signs.empty())
      for (int64_t j = 0; j < block; ++j) x[b + j] *= signs[static_cast<size_t>(j)];
    fwht_block(x + b, block);
  }
}

void HadamardRotation::apply_inverse(float* x, int64_t n) const {
  if (block <= 0) return;
  if (n % block != 0) throw std::invalid_argument("Hadamard rotation: row width is not a multiple of the block");
  for (int64_t b = 0; b < n; b += block) {
    fwht_block(x + b, block);
    if (!signs.empty())
      for (int64_t j = 0; j < block; ++j) x[b + j] *= signs[static_cast<size_t>(j)];
  }
}

std::vector<float> hadamard_signs(uint64_t seed, int64_t block) {
  if (seed == 0) return {};
  std::vector<float> s(static_cast<size_t>(block));
  uint64_t state = seed;
  for (auto& v : s) {  // SplitMix64
    uint64_t z = (state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    v = (z >> 63) ? -1.0f : 1.0f;
  }
  return s;
}

}  // namespace agentkv

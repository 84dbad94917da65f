// Counter-based random numbers for synthetic weights: value i of a tensor depends only on
// (seed, tensor name, i), so a tensor can be generated in chunks on any number of threads and the
// result is bit-identical whatever the split. std::normal_distribution is not used because its
// output differs between standard libraries.
#pragma once
#include <cmath>
#include <cstdint>
#include <string_view>

namespace agentkv::mkmodel {

// SplitMix64 finalizer: a bijective 64-bit mixer with good avalanche.
inline uint64_t mix64(uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebull;
  x ^= x >> 31;
  return x;
}

inline uint64_t fnv1a64(std::string_view s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : s) h = (h ^ c) * 0x100000001b3ull;
  return h;
}

class CounterRng {
 public:
  CounterRng(uint64_t seed, std::string_view stream) : key_(mix64(seed ^ mix64(fnv1a64(stream)))) {}

  uint64_t bits(uint64_t counter) const { return mix64(key_ + counter * 0x9e3779b97f4a7c15ull); }
  // Uniform in [0, 1) with 53 random bits.
  double uniform(uint64_t counter) const { return static_cast<double>(bits(counter) >> 11) * 0x1p-53; }

  // Standard normals for elements 2k and 2k+1 (Box-Muller on one pair of uniforms).
  void normal_pair(uint64_t k, double& even, double& odd) const {
    const double u1 = 1.0 - uniform(2 * k);  // (0, 1]: log stays finite
    const double u2 = uniform(2 * k + 1);
    const double radius = std::sqrt(-2.0 * std::log(u1));
    const double angle = 6.283185307179586 * u2;
    even = radius * std::cos(angle);
    odd = radius * std::sin(angle);
  }
  double normal(uint64_t i) const {
    double even, odd;
    normal_pair(i >> 1, even, odd);
    return (i & 1) ? odd : even;
  }

 private:
  uint64_t key_;
};

}  // namespace agentkv::mkmodel

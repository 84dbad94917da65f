// Portable SIMD building blocks on GCC vector extensions, for kernels compiled once per
// instruction set: a kernel body written against Vec<W> is always-inlined into one entry point
// per target attribute (W = 4 generic SSE2, 8 AVX2, 16 AVX-512); see delta_net.cpp. Wider than
// native vectors are not an option: GCC lowers those through the stack.
//
// Everything here must be inlined into its caller: the vector types never cross a real function
// boundary, so GCC's -Wpsabi notes about their ABI do not apply (silenced for this header).
#pragma once
#include <cstdint>
#include <cstring>

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wpsabi"

#define AGENTKV_VEC_INLINE inline __attribute__((always_inline))

namespace agentkv::vec {

template <int W>
struct VecOf {
  typedef float type __attribute__((vector_size(W * sizeof(float))));
  typedef int32_t itype __attribute__((vector_size(W * sizeof(int32_t))));
};
template <int W>
using Vec = typename VecOf<W>::type;
template <int W>
using IVec = typename VecOf<W>::itype;

template <int W>
AGENTKV_VEC_INLINE Vec<W> load(const float* p) {
  Vec<W> v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}
template <int W>
AGENTKV_VEC_INLINE void store(float* p, const Vec<W>& v) {
  std::memcpy(p, &v, sizeof(v));
}
// (Broadcast with `scalar * vector`: a braced {x, x, ...} splat compiles to lane inserts.)

// Horizontal sum by halving: one shuffle and one add per level.
AGENTKV_VEC_INLINE float hsum(const Vec<4>& v) {
  const Vec<4> h = v + __builtin_shufflevector(v, v, 2, 3, 0, 1);
  return h[0] + h[1];
}
AGENTKV_VEC_INLINE float hsum(const Vec<8>& v) {
  return hsum(Vec<4>(__builtin_shufflevector(v, v, 0, 1, 2, 3) +
                     __builtin_shufflevector(v, v, 4, 5, 6, 7)));
}
AGENTKV_VEC_INLINE float hsum(const Vec<16>& v) {
  return hsum(Vec<8>(__builtin_shufflevector(v, v, 0, 1, 2, 3, 4, 5, 6, 7) +
                     __builtin_shufflevector(v, v, 8, 9, 10, 11, 12, 13, 14, 15)));
}

// e^x to about 2 ulp (Cephes expf: x = n ln2 + r with |r| <= ln2/2, degree-6 polynomial for
// e^r, 2^n through the exponent bits). Beyond the float range it returns +inf (x > 88.72) or 0
// (x < -87.33, where the true value is denormal); NaN propagates.
template <int W>
AGENTKV_VEC_INLINE Vec<W> exp(const Vec<W>& x) {
  // The polynomial path runs on x clamped so that n stays a valid exponent (|n| <= 126/127).
  const Vec<W> lo = Vec<W>{} - 87.33f, hi = Vec<W>{} + 88.37f;  // (vector + scalar broadcasts)
  Vec<W> xc = x < lo ? lo : x;
  xc = xc > hi ? hi : xc;
  // n = round(x / ln2): adding 1.5 * 2^23 leaves the rounded integer in the low mantissa bits.
  const Vec<W> n = (xc * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
  Vec<W> r = xc - n * 0.693359375f;  // ln2 split in two for an exact first step
  r = r - n * -2.12194440e-4f;
  Vec<W> p = Vec<W>{} + 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * (r * r) + r + 1.0f;
  const IVec<W> bits = (__builtin_convertvector(n, IVec<W>) + 127) << 23;
  Vec<W> pow2n;
  std::memcpy(&pow2n, &bits, sizeof(pow2n));
  Vec<W> e = p * pow2n;
  e = x > 88.72f ? Vec<W>{} + __builtin_inff() : e;
  e = x < -87.33f ? Vec<W>{} : e;
  return e;
}

// x * sigmoid(x) = x / (1 + e^-x)
template <int W>
AGENTKV_VEC_INLINE Vec<W> silu(const Vec<W>& x) {
  return x / (1.0f + exp<W>(-x));
}

}  // namespace agentkv::vec

#pragma GCC diagnostic pop

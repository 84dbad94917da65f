// ggml's vector expf (ggml_v_expf), which llama.cpp's CPU ops use for softmax, silu / swiglu and
// friends on x86: e^x = j * 2^n with n = round(x / ln 2) and a degree-5 polynomial. Its two x86
// forms round differently: the AVX-512 build's adds 1 inside the polynomial and scales by 2^n
// (GgmlExpLane / GgmlExpVec), the AVX2 build's leaves the 1 out and finishes with one fused
// k * j + k, k = 2^n (GgmlExpLaneAvx2 / GgmlExpVecAvx2). Shared by the kernels whose outputs must
// round as llama.cpp's do; each CPU level uses the form of the build it follows.
// Include it once plainly for the scalar form, and inside a Highway foreach_target file for
// the vector form (the usual -inl.h re-inclusion guard).
#ifndef AGENTKV_KERNELS_GGML_EXPF_SCALAR_H_
#define AGENTKV_KERNELS_GGML_EXPF_SCALAR_H_
#include <cmath>
#include <cstdint>
#include <cstring>

namespace agentkv::ggml_math {

// One lane of ggml_v_expf (exponent outside +-192: 0 or infinity, as its blend does).
inline float GgmlExpLane(float x) {
  const float r = 0x1.8p23f;
  const float z = std::fma(x, 0x1.715476p+0f, r);
  const float n = z - r;
  const float b = std::fma(-n, 0x1.7f7d1cp-20f, std::fma(-n, 0x1.62e4p-1f, x));
  const float u = b * b;
  const float j = std::fma(std::fma(std::fma(0x1.0e4020p-7f, b, 0x1.573e2ep-5f), u,
                                    std::fma(0x1.555e66p-3f, b, 0x1.fffdb6p-2f)),
                           u, std::fma(0x1.ffffecp-1f, b, 1.0f));
  if (!(std::fabs(n) <= 192.0f)) return n <= 0.0f ? 0.0f : INFINITY;  // also -inf / NaN input
  return std::ldexp(j, static_cast<int>(n));
}

// One lane of the AVX2 build's ggml_v_expf, step by step as its intrinsics compute it (the
// exponent bits come from z's low mantissa bits shifted into place; outside |n| <= 126 the scale
// is split in two factors s1, s2, and beyond |n| > 192 the result is s1 * s1, i.e. 0 or inf).
inline float GgmlExpLaneAvx2(float x) {
  const auto bits = [](float f) { uint32_t u; std::memcpy(&u, &f, 4); return u; };
  const auto from = [](uint32_t u) { float f; std::memcpy(&f, &u, 4); return f; };
  const float r = 0x1.8p23f;
  const float z = std::fma(x, 0x1.715476p+0f, r);
  const float n = z - r;
  const float b = std::fma(-n, 0x1.7f7d1cp-20f, std::fma(-n, 0x1.62e4p-1f, x));
  const uint32_t e = bits(z) << 23;
  const float k = from(e + bits(1.0f));
  const bool c = std::fabs(n) > 126.0f;
  const float u = b * b;
  const float j = std::fma(std::fma(std::fma(0x1.0e4020p-7f, b, 0x1.573e2ep-5f), u,
                                    std::fma(0x1.555e66p-3f, b, 0x1.fffdb6p-2f)),
                           u, 0x1.ffffecp-1f * b);
  if (!c) return std::fma(j, k, k);
  const uint32_t g = n <= 0.0f ? 0x82000000u : 0u;
  const float s1 = from(g + 0x7f000000u);
  const float s2 = from(e - g);
  if (std::fabs(n) > 192.0f) return s1 * s1;
  return std::fma(s2, j, s2) * s1;
}

}  // namespace agentkv::ggml_math
#endif  // AGENTKV_KERNELS_GGML_EXPF_SCALAR_H_

#if defined(HWY_TARGET_TOGGLE) || defined(HWY_ONCE)
#if defined(AGENTKV_KERNELS_GGML_EXPF_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef AGENTKV_KERNELS_GGML_EXPF_INL_H_
#undef AGENTKV_KERNELS_GGML_EXPF_INL_H_
#else
#define AGENTKV_KERNELS_GGML_EXPF_INL_H_
#endif

#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace agentkv {
namespace HWY_NAMESPACE {

// ggml_v_expf on one vector of floats. Lanes whose exponent leaves the range of a plain
// power-of-two product (rare) are finished by the scalar form.
template <class D>
HWY_INLINE hwy::HWY_NAMESPACE::Vec<D> GgmlExpVec(D d, hwy::HWY_NAMESPACE::Vec<D> x) {
  namespace hn = hwy::HWY_NAMESPACE;
  const hn::RebindToSigned<D> di;
  const auto r = hn::Set(d, 0x1.8p23f);
  const auto z = hn::MulAdd(x, hn::Set(d, 0x1.715476p+0f), r);
  const auto nv = hn::Sub(z, r);
  const auto b = hn::NegMulAdd(nv, hn::Set(d, 0x1.7f7d1cp-20f), hn::NegMulAdd(nv, hn::Set(d, 0x1.62e4p-1f), x));
  const auto u = hn::Mul(b, b);
  const auto jv = hn::MulAdd(hn::MulAdd(hn::MulAdd(hn::Set(d, 0x1.0e4020p-7f), b, hn::Set(d, 0x1.573e2ep-5f)), u,
                                        hn::MulAdd(hn::Set(d, 0x1.555e66p-3f), b, hn::Set(d, 0x1.fffdb6p-2f))),
                             u, hn::MulAdd(hn::Set(d, 0x1.ffffecp-1f), b, hn::Set(d, 1.0f)));
  const auto in_range = hn::Le(hn::Abs(nv), hn::Set(d, 126.0f));
  const auto ni = hn::ConvertTo(di, hn::IfThenElseZero(in_range, nv));
  const auto pow2 = hn::BitCast(d, hn::ShiftLeft<23>(hn::Add(ni, hn::Set(di, 127))));
  const auto result = hn::Mul(jv, pow2);
  if (HWY_LIKELY(hn::AllTrue(d, in_range))) return result;
  HWY_ALIGN float lanes[hn::MaxLanes(d)];
  hn::Store(x, d, lanes);
  for (size_t l = 0; l < hn::Lanes(d); ++l) lanes[l] = ggml_math::GgmlExpLane(lanes[l]);
  return hn::Load(d, lanes);
}

// The AVX2 build's ggml_v_expf on one vector of floats; lanes outside |n| <= 126 are finished by
// the scalar form.
template <class D>
HWY_INLINE hwy::HWY_NAMESPACE::Vec<D> GgmlExpVecAvx2(D d, hwy::HWY_NAMESPACE::Vec<D> x) {
  namespace hn = hwy::HWY_NAMESPACE;
  const hn::RebindToSigned<D> di;
  const auto r = hn::Set(d, 0x1.8p23f);
  const auto z = hn::MulAdd(x, hn::Set(d, 0x1.715476p+0f), r);
  const auto nv = hn::Sub(z, r);
  const auto b = hn::NegMulAdd(nv, hn::Set(d, 0x1.7f7d1cp-20f), hn::NegMulAdd(nv, hn::Set(d, 0x1.62e4p-1f), x));
  const auto k = hn::BitCast(d, hn::Add(hn::ShiftLeft<23>(hn::BitCast(di, z)), hn::Set(di, 0x3f800000)));
  const auto u = hn::Mul(b, b);
  const auto jv = hn::MulAdd(hn::MulAdd(hn::MulAdd(hn::Set(d, 0x1.0e4020p-7f), b, hn::Set(d, 0x1.573e2ep-5f)), u,
                                        hn::MulAdd(hn::Set(d, 0x1.555e66p-3f), b, hn::Set(d, 0x1.fffdb6p-2f))),
                             u, hn::Mul(hn::Set(d, 0x1.ffffecp-1f), b));
  const auto in_range = hn::Not(hn::Gt(hn::Abs(nv), hn::Set(d, 126.0f)));
  if (HWY_LIKELY(hn::AllTrue(d, in_range))) return hn::MulAdd(jv, k, k);
  HWY_ALIGN float lanes[hn::MaxLanes(d)];
  hn::Store(x, d, lanes);
  for (size_t l = 0; l < hn::Lanes(d); ++l) lanes[l] = ggml_math::GgmlExpLaneAvx2(lanes[l]);
  return hn::Load(d, lanes);
}

}  // namespace HWY_NAMESPACE
}  // namespace agentkv
HWY_AFTER_NAMESPACE();

#endif  // AGENTKV_KERNELS_GGML_EXPF_INL_H_ toggle
#endif  // HWY_TARGET_TOGGLE || HWY_ONCE

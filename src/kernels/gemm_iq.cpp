// i-quant GEMM. Numerics per (row, token), identical to the type's dot (quant_iq.h):
//   lane[l] = sum over the superblock's 16-weight halves h of its 32-weight groups g of
//             scale(h) * sum_{k<4} q[32g+4l+k] * a[32g+4l+k]   (exact int32; q signed, |q| <= 127)
//   acc[l] = fma(fp16(w.d) * a.d, float(lane[l]), acc[l]) superblock after superblock, then
//   factor * hsum (factor: the type's power of two, iq_dot_factor).
// The weights are decoded once per chunk of rows into signed levels and lane scales: iq4_xs with
// its own vector decoder, the grid types through iq_unpack (the same unpacked form their dot
// products are held to). AVX-512 VNNI: the shared pair kernel (gemm_q8_K_pairs.h) with the levels
// stored unsigned (q + 128) and each group's accumulator starting at -128 * sum(a); |group sum| <=
// 4 * 127 * 127 exceeds 2^15, so the scale is applied with a 32-bit multiply. AVX2: the dots' own
// form, |q| times q8 with q's sign (vpmaddubsw, |pair| <= 2 * 127 * 127 < 2^15), times the scale
// (vpmaddwd). The factor multiplies each finished output (the same single rounding as the dot's).
#include "kernels/gemm_iq.h"

#include "kernels/dispatch.h"
#include "kernels/gemm_q8_K_pairs.h"
#include "kernels/quant_iq.h"
#include "kernels/quant_kernels.h"
#include "kernels/quant_simd_x86.h"

namespace agentkv {

#ifdef AGENTKV_HAVE_X86_SIMD
namespace {
using namespace quant_detail;
using namespace quant_detail::x86;
using namespace q8_K_pairs;

// Weight rows decoded for the kernels: per superblock the 256 levels in element order (xor 0x80,
// i.e. q + 128 as unsigned, for VNNI; signed for AVX2), per group 8 lanes of its scales (lanes 0-3
// the first 16 weights', 4-7 the second's: an int32 for VNNI's 32-bit multiply; the int16 in both
// halves for AVX2's vpmaddwd), and the float d.
int32_t lane_scale(int scale, bool for_vnni) {
  return for_vnni ? scale : static_cast<int32_t>((static_cast<uint32_t>(scale) & 0xFFFFu) * 0x10001u);
}

// Any i-quant type, through its unpacked form.
void pack_iq_rows(GgmlType type, const uint8_t* w, size_t w_stride, int64_t rows, int64_t nsb, bool for_vnni, uint8_t* q,
                  int32_t* sc, float* d) {
  IqSuperblock sb;
  const uint8_t flip = for_vnni ? 0x80 : 0;
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t s = 0; s < nsb; ++s) {
      iq_unpack(type, w + i * w_stride, s, &sb);
      uint8_t* out = q + (i * nsb + s) * kQK_K;
      for (int e = 0; e < kQK_K; ++e) out[e] = static_cast<uint8_t>(sb.q[e]) ^ flip;
      int32_t* lanes = sc + (i * nsb + s) * kGroups * 8;
      for (int g = 0; g < kGroups; ++g)
        for (int l = 0; l < 8; ++l) lanes[8 * g + l] = lane_scale(iq_integer_scale(type, sb.ls[2 * g + l / 4]), for_vnni);
      d[i * nsb + s] = sb.d;
    }
  }
}

// iq4_xs: nibbles to levels with a table shuffle, one scale per group.
AGENTKV_AVX2 void pack_iq4_xs_rows(const uint8_t* w, size_t w_stride, int64_t rows, int64_t nsb, bool for_vnni,
                                   uint8_t* q, int32_t* sc, float* d) {
  const __m256i table = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(kIQ4NLValues)));
  const __m256i flip = for_vnni ? _mm256_set1_epi8(static_cast<char>(0x80)) : _mm256_setzero_si256();
  for (int64_t i = 0; i < rows; ++i) {
    const auto* blocks = reinterpret_cast<const BlockIQ4_XS*>(w + i * w_stride);
    for (int64_t s = 0; s < nsb; ++s) {
      const BlockIQ4_XS& b = blocks[s];
      auto* out = reinterpret_cast<__m256i*>(q + (i * nsb + s) * kQK_K);
      int32_t* lanes = sc + (i * nsb + s) * kGroups * 8;
      for (int g = 0; g < kGroups; ++g) {
        const __m256i levels = _mm256_shuffle_epi8(table, unpack_nibbles(b.qs + 16 * g));
        _mm256_store_si256(out + g, _mm256_xor_si256(levels, flip));
        const int ls = (((b.scales_l[g / 2] >> (4 * (g % 2))) & 0xF) | (((b.scales_h >> (2 * g)) & 3) << 4)) - 32;
        _mm256_store_si256(reinterpret_cast<__m256i*>(lanes + 8 * g), _mm256_set1_epi32(lane_scale(ls, for_vnni)));
      }
      d[i * nsb + s] = half_to_float(b.d);
    }
  }
}

// AVX2 (gemm_avx2): |level| times q8 with the level's sign, as the i-quant dots.
struct SignedLevelsGroupAvx2 {
  struct Weights {
    __m256i levels, magnitudes;
  };
  AGENTKV_AVX2_INLINE Weights load(const uint8_t* p) {
    const __m256i levels = _mm256_load_si256(reinterpret_cast<const __m256i*>(p));
    return {levels, _mm256_sign_epi8(levels, levels)};
  }
  AGENTKV_AVX2_INLINE __m256i pairs(const Weights& w, __m256i q8, const int16_t*) {
    return _mm256_maddubs_epi16(w.magnitudes, _mm256_sign_epi8(q8, w.levels));
  }
};

struct WeightChunkTag;  // a worker's decoded chunk of weight rows, and the packed activations

}  // namespace

bool iq_gemm_available(GgmlType type) {
  return is_iq_type(type) && (avx512_vnni_active() || active_cpu_level() >= CpuLevel::Avx2);
}

int64_t iq_gemm_min_tokens(GgmlType type) { return type == GgmlType::IQ4_XS ? 2 : 24; }

void iq_gemm(GgmlType type, const uint8_t* weights, size_t w_stride, int64_t n_out, int64_t n_in, const uint8_t* act,
             size_t act_stride, int64_t n_tokens, float* y, int64_t y_stride, ThreadPool& pool) {
  const bool vnni = avx512_vnni_active();
  auto pack_rows = [type, vnni](const uint8_t* w, size_t stride, int64_t rows, int64_t nsb, uint8_t* q, int32_t* sc,
                                float* d) {
    if (type == GgmlType::IQ4_XS) pack_iq4_xs_rows(w, stride, rows, nsb, vnni, q, sc, d);
    else pack_iq_rows(type, w, stride, rows, nsb, vnni, q, sc, d);
  };
  if (vnni) {
    gemm<LaneScale::Mullo32, WeightChunkTag>(weights, w_stride, n_out, n_in, act, act_stride, n_tokens, y, y_stride,
                                             pool, 128, pack_rows);
  } else {
    gemm_avx2<SignedLevelsGroupAvx2, WeightChunkTag>(weights, w_stride, n_out, n_in / kQK_K, act, act_stride, n_tokens,
                                                     y, y_stride, pool, nullptr, pack_rows);
  }
  if (const float factor = iq_dot_factor(type); factor != 1.f) {
    pool.parallel_for(n_tokens, [&](int64_t t0, int64_t t1) {
      for (int64_t t = t0; t < t1; ++t)
        for (int64_t r = 0; r < n_out; ++r) y[t * y_stride + r] = factor * y[t * y_stride + r];
    });
  }
}

#else
bool iq_gemm_available(GgmlType) { return false; }
int64_t iq_gemm_min_tokens(GgmlType) { return 2; }
void iq_gemm(GgmlType, const uint8_t*, size_t, int64_t, int64_t, const uint8_t*, size_t, int64_t, float*, int64_t, ThreadPool&) {}
#endif

}  // namespace agentkv

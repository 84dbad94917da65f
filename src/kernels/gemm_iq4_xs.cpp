// iq4_xs GEMM. Numerics per (row, token), identical to dot_iq4_xs (quant_iq_dot_*.cpp):
//   lane[l] = sum over the superblock's 32-weight groups g of (ls_g - 32) * sum_{k<4} v[32g+4l+k] * a[32g+4l+k]
//             (exact int32; v = kIQ4NLValues[nibble])
//   acc[l] = fma(fp16(w.d) * a.d, float(lane[l]), acc[l]) superblock after superblock, then hsum.
// AVX-512 VNNI: the shared pair kernel (gemm_q8_K_pairs.h) with the levels stored unsigned
// (v + 128) and each group's accumulator starting at -128 * sum(a); |group sum| <= 4 * 127 * 127
// exceeds 2^15, so the scale is applied with a 32-bit multiply. AVX2: the dot's own form, |v| times
// q8 with v's sign (vpmaddubsw, |pair| <= 2 * 127 * 127 < 2^15), times the scale (vpmaddwd), with
// the decoded levels read from the packed chunk instead of decoded per token.
#include "kernels/gemm_iq4_xs.h"

#include "kernels/dispatch.h"
#include "kernels/gemm_q8_K_pairs.h"
#include "kernels/quant_kernels.h"
#include "kernels/quant_simd_x86.h"

namespace agentkv {

#ifdef AGENTKV_HAVE_X86_SIMD
namespace {
using namespace quant_detail;
using namespace quant_detail::x86;
using namespace q8_K_pairs;

// Weight rows decoded for the kernels: per superblock the 256 levels in element order (xor 0x80,
// i.e. v + 128 as unsigned, for VNNI; signed for AVX2), per group 8 lanes of its scale (an int32
// for VNNI's 32-bit multiply; the int16 in both halves for AVX2's vpmaddwd), and the float d.
AGENTKV_AVX2 void pack_weight_rows(const uint8_t* w, size_t w_stride, int64_t rows, int64_t nsb, bool for_vnni,
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
        const int32_t lane = for_vnni ? ls : static_cast<int32_t>((static_cast<uint32_t>(ls) & 0xFFFFu) * 0x10001u);
        _mm256_store_si256(reinterpret_cast<__m256i*>(lanes + 8 * g), _mm256_set1_epi32(lane));
      }
      d[i * nsb + s] = half_to_float(b.d);
    }
  }
}

// AVX2 (gemm_avx2): |level| times q8 with the level's sign, as dot_iq4_xs.
struct IQ4XSGroupAvx2 {
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

bool iq4_xs_gemm_available() { return avx512_vnni_active() || active_cpu_level() >= CpuLevel::Avx2; }

void iq4_xs_gemm(const uint8_t* weights, size_t w_stride, int64_t n_out, int64_t n_in, const uint8_t* act,
                 size_t act_stride, int64_t n_tokens, float* y, int64_t y_stride, ThreadPool& pool) {
  const bool vnni = avx512_vnni_active();
  auto pack_rows = [vnni](const uint8_t* w, size_t stride, int64_t rows, int64_t nsb, uint8_t* q, int32_t* sc, float* d) {
    pack_weight_rows(w, stride, rows, nsb, vnni, q, sc, d);
  };
  if (vnni) {
    gemm<LaneScale::Mullo32, WeightChunkTag>(weights, w_stride, n_out, n_in, act, act_stride, n_tokens, y, y_stride,
                                             pool, 128, pack_rows);
    return;
  }
  gemm_avx2<IQ4XSGroupAvx2, WeightChunkTag>(weights, w_stride, n_out, n_in / kQK_K, act, act_stride, n_tokens, y,
                                             y_stride, pool, nullptr, pack_rows);
}

#else
bool iq4_xs_gemm_available() { return false; }
void iq4_xs_gemm(const uint8_t*, size_t, int64_t, int64_t, const uint8_t*, size_t, int64_t, float*, int64_t, ThreadPool&) {}
#endif

}  // namespace agentkv

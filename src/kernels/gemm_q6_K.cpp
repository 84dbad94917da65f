// q6_K GEMM with AVX-512 VNNI (gemm_q8_K_pairs.h), and with AVX2 without it (one (row, token) per
// register, below). Numerics per (row, token), identical to dot_q6_K:
//   lane[m] = sum over the superblock's 32-weight groups g of
//             scale[2g + m / 4] * sum_{k<4} q[32g + 4m + k] * a[32g + 4m + k]      (exact int32)
//   acc[m] = fma(a.d * fp16(w.d), float(lane[m]), acc[m]) superblock after superblock, then hsum.
// The quants are stored unsigned (q + 32, 0..63), which is what vpdpbusd wants; each group's
// accumulator starts at -32 * sum(a) per lane (precomputed when activations are packed), so the
// group sums are the signed ones exactly. |group sum| <= 4 * 32 * 128 < 2^15, so a 16-bit
// multiply-add with the scale in the low half of each lane is the exact scaled product.
#include "kernels/gemm_q6_K.h"

#include <cstring>

#include "kernels/dispatch.h"
#include "kernels/gemm_q8_K_pairs.h"
#include "kernels/quant_kernels.h"
#include "kernels/quant_simd_x86.h"
#include "kernels/thread_scratch.h"

// GCC 12 reports the undefined upper halves inside its own AVX-512 intrinsics as uninitialized.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace agentkv {

#ifdef AGENTKV_HAVE_X86_SIMD
namespace {
using namespace quant_detail;
using namespace quant_detail::x86;

using namespace q8_K_pairs;

// Weight rows re-laid for the kernels: per superblock 256 unsigned quants in element order, per
// group the 8 lane scales of one 256-bit half, and the float d. A lane's scale is in its low 16
// bits with the high 16 zero (the VNNI kernel's 16-bit multiply-add of int32 lane sums), or in
// both halves (the AVX2 kernel's of int16 pair sums).
AGENTKV_AVX2 void pack_weight_rows(const uint8_t* w, size_t w_stride, int64_t rows, int64_t nsb, bool scale_in_both_halves,
                                   uint8_t* q, int32_t* sc, float* d) {
  // Lanes 0-3 take the group's first 16-weight scale, lanes 4-7 the second.
  const __m256i lane_to_scale = _mm256_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1);
  for (int64_t i = 0; i < rows; ++i) {
    const auto* blocks = reinterpret_cast<const BlockQ6_K*>(w + i * w_stride);
    for (int64_t s = 0; s < nsb; ++s) {
      const BlockQ6_K& b = blocks[s];
      auto* out = reinterpret_cast<__m256i*>(q + (i * nsb + s) * kQK_K);
      for (int h = 0; h < 2; ++h) {
        __m256i unpacked[4];
        q6k_unpack_half(b.ql + 64 * h, b.qh + 32 * h, unpacked);
        for (int k = 0; k < 4; ++k) _mm256_store_si256(out + 4 * h + k, unpacked[k]);
      }
      int32_t* lanes = sc + (i * nsb + s) * kGroups * 8;
      for (int g = 0; g < kGroups; ++g) {
        const uint32_t lo = static_cast<uint16_t>(b.scales[2 * g]), hi = static_cast<uint16_t>(b.scales[2 * g + 1]);
        const uint32_t both = scale_in_both_halves ? 0x10001u : 1u;
        const __m256i pair = _mm256_set_epi32(0, 0, 0, 0, 0, 0, static_cast<int>(hi * both), static_cast<int>(lo * both));
        _mm256_store_si256(reinterpret_cast<__m256i*>(lanes + 8 * g), _mm256_permutevar8x32_epi32(pair, lane_to_scale));
      }
      d[i * nsb + s] = half_to_float(b.d);
    }
  }
}

// ---- AVX2 (no VNNI, gemm_avx2): dot_q6_K's lanes with one (row, token) per 256-bit register. Per group,
// vpmaddubsw of the unsigned quants and the activations gives int16 pair sums (|sum| <= 2 * 63 *
// 128), minus the token's precomputed vpmaddubsw(32, a) (the -32 offset, as dot_q6_K subtracts
// it), then vpmaddwd by the sub-block scale: the exact int32 lanes of dot_q6_K.
// vpmaddubsw(32, a) of each group of a token's superblock: what the -32 offset takes away.
struct alignas(32) TokenOffsets {
  int16_t offset[kGroups][16];
};
static_assert(sizeof(TokenOffsets) == kGroups * 16 * sizeof(int16_t));

AGENTKV_AVX2 void prepare_token(const BlockQ8_K* blocks, int64_t nsb, TokenOffsets* out) {
  const __m256i offset = _mm256_set1_epi8(32);
  for (int64_t s = 0; s < nsb; ++s) {
    for (int g = 0; g < kGroups; ++g) {
      const __m256i q8 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blocks[s].qs + 32 * g));
      _mm256_store_si256(reinterpret_cast<__m256i*>(out[s].offset[g]), _mm256_maddubs_epi16(offset, q8));
    }
  }
}

struct Q6KGroupAvx2 {
  struct Weights {
    __m256i quants;  // q + 32, unsigned
  };
  AGENTKV_AVX2_INLINE Weights load(const uint8_t* p) { return {_mm256_load_si256(reinterpret_cast<const __m256i*>(p))}; }
  AGENTKV_AVX2_INLINE __m256i pairs(const Weights& w, __m256i q8, const int16_t* offset) {
    return _mm256_sub_epi16(_mm256_maddubs_epi16(w.quants, q8), _mm256_load_si256(reinterpret_cast<const __m256i*>(offset)));
  }
};

// A worker's packed chunk of weight rows (quants, scales, d), and the packed activations.
struct WeightChunkTag;

}  // namespace

bool q6_K_gemm_available() { return avx512_vnni_active() || active_cpu_level() >= CpuLevel::Avx2; }

namespace {

void q6_K_gemm_avx2(const uint8_t* weights, size_t w_stride, int64_t n_out, int64_t n_in, const uint8_t* act,
                    size_t act_stride, int64_t n_tokens, float* y, int64_t y_stride, ThreadPool& pool) {
  const int64_t nsb = n_in / kQK_K;
  TokenOffsets* offsets = thread_scratch<TokenOffsets>(static_cast<size_t>(n_tokens * nsb));
  pool.parallel_for(n_tokens, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t)
      prepare_token(reinterpret_cast<const BlockQ8_K*>(act + t * act_stride), nsb, offsets + t * nsb);
  });
  // A packed chunk of rows (~256 KiB) meets every token tile, as in the VNNI kernel.
  gemm_avx2<Q6KGroupAvx2, WeightChunkTag>(
      weights, w_stride, n_out, nsb, act, act_stride, n_tokens, y, y_stride, pool, offsets[0].offset[0],
      [](const uint8_t* w, size_t stride, int64_t rows, int64_t n_super, uint8_t* q, int32_t* sc, float* d) {
        pack_weight_rows(w, stride, rows, n_super, true, q, sc, d);
      });
}

}  // namespace

void q6_K_gemm(const uint8_t* weights, size_t w_stride, int64_t n_out, int64_t n_in, const uint8_t* act,
               size_t act_stride, int64_t n_tokens, float* y, int64_t y_stride, ThreadPool& pool) {
  if (!avx512_vnni_active()) return q6_K_gemm_avx2(weights, w_stride, n_out, n_in, act, act_stride, n_tokens, y, y_stride, pool);
  gemm<LaneScale::Madd16, WeightChunkTag>(weights, w_stride, n_out, n_in, act, act_stride, n_tokens, y, y_stride, pool, 32,
                                          [](const uint8_t* w, size_t stride, int64_t rows, int64_t nsb, uint8_t* q,
                                             int32_t* sc, float* d) { pack_weight_rows(w, stride, rows, nsb, false, q, sc, d); });
}

#else
bool q6_K_gemm_available() { return false; }
void q6_K_gemm(const uint8_t*, size_t, int64_t, int64_t, const uint8_t*, size_t, int64_t, float*, int64_t, ThreadPool&) {}
#endif

}  // namespace agentkv

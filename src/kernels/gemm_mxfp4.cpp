// mxfp4 GEMV / GEMM in llama.cpp's repacked float order (gemm_mxfp4.h). Per output and block:
//   isum  = sum over the block of (value + 12) * a  -  12 * sum(a)   (exact int32; value = the doubled
//           E2M1 value, -12..12, so value + 12 is an unsigned byte for vpmaddubsw / vpdpbusd)
//   acc   = fma(float(isum), half_scale(w.e) * fp16(a.d), acc)
// which is ggml's gemv/gemm_q4_b32_8x8_q8_0_lut_avx for block_mxfp4x8 (its AVX2 and AVX-512 paths
// alike): acc_row = fmadd(cvtepi32(iacc), mul(col_scale, row_scale), acc_row). Only the integer
// sums are formed differently, and they are exact.
#include "kernels/gemm_mxfp4.h"

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <iterator>

#include "kernels/dispatch.h"
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

constexpr int kBias = 12;
// kMXFP4Values + kBias: every value unsigned, 0..24.
alignas(16) constexpr uint8_t kBiasedValues[16] = {12, 13, 14, 15, 16, 18, 20, 24, 12, 11, 10, 9, 8, 6, 4, 0};
constexpr bool biased_values_match() {
  for (int i = 0; i < 16; ++i)
    if (kBiasedValues[i] != kMXFP4Values[i] + kBias) return false;
  return true;
}
static_assert(biased_values_match());

// Tokens up to which the GEMV runs (it decodes each block once per call and reduces every token's
// lane sums); beyond, the GEMM, whose decoding of a row group costs about as much as 4 tokens (Zen 3,
// AVX2: GEMV 0.83 / 0.96 ms at 4 / 5 tokens on [2880 x 2880], GEMM 0.95 / ~1.05). llama.cpp switches
// at 4; the numerics are the same either way.
constexpr int64_t kGemvMaxTokens = 5;
// How far ahead of the block being read the GEMV prefetches each of its 8 rows.
constexpr size_t kPrefetchBytes = 512;

// Per token and block: fp16(a.d) as a float, and -kBias * sum(a), which takes the bias back.
struct ActBlock {
  float d;
  int32_t bias;
};
struct ActBlockTag;
struct PackedRowsTag;

AGENTKV_AVX2 void prepare_activations(const uint8_t* act, size_t act_stride, int64_t t0, int64_t t1, int64_t nb,
                                      ActBlock* out) {
  const __m256i ones = _mm256_set1_epi8(1);
  for (int64_t t = t0; t < t1; ++t) {
    const auto* a = reinterpret_cast<const BlockQ8_0*>(act + t * act_stride);
    for (int64_t b = 0; b < nb; ++b) {
      const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a[b].qs));
      out[t * nb + b] = {half_to_float(a[b].d), -kBias * hsum_epi32(dot_u8s8(ones, q))};
    }
  }
}

AGENTKV_AVX2_INLINE __m256i biased_table() {
  return _mm256_broadcastsi128_si256(_mm_load_si128(reinterpret_cast<const __m128i*>(kBiasedValues)));
}

// A block's 32 values + kBias in element order (the low nibbles' 16, then the high nibbles').
AGENTKV_AVX2_INLINE __m256i biased_values(const BlockMXFP4& b, __m256i table) {
  return _mm256_shuffle_epi8(table, unpack_nibbles(b.qs));
}

// mxfp4_half_scale of eight exponents (int32 lanes, 0..255), bit for bit.
AGENTKV_AVX2_INLINE __m256 half_scales8(__m256i e) {
  const __m256i normal = _mm256_slli_epi32(_mm256_sub_epi32(e, _mm256_set1_epi32(1)), 23);
  const __m256i subnormal = _mm256_sllv_epi32(_mm256_set1_epi32(0x00200000), e);
  const __m256i small = _mm256_cmpgt_epi32(_mm256_set1_epi32(2), e);
  return _mm256_castsi256_ps(_mm256_blendv_epi8(normal, subnormal, small));
}

AGENTKV_AVX2_INLINE int32_t load_u32(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

// Bytes 4k..4k+3 of q in every 32-bit lane.
AGENTKV_AVX2_INLINE __m256i bcast4(const int8_t* q, int k) { return _mm256_set1_epi32(load_u32(q + 4 * k)); }

// ---- GEMV: 8 rows, kTokens (1..kGemvMaxTokens) tokens; lane r of each accumulator is row r's chain. ----
// Rows r and r + 4 share a register: their 16 code bytes side by side, so that one mask gives
// both rows' elements 0..15 and one shift the elements 16..31 (no per-row lane insert), met by
// the activation's halves repeated in both lanes. vpmaddubsw pairs of the two halves add in
// int16 (|4 products| <= 4 * 24 * 128), vpmaddwd makes int32 lanes: rows r | r + 4, 4 lanes
// each; three vphaddd leave lane r = row r's block sum.
template <int kTokens>
AGENTKV_AVX2 void gemv_rows8(const uint8_t* row0, size_t w_stride, int64_t nb, const uint8_t* act, size_t act_stride,
                             const ActBlock* ab, float* y, int64_t y_stride) {
  const __m256i table = biased_table();
  const __m256i low4 = _mm256_set1_epi8(0x0F), ones = _mm256_set1_epi16(1);
  __m256 acc[kTokens];
  for (int t = 0; t < kTokens; ++t) acc[t] = _mm256_setzero_ps();
  const uint8_t* blk = row0;  // block b of row 0; row r's at blk + r * w_stride
  for (int64_t b = 0; b < nb; ++b, blk += sizeof(BlockMXFP4)) {
    if (b % 4 == 0)
#pragma GCC unroll 8
      for (int r = 0; r < 8; ++r) _mm_prefetch(reinterpret_cast<const char*>(blk + r * w_stride + kPrefetchBytes), _MM_HINT_T0);
    __m256i a_lo[kTokens], a_hi[kTokens];  // elements 0..15 / 16..31, in both lanes
    for (int t = 0; t < kTokens; ++t) {
      const uint8_t* q = act + t * act_stride + b * sizeof(BlockQ8_0) + offsetof(BlockQ8_0, qs);
      a_lo[t] = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(q)));
      a_hi[t] = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(q + 16)));
    }
    __m256i pairs[kTokens][4];
    uint64_t e = 0;
#pragma GCC unroll 4
    for (int r = 0; r < 4; ++r) {
      const uint8_t* x0 = blk + r * w_stride;
      const uint8_t* x1 = blk + (r + 4) * w_stride;
      e |= static_cast<uint64_t>(x0[0]) << (8 * r) | static_cast<uint64_t>(x1[0]) << (8 * r + 32);
      const __m256i codes = _mm256_inserti128_si256(
          _mm256_castsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x0 + 1))),
          _mm_loadu_si128(reinterpret_cast<const __m128i*>(x1 + 1)), 1);
      const __m256i lo = _mm256_shuffle_epi8(table, _mm256_and_si256(codes, low4));
      const __m256i hi = _mm256_shuffle_epi8(table, _mm256_and_si256(_mm256_srli_epi16(codes, 4), low4));
      for (int t = 0; t < kTokens; ++t)
        pairs[t][r] = _mm256_madd_epi16(
            _mm256_add_epi16(_mm256_maddubs_epi16(lo, a_lo[t]), _mm256_maddubs_epi16(hi, a_hi[t])), ones);
    }
    const __m256 scale = half_scales8(_mm256_cvtepu8_epi32(_mm_cvtsi64_si128(static_cast<long long>(e))));
    for (int t = 0; t < kTokens; ++t) {
      const __m256i sums = _mm256_hadd_epi32(_mm256_hadd_epi32(pairs[t][0], pairs[t][1]),
                                             _mm256_hadd_epi32(pairs[t][2], pairs[t][3]));
      const ActBlock& s = ab[t * nb + b];
      const __m256i isum = _mm256_add_epi32(sums, _mm256_set1_epi32(s.bias));
      acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), _mm256_mul_ps(scale, _mm256_set1_ps(s.d)), acc[t]);
    }
  }
  for (int t = 0; t < kTokens; ++t) _mm256_storeu_ps(y + t * y_stride, acc[t]);
}

using GemvFn = void (*)(const uint8_t*, size_t, int64_t, const uint8_t*, size_t, const ActBlock*, float*, int64_t);
constexpr GemvFn kGemv[kGemvMaxTokens] = {gemv_rows8<1>, gemv_rows8<2>, gemv_rows8<3>, gemv_rows8<4>,
                                           gemv_rows8<5>};

// ---- GEMM: row groups of R (8 or 16) decoded once, then every token. ----
// A decoded block of a group: 8 registers of R x 4 bytes (register k: lane r holds row r's
// elements 4k..4k+3, + kBias), then the R rows' half scales as floats.
constexpr size_t packed_block_bytes(int rows_per_group) { return 36 * static_cast<size_t>(rows_per_group); }

// Transposes the 4 x 4 int32 of each 128-bit lane of v[0..3]: lane j of v[k] <- lane k of v[j].
AGENTKV_AVX2_INLINE void transpose4x4_epi32(__m256i v[4]) {
  const __m256i t0 = _mm256_unpacklo_epi32(v[0], v[1]), t1 = _mm256_unpackhi_epi32(v[0], v[1]);
  const __m256i t2 = _mm256_unpacklo_epi32(v[2], v[3]), t3 = _mm256_unpackhi_epi32(v[2], v[3]);
  v[0] = _mm256_unpacklo_epi64(t0, t2);
  v[1] = _mm256_unpackhi_epi64(t0, t2);
  v[2] = _mm256_unpacklo_epi64(t1, t3);
  v[3] = _mm256_unpackhi_epi64(t1, t3);
}

// Decodes `rows` (0..8) rows into lanes 8 * half .. 8 * half + 7 of a group of rows_per_group; the
// lanes of missing rows get value 0 (+ kBias) and scale 0, and are never stored. As in the GEMV,
// rows r and r + 4 share a register (low and high 128-bit lane), so a 4 x 4 transpose per lane
// gives register k: rows 0-3 | rows 4-7, elements 4k..4k+3 each.
AGENTKV_AVX2 void pack_rows8(const uint8_t* row0, size_t w_stride, int rows, int64_t nb, int rows_per_group, int half,
                             uint8_t* out) {
  const __m256i table = biased_table(), low4 = _mm256_set1_epi8(0x0F);
  const size_t block_bytes = packed_block_bytes(rows_per_group);
  const size_t k_stride = 4 * static_cast<size_t>(rows_per_group);
  // Missing rows read a block of code 0 (value 0) with exponent 0; its scale lane is cleared.
  alignas(16) static constexpr uint8_t kZeroBlock[sizeof(BlockMXFP4) + 15] = {};
  const uint8_t* base[8];
  size_t step[8];
  for (int r = 0; r < 8; ++r) {
    base[r] = r < rows ? row0 + r * w_stride : kZeroBlock;
    step[r] = r < rows ? sizeof(BlockMXFP4) : 0;
  }
  const __m256 present = _mm256_castsi256_ps(
      _mm256_cmpgt_epi32(_mm256_set1_epi32(rows), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7)));
  for (int64_t b = 0; b < nb; ++b) {
    __m256i lo[4], hi[4];
    uint64_t e = 0;
    for (int r = 0; r < 4; ++r) {
      const uint8_t* x0 = base[r] + b * step[r];
      const uint8_t* x1 = base[r + 4] + b * step[r + 4];
      e |= static_cast<uint64_t>(x0[0]) << (8 * r) | static_cast<uint64_t>(x1[0]) << (8 * r + 32);
      const __m256i codes = _mm256_inserti128_si256(
          _mm256_castsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x0 + 1))),
          _mm_loadu_si128(reinterpret_cast<const __m128i*>(x1 + 1)), 1);
      lo[r] = _mm256_shuffle_epi8(table, _mm256_and_si256(codes, low4));
      hi[r] = _mm256_shuffle_epi8(table, _mm256_and_si256(_mm256_srli_epi16(codes, 4), low4));
    }
    transpose4x4_epi32(lo);
    transpose4x4_epi32(hi);
    uint8_t* dst = out + b * block_bytes + 32 * half;
    for (int k = 0; k < 4; ++k) {
      _mm256_store_si256(reinterpret_cast<__m256i*>(dst + k * k_stride), lo[k]);
      _mm256_store_si256(reinterpret_cast<__m256i*>(dst + (k + 4) * k_stride), hi[k]);
    }
    const __m256 scale = half_scales8(_mm256_cvtepu8_epi32(_mm_cvtsi64_si128(static_cast<long long>(e))));
    _mm256_store_ps(reinterpret_cast<float*>(dst + 8 * k_stride), _mm256_and_ps(scale, present));
  }
}

// A tile: one decoded group against kTokens tokens (act: the first token's q8_0 row; ab: its
// ActBlocks, nb per token); y: the first token's output for the group's first row.
using TileFn = void (*)(const uint8_t* packed, int64_t nb, const uint8_t* act, size_t act_stride, const ActBlock* ab,
                        int rows, float* y, int64_t y_stride);

// AVX2: 8 rows per register; four vpmaddubsw pair sums (|pair| <= 2 * 24 * 128) add up in int16.
// The activation's 4-byte groups are spread over the lanes by vpshufd from its two halves (kept in
// both 128-bit lanes), which runs beside the multiplies instead of eight broadcast loads.
template <int kTokens>
AGENTKV_AVX2 void tile_avx2(const uint8_t* packed, int64_t nb, const uint8_t* act, size_t act_stride, const ActBlock* ab,
                            int /*rows: always 8*/, float* y, int64_t y_stride) {
  constexpr size_t kBlockBytes = packed_block_bytes(8);
  const __m256i ones = _mm256_set1_epi16(1);
  __m256 acc[kTokens];
#pragma GCC unroll 8
  for (int t = 0; t < kTokens; ++t) acc[t] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const auto* w = reinterpret_cast<const __m256i*>(packed + b * kBlockBytes);
    // Named registers, not an array: GCC copies a __m256i array through the stack.
    const __m256i w0 = _mm256_load_si256(w), w1 = _mm256_load_si256(w + 1), w2 = _mm256_load_si256(w + 2),
                  w3 = _mm256_load_si256(w + 3), w4 = _mm256_load_si256(w + 4), w5 = _mm256_load_si256(w + 5),
                  w6 = _mm256_load_si256(w + 6), w7 = _mm256_load_si256(w + 7);
    const __m256 scale = _mm256_load_ps(reinterpret_cast<const float*>(w + 8));
#pragma GCC unroll 8
    for (int t = 0; t < kTokens; ++t) {
      const int8_t* q = reinterpret_cast<const BlockQ8_0*>(act + t * act_stride)[b].qs;
      const __m256i s0 = _mm256_add_epi16(_mm256_add_epi16(_mm256_maddubs_epi16(w0, bcast4(q, 0)), _mm256_maddubs_epi16(w1, bcast4(q, 1))),
                                          _mm256_add_epi16(_mm256_maddubs_epi16(w2, bcast4(q, 2)), _mm256_maddubs_epi16(w3, bcast4(q, 3))));
      const __m256i s1 = _mm256_add_epi16(_mm256_add_epi16(_mm256_maddubs_epi16(w4, bcast4(q, 4)), _mm256_maddubs_epi16(w5, bcast4(q, 5))),
                                          _mm256_add_epi16(_mm256_maddubs_epi16(w6, bcast4(q, 6)), _mm256_maddubs_epi16(w7, bcast4(q, 7))));
      const ActBlock& s = ab[t * nb + b];
      const __m256i isum = _mm256_add_epi32(_mm256_add_epi32(_mm256_madd_epi16(s0, ones), _mm256_madd_epi16(s1, ones)),
                                            _mm256_set1_epi32(s.bias));
      acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), _mm256_mul_ps(scale, _mm256_set1_ps(s.d)), acc[t]);
    }
  }
#pragma GCC unroll 8
  for (int t = 0; t < kTokens; ++t) _mm256_storeu_ps(y + t * y_stride, acc[t]);
}

// AVX-512 VNNI: 16 rows per register, one vpdpbusd per 4 elements, the bias as the start value.
template <int kTokens>
AGENTKV_AVX512_VNNI void tile_vnni(const uint8_t* packed, int64_t nb, const uint8_t* act, size_t act_stride,
                                   const ActBlock* ab, int rows, float* y, int64_t y_stride) {
  constexpr size_t kBlockBytes = packed_block_bytes(16);
  __m512 acc[kTokens];
#pragma GCC unroll 8
  for (int t = 0; t < kTokens; ++t) acc[t] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* blk = packed + b * kBlockBytes;
    const __m512i w0 = _mm512_load_si512(blk), w1 = _mm512_load_si512(blk + 64), w2 = _mm512_load_si512(blk + 128),
                  w3 = _mm512_load_si512(blk + 192), w4 = _mm512_load_si512(blk + 256), w5 = _mm512_load_si512(blk + 320),
                  w6 = _mm512_load_si512(blk + 384), w7 = _mm512_load_si512(blk + 448);
    const __m512 scale = _mm512_load_ps(blk + 512);
#pragma GCC unroll 8
    for (int t = 0; t < kTokens; ++t) {
      const int8_t* q = reinterpret_cast<const BlockQ8_0*>(act + t * act_stride)[b].qs;
      const ActBlock& s = ab[t * nb + b];
      __m512i isum = _mm512_set1_epi32(s.bias);
      isum = _mm512_dpbusd_epi32(isum, w0, _mm512_set1_epi32(load_u32(q)));
      isum = _mm512_dpbusd_epi32(isum, w1, _mm512_set1_epi32(load_u32(q + 4)));
      isum = _mm512_dpbusd_epi32(isum, w2, _mm512_set1_epi32(load_u32(q + 8)));
      isum = _mm512_dpbusd_epi32(isum, w3, _mm512_set1_epi32(load_u32(q + 12)));
      isum = _mm512_dpbusd_epi32(isum, w4, _mm512_set1_epi32(load_u32(q + 16)));
      isum = _mm512_dpbusd_epi32(isum, w5, _mm512_set1_epi32(load_u32(q + 20)));
      isum = _mm512_dpbusd_epi32(isum, w6, _mm512_set1_epi32(load_u32(q + 24)));
      isum = _mm512_dpbusd_epi32(isum, w7, _mm512_set1_epi32(load_u32(q + 28)));
      acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), _mm512_mul_ps(scale, _mm512_set1_ps(s.d)), acc[t]);
    }
  }
  const __mmask16 mask = rows >= 16 ? 0xFFFF : static_cast<__mmask16>((1u << rows) - 1);
#pragma GCC unroll 8
  for (int t = 0; t < kTokens; ++t) _mm512_mask_storeu_ps(y + t * y_stride, mask, acc[t]);
}

constexpr TileFn kTilesAvx2[] = {tile_avx2<1>, tile_avx2<2>, tile_avx2<3>};
constexpr TileFn kTilesVnni[] = {tile_vnni<1>, tile_vnni<2>, tile_vnni<3>, tile_vnni<4>,
                                 tile_vnni<5>, tile_vnni<6>, tile_vnni<7>, tile_vnni<8>};

}  // namespace

bool mxfp4_matmul_available() { return active_cpu_level() >= CpuLevel::Avx2; }

void mxfp4_matmul(const uint8_t* weights, size_t w_stride, int64_t n_out, int64_t n_in, const uint8_t* act,
                  size_t act_stride, int64_t n_tokens, float* y, int64_t y_stride, ThreadPool& pool) {
  const int64_t nb = n_in / kQK_MXFP4;
  ActBlock* ab = thread_scratch<ActBlock, ActBlockTag>(static_cast<size_t>(n_tokens * nb));
  if (n_tokens >= 32) {
    pool.parallel_for(n_tokens, [&](int64_t t0, int64_t t1) { prepare_activations(act, act_stride, t0, t1, nb, ab); });
  } else {
    prepare_activations(act, act_stride, 0, n_tokens, nb, ab);
  }

  if (n_tokens <= kGemvMaxTokens) {
    const GemvFn gemv = kGemv[n_tokens - 1];
    pool.parallel_for(n_out / 8, [&](int64_t g0, int64_t g1) {
      for (int64_t g = g0; g < g1; ++g) gemv(weights + 8 * g * w_stride, w_stride, nb, act, act_stride, ab, y + 8 * g, y_stride);
    });
    return;
  }

  const bool vnni = avx512_vnni_active();
  const int group_rows = vnni ? 16 : 8;
  const TileFn* tiles = vnni ? kTilesVnni : kTilesAvx2;
  const auto tile_tokens = static_cast<int64_t>(vnni ? std::size(kTilesVnni) : std::size(kTilesAvx2));
  const int64_t groups = (n_out + group_rows - 1) / group_rows;
  pool.parallel_chunks(groups, balanced_chunk(groups, 1, pool.size(), 8), [&](int64_t g0, int64_t g1) {
    uint8_t* packed = thread_scratch_lines<PackedRowsTag>(static_cast<size_t>(nb) * packed_block_bytes(group_rows));
    for (int64_t g = g0; g < g1; ++g) {
      const int64_t r0 = g * group_rows;
      const int rows = static_cast<int>(std::min<int64_t>(group_rows, n_out - r0));
      pack_rows8(weights + r0 * w_stride, w_stride, std::min(rows, 8), nb, group_rows, 0, packed);
      if (group_rows == 16) {
        const uint8_t* second = rows > 8 ? weights + (r0 + 8) * w_stride : weights;
        pack_rows8(second, w_stride, std::max(rows - 8, 0), nb, group_rows, 1, packed);
      }
      for (int64_t t0 = 0; t0 < n_tokens; t0 += tile_tokens) {
        const int64_t count = std::min(tile_tokens, n_tokens - t0);
        tiles[count - 1](packed, nb, act + t0 * act_stride, act_stride, ab + t0 * nb, rows, y + t0 * y_stride + r0,
                         y_stride);
      }
    }
  });
}

#else
bool mxfp4_matmul_available() { return false; }
void mxfp4_matmul(const uint8_t*, size_t, int64_t, int64_t, const uint8_t*, size_t, int64_t, float*, int64_t,
                  ThreadPool&) {}
#endif

}  // namespace agentkv

// Integer K.Q scores for tiled attention over int8-level keys (see level_scores.h for the order).
// Vectors run across query rows (the tiled kernel's layout): a key's four (VNNI) or two (AVX2)
// levels are broadcast and multiplied with the same elements of 16 or 8 query rows at once.
#if defined(__clang__)
#pragma clang fp contract(off)
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif
#include "kernels/level_scores.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "agentkv/error.h"
#include "agentkv/fp16.h"
#include "kernels/dispatch.h"
#include "kernels/quant_kernels.h"
#include "kernels/quant_simd_x86.h"

// GCC 12 reports the undefined upper half in its own AVX-512 intrinsics as uninitialized.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace agentkv {
namespace {

LevelScoreKernel active_kernel() {
#ifdef AGENTKV_HAVE_X86_SIMD
  if (avx512_vnni_active()) return LevelScoreKernel::kAvx512Vnni;
  if (active_cpu_level() >= CpuLevel::Avx2) return LevelScoreKernel::kAvx2;
#endif
  return LevelScoreKernel::kPortable;
}

// Where key j's scale for q8_0 block b is: ks[j * per_key + (b >> shift)] (shift 1 for 64-element
// key blocks, 0 for 32).
struct KeyScales {
  const float* ks;
  int64_t per_key;
  int shift;
  float at(int64_t j, int64_t b) const { return ks[j * per_key + (b >> shift)]; }
};

// The definition: rows [r0, rows) of every key, keys as signed levels.
void scores_portable(const LevelQueries& q, const int8_t* keys, KeyScales ks, int64_t n_keys, float scale,
                     int64_t r0, float* out) {
  const int64_t R = q.rows, D = q.head_dim, nb = D / kQK8_0;
  for (int64_t j = 0; j < n_keys; ++j) {
    for (int64_t r = r0; r < R; ++r) {
      const int8_t* qr = q.values.data() + r * D;
      const int8_t* kj = keys + j * D;
      float s = 0.0f;
      for (int64_t b = 0; b < nb; ++b) {
        int32_t isum = 0;
        for (int64_t i = b * kQK8_0; i < (b + 1) * kQK8_0; ++i) isum += int32_t{qr[i]} * int32_t{kj[i]};
        s = std::fma(static_cast<float>(isum), q.scales[static_cast<size_t>(b * R + r)] * ks.at(j, b), s);
      }
      out[j * R + r] = s * scale;
    }
  }
}

#ifdef AGENTKV_HAVE_X86_SIMD
// kV row vectors x kK keys; the float sums go through `out` once per block.
template <int kV, int kK>
AGENTKV_AVX512_VNNI void rows_vnni(const LevelQueries& q, const uint8_t* keys, KeyScales ks, int64_t n_keys,
                                   float scale, int64_t r0, float* out) {
  const int64_t R = q.rows, D = q.head_dim, nb = D / kQK8_0;
  const __m512 zero = _mm512_setzero_ps(), vscale = _mm512_set1_ps(scale);
  for (int64_t j0 = 0; j0 < n_keys; j0 += kK) {
    for (int64_t b = 0; b < nb; ++b) {
      __m512i acc[kV][kK];
#pragma GCC unroll 4
      for (int v = 0; v < kV; ++v) {
        const __m512i bias = _mm512_loadu_si512(q.bias.data() + b * R + r0 + 16 * v);
#pragma GCC unroll 8
        for (int k = 0; k < kK; ++k) acc[v][k] = bias;
      }
      const int32_t* qb = q.packed.data() + b * (kQK8_0 / 4) * R + r0;
#pragma GCC unroll 8
      for (int g = 0; g < kQK8_0 / 4; ++g) {
        __m512i x[kV];
#pragma GCC unroll 4
        for (int v = 0; v < kV; ++v) x[v] = _mm512_loadu_si512(qb + g * R + 16 * v);
#pragma GCC unroll 8
        for (int k = 0; k < kK; ++k) {
          int32_t word;
          std::memcpy(&word, keys + (j0 + k) * D + b * kQK8_0 + 4 * g, 4);
          const __m512i kw = _mm512_set1_epi32(word);
#pragma GCC unroll 4
          for (int v = 0; v < kV; ++v) acc[v][k] = _mm512_dpbusd_epi32(acc[v][k], kw, x[v]);
        }
      }
#pragma GCC unroll 4
      for (int v = 0; v < kV; ++v) {
        const __m512 dq = _mm512_loadu_ps(q.scales.data() + b * R + r0 + 16 * v);
#pragma GCC unroll 8
        for (int k = 0; k < kK; ++k) {
          float* o = out + (j0 + k) * R + r0 + 16 * v;
          const __m512 dd = _mm512_mul_ps(dq, _mm512_set1_ps(ks.at(j0 + k, b)));
          __m512 s = _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc[v][k]), dd, b == 0 ? zero : _mm512_loadu_ps(o));
          if (b == nb - 1) s = _mm512_mul_ps(s, vscale);
          _mm512_storeu_ps(o, s);
        }
      }
    }
  }
}

AGENTKV_AVX512_VNNI void scores_vnni(LevelQueries& q, const uint8_t* keys, KeyScales ks, int64_t n_keys, float scale,
                                     float* out) {
  int64_t r = 0;
  for (; r + 32 <= q.rows; r += 32) rows_vnni<2, 8>(q, keys, ks, n_keys, scale, r, out);
  for (; r + 16 <= q.rows; r += 16) rows_vnni<1, 8>(q, keys, ks, n_keys, scale, r, out);
  if (r < q.rows) {  // the tail rows from signed levels
    q.tail_keys.resize(static_cast<size_t>(n_keys * q.head_dim));
    for (size_t i = 0; i < q.tail_keys.size(); ++i) q.tail_keys[i] = static_cast<int8_t>(keys[i] ^ 0x80);
    scores_portable(q, q.tail_keys.data(), ks, n_keys, scale, r, out);
  }
}

template <int kV, int kK>
AGENTKV_AVX2 void rows_avx2(const LevelQueries& q, const int16_t* keys, KeyScales ks, int64_t n_keys, float scale,
                            int64_t r0, float* out) {
  const int64_t R = q.rows, D = q.head_dim, nb = D / kQK8_0;
  const __m256 zero = _mm256_setzero_ps(), vscale = _mm256_set1_ps(scale);
  for (int64_t j0 = 0; j0 < n_keys; j0 += kK) {
    for (int64_t b = 0; b < nb; ++b) {
      __m256i acc[kV][kK];
#pragma GCC unroll 4
      for (int v = 0; v < kV; ++v)
#pragma GCC unroll 8
        for (int k = 0; k < kK; ++k) acc[v][k] = _mm256_setzero_si256();
      const int32_t* qb = q.packed.data() + b * (kQK8_0 / 2) * R + r0;
#pragma GCC unroll 4
      for (int p = 0; p < kQK8_0 / 2; ++p) {
        __m256i x[kV];
#pragma GCC unroll 4
        for (int v = 0; v < kV; ++v) x[v] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qb + p * R + 8 * v));
#pragma GCC unroll 8
        for (int k = 0; k < kK; ++k) {
          int32_t word;
          std::memcpy(&word, keys + (j0 + k) * D + b * kQK8_0 + 2 * p, 4);
          const __m256i kw = _mm256_set1_epi32(word);
#pragma GCC unroll 4
          for (int v = 0; v < kV; ++v) acc[v][k] = _mm256_add_epi32(acc[v][k], _mm256_madd_epi16(kw, x[v]));
        }
      }
#pragma GCC unroll 4
      for (int v = 0; v < kV; ++v) {
        const __m256 dq = _mm256_loadu_ps(q.scales.data() + b * R + r0 + 8 * v);
#pragma GCC unroll 8
        for (int k = 0; k < kK; ++k) {
          float* o = out + (j0 + k) * R + r0 + 8 * v;
          const __m256 dd = _mm256_mul_ps(dq, _mm256_set1_ps(ks.at(j0 + k, b)));
          __m256 s = _mm256_fmadd_ps(_mm256_cvtepi32_ps(acc[v][k]), dd, b == 0 ? zero : _mm256_loadu_ps(o));
          if (b == nb - 1) s = _mm256_mul_ps(s, vscale);
          _mm256_storeu_ps(o, s);
        }
      }
    }
  }
}

AGENTKV_AVX2 void scores_avx2(LevelQueries& q, const uint8_t* keys, KeyScales ks, int64_t n_keys, float scale,
                              float* out) {
  const int64_t n = n_keys * q.head_dim;
  q.wide_keys.resize(static_cast<size_t>(n));
  int16_t* w = q.wide_keys.data();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m128i x = _mm_loadu_si128(reinterpret_cast<const __m128i*>(keys + i));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(w + i), _mm256_cvtepi8_epi16(x));
  }
  for (; i < n; ++i) w[i] = static_cast<int8_t>(keys[i]);
  int64_t r = 0;
  for (; r + 16 <= q.rows; r += 16) rows_avx2<2, 4>(q, w, ks, n_keys, scale, r, out);
  for (; r + 8 <= q.rows; r += 8) rows_avx2<1, 4>(q, w, ks, n_keys, scale, r, out);
  if (r < q.rows) scores_portable(q, reinterpret_cast<const int8_t*>(keys), ks, n_keys, scale, r, out);
}
#endif

}  // namespace

void pack_level_queries(const BlockQ8_0* q8, int64_t rows, int64_t head_dim, LevelQueries* out) {
  if (head_dim % kQK8_0 != 0) throw Error("level scores: head_dim must be a multiple of 32");
  const int64_t nb = head_dim / kQK8_0;
  out->kernel = active_kernel();
  out->rows = rows;
  out->head_dim = head_dim;
  out->values.resize(static_cast<size_t>(rows * head_dim));
  out->scales.resize(static_cast<size_t>(nb * rows));
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t b = 0; b < nb; ++b) {
      const BlockQ8_0& block = q8[r * nb + b];
      std::memcpy(out->values.data() + r * head_dim + b * kQK8_0, block.qs, kQK8_0);
      out->scales[static_cast<size_t>(b * rows + r)] = fp16_to_fp32(block.d);
    }
  }
  const int8_t* v = out->values.data();
  if (out->kernel == LevelScoreKernel::kAvx512Vnni) {
    out->packed.resize(static_cast<size_t>(head_dim / 4 * rows));
    out->bias.resize(static_cast<size_t>(nb * rows));
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t g = 0; g < head_dim / 4; ++g) std::memcpy(&out->packed[static_cast<size_t>(g * rows + r)], v + r * head_dim + 4 * g, 4);
      for (int64_t b = 0; b < nb; ++b) {
        int32_t sum = 0;
        for (int64_t i = 0; i < kQK8_0; ++i) sum += v[r * head_dim + b * kQK8_0 + i];
        out->bias[static_cast<size_t>(b * rows + r)] = -128 * sum;
      }
    }
  } else if (out->kernel == LevelScoreKernel::kAvx2) {
    out->packed.resize(static_cast<size_t>(head_dim / 2 * rows));
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t p = 0; p < head_dim / 2; ++p) {
        const int16_t pair[2] = {v[r * head_dim + 2 * p], v[r * head_dim + 2 * p + 1]};
        std::memcpy(&out->packed[static_cast<size_t>(p * rows + r)], pair, 4);
      }
    }
  }
}

uint8_t level_key_flip(const LevelQueries& q) { return q.kernel == LevelScoreKernel::kAvx512Vnni ? 0x80 : 0; }

void level_scores(LevelQueries& q, const uint8_t* keys, const float* key_scales, int64_t k_block, int64_t n_keys,
                  float scale, float* out) {
  if (n_keys % kLevelScoreKeyGroup != 0) throw Error("level scores: keys come in whole groups");
  if (k_block != kQK8_0 && k_block != 2 * kQK8_0) throw Error("level scores: key blocks of 32 or 64");
  const KeyScales ks{key_scales, q.head_dim / k_block, k_block == kQK8_0 ? 0 : 1};
  switch (q.kernel) {
#ifdef AGENTKV_HAVE_X86_SIMD
    case LevelScoreKernel::kAvx512Vnni: scores_vnni(q, keys, ks, n_keys, scale, out); return;
    case LevelScoreKernel::kAvx2: scores_avx2(q, keys, ks, n_keys, scale, out); return;
#endif
    default: scores_portable(q, reinterpret_cast<const int8_t*>(keys), ks, n_keys, scale, 0, out);
  }
}

void unpack_levels(GgmlType type, const uint8_t* src, int8_t* levels, float* scales, int64_t n) {
  if (type == GgmlType::Q8_0) {
    const auto* blocks = reinterpret_cast<const BlockQ8_0*>(src);
    for (int64_t b = 0; b < n / kQK8_0; ++b) {
      std::memcpy(levels + b * kQK8_0, blocks[b].qs, kQK8_0);
      scales[b] = fp16_to_fp32(blocks[b].d);
    }
  } else if (type == GgmlType::TQ4) {
    const auto* blocks = reinterpret_cast<const BlockTQ4*>(src);
    for (int64_t b = 0; b < n / kQKTQ; ++b, levels += kQKTQ) {
      for (int j = 0; j < kQKTQ / 2; ++j) {
        levels[j] = kTQ4Levels[blocks[b].qs[j] & 0xF];
        levels[j + 32] = kTQ4Levels[blocks[b].qs[j] >> 4];
      }
      scales[b] = fp16_to_fp32(blocks[b].d);
    }
  } else {
    if (type != GgmlType::TQ3) throw Error("unpack_levels: tq4, tq3 or q8_0 rows only");
    const auto* blocks = reinterpret_cast<const BlockTQ3*>(src);
    for (int64_t b = 0; b < n / kQKTQ; ++b, levels += kQKTQ) {
      for (int j = 0; j < kQKTQ; ++j) levels[j] = kTQ3Levels[quant_detail::tq3_index(blocks[b], j)];
      scales[b] = fp16_to_fp32(blocks[b].d);
    }
  }
}

}  // namespace agentkv

// Flash-style attention over stored K/V rows, mirroring llama.cpp's CPU FLASH_ATTN_EXT numerics.
//
// llama.cpp runs one of three algorithms; we pick the same one for the same call:
//  - per-key ("one chunk"): Q is converted to vec_dot_type(K); every visible key updates the
//    running max M, sum S and output VKQ one at a time (expf); with F16 V, VKQ is kept in F16 and
//    rounded after every scale / multiply-add. Used for short batches. K.Q is summed the way
//    ggml_vec_dot_f16 / _f32 sum on an AVX-512 build (GgmlDot below); the score's scale + mask
//    and the S update are single fused multiply-adds, as ggml's compiled code has them.
//    Fast form: a tile's scores first, then the F16 VKQ of two query heads kept in registers
//    (rounded through F16 after each step, the same values ggml stores).
//  - tiled: for >= 64 query rows with K and V both F16 or both F32, Q stays F32, keys come in
//    tiles of 64, M and S are updated once per tile and VKQ accumulates in F32. As ggml's
//    simd_gemm and ggml_vec_soft_max_f32: each K.Q is one fused multiply-add chain over the head
//    dimension, the tile's exponentials use ggml's vector expf and are summed per 16 lanes in
//    float, those sums in double. Fast form (TiledUnit): vectors run across query rows, so all
//    of this is lane-wise and each K/V row of a tile is converted once per block of rows.
//  - split keys: a single query row over >= 512 keys is cut into key chunks processed in parallel
//    with the per-key algorithm; the chunks' (M, S, VKQ) are merged at the end.
//  - own-type decoding: a single query row over a cache with one of agentkv's own types (tq4 /
//    tq3, which llama.cpp does not have, so there is no order to follow) reads tq and q8_0 rows as
//    int8 levels and block scales, widened inside the dot products and the V accumulation (no f32
//    copy), the query in q8_0 for keys read as levels (else f32), a tile's max and exponentials
//    per tile; units are key chunks of every KV head, merged as split keys' are. Batches over
//    these types are tiled whatever their size; there, keys read as levels (tq4, tq3, q8_0) meet
//    the query rows in q8_0 in integer sums (level_scores.h), the same on every CPU level.
// Work is spread over threads as (token or token block, KV head) units (all query heads of a GQA
// group share the K/V rows they read), KV head by KV head so neighbouring units share cached rows,
// taken dynamically since causal rows differ in length. tests/attention_test.cpp holds a scalar
// reference of each order and checks the kernels against it bit for bit.
// Fused multiply-adds are written out (MulAdd, std::fma) exactly where ggml's compiled code fuses;
// the compiler must not fuse anything else, or the results would move off llama.cpp's bits.
#if defined(__clang__)
#pragma clang fp contract(off)
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/attention.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep

#include "hwy/highway.h"
#include "hwy/contrib/math/math-inl.h"
#include "kernels/ggml_expf-inl.h"

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "agentkv/error.h"
#include "agentkv/fp16.h"
#include "kernels/attention.h"
#include "kernels/dispatch.h"
#include "kernels/level_scores.h"
#include "agentkv/numerics.h"
#include "kernels/quant.h"
#include "kernels/quant_blocks.h"

// Shared by every target's copy of this file: the plan of one call.
#ifndef AGENTKV_ATTENTION_PLAN_DEFINED
#define AGENTKV_ATTENTION_PLAN_DEFINED
namespace agentkv::attention_detail {

constexpr int64_t kKeyTile = kAttentionKeyTile;  // keys per tile (llama.cpp's GGML_FA_TILE_KV)
constexpr int64_t kTiledMinTokens = 64;  // llama.cpp's GGML_FA_TILE_Q: tiled path threshold
constexpr int64_t kSplitMinKeys = 512;   // llama.cpp splits single-row attention from here on
constexpr int64_t kOwnDecodeMinChunk = 1024;  // own-type decoding: keys per chunk at least
constexpr int64_t kTiledRowsPerUnit = 64;  // tiled units: about this many (token, head) rows,
constexpr int64_t kTiledMinTokensPerUnit = 16;  // and at least this many tokens
// Own types' tiled units: twice the rows. Each unit dequantizes its keys' rows again, and a tq3
// row costs more than an f16 one (pp512 @ d16384 tq3 +5 %). A row's sums do not depend on the
// unit's other rows once ggml's zero-weight skip is off, as it is for own types: same bits.
constexpr int64_t kOwnTiledRowsPerUnit = 128;
constexpr int64_t kPerKeyMaxTokensPerUnit = 16;  // per-key units: tokens sharing each K/V tile

enum class Mode { kPerKey, kTiled, kSplitKeys, kOwnDecode };

// Split-keys chunks are cut from the key count rounded up to 32, the span the cell-indexed kernel
// used to cover (KvCache's n_kv padding): the same chunks as before keys came in position order,
// and still a function of the key count alone.
constexpr int64_t kKeySpanPad = 32;
// Types own-type decoding reads as int8 levels and block scales.
constexpr bool LevelType(GgmlType t) {
  return t == GgmlType::TQ4 || t == GgmlType::TQ3 || t == GgmlType::Q8_0 || t == GgmlType::TQC3;
}
// Elements per level scale: q8_0's blocks are 32, tq's 64; tqc3's levels all have the scale 0.5,
// so its blocks are as long as the head allows (64 when it divides it: fewer scale steps).
constexpr int64_t LevelBlock(GgmlType t, int64_t head_dim) {
  return t == GgmlType::Q8_0 || (t == GgmlType::TQC3 && head_dim % 64 != 0) ? 32 : 64;
}

inline int64_t KeySpan(int64_t n_kv) { return (n_kv + kKeySpanPad - 1) / kKeySpanPad * kKeySpanPad; }

using ggml_math::GgmlExpLane;  // ggml_v_expf (the AVX-512 form) for one lane

// _mm512_reduce_add_ps on 16 values: halves (8, 4), then pairs.
inline float ReduceAdd16(const float* v) {
  float h8[8], h4[4];
  for (int l = 0; l < 8; ++l) h8[l] = v[l + 8] + v[l];
  for (int l = 0; l < 4; ++l) h4[l] = h8[l + 4] + h8[l];
  return (h4[0] + h4[2]) + (h4[1] + h4[3]);
}

// GGML_F32x8_REDUCE's last steps on 8 values: 128-bit halves added, then hadd(hadd(t, t), t).
inline float ReduceHadd8(const float* v) {
  float t[4];
  for (int l = 0; l < 4; ++l) t[l] = v[l] + v[l + 4];
  return (t[0] + t[1]) + (t[2] + t[3]);
}

// tinyBLAS's / ggml_vec_soft_max_f32's hsum of 8 values on the AVX2 build: halves, then pairs.
inline float Hsum8(const float* v) {
  float t[4];
  for (int l = 0; l < 4; ++l) t[l] = v[l + 4] + v[l];
  return (t[0] + t[2]) + (t[1] + t[3]);
}

struct Plan {
  const AttentionArgs* args = nullptr;
  int ggml_lanes = 16;  // vector width of the llama.cpp build whose orders to follow (16 or 8)
  Mode mode = Mode::kPerKey;
  int64_t head_dim = 0;
  int64_t group = 0;  // query heads per KV head
  int64_t n_head_kv = 0;
  size_t k_head_bytes = 0;  // bytes of one head's slice of a K row
  CodedUnpack coded_unpack = CodedUnpack::kPortable;  // how tqc3 rows are unpacked (once per call)
  size_t v_head_bytes = 0;
  GgmlType q_type = GgmlType::F32;  // vec_dot_type(k_type) for the per-key algorithm
  size_t q_head_bytes = 0;
  int64_t n_units = 0;
  int64_t tokens_per_unit = 1;  // tiled and per-key: tokens per unit
  int64_t n_chunks = 1;     // split keys: chunks per KV head
  int64_t chunk_size = 0;
  float* partials = nullptr;  // split keys: [n_head][n_chunks][2 + head_dim] = M, S, VKQ
  bool own_type = false;  // no llama.cpp order to follow: an agentkv-only type, or own_order
  // Own-type decoding with keys read as levels (tq4, tq3, q8_0): the query in their vec_dot_type,
  // q8_0, prepared once per call — its int8 values widened (n_head x head_dim) and its scales
  // (n_head x head_dim / 32) for the SIMD builds, its rounded values for the scalar build.
  const int16_t* query_q16 = nullptr;
  const float* query_scales = nullptr;
  const float* query_rounded = nullptr;
  // Tiled with a mask: whether every mask value of a (token block, key tile) is +0.0 — 0 not
  // known yet, 1 yes, 2 no — asked once for all KV heads' units instead of once per unit (8 x on
  // Qwen3-0.6B: the scan was 2-3 % of a prefill at depth). Units racing on an entry store the
  // same value.
  std::atomic<uint8_t>* mask_tile_zero = nullptr;
  int64_t mask_tiles = 0;  // key tiles per token block in mask_tile_zero
};

}  // namespace agentkv::attention_detail
#endif

HWY_BEFORE_NAMESPACE();
namespace agentkv {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;
using attention_detail::kKeyTile;
using attention_detail::Mode;
using attention_detail::Plan;
using attention_detail::LevelType;

using DF = hn::ScalableTag<float>;
using DH = hn::Rebind<hwy::float16_t, DF>;
using DU16 = hn::Rebind<uint16_t, DF>;
using DU32 = hn::RebindToUnsigned<DF>;

HWY_INLINE hn::Vec<DF> LoadF16(const uint16_t* p) {
  return hn::PromoteTo(DF(), hn::LoadU(DH(), reinterpret_cast<const hwy::float16_t*>(p)));
}
HWY_INLINE hn::Vec<DF> LoadBF16(const uint16_t* p) {
  const auto wide = hn::PromoteTo(DU32(), hn::LoadU(DU16(), p));
  return hn::BitCast(DF(), hn::ShiftLeft<16>(wide));
}

// Targets without F16C convert f32 -> f16 by truncation in Highway; ggml rounds to nearest even,
// so those targets use the scalar conversion.
#undef AGENTKV_ATTN_VECTOR_F16_STORE
#if HWY_TARGET >= HWY_SSE4
#define AGENTKV_ATTN_VECTOR_F16_STORE 0
#else
#define AGENTKV_ATTN_VECTOR_F16_STORE 1
#endif

// Element types of the dot / accumulate kernels: a vector load widened to f32, and one element.
struct F32Elems {
  using T = float;
  static HWY_INLINE hn::Vec<DF> Load(const float* p) { return hn::LoadU(DF(), p); }
  template <class D>
  static HWY_INLINE hn::Vec<D> LoadN(const float* p) { return hn::LoadU(D(), p); }
  static HWY_INLINE float At(const float* p, int64_t i) { return p[i]; }
};
struct F16Elems {
  using T = uint16_t;
  static HWY_INLINE hn::Vec<DF> Load(const uint16_t* p) { return LoadF16(p); }
  template <class D>
  static HWY_INLINE hn::Vec<D> LoadN(const uint16_t* p) {
    return hn::PromoteTo(D(), hn::LoadU(hn::Rebind<hwy::float16_t, D>(), reinterpret_cast<const hwy::float16_t*>(p)));
  }
  static HWY_INLINE float At(const uint16_t* p, int64_t i) { return fp16_to_fp32(p[i]); }
};
struct BF16Elems {
  using T = uint16_t;
  static HWY_INLINE hn::Vec<DF> Load(const uint16_t* p) { return LoadBF16(p); }
  template <class D>
  static HWY_INLINE hn::Vec<D> LoadN(const uint16_t* p) {
    const hn::RebindToUnsigned<D> du;
    const auto wide = hn::PromoteTo(du, hn::LoadU(hn::Rebind<uint16_t, D>(), p));
    return hn::BitCast(D(), hn::ShiftLeft<16>(wide));
  }
  static HWY_INLINE float At(const uint16_t* p, int64_t i) { return bf16_to_fp32(p[i]); }
};

// Four keys against one query, the query loaded once per step (products and sums in f32, as
// ggml_vec_dot_f16 / _f32 do).
template <class QE, class KE>
HWY_INLINE void Dot4(const typename QE::T* q, const uint8_t* const* k_bytes, int64_t n, float* out) {
  const DF d;
  const int64_t step = static_cast<int64_t>(hn::Lanes(d));
  using KT = typename KE::T;
  const KT* k0 = reinterpret_cast<const KT*>(k_bytes[0]);
  const KT* k1 = reinterpret_cast<const KT*>(k_bytes[1]);
  const KT* k2 = reinterpret_cast<const KT*>(k_bytes[2]);
  const KT* k3 = reinterpret_cast<const KT*>(k_bytes[3]);
  auto a0 = hn::Zero(d), a1 = hn::Zero(d), a2 = hn::Zero(d), a3 = hn::Zero(d);
  int64_t i = 0;
  for (; i + step <= n; i += step) {
    const auto vq = QE::Load(q + i);
    a0 = hn::MulAdd(vq, KE::Load(k0 + i), a0);
    a1 = hn::MulAdd(vq, KE::Load(k1 + i), a1);
    a2 = hn::MulAdd(vq, KE::Load(k2 + i), a2);
    a3 = hn::MulAdd(vq, KE::Load(k3 + i), a3);
  }
  out[0] = hn::GetLane(hn::SumOfLanes(d, a0));
  out[1] = hn::GetLane(hn::SumOfLanes(d, a1));
  out[2] = hn::GetLane(hn::SumOfLanes(d, a2));
  out[3] = hn::GetLane(hn::SumOfLanes(d, a3));
  for (; i < n; ++i) {
    const float qi = QE::At(q, i);
    out[0] += qi * KE::At(k0, i);
    out[1] += qi * KE::At(k1, i);
    out[2] += qi * KE::At(k2, i);
    out[3] += qi * KE::At(k3, i);
  }
}

// Dot products of one query with n keys (k_bytes[j] = start of key j's head slice).
template <class QE, class KE>
void DotMany(const typename QE::T* q, const uint8_t* const* k_bytes, int64_t n_keys, int64_t n, float* out) {
  int64_t j = 0;
  for (; j + 4 <= n_keys; j += 4) Dot4<QE, KE>(q, k_bytes + j, n, out + j);
  if (j < n_keys) {
    const uint8_t* rest[4];
    float tmp[4];
    for (int r = 0; r < 4; ++r) rest[r] = k_bytes[std::min(j + r, n_keys - 1)];
    Dot4<QE, KE>(q, rest, n, tmp);
    for (int64_t r = 0; j + r < n_keys; ++r) out[j + r] = tmp[r];
  }
}

// K.Q as ggml_vec_dot_f16 / ggml_vec_dot_f32 compute it on llama.cpp's x86 builds, kG floats per
// vector (16: the AVX-512 build, GGML_F32_STEP 64; 8: the AVX2 build, GGML_F32_STEP 32): whole
// 4kG-element steps go to four kG-lane fused accumulators, combined as (0+2)+(1+3) and reduced
// (kG = 16: _mm512_reduce_add_ps; kG = 8: GGML_F32x8_REDUCE, i.e. the 128-bit halves added, then
// (t0 + t1) + (t2 + t3)); the rest is added one product at a time (f16: products in float, the
// sum in double; f32: a float fused multiply-add chain on the AVX-512 build, rounded products
// on the AVX2 one). An F16 query comes widened to f32 once
// (the same values), the key row is widened as it is read.
template <class KE, int kQ, int kG = 16>
HWY_INLINE void GgmlDotRows(const typename KE::T* k, const float* const* q, int64_t n, float* const* out) {
  constexpr bool kHalf = std::is_same_v<KE, F16Elems>;
  static_assert(kG == 16 || kG == 8, "ggml's x86 vector widths");
  // Vectors of at most kG lanes (a 16-lane target runs the 8-lane order on half vectors).
  using DG = hn::CappedTag<float, kG>;
  const DG d;
  constexpr int64_t kLanes = static_cast<int64_t>(hn::MaxLanes(DG()));
  static_assert(kLanes <= kG && kG % kLanes == 0, "a ggml accumulator spans whole vectors");
  constexpr int64_t kParts = kG / kLanes;  // vectors per ggml accumulator
  const int64_t np = n & ~int64_t{4 * kG - 1};
  double sum_d[kQ];
  float sum_f[kQ];
#pragma GCC unroll 4
  for (int r = 0; r < kQ; ++r) sum_d[r] = 0.0, sum_f[r] = 0.0f;
  if (np > 0) {
    hn::Vec<DG> acc[kQ][4][kParts];
#pragma GCC unroll 4
    for (int r = 0; r < kQ; ++r)
#pragma GCC unroll 4
      for (int j = 0; j < 4; ++j)
#pragma GCC unroll 4
        for (int64_t p = 0; p < kParts; ++p) acc[r][j][p] = hn::Zero(d);
    for (int64_t i = 0; i < np; i += 4 * kG)
#pragma GCC unroll 4
      for (int j = 0; j < 4; ++j)
#pragma GCC unroll 4
        for (int64_t p = 0; p < kParts; ++p) {
          const int64_t e = i + kG * j + p * kLanes;
          const auto kv = KE::template LoadN<DG>(k + e);  // one key element load for every query row
#pragma GCC unroll 4
          for (int r = 0; r < kQ; ++r) acc[r][j][p] = hn::MulAdd(kv, hn::LoadU(d, q[r] + e), acc[r][j][p]);
        }
#pragma GCC unroll 4
    for (int r = 0; r < kQ; ++r) {
#if HWY_TARGET <= HWY_AVX3
      if constexpr (kG == 16) {
        // 16-lane vectors: ggml's own reduction instruction sequence
        sum_f[r] = _mm512_reduce_add_ps(hn::Add(hn::Add(acc[r][0][0], acc[r][2][0]), hn::Add(acc[r][1][0], acc[r][3][0])).raw);
        sum_d[r] = sum_f[r];
        continue;
      }
#endif
      float red[16];
      for (int64_t p = 0; p < kParts; ++p)
        hn::StoreU(hn::Add(hn::Add(acc[r][0][p], acc[r][2][p]), hn::Add(acc[r][1][p], acc[r][3][p])), d, red + p * kLanes);
      sum_f[r] = kG == 16 ? attention_detail::ReduceAdd16(red) : attention_detail::ReduceHadd8(red);
      sum_d[r] = sum_f[r];
    }
  }
#pragma GCC unroll 4
  for (int r = 0; r < kQ; ++r) {
    for (int64_t i = np; i < n; ++i) {
      if constexpr (kHalf) {
        sum_d[r] += static_cast<double>(KE::At(k, i) * q[r][i]);
      } else if constexpr (kG == 16) {
        sum_f[r] = std::fma(KE::At(k, i), q[r][i], sum_f[r]);
      } else {  // the AVX2 build rounds each product of the tail (Zen tuning: no fused chain;
                // this file does not contract)
        sum_f[r] += KE::At(k, i) * q[r][i];
      }
    }
    *out[r] = kHalf ? static_cast<float>(sum_d[r]) : sum_f[r];
  }
}

template <class KE, int kG = 16>
float GgmlDot(const typename KE::T* k, const float* q, int64_t n) {
  float result;
  float* out = &result;
  GgmlDotRows<KE, 1, kG>(k, &q, n, &out);
  return result;
}

void ScaleF32(float* y, float v, int64_t n) {
  const DF d;
  const int64_t step = static_cast<int64_t>(hn::Lanes(d));
  const auto vv = hn::Set(d, v);
  int64_t i = 0;
  for (; i + step <= n; i += step) hn::StoreU(hn::Mul(hn::LoadU(d, y + i), vv), d, y + i);
  for (; i < n; ++i) y[i] *= v;
}

void AxpyF32(float* y, const float* x, float v, int64_t n) {
  const DF d;
  const int64_t step = static_cast<int64_t>(hn::Lanes(d));
  const auto vv = hn::Set(d, v);
  int64_t i = 0;
  for (; i + step <= n; i += step) {
    hn::StoreU(hn::MulAdd(hn::LoadU(d, x + i), vv, hn::LoadU(d, y + i)), d, y + i);
  }
  for (; i < n; ++i) y[i] = std::fma(x[i], v, y[i]);
}

// ggml_vec_scale_f16 / ggml_vec_mad_f16: widen, compute in f32, round back to f16 every time.
void ScaleF16(uint16_t* y, float v, int64_t n) {
  int64_t i = 0;
#if AGENTKV_ATTN_VECTOR_F16_STORE
  const DF d;
  const DH dh;
  const int64_t step = static_cast<int64_t>(hn::Lanes(d));
  const auto vv = hn::Set(d, v);
  for (; i + step <= n; i += step) {
    const auto r = hn::Mul(LoadF16(y + i), vv);
    hn::StoreU(hn::DemoteTo(dh, r), dh, reinterpret_cast<hwy::float16_t*>(y + i));
  }
#endif
  for (; i < n; ++i) y[i] = fp32_to_fp16(fp16_to_fp32(y[i]) * v);
}

void AxpyF16(uint16_t* y, const uint16_t* x, float v, int64_t n) {
  int64_t i = 0;
#if AGENTKV_ATTN_VECTOR_F16_STORE
  const DF d;
  const DH dh;
  const int64_t step = static_cast<int64_t>(hn::Lanes(d));
  const auto vv = hn::Set(d, v);
  for (; i + step <= n; i += step) {
    const auto r = hn::MulAdd(LoadF16(x + i), vv, LoadF16(y + i));
    hn::StoreU(hn::DemoteTo(dh, r), dh, reinterpret_cast<hwy::float16_t*>(y + i));
  }
#endif
  for (; i < n; ++i) y[i] = fp32_to_fp16(std::fma(fp16_to_fp32(x[i]), v, fp16_to_fp32(y[i])));
}

// Lines of the next tile's K or V rows, asked for ahead of use a few at a time through the work
// of the current tile: spread out, the loads overlap the arithmetic (a burst fills the core's
// miss buffers and stalls, then the memory idles). Bytes [offset, offset + bytes) of each row.
class PrefetchCursor {
 public:
  PrefetchCursor() = default;
  PrefetchCursor(const uint8_t* const* rows, int64_t n_rows, size_t offset, size_t bytes)
      : rows_(rows), offset_(offset), bytes_(bytes),
        left_(std::max<int64_t>(n_rows, 0) * static_cast<int64_t>((bytes + 63) / 64)) {}
  // Lines per step for the lines left to be asked for in `steps` steps.
  int64_t PerStep(int64_t steps) const { return steps > 0 ? (left_ + steps - 1) / steps : left_; }
  HWY_INLINE void Issue(int64_t lines) {
    for (; lines > 0 && left_ > 0; --lines, --left_) {
#if defined(__GNUC__)
      __builtin_prefetch(rows_[row_] + offset_ + byte_);
#endif
      byte_ += 64;
      if (byte_ >= bytes_) byte_ = 0, ++row_;
    }
  }
  void Finish() { Issue(left_); }

 private:
  const uint8_t* const* rows_ = nullptr;
  int64_t row_ = 0;
  size_t offset_ = 0, bytes_ = 0, byte_ = 0;
  int64_t left_ = 0;
};

#if AGENTKV_ATTN_VECTOR_F16_STORE
// The per-key online softmax of kRows rows over the same n keys (scores[r * score_stride + j])
// with an F16 V: each row's running output is held in registers and rounded to F16 after every
// scale and multiply-add exactly as ggml_vec_scale_f16 / ggml_vec_mad_f16 store it (ScaleF16 /
// AxpyF16 above). Every element's chain over the keys is independent of the others', so the head
// dimension is walked in blocks of kBlock vectors, all keys for one block before the next: the
// rows' accumulators of a block fit the register file (16 registers on AVX2: a whole 128-wide
// row pair would spill at every key), and each V row is converted once per block for all rows.
template <int kVecs, int kRows, int kBlock>
void OnlineSoftmaxF16InRegisters(uint16_t* acc16, int64_t acc_stride, const float* scores, int64_t score_stride,
                                 const uint8_t* const* v_rows, int64_t n, float* m_io, float* s_io,
                                 PrefetchCursor* ahead) {
  static_assert(kVecs % kBlock == 0, "whole blocks");
  const DF d;
  const DH dh;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  float m[kRows], s_sum[kRows];
#pragma GCC unroll 4
  for (int r = 0; r < kRows; ++r) {
    m[r] = m_io[r];
    s_sum[r] = s_io[r];
  }
  // The running max, the exponentials and S depend on the scores only: they are worked out
  // first, so the accumulation loop below makes no calls (a call in it would spill every live
  // vector register around each expf).
  float ms[kRows][kKeyTile], vs[kRows][kKeyTile];  // n <= kKeyTile: the caller passes one tile
  bool rescale[kRows][kKeyTile];
#pragma GCC unroll 4
  for (int r = 0; r < kRows; ++r) {
    for (int64_t j = 0; j < n; ++j) {
      const float s = scores[r * score_stride + j];
      float msj = 1.0f, vsj = 1.0f;
      rescale[r][j] = false;
      if (s > m[r]) {
        const float m_old = m[r];
        m[r] = s;
        msj = std::exp(m_old - s);
        rescale[r][j] = m_old != -INFINITY;  // before the first key the accumulator is all zeros
      } else {
        vsj = std::exp(s - m[r]);
      }
      ms[r][j] = msj;
      vs[r][j] = vsj;
      s_sum[r] = std::fma(s_sum[r], msj, vsj);
    }
  }
  for (int b = 0; b < kVecs; b += kBlock) {
    hn::Vec<DF> acc[kRows][kBlock];
#pragma GCC unroll 4
    for (int r = 0; r < kRows; ++r)
#pragma GCC unroll 16
      for (int i = 0; i < kBlock; ++i) acc[r][i] = LoadF16(acc16 + r * acc_stride + (b + i) * N);
    const int64_t ahead_per_step = ahead ? ahead->PerStep((kVecs - b) / kBlock * n) : 0;
    for (int64_t j = 0; j < n; ++j) {
      const auto* v = reinterpret_cast<const uint16_t*>(v_rows[j]) + b * N;
      if (ahead) ahead->Issue(ahead_per_step);
#pragma GCC unroll 4
      for (int r = 0; r < kRows; ++r) {
        if (rescale[r][j]) {
          const auto vms = hn::Set(d, ms[r][j]);
#pragma GCC unroll 16
          for (int i = 0; i < kBlock; ++i) acc[r][i] = hn::PromoteTo(d, hn::DemoteTo(dh, hn::Mul(acc[r][i], vms)));
        }
      }
#pragma GCC unroll 16
      for (int i = 0; i < kBlock; ++i) {
        const auto x = LoadF16(v + i * N);
#pragma GCC unroll 4
        for (int r = 0; r < kRows; ++r) {
          acc[r][i] = hn::PromoteTo(d, hn::DemoteTo(dh, hn::MulAdd(x, hn::Set(d, vs[r][j]), acc[r][i])));
        }
      }
    }
#pragma GCC unroll 4
    for (int r = 0; r < kRows; ++r)
#pragma GCC unroll 16
      for (int i = 0; i < kBlock; ++i) {
        hn::StoreU(hn::DemoteTo(dh, acc[r][i]), dh,
                   reinterpret_cast<hwy::float16_t*>(acc16 + r * acc_stride + (b + i) * N));
      }
  }
#pragma GCC unroll 4
  for (int r = 0; r < kRows; ++r) {
    m_io[r] = m[r];
    s_io[r] = s_sum[r];
  }
}

// Accumulator vectors the register form keeps live: about half the register file (32 vector
// registers on AVX-512, 16 on AVX2 and below), the rest holding V and the weights.
constexpr int kSoftmaxAccVectors = HWY_TARGET <= HWY_AVX3 ? 16 : 8;

template <int kVecs, int kRows>
void OnlineSoftmaxF16Rows(uint16_t* acc16, int64_t D, const float* scores, int64_t score_stride,
                          const uint8_t* const* v_rows, int64_t n, float* m, float* s, PrefetchCursor* ahead) {
  constexpr int kBlock = std::min(kVecs, kSoftmaxAccVectors / kRows);
  OnlineSoftmaxF16InRegisters<kVecs, kRows, kBlock>(acc16, D, scores, score_stride, v_rows, n, m, s, ahead);
}

// Whether a head dimension has the register form.
bool HasF16RegisterForm(int64_t D) {
  const int64_t N = static_cast<int64_t>(hn::Lanes(DF()));
  if (D % N != 0) return false;
  const int64_t vecs = D / N;
  return vecs == 2 || vecs == 4 || vecs == 8 || vecs == 16;
}

// Rows [0, n_rows) in register form, two at a time (the first pair also asks for the lines
// ahead, when given); false when head_dim has no register form (the caller then runs the plain
// loop).
bool OnlineSoftmaxF16Fast(uint16_t* acc16, int64_t D, const float* scores, int64_t score_stride,
                          const uint8_t* const* v_rows, int64_t n, int64_t n_rows, float* m, float* s,
                          PrefetchCursor* ahead) {
  if (!HasF16RegisterForm(D)) return false;
  const int64_t vecs = D / static_cast<int64_t>(hn::Lanes(DF()));
  int64_t r = 0;
  for (; r < n_rows; ++r, ahead = nullptr) {
    uint16_t* acc_r = acc16 + r * D;
    const float* sc_r = scores + r * score_stride;
    const bool pair = r + 1 < n_rows;
    switch (vecs * 2 + (pair ? 1 : 0)) {
      case 4: OnlineSoftmaxF16Rows<2, 1>(acc_r, D, sc_r, score_stride, v_rows, n, m + r, s + r, ahead); break;
      case 5: OnlineSoftmaxF16Rows<2, 2>(acc_r, D, sc_r, score_stride, v_rows, n, m + r, s + r, ahead); break;
      case 8: OnlineSoftmaxF16Rows<4, 1>(acc_r, D, sc_r, score_stride, v_rows, n, m + r, s + r, ahead); break;
      case 9: OnlineSoftmaxF16Rows<4, 2>(acc_r, D, sc_r, score_stride, v_rows, n, m + r, s + r, ahead); break;
      case 16: OnlineSoftmaxF16Rows<8, 1>(acc_r, D, sc_r, score_stride, v_rows, n, m + r, s + r, ahead); break;
      case 17: OnlineSoftmaxF16Rows<8, 2>(acc_r, D, sc_r, score_stride, v_rows, n, m + r, s + r, ahead); break;
      case 32: OnlineSoftmaxF16Rows<16, 1>(acc_r, D, sc_r, score_stride, v_rows, n, m + r, s + r, ahead); break;
      default: OnlineSoftmaxF16Rows<16, 2>(acc_r, D, sc_r, score_stride, v_rows, n, m + r, s + r, ahead); break;
    }
    if (pair) ++r;
  }
  return true;
}
#else
bool HasF16RegisterForm(int64_t) { return false; }
bool OnlineSoftmaxF16Fast(uint16_t*, int64_t, const float*, int64_t, const uint8_t* const*, int64_t, int64_t, float*,
                          float*, PrefetchCursor*) {
  return false;
}
#endif

// ---------------------------------------------------------------------------------------------
// Per-thread scratch, reused across calls (pool threads are persistent).
struct Scratch {
  std::vector<float> f32;
  std::vector<uint16_t> f16;
  std::vector<uint8_t> bytes;
  std::vector<float> level_scales;
  std::vector<int64_t> visible;
  std::vector<const uint8_t*> k_rows;  // head slices of the visible keys of a tile
  std::vector<const uint8_t*> v_rows;
  std::vector<const float*> key_rows;  // tiled: the tile's keys and values as f32 rows
  std::vector<const float*> value_rows;
  // tiled units over keys read as levels: the query rows in q8_0, the tile's key levels and scales
  std::vector<BlockQ8_0> query_q8;
  LevelQueries level_queries;
  std::vector<int8_t> key_levels;
  std::vector<float> key_level_scales;
};

Scratch& ThreadScratch() {
  static thread_local Scratch scratch;
  return scratch;
}

template <class T>
T* Reserve(std::vector<T>& v, size_t n) {
  if (v.size() < n) v.resize(n);
  return v.data();
}

// Asks for the head slices of keys [c0, c1) ahead of use: a unit reads one head's slice of every
// row, a stride the hardware prefetchers do not follow across pages.
HWY_INLINE void PrefetchRows(const uint8_t* const* rows, size_t offset, size_t bytes, int64_t c0, int64_t c1) {
#if defined(__GNUC__)
  for (int64_t c = c0; c < c1; ++c) {
    const uint8_t* row = rows[c] + offset;
    for (size_t b = 0; b < bytes; b += 64) __builtin_prefetch(row + b);
  }
#endif
}

// Keys of [c0, c1) the row can see; returns how many.
int64_t VisibleKeys(const float* mask_row, int64_t c0, int64_t c1, int64_t* out) {
  int64_t n = 0;
  if (!mask_row) {
    for (int64_t c = c0; c < c1; ++c) out[n++] = c;
    return n;
  }
  for (int64_t c = c0; c < c1; ++c) {
    if (mask_row[c] != -INFINITY) out[n++] = c;
  }
  return n;
}

// Query head h's sink (AttentionArgs::sinks) joins a finished (M, S): ggml's correction, M and S
// updated; returns the factor VKQ is then multiplied by (1 when the sink is not a new maximum).
float ApplySink(const AttentionArgs& a, int64_t h, float& m, float& s) {
  const float sink = a.sinks[h];
  float ms = 1.0f, vs = 1.0f;
  if (sink > m) {
    ms = std::exp(m - sink);
    m = sink;
  } else {
    vs = std::exp(sink - m);
  }
  s = std::fma(s, ms, vs);
  return ms;
}

// Writes one finished row: out = VKQ / S (as ggml: multiply by 1/S, zero when S == 0) and lse,
// the sink (if any) joined first.
void FinishRow(const AttentionArgs& a, int64_t t, int64_t h, const float* acc, float m, float s) {
  const int64_t d = a.shape.head_dim;
  float* out = a.out + t * a.out_stride + h * d;
  if (a.sinks) {
    const float ms = ApplySink(a, h, m, s);
    const float inv = s == 0.0f ? 0.0f : 1.0f / s;
    for (int64_t i = 0; i < d; ++i) out[i] = (acc[i] * ms) * inv;
  } else {
    const float inv = s == 0.0f ? 0.0f : 1.0f / s;
    for (int64_t i = 0; i < d; ++i) out[i] = acc[i] * inv;
  }
  if (a.lse) a.lse[t * a.shape.n_head + h] = s == 0.0f ? -INFINITY : m + std::log(s);
}

// A finished (M, S, VKQ) of token t, query head h: its output row when chunk < 0, else the
// chunk's partial record (split keys and own-type decoding, merged in attention()).
void EndRow(const Plan& plan, int64_t t, int64_t h, const float* acc, float m, float s, int64_t chunk) {
  if (chunk < 0) {
    FinishRow(*plan.args, t, h, acc, m, s);
    return;
  }
  float* rec = plan.partials + (h * plan.n_chunks + chunk) * (2 + plan.head_dim);
  if (plan.args->sinks && chunk == 0) {  // ggml: with the first key chunk only
    const float ms = ApplySink(*plan.args, h, m, s);
    for (int64_t i = 0; i < plan.head_dim; ++i) rec[2 + i] = acc[i] * ms;
  } else {
    std::memcpy(rec + 2, acc, static_cast<size_t>(plan.head_dim) * sizeof(float));
  }
  rec[0] = m;
  rec[1] = s;
}

// The per-key algorithm for tokens [t0, t1), KV heads [g0, g1), keys [k0, k1). Writes final rows,
// or partial (M, S, VKQ) records when chunk >= 0 (split-keys mode, one token). Every row keeps its
// own sequential chain over the keys; the tokens and heads only share the loop over key tiles, so
// a tile's K/V rows come from memory once and stay in cache for all of them (one token per unit
// re-read a long history once per token; one head per unit read each K/V row in 8 strided pieces
// at 8 different times).
void PerKeyUnit(const Plan& plan, int64_t t0, int64_t t1, int64_t g0, int64_t g1, int64_t k0, int64_t k1,
                int64_t chunk) {
  const AttentionArgs& a = *plan.args;
  const int64_t D = plan.head_dim;
  const int64_t G = plan.group;
  const int64_t T = t1 - t0;
  const int64_t TG = (g1 - g0) * T * G;  // rows: row = ((g - g0) * T + (t - t0)) * G + r
  const bool avx2_order = plan.ggml_lanes == 8;  // K.Q in the AVX2 build's vec_dot order
  const bool v_f16 = a.v_type == GgmlType::F16;
  const bool v_f32 = a.v_type == GgmlType::F32;

  Scratch& sc = ThreadScratch();
  uint8_t* q_conv = Reserve(sc.bytes, static_cast<size_t>(TG) * plan.q_head_bytes);
  float* f = Reserve(sc.f32, static_cast<size_t>(TG * D + kKeyTile * D + G * kKeyTile + 2 * TG + TG * D));
  float* acc32 = f;                           // TG x D
  float* v_tile = acc32 + TG * D;             // kKeyTile x D (dequantized V rows of the tile)
  float* all_scores = v_tile + kKeyTile * D;  // G x kKeyTile (one token at a time)
  float* M = all_scores + G * kKeyTile;       // TG
  float* S = M + TG;                          // TG
  float* q_wide = S + TG;                     // TG x D: the F16 query widened to f32 (F16 keys)
  uint16_t* acc16 = Reserve(sc.f16, static_cast<size_t>(TG * D));
  int64_t* visible_all = Reserve(sc.visible, static_cast<size_t>(T * kKeyTile + T));  // T x kKeyTile
  int64_t* n_visible = visible_all + T * kKeyTile;                                      // T
  const uint8_t** k_rows = Reserve(sc.k_rows, static_cast<size_t>(kKeyTile));
  const uint8_t** v_rows = Reserve(sc.v_rows, static_cast<size_t>(kKeyTile));

  for (int64_t g = g0; g < g1; ++g) {
    for (int64_t t = t0; t < t1; ++t) {
      for (int64_t r = 0; r < G; ++r) {
        const int64_t row = ((g - g0) * T + (t - t0)) * G + r;
        const float* q = a.q + t * a.q_stride + (g * G + r) * D;
        uint8_t* dst = q_conv + row * plan.q_head_bytes;
        switch (plan.q_type) {
          case GgmlType::F32:
            std::memcpy(dst, q, static_cast<size_t>(D) * sizeof(float));
            break;
          case GgmlType::F16: {
            auto* h = reinterpret_cast<uint16_t*>(dst);
            for (int64_t i = 0; i < D; ++i) h[i] = fp32_to_fp16(q[i]);
            for (int64_t i = 0; i < D; ++i) q_wide[row * D + i] = fp16_to_fp32(h[i]);
            break;
          }
          case GgmlType::BF16: {
            auto* h = reinterpret_cast<uint16_t*>(dst);
            for (int64_t i = 0; i < D; ++i) h[i] = fp32_to_bf16(q[i]);
            break;
          }
          default:
            quantize_row(plan.q_type, q, dst, D);
            break;
        }
        M[row] = -INFINITY;
        S[row] = 0.0f;
      }
    }
  }
  if (v_f16) {
    std::fill(acc16, acc16 + TG * D, uint16_t{0});
  } else {
    std::fill(acc32, acc32 + TG * D, 0.0f);
  }

  for (int64_t c0 = k0; c0 < k1; c0 += kKeyTile) {
    const int64_t c1 = std::min(c0 + kKeyTile, k1);
    const int64_t next_end = std::min(c1 + kKeyTile, k1);
    // Which keys of the tile each token sees: the same for every head.
    for (int64_t t = t0; t < t1; ++t) {
      const float* mask_row = a.mask ? a.mask + t * a.mask_stride : nullptr;
      n_visible[t - t0] = VisibleKeys(mask_row, c0, c1, visible_all + (t - t0) * kKeyTile);
    }
    for (int64_t g = g0; g < g1; ++g) {
      const size_t k_off = static_cast<size_t>(g) * plan.k_head_bytes;
      const size_t v_off = static_cast<size_t>(g) * plan.v_head_bytes;
      // Quantized V: the tile's rows once for all tokens (rows no token sees
      // are converted too; they are never read).
      bool v_tile_ready = v_f16 || v_f32;
      // The next tile's rows are asked for through this head's pass, by the first token that
      // sees keys: K in the scoring loop, V in the register form's steps (else with K). A unit
      // of every KV head asks for whole rows, an eighth of the tile (with 8 heads) per head, in
      // address order: a row is then read from DRAM once, front to back (one head's slice of
      // every row would open each DRAM page once per head). A unit of one head asks for its
      // slices.
      bool prefetched = false;
      PrefetchCursor k_ahead, v_ahead;
      if (g0 == 0 && g1 == plan.n_head_kv && g1 > 1) {
        const int64_t per_head = (next_end - c1 + (g1 - g0) - 1) / (g1 - g0);
        const int64_t r0 = std::min(c1 + (g - g0) * per_head, next_end);
        const int64_t r1 = std::min(r0 + per_head, next_end);
        k_ahead = PrefetchCursor(a.k_rows + r0, r1 - r0, 0, plan.k_head_bytes * static_cast<size_t>(plan.n_head_kv));
        v_ahead = PrefetchCursor(a.v_rows + r0, r1 - r0, 0, plan.v_head_bytes * static_cast<size_t>(plan.n_head_kv));
      } else {
        k_ahead = PrefetchCursor(a.k_rows + c1, next_end - c1, k_off, plan.k_head_bytes);
        v_ahead = PrefetchCursor(a.v_rows + c1, next_end - c1, v_off, plan.v_head_bytes);
      }
      const bool v_ahead_in_softmax = v_f16 && HasF16RegisterForm(D);
      for (int64_t t = t0; t < t1; ++t) {
        const float* mask_row = a.mask ? a.mask + t * a.mask_stride : nullptr;
        const int64_t* visible = visible_all + (t - t0) * kKeyTile;
        const int64_t n_vis = n_visible[t - t0];
        if (n_vis == 0) continue;
        if (!v_tile_ready) {
          for (int64_t c = c0; c < c1; ++c) {
            dequantize_row(a.v_type, a.v_rows[c] + v_off, v_tile + (c - c0) * D, D);
          }
          v_tile_ready = true;
        }
        for (int64_t j = 0; j < n_vis; ++j) k_rows[j] = a.k_rows[visible[j]] + k_off;
        for (int64_t j = 0; j < n_vis; ++j) v_rows[j] = a.v_rows[visible[j]] + v_off;
        const int64_t row0 = ((g - g0) * T + (t - t0)) * G;
        for (int64_t r = 0; r < G; ++r) {
          const uint8_t* q = q_conv + (row0 + r) * plan.q_head_bytes;
          float* scores = all_scores + r * kKeyTile;
          switch (a.k_type) {
            case GgmlType::F32:
              for (int64_t j = 0; j < n_vis; ++j) {
                const auto* krow = reinterpret_cast<const float*>(k_rows[j]);
                const auto* qf = reinterpret_cast<const float*>(q);
                scores[j] = avx2_order ? GgmlDot<F32Elems, 8>(krow, qf, D) : GgmlDot<F32Elems>(krow, qf, D);
              }
              break;
            case GgmlType::F16: {
              // Query heads in pairs: each key row is widened once for both (row
              // r + 1 was scored with row r).
              if (r % 2 == 1) break;
              const bool pair = r + 1 < G;
              const float* q2[2] = {q_wide + (row0 + r) * D, q_wide + (row0 + r + 1) * D};
              const bool ask = !prefetched && r == 0;
              const int64_t k_per_key = ask ? k_ahead.PerStep(n_vis) : 0;
              const int64_t v_per_key = ask && !v_ahead_in_softmax ? v_ahead.PerStep(n_vis) : 0;
              for (int64_t j = 0; j < n_vis; ++j) {
                k_ahead.Issue(k_per_key);
                v_ahead.Issue(v_per_key);
                const auto* krow = reinterpret_cast<const uint16_t*>(k_rows[j]);
                if (pair) {
                  float* out2[2] = {scores + j, scores + kKeyTile + j};
                  if (avx2_order) {
                    GgmlDotRows<F16Elems, 2, 8>(krow, q2, D, out2);
                  } else {
                    GgmlDotRows<F16Elems, 2>(krow, q2, D, out2);
                  }
                } else {
                  scores[j] = avx2_order ? GgmlDot<F16Elems, 8>(krow, q2[0], D) : GgmlDot<F16Elems>(krow, q2[0], D);
                }
              }
              if (ask) {
                k_ahead.Finish();
                if (!v_ahead_in_softmax) v_ahead.Finish();
              }
              prefetched = true;
              break;
            }
            case GgmlType::BF16:
              DotMany<BF16Elems, BF16Elems>(reinterpret_cast<const uint16_t*>(q), k_rows, n_vis, D, scores);
              break;
            default:
              for (int64_t j = 0; j < n_vis; ++j) scores[j] = vec_dot(a.k_type, D, k_rows[j], q);
              break;
          }
          for (int64_t j = 0; j < n_vis; ++j) {
            scores[j] = std::fma(scores[j], a.shape.scale, mask_row ? mask_row[visible[j]] : 0.0f);
          }
        }
        if (v_f16 &&
            OnlineSoftmaxF16Fast(acc16 + row0 * D, D, all_scores, kKeyTile, v_rows, n_vis, G, M + row0, S + row0,
                                 &v_ahead)) {
          v_ahead.Finish();  // a no-op after the first token
          continue;
        }
        for (int64_t r = 0; r < G; ++r) {
          const int64_t row = row0 + r;
          const float* scores = all_scores + r * kKeyTile;
          // Sequential online softmax, one key at a time, exactly in ggml's
          // order.
          float m = M[row], s_sum = S[row];
          float* row32 = acc32 + row * D;
          uint16_t* row16 = acc16 + row * D;
          for (int64_t j = 0; j < n_vis; ++j) {
            const float s = scores[j];
            float ms = 1.0f, vs = 1.0f;
            if (s > m) {
              const float m_old = m;
              m = s;
              ms = std::exp(m_old - m);
              if (m_old != -INFINITY) {  // before the first key the accumulator
                                         // is all zeros
                if (v_f16) {
                  ScaleF16(row16, ms, D);
                } else {
                  ScaleF32(row32, ms, D);
                }
              }
            } else {
              vs = std::exp(s - m);
            }
            if (v_f16) {
              AxpyF16(row16, reinterpret_cast<const uint16_t*>(v_rows[j]), vs, D);
            } else if (v_f32) {
              AxpyF32(row32, reinterpret_cast<const float*>(v_rows[j]), vs, D);
            } else {
              AxpyF32(row32, v_tile + (visible[j] - c0) * D, vs, D);
            }
            s_sum = std::fma(s_sum, ms, vs);
          }
          M[row] = m;
          S[row] = s_sum;
        }
      }
    }
  }

  for (int64_t g = g0; g < g1; ++g) {
    for (int64_t t = t0; t < t1; ++t) {
      for (int64_t r = 0; r < G; ++r) {
        const int64_t row = ((g - g0) * T + (t - t0)) * G + r;
        float* row32 = acc32 + row * D;
        if (v_f16) {
          for (int64_t i = 0; i < D; ++i) row32[i] = fp16_to_fp32(acc16[row * D + i]);
        }
        EndRow(plan, t, g * G + r, row32, M[row], S[row], chunk);
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------
// The tiled algorithm, vectorised across query rows. A unit is a block of tokens times the query
// heads of one KV head ("rows", row = token * group + head). Q is held transposed (dimension-major,
// rows padded to whole vectors) so that one vector holds one key's scores for many rows: every
// score is still one fused chain over the head dimension, the tile's max, exponentials and
// 16-key partial sums are plain lane-wise operations, and each K and V row of the tile is
// converted once and read from L1 by all rows of the unit.

// ggml_v_expf where hidden keys (-inf) give 0 without taking the scalar fallback (AVX-512 form;
// ExpOrZeroAvx2: the AVX2 build's form).
HWY_INLINE hn::Vec<DF> ExpOrZero(DF d, hn::Vec<DF> x) {
  const auto hidden = hn::Eq(x, hn::Set(d, -INFINITY));
  return hn::IfThenZeroElse(hidden, GgmlExpVec(d, hn::IfThenZeroElse(hidden, x)));
}
HWY_INLINE hn::Vec<DF> ExpOrZeroAvx2(DF d, hn::Vec<DF> x) {
  const auto hidden = hn::Eq(x, hn::Set(d, -INFINITY));
  return hn::IfThenZeroElse(hidden, GgmlExpVecAvx2(d, hn::IfThenZeroElse(hidden, x)));
}

// Scores of 8 keys for kRowVecs row vectors: p[k * nr + r] = (sum_i q_r[i] * key_k[i]) * scale,
// one fused chain per key in dimension order (ggml's simd_gemm).
template <int kRowVecs>
HWY_INLINE void ScoreEightKeys(const float* qt, int64_t nr, const float* const* keys, int64_t D, float scale,
                               float* p) {
  const DF d;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  hn::Vec<DF> acc[kRowVecs][8];
  #pragma GCC unroll 16
  for (int v = 0; v < kRowVecs; ++v)
    #pragma GCC unroll 16
    for (int k = 0; k < 8; ++k) acc[v][k] = hn::Zero(d);
  for (int64_t i = 0; i < D; ++i) {
    hn::Vec<DF> q[kRowVecs];
    #pragma GCC unroll 16
    for (int v = 0; v < kRowVecs; ++v) q[v] = hn::LoadU(d, qt + i * nr + v * N);
    #pragma GCC unroll 16
    for (int k = 0; k < 8; ++k) {
      const auto kv = hn::Set(d, keys[k][i]);
      #pragma GCC unroll 16
      for (int v = 0; v < kRowVecs; ++v) acc[v][k] = hn::MulAdd(q[v], kv, acc[v][k]);
    }
  }
  const auto vscale = hn::Set(d, scale);
  #pragma GCC unroll 16
  for (int v = 0; v < kRowVecs; ++v)
    #pragma GCC unroll 16
    for (int k = 0; k < 8; ++k) hn::StoreU(hn::Mul(acc[v][k], vscale), d, p + k * nr + v * N);
}

// acc_r[i0 .. i0 + kDimVecs*N) += p[j][r] * v_j[...] over keys j in order for kRows rows starting
// at r0, skipping a row's key when its weight is 0 (as ggml's accumulation of visible keys does;
// kSkipZero = false: agentkv's own order, where adding 0 x v changes nothing worth a test per key).
template <int kRows, int kDimVecs, bool kSkipZero = true>
HWY_INLINE void AccumulateValues(float* acc, int64_t D, const float* p, int64_t nr, int64_t r0,
                                 const float* const* values, int64_t n_keys, int64_t i0) {
  const DF d;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  hn::Vec<DF> c[kRows][kDimVecs];
  #pragma GCC unroll 16
  for (int r = 0; r < kRows; ++r)
    #pragma GCC unroll 16
    for (int v = 0; v < kDimVecs; ++v) c[r][v] = hn::LoadU(d, acc + (r0 + r) * D + i0 + v * N);
  for (int64_t j = 0; j < n_keys; ++j) {
    const float* w = p + j * nr + r0;
    int n_nonzero = kRows;
    if constexpr (kSkipZero) {
      n_nonzero = 0;
      #pragma GCC unroll 16
      for (int r = 0; r < kRows; ++r) n_nonzero += w[r] != 0.0f;
      if (n_nonzero == 0) continue;
    }
    hn::Vec<DF> x[kDimVecs];
    #pragma GCC unroll 16
    for (int v = 0; v < kDimVecs; ++v) x[v] = hn::LoadU(d, values[j] + i0 + v * N);
    #pragma GCC unroll 16
    for (int r = 0; r < kRows; ++r) {
      if (kSkipZero && n_nonzero < kRows && w[r] == 0.0f) continue;
      const auto wr = hn::Set(d, w[r]);
      #pragma GCC unroll 16
      for (int v = 0; v < kDimVecs; ++v) c[r][v] = hn::MulAdd(x[v], wr, c[r][v]);
    }
  }
  #pragma GCC unroll 16
  for (int r = 0; r < kRows; ++r)
    #pragma GCC unroll 16
    for (int v = 0; v < kDimVecs; ++v) hn::StoreU(c[r][v], d, acc + (r0 + r) * D + i0 + v * N);
}

// All dimensions of kRows rows starting at r0.
template <int kRows, bool kSkipZero = true>
void AccumulateRows(float* acc, int64_t D, const float* p, int64_t nr, int64_t r0, const float* const* values,
                    int64_t n_keys) {
  const DF d;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  int64_t i = 0;
  for (; i + 4 * N <= D; i += 4 * N) AccumulateValues<kRows, 4, kSkipZero>(acc, D, p, nr, r0, values, n_keys, i);
  for (; i + N <= D; i += N) AccumulateValues<kRows, 1, kSkipZero>(acc, D, p, nr, r0, values, n_keys, i);
  for (; i < D; ++i) {
    #pragma GCC unroll 16
    for (int r = 0; r < kRows; ++r) {
      float* a = acc + (r0 + r) * D + i;
      for (int64_t j = 0; j < n_keys; ++j) {
        const float w = p[j * nr + r0 + r];
        if (w != 0.0f) *a = std::fma(values[j][i], w, *a);
      }
    }
  }
}

// True when rows [0, n_rows) x columns [0, n_cols) of the mask are all +0.0 (bitwise: a -0.0
// would round a -0.0 score differently).
bool MaskBlockIsZero(const float* mask, int64_t stride, int64_t n_rows, int64_t n_cols) {
  const DU32 du;
  const int64_t N = static_cast<int64_t>(hn::Lanes(du));
  for (int64_t r = 0; r < n_rows; ++r) {
    const auto* row = reinterpret_cast<const uint32_t*>(mask + r * stride);
    auto bits = hn::Zero(du);
    int64_t c = 0;
    for (; c + N <= n_cols; c += N) bits = hn::Or(bits, hn::LoadU(du, row + c));
    if (!hn::AllTrue(du, hn::Eq(bits, hn::Zero(du)))) return false;
    for (; c < n_cols; ++c)
      if (row[c] != 0) return false;
  }
  return true;
}

// Converts n elements of an F16 or F32 row to f32.
void RowToF32(const uint8_t* src, bool f16, float* dst, int64_t n) {
  if (!f16) {
    std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
    return;
  }
  const DF d;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  const auto* h = reinterpret_cast<const uint16_t*>(src);
  int64_t i = 0;
  for (; i + N <= n; i += N) hn::StoreU(LoadF16(h + i), d, dst + i);
  for (; i < n; ++i) dst[i] = fp16_to_fp32(h[i]);
}

// A tqc3 row's heads [first_head, first_head + n / head_dim) as doubled levels (XORed with flip)
// and their scale, 0.5, for every level block (kernels/coded_rows.h).
HWY_INLINE void CodedRowLevels(const CodedHeads& code, CodedUnpack how, int64_t first_head, const uint8_t* src,
                               int8_t* levels, float* scales, int64_t n, uint8_t flip) {
  code.levels(how, first_head, n / code.head_dim(), src, levels, flip);
  std::fill(scales, scales + n / attention_detail::LevelBlock(GgmlType::TQC3, code.head_dim()), 0.5f);
}

#if HWY_TARGET != HWY_SCALAR
// tq4 / tq3 rows as dequantize_row gives them (d * level, the same float products), 16 or 32
// codebook indices at a time: a byte shuffle looks the int8 levels up, then they are widened and
// scaled. The tiled kernel converts every K/V row of a tile once per unit; the scalar table walk
// made that a third of a tq prefill.

HWY_INLINE void ScaleLevels(const int8_t* levels, float d, float* dst) {
  const DF df;
  const hn::Rebind<int32_t, DF> di32;
  const hn::Rebind<int8_t, DF> di8;
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  const auto vd = hn::Set(df, d);
  for (int64_t i = 0; i < kQKTQ; i += N) {
    hn::StoreU(hn::Mul(hn::ConvertTo(df, hn::PromoteTo(di32, hn::LoadU(di8, levels + i))), vd), df, dst + i);
  }
}

// A block's fp16 scale as float: the conversion instruction where the target has one (the
// portable bit manipulation was a third of a tq row's unpacking).
HWY_INLINE float ScaleOf(const uint16_t* h) { return hn::GetLane(F16Elems::LoadN<hn::CappedTag<float, 1>>(h)); }

// The int8 codebook levels of n elements of a tq4 row and its per-block scales d: d * level is
// the element (dequantize_row's product). Element j of a block is the low nibble of qs[j], j + 32
// the high nibble.
// `flip`: a byte every level is XORed with (level_scores.h: 0x80 where keys are read unsigned).
void LevelsTQ4(const uint8_t* src, int8_t* levels, float* scales, int64_t n, uint8_t flip = 0) {
  const hn::CappedTag<uint8_t, 32> d8;  // 16 of a block's 32 bytes, or all of them
  const int64_t N = static_cast<int64_t>(hn::Lanes(d8));
  const auto table = hn::Xor(hn::LoadDup128(d8, reinterpret_cast<const uint8_t*>(kTQ4Levels)), hn::Set(d8, flip));
  const auto low = hn::Set(d8, uint8_t{0x0F});
  const auto* blocks = reinterpret_cast<const BlockTQ4*>(src);
  for (int64_t b = 0; b < n / kQKTQ; ++b, levels += kQKTQ) {
    const auto& x = blocks[b];
    for (int64_t j = 0; j < kQKTQ / 2; j += N) {
      const auto q = hn::LoadU(d8, x.qs + j);
      hn::StoreU(hn::TableLookupBytes(table, hn::And(q, low)), d8, reinterpret_cast<uint8_t*>(levels + j));
      hn::StoreU(hn::TableLookupBytes(table, hn::ShiftRight<4>(q)), d8, reinterpret_cast<uint8_t*>(levels + 32 + j));
    }
    scales[b] = ScaleOf(&x.d);
  }
}

// The same for tq3: element 16k + j has its low 2 bits at bits 2k of qs[j] and bit 2 at bit
// 16k + j of qh (little-endian u64). qh's bytes are read as lanes 8..15 of the 16 bytes from
// qs + 8 (inside the block), and each 16-element group's two qh bytes are broadcast by a byte
// shuffle (spelling them out through memory stalled on store forwarding). 256-bit targets unpack
// two groups per register: a tq3 decode step over 16,384 keys took ~10 % less time (one thread).
void LevelsTQ3(const uint8_t* src, int8_t* levels, float* scales, int64_t n, uint8_t flip = 0) {
  using D8x32 = hn::CappedTag<uint8_t, 32>;  // 16 lanes, or 32 where the target has 256-bit vectors
  const D8x32 d8;
  alignas(16) static constexpr uint8_t kTable[16] = {
      static_cast<uint8_t>(kTQ3Levels[0]), static_cast<uint8_t>(kTQ3Levels[1]), static_cast<uint8_t>(kTQ3Levels[2]),
      static_cast<uint8_t>(kTQ3Levels[3]), static_cast<uint8_t>(kTQ3Levels[4]), static_cast<uint8_t>(kTQ3Levels[5]),
      static_cast<uint8_t>(kTQ3Levels[6]), static_cast<uint8_t>(kTQ3Levels[7])};
  alignas(16) static constexpr uint8_t kBit[16] = {1, 2, 4, 8, 16, 32, 64, 128, 1, 2, 4, 8, 16, 32, 64, 128};
  // Byte shuffles stay within a 128-bit half, so the constants and the block's bytes are loaded
  // into both halves where there are two.
  const auto table = hn::Xor(hn::LoadDup128(d8, kTable), hn::Set(d8, flip));
  const auto bit = hn::LoadDup128(d8, kBit);
  const auto two_bits = hn::Set(d8, uint8_t{3});
  const auto four = hn::Set(d8, uint8_t{4});
  const auto* blocks = reinterpret_cast<const BlockTQ3*>(src);
  static_assert(offsetof(BlockTQ3, qh) == offsetof(BlockTQ3, qs) + 16, "qh follows qs");
  if constexpr (hn::MaxLanes(D8x32()) == 32) {
    // Two 16-element groups per vector: the upper half takes qs two bits further on.
    const hn::Repartition<uint16_t, D8x32> d16;
    alignas(32) static constexpr uint8_t kHighPairs[2][32] = {
        {8, 8, 8, 8, 8, 8, 8, 8, 9, 9, 9, 9, 9, 9, 9, 9, 10, 10, 10, 10, 10, 10, 10, 10, 11, 11, 11, 11, 11, 11, 11, 11},
        {12, 12, 12, 12, 12, 12, 12, 12, 13, 13, 13, 13, 13, 13, 13, 13,
         14, 14, 14, 14, 14, 14, 14, 14, 15, 15, 15, 15, 15, 15, 15, 15}};
    for (int64_t b = 0; b < n / kQKTQ; ++b, levels += kQKTQ) {
      const auto& x = blocks[b];
      const auto q = hn::LoadDup128(d8, x.qs);
      const auto qh = hn::LoadDup128(d8, x.qs + 8);  // lanes 8..15 of each half: qh[0..8)
      for (int p = 0; p < 2; ++p) {
        // groups 2p (lower half) and 2p + 1 (upper half): bits 4p and 4p + 2 of each qs byte.
        // The 16-bit shifts pull the next byte's bits into bits 6-7 at most; the mask drops them.
        const auto base = p == 0 ? q : hn::BitCast(d8, hn::ShiftRight<4>(hn::BitCast(d16, q)));
        const auto next = hn::BitCast(d8, hn::ShiftRight<2>(hn::BitCast(d16, base)));
        const auto low2 = hn::And(hn::ConcatUpperLower(d8, next, base), two_bits);
        const auto high = hn::TableLookupBytes(qh, hn::Load(d8, kHighPairs[p]));
        const auto has_high = hn::Ne(hn::And(high, bit), hn::Zero(d8));
        const auto idx = hn::Or(low2, hn::IfThenElseZero(has_high, four));
        hn::StoreU(hn::TableLookupBytes(table, idx), d8, reinterpret_cast<uint8_t*>(levels + 32 * p));
      }
      scales[b] = ScaleOf(&x.d);
    }
  } else {
    alignas(16) static constexpr uint8_t kHighBytes[4][16] = {
        {8, 8, 8, 8, 8, 8, 8, 8, 9, 9, 9, 9, 9, 9, 9, 9},
        {10, 10, 10, 10, 10, 10, 10, 10, 11, 11, 11, 11, 11, 11, 11, 11},
        {12, 12, 12, 12, 12, 12, 12, 12, 13, 13, 13, 13, 13, 13, 13, 13},
        {14, 14, 14, 14, 14, 14, 14, 14, 15, 15, 15, 15, 15, 15, 15, 15}};
    for (int64_t b = 0; b < n / kQKTQ; ++b, levels += kQKTQ) {
      const auto& x = blocks[b];
      auto q = hn::LoadDup128(d8, x.qs);
      const auto qh = hn::LoadDup128(d8, x.qs + 8);  // lanes 8..15: qh[0..8)
      for (int k = 0; k < 4; ++k) {
        const auto high = hn::TableLookupBytes(qh, hn::LoadDup128(d8, kHighBytes[k]));
        const auto has_high = hn::Ne(hn::And(high, bit), hn::Zero(d8));
        const auto idx = hn::Or(hn::And(q, two_bits), hn::IfThenElseZero(has_high, four));
        hn::StoreU(hn::TableLookupBytes(table, idx), d8, reinterpret_cast<uint8_t*>(levels + 16 * k));
        q = hn::ShiftRight<2>(q);
      }
      scales[b] = fp16_to_fp32(x.d);
    }
  }
}

// A tq or q8_0 row's levels (XORed with flip) and scales (q8_0: its int8 values and per-32 scales;
// tqc3: its doubled levels, scale 0.5, heads from first_head on, kernels/coded_rows.h).
HWY_INLINE void RowLevels(GgmlType type, const uint8_t* src, int8_t* levels, float* scales, int64_t n,
                          uint8_t flip = 0, const CodedHeads* code = nullptr, int64_t first_head = 0,
                          CodedUnpack how = CodedUnpack::kPortable) {
  if (type == GgmlType::TQC3) {
    CodedRowLevels(*code, how, first_head, src, levels, scales, n, flip);
  } else if (type == GgmlType::Q8_0) {
    const hn::CappedTag<uint8_t, kQK8_0> d8;
    const int64_t N = static_cast<int64_t>(hn::Lanes(d8));
    const auto* blocks = reinterpret_cast<const BlockQ8_0*>(src);
    for (int64_t b = 0; b < n / kQK8_0; ++b) {
      for (int64_t i = 0; i < kQK8_0; i += N) {
        const auto x = hn::Xor(hn::LoadU(d8, reinterpret_cast<const uint8_t*>(blocks[b].qs) + i), hn::Set(d8, flip));
        hn::StoreU(x, d8, reinterpret_cast<uint8_t*>(levels + b * kQK8_0 + i));
      }
      scales[b] = fp16_to_fp32(blocks[b].d);
    }
  } else if (type == GgmlType::TQ4) {
    LevelsTQ4(src, levels, scales, n, flip);
  } else {
    LevelsTQ3(src, levels, scales, n, flip);
  }
}

// A tq row as dequantize_row gives it (d * level), up to four blocks per unpacking call.
void DequantizeTQ(GgmlType type, const uint8_t* src, float* dst, int64_t n) {
  constexpr int64_t kChunk = 4 * kQKTQ;
  const size_t block_bytes = type == GgmlType::TQ4 ? sizeof(BlockTQ4) : sizeof(BlockTQ3);
  alignas(64) int8_t levels[kChunk];
  float d[kChunk / kQKTQ];
  for (int64_t i = 0; i < n; i += kChunk, src += kChunk / kQKTQ * block_bytes) {
    const int64_t m = std::min(kChunk, n - i);
    if (type == GgmlType::TQ4) {
      LevelsTQ4(src, levels, d, m);
    } else {
      LevelsTQ3(src, levels, d, m);
    }
    for (int64_t b = 0; b < m / kQKTQ; ++b) ScaleLevels(levels + b * kQKTQ, d[b], dst + i + b * kQKTQ);
  }
}
#endif

// One head slice of a K or V row as f32 for the tile loop: F32 rows are read in place, F16 rows
// widened, quantized rows (agentkv's own types: see tiled_kv in attention()) dequantized into `scratch`.
HWY_INLINE const float* TileRow(GgmlType type, const uint8_t* src, float* scratch, int64_t n,
                                const CodedHeads* code = nullptr, int64_t head = 0,
                                CodedUnpack how = CodedUnpack::kPortable) {
  switch (type) {
    case GgmlType::TQC3: code->decode(how, head, src, scratch); break;  // in code units (AttentionArgs)
    case GgmlType::F32: return reinterpret_cast<const float*>(src);
    case GgmlType::F16: RowToF32(src, true, scratch, n); break;
#if HWY_TARGET != HWY_SCALAR
    case GgmlType::TQ4:
    case GgmlType::TQ3: DequantizeTQ(type, src, scratch, n); break;
#endif
    default: dequantize_row(type, src, scratch, n);
  }
  return scratch;
}

// The tiled algorithm for tokens [t0, t1), KV head g (K, V both F16 or both F32, or either one an
// agentkv-private quantized type: see tiled_kv in attention()). Rows are
// head-major, each head's tokens padded to whole vectors (row = head * slots + token), so a row
// vector belongs to one head and its mask values are one row of the transposed mask block.
void TiledUnit(const Plan& plan, int64_t t0, int64_t t1, int64_t g) {
  const AttentionArgs& a = *plan.args;
  const int64_t D = plan.head_dim;
  const int64_t G = plan.group;
  const int64_t T = t1 - t0;
  const DF d;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  const int64_t slots = (T + N - 1) / N * N;  // token slots per head
  const int64_t nr = G * slots;               // rows, a whole number of vectors
  constexpr int kScoreRowVecs = hn::MaxLanes(DF()) >= 16 ? 2 : 1;  // registers: 8 keys x row vectors
  const int64_t row_step = N * kScoreRowVecs;
  const int64_t key_slots = kKeyTile + 8;  // keys padded to whole groups of 8

  Scratch& sc = ThreadScratch();
  float* f = Reserve(sc.f32, static_cast<size_t>(D * nr + nr * D + 4 * nr + kKeyTile * nr + kKeyTile * slots +
                                                 2 * key_slots * D + 8 * nr));
  float* qt = f;                          // D x nr: Q transposed, padded rows zero
  float* acc = qt + D * nr;               // nr x D
  float* M = acc + nr * D;                // nr
  float* S = M + nr;                      // nr
  float* sub = S + nr;                    // nr: value subtracted before the exponential
  float* tmax = sub + nr;                 // nr
  float* P = tmax + nr;                   // kKeyTile x nr: scores, then exponentials
  float* MT = P + kKeyTile * nr;          // kKeyTile x slots: mask of (key, token), transposed
  float* kf = MT + kKeyTile * slots;      // key_slots x D: the tile's keys in f32 (F16 cache)
  float* vf = kf + key_slots * D;         // key_slots x D: the tile's values in f32
  float* gsum = vf + key_slots * D;       // 4 or 8 x nr: the tile's 16- or 8-key partial sums
  const bool avx2_order = plan.ggml_lanes == 8;
  const int64_t n_groups = kKeyTile / plan.ggml_lanes;
  const float** keys = Reserve(sc.key_rows, static_cast<size_t>(key_slots));
  const float** values = Reserve(sc.value_rows, static_cast<size_t>(key_slots));

  // Keys stored as int8 levels (tq4, tq3, q8_0 in agentkv's own order) meet the query in q8_0,
  // their vec_dot_type, in integer sums (level_scores.h): a quarter of the float work per score
  // where the CPU has VNNI. Other keys meet the f32 query (ggml's simd_gemm order).
  const bool level_keys = plan.own_type && LevelType(a.k_type);
  const int64_t k_block = attention_detail::LevelBlock(a.k_type, D);
  const int64_t k_blocks = level_keys ? D / k_block : 0;
  LevelQueries& level_queries = sc.level_queries;
  uint8_t key_flip = 0;
  int8_t* key_levels = nullptr;
  float* key_level_scales = nullptr;
  if (level_keys) {
    const int64_t qb = D / kQK8_0;
    BlockQ8_0* q8 = Reserve(sc.query_q8, static_cast<size_t>(nr * qb));
    std::memset(static_cast<void*>(q8), 0, static_cast<size_t>(nr * qb) * sizeof(BlockQ8_0));  // padding rows: 0
    for (int64_t r = 0; r < G; ++r) {
      for (int64_t t = 0; t < T; ++t) {
        quantize_row(GgmlType::Q8_0, a.q + (t0 + t) * a.q_stride + (g * G + r) * D,
                     reinterpret_cast<uint8_t*>(q8 + (r * slots + t) * qb), D);
      }
    }
    pack_level_queries(q8, nr, D, &level_queries);
    key_flip = level_key_flip(level_queries);
    key_levels = Reserve(sc.key_levels, static_cast<size_t>(kKeyTile * D));
    key_level_scales = Reserve(sc.key_level_scales, static_cast<size_t>(kKeyTile * k_blocks));
    static_assert(kKeyTile % kLevelScoreKeyGroup == 0, "a tile is whole key groups");
  } else {
    std::fill(qt, qt + D * nr, 0.0f);
    for (int64_t r = 0; r < G; ++r) {
      for (int64_t t = 0; t < T; ++t) {
        const float* q = a.q + (t0 + t) * a.q_stride + (g * G + r) * D;
        for (int64_t i = 0; i < D; ++i) qt[i * nr + r * slots + t] = q[i];
      }
    }
  }
  std::fill(acc, acc + nr * D, 0.0f);
  std::fill(M, M + nr, -INFINITY);
  std::fill(S, S + nr, 0.0f);
  std::fill(kf + kKeyTile * D, kf + key_slots * D, 0.0f);  // the padding keys of the last group
  std::fill(MT, MT + kKeyTile * slots, -INFINITY);          // padding tokens stay hidden

  const size_t k_off = static_cast<size_t>(g) * plan.k_head_bytes;
  const size_t v_off = static_cast<size_t>(g) * plan.v_head_bytes;
  const auto neg_inf = hn::Set(d, -INFINITY);

  for (int64_t c0 = 0; c0 < a.n_kv; c0 += kKeyTile) {
    const int64_t nk = std::min(kKeyTile, a.n_kv - c0);
    const int64_t next_end = std::min(c0 + 2 * kKeyTile, a.n_kv);
    // Mask of every (key, token); keys past the end and padding tokens are hidden. A tile every
    // token sees whole (+0.0 mask values: the history before a batch) is written row-wise.
    bool any = false;
    bool zero_mask = !a.mask;
    if (!zero_mask) {
      std::atomic<uint8_t>& known = plan.mask_tile_zero[t0 / plan.tokens_per_unit * plan.mask_tiles + c0 / kKeyTile];
      uint8_t state = known.load(std::memory_order_relaxed);
      if (state == 0) {
        state = MaskBlockIsZero(a.mask + t0 * a.mask_stride + c0, a.mask_stride, T, nk) ? 1 : 2;
        known.store(state, std::memory_order_relaxed);
      }
      zero_mask = state == 1;
    }
    if (zero_mask) {
      for (int64_t j = 0; j < kKeyTile; ++j) std::fill(MT + j * slots, MT + j * slots + T, j < nk ? 0.0f : -INFINITY);
      any = true;
    } else {
      for (int64_t t = 0; t < T; ++t) {
        const float* mrow = a.mask + (t0 + t) * a.mask_stride + c0;
        for (int64_t j = 0; j < nk; ++j) {
          MT[j * slots + t] = mrow[j];
          any |= mrow[j] != -INFINITY;
        }
        for (int64_t j = nk; j < kKeyTile; ++j) MT[j * slots + t] = -INFINITY;
      }
    }
    if (!any) continue;  // no row sees a key of this tile: nothing changes

    for (int64_t j = 0; j < nk; ++j) {
      const uint8_t* kb = a.k_rows[c0 + j] + k_off;
      const uint8_t* vb = a.v_rows[c0 + j] + v_off;
      if (level_keys) {
        if (c0 + nk + j < next_end) {  // the next tile's rows, one per key
          PrefetchRows(a.k_rows, k_off, plan.k_head_bytes, c0 + nk + j, c0 + nk + j + 1);
          PrefetchRows(a.v_rows, v_off, plan.v_head_bytes, c0 + nk + j, c0 + nk + j + 1);
        }
#if HWY_TARGET != HWY_SCALAR
        RowLevels(a.k_type, kb, key_levels + j * D, key_level_scales + j * k_blocks, D, key_flip, a.k_code, g, plan.coded_unpack);
#else
        if (a.k_type == GgmlType::TQC3) {
          CodedRowLevels(*a.k_code, plan.coded_unpack, g, kb, key_levels + j * D, key_level_scales + j * k_blocks, D, key_flip);
        } else {
          unpack_levels(a.k_type, kb, key_levels + j * D, key_level_scales + j * k_blocks, D);
          for (int64_t i = 0; i < D; ++i) key_levels[j * D + i] = static_cast<int8_t>(key_levels[j * D + i] ^ key_flip);
        }
#endif
      } else {
        keys[j] = TileRow(a.k_type, kb, kf + j * D, D, a.k_code, g, plan.coded_unpack);
      }
      values[j] = TileRow(a.v_type, vb, vf + j * D, D, a.v_code, g, plan.coded_unpack);
    }
    if (!level_keys)
      for (int64_t j = nk; j < key_slots; ++j) keys[j] = kf + kKeyTile * D;  // zeros

    // Scores (whole groups of 8 keys; the padding keys are hidden by the mask).
    if (level_keys) {
      // whole key groups: the padding keys (level 0, scale 0) are hidden by the mask
      const int64_t n_scored = (nk + kLevelScoreKeyGroup - 1) / kLevelScoreKeyGroup * kLevelScoreKeyGroup;
      std::fill(key_levels + nk * D, key_levels + n_scored * D, static_cast<int8_t>(key_flip));
      std::fill(key_level_scales + nk * k_blocks, key_level_scales + n_scored * k_blocks, 0.0f);
      level_scores(level_queries, reinterpret_cast<const uint8_t*>(key_levels), key_level_scales, k_block, n_scored,
                   a.shape.scale, P);
    }
    for (int64_t j = 0; j < nk && !level_keys; j += 8) {
      // the next tile's rows, a few at a time (a burst would stall on the line fill buffers)
      const int64_t p0 = std::min(c0 + nk + j, next_end), p1 = std::min(p0 + 8, next_end);
      PrefetchRows(a.k_rows, k_off, plan.k_head_bytes, p0, p1);
      PrefetchRows(a.v_rows, v_off, plan.v_head_bytes, p0, p1);
      int64_t r = 0;
      for (; r + row_step <= nr; r += row_step) {
        ScoreEightKeys<kScoreRowVecs>(qt + r, nr, keys + j, D, a.shape.scale, P + j * nr + r);
      }
      for (; r < nr; r += N) ScoreEightKeys<1>(qt + r, nr, keys + j, D, a.shape.scale, P + j * nr + r);
    }
    // Mask, tile max (as ggml: max over the tile's 64 scores in key order).
    for (int64_t r = 0; r < nr; r += N) {
      const float* mt = MT + r % slots;
      auto tm = neg_inf;
      for (int64_t j = 0; j < kKeyTile; ++j) {
        const auto m = hn::LoadU(d, mt + j * slots);
        const auto s = j < nk ? hn::Add(hn::LoadU(d, P + j * nr + r), m) : neg_inf;
        const auto seen_s = hn::IfThenElse(hn::Eq(m, neg_inf), neg_inf, s);
        hn::StoreU(seen_s, d, P + j * nr + r);
        tm = hn::Max(seen_s, tm);
      }
      hn::StoreU(tm, d, tmax + r);
    }
    // Running max and sum per row; rows that see nothing here (padding rows too) stay as they are.
    for (int64_t row = 0; row < nr; ++row) {
      if (tmax[row] == -INFINITY) {
        sub[row] = INFINITY;  // every exponential of the row becomes 0
        continue;
      }
      const float m_new = std::max(M[row], tmax[row]);
      if (m_new > M[row]) {
        const float ms = std::exp(M[row] - m_new);
        ScaleF32(acc + row * D, ms, D);
        S[row] *= ms;
      }
      M[row] = m_new;
      sub[row] = m_new;
    }
    // ggml_vec_soft_max_f32: expf(s - max), summed per vector group of keys (AVX-512 build: 16,
    // _mm512_reduce_add_ps order; AVX2 build: 8, halves then (0 + 2) + (1 + 3)), in that build's
    // expf form. Noted on the way: whether a real row (token < T) gives one of the tile's keys
    // weight 0 (hidden, or underflowed), which ggml's accumulation skips.
    bool zero_weight = false;
    for (int64_t r = 0; r < nr; r += N) {
      const auto vsub = hn::LoadU(d, sub + r);
      const auto real = hn::FirstN(d, static_cast<size_t>(std::clamp<int64_t>(T - r % slots, 0, N)));
      auto zero_seen = hn::FirstN(d, 0);
      for (int64_t j = 0; j < kKeyTile; ++j) {
        float* pj = P + j * nr + r;
        const auto x = hn::Sub(hn::LoadU(d, pj), vsub);
        const auto e = avx2_order ? ExpOrZeroAvx2(d, x) : ExpOrZero(d, x);
        hn::StoreU(e, d, pj);
        if (j < nk) zero_seen = hn::Or(zero_seen, hn::Eq(e, hn::Zero(d)));
      }
      zero_weight |= !hn::AllFalse(d, hn::And(real, zero_seen));
      if (!avx2_order) {
        for (int64_t grp = 0; grp < kKeyTile / 16; ++grp) {
          const float* e = P + grp * 16 * nr + r;
          hn::Vec<DF> h8[8], h4[4];
#pragma GCC unroll 8
          for (int l = 0; l < 8; ++l) h8[l] = hn::Add(hn::LoadU(d, e + (l + 8) * nr), hn::LoadU(d, e + l * nr));
#pragma GCC unroll 4
          for (int l = 0; l < 4; ++l) h4[l] = hn::Add(h8[l + 4], h8[l]);
          hn::StoreU(hn::Add(hn::Add(h4[0], h4[2]), hn::Add(h4[1], h4[3])), d, gsum + grp * nr + r);
        }
      } else {
        for (int64_t grp = 0; grp < kKeyTile / 8; ++grp) {
          const float* e = P + grp * 8 * nr + r;
          hn::Vec<DF> h4[4];
#pragma GCC unroll 4
          for (int l = 0; l < 4; ++l) h4[l] = hn::Add(hn::LoadU(d, e + (l + 4) * nr), hn::LoadU(d, e + l * nr));
          hn::StoreU(hn::Add(hn::Add(h4[0], h4[2]), hn::Add(h4[1], h4[3])), d, gsum + grp * nr + r);
        }
      }
    }
    for (int64_t row = 0; row < nr; ++row) {
      if (tmax[row] == -INFINITY) continue;
      double tile_sum = 0.0;
      for (int64_t grp = 0; grp < n_groups; ++grp) tile_sum += gsum[grp * nr + row];
      S[row] = static_cast<float>(static_cast<double>(S[row]) + tile_sum);
    }
    // VKQ += exp * V over the tile's keys in order (the real rows of each head).
    constexpr int kValueRows = hn::MaxLanes(DF()) >= 16 ? 4 : 2;
    for (int64_t r = 0; r < G; ++r) {
      const int64_t row_end = r * slots + T;
      int64_t row = r * slots;
      // Without a zero weight ggml's skip never fires: the per-key test is dropped, same bits
      // (AVX2 prefill 128 @ d2048, 1 thread: 40 -> 36 ms).
      if (plan.own_type || !zero_weight) {
        for (; row + kValueRows <= row_end; row += kValueRows)
          AccumulateRows<kValueRows, false>(acc, D, P, nr, row, values, nk);
      } else {
        for (; row + kValueRows <= row_end; row += kValueRows) AccumulateRows<kValueRows>(acc, D, P, nr, row, values, nk);
      }
      for (; row < row_end; ++row) AccumulateRows<1>(acc, D, P, nr, row, values, nk);
    }
  }

  for (int64_t r = 0; r < G; ++r) {
    for (int64_t t = 0; t < T; ++t) {
      const int64_t row = r * slots + t;
      FinishRow(a, t0 + t, g * G + r, acc + row * D, M[row], S[row]);
    }
  }
}

#if HWY_TARGET != HWY_SCALAR
// Scores of kRows query rows against one K row given as int8 levels and per-block scales (tq
// blocks of 64, q8_0 blocks of 32). The queries are q8_0 (vec_dot_type of these types, as in the
// per-key dot products): their int8 values widened to int16 (q16) and their per-32 scales (dq).
// Each 32 elements' integer sum is exact (pairwise int16 products, vpmaddwd on x86), then
// scaled by d_key * d_query: sum over q8_0 blocks b of d_k(b) * d_q(b) * (q_b . levels_b).
template <int kRows, int kBlock>
HWY_INLINE void ScoreLevels(const int16_t* const* q16, const float* const* dq, const int8_t* lv, const float* scales,
                            int64_t D, float* out) {
  const hn::CappedTag<int16_t, 16> d16;
  const hn::Rebind<int8_t, decltype(d16)> d8;
  const hn::Repartition<int32_t, decltype(d16)> d32;
  const hn::Rebind<float, decltype(d32)> df;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d16));
  hn::Vec<decltype(df)> total[kRows];
  for (int r = 0; r < kRows; ++r) total[r] = hn::Zero(df);
  for (int64_t b = 0; b < D; b += kQK8_0) {
    hn::Vec<decltype(d32)> s0[kRows], s1[kRows];
    for (int r = 0; r < kRows; ++r) s0[r] = s1[r] = hn::Zero(d32);
    for (int64_t i = b; i < b + kQK8_0; i += N) {
      const auto x = hn::PromoteTo(d16, hn::LoadU(d8, lv + i));
      for (int r = 0; r < kRows; ++r) s0[r] = hn::ReorderWidenMulAccumulate(d32, x, hn::LoadU(d16, q16[r] + i), s0[r], s1[r]);
    }
    const float dk = scales[b / kBlock];  // a constant divisor (a run-time one was an idiv per block)
    for (int r = 0; r < kRows; ++r) {
      const auto isum = hn::RearrangeToOddPlusEven(s0[r], s1[r]);
      total[r] = hn::MulAdd(hn::ConvertTo(df, isum), hn::Set(df, dk * dq[r][b / kQK8_0]), total[r]);
    }
  }
  for (int r = 0; r < kRows; ++r) out[r] = hn::GetLane(hn::SumOfLanes(df, total[r]));
}

// acc_r += sum over keys j of (p[(r0 + r) * p_stride + j] * d_{j,b}) * levels_j for kRows rows:
// the key's weight times its V block scale (scales[j * scale_stride + b]), one float product per
// key and block, then the V rows of a tile as int8 levels (lv: n_keys rows of D, lv_stride apart,
// blocks of `block` levels: 64 for tq, 32 for q8_0), widened as they are read. kVecs * N must
// divide the block.
template <int kRows, int kVecs>
void AccumulateLevels(float* acc, int64_t D, const float* p, int64_t p_stride, const float* scales,
                      int64_t scale_stride, int64_t r0, const int8_t* lv, int64_t lv_stride, int64_t n_keys,
                      int64_t block) {
  const DF d;
  const hn::Rebind<int32_t, DF> di32;
  const hn::Rebind<int8_t, DF> di8;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  for (int64_t i0 = 0; i0 < D; i0 += kVecs * N) {
    const int64_t b = i0 / block;
    // the accumulators stay in registers only when these loops are unrolled (GCC kept them in
    // memory otherwise: a load and a store per multiply-add)
    hn::Vec<DF> c[kRows][kVecs];
#pragma GCC unroll 4
    for (int r = 0; r < kRows; ++r)
#pragma GCC unroll 4
      for (int v = 0; v < kVecs; ++v) c[r][v] = hn::LoadU(d, acc + (r0 + r) * D + i0 + v * N);
    for (int64_t j = 0; j < n_keys; ++j) {
      const float scale = scales[j * scale_stride + b];
      hn::Vec<DF> x[kVecs];
#pragma GCC unroll 4
      for (int v = 0; v < kVecs; ++v) x[v] = hn::ConvertTo(d, hn::PromoteTo(di32, hn::LoadU(di8, lv + j * lv_stride + i0 + v * N)));
#pragma GCC unroll 4
      for (int r = 0; r < kRows; ++r) {
        const auto wr = hn::Set(d, p[(r0 + r) * p_stride + j] * scale);
#pragma GCC unroll 4
        for (int v = 0; v < kVecs; ++v) c[r][v] = hn::MulAdd(x[v], wr, c[r][v]);
      }
    }
#pragma GCC unroll 4
    for (int r = 0; r < kRows; ++r)
#pragma GCC unroll 4
      for (int v = 0; v < kVecs; ++v) hn::StoreU(c[r][v], d, acc + (r0 + r) * D + i0 + v * N);
  }
}
#endif

// One token over a cache with one of agentkv's own types (Mode::kOwnDecode): every query head over
// keys [k0, k1), tile by tile. Rows read as levels are unpacked whole, key by key (all KV heads'
// slices in one front-to-back read); rows read as f32 are dequantized one KV head's slice at a
// time. Either way each slice serves all of its group's query heads. Vectors run across the head
// dimension (the tiled algorithm pads one token to a whole vector of rows; the per-key one
// converts the query to q8_0 and makes a call per key and a scalar exponential per score). Keys
// read as levels (tq4, tq3, q8_0) meet a q8_0 query, their vec_dot_type, in integer sums
// (ScoreLevels); other keys meet the f32 query. Writes final rows, or a partial (M, S, VKQ)
// record per head when chunk >= 0.
void OwnTypeDecodeUnit(const Plan& plan, int64_t k0, int64_t k1, int64_t chunk) {
  const AttentionArgs& a = *plan.args;
  const int64_t D = plan.head_dim;
  const int64_t G = plan.group;
  const int64_t HK = plan.n_head_kv;
  const int64_t H = HK * G;
  const DF d;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  const int64_t tile = (kKeyTile + N - 1) / N * N;  // a row of scores, whole vectors

  Scratch& sc = ThreadScratch();
  const int64_t n_blocks = std::max<int64_t>(1, D / kQK8_0);  // V blocks at most (q8_0's 32 are the smallest)
  float* f = Reserve(sc.f32, static_cast<size_t>(H * D + 2 * kKeyTile * D + H * tile + kKeyTile * G + 2 * H));
  float* acc = f;                  // H x D
  float* kf = acc + H * D;         // kKeyTile x D: one head's keys of the tile, dequantized
  float* vf = kf + kKeyTile * D;   // kKeyTile x D: its values
  float* P = vf + kKeyTile * D;    // H x tile: scores, then exponentials (head h at h * tile)
  float* PT = P + H * tile;        // kKeyTile x G: the exponentials key-major, for AccumulateRows
  float* M = PT + kKeyTile * G;    // H
  float* S = M + H;                // H
  const float** keys = Reserve(sc.key_rows, static_cast<size_t>(kKeyTile));
  const float** values = Reserve(sc.value_rows, static_cast<size_t>(kKeyTile));
  std::fill(acc, acc + H * D, 0.0f);
  std::fill(M, M + H, -INFINITY);
  std::fill(S, S + H, 0.0f);
  const size_t k_row_bytes = static_cast<size_t>(HK) * plan.k_head_bytes;
  // tq rows are read as int8 levels and block scales (no f32 copy); other types as f32 rows.
#if HWY_TARGET != HWY_SCALAR
  const bool k_levels = LevelType(a.k_type);
  const bool v_levels = LevelType(a.v_type);
#else
  constexpr bool k_levels = false, v_levels = false;
#endif
  [[maybe_unused]] const int64_t v_block = attention_detail::LevelBlock(a.v_type, D);
  [[maybe_unused]] const int64_t nb = D / v_block;  // V blocks
  [[maybe_unused]] const int64_t k_block = attention_detail::LevelBlock(a.k_type, D);
  [[maybe_unused]] const int64_t k_nb = D / k_block;
  // V levels of the tile's whole rows (every KV head): key j's head g at (j * HK + g) * D, its
  // scales at (j * HK + g) * blocks. K levels: one row at a time (scored as soon as unpacked, so
  // they are read back from L1; a tile of them was 64 KiB).
  [[maybe_unused]] int8_t* lv = reinterpret_cast<int8_t*>(Reserve(sc.bytes, static_cast<size_t>((kKeyTile + 1) * HK * D)));
  [[maybe_unused]] int8_t* lk = lv + kKeyTile * HK * D;
  [[maybe_unused]] float* sv = Reserve(sc.level_scales, static_cast<size_t>((kKeyTile + 1) * HK * n_blocks));
  [[maybe_unused]] float* sk = sv + kKeyTile * HK * n_blocks;
  const size_t v_row_bytes = static_cast<size_t>(HK) * plan.v_head_bytes;
  // Keys read as levels take the query in their vec_dot_type, q8_0 (plan.query_*, prepared once
  // per call): its int8 values and scales. The scalar build reads those keys as f32 rows and takes
  // the query rounded to q8_0's values instead (the same products).
  const float* qf = LevelType(a.k_type) && !k_levels ? plan.query_rounded : a.q;
  [[maybe_unused]] const int16_t* q16 = plan.query_q16;
  [[maybe_unused]] const float* dq = plan.query_scales;

  for (int64_t c0 = k0; c0 < k1; c0 += kKeyTile) {
    const int64_t nk = std::min(kKeyTile, k1 - c0);
    const int64_t next_end = std::min(c0 + nk + kKeyTile, k1);
#if HWY_TARGET != HWY_SCALAR
    // Rows read as levels are unpacked whole, key by key (each row read front to back once,
    // the next tile's row asked for meanwhile); a pass per KV head would read every row in
    // strided slices, which left the loads waiting on DRAM.
    if (k_levels || v_levels) {
      for (int64_t j = 0; j < nk; ++j) {
        if (c0 + nk + j < next_end) {
          if (k_levels) PrefetchRows(a.k_rows, 0, k_row_bytes, c0 + nk + j, c0 + nk + j + 1);
          if (v_levels) PrefetchRows(a.v_rows, 0, v_row_bytes, c0 + nk + j, c0 + nk + j + 1);
        }
        if (v_levels) RowLevels(a.v_type, a.v_rows[c0 + j], lv + j * HK * D, sv + j * HK * nb, HK * D, 0, a.v_code, 0, plan.coded_unpack);
        if (!k_levels) continue;
        if (a.mask && a.mask[c0 + j] == -INFINITY) {
          for (int64_t h = 0; h < H; ++h) P[h * tile + j] = -INFINITY;
          continue;
        }
        RowLevels(a.k_type, a.k_rows[c0 + j], lk, sk, HK * D, 0, a.k_code, 0, plan.coded_unpack);
        // Scores of every query head, two at a time (each level widened once for both).
        for (int64_t h = 0; h < H; h += 2) {
          const int64_t g = h / G, h1 = std::min(h + 1, g * G + G - 1);
          const int16_t* qs[2] = {q16 + h * D, q16 + h1 * D};
          const float* ds[2] = {dq + h * (D / kQK8_0), dq + h1 * (D / kQK8_0)};
          const int8_t* key = lk + g * D;
          const float* key_scales = sk + g * k_nb;
          float two[2];
          if (h1 == h) {  // an odd group's last head
            if (k_block == kQK8_0) ScoreLevels<1, kQK8_0>(qs, ds, key, key_scales, D, two);
            else ScoreLevels<1, kQKTQ>(qs, ds, key, key_scales, D, two);
            P[h * tile + j] = two[0];
            h -= 1;  // the next pair starts at the next group's first head
            continue;
          }
          if (k_block == kQK8_0) ScoreLevels<2, kQK8_0>(qs, ds, key, key_scales, D, two);
          else ScoreLevels<2, kQKTQ>(qs, ds, key, key_scales, D, two);
          P[h * tile + j] = two[0];
          P[h1 * tile + j] = two[1];
        }
      }
    }
#endif
    for (int64_t g = 0; g < HK; ++g) {
      const size_t k_off = static_cast<size_t>(g) * plan.k_head_bytes;
      const size_t v_off = static_cast<size_t>(g) * plan.v_head_bytes;
      if (!k_levels || !v_levels) {
        // the next tile's rows, spread over the heads (a burst would stall on the line fill buffers)
        const int64_t p0 = std::min(c0 + nk + g * nk / HK, next_end), p1 = std::min(c0 + nk + (g + 1) * nk / HK, next_end);
        if (!k_levels) PrefetchRows(a.k_rows, 0, k_row_bytes, p0, p1);
        if (!v_levels) PrefetchRows(a.v_rows, 0, v_row_bytes, p0, p1);
      }
      for (int64_t j = 0; j < nk; ++j) {
        if (!k_levels) keys[j] = TileRow(a.k_type, a.k_rows[c0 + j] + k_off, kf + j * D, D, a.k_code, g, plan.coded_unpack);
        if (!v_levels) values[j] = TileRow(a.v_type, a.v_rows[c0 + j] + v_off, vf + j * D, D, a.v_code, g, plan.coded_unpack);
      }
      // Scores of the group's heads (keys read as levels were scored above, key by key).
      for (int64_t r = 0; r < G && !k_levels; ++r) {
        float* pr = P + (g * G + r) * tile;
        for (int64_t j = 0; j < nk; ++j) {
          pr[j] = a.mask && a.mask[c0 + j] == -INFINITY ? -INFINITY : GgmlDot<F32Elems>(keys[j], qf + (g * G + r) * D, D);
        }
      }
      for (int64_t r = 0; r < G; ++r) {
        const int64_t h = g * G + r;
        float* pr = P + h * tile;
        float tmax = -INFINITY;
        int64_t j = 0;
#if HWY_NATIVE_FMA
        // score * scale + mask, fused as std::fma below, a vector at a time (hidden keys stay -inf)
        const auto vscale = hn::Set(d, a.shape.scale);
        const auto hidden = hn::Set(d, -INFINITY);
        auto vmax = hidden;
        for (; j + N <= nk; j += N) {
          const auto p = hn::LoadU(d, pr + j);
          const auto m = a.mask ? hn::LoadU(d, a.mask + c0 + j) : hn::Zero(d);
          const auto scaled = hn::IfThenElse(hn::Eq(p, hidden), p, hn::MulAdd(p, vscale, m));
          hn::StoreU(scaled, d, pr + j);
          vmax = hn::Max(vmax, scaled);
        }
        tmax = hn::GetLane(hn::MaxOfLanes(d, vmax));
#endif
        for (; j < nk; ++j) {
          if (pr[j] != -INFINITY) pr[j] = std::fma(pr[j], a.shape.scale, a.mask ? a.mask[c0 + j] : 0.0f);
          tmax = std::max(tmax, pr[j]);
        }
        std::fill(pr + nk, pr + tile, -INFINITY);
        if (tmax == -INFINITY) {  // the row sees no key of this tile
          std::fill(pr, pr + tile, 0.0f);
        } else {
          const float m_new = std::max(M[h], tmax);
          if (m_new > M[h] && M[h] != -INFINITY) {
            const float ms = std::exp(M[h] - m_new);
            ScaleF32(acc + h * D, ms, D);
            S[h] *= ms;
          }
          M[h] = m_new;
          const auto vm = hn::Set(d, m_new);
          auto sum = hn::Zero(d);
          for (int64_t j = 0; j < tile; j += N) {
            const auto e = ExpOrZero(d, hn::Sub(hn::LoadU(d, pr + j), vm));
            hn::StoreU(e, d, pr + j);
            sum = hn::Add(sum, e);
          }
          S[h] += hn::GetLane(hn::SumOfLanes(d, sum));
        }
        if (!v_levels)
          for (int64_t j = 0; j < nk; ++j) PT[j * G + r] = pr[j];
      }
      float* acc_g = acc + g * G * D;
      int64_t r = 0;
#if HWY_TARGET != HWY_SCALAR
      if (v_levels) {
        // the exponentials (head-major in P) times the V block scales, as they are used
        const float* p_group = P + g * G * tile;
        const float* scales = sv + g * nb;
        const int64_t scale_stride = HK * nb;
        // vectors per step: as many as divide the block (4 x 16 lanes exceed a q8_0 block)
        if (v_block % (4 * N) == 0) {
          for (; r + 2 <= G; r += 2)
            AccumulateLevels<2, 4>(acc_g, D, p_group, tile, scales, scale_stride, r, lv + g * D, HK * D, nk, v_block);
          for (; r < G; ++r)
            AccumulateLevels<1, 4>(acc_g, D, p_group, tile, scales, scale_stride, r, lv + g * D, HK * D, nk, v_block);
        } else {
          for (; r + 2 <= G; r += 2)
            AccumulateLevels<2, 2>(acc_g, D, p_group, tile, scales, scale_stride, r, lv + g * D, HK * D, nk, v_block);
          for (; r < G; ++r)
            AccumulateLevels<1, 2>(acc_g, D, p_group, tile, scales, scale_stride, r, lv + g * D, HK * D, nk, v_block);
        }
      }
#endif
      for (; r + 2 <= G; r += 2) AccumulateRows<2>(acc_g, D, PT, G, r, values, nk);
      for (; r < G; ++r) AccumulateRows<1>(acc_g, D, PT, G, r, values, nk);
    }
  }

  for (int64_t h = 0; h < H; ++h) EndRow(plan, 0, h, acc + h * D, M[h], S[h], chunk);
}

// Worker loop: takes units from the shared counter until none is left.
void RunUnits(const Plan& plan, std::atomic<int64_t>* next) {
  const AttentionArgs& a = *plan.args;
  for (;;) {
    const int64_t u = next->fetch_add(1, std::memory_order_relaxed);
    if (u >= plan.n_units) return;
    switch (plan.mode) {
      case Mode::kPerKey: {
        // (token block, KV head) units, KV head by KV head; the last (causally longest) token
        // blocks first, for an even finish
        const int64_t n_blocks = plan.n_units / plan.n_head_kv;
        const int64_t block = n_blocks - 1 - u % n_blocks;
        const int64_t t0 = block * plan.tokens_per_unit;
        const int64_t g = u / n_blocks;
        PerKeyUnit(plan, t0, std::min(t0 + plan.tokens_per_unit, a.n_tokens), g, g + 1, 0, a.n_kv, -1);
        break;
      }
      case Mode::kTiled: {
        // KV head by KV head, so consecutive units read the same K/V rows from cache; the last
        // (causally longest) token blocks first, for an even finish
        const int64_t n_blocks = plan.n_units / plan.n_head_kv;
        const int64_t block = n_blocks - 1 - u % n_blocks;
        const int64_t t0 = block * plan.tokens_per_unit;
        const int64_t t1 = std::min(t0 + plan.tokens_per_unit, a.n_tokens);
        TiledUnit(plan, t0, t1, u / n_blocks);
        break;
      }
      case Mode::kSplitKeys: {
        // A unit is a key chunk of every KV head: the chunk's K/V rows are read front to back
        // once (per-head units read each row in strided pieces, a pattern DRAM serves slowly).
        const int64_t chunk = u;
        const int64_t k0 = chunk * plan.chunk_size;
        const int64_t k1 = std::min(k0 + plan.chunk_size, a.n_kv);
        PerKeyUnit(plan, 0, 1, 0, plan.n_head_kv, k0, std::max(k0, k1), chunk);
        break;
      }
      case Mode::kOwnDecode: {
        // A unit is a key chunk of every KV head (rows read front to back once, as split keys').
        const int64_t chunk = u;
        const int64_t k0 = chunk * plan.chunk_size;
        const int64_t k1 = std::min(k0 + plan.chunk_size, a.n_kv);
        OwnTypeDecodeUnit(plan, k0, std::max(k0, k1), plan.n_chunks > 1 ? chunk : -1);
        break;
      }
    }
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace agentkv
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace agentkv {
namespace {
using namespace attention_detail;

bool supported_kv_type(GgmlType t) {
  switch (t) {
    case GgmlType::F32:
    case GgmlType::F16:
    case GgmlType::BF16:
    case GgmlType::Q8_0:
    case GgmlType::Q4_0:
    case GgmlType::Q4_1:
    case GgmlType::Q5_0:
    case GgmlType::Q5_1:
    case GgmlType::IQ4_NL:
    case GgmlType::TQ4:
    case GgmlType::TQ3:
    case GgmlType::TQC3: return true;
    default: return false;
  }
}

[[noreturn]] void refuse(const std::string& what) { throw Error("attention: " + what); }

void validate(const AttentionArgs& a) {
  const auto& s = a.shape;
  if (s.n_head <= 0 || s.n_head_kv <= 0 || s.head_dim <= 0) {
    refuse("n_head, n_head_kv and head_dim must be positive (got " + std::to_string(s.n_head) + ", " +
           std::to_string(s.n_head_kv) + ", " + std::to_string(s.head_dim) + ")");
  }
  if (s.n_head % s.n_head_kv != 0) {
    refuse("n_head " + std::to_string(s.n_head) + " is not a multiple of n_head_kv " +
           std::to_string(s.n_head_kv));
  }
  if (a.n_tokens < 0 || a.n_kv < 0) refuse("negative n_tokens or n_kv");
  for (GgmlType t : {a.k_type, a.v_type}) {
    if (!supported_kv_type(t)) refuse("KV type " + std::string(ggml_type_name(t)) + " is not supported");
    const int64_t block = ggml_type_info(t).block_size;
    if (s.head_dim % block != 0) {
      refuse("head_dim " + std::to_string(s.head_dim) + " is not a multiple of the " +
             std::string(ggml_type_name(t)) + " block size " + std::to_string(block));
    }
  }
  for (const auto& [t, code] : {std::pair{a.k_type, a.k_code}, std::pair{a.v_type, a.v_code}})
    if (t == GgmlType::TQC3 && (!code || code->n_heads() != s.n_head_kv || code->head_dim() != s.head_dim))
      refuse("tqc3 rows need their code's widths for " + std::to_string(s.n_head_kv) + " heads of " + std::to_string(s.head_dim));
  const int64_t q_width = static_cast<int64_t>(s.n_head) * s.head_dim;
  if (a.n_tokens > 0) {
    if (!a.q || !a.out) refuse("q and out must be set");
    if (a.q_stride < q_width || a.out_stride < q_width) refuse("q/out row stride is smaller than n_head * head_dim");
    if (a.n_kv > 0 && (!a.k_rows || !a.v_rows)) refuse("k_rows and v_rows must be set when n_kv > 0");
    if (a.mask && a.mask_stride < a.n_kv) refuse("mask row stride is smaller than n_kv");
    if (a.n_kv > 0 && (std::find(a.k_rows, a.k_rows + a.n_kv, nullptr) != a.k_rows + a.n_kv ||
                       std::find(a.v_rows, a.v_rows + a.n_kv, nullptr) != a.v_rows + a.n_kv))
      refuse("a K or V row pointer is null");
  }
}

}  // namespace

HWY_EXPORT(RunUnits);

// Plan::query_* for own-type decoding over keys read as levels: the query quantized to q8_0 once
// per call (not once per key chunk), in the forms both builds read. Buffers of the calling thread.
static void prepare_level_query(const AttentionArgs& args, Plan& plan) {
  struct Buffers {
    std::vector<BlockQ8_0> q8;
    std::vector<int16_t> q16;
    std::vector<float> scales, rounded;
  };
  static thread_local Buffers buf;
  const int64_t D = plan.head_dim, H = args.shape.n_head, qb = D / kQK8_0;
  buf.q8.resize(static_cast<size_t>(H * qb));
  buf.q16.resize(static_cast<size_t>(H * D));
  buf.scales.resize(static_cast<size_t>(H * qb));
  buf.rounded.resize(static_cast<size_t>(H * D));
  auto* q8 = reinterpret_cast<uint8_t*>(buf.q8.data());
  for (int64_t h = 0; h < H; ++h) quantize_row(GgmlType::Q8_0, args.q + h * D, q8 + h * qb * sizeof(BlockQ8_0), D);
  for (int64_t b = 0; b < H * qb; ++b) {
    const BlockQ8_0& block = buf.q8[static_cast<size_t>(b)];
    buf.scales[static_cast<size_t>(b)] = fp16_to_fp32(block.d);
    for (int64_t i = 0; i < kQK8_0; ++i) buf.q16[static_cast<size_t>(b * kQK8_0 + i)] = block.qs[i];
  }
  dequantize_row(GgmlType::Q8_0, q8, buf.rounded.data(), H * D);
  plan.query_q16 = buf.q16.data();
  plan.query_scales = buf.scales.data();
  plan.query_rounded = buf.rounded.data();
}

void attention(const AttentionArgs& args, ThreadPool& pool) {
  validate(args);
  if (args.n_tokens == 0) return;

  Plan plan;
  plan.args = &args;
  plan.ggml_lanes = ggml_build_lanes();
  plan.head_dim = args.shape.head_dim;
  plan.n_head_kv = args.shape.n_head_kv;
  plan.group = args.shape.n_head / args.shape.n_head_kv;
  plan.k_head_bytes = ggml_row_size(args.k_type, plan.head_dim);
  plan.coded_unpack = CodedHeads::active_unpack();
  plan.v_head_bytes = ggml_row_size(args.v_type, plan.head_dim);
  plan.q_type = vec_dot_type(args.k_type);
  plan.q_head_bytes = ggml_row_size(plan.q_type, plan.head_dim);

  // llama.cpp tiles only caches whose K and V are both F16 or both F32 (its order is followed for
  // every type it has); a cache with one of agentkv's own types has no llama.cpp order to follow
  // and is tiled too, its rows dequantized once per tile (issue 16: prefill no slower than F16).
  const bool own_type = ggml_type_info(args.k_type).agentkv_only || ggml_type_info(args.v_type).agentkv_only ||
                        args.own_order;
  plan.own_type = own_type;
  const bool tiled_kv = (args.k_type == args.v_type &&
                              (args.k_type == GgmlType::F16 || args.k_type == GgmlType::F32)) || own_type;
  std::vector<float> partials;
  std::vector<std::atomic<uint8_t>> mask_tile_zero;  // Plan::mask_tile_zero (value-initialized: 0)
  // Chunked modes: one (M = -inf, S = 0, VKQ) record per query head and chunk, merged below.
  const auto make_partials = [&] {
    partials.assign(static_cast<size_t>(args.shape.n_head * plan.n_chunks * (2 + plan.head_dim)), 0.0f);
    for (int64_t i = 0; i < args.shape.n_head * plan.n_chunks; ++i) partials[static_cast<size_t>(i * (2 + plan.head_dim))] = -INFINITY;
    plan.partials = partials.data();
  };
  const bool invariant = batch_invariant();  // one algorithm per row, whatever the batch
  if (args.n_tokens == 1 && own_type && !invariant) {
    // One token over agentkv's own types (issue 16: decoding reads less than F16 KV, and must be
    // faster for it): units are key chunks of every KV head, at least kOwnDecodeMinChunk keys,
    // a few per thread; the chunks' (M, S, VKQ) are merged as split keys' are.
    plan.mode = Mode::kOwnDecode;
    plan.n_chunks = std::max<int64_t>(1, std::min<int64_t>(4 * pool.size(), args.n_kv / kOwnDecodeMinChunk));
    plan.chunk_size = ((args.n_kv + plan.n_chunks - 1) / plan.n_chunks + kKeyTile - 1) / kKeyTile * kKeyTile;
    plan.n_units = plan.n_chunks;
    if (plan.n_chunks > 1) make_partials();
    if (attention_detail::LevelType(args.k_type)) prepare_level_query(args, plan);
  } else if ((args.n_tokens >= kTiledMinTokens || invariant || own_type) && tiled_kv) {
    plan.mode = Mode::kTiled;
    // Units of (token block, KV head); smaller blocks when that leaves threads idle.
    int64_t tpu = std::max(kTiledMinTokensPerUnit, (own_type ? kOwnTiledRowsPerUnit : kTiledRowsPerUnit) / plan.group);
    while (tpu > 1 && (args.n_tokens + tpu - 1) / tpu * plan.n_head_kv < 4 * pool.size()) tpu = (tpu + 1) / 2;
    plan.tokens_per_unit = tpu;
    plan.n_units = (args.n_tokens + tpu - 1) / tpu * plan.n_head_kv;
    if (args.mask) {
      plan.mask_tiles = (args.n_kv + kKeyTile - 1) / kKeyTile;
      mask_tile_zero = std::vector<std::atomic<uint8_t>>(static_cast<size_t>((args.n_tokens + tpu - 1) / tpu * plan.mask_tiles));
      plan.mask_tile_zero = mask_tile_zero.data();
    }
  } else if (args.n_tokens == 1 && KeySpan(args.n_kv) >= kSplitMinKeys && pool.size() > 1 && !invariant) {
    // llama.cpp splits only F16/F32 caches; quantized caches are split too here (the merge is
    // exact up to float rounding) so single-token decoding uses every thread.
    plan.mode = Mode::kSplitKeys;
    plan.n_chunks = pool.size();
    plan.chunk_size = (KeySpan(args.n_kv) + plan.n_chunks - 1) / plan.n_chunks;
    plan.n_units = plan.n_chunks;
    make_partials();
  } else {
    plan.mode = Mode::kPerKey;
    // Token blocks share each K/V tile; smaller blocks when that leaves threads idle.
    int64_t tpu = kPerKeyMaxTokensPerUnit;
    while (tpu > 1 && (args.n_tokens + tpu - 1) / tpu * plan.n_head_kv < 4 * pool.size()) tpu = (tpu + 1) / 2;
    plan.tokens_per_unit = tpu;
    plan.n_units = (args.n_tokens + tpu - 1) / tpu * plan.n_head_kv;
  }

  std::atomic<int64_t> next{0};
  if (plan.n_units == 1 || pool.size() == 1) {
    HWY_DYNAMIC_DISPATCH(RunUnits)(plan, &next);
  } else {
    pool.run([&](int, int) { HWY_DYNAMIC_DISPATCH(RunUnits)(plan, &next); });
  }

  if (plan.partials) {
    // Merge the chunks in order, as ggml_flash_attn_ext_reduce_partials does.
    const int64_t D = plan.head_dim;
    std::vector<float> acc(static_cast<size_t>(D));
    for (int64_t h = 0; h < args.shape.n_head; ++h) {
      float m = -INFINITY, s = 0.0f;
      std::fill(acc.begin(), acc.end(), 0.0f);
      for (int64_t c = 0; c < plan.n_chunks; ++c) {
        const float* rec = plan.partials + (h * plan.n_chunks + c) * (2 + D);
        if (rec[1] == 0.0f) continue;
        const float m_new = std::max(m, rec[0]);
        const float scale_old = std::exp(m - m_new);
        const float scale_new = std::exp(rec[0] - m_new);
        for (int64_t i = 0; i < D; ++i) acc[static_cast<size_t>(i)] = acc[static_cast<size_t>(i)] * scale_old + rec[2 + i] * scale_new;
        s = s * scale_old + rec[1] * scale_new;
        m = m_new;
      }
      float* out = args.out + h * D;
      const float inv = s == 0.0f ? 0.0f : 1.0f / s;
      for (int64_t i = 0; i < D; ++i) out[i] = acc[static_cast<size_t>(i)] * inv;
      if (args.lse) args.lse[h] = s == 0.0f ? -INFINITY : m + std::log(s);
    }
  }
}

float merge_attention_partials(const float* a, float lse_a, const float* b, float lse_b, float* out,
                               int64_t dim) {
  const float m = std::max(lse_a, lse_b);
  if (m == -INFINITY) {
    std::fill(out, out + dim, 0.0f);
    return -INFINITY;
  }
  const float wa = std::exp(lse_a - m);
  const float wb = std::exp(lse_b - m);
  const float inv = 1.0f / (wa + wb);
  const float ca = wa * inv, cb = wb * inv;
  for (int64_t i = 0; i < dim; ++i) {
    // A side with zero weight contributes nothing, even if its row holds garbage.
    out[i] = (ca != 0.0f ? ca * a[i] : 0.0f) + (cb != 0.0f ? cb * b[i] : 0.0f);
  }
  return m + std::log(wa + wb);
}

}  // namespace agentkv
#endif  // HWY_ONCE

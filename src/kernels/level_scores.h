// Integer K.Q scores for tiled attention over keys stored as int8 levels and block scales:
// agentkv's own KV types (tq4, tq3) and q8_0 keys in agentkv's own order (issue 16: a batch over
// a 4- or 3-bit cache must not be slower than over F16). The queries are taken in q8_0, the keys'
// vec_dot_type, as own-type decoding takes them. Each 32 elements' integer sum is exact; the blocks
// are combined in one float order on every CPU level, so every level gives the same bits:
//   s = 0; for each q8_0 block b in order: s = fma(float(isum_b), d_q(b) * d_k(b), s); score = s * scale
// where d_k(b) is the scale of the key block holding block b (tq blocks are 64 elements).
// AVX-512 VNNI multiplies four byte pairs per lane and instruction (keys read offset by 128 as
// unsigned bytes, the accumulators starting at -128 * the query block's sum, as gemm_q8_0 does);
// AVX2 multiplies int16 pairs; the portable code is the definition.
#pragma once
#include <cstdint>
#include <vector>

#include "agentkv/ggml_type.h"
#include "kernels/quant_blocks.h"

namespace agentkv {

enum class LevelScoreKernel { kPortable, kAvx2, kAvx512Vnni };

// A tiled unit's query rows in q8_0, laid out for the kernel of the CPU level active when packed.
// Reused from unit to unit (its buffers keep their capacity).
struct LevelQueries {
  LevelScoreKernel kernel = LevelScoreKernel::kPortable;
  int64_t rows = 0;
  int64_t head_dim = 0;
  std::vector<int8_t> values;   // [rows][head_dim]: every kernel's tail rows, and the portable one
  std::vector<int32_t> packed;  // VNNI: [head_dim / 4][rows] four int8s; AVX2: [head_dim / 2][rows] two int16s
  std::vector<int32_t> bias;    // VNNI: [blocks][rows], -128 * the block's sum
  std::vector<float> scales;    // [blocks][rows]: d_q
  std::vector<int16_t> wide_keys;  // AVX2: a call's keys widened
  std::vector<int8_t> tail_keys;   // a call's keys as signed levels, for tail rows
};

// Keys the kernels score together: level_scores takes whole groups.
constexpr int64_t kLevelScoreKeyGroup = 8;

// Packs `rows` rows of q8_0 blocks (row r's head_dim / 32 blocks at q8 + r * head_dim / 32);
// head_dim a multiple of 32.
void pack_level_queries(const BlockQ8_0* q8, int64_t rows, int64_t head_dim, LevelQueries* out);

// The byte key levels are XORed with when handed to level_scores: 0x80 for the VNNI kernel, which
// reads them as unsigned bytes offset by 128 (unpacking can write them so at no cost), else 0.
uint8_t level_key_flip(const LevelQueries& q);

// out[j * q.rows + r] = the score of query row r and key j < n_keys, a multiple of
// kLevelScoreKeyGroup (above). Key j's levels (XORed with level_key_flip) are keys[j * head_dim ...],
// its block scales key_scales[j * (head_dim / k_block) ...] (k_block 64 for tq, 32 for q8_0).
void level_scores(LevelQueries& q, const uint8_t* keys, const float* key_scales, int64_t k_block, int64_t n_keys,
                  float scale, float* out);

// The int8 levels and per-block scales of n elements of a tq4, tq3 or q8_0 row, in portable code
// (the SIMD attention targets unpack their own way, to the same values).
void unpack_levels(GgmlType type, const uint8_t* src, int8_t* levels, float* scales, int64_t n);

}  // namespace agentkv

// Quantizers for the i-quant weight types: valid blocks with a low squared error, for mkmodel and
// the tests. Not ggml's quantizers (those search neighbourhoods of the grid with importance
// weights and give other bytes); what a block means is fixed by the format (quant_iq.cpp), and
// any valid block reads the same everywhere.
//
// Grid types (iq2_*, iq3_*): a scale sub-block (16 or 32 elements) is coded at a trial scale s as
// groups of 8 signs (the parity-coded types, whose 8th sign is implied by the other 7, flip the
// sign of their smallest element when the count of negatives is odd) and groups of 8 or 4
// magnitudes, each mapped to the grid entry nearest its rounded magnitudes (a table over every
// rounded vector, built once). Several trial scales, each refitted by least squares; the best kept.
// Then the superblock's d and the sub-blocks' 4-bit scale codes, and every group coded again at
// its final scale. iq4_xs: iq4_nl's per-32 search, then its 6-bit signed scale codes likewise.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "kernels/iq_grids.h"
#include "kernels/quant_iq.h"
#include "kernels/quant_kernels.h"

namespace agentkv::quant_detail {
namespace {

// A grid codebook and, for every vector of rounded magnitudes (each element's nearest level), the
// entry nearest to it.
struct GridCodebook {
  int dim = 0;                   // magnitudes per entry: 8 (iq2) or 4 (iq3)
  std::vector<uint64_t> entries;  // byte j = magnitude of element j
  std::vector<int> levels;        // the distinct magnitudes, ascending
  std::vector<uint16_t> nearest;  // rounded vector (base levels.size() digits) -> entry index

  template <class Entry, size_t N>
  GridCodebook(const Entry (&grid)[N], int dim_) : dim(dim_), entries(grid, grid + N) {
    for (uint64_t e : entries)
      for (int j = 0; j < dim; ++j) {
        const int m = static_cast<int>((e >> (8 * j)) & 0xFF);
        if (std::find(levels.begin(), levels.end(), m) == levels.end()) levels.push_back(m);
      }
    std::sort(levels.begin(), levels.end());
    const int n_levels = static_cast<int>(levels.size());
    int n_keys = 1;
    for (int j = 0; j < dim; ++j) n_keys *= n_levels;
    nearest.resize(n_keys);
    for (int key = 0; key < n_keys; ++key) {
      int want[8];
      for (int j = 0, k = key; j < dim; ++j, k /= n_levels) want[j] = levels[k % n_levels];
      int best = 0;
      long best_err = std::numeric_limits<long>::max();
      for (size_t i = 0; i < entries.size(); ++i) {
        long err = 0;
        for (int j = 0; j < dim; ++j) {
          const long diff = static_cast<long>((entries[i] >> (8 * j)) & 0xFF) - want[j];
          err += diff * diff;
        }
        if (err < best_err) best_err = err, best = static_cast<int>(i);
      }
      nearest[key] = static_cast<uint16_t>(best);
    }
  }

  int magnitude(int entry, int j) const { return static_cast<int>((entries[entry] >> (8 * j)) & 0xFF); }

  // The entry for magnitudes a[0..dim) (in grid units).
  int lookup(const float* a) const {
    const int n_levels = static_cast<int>(levels.size());
    int key = 0;
    for (int j = dim - 1; j >= 0; --j) {
      int idx = 0;
      while (idx + 1 < n_levels && a[j] * 2 >= static_cast<float>(levels[idx] + levels[idx + 1])) ++idx;
      key = key * n_levels + idx;
    }
    return nearest[key];
  }
};

// How a grid type lays out its scales, signs and grid.
struct GridFormat {
  const GridCodebook* codebook;
  int scale_size;       // elements per scale code: 16 or 32
  bool sign_parity;     // signs stored as 7 bits, the 8th making the count of negatives even
  float factor;         // value = d * factor * (2 ls + 1) * grid * sign
};

const GridFormat& grid_format(GgmlType type) {
  static const GridCodebook iq2xxs(kIQ2XXSGrid, 8), iq2xs(kIQ2XSGrid, 8), iq2s(kIQ2SGrid, 8);
  static const GridCodebook iq3xxs(kIQ3XXSGrid, 4), iq3s(kIQ3SGrid, 4);
  static const GridFormat f_iq2xxs{&iq2xxs, 32, true, 0.125f}, f_iq2xs{&iq2xs, 16, true, 0.125f},
      f_iq2s{&iq2s, 16, false, 0.125f}, f_iq3xxs{&iq3xxs, 32, true, 0.25f}, f_iq3s{&iq3s, 32, false, 1.f};
  switch (type) {
    case GgmlType::IQ2_XXS: return f_iq2xxs;
    case GgmlType::IQ2_XS: return f_iq2xs;
    case GgmlType::IQ2_S: return f_iq2s;
    case GgmlType::IQ3_XXS: return f_iq3xxs;
    default: return f_iq3s;
  }
}

// The codes of one sub-block: per group of 8 elements a sign byte, per grid group an entry.
struct SubCodes {
  uint8_t signs[4];  // bit j: element j of the group of 8 is negative
  int entries[8];    // grid entry per grid group (scale_size / dim of them)
};

// Codes x[0..size) at scale s (> 0); returns sum(x q) and sum(q q) through the pointers, q the
// coded values in grid units.
void code_sub_block(const GridFormat& f, const float* x, int size, float s, SubCodes* c, float* sumqx, float* sumq2) {
  const GridCodebook& cb = *f.codebook;
  float a[32];
  for (int g = 0; g < size / 8; ++g) {
    uint8_t signs = 0;
    int smallest = 0;
    for (int j = 0; j < 8; ++j) {
      const float v = x[8 * g + j];
      if (v < 0) signs |= static_cast<uint8_t>(1u << j);
      a[8 * g + j] = std::fabs(v) / s;
      if (std::fabs(v) < std::fabs(x[8 * g + smallest])) smallest = j;
    }
    if (f.sign_parity && (__builtin_popcount(signs) & 1)) {
      signs ^= static_cast<uint8_t>(1u << smallest);  // the cheapest element takes the wrong sign...
      a[8 * g + smallest] = 0;                          // ...and the smallest magnitude
    }
    c->signs[g] = signs;
  }
  *sumqx = *sumq2 = 0;
  for (int k = 0; k < size / cb.dim; ++k) {
    c->entries[k] = cb.lookup(a + k * cb.dim);
    for (int j = 0; j < cb.dim; ++j) {
      const int e = k * cb.dim + j;
      const bool negative = (c->signs[e / 8] >> (e % 8)) & 1;
      const float q = static_cast<float>(negative ? -cb.magnitude(c->entries[k], j) : cb.magnitude(c->entries[k], j));
      *sumqx += x[e] * q;
      *sumq2 += q * q;
    }
  }
}

// The best scale (grid units -> values) for a sub-block: trial scales around amax / top level,
// each refitted by least squares; the fit with the least squared error wins. 0 for a zero block.
float best_sub_scale(const GridFormat& f, const float* x, int size) {
  float amax = 0;
  for (int j = 0; j < size; ++j) amax = std::max(amax, std::fabs(x[j]));
  if (amax == 0) return 0;
  const float top = static_cast<float>(f.codebook->levels.back());
  float best_scale = amax / top, best_gain = -1;
  SubCodes c;
  for (int t = 0; t <= 16; ++t) {
    const float s = amax / top * (0.55f + 0.05f * static_cast<float>(t));
    float sumqx, sumq2;
    code_sub_block(f, x, size, s, &c, &sumqx, &sumq2);
    // The squared error after the refit is sum(x^2) - sumqx^2 / sumq2: maximise the second term.
    if (sumq2 > 0 && sumqx > 0 && sumqx * sumqx / sumq2 > best_gain) {
      best_gain = sumqx * sumqx / sumq2;
      best_scale = sumqx / sumq2;
    }
  }
  return best_scale;
}

// Writes the codes of sub-block b (its first element at e0 of the superblock) into the block.
void store_codes(GgmlType type, void* block, int b, int e0, int ls, const SubCodes& c) {
  switch (type) {
    case GgmlType::IQ2_XXS: {
      auto& y = *static_cast<BlockIQ2_XXS*>(block);
      uint32_t grids = 0, signs_scale = static_cast<uint32_t>(ls) << 28;
      for (int l = 0; l < 4; ++l) {
        grids |= static_cast<uint32_t>(c.entries[l]) << (8 * l);
        signs_scale |= static_cast<uint32_t>(c.signs[l] & 127) << (7 * l);
      }
      std::memcpy(y.qs + 4 * b, &grids, 4);
      std::memcpy(y.qs + 4 * b + 2, &signs_scale, 4);
      return;
    }
    case GgmlType::IQ2_XS: {
      auto& y = *static_cast<BlockIQ2_XS*>(block);
      const int ib32 = e0 / 32, half = (e0 % 32) / 16;
      for (int l = 0; l < 2; ++l)
        y.qs[4 * ib32 + 2 * half + l] = static_cast<uint16_t>(c.entries[l] | ((c.signs[l] & 127) << 9));
      y.scales[ib32] = static_cast<uint8_t>((y.scales[ib32] & (half ? 0x0F : 0xF0)) | (ls << (4 * half)));
      return;
    }
    case GgmlType::IQ2_S: {
      auto& y = *static_cast<BlockIQ2_S*>(block);
      const int ib32 = e0 / 32, half = (e0 % 32) / 16;
      for (int l = 0; l < 2; ++l) {
        const int g = 2 * half + l;
        y.qs[4 * ib32 + g] = static_cast<uint8_t>(c.entries[l] & 0xFF);
        y.qh[ib32] = static_cast<uint8_t>((y.qh[ib32] & ~(3 << (2 * g))) | ((c.entries[l] >> 8) << (2 * g)));
        y.qs[kQK_K / 8 + 4 * ib32 + g] = c.signs[l];
      }
      y.scales[ib32] = static_cast<uint8_t>((y.scales[ib32] & (half ? 0x0F : 0xF0)) | (ls << (4 * half)));
      return;
    }
    case GgmlType::IQ3_XXS: {
      auto& y = *static_cast<BlockIQ3_XXS*>(block);
      uint32_t signs_scale = static_cast<uint32_t>(ls) << 28;
      for (int k = 0; k < 8; ++k) y.qs[8 * b + k] = static_cast<uint8_t>(c.entries[k]);
      for (int l = 0; l < 4; ++l) signs_scale |= static_cast<uint32_t>(c.signs[l] & 127) << (7 * l);
      std::memcpy(y.qs + kQK_K / 4 + 4 * b, &signs_scale, 4);
      return;
    }
    default: {  // iq3_s
      auto& y = *static_cast<BlockIQ3_S*>(block);
      y.qh[b] = 0;
      for (int k = 0; k < 8; ++k) {
        y.qs[8 * b + k] = static_cast<uint8_t>(c.entries[k] & 0xFF);
        y.qh[b] |= static_cast<uint8_t>((c.entries[k] >> 8) << k);
      }
      for (int l = 0; l < 4; ++l) y.signs[4 * b + l] = c.signs[l];
      y.scales[b / 2] = static_cast<uint8_t>((y.scales[b / 2] & (b % 2 ? 0x0F : 0xF0)) | (ls << (4 * (b % 2))));
      return;
    }
  }
}

void quantize_grid_superblock(GgmlType type, const float* x, void* block) {
  const GridFormat& f = grid_format(type);
  const int n_sub = kQK_K / f.scale_size;
  float scales[16];
  float max_scale = 0;
  for (int b = 0; b < n_sub; ++b) {
    scales[b] = best_sub_scale(f, x + b * f.scale_size, f.scale_size);
    max_scale = std::max(max_scale, scales[b]);
  }
  std::memset(block, 0, ggml_type_info(type).type_size);
  // Sub-block scale = unit * (2 ls + 1), ls in 0..15: the largest takes ls = 15.
  const f16_bits d_bits = fp32_to_fp16(max_scale / 31 / f.factor);
  std::memcpy(block, &d_bits, 2);
  const float unit = fp16_to_fp32(d_bits) * f.factor;
  for (int b = 0; b < n_sub; ++b) {
    int ls = 0;
    if (unit > 0) ls = std::clamp(nearest_int((scales[b] / unit - 1) / 2), 0, 15);
    SubCodes c;
    float sumqx, sumq2;
    const float s = unit * static_cast<float>(2 * ls + 1);
    code_sub_block(f, x + b * f.scale_size, f.scale_size, s > 0 ? s : 1.f, &c, &sumqx, &sumq2);
    store_codes(type, block, b, b * f.scale_size, ls, c);
  }
}

// iq4_xs: per 32 elements iq4_nl's weighted search for a (signed) scale; the superblock's d makes
// the largest one -32; every element is re-picked at its final scale d * (ls - 32).
void quantize_iq4_xs_superblock(const float* x, BlockIQ4_XS* y) {
  float scales[8];
  float max_abs_scale = 0, max_scale = 0;
  for (int ib = 0; ib < 8; ++ib) {
    BlockIQ4_NL nl;
    quantize_iq4_nl(x + 32 * ib, &nl, 32);
    // Re-fit in float (the iq4_nl block's d is rounded to f16): least squares on its levels.
    float sumqx = 0, sumq2 = 0;
    for (int j = 0; j < 32; ++j) {
      const float q = kIQ4NLValues[j < 16 ? nl.qs[j] & 0xF : nl.qs[j - 16] >> 4];
      sumqx += q * x[32 * ib + j];
      sumq2 += q * q;
    }
    scales[ib] = sumq2 > 0 ? sumqx / sumq2 : 0.f;
    if (std::fabs(scales[ib]) > max_abs_scale) max_abs_scale = std::fabs(scales[ib]), max_scale = scales[ib];
  }
  std::memset(y, 0, sizeof *y);
  y->d = fp32_to_fp16(-max_scale / 32);
  const float d = fp16_to_fp32(y->d);
  const float id = d != 0 ? 1 / d : 0.f;
  for (int ib = 0; ib < 8; ++ib) {
    const int l = std::clamp(nearest_int(id * scales[ib]), -32, 31) + 32;
    y->scales_l[ib / 2] |= static_cast<uint8_t>((l & 0xF) << (4 * (ib % 2)));
    y->scales_h |= static_cast<uint16_t>((l >> 4) << (2 * ib));
    const float dl = d * static_cast<float>(l - 32);
    const float idl = dl != 0 ? 1 / dl : 0.f;
    for (int j = 0; j < 16; ++j) {
      const int lo = nearest_level_index(kIQ4NLValues, 16, idl * x[32 * ib + j]);
      const int hi = nearest_level_index(kIQ4NLValues, 16, idl * x[32 * ib + j + 16]);
      y->qs[16 * ib + j] = static_cast<uint8_t>(lo | (hi << 4));
    }
  }
}

}  // namespace

void quantize_iq(GgmlType type, const float* src, void* dst, int64_t n) {
  const size_t block_bytes = ggml_type_info(type).type_size;
  for (int64_t ib = 0; ib < n / kQK_K; ++ib) {
    void* block = static_cast<uint8_t*>(dst) + ib * block_bytes;
    if (type == GgmlType::IQ4_XS) {
      quantize_iq4_xs_superblock(src + ib * kQK_K, static_cast<BlockIQ4_XS*>(block));
    } else {
      quantize_grid_superblock(type, src + ib * kQK_K, block);
    }
  }
}

}  // namespace agentkv::quant_detail

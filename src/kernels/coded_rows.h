// Rows of a calibrated KV code (type tqc3, docs/quant-types.md "Calibrated code"): each KV head's
// slice of a row holds head_dim integer codes of per-coordinate widths (0..7 bits), widths in
// descending order, packed LSB-first, 13 bytes per 32 elements (3.25 bits). A code c of width w
// reads as the half-integer c - (2^w - 1) / 2, width 0 as 0: a uniform midrise quantizer in code
// units. Which linear map takes a K/V head row into code units, and back, is the calibrated code's
// (memory/kv_code.h); the widths alone are what a kernel needs to read the rows.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

namespace agentkv {

// How rows are unpacked at the active CPU level (every way gives the same values). Kernels pick it
// once per call (CodedHeads::active_unpack) rather than once per row.
enum class CodedUnpack { kPortable, kAvx2, kVbmi };

inline constexpr int kCodedMaxWidth = 7;          // bits per coordinate at most
inline constexpr int64_t kCodedBitsPer32 = 104;   // tqc3: 3.25 bits per element, all included

class CodedHeads {
 public:
  CodedHeads() = default;
  // widths: per KV head, head_dim widths in [0, kCodedMaxWidth], non-increasing, summing to
  // head_dim * 3.25 bits. Throws Error otherwise.
  CodedHeads(int64_t head_dim, std::vector<std::vector<uint8_t>> widths);

  int64_t head_dim() const { return head_dim_; }
  int64_t n_heads() const { return static_cast<int64_t>(widths_.size()); }
  size_t head_bytes() const { return static_cast<size_t>(head_dim_ / 32 * kCodedBitsPer32 / 8); }
  const std::vector<uint8_t>& widths(int64_t head) const { return widths_[static_cast<size_t>(head)]; }

  // u: head_dim values in code units; each is rounded to its width's nearest level (clamped).
  void encode(int64_t head, const float* u, uint8_t* dst) const;
  static CodedUnpack active_unpack();

  // The levels a head slice holds, as floats in code units (the same floats at every CPU level).
  void decode(int64_t head, const uint8_t* src, float* dst) const { decode(active_unpack(), head, src, dst); }
  void decode(CodedUnpack how, int64_t head, const uint8_t* src, float* dst) const;
  // The same levels doubled, as int8 (2c - (2^w - 1): odd, within +-127), each XORed with `flip`:
  // what the integer K.Q sums read (level_scores.h), with a scale of 0.5 for every element.
  void levels(int64_t head, const uint8_t* src, int8_t* dst, uint8_t flip = 0) const {
    levels(active_unpack(), head, 1, src, dst, flip);
  }
  // Heads [first_head, first_head + n) of a row, their slices back to back in src and dst.
  void levels(CodedUnpack how, int64_t first_head, int64_t n, const uint8_t* src, int8_t* dst, uint8_t flip = 0) const;

  // Where each coordinate's code lies, worked out once per head for the vector unpacking: a
  // coordinate's code sits in the 16-bit window at byte `window` of its group's first byte,
  // `shift` bits up, `mask` wide (groups of 16 coordinates for AVX2's in-lane shuffles, of 32 for
  // AVX-512 VBMI's whole-register byte permute).
  struct Unpacking {
    std::vector<uint16_t> start16, start32;  // per group: its first byte
    std::vector<uint8_t> shuffle16, permute32;  // per coordinate: its window's two byte indices
    std::vector<uint16_t> shift, mask;          // per coordinate
    std::vector<float> half;                    // (2^w - 1) / 2, what a code's level is below it
  };

  // VBMI's bit-field extraction (vpmultishiftqb), 64 coordinates per chunk: eight codes lie in one
  // 8-byte window (8 x 7 bits + a start within a byte < 64 bits), so a byte permute puts each group
  // of 8's window in a qword, and each byte takes its code's bits from its qword. Each byte takes
  // its code's bits from one below (bit - 1, mod 64), so the field is the code doubled under mask2
  // = (2^w - 1) << 1; adding offset[flip] (-(2^w - 1), or 128 - (2^w - 1) for flip 0x80) gives the
  // doubled level, XORed with flip. One cache-line-aligned record per chunk, every head's chunks in
  // one array (head h's chunk c at h * head_dim / 64 + c): a row's unpacking reads its tables front
  // to back, and no load splits a line (separate unaligned tables per head cost 2x the unpacking).
  struct alignas(64) VbmiChunk {
    uint8_t window[64], bit[64], mask2[64], offset0[64], offset80[64];  // per coordinate
  };

  // AVX2's doubled levels, 32 coordinates (two groups of 16) per record, every head's records in one
  // array as VBMI's: per group, the in-lane shuffle into 16-bit windows, the multiplier 2^(17 - s)
  // whose high product half is the window shifted right by s - 1 (AVX2 has no variable 16-bit
  // shift; s, the code's start in its window, is 2..9), and mask2 = (2^w - 1) << 1, which takes
  // the doubled code from it and, shifted right once, is what the doubled code less gives the level.
  struct alignas(64) Avx2Pair {
    uint8_t shuffle[2][32];
    uint16_t mul[2][16], mask2[2][16];
  };

 private:
  int64_t head_dim_ = 0;
  std::vector<std::vector<uint8_t>> widths_;
  std::vector<Unpacking> unpacking_;
  std::vector<Avx2Pair> avx2_pairs_;
  std::vector<uint32_t> avx2_start_;  // per group of 16: its first byte in the row (all heads')
  std::vector<VbmiChunk> vbmi_chunks_;
  std::vector<uint32_t> vbmi_start_;  // per chunk: its first byte in the row (all heads')
};

}  // namespace agentkv

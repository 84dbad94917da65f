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
  // The levels a head slice holds, as floats in code units.
  void decode(int64_t head, const uint8_t* src, float* dst) const;

 private:
  int64_t head_dim_ = 0;
  std::vector<std::vector<uint8_t>> widths_;
};

}  // namespace agentkv

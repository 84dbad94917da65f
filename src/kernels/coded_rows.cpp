#include "kernels/coded_rows.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "agentkv/error.h"

namespace agentkv {

CodedHeads::CodedHeads(int64_t head_dim, std::vector<std::vector<uint8_t>> widths)
    : head_dim_(head_dim), widths_(std::move(widths)) {
  if (head_dim_ <= 0 || head_dim_ % 32 != 0) throw Error("coded rows: head_dim " + std::to_string(head_dim_) + " is not a positive multiple of 32");
  const int64_t bits = head_dim_ / 32 * kCodedBitsPer32;
  for (size_t h = 0; h < widths_.size(); ++h) {
    const auto& w = widths_[h];
    if (static_cast<int64_t>(w.size()) != head_dim_) throw Error("coded rows: head " + std::to_string(h) + " has " + std::to_string(w.size()) + " widths");
    int64_t sum = 0;
    for (size_t i = 0; i < w.size(); ++i) {
      if (w[i] > kCodedMaxWidth) throw Error("coded rows: width " + std::to_string(w[i]) + " above " + std::to_string(kCodedMaxWidth));
      if (i > 0 && w[i] > w[i - 1]) throw Error("coded rows: widths of head " + std::to_string(h) + " are not in descending order");
      sum += w[i];
    }
    if (sum != bits) throw Error("coded rows: head " + std::to_string(h) + " spends " + std::to_string(sum) + " bits, the type holds " + std::to_string(bits));
  }
}

void CodedHeads::encode(int64_t head, const float* u, uint8_t* dst) const {
  const auto& w = widths_[static_cast<size_t>(head)];
  std::memset(dst, 0, head_bytes());
  uint64_t acc = 0;
  int filled = 0;
  size_t out = 0;
  for (int64_t i = 0; i < head_dim_; ++i) {
    const int width = w[static_cast<size_t>(i)];
    if (width == 0) continue;
    const int top = (1 << width) - 1;
    // Level c - (2^w - 1)/2 nearest to u: c = floor(u + 2^(w-1)), clamped (NaN reads as 0).
    const float shifted = std::floor(u[i] + static_cast<float>(1 << (width - 1)));
    const int c = shifted >= static_cast<float>(top) ? top : (shifted > 0.0f ? static_cast<int>(shifted) : 0);
    acc |= static_cast<uint64_t>(c) << filled;
    filled += width;
    while (filled >= 8) {
      dst[out++] = static_cast<uint8_t>(acc);
      acc >>= 8;
      filled -= 8;
    }
  }
  if (filled > 0) dst[out] = static_cast<uint8_t>(acc);
}

void CodedHeads::decode(int64_t head, const uint8_t* src, float* dst) const {
  const auto& w = widths_[static_cast<size_t>(head)];
  uint64_t acc = 0;
  int filled = 0;
  size_t in = 0;
  const size_t n_bytes = head_bytes();
  for (int64_t i = 0; i < head_dim_; ++i) {
    const int width = w[static_cast<size_t>(i)];
    if (width == 0) {
      dst[i] = 0.0f;
      continue;
    }
    while (filled < width && in < n_bytes) {
      acc |= static_cast<uint64_t>(src[in++]) << filled;
      filled += 8;
    }
    const int c = static_cast<int>(acc & ((1u << width) - 1));
    acc >>= width;
    filled -= width;
    dst[i] = static_cast<float>(c) - 0.5f * static_cast<float>((1 << width) - 1);
  }
}

}  // namespace agentkv

#include "kernels/coded_rows.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "agentkv/error.h"
#include "kernels/dispatch.h"
#include "kernels/quant_simd_x86.h"

// GCC 12 reports the undefined upper halves inside its own AVX-512 intrinsics as uninitialized
// (clang, which builds this file for the fuzz targets, has no such warning group).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

namespace agentkv {
namespace {

CodedHeads::Unpacking plan_unpacking(const std::vector<uint8_t>& widths) {
  const size_t n = widths.size();
  CodedHeads::Unpacking u;
  u.shuffle16.resize(2 * n);
  u.permute32.resize(2 * n);
  u.shift.resize(n);
  u.mask.resize(n);
  u.half.resize(n);
  size_t bit = 0;
  for (size_t i = 0; i < n; ++i) {
    if (i % 16 == 0) u.start16.push_back(static_cast<uint16_t>(bit / 8));
    if (i % 32 == 0) u.start32.push_back(static_cast<uint16_t>(bit / 8));
    const int w = widths[i];
    // A width-0 coordinate reads byte 0 under an empty mask: its window may lie past the row.
    const size_t byte = w ? bit / 8 : u.start32.back();
    const size_t in16 = w ? byte - u.start16.back() : 0, in32 = byte - u.start32.back();
    u.shuffle16[2 * i] = static_cast<uint8_t>(in16);  // <= 14 (16 codes of <= 7 bits span <= 15 bytes)
    u.shuffle16[2 * i + 1] = static_cast<uint8_t>(in16 + 1);
    u.permute32[2 * i] = static_cast<uint8_t>(in32);  // <= 28
    u.permute32[2 * i + 1] = static_cast<uint8_t>(in32 + 1);
    u.shift[i] = static_cast<uint16_t>(w ? bit % 8 : 0);
    u.mask[i] = static_cast<uint16_t>((1u << w) - 1);
    u.half[i] = 0.5f * static_cast<float>((1 << w) - 1);
    bit += static_cast<size_t>(w);
  }
  return u;
}

// One head's AVX2 records (CodedHeads::Avx2Pair), appended from its Unpacking; `first_byte`: the
// head's slice's first byte in the row.
void plan_avx2(const CodedHeads::Unpacking& u, const std::vector<uint8_t>& widths, uint32_t first_byte,
               std::vector<CodedHeads::Avx2Pair>& pairs, std::vector<uint32_t>& starts) {
  for (size_t g = 0; g < u.start16.size(); ++g) {
    if (g % 2 == 0) pairs.emplace_back();
    CodedHeads::Avx2Pair& p = pairs.back();
    starts.push_back(first_byte + u.start16[g]);
    for (size_t k = 0; k < 16; ++k) {
      const size_t i = 16 * g + k;
      // The high half of window * 2^(17 - s) is the window shifted right by s - 1: the code doubled.
      // A code starting at bit 0 or 1 of its byte takes the window one byte earlier (the code at bit
      // 8 or 9: 9 + 7 bits still fit), its low byte zero (index 0x80) before the group's first byte.
      const int s = u.shift[i];
      const uint8_t at = u.shuffle16[2 * i];
      const bool earlier = s <= 1;
      p.shuffle[g % 2][2 * k] = earlier ? (at > 0 ? static_cast<uint8_t>(at - 1) : uint8_t{0x80}) : at;
      p.shuffle[g % 2][2 * k + 1] = earlier ? at : u.shuffle16[2 * i + 1];
      p.mul[g % 2][k] = static_cast<uint16_t>(1u << (17 - (earlier ? s + 8 : s)));
      p.mask2[g % 2][k] = static_cast<uint16_t>(((1u << widths[i]) - 1) << 1);
    }
  }
}

// One head's VBMI chunk records (CodedHeads::VbmiChunk), appended; `first_byte`: the head's
// slice's first byte in the row.
void plan_vbmi(const std::vector<uint8_t>& widths, uint32_t first_byte, std::vector<CodedHeads::VbmiChunk>& chunks,
               std::vector<uint32_t>& starts) {
  size_t bit = 0, group8 = 0, start = 0;  // group8: the first byte of the current group of 8's window
  for (size_t i = 0; i < widths.size(); ++i) {
    if (i % 64 == 0) {
      start = bit / 8;
      starts.push_back(first_byte + static_cast<uint32_t>(start));
      chunks.emplace_back();
    }
    CodedHeads::VbmiChunk& c = chunks.back();
    const size_t k = i % 64;
    if (i % 8 == 0) group8 = bit / 8;
    c.window[k] = static_cast<uint8_t>(group8 - start + i % 8);     // <= 56 + 7
    c.bit[k] = static_cast<uint8_t>((bit - 8 * group8 + 63) % 64);  // one below its code
    const unsigned odd = (1u << widths[i]) - 1;
    c.mask2[k] = static_cast<uint8_t>(odd << 1);
    c.offset0[k] = static_cast<uint8_t>(-static_cast<int>(odd));
    c.offset80[k] = static_cast<uint8_t>(128 - static_cast<int>(odd));
    bit += widths[i];
  }
}

// The definition: each code read from its 16-bit window (bytes past the row read as 0).
uint32_t code_at(const CodedHeads::Unpacking& u, const uint8_t* src, size_t n_bytes, int64_t i) {
  const size_t g = static_cast<size_t>(i / 32), b = u.start32[g] + u.permute32[static_cast<size_t>(2 * i)];
  const uint32_t window = (b < n_bytes ? src[b] : 0u) | (b + 1 < n_bytes ? uint32_t{src[b + 1]} << 8 : 0u);
  return (window >> u.shift[static_cast<size_t>(i)]) & u.mask[static_cast<size_t>(i)];
}

void decode_portable(const CodedHeads::Unpacking& u, const uint8_t* src, size_t n_bytes, int64_t n, float* dst) {
  for (int64_t i = 0; i < n; ++i) dst[i] = static_cast<float>(code_at(u, src, n_bytes, i)) - u.half[static_cast<size_t>(i)];
}

// Doubled levels: 2c - (2^w - 1), the mask being 2^w - 1.
void levels_portable(const CodedHeads::Unpacking& u, const uint8_t* src, size_t n_bytes, int64_t n, int8_t* dst, uint8_t flip) {
  for (int64_t i = 0; i < n; ++i) {
    const int level = 2 * static_cast<int>(code_at(u, src, n_bytes, i)) - static_cast<int>(u.mask[static_cast<size_t>(i)]);
    dst[i] = static_cast<int8_t>(static_cast<uint8_t>(level) ^ flip);
  }
}

#ifdef AGENTKV_HAVE_X86_SIMD
// 16 bytes from `at`, zeros past row_end (the row's later heads are readable; only its end is not).
AGENTKV_AVX2_INLINE __m128i load16_within(const uint8_t* at, const uint8_t* row_end) {
  if (row_end - at >= 16) return _mm_loadu_si128(reinterpret_cast<const __m128i*>(at));
  alignas(16) uint8_t tail[16] = {};
  std::memcpy(tail, at, static_cast<size_t>(row_end - at));
  return _mm_load_si128(reinterpret_cast<const __m128i*>(tail));
}

// 16 doubled levels in 16-bit lanes: the group's 16 bytes broadcast to both lanes, one in-lane
// shuffle into 16-bit windows, the high half of a multiply (the window shifted right to one bit
// below its code), mask2 (the doubled code), less mask2 / 2 = 2^w - 1.
AGENTKV_AVX2_INLINE __m256i group_levels(__m128i bytes, __m256i shuffle, const uint16_t* mul, const uint16_t* mask2) {
  const __m256i windows = _mm256_shuffle_epi8(_mm256_broadcastsi128_si256(bytes), shuffle);
  const __m256i shifted = _mm256_mulhi_epu16(windows, _mm256_load_si256(reinterpret_cast<const __m256i*>(mul)));
  const __m256i m2 = _mm256_load_si256(reinterpret_cast<const __m256i*>(mask2));
  return _mm256_sub_epi16(_mm256_and_si256(shifted, m2), _mm256_srli_epi16(m2, 1));
}

// A group's 16 bytes from `at` and its shuffle: for a group whose 16 bytes would pass the row's
// end, the row's last 16 bytes and the shuffle's indices moved up by as much (a code's bits all lie
// in the row; what an index past 15 wraps to lands under an empty mask). Rows of fewer than 16
// bytes are copied out.
AGENTKV_AVX2_INLINE __m256i group_bytes(const uint8_t* at, const uint8_t* row_begin, const uint8_t* row_end, const uint8_t* shuffle,
                                        __m128i& bytes) {
  const __m256i sh = _mm256_load_si256(reinterpret_cast<const __m256i*>(shuffle));
  if (row_end - at >= 16) {
    bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(at));
    return sh;
  }
  if (row_end - row_begin < 16) {
    bytes = load16_within(at, row_end);
    return sh;
  }
  bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(row_end - 16));
  return _mm256_add_epi8(sh, _mm256_set1_epi8(static_cast<char>(at - (row_end - 16))));
}

// Groups [2 p0, 2 p1) of a row (the groups of consecutive heads, two per record), src holding its
// bytes from byte `first` on, n_bytes of them; 32 levels per store.
template <bool kFlip80>
AGENTKV_AVX2 void levels_avx2(const CodedHeads::Avx2Pair* pairs, const uint32_t* starts, size_t p0, size_t p1, const uint8_t* src,
                              uint32_t first, size_t n_bytes, int8_t* dst) {
  const __m256i flip = _mm256_set1_epi8(static_cast<char>(0x80));
  const uint8_t* row_end = src + n_bytes;
  for (size_t p = p0; p < p1; ++p, dst += 32) {
    const CodedHeads::Avx2Pair& t = pairs[p];
    __m128i bytes0, bytes1;
    const __m256i sh0 = group_bytes(src + (starts[2 * p] - first), src, row_end, t.shuffle[0], bytes0);
    const __m256i sh1 = group_bytes(src + (starts[2 * p + 1] - first), src, row_end, t.shuffle[1], bytes1);
    const __m256i a = group_levels(bytes0, sh0, t.mul[0], t.mask2[0]);
    const __m256i b = group_levels(bytes1, sh1, t.mul[1], t.mask2[1]);
    __m256i lv = _mm256_permute4x64_epi64(_mm256_packs_epi16(a, b), 0xD8);  // a's 16, then b's
    if (kFlip80) lv = _mm256_xor_si256(lv, flip);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst), lv);
  }
}

// One chunk of 64 doubled levels (vpmultishiftqb): each group of 8's window into a qword, each
// byte its code's bits, masked, doubled, less 2^w - 1 (the mask itself), all in bytes; offset80
// adds the flip 0x80 in the same step.
template <bool kFlip80>
AGENTKV_AVX512_VBMI inline __attribute__((always_inline)) __m512i chunk_levels(const CodedHeads::VbmiChunk& t, __m512i bytes) {
  const __m512i windows = _mm512_permutexvar_epi8(_mm512_load_si512(t.window), bytes);
  const __m512i fields = _mm512_multishift_epi64_epi8(_mm512_load_si512(t.bit), windows);
  return _mm512_add_epi8(_mm512_and_si512(fields, _mm512_load_si512(t.mask2)), _mm512_load_si512(kFlip80 ? t.offset80 : t.offset0));
}

// Chunks [c0, c1) of a row (the chunks of consecutive heads), src holding its bytes from byte
// `first` on, n_bytes of them: whole 64-byte loads up to the chunks that reach past the row's
// end, masked loads for those (worked out once per call, not per chunk).
template <bool kFlip80>
AGENTKV_AVX512_VBMI void levels_vbmi(const CodedHeads::VbmiChunk* chunks, const uint32_t* starts, size_t c0, size_t c1,
                                     const uint8_t* src, uint32_t first, size_t n_bytes, int8_t* dst) {
  size_t whole = c1;  // chunks before it load 64 bytes within the row (starts only grow)
  while (whole > c0 && starts[whole - 1] - first + 64 > n_bytes) --whole;
  size_t c = c0;
  for (; c < whole; ++c, dst += 64)
    _mm512_storeu_si512(dst, chunk_levels<kFlip80>(chunks[c], _mm512_loadu_si512(src + (starts[c] - first))));
  for (; c < c1; ++c, dst += 64) {
    const size_t at = starts[c] - first;
    const __m512i bytes = _mm512_maskz_loadu_epi8((__mmask64{1} << (n_bytes - at)) - 1, src + at);
    _mm512_storeu_si512(dst, chunk_levels<kFlip80>(chunks[c], bytes));
  }
}

// 16 codes per step: their 16 bytes broadcast to both lanes, one in-lane shuffle into 16-bit
// windows, widened to 32 bits (with their shifts and masks) for the variable shifts AVX2 has.
AGENTKV_AVX2 void decode_avx2(const CodedHeads::Unpacking& u, const uint8_t* src, size_t n_bytes, int64_t n, float* dst) {
  const uint8_t* row_end = src + n_bytes;
  for (int64_t g = 0; g < n / 16; ++g) {
    const __m256i bytes = _mm256_broadcastsi128_si256(load16_within(src + u.start16[static_cast<size_t>(g)], row_end));
    const __m256i windows = _mm256_shuffle_epi8(bytes, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(u.shuffle16.data() + 32 * g)));
    for (int half = 0; half < 2; ++half) {
      const int64_t i = 16 * g + 8 * half;
      const __m256i w32 = _mm256_cvtepu16_epi32(half ? _mm256_extracti128_si256(windows, 1) : _mm256_castsi256_si128(windows));
      const __m256i shift = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(u.shift.data() + i)));
      const __m256i mask = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(u.mask.data() + i)));
      const __m256i codes = _mm256_and_si256(_mm256_srlv_epi32(w32, shift), mask);
      _mm256_storeu_ps(dst + i, _mm256_sub_ps(_mm256_cvtepi32_ps(codes), _mm256_loadu_ps(u.half.data() + i)));
    }
  }
}

// 32 codes per step: one byte permute across the register into 16-bit windows, 16-bit shifts.
AGENTKV_AVX512_VBMI void decode_vbmi(const CodedHeads::Unpacking& u, const uint8_t* src, size_t n_bytes, int64_t n, float* dst) {
  for (int64_t g = 0; g < n / 32; ++g) {
    const size_t start = u.start32[static_cast<size_t>(g)];
    const size_t avail = std::min<size_t>(64, n_bytes - start);
    const __mmask64 load = avail == 64 ? ~__mmask64{0} : (__mmask64{1} << avail) - 1;
    const __m512i bytes = _mm512_maskz_loadu_epi8(load, src + start);
    const __m512i windows = _mm512_permutexvar_epi8(_mm512_loadu_si512(u.permute32.data() + 64 * g), bytes);
    const __m512i codes = _mm512_and_si512(_mm512_srlv_epi16(windows, _mm512_loadu_si512(u.shift.data() + 32 * g)),
                                           _mm512_loadu_si512(u.mask.data() + 32 * g));
    for (int half = 0; half < 2; ++half) {
      const int64_t i = 32 * g + 16 * half;
      const __m512i c32 = _mm512_cvtepu16_epi32(half ? _mm512_extracti64x4_epi64(codes, 1) : _mm512_castsi512_si256(codes));
      _mm512_storeu_ps(dst + i, _mm512_sub_ps(_mm512_cvtepi32_ps(c32), _mm512_loadu_ps(u.half.data() + i)));
    }
  }
}
#endif

}  // namespace

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
    unpacking_.push_back(plan_unpacking(w));
    plan_avx2(unpacking_.back(), w, static_cast<uint32_t>(h * head_bytes()), avx2_pairs_, avx2_start_);
    plan_vbmi(w, static_cast<uint32_t>(h * head_bytes()), vbmi_chunks_, vbmi_start_);
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

CodedUnpack CodedHeads::active_unpack() {
#ifdef AGENTKV_HAVE_X86_SIMD
  if (avx512_vbmi_active()) return CodedUnpack::kVbmi;
  if (active_cpu_level() >= CpuLevel::Avx2) return CodedUnpack::kAvx2;
#endif
  return CodedUnpack::kPortable;
}

void CodedHeads::levels(CodedUnpack how, int64_t first_head, int64_t n, const uint8_t* src, int8_t* dst, uint8_t flip) const {
  const size_t n_bytes = head_bytes();
#ifdef AGENTKV_HAVE_X86_SIMD
  if (how != CodedUnpack::kPortable) {
    const bool vbmi = how == CodedUnpack::kVbmi && head_dim_ % 64 == 0;
    const size_t per_head = static_cast<size_t>(head_dim_ / (vbmi ? 64 : 32));  // records per head
    const size_t r0 = static_cast<size_t>(first_head) * per_head, r1 = static_cast<size_t>(first_head + n) * per_head;
    const uint32_t first = static_cast<uint32_t>(static_cast<size_t>(first_head) * n_bytes);
    const size_t bytes = static_cast<size_t>(n) * n_bytes;
    const bool flip80 = flip == 0x80;
    if (vbmi && flip80) levels_vbmi<true>(vbmi_chunks_.data(), vbmi_start_.data(), r0, r1, src, first, bytes, dst);
    if (vbmi && !flip80) levels_vbmi<false>(vbmi_chunks_.data(), vbmi_start_.data(), r0, r1, src, first, bytes, dst);
    if (!vbmi && flip80) levels_avx2<true>(avx2_pairs_.data(), avx2_start_.data(), r0, r1, src, first, bytes, dst);
    if (!vbmi && !flip80) levels_avx2<false>(avx2_pairs_.data(), avx2_start_.data(), r0, r1, src, first, bytes, dst);
    // Only flips 0 and 0x80 occur (level_scores.h); any other is applied after.
    if (flip != 0 && !flip80)
      for (int64_t i = 0; i < n * head_dim_; ++i) dst[i] = static_cast<int8_t>(static_cast<uint8_t>(dst[i]) ^ flip);
    return;
  }
#endif
  for (int64_t h = 0; h < n; ++h, src += n_bytes, dst += head_dim_)
    levels_portable(unpacking_[static_cast<size_t>(first_head + h)], src, n_bytes, head_dim_, dst, flip);
}

void CodedHeads::decode(CodedUnpack how, int64_t head, const uint8_t* src, float* dst) const {
  const Unpacking& u = unpacking_[static_cast<size_t>(head)];
  const size_t n_bytes = head_bytes();
#ifdef AGENTKV_HAVE_X86_SIMD
  if (how == CodedUnpack::kVbmi) return decode_vbmi(u, src, n_bytes, head_dim_, dst);
  if (how == CodedUnpack::kAvx2) return decode_avx2(u, src, n_bytes, head_dim_, dst);
#endif
  decode_portable(u, src, n_bytes, head_dim_, dst);
}

}  // namespace agentkv

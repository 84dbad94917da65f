#include "memory/warm_codec.h"

#include <cstring>

#include <zstd.h>

namespace agentkv::memory {
namespace {

// Every encoding starts with its magic and the size of the record it decodes to.
constexpr uint32_t kExactMagic = 0x325a574b;  // "KWZ2"
constexpr size_t kExactHeader = 16;           // magic, the record's size (u64), the zstd frame's size (u32)
constexpr uint64_t kMaxRecord = 1ull << 32;

// Byte pairs <-> planes.
void split_planes(const uint8_t* in, size_t pairs, uint8_t* low, uint8_t* high) {
  for (size_t j = 0; j < pairs; ++j) {
    low[j] = in[2 * j];
    high[j] = in[2 * j + 1];
  }
}

void join_planes(const uint8_t* low, const uint8_t* high, size_t pairs, uint8_t* out) {
  for (size_t j = 0; j < pairs; ++j) {
    out[2 * j] = low[j];
    out[2 * j + 1] = high[j];
  }
}

// Layout: header, zstd frame of the high plane (odd bytes: for f16 sign, exponent, top mantissa
// bits — what compresses), then the low plane as is (mantissa noise: zstd would spend time on it
// for nothing), then the odd last byte if any.
class ExactWarmCodec final : public WarmCodec {
 public:
  explicit ExactWarmCodec(int level) : level_(level) {}

  std::vector<uint8_t> encode(const std::vector<uint8_t>& record) const override {
    const size_t n = record.size(), pairs = n / 2;
    std::vector<uint8_t> planes(2 * pairs);
    split_planes(record.data(), pairs, planes.data(), planes.data() + pairs);
    std::vector<uint8_t> out(kExactHeader + ZSTD_compressBound(pairs) + pairs + 1);
    const size_t z = ZSTD_compress(out.data() + kExactHeader, out.size() - kExactHeader, planes.data() + pairs, pairs, level_);
    if (ZSTD_isError(z)) return {};
    const uint64_t size = n;
    const uint32_t frame = static_cast<uint32_t>(z);
    std::memcpy(out.data(), &kExactMagic, 4);
    std::memcpy(out.data() + 4, &size, sizeof size);
    std::memcpy(out.data() + 12, &frame, sizeof frame);
    std::memcpy(out.data() + kExactHeader + z, planes.data(), pairs);
    if (n & 1) out[kExactHeader + z + pairs] = record.back();
    out.resize(kExactHeader + z + pairs + (n & 1));
    out.shrink_to_fit();
    return out;
  }

  std::optional<std::vector<uint8_t>> decode(const std::vector<uint8_t>& encoded) const override {
    if (encoded.size() < kExactHeader) return std::nullopt;
    uint32_t magic = 0, frame = 0;
    std::memcpy(&magic, encoded.data(), 4);
    std::memcpy(&frame, encoded.data() + 12, 4);
    const uint64_t n = record_size(encoded), pairs = n / 2;
    if (magic != kExactMagic || n > kMaxRecord || encoded.size() != kExactHeader + frame + pairs + (n & 1))
      return std::nullopt;
    const uint8_t* zstd_frame = encoded.data() + kExactHeader;
    if (ZSTD_getFrameContentSize(zstd_frame, frame) != pairs) return std::nullopt;
    thread_local std::vector<uint8_t> high;  // kept between calls: no fresh pages to fault in per record
    high.resize(pairs);
    const size_t z = ZSTD_decompress(high.data(), pairs, zstd_frame, frame);
    if (ZSTD_isError(z) || z != pairs) return std::nullopt;
    std::vector<uint8_t> record(n);
    join_planes(zstd_frame + frame, high.data(), pairs, record.data());
    if (n & 1) record.back() = encoded.back();
    return record;
  }

  std::string name() const override { return "exact (zstd -" + std::to_string(level_) + ", byte planes)"; }

 private:
  int level_;
};

}  // namespace

uint64_t WarmCodec::record_size(const std::vector<uint8_t>& encoded) {
  uint64_t n = 0;
  if (encoded.size() >= 12) std::memcpy(&n, encoded.data() + 4, sizeof n);
  return n;
}

std::unique_ptr<WarmCodec> make_exact_warm_codec(int zstd_level) { return std::make_unique<ExactWarmCodec>(zstd_level); }

}  // namespace agentkv::memory

// The requantizing warm codec (memory/warm_codec.h): a page record's rows converted to a smaller
// KV type with the kernels' reference quantizers (what the cache's own writes use), and back.
#include <cstring>

#include "agentkv/error.h"
#include "kernels/quant.h"
#include "memory/page_record.h"
#include "memory/warm_codec.h"

namespace agentkv::memory {
namespace {

constexpr uint32_t kRequantMagic = 0x51524b57;  // "WKRQ": magic, the record's size (u64), then the converted record
constexpr uint32_t kPageMagic = 0x50564b41;     // page_record.cpp's "AKVP"
constexpr size_t kHeader = 12;

struct RowShape {
  GgmlType type_k, type_v;
  int64_t n_k, n_v;  // elements per cell per layer
  uint32_t n_layers;
  size_t cell_bytes(GgmlType k, GgmlType v) const { return n_layers * (ggml_row_size(k, n_k) + ggml_row_size(v, n_v)); }
};

// Converts every cell's rows (per KV layer: K, then V) from one pair of types to another.
std::vector<uint8_t> convert_rows(const std::vector<uint8_t>& rows, size_t n_cells, const RowShape& s, GgmlType from_k,
                                  GgmlType from_v, GgmlType to_k, GgmlType to_v) {
  std::vector<uint8_t> out(n_cells * s.cell_bytes(to_k, to_v));
  thread_local std::vector<float> f32;
  f32.resize(static_cast<size_t>(std::max(s.n_k, s.n_v)));
  const uint8_t* src = rows.data();
  uint8_t* dst = out.data();
  for (size_t i = 0; i < n_cells * s.n_layers; ++i) {
    for (int kv = 0; kv < 2; ++kv) {
      const int64_t n = kv == 0 ? s.n_k : s.n_v;
      const GgmlType from = kv == 0 ? from_k : from_v, to = kv == 0 ? to_k : to_v;
      dequantize_row(from, src, f32.data(), n);
      quantize_row(to, f32.data(), dst, n);
      src += ggml_row_size(from, n);
      dst += ggml_row_size(to, n);
    }
  }
  return out;
}

class RequantizingWarmCodec final : public WarmCodec {
 public:
  RequantizingWarmCodec(RowShape shape, GgmlType type) : shape_(shape), type_(type), exact_(make_exact_warm_codec()) {}

  std::vector<uint8_t> encode(const std::vector<uint8_t>& record) const override {
    uint32_t magic = 0;
    if (record.size() >= 4) std::memcpy(&magic, record.data(), 4);
    if (magic != kPageMagic) return exact_->encode(record);  // snapshots and anything else: exact
    auto page = decode_page(record, shape_.cell_bytes(shape_.type_k, shape_.type_v));
    if (!page) return {};
    page->rows = convert_rows(page->rows, page->tokens.size(), shape_, shape_.type_k, shape_.type_v, type_, type_);
    const std::vector<uint8_t> inner = encode_page_record(*page, shape_.cell_bytes(type_, type_));
    std::vector<uint8_t> out(kHeader + inner.size());
    const uint64_t size = record.size();
    std::memcpy(out.data(), &kRequantMagic, 4);
    std::memcpy(out.data() + 4, &size, sizeof size);
    std::memcpy(out.data() + kHeader, inner.data(), inner.size());
    return out;
  }

  std::optional<std::vector<uint8_t>> decode(const std::vector<uint8_t>& encoded) const override {
    uint32_t magic = 0;
    if (encoded.size() >= 4) std::memcpy(&magic, encoded.data(), 4);
    if (magic != kRequantMagic) return exact_->decode(encoded);
    if (encoded.size() < kHeader) return std::nullopt;
    auto page = decode_page(std::span<const uint8_t>(encoded).subspan(kHeader), shape_.cell_bytes(type_, type_));
    if (!page) return std::nullopt;
    page->rows = convert_rows(page->rows, page->tokens.size(), shape_, type_, type_, shape_.type_k, shape_.type_v);
    std::vector<uint8_t> record = encode_page_record(*page, shape_.cell_bytes(shape_.type_k, shape_.type_v));
    if (record.size() != record_size(encoded)) return std::nullopt;
    return record;
  }

  std::string name() const override { return std::string(ggml_type_name(type_)) + " (requantized K/V rows)"; }

 private:
  RowShape shape_;
  GgmlType type_;
  std::unique_ptr<WarmCodec> exact_;
};

}  // namespace

std::unique_ptr<WarmCodec> make_requantizing_warm_codec(const KvCache& kv, GgmlType type) {
  const KvLayout& l = kv.layout();
  const int64_t block = ggml_type_info(type).block_size;
  if (type == l.type_k) throw Error("--cache-warm-type: the KV cache already holds " + std::string(ggml_type_name(type)));
  if (type == GgmlType::TQC3 || l.type_k == GgmlType::TQC3 || l.type_v == GgmlType::TQC3)
    throw Error("--cache-warm-type: tqc3 rows are not requantized (their code maps them; use the exact warm tier)");
  if (l.n_embd_k % block || l.n_embd_v % block)
    throw Error("--cache-warm-type " + std::string(ggml_type_name(type)) + ": blocks of " + std::to_string(block) +
                " do not divide the K/V rows");
  return std::make_unique<RequantizingWarmCodec>(RowShape{l.type_k, l.type_v, l.n_embd_k, l.n_embd_v, kv.rows().n_kv_layers()}, type);
}

}  // namespace agentkv::memory

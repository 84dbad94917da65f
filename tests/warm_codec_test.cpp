// The warm tier's requantizing codec (memory/warm_codec.h): a page record comes back as a valid
// record of the cache's own type whose rows are exactly the rows converted to the warm type and
// back (the kernels' reference quantizers), smaller by the types' ratio; other records come back
// bit for bit; damaged encodings are refused.
#include "memory/warm_codec.h"

#include <gtest/gtest.h>

#include <random>

#include "agentkv/error.h"
#include "agentkv/fp16.h"
#include "kernels/quant.h"
#include "memory/page_record.h"

namespace agentkv::memory {
namespace {

constexpr int64_t kEmbd = 128;
constexpr uint32_t kCells = 32;

std::unique_ptr<KvCache> f16_cache() {
  KvLayout kl;
  kl.layer_has_kv = {true, false, true};  // a hybrid-like layout: rows for KV layers only
  kl.n_embd_k = kl.n_embd_v = kEmbd;
  kl.type_k = kl.type_v = GgmlType::F16;
  kl.n_cells = kCells;
  auto kv = std::make_unique<KvCache>(kl);
  std::mt19937 rng(3);
  std::normal_distribution<float> value(0.0f, 2.0f);
  for (int layer : {0, 2})
    for (uint32_t c = 0; c < kCells; ++c) {
      auto* k = reinterpret_cast<uint16_t*>(kv->rows().k_data(layer, 0) + c * kv->rows().row_bytes_k());
      auto* v = reinterpret_cast<uint16_t*>(kv->rows().v_data(layer, 0) + c * kv->rows().row_bytes_v());
      for (int64_t i = 0; i < kEmbd; ++i) {
        k[i] = fp32_to_fp16(value(rng));
        v[i] = fp32_to_fp16(value(rng));
      }
    }
  return kv;
}

TEST(WarmCodec, RequantizedPagesComeBackAsTheirConvertedRows) {
  auto kv = f16_cache();
  const std::vector<int32_t> tokens = {5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20};
  std::vector<uint32_t> cells;
  for (uint32_t c = 0; c < 16; ++c) cells.push_back(c + 3);
  const std::vector<uint8_t> record = encode_page(*kv, 0xabcdef, 32, tokens, cells);
  for (GgmlType type : {GgmlType::Q8_0, GgmlType::Q4_0}) {
    const auto codec = make_requantizing_warm_codec(*kv, type);
    const std::vector<uint8_t> enc = codec->encode(record);
    const double expected = static_cast<double>(ggml_row_size(type, kEmbd)) / static_cast<double>(ggml_row_size(GgmlType::F16, kEmbd));
    EXPECT_NEAR(static_cast<double>(enc.size()) / static_cast<double>(record.size()), expected, 0.05);
    EXPECT_EQ(WarmCodec::record_size(enc), record.size());
    const auto back = codec->decode(enc);
    ASSERT_TRUE(back);
    ASSERT_EQ(back->size(), record.size());
    const auto page = decode_page(*kv, *back);  // a valid record of the cache's type
    ASSERT_TRUE(page);
    EXPECT_EQ(page->hash, 0xabcdefu);
    EXPECT_EQ(page->first_pos, 32u);
    EXPECT_EQ(page->tokens, tokens);
    // Each row: f16 -> f32 -> type -> f32 -> f16, independently.
    const auto original = decode_page(*kv, record);
    const size_t row = ggml_row_size(GgmlType::F16, kEmbd);
    std::vector<float> f(kEmbd), g(kEmbd);
    std::vector<uint8_t> q(ggml_row_size(type, kEmbd)), h(row);
    for (size_t r = 0; r < original->rows.size() / row; ++r) {
      dequantize_row(GgmlType::F16, original->rows.data() + r * row, f.data(), kEmbd);
      quantize_row(type, f.data(), q.data(), kEmbd);
      dequantize_row(type, q.data(), g.data(), kEmbd);
      quantize_row(GgmlType::F16, g.data(), h.data(), kEmbd);
      ASSERT_EQ(0, std::memcmp(h.data(), page->rows.data() + r * row, row)) << "row " << r;
    }
    EXPECT_NE(page->rows, original->rows);  // lossy: it did change something
    // Damaged encodings are refused.
    std::vector<uint8_t> cut(enc.begin(), enc.end() - 3);
    EXPECT_FALSE(codec->decode(cut));
    std::vector<uint8_t> flipped = enc;
    flipped[flipped.size() / 2] ^= 0x10;
    EXPECT_FALSE(codec->decode(flipped));
    // A record that is not a page (a hybrid snapshot) is kept exactly.
    const std::vector<uint8_t> other = {'A', 'K', 'S', 'N', 1, 2, 3, 4, 5, 6, 7};
    EXPECT_EQ(*codec->decode(codec->encode(other)), other);
  }
}

TEST(WarmCodec, ATypeThatCannotHoldTheRowsIsRefused) {
  auto kv = f16_cache();
  EXPECT_THROW(make_requantizing_warm_codec(*kv, GgmlType::F16), Error);
  EXPECT_THROW(make_requantizing_warm_codec(*kv, GgmlType::Q4_K), Error);  // blocks of 256 > 128
}

}  // namespace
}  // namespace agentkv::memory

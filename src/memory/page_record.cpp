#include "memory/page_record.h"

#include <cstring>
#include <stdexcept>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "memory/record_bytes.h"

namespace agentkv::memory {
namespace {

constexpr uint32_t kPageMagic = 0x50564b41;  // "AKVP" as bytes
constexpr uint32_t kPageVersion = 1;
constexpr size_t kHeaderBytes = 4 + 4 + 8 + 4 + 4 + 8;  // magic, version, hash, first_pos, n_tokens, cell bytes

using record_bytes::get;
using record_bytes::put;

}  // namespace

size_t page_cell_bytes(const KvCache& kv) {
  const KvRows& rows = kv.rows();
  return rows.n_kv_layers() * (rows.row_bytes_k() + rows.row_bytes_v());
}

namespace {

// The header and tokens; the caller appends the rows, then put_checksum.
std::vector<uint8_t> start_record(uint64_t hash, uint32_t first_pos, std::span<const int32_t> tokens, size_t cell_bytes) {
  std::vector<uint8_t> out;
  out.reserve(kHeaderBytes + tokens.size() * (4 + cell_bytes) + 8);
  put(out, kPageMagic);
  put(out, kPageVersion);
  put(out, hash);
  put(out, first_pos);
  put(out, static_cast<uint32_t>(tokens.size()));
  put(out, static_cast<uint64_t>(cell_bytes));
  for (int32_t t : tokens) put(out, t);
  return out;
}

void put_checksum(std::vector<uint8_t>& out) { put(out, static_cast<uint64_t>(XXH64(out.data(), out.size(), 0))); }

}  // namespace

std::vector<uint8_t> encode_page_record(const PageRecord& page, size_t cell_bytes) {
  if (page.rows.size() != page.tokens.size() * cell_bytes) throw std::logic_error("page record: rows do not match the tokens");
  std::vector<uint8_t> out = start_record(page.hash, page.first_pos, page.tokens, cell_bytes);
  out.insert(out.end(), page.rows.begin(), page.rows.end());
  put_checksum(out);
  return out;
}

std::vector<uint8_t> encode_page(const KvCache& kv, uint64_t hash, uint32_t first_pos, std::span<const int32_t> tokens,
                                 std::span<const uint32_t> cells) {
  if (tokens.size() != cells.size()) throw std::logic_error("page record: one cell per token");
  std::vector<uint8_t> out = start_record(hash, first_pos, tokens, page_cell_bytes(kv));
  const KvRows& rows = kv.rows();
  const size_t rk = rows.row_bytes_k(), rv = rows.row_bytes_v();
  const int n_layers = static_cast<int>(kv.layout().layer_has_kv.size());
  for (uint32_t cell : cells)
    for (int layer = 0; layer < n_layers; ++layer) {
      if (!rows.layer_has_kv(layer)) continue;
      const size_t at = out.size();
      out.resize(at + rk + rv);
      rows.read_k(layer, 0, cell, out.data() + at);
      rows.read_v(layer, 0, cell, out.data() + at + rk);
    }
  put_checksum(out);
  return out;
}

std::optional<PageRecord> decode_page(const KvCache& kv, std::span<const uint8_t> bytes) {
  return decode_page(bytes, page_cell_bytes(kv));
}

std::optional<PageRecord> decode_page(std::span<const uint8_t> bytes, size_t expected_cell_bytes) {
  if (bytes.size() < kHeaderBytes + 8) return std::nullopt;
  const uint8_t* p = bytes.data();
  if (get<uint32_t>(p) != kPageMagic || get<uint32_t>(p + 4) != kPageVersion) return std::nullopt;
  PageRecord r;
  r.hash = get<uint64_t>(p + 8);
  r.first_pos = get<uint32_t>(p + 16);
  const uint32_t n = get<uint32_t>(p + 20);
  const uint64_t cell_bytes = get<uint64_t>(p + 24);
  if (cell_bytes != expected_cell_bytes || n == 0 || n > (1u << 20)) return std::nullopt;
  const size_t want = kHeaderBytes + static_cast<size_t>(n) * (4 + cell_bytes) + 8;
  if (bytes.size() != want) return std::nullopt;
  if (get<uint64_t>(p + want - 8) != XXH64(p, want - 8, 0)) return std::nullopt;
  r.tokens.resize(n);
  std::memcpy(r.tokens.data(), p + kHeaderBytes, static_cast<size_t>(n) * 4);
  const uint8_t* rows = p + kHeaderBytes + static_cast<size_t>(n) * 4;
  r.rows.assign(rows, rows + static_cast<size_t>(n) * cell_bytes);
  return r;
}

void write_page_rows(KvCache& kv, const PageRecord& page, std::span<const uint32_t> cells) {
  KvRows& rows = kv.rows();
  const size_t rk = rows.row_bytes_k(), rv = rows.row_bytes_v();
  if (cells.size() != page.tokens.size() || page.rows.size() != cells.size() * page_cell_bytes(kv))
    throw std::logic_error("page record: rows do not match the cells");
  const uint8_t* src = page.rows.data();
  const int n_layers = static_cast<int>(kv.layout().layer_has_kv.size());
  for (uint32_t cell : cells)
    for (int layer = 0; layer < n_layers; ++layer) {
      if (!rows.layer_has_kv(layer)) continue;
      rows.write_k(layer, 0, cell, src);
      rows.write_v(layer, 0, cell, src + rk);
      src += rk + rv;
    }
}

namespace {
constexpr uint32_t kWindowMagic = 0x57564b41;  // "AKVW" as bytes
}  // namespace

uint64_t window_record_key(uint64_t page_key) {
  const uint64_t key[2] = {page_key, 0x77696e646f77ull};  // "window": apart from page and snapshot keys
  return XXH3_64bits(key, sizeof key);
}

std::vector<uint8_t> encode_window_record(const KvCache& window, uint64_t key, uint32_t first_pos,
                                          std::span<const int32_t> tokens, std::span<const uint32_t> cells) {
  std::vector<uint8_t> out;
  put(out, kWindowMagic);
  const std::vector<uint8_t> page = encode_page(window, key, first_pos, tokens, cells);
  out.insert(out.end(), page.begin(), page.end());
  return out;
}

std::optional<PageRecord> decode_window_record(const KvCache& window, std::span<const uint8_t> bytes) {
  uint32_t magic = 0;
  if (bytes.size() < 4) return std::nullopt;
  std::memcpy(&magic, bytes.data(), 4);
  if (magic != kWindowMagic) return std::nullopt;
  return decode_page(window, bytes.subspan(4));
}

}  // namespace agentkv::memory

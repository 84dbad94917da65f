// A KV page as bytes, for tiers outside the process (Redis; later disk): its chain hash
// (prefix_index.h), its position and tokens, and the K and V rows of every attention layer for
// its cells, checksummed. A reader accepts a record only for a cache of the same row layout, and
// the caller checks hash and tokens against the chain it expects, so a foreign, stale or corrupt
// record is refused, never attached.
#pragma once
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "memory/kv_cache.h"

namespace agentkv::memory {

struct PageRecord {
  uint64_t hash = 0;
  uint32_t first_pos = 0;
  std::vector<int32_t> tokens;
  std::vector<uint8_t> rows;  // per cell, in position order: for each KV layer its K row, then its V row
};

// Bytes of one cell's rows (all KV layers, K and V).
size_t page_cell_bytes(const KvCache& kv);
// The record of the page whose positions first_pos.. hold `tokens` in `cells` (one per token).
std::vector<uint8_t> encode_page(const KvCache& kv, uint64_t hash, uint32_t first_pos, std::span<const int32_t> tokens,
                                 std::span<const uint32_t> cells);
// nullopt unless `bytes` is a whole, intact record whose rows fit this cache's layout.
std::optional<PageRecord> decode_page(const KvCache& kv, std::span<const uint8_t> bytes);
// The same for rows of cell_bytes bytes per cell (a record of rows in another KV type: the warm tier).
std::optional<PageRecord> decode_page(std::span<const uint8_t> bytes, size_t cell_bytes);
// The record of a decoded page whose rows are cell_bytes per cell.
std::vector<uint8_t> encode_page_record(const PageRecord& page, size_t cell_bytes);
// Writes a record's rows into cells (one per token, stream 0); the cell table is the caller's.
void write_page_rows(KvCache& kv, const PageRecord& page, std::span<const uint32_t> cells);

// A page's sliding-window rows (its cells in the window part, memory/window_pages.h) as a record
// of its own beside the page's: named window_record_key(the page's key), marked "AKVW" ahead of
// a page record of the window cache (so nothing takes it for a page of the main one).
uint64_t window_record_key(uint64_t page_key);
std::vector<uint8_t> encode_window_record(const KvCache& window, uint64_t key, uint32_t first_pos,
                                          std::span<const int32_t> tokens, std::span<const uint32_t> cells);
// nullopt unless `bytes` is a whole, intact window record whose rows fit this window cache.
std::optional<PageRecord> decode_window_record(const KvCache& window, std::span<const uint8_t> bytes);

}  // namespace agentkv::memory

// A context's K/V cut into the page records the page tiers store (memory/page_record.h), and
// records written back into its rows: for measuring the tiers (`agentkv bench tiers`) without
// the caller reading the KV cache. The server's pages go through the prefix cache instead.
#pragma once
#include <cstdint>
#include <span>
#include <vector>

#include "agentkv/context.h"

namespace agentkv {

// The cell of the first stream holding each position [0, n_pos) (0 where none does). Throws
// agentkv::Error when the model has no KV cache.
std::vector<uint32_t> kv_cells_of_positions(const Context& ctx, int64_t n_pos);
// The record of one page: the tokens from first_pos on and their K/V rows in `cells`.
std::vector<uint8_t> encode_kv_page(const Context& ctx, uint64_t hash, uint32_t first_pos,
                                    std::span<const int32_t> tokens, std::span<const uint32_t> cells);
// Decodes a record into those cells' rows; false (nothing written) when it does not decode.
bool write_kv_page(Context& ctx, std::span<const uint8_t> record, std::span<const uint32_t> cells);

}  // namespace agentkv

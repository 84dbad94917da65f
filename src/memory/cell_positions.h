// Which KV cell holds which position: what code outside the cell table needs of it (the eviction
// scores and the retrieval-head probe read a sequence's keys by position; `bench tiers` writes page
// records into cells), so that only src/memory/ reads cells.
#pragma once
#include <cstdint>
#include <vector>

#include "memory/kv_cache.h"

namespace agentkv::memory {

// The cell of every position of seq, which must hold exactly [0, n) (agentkv::Error otherwise).
// O(n) through the cell table's note of each (sequence, position).
std::vector<uint32_t> cells_by_position(const KvCache& kv, SeqId seq, Pos n);

// The cell holding each position [0, n) in stream 0, whatever its sequences (a context of one
// sequence); cell 0 where none does.
std::vector<uint32_t> cells_holding_positions(const KvCache& kv, Pos n);

}  // namespace agentkv::memory

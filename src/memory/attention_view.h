// What the attention of a placed micro-batch reads, as the memory hands it to the model: the
// tokens grouped by the sequence whose keys they see, and each group's keys in position order.
// Attention takes keys in the order given, so listing them by position (not by cell) makes its
// sums independent of where the cells lie: a sequence that attached pages another slot computed,
// or whose cells are interleaved with other sequences', gets the same bits as one computed alone
// in cells 0, 1, 2, ... (docs/memory-semantics.md, "Attention views").
#pragma once
#include <cstdint>
#include <vector>

#include "memory/kv_cache.h"
#include "memory/ubatch.h"

namespace agentkv::memory {

struct AttentionGroup {
  uint32_t stream = 0;
  SeqId seq = 0;                // every token's first sequence
  std::vector<int> tokens;      // indices into the ubatch, ascending
  std::vector<int32_t> rows;    // key j's cell in `stream`: the sequence's cells at positions
                                // <= the group's last position, by (position, cell)
  std::vector<float> mask;      // tokens.size() x rows.size(): 0 where the token sees key j
                                // (its position >= the key's), else -inf
};

// One group per (stream, first sequence) among ub's tokens, in order of each group's first token.
// ub must be applied to kv (its tokens occupy their cells). Throws agentkv::Error for a token
// without a sequence or with a sequence id outside the cache.
std::vector<AttentionGroup> attention_groups(const KvCache& kv, const UBatch& ub);

}  // namespace agentkv::memory

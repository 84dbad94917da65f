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
                                // <= the group's last position, by (position, cell); read them
                                // through layer_key_rows, not as offsets into a buffer
  std::vector<float> mask;      // tokens.size() x rows.size(): 0 where the token sees key j
                                // (its position >= the key's), else -inf; empty when every
                                // token sees every key (a decode step): attention reads no mask
  std::vector<int64_t> keys_visible;  // per token: how many of the keys it sees
  // A windowed cache whose tail type differs from the hot type, or whose tail keeps only some
  // heads' rows (KvRows::tail_kept_heads; memory/kv_rows.h): the first
  // n_tail keys are the tail's (by position, stored as tail_type_k / tail_type_v), the rest the
  // hot ones (by position); attention runs over each part and merges them by log-sum-exp.
  // 0 otherwise: every key in one position order, whatever its residency.
  size_t n_tail = 0;
};

// One group per (stream, first sequence) among ub's tokens, in order of each group's first token.
// ub must be applied to kv (its tokens occupy their cells). Throws agentkv::Error for a token
// without a sequence or with a sequence id outside the cache.
// sliding_window > 0: the view of a sliding-window layer: a token at position p sees only the
// keys at positions in (p - sliding_window, p] (llama.cpp's LLAMA_SWA_TYPE_STANDARD), and keys no token of the
// group sees are left out of `rows`.
std::vector<AttentionGroup> attention_groups(const KvCache& kv, const UBatch& ub, Pos sliding_window = 0);
// The same into `groups`, reusing the vectors it holds (a decode step at depth would otherwise
// allocate the key lists anew for every token).
void attention_groups(const KvCache& kv, const UBatch& ub, std::vector<AttentionGroup>& groups, Pos sliding_window = 0);

// Key j's K and V row of one layer, for every key of g in its order: what the attention kernel
// reads (kernels/attention.h). Only the memory knows where rows live, so pages can move between
// buffers without the model noticing.
void layer_key_rows(const KvCache& kv, const AttentionGroup& g, int layer, std::vector<const uint8_t*>& k,
                    std::vector<const uint8_t*>& v);

// For every token of a micro-batch of n_tokens, grouped as `groups` (attention_groups): how many
// keys it attends over (its first sequence's cells at positions <= its own).
std::vector<int64_t> keys_seen(const std::vector<AttentionGroup>& groups, size_t n_tokens);

}  // namespace agentkv::memory

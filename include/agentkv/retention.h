// Which tokens a context shift drops (issue 18; docs/memory-semantics.md "Context shift"): the
// policy scores the candidates — the positions after the first n_keep and before the recent
// window — and the shift drops the n_discard least worth keeping, then closes the gaps so the
// sequence's positions stay 0, 1, ... (its keys re-rotated for their new positions, as for the
// positional shift). One choice for all layers and heads: a position is kept or dropped whole, so
// the server's token list stays one token per position.
//
//   positional  llama-server's: the oldest n_discard after n_keep.
//   sinks       StreamingLLM: the first 4 positions (attention sinks) and the newest are kept;
//               the oldest after the sinks go, whatever n_keep says.
//   keydiff     KeyDiff (arXiv 2504.15364): per attention layer and KV head, the cosine of each
//               candidate's key to the candidates' mean key; the least distinctive go (highest
//               mean cosine over layers and heads). Needs no attention scores.
//   snapkv      SnapKV: the attention the last KvOptions::query_window queries paid each
//               candidate (softmax over all of the sequence's keys, summed over layers, heads and
//               queries; a position also counts the most attended of the 8 before it and the
//               one after, so the span after an attended position stays); the least attended go. Without
//               recorded queries it falls back to keydiff (logged by the caller).
// The scoring policies (keydiff, snapkv) also keep the newest half of what stays (at least
// n_recent positions) and score only the rest.
#pragma once
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "agentkv/context.h"
#include "agentkv/evict_policy.h"

namespace agentkv {

struct EvictionRequest {
  MemorySeqId seq = 0;
  int n_past = 0;     // the sequence holds positions [0, n_past)
  int n_keep = 0;     // never dropped: [0, n_keep)
  int n_discard = 0;  // how many positions go
  int n_recent = 0;   // never dropped: at least [n_past - n_recent, n_past) (scoring policies only,
                      // which keep the newest half of what stays anyway)
  EvictPolicy policy = EvictPolicy::Positional;
  // snapkv only: every candidate by its attention alone, no pooling and no recent half (the
  // ceiling `bench evict --oracle` measures with the queries of the tokens it scores).
  bool raw_attention = false;
};

// The positions to drop, ascending, exactly min(n_discard, candidates) of them. Reads the K rows
// (and recorded queries) of req.seq; changes nothing. Throws agentkv::Error when the sequence's
// positions are not exactly [0, n_past).
std::vector<MemoryPos> choose_evictions(const Context& ctx, const EvictionRequest& req);
// The policy's scores of the candidates [n_keep, n_past - the recent window) (higher: keep), for tests and
// the bench; positional and sinks score by position.
std::vector<float> retention_scores(const Context& ctx, const EvictionRequest& req);

// Drops `dropped` (ascending positions of seq, all < n_past) and moves every later position back
// over the gaps: seq then holds [0, n_past - dropped.size()). The keys are re-rotated at the next
// decode (Context::apply_pending_shift). The recorded queries of seq are forgotten (their
// positions changed).
void evict_positions(Context& ctx, MemorySeqId seq, std::span<const MemoryPos> dropped, int n_past);

}  // namespace agentkv

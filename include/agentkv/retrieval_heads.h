// Which KV heads retrieve (DuoAttention, arXiv 2410.10819; RazorAttention, arXiv 2407.15891):
// most heads read text locally (a recent window and the first tokens serve them), a few copy from
// anywhere in the context. A windowed cache can keep the older rows of those few only
// (KvLayout::tail_heads, KvOptions::retrieval_heads): the streaming heads attend over the
// hot window, the retrieval heads over everything.
//
// The heads are found from the model alone, once: a sequence of random tokens is run twice in a
// row, and in its second copy each query head's attention on the two keys an earlier occurrence
// offers is measured — the token after it (an induction head, which copies what followed) and the
// occurrence itself (an echo head). A KV head's score is its query heads' highest.
#pragma once
#include <cstdint>
#include <vector>

#include "agentkv/model.h"

namespace agentkv {

struct RetrievalHeadScores {
  // Per model layer, per KV head: the mean attention its second-copy queries paid the induction
  // and echo keys (0 … 1); empty for layers without attention.
  std::vector<std::vector<float>> by_layer;
};

// Runs the probe (2 × span random tokens, seeded) in a context of its own. span >= 8.
RetrievalHeadScores find_retrieval_heads(const Model& model, int n_threads, int span = 128, uint64_t seed = 1);

// KvLayout::tail_heads masks keeping the round(fraction × all KV heads) best-scored heads (ties
// by layer, then head); fraction in [0, 1].
std::vector<uint64_t> top_retrieval_heads(const RetrievalHeadScores& scores, double fraction);

}  // namespace agentkv

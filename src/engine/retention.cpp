#include "agentkv/retention.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "agentkv/error.h"
#include "engine/context_impl.h"
#include "engine/key_scoring.h"
#include "memory/kv_cache.h"
#include "memory/query_window.h"

namespace agentkv {
namespace {

constexpr int kSinks = 4;          // StreamingLLM's attention sinks
// SnapKV pools each position's attention over its neighbours so that spans stay whole. Here the
// span runs mostly forward: a head that reads position i now (a copying, induction-like head) reads
// i + 1, i + 2, ... as it goes on, so the positions after an attended one are kept with it
// (measured on the trained model: a symmetric ±3 pool kept the first digits of a 5-digit pass key
// and lost the rest, recall 0.6 / 0.4 at 512 / 1,024; this pool 0.95 / 0.90, BENCHMARKS.md).
constexpr int kSnapKvPoolBack = 8;  // i is kept for attention paid to i - 8 ... i
constexpr int kSnapKvPoolAhead = 1;  // ... and to i + 1
// Within a span, the attended position itself ranks first (a tie-break: at a weight of 1 its
// own attention reordered spans and cost pass-key recall, 0.8 vs 0.95 at 512 tokens).
constexpr float kOwnShare = 1e-3f;
// Half of what a scoring policy keeps is the newest positions, whatever the scores say (as H2O
// and StreamingLLM keep a recent window): text is read mostly locally, and no observation window
// predicts which of the recent positions the next tokens will need (bench evict: KL vs the full
// cache 0.100 with it, 0.126 without, at a 50 % budget).
constexpr double kRecentShare = 0.5;

// Whether each position's key of `layer` is there for KV head h: always, unless the cell is in a
// tail that dropped the head's rows (retrieval heads, memory/kv_rows.h): that head never reads it,
// and its stored key is zeros.
std::vector<char> keys_present(const memory::KvCache& kv, int layer, int64_t h, uint32_t stream, const std::vector<uint32_t>& cells,
                               int p0, int p1) {
  std::vector<char> out(static_cast<size_t>(p1 - p0), 1);
  const std::vector<int>* kept = kv.rows().tail_kept_heads(layer);
  if (!kept || std::find(kept->begin(), kept->end(), static_cast<int>(h)) != kept->end()) return out;
  const memory::KvWindow& window = kv.window();
  for (int p = p0; p < p1; ++p) out[static_cast<size_t>(p - p0)] = window.is_hot(stream, cells[static_cast<size_t>(p)]) ? 1 : 0;
  return out;
}

std::vector<float> keydiff_scores(const Context& ctx, const EvictionRequest& r, const std::vector<uint32_t>& cells, int c0, int c1) {
  const memory::KvCache& kv = *sequence_memory(ctx).kv();
  const ModelConfig& cfg = ctx.model().config();
  const int64_t hd = cfg.head_dim_k, n_kv = cfg.n_head_kv;
  const uint32_t stream = kv.layout().stream_of(r.seq);
  const size_t n = static_cast<size_t>(c1 - c0);
  std::vector<float> cos_sum(n, 0.f), keys, mean(static_cast<size_t>(hd));
  std::vector<int> n_cos(n, 0);  // (layer, head) pairs that hold the key
  for (int layer = 0; layer < static_cast<int>(kv.layout().layer_has_kv.size()); ++layer) {
    if (!kv.rows().layer_has_kv(layer)) continue;
    load_keys(kv, layer, stream, cells, c0, c1, keys);
    for (int64_t h = 0; h < n_kv; ++h) {
      const std::vector<char> present = keys_present(kv, layer, h, stream, cells, c0, c1);  // absent keys are zeros: no cosine
      std::fill(mean.begin(), mean.end(), 0.f);
      for (size_t i = 0; i < n; ++i) {  // unit keys, then their mean
        float* k = keys.data() + i * static_cast<size_t>(n_kv * hd) + static_cast<size_t>(h * hd);
        const float norm = std::sqrt(dot(k, k, hd));
        const float inv = norm > 0.f ? 1.f / norm : 0.f;
        for (int64_t d = 0; d < hd; ++d) k[d] *= inv, mean[static_cast<size_t>(d)] += k[d];
      }
      const float mnorm = std::sqrt(dot(mean.data(), mean.data(), hd));
      if (mnorm == 0.f) continue;
      for (size_t i = 0; i < n; ++i)
        if (present[i]) {
          cos_sum[i] += dot(keys.data() + i * static_cast<size_t>(n_kv * hd) + static_cast<size_t>(h * hd), mean.data(), hd) / mnorm;
          ++n_cos[i];
        }
    }
  }
  // Distinctive keys are kept: the score is minus the mean cosine to the mean key.
  for (size_t i = 0; i < n; ++i) cos_sum[i] = -cos_sum[i] / static_cast<float>(std::max(1, n_cos[i]));
  return cos_sum;
}

std::vector<float> snapkv_scores(const Context& ctx, const EvictionRequest& r, const std::vector<uint32_t>& cells, int c0, int c1) {
  const memory::KvCache& kv = *sequence_memory(ctx).kv();
  const memory::QueryWindow& qw = *recorded_queries(ctx);
  const ModelConfig& cfg = ctx.model().config();
  const int64_t hd = cfg.head_dim_k, n_head = cfg.n_head, n_kv = cfg.n_head_kv, rep = n_head / n_kv;
  const float scale = cfg.attention_scale();
  const uint32_t stream = kv.layout().stream_of(r.seq);
  const uint32_t n_q = qw.count(r.seq);
  const size_t n_rows = static_cast<size_t>(n_q) * static_cast<size_t>(n_head);  // one softmax per (query, head)
  std::vector<float> attn(static_cast<size_t>(c1 - c0), 0.f), keys, logits, mx(n_rows), sum(n_rows);
  std::vector<int> seen(n_q);
  for (uint32_t j = 0; j < n_q; ++j) seen[j] = std::min(r.n_past, static_cast<int>(qw.pos(r.seq, j)) + 1);  // causal
  for (int layer = 0; layer < static_cast<int>(kv.layout().layer_has_kv.size()); ++layer) {
    if (!kv.rows().layer_has_kv(layer)) continue;
    load_keys(kv, layer, stream, cells, 0, r.n_past, keys);
    std::vector<std::vector<char>> present(static_cast<size_t>(n_kv));  // a head does not see keys its tail dropped
    for (int64_t h = 0; h < n_kv; ++h) present[static_cast<size_t>(h)] = keys_present(kv, layer, h, stream, cells, 0, r.n_past);
    // Key-major passes: each key is read once while the window's queries stay in cache.
    logits.assign(static_cast<size_t>(r.n_past) * n_rows, -INFINITY);
    std::fill(mx.begin(), mx.end(), -INFINITY);
    for (int i = 0; i < r.n_past; ++i) {
      const float* k = keys.data() + static_cast<size_t>(i) * static_cast<size_t>(n_kv * hd);
      float* row = logits.data() + static_cast<size_t>(i) * n_rows;
      for (uint32_t j = 0; j < n_q; ++j) {
        if (i >= seen[j]) continue;
        const float* q = qw.row(layer, r.seq, j);
        for (int64_t h = 0; h < n_head; ++h) {
          const size_t at = static_cast<size_t>(j) * static_cast<size_t>(n_head) + static_cast<size_t>(h);
          if (!present[static_cast<size_t>(h / rep)][static_cast<size_t>(i)]) continue;  // stays -inf
          row[at] = scale * dot(q + h * hd, k + (h / rep) * hd, hd);
          mx[at] = std::max(mx[at], row[at]);
        }
      }
    }
    std::fill(sum.begin(), sum.end(), 0.f);
    for (int i = 0; i < r.n_past; ++i) {
      float* row = logits.data() + static_cast<size_t>(i) * n_rows;
      for (size_t x = 0; x < n_rows; ++x) sum[x] += (row[x] = std::exp(row[x] - mx[x]));  // exp(-inf) = 0: unseen
    }
    for (float& x : sum) x = x > 0.f ? 1.f / x : 0.f;
    for (int i = c0; i < c1; ++i) {
      const float* row = logits.data() + static_cast<size_t>(i) * n_rows;
      float a = 0.f;
      for (size_t x = 0; x < n_rows; ++x) a += row[x] * sum[x];
      attn[static_cast<size_t>(i - c0)] += a;
    }
  }
  if (r.raw_attention) return attn;
  // The span after an attended position is kept with it.
  std::vector<float> pooled(attn.size());
  for (size_t i = 0; i < attn.size(); ++i) {
    const size_t lo = i >= kSnapKvPoolBack ? i - kSnapKvPoolBack : 0, hi = std::min(attn.size(), i + kSnapKvPoolAhead + 1);
    pooled[i] = kOwnShare * attn[i] + *std::max_element(attn.begin() + static_cast<std::ptrdiff_t>(lo), attn.begin() + static_cast<std::ptrdiff_t>(hi));
  }
  return pooled;
}

// The candidate range [c0, c1) of a request.
std::pair<int, int> candidates(const EvictionRequest& r) {
  const bool scored = r.policy == EvictPolicy::KeyDiff || r.policy == EvictPolicy::SnapKV;
  const int keep = r.policy == EvictPolicy::Sinks ? std::min(kSinks, r.n_past) : std::clamp(r.n_keep, 0, r.n_past);
  const int stays = r.n_past - std::clamp(r.n_discard, 0, r.n_past);
  const int share = r.raw_attention ? 0 : static_cast<int>(kRecentShare * stays);
  const int recent = std::max(r.n_recent, std::min(share, stays - keep));
  const int end = scored ? std::max(keep, r.n_past - std::max(0, recent)) : r.n_past;
  return {keep, end};
}

}  // namespace

std::vector<float> retention_scores(const Context& ctx, const EvictionRequest& req) {
  const auto [c0, c1] = candidates(req);
  if (c1 <= c0) return {};
  if (req.policy == EvictPolicy::Positional || req.policy == EvictPolicy::Sinks || !sequence_memory(ctx).kv()) {
    std::vector<float> s(static_cast<size_t>(c1 - c0));
    std::iota(s.begin(), s.end(), 0.f);  // newer is worth more
    return s;
  }
  const std::vector<uint32_t> cells = cells_by_position(*sequence_memory(ctx).kv(), req.seq, req.n_past);
  if (req.policy == EvictPolicy::SnapKV && ctx.queries_recorded(req.seq) > 0)
    return snapkv_scores(ctx, req, cells, c0, c1);
  return keydiff_scores(ctx, req, cells, c0, c1);
}

std::vector<memory::Pos> choose_evictions(const Context& ctx, const EvictionRequest& req) {
  const auto [c0, c1] = candidates(req);
  const int n = std::min(std::max(0, req.n_discard), std::max(0, c1 - c0));
  if (n == 0) return {};
  const std::vector<float> scores = retention_scores(ctx, req);
  std::vector<int> order(scores.size());
  std::iota(order.begin(), order.end(), 0);
  // The n least worth keeping; among equals the older goes first.
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return scores[static_cast<size_t>(a)] < scores[static_cast<size_t>(b)]; });
  std::vector<memory::Pos> out;
  for (int i = 0; i < n; ++i) out.push_back(static_cast<memory::Pos>(c0 + order[static_cast<size_t>(i)]));
  std::sort(out.begin(), out.end());
  return out;
}

void evict_positions(Context& ctx, memory::SeqId seq, std::span<const memory::Pos> dropped, int n_past) {
  memory::SequenceMemory& mem = sequence_memory(ctx);
  // Runs of consecutive positions, the last first: each run's removal moves only what follows it.
  size_t end = dropped.size();
  while (end > 0) {
    size_t begin = end - 1;
    while (begin > 0 && dropped[begin - 1] + 1 == dropped[begin]) --begin;
    const memory::Pos p0 = dropped[begin], p1 = dropped[end - 1] + 1;
    if (p0 < 0 || p1 > n_past) throw Error("eviction: position outside the sequence");
    mem.seq_rm(seq, p0, p1);
    if (p1 < n_past) mem.seq_add(seq, p1, n_past, p0 - p1);
    n_past -= p1 - p0;
    end = begin;
  }
  if (memory::QueryWindow* q = recorded_queries(ctx)) q->clear(seq);
}

}  // namespace agentkv

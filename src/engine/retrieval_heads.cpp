#include "agentkv/retrieval_heads.h"

#include <algorithm>
#include <cmath>
#include <random>
#include <tuple>

#include "agentkv/context.h"
#include "agentkv/error.h"
#include "engine/context_impl.h"
#include "engine/key_scoring.h"
#include "memory/kv_cache.h"
#include "memory/query_window.h"

namespace agentkv {
namespace {

// Probe tokens skip the first 256 ids (byte tokens in BPE vocabularies) and stay below 32,000
// (past it, large vocabularies put special and rarely trained tokens).
constexpr int kFirstProbeToken = 256;
constexpr int kProbeTokenEnd = 32000;

}  // namespace

RetrievalHeadScores find_retrieval_heads(const Model& model, int n_threads, int span, uint64_t seed) {
  const ModelConfig& cfg = model.config();
  if (span < 8) throw Error("retrieval heads: the probe span must be at least 8 tokens");
  const int vocab_end = std::min<int>(static_cast<int>(model.n_vocab()), kProbeTokenEnd);
  if (vocab_end - kFirstProbeToken < 2 * span) throw Error("retrieval heads: the vocabulary is too small for a probe");
  std::mt19937_64 rng(seed);
  std::vector<Token> probe;
  while (static_cast<int>(probe.size()) < span) {  // distinct tokens: each has one earlier occurrence
    const Token t = static_cast<Token>(kFirstProbeToken + static_cast<int>(rng() % static_cast<uint64_t>(vocab_end - kFirstProbeToken)));
    if (std::find(probe.begin(), probe.end(), t) == probe.end()) probe.push_back(t);
  }
  const std::vector<Token> first = probe;
  probe.insert(probe.end(), first.begin(), first.end());

  ContextParams cp;
  cp.n_ctx = static_cast<uint32_t>(2 * span);
  cp.n_ubatch = static_cast<uint32_t>(2 * span);
  cp.n_threads = n_threads;
  cp.kv.query_window = static_cast<uint32_t>(span);  // the second copy's queries
  Context ctx(model, cp);
  Batch b;
  b.add_sequence(probe.data(), probe.size(), 0, 0, false);
  if (ctx.decode(b) != 0) throw Error("retrieval heads: the probe does not fit");

  const memory::KvCache& kv = *sequence_memory(ctx).kv();
  const memory::QueryWindow& qw = *recorded_queries(ctx);
  const int64_t hd = cfg.head_dim_k, n_head = cfg.n_head, n_kv = cfg.n_head_kv, rep = n_head / n_kv;
  const float scale = cfg.attention_scale();
  const int n_past = 2 * span;
  const std::vector<uint32_t> cells = cells_by_position(kv, 0, n_past);

  RetrievalHeadScores out;
  out.by_layer.resize(kv.layout().layer_has_kv.size());
  std::vector<float> keys, logits(static_cast<size_t>(n_past));
  for (int layer = 0; layer < static_cast<int>(out.by_layer.size()); ++layer) {
    if (!kv.rows().layer_has_kv(layer)) continue;
    load_keys(kv, layer, 0, cells, 0, n_past, keys);
    std::vector<float> head_score(static_cast<size_t>(n_head), 0.f);
    for (uint32_t j = 0; j < qw.count(0); ++j) {
      const int p = static_cast<int>(qw.pos(0, j));  // p - span: the earlier occurrence, p - span + 1: what followed it
      const float* q = qw.row(layer, 0, j);
      for (int64_t h = 0; h < n_head; ++h) {
        float mx = -INFINITY;
        for (int i = 0; i <= p; ++i) {
          logits[static_cast<size_t>(i)] = scale * dot(q + h * hd, keys.data() + static_cast<size_t>(i * n_kv * hd + (h / rep) * hd), hd);
          mx = std::max(mx, logits[static_cast<size_t>(i)]);
        }
        double sum = 0;
        for (int i = 0; i <= p; ++i) sum += std::exp(double(logits[static_cast<size_t>(i)] - mx));
        const int echo = p - span, induction = p - span + 1;
        double hit = std::exp(double(logits[static_cast<size_t>(echo)] - mx));
        if (induction < p) hit += std::exp(double(logits[static_cast<size_t>(induction)] - mx));
        head_score[static_cast<size_t>(h)] += static_cast<float>(hit / sum);
      }
    }
    std::vector<float>& by_kv = out.by_layer[static_cast<size_t>(layer)];
    by_kv.assign(static_cast<size_t>(n_kv), 0.f);
    for (int64_t h = 0; h < n_head; ++h)
      by_kv[static_cast<size_t>(h / rep)] = std::max(by_kv[static_cast<size_t>(h / rep)], head_score[static_cast<size_t>(h)] / static_cast<float>(std::max(1u, qw.count(0))));
  }
  return out;
}

std::vector<uint64_t> top_retrieval_heads(const RetrievalHeadScores& scores, double fraction) {
  if (!(fraction >= 0 && fraction <= 1)) throw Error("retrieval heads: the fraction must be in [0, 1]");
  std::vector<std::tuple<float, int, int>> ranked;  // (-score, layer, head)
  for (size_t l = 0; l < scores.by_layer.size(); ++l)
    for (size_t h = 0; h < scores.by_layer[l].size(); ++h)
      ranked.emplace_back(-scores.by_layer[l][h], static_cast<int>(l), static_cast<int>(h));
  std::sort(ranked.begin(), ranked.end());
  const auto n_keep = static_cast<size_t>(std::lround(fraction * static_cast<double>(ranked.size())));
  std::vector<uint64_t> masks(scores.by_layer.size(), 0);
  for (size_t i = 0; i < n_keep; ++i) masks[static_cast<size_t>(std::get<1>(ranked[i]))] |= 1ull << std::get<2>(ranked[i]);
  return masks;
}

}  // namespace agentkv

// agentkv/prefix_index_timing.h: the prefix index on a pool of one-float rows. Cells are taken in
// order and written as a sequence would hold them (restore_cell), so the fill costs what the index
// costs, not what placing micro-batches would.
#include "agentkv/prefix_index_timing.h"

#include <algorithm>
#include <chrono>
#include <memory>
#include <random>
#include <vector>

#include "memory/prefix_index.h"
#include "memory/sequence_memory.h"

namespace agentkv {
namespace {

using Clock = std::chrono::steady_clock;
using memory::Pos;
using memory::SeqId;
using memory::SeqSet;
using memory::TokenId;

constexpr uint32_t kPageTokens = 16;
constexpr size_t kChainPages = 4096;
constexpr size_t kSharedPages = 256;      // a chain starts with the previous one's first pages
constexpr size_t kLookupTokens = 2048;    // 128 pages
constexpr size_t kEvictPages = 2048;
constexpr SeqId kSeq = 0;
constexpr SeqId kHolder = 1;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

struct Bench {
  std::unique_ptr<memory::SequenceMemory> mem;
  memory::PrefixIndex* index = nullptr;
  uint32_t next_cell = 0;

  explicit Bench(uint32_t n_cells) {
    memory::KvLayout kl;
    kl.layer_has_kv = {true};
    kl.n_embd_k = kl.n_embd_v = 1;
    kl.type_k = kl.type_v = GgmlType::F32;
    kl.n_cells = n_cells;
    kl.n_seq_max = 2;
    mem = std::make_unique<memory::SequenceMemory>(std::make_unique<memory::KvCache>(kl), nullptr);
    PrefixCacheConfig cfg;
    cfg.page_tokens = kPageTokens;
    cfg.holder = kHolder;
    index = &enable_prefix_index(*mem, cfg);
  }

  // kSeq holds tokens[from, to) in fresh cells (as if it had evaluated them).
  void occupy(std::vector<uint32_t>& cells, size_t from, size_t to) {
    SeqSet seq;
    seq.set(kSeq);
    for (size_t p = from; p < to; ++p) {
      mem->kv()->restore_cell(0, next_cell, static_cast<Pos>(p), seq, 0);
      cells.push_back(next_cell++);
    }
  }

  // kSeq lets go of its cells (the index keeps its pages' cells).
  void release(const std::vector<uint32_t>& cells) {
    const memory::KvCells& c = mem->kv()->cells(0);
    for (uint32_t cell : cells) {
      if (c.is_empty(cell) || !c.has_seq(cell, kSeq)) continue;
      SeqSet seqs = c.seqs(cell);
      seqs.reset(kSeq);
      mem->kv()->restore_cell(0, cell, seqs.none() ? -1 : c.pos(cell), seqs, 0);
    }
  }

  // The cells the index gives kSeq for the first n tokens (after an attach).
  std::vector<uint32_t> attached_cells(std::span<const TokenId> tokens, size_t n) const {
    std::vector<uint32_t> cells;
    for (const auto& page : index->full_pages_along(tokens.first(n), 0))
      cells.insert(cells.end(), page.cells.begin(), page.cells.end());
    if (auto tail = index->tail_along(tokens.first(n), 0))
      cells.insert(cells.end(), tail->cells.begin(), tail->cells.end());
    return cells;
  }
};

}  // namespace

PrefixIndexTiming time_prefix_index(size_t n_pages, uint32_t seed) {
  // The first chain brings kChainPages pages, each later one kChainPages - kSharedPages new ones.
  const size_t beyond_first = n_pages > kChainPages ? n_pages - kChainPages : 0;
  const size_t n_chains = 1 + (beyond_first + kChainPages - kSharedPages - 1) / (kChainPages - kSharedPages);
  const size_t new_per_chain = (kChainPages - kSharedPages) * kPageTokens;
  const size_t n_cells = kSharedPages * kPageTokens + n_chains * new_per_chain + 64;
  Bench b(static_cast<uint32_t>(n_cells));
  std::mt19937 rng(seed);
  std::uniform_int_distribution<TokenId> token(0, 150000);
  PrefixIndexTiming t;
  t.cells = n_cells;

  // The fill: each chain attaches the previous chain's first pages, evaluates the rest
  // (occupy), publishes, and lets go.
  std::vector<std::vector<TokenId>> chains;
  double publish_s = 0;
  size_t published_pages = 0;
  const auto fill0 = Clock::now();
  for (size_t k = 0; k < n_chains; ++k) {
    std::vector<TokenId> tokens(kChainPages * kPageTokens);
    const size_t shared = k == 0 ? 0 : kSharedPages * kPageTokens;
    for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = i < shared ? chains.back()[i] : token(rng);
    std::vector<uint32_t> cells;
    if (shared > 0) {
      b.index->attach(kSeq, tokens, 0, shared);
      cells = b.attached_cells(tokens, shared);
    }
    b.occupy(cells, shared, tokens.size());
    const auto p0 = Clock::now();
    b.index->publish(kSeq, tokens, 0, /*with_tail=*/true);
    publish_s += seconds_since(p0);
    published_pages += (tokens.size() - shared) / kPageTokens;
    b.release(cells);
    chains.push_back(std::move(tokens));
  }
  t.fill_s = seconds_since(fill0);
  t.publish_us_per_page = publish_s * 1e6 / static_cast<double>(published_pages);
  t.pages = b.index->stats().pages;

  // Lookups and attaches of cached prompts: the first kLookupTokens of a random chain.
  constexpr int kRounds = 200;
  std::uniform_int_distribution<size_t> pick(0, chains.size() - 1);
  double lookup_s = 0, attach_s = 0;
  size_t attached_pages = 0;
  for (int r = 0; r < kRounds; ++r) {
    const auto& chain = chains[pick(rng)];
    const std::span<const TokenId> q(chain.data(), kLookupTokens);
    const auto l0 = Clock::now();
    const size_t found = b.index->lookup(q, 0, q.size());
    lookup_s += seconds_since(l0);
    const auto a0 = Clock::now();
    const size_t got = b.index->attach(kSeq, q, 0, found);
    attach_s += seconds_since(a0);
    attached_pages += got / kPageTokens;
    b.release(b.attached_cells(q, got));
  }
  t.lookup_us = lookup_s * 1e6 / kRounds;
  t.attach_us_per_page = attach_s * 1e6 / static_cast<double>(std::max<size_t>(1, attached_pages));

  const size_t before = b.index->stats().pages;
  const auto e0 = Clock::now();
  b.index->evict(kEvictPages * kPageTokens);
  const double evict_s = seconds_since(e0);
  const size_t evicted = before - b.index->stats().pages;
  t.evict_us_per_page = evict_s * 1e6 / static_cast<double>(std::max<size_t>(1, evicted));
  return t;
}

}  // namespace agentkv

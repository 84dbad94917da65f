// The prefix index (memory/prefix_index.h) against a simple reference model: random sequences of
// sequence operations (append tokens, drop a suffix, clear, a context-shift round trip that
// must copy the cache's cells before moving them, every sequence dropped at once), publish,
// attach-prefix, snapshots, eviction, and pages (full and tails) and hybrid snapshots leaving for a
// tier as records and coming back (memory/page_record.h, memory/snapshot_record.h), over many seeds (42,000 attention and 28,000 hybrid operations). The "model" writes into every K row a digest of the tokens up to
// its position (and, hybrid, into the recurrent state a digest of everything absorbed), so a
// cell attached to the wrong chain, a freed cell still named by a page, or a snapshot restored at
// the wrong place shows up as wrong contents; and at random points everything is evicted, which
// must leave no cell that only the index holds (an idle memory can always give its room back). After every operation: the index's own invariants
// (per-cell reference counts equal the pages naming the cell, the holder sequence in exactly
// those cells, the hash table names exactly the full pages), each sequence's positions and
// contents equal the reference, and at the end everything is freed.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <map>
#include <random>
#include <vector>

#include "memory/page_record.h"
#include "memory/prefix_index.h"
#include "memory/sequence_memory.h"
#include "memory/snapshot_record.h"
#include "memory/tiered_prefix_cache.h"

namespace agentkv::memory {
namespace {

constexpr uint32_t kCells = 192;
constexpr int kSeqs = 4;  // sequences 0..3; 4 is the index's holder
constexpr SeqId kHolder = kSeqs;
constexpr int64_t kEmbd = 32;

uint32_t digest(const std::vector<TokenId>& t, size_t n) {
  uint32_t h = 2166136261u;
  for (size_t i = 0; i < n; ++i) h = (h ^ static_cast<uint32_t>(t[i])) * 16777619u;
  return h;
}

// Two floats that hold a 32-bit digest exactly.
void put_digest(float* row, uint32_t d) {
  row[0] = static_cast<float>(d & 0xffff);
  row[1] = static_cast<float>(d >> 16);
}
uint32_t get_digest(const float* row) { return static_cast<uint32_t>(row[0]) | (static_cast<uint32_t>(row[1]) << 16); }

// A memory of one attention layer (F32 rows of kEmbd) and, hybrid, one recurrent layer whose
// state is n_conv + n_ssm floats a sequence.
std::unique_ptr<SequenceMemory> make_memory(bool hybrid, uint32_t n_cells, uint32_t n_seq, int64_t n_conv = 4,
                                            int64_t n_ssm = 4) {
  KvLayout kl;
  kl.layer_has_kv = hybrid ? std::vector<bool>{true, false} : std::vector<bool>{true};
  kl.n_embd_k = kl.n_embd_v = kEmbd;
  kl.type_k = kl.type_v = GgmlType::F32;
  kl.n_cells = n_cells;
  kl.n_seq_max = n_seq;
  std::unique_ptr<RecurrentMemory> rec;
  if (hybrid) {
    RecurrentLayout rl;
    rl.layer_recurrent = {false, true};
    rl.n_conv = n_conv;
    rl.n_ssm = n_ssm;
    rl.n_seq_max = n_seq;
    rec = std::make_unique<RecurrentMemory>(rl);
  }
  return std::make_unique<SequenceMemory>(std::make_unique<KvCache>(kl), std::move(rec));
}

size_t g_resumed_publishes = 0;  // publishes that resumed after a published full page (Harness::publish)

struct Harness {
  bool hybrid;
  std::unique_ptr<SequenceMemory> mem;
  PrefixIndex* index = nullptr;  // the memory's own
  std::map<SeqId, std::vector<TokenId>> ref;  // what every sequence holds
  std::map<SeqId, uint64_t> salt;
  // What each sequence last published and the page hashes it carried (as RequestMemory does):
  // a later publish of tokens continuing them passes both, so the walk resumes there.
  struct Published {
    std::vector<TokenId> tokens;
    std::vector<uint32_t> cells;  // the cells that held them (recomputed tokens are not "published")
    std::vector<uint64_t> hashes;
  };
  std::map<SeqId, Published> published;

  std::vector<uint32_t> cells_of(SeqId seq) const {
    const KvCells& c = mem->kv()->cells(0);
    std::vector<uint32_t> out(ref.at(seq).size(), UINT32_MAX);
    for (uint32_t i = 0; i < c.used_max_p1(); ++i)
      if (!c.is_empty(i) && c.has_seq(i, seq) && static_cast<size_t>(c.pos(i)) < out.size())
        out[static_cast<size_t>(c.pos(i))] = i;
    return out;
  }

  // Publishes seq's tokens, carrying its hashes and resuming where it left off when it still holds
  // what it last published, in the same cells; from scratch (no carried hashes) otherwise.
  void publish(SeqId seq, bool with_tail) {
    const std::vector<TokenId>& toks = ref[seq];
    Published& p = published[seq];
    const std::vector<uint32_t> cells = cells_of(seq);
    const bool continues = p.tokens.size() <= toks.size() && std::equal(p.tokens.begin(), p.tokens.end(), toks.begin()) &&
                           std::equal(p.cells.begin(), p.cells.end(), cells.begin());
    if (!continues) p = {};
    if (p.tokens.size() >= index->config().page_tokens) ++g_resumed_publishes;
    index->publish(seq, toks, salt[seq], with_tail, &p.hashes, p.tokens.size());
    p.tokens = toks;
    p.cells = cells;
    std::vector<uint64_t> fresh;
    index->hasher().extend(toks, salt[seq], fresh);
    ASSERT_EQ(p.hashes, fresh) << "carried page hashes";
  }

  Harness(bool hybrid_, uint32_t page_tokens) : hybrid(hybrid_), mem(make_memory(hybrid_, kCells, kSeqs + 1)) {
    PrefixCacheConfig cfg;
    cfg.page_tokens = page_tokens;
    cfg.holder = kHolder;
    cfg.model_fingerprint = 42;
    cfg.snapshot_bytes = 40 * (sizeof(float) * 8 + 256);  // room for a few dozen snapshots
    index = &enable_prefix_index(*mem, cfg);
    for (SeqId s = 0; s < kSeqs; ++s) ref[s] = {}, salt[s] = static_cast<uint64_t>(s % 2);
  }

  // Appends toks to seq as the model would (K rows get the prefix digests). False when it does
  // not fit even after evicting cached pages.
  bool append(SeqId seq, const std::vector<TokenId>& toks) {
    std::vector<TokenId>& r = ref[seq];
    UBatch ub;
    for (size_t i = 0; i < toks.size(); ++i) ub.add(static_cast<Pos>(r.size() + i), {seq});
    auto placement = mem->prepare(ub);
    if (!placement) {
      index->evict(toks.size());
      placement = mem->prepare(ub);
      if (!placement) return false;
    }
    mem->apply(ub, *placement);
    const size_t base = r.size();
    r.insert(r.end(), toks.begin(), toks.end());
    for (size_t i = 0; i < toks.size(); ++i) {
      auto* row = reinterpret_cast<float*>(mem->kv()->rows().k_data(0, 0) + placement->kv[i].cell * mem->kv()->rows().row_bytes_k());
      put_digest(row, digest(r, base + i + 1));
    }
    if (hybrid) put_digest(mem->rec()->conv_state(1, placement->rec.cell_of(seq)), digest(r, r.size()));
    return true;
  }

  void verify() {
    index->check();
    const KvCache& kv = *mem->kv();
    const KvCells& c = kv.cells(0);
    for (auto& [seq, toks] : ref) {
      ASSERT_EQ(kv.seq_pos_max(seq), static_cast<Pos>(toks.size()) - 1) << "seq " << seq;
      std::vector<int> seen(toks.size(), 0);
      for (uint32_t i = 0; i < c.used_max_p1(); ++i) {
        if (!c.has_seq(i, seq)) continue;
        const Pos p = c.pos(i);
        ASSERT_LT(static_cast<size_t>(p), toks.size()) << "seq " << seq;
        ++seen[static_cast<size_t>(p)];
        const auto* row = reinterpret_cast<const float*>(kv.rows().k_data(0, 0) + i * kv.rows().row_bytes_k());
        ASSERT_EQ(get_digest(row), digest(toks, static_cast<size_t>(p) + 1)) << "seq " << seq << " pos " << p;
      }
      for (size_t p = 0; p < toks.size(); ++p) ASSERT_EQ(seen[p], 1) << "seq " << seq << " pos " << p;
      if (hybrid && !toks.empty()) {
        const RecurrentMemory& rec = *mem->rec();
        ASSERT_EQ(rec.seq_pos_max(seq), static_cast<Pos>(toks.size()) - 1);
        const int32_t cell = rec.seq_cell(seq);
        ASSERT_GE(cell, 0);
        ASSERT_EQ(get_digest(rec.conv_state(1, static_cast<uint32_t>(cell))), digest(toks, toks.size())) << "seq " << seq;
      }
    }
    // Cells nobody holds are free; cached cells are held by the holder.
    uint32_t used = 0;
    for (uint32_t i = 0; i < c.size(); ++i) used += c.is_empty(i) ? 0 : 1;
    ASSERT_EQ(used, c.used());
  }
};

size_t g_adopted_pages = 0;      // pages that came back from records (the tier path really ran)
size_t g_adopted_snapshots = 0;  // hybrid snapshots that did

std::vector<TokenId> random_tokens(std::mt19937& rng, size_t n) {
  std::uniform_int_distribution<TokenId> d(0, 5);  // a small alphabet: chains meet often
  std::vector<TokenId> t(n);
  for (auto& x : t) x = d(rng);
  return t;
}

void run(bool hybrid, uint32_t seed, int n_ops, uint64_t* attached_total, uint64_t* cow_total) {
  std::mt19937 rng(seed);
  const uint32_t page_tokens = std::uniform_int_distribution<uint32_t>(1, 9)(rng);
  Harness h(hybrid, page_tokens);
  auto pick_seq = [&] { return std::uniform_int_distribution<SeqId>(0, kSeqs - 1)(rng); };
  for (int op = 0; op < n_ops; ++op) {
    int kind = std::uniform_int_distribution<int>(0, 13)(rng);
    if (hybrid && kind == 2 && rng() % 2 == 0) kind = 3;
    if (hybrid && kind == 10) kind = 4;  // a hybrid memory cannot shift
    const SeqId s = pick_seq();
    std::vector<TokenId>& toks = h.ref[s];
    switch (kind) {
      case 0:
      case 1: {  // append
        h.append(s, random_tokens(rng, std::uniform_int_distribution<size_t>(1, 12)(rng)));
        break;
      }
      case 2: {  // publish, and what was published is found again
        const bool tail = rng() % 2 == 0;
        h.publish(s, tail);
        if (!toks.empty() && !hybrid) {
          const size_t want = tail ? toks.size() : toks.size() / page_tokens * page_tokens;
          ASSERT_GE(h.index->lookup(toks, h.salt[s], toks.size()), want) << "op " << op;
        }
        break;
      }
      case 3: {  // snapshot (hybrid: what attaching a hybrid prefix needs), found again
        if (!hybrid || toks.empty()) break;
        if (h.index->snapshot(s, toks, h.salt[s])) {
          ASSERT_EQ(h.index->lookup(toks, h.salt[s], toks.size()), toks.size()) << "op " << op;
        }
        break;
      }
      case 4:
      case 5: {  // attach into an empty sequence: another sequence's tokens (cut and extended) or noise
        SeqId d = -1;
        for (SeqId q = 0; q < kSeqs; ++q)
          if (h.ref[q].empty()) d = q;
        if (d < 0) {
          d = s;
          ASSERT_TRUE(h.mem->seq_rm(d, -1, -1));
          h.ref[d].clear();
        }
        const SeqId from = pick_seq();
        std::vector<TokenId> prompt = h.ref[from];
        prompt.resize(std::uniform_int_distribution<size_t>(0, prompt.size())(rng));
        const auto extra = random_tokens(rng, std::uniform_int_distribution<size_t>(0, 6)(rng));
        prompt.insert(prompt.end(), extra.begin(), extra.end());
        if (prompt.empty()) break;
        const size_t max_tokens = std::uniform_int_distribution<size_t>(0, prompt.size())(rng);
        const size_t expect = h.index->lookup(prompt, h.salt[d], max_tokens);
        const size_t n = h.index->attach(d, prompt, h.salt[d], max_tokens);
        ASSERT_EQ(n, expect) << "op " << op;
        ASSERT_LE(n, max_tokens);
        h.ref[d].assign(prompt.begin(), prompt.begin() + static_cast<std::ptrdiff_t>(n));
        *attached_total += n;
        break;
      }
      case 6: {  // drop a suffix (attention) / the whole sequence (hybrid cannot drop a suffix)
        if (toks.empty()) break;
        const size_t keep = hybrid ? 0 : std::uniform_int_distribution<size_t>(0, toks.size() - 1)(rng);
        ASSERT_TRUE(h.mem->seq_rm(s, static_cast<Pos>(keep), -1));
        toks.resize(keep);
        break;
      }
      case 7: {  // clear; half the time after forgetting the pages only s used
        const bool forget = rng() % 2 == 0;
        // When every used cell is s's (s holds all the index's cells and no other sequence has
        // any), forgetting s's pages and dropping s must leave the memory empty.
        const KvCells& c = h.mem->kv()->cells(0);
        bool all_of_s = true;
        for (uint32_t i = 0; i < c.used_max_p1(); ++i) {
          if (c.is_empty(i)) continue;
          SeqSet rest = c.seqs(i);
          rest.reset(static_cast<size_t>(kHolder));
          if (!c.has_seq(i, s) || rest.count() != 1) all_of_s = false;
        }
        if (forget) h.index->forget_own(s);
        ASSERT_TRUE(h.mem->seq_rm(s, -1, -1));
        toks.clear();
        if (forget && all_of_s) {
          ASSERT_EQ(c.used(), 0u) << "op " << op;
          ASSERT_EQ(h.index->stats().pages, 0u) << "op " << op;
        }
        break;
      }
      case 8: {  // eviction
        h.index->evict(std::uniform_int_distribution<size_t>(0, 40)(rng));
        break;
      }
      case 9: {  // a cached prompt attaches in full under its own salt, and never under another
        if (toks.empty() || hybrid) break;
        h.index->publish(s, toks, h.salt[s], /*with_tail=*/true);
        SeqId d = -1;
        for (SeqId q = 0; q < kSeqs; ++q)
          if (h.ref[q].empty()) d = q;
        if (d < 0) break;
        if (h.salt[d] == h.salt[s]) {
          ASSERT_EQ(h.index->attach(d, toks, h.salt[d], toks.size()), toks.size()) << "op " << op;
          h.ref[d] = toks;
        } else {
          // Another salt shares nothing with this chain; a match there is another chain of that salt.
          const size_t n = h.index->attach(d, toks, h.salt[d], toks.size());
          h.ref[d].assign(toks.begin(), toks.begin() + static_cast<std::ptrdiff_t>(n));
        }
        break;
      }
      case 10: {  // a context-shift round trip on s: the cache's pages keep their cells (copy-on-write)
        if (hybrid || toks.empty()) break;
        const Pos p0 = std::uniform_int_distribution<Pos>(0, static_cast<Pos>(toks.size()) - 1)(rng);
        const Pos d = std::uniform_int_distribution<Pos>(1, 5)(rng);
        const KvCells& c = h.mem->kv()->cells(0);
        size_t named = 0;  // cells of s that cached pages name, in the moved range
        for (uint32_t i = 0; i < c.used_max_p1(); ++i)
          if (!c.is_empty(i) && c.has_seq(i, s) && c.has_seq(i, kHolder) && c.pos(i) >= p0) ++named;
        const bool room = kCells - c.used() >= named;
        std::map<SeqId, size_t> before;
        for (SeqId q = 0; q < kSeqs; ++q) before[q] = h.index->lookup(h.ref[q], h.salt[q], h.ref[q].size());
        h.mem->seq_add(s, p0, -1, d);
        ASSERT_NO_THROW(h.index->check()) << "op " << op;
        if (room) {
          *cow_total += named;
          for (SeqId q = 0; q < kSeqs; ++q)  // nothing cached was lost or moved
            if (q != s) ASSERT_EQ(h.index->lookup(h.ref[q], h.salt[q], h.ref[q].size()), before[q]) << "op " << op;
        }
        for (uint32_t i = 0; i < c.used_max_p1(); ++i)  // cached cells never move
          if (!c.is_empty(i) && c.has_seq(i, kHolder)) ASSERT_EQ(c.shift(i), 0) << "op " << op;
        h.mem->seq_add(s, p0 + d, -1, -d);
        break;
      }
      case 11: {  // every sequence goes; the cache stays (rarely: it empties the memory)
        if (rng() % 4 != 0) break;
        std::map<SeqId, size_t> before;
        for (SeqId q = 0; q < kSeqs; ++q) {
          if (!hybrid) h.index->publish(q, h.ref[q], h.salt[q], /*with_tail=*/true);
          before[q] = h.index->lookup(h.ref[q], h.salt[q], h.ref[q].size());
        }
        ASSERT_TRUE(h.mem->seq_rm(-1, -1, -1));
        for (SeqId q = 0; q < kSeqs; ++q) {
          ASSERT_EQ(h.index->lookup(h.ref[q], h.salt[q], h.ref[q].size()), before[q]) << "op " << op;
          h.ref[q].clear();
        }
        break;
      }
      case 12: {  // s's pages, its tail and (hybrid) its snapshot leave for a tier as records, are evicted, and come back
        if (toks.size() < page_tokens) break;
        const uint64_t salt = h.salt[s];
        const bool snap = hybrid && h.index->snapshot(s, toks, salt);
        if (hybrid && !snap) break;
        h.index->publish(s, toks, salt, /*with_tail=*/true);
        const KvCache& kv = *h.mem->kv();
        const size_t n = toks.size();
        std::vector<std::vector<uint8_t>> records;
        for (const auto& page : h.index->full_pages_along(toks, salt))
          records.push_back(encode_page(kv, page.hash, page.first_pos,
                                        std::span<const TokenId>(toks).subspan(page.first_pos, page_tokens), page.cells));
        if (const auto tail = h.index->tail_along(toks, salt)) {
          ASSERT_EQ(tail->hash, h.index->hasher().prefix_hashes(toks, salt, std::span<const size_t>(&n, 1))[0]);
          ASSERT_EQ(tail->first_pos + tail->cells.size(), n);
          records.push_back(encode_page(kv, tail->hash, tail->first_pos, std::span<const TokenId>(toks).subspan(tail->first_pos),
                                        tail->cells));
        } else {
          ASSERT_EQ(n % page_tokens, 0u) << "op " << op;  // a published sequence has a tail unless page-aligned
        }
        std::vector<uint8_t> snap_record;
        uint64_t snap_key = 0;
        if (snap) {
          const auto along = h.index->snapshots_along(toks, salt);
          ASSERT_FALSE(along.empty());
          ASSERT_EQ(along.back().first, n);
          snap_key = snapshot_record_key(h.index->hasher().prefix_hashes(toks, salt, std::span<const size_t>(&n, 1))[0]);
          snap_record = encode_snapshot_record(snap_key, static_cast<uint32_t>(n), *along.back().second);
        }
        const std::vector<TokenId> chain = toks;
        ASSERT_TRUE(h.mem->seq_rm(s, -1, -1));
        toks.clear();
        h.index->evict(SIZE_MAX);
        const size_t before = h.index->cached_kv(chain, salt, chain.size());
        size_t adopted = 0;
        for (const auto& bytes : records) {
          const auto rec = decode_page(kv, bytes);
          ASSERT_TRUE(rec.has_value()) << "op " << op;
          const size_t end = rec->first_pos + rec->tokens.size();
          ASSERT_TRUE(std::equal(rec->tokens.begin(), rec->tokens.end(), chain.begin() + rec->first_pos));
          const bool ok = h.index->adopt_page(std::span<const TokenId>(chain).first(end), salt,
                                              [&](std::span<const uint32_t> cells) { write_page_rows(*h.mem->kv(), *rec, cells); });
          if (!ok && h.index->cached_kv(chain, salt, end) < end) break;  // no room, or the chain was cut: stop there
          g_adopted_pages += ok ? 1 : 0;
          adopted = end;
        }
        ASSERT_GE(h.index->cached_kv(chain, salt, chain.size()), std::max(before, adopted)) << "op " << op;
        // A corrupt record is refused.
        std::vector<uint8_t> bad = records[0];
        bad[bad.size() / 2] ^= 1;
        ASSERT_FALSE(decode_page(kv, bad).has_value());
        if (snap) {
          // Only its own key and position, intact, are accepted.
          ASSERT_FALSE(decode_snapshot_record(*h.mem, snap_record, snap_key ^ 1, static_cast<uint32_t>(n)).has_value());
          ASSERT_FALSE(decode_snapshot_record(*h.mem, snap_record, snap_key, static_cast<uint32_t>(n) + 1).has_value());
          std::vector<uint8_t> damaged = snap_record;
          damaged[damaged.size() / 2] ^= 1;
          ASSERT_FALSE(decode_snapshot_record(*h.mem, damaged, snap_key, static_cast<uint32_t>(n)).has_value());
          if (adopted < n) break;  // the K/V did not all come back: no attach
          auto back = decode_snapshot_record(*h.mem, snap_record, snap_key, static_cast<uint32_t>(n));
          ASSERT_TRUE(back.has_value()) << "op " << op;
          if (!h.index->adopt_snapshot(chain, salt, std::move(*back))) break;  // over the budget
          ++g_adopted_snapshots;
          adopted = n;
        }
        if (adopted > 0) {  // the adopted rows (and state) carry the right digests: attach and let verify() read them
          ASSERT_EQ(h.index->attach(s, chain, salt, adopted), adopted) << "op " << op;
          toks.assign(chain.begin(), chain.begin() + static_cast<std::ptrdiff_t>(adopted));
          *attached_total += adopted;
        }
        break;
      }
      case 13: {  // liveness: evicting everything leaves no cell that only the cache holds
        h.index->evict(SIZE_MAX);
        const PrefixCacheStats st = h.index->stats();
        ASSERT_EQ(st.pages, st.pages_in_use) << "op " << op << ": pages no sequence uses survived eviction";
        const KvCells& c = h.mem->kv()->cells(0);
        SeqSet only_holder;
        only_holder.set(static_cast<size_t>(kHolder));
        for (uint32_t i = 0; i < c.used_max_p1(); ++i)
          ASSERT_FALSE(!c.is_empty(i) && c.seqs(i) == only_holder) << "op " << op << ": cell " << i << " still pinned";
        break;
      }
    }
    ASSERT_NO_FATAL_FAILURE(h.verify()) << "seed " << seed << " op " << op << " kind " << kind;
  }
  // Every sequence goes, then every cached page: nothing is left.
  for (SeqId s = 0; s < kSeqs; ++s) {
    ASSERT_TRUE(h.mem->seq_rm(s, -1, -1));
    h.ref[s].clear();
  }
  h.index->evict(SIZE_MAX);
  ASSERT_NO_FATAL_FAILURE(h.verify());
  EXPECT_EQ(h.index->stats().pages, 0u);
  EXPECT_EQ(h.index->stats().cached_cells, 0u);
  EXPECT_EQ(h.mem->kv()->cells(0).used(), 0u);
}

TEST(PrefixIndex, RandomOperationsAttentionMatchReference) {
  uint64_t attached = 0, copied = 0;
  for (uint32_t seed = 1; seed <= 60; ++seed) ASSERT_NO_FATAL_FAILURE(run(false, seed, 700, &attached, &copied));
  EXPECT_GT(attached, 1500u);  // sharing really happened
  EXPECT_GT(copied, 200u);     // and so did copy-on-write
  EXPECT_GT(g_adopted_pages, 200u);  // and pages coming back from a tier
  EXPECT_GT(g_resumed_publishes, 100u);  // and publishes resuming mid-chain with carried hashes
  std::printf("resumed %zu publishes; ", g_resumed_publishes);
  std::printf("attached %llu tokens, copied %llu cells, adopted %zu pages\n", static_cast<unsigned long long>(attached), static_cast<unsigned long long>(copied), g_adopted_pages);
}

TEST(PrefixIndex, RandomOperationsHybridMatchReference) {
  uint64_t attached = 0, copied = 0;
  for (uint32_t seed = 1; seed <= 40; ++seed) ASSERT_NO_FATAL_FAILURE(run(true, seed, 700, &attached, &copied));
  EXPECT_GT(attached, 150u);
  EXPECT_GT(g_adopted_snapshots, 20u);  // snapshots came back from records with their pages
}

TEST(PrefixIndex, SaltSeparatesTenants) {
  Harness h(false, 4);
  std::mt19937 rng(7);
  const auto toks = random_tokens(rng, 21);
  ASSERT_TRUE(h.append(0, toks));
  h.index->publish(0, toks, /*salt=*/11, true);
  EXPECT_EQ(h.index->lookup(toks, 11, toks.size()), toks.size());
  EXPECT_EQ(h.index->lookup(toks, 12, toks.size()), 0u);
  EXPECT_EQ(h.index->attach(1, toks, 12, toks.size()), 0u);
  EXPECT_EQ(h.index->attach(1, toks, 11, toks.size()), toks.size());
  h.ref[1] = toks;
  h.verify();
}

TEST(PrefixIndex, PartialPageMatchesTokenExact) {
  Harness h(false, 8);
  std::vector<TokenId> a(20), b;
  for (int i = 0; i < 20; ++i) a[static_cast<size_t>(i)] = i;
  ASSERT_TRUE(h.append(0, a));
  h.index->publish(0, a, 0, /*with_tail=*/false);  // pages [0, 8) and [8, 16) only
  b.assign(a.begin(), a.begin() + 13);
  b.push_back(99);
  EXPECT_EQ(h.index->lookup(b, 0, b.size()), 13u);  // 8 by hash, 5 of the second page
  EXPECT_EQ(h.index->attach(1, b, 0, b.size()), 13u);
  h.ref[1].assign(b.begin(), b.begin() + 13);
  h.verify();
  // The cached pages outlive the sequence that computed them, and go when evicted.
  ASSERT_TRUE(h.mem->seq_rm(0, -1, -1));
  h.ref[0].clear();
  ASSERT_TRUE(h.mem->seq_rm(1, -1, -1));
  h.ref[1].clear();
  h.verify();
  EXPECT_EQ(h.mem->kv()->cells(0).used(), 16u);
  EXPECT_EQ(h.index->evict(SIZE_MAX), 16u);
  EXPECT_EQ(h.mem->kv()->cells(0).used(), 0u);
}

// A hybrid prompt diverging where no snapshot is evaluates from the start, computing pages the
// cache holds again: the pages take the new cells (one copy, snapshots kept), so the cache's old
// copy cannot sit above the sequence's new pages where no eviction reaches it (issue 46).
TEST(PrefixIndex, PagesComputedAgainTakeTheNewCells) {
  Harness h(true, 8);
  std::vector<TokenId> x(40), y(40);
  for (int i = 0; i < 40; ++i) x[static_cast<size_t>(i)] = i, y[static_cast<size_t>(i)] = i < 20 ? i : 100 + i;
  ASSERT_TRUE(h.append(0, x));
  ASSERT_TRUE(h.index->snapshot(0, x, 0));
  ASSERT_TRUE(h.mem->seq_rm(0, -1, -1));
  h.ref[0].clear();
  EXPECT_EQ(h.index->lookup(y, 0, y.size()), 0u);  // the only snapshot is at 40: y starts over
  ASSERT_TRUE(h.append(1, y));
  h.index->publish(1, y, 0, /*with_tail=*/false);
  h.verify();
  // x's first two pages now name y's cells: 40 (y) + 24 (x's own last pages) cells, not 56 + 24.
  EXPECT_EQ(h.mem->kv()->cells(0).used(), 64u);
  EXPECT_EQ(h.index->lookup(x, 0, x.size()), x.size());  // x's snapshot still attaches
  // With y running, everything else can go: nothing pins cells y does not use.
  h.index->evict(SIZE_MAX);
  EXPECT_EQ(h.mem->kv()->cells(0).used(), 40u);
  h.verify();
}

// The spacing of snapshots inside long prompts follows the budget: half of it holds the pool's
// worth of them, within [512, 8192] tokens in steps of 256; none when one snapshot is over it.
TEST(PrefixIndex, SnapshotSpacingFollowsTheBudget) {
  auto spacing = [](uint32_t n_cells, size_t budget, size_t* each) {
    auto mem = make_memory(true, n_cells, 2, 1000, 24000);  // 100,000 bytes of state a snapshot
    PrefixCacheConfig cfg;
    cfg.holder = 1;
    cfg.snapshot_bytes = budget;
    PrefixIndex& index = enable_prefix_index(*mem, cfg);
    *each = index.snapshot_bytes_each();
    return index.snapshot_spacing();
  };
  size_t each = 0;
  EXPECT_EQ(spacing(16384, 256u << 20, &each), 512u);  // room for thousands: the floor
  EXPECT_GE(each, 100000u);
  EXPECT_LT(each, 101000u);
  const size_t s = spacing(32768, 40 * each, &each);  // 40 snapshots: 20 span the pool
  EXPECT_EQ(s, 32768u / 20 / 256 * 256 + 256);
  EXPECT_LE((32768 + s - 1) / s * each, 20 * each);
  EXPECT_EQ(spacing(32768, 3 * each, &each), 8192u);  // the ceiling
  EXPECT_EQ(spacing(32768, each - 1, &each), 0u);      // not even one
}

// Where a prompt leaves snapshots is the memory's call (PrefixCache::next_snapshot_point): the
// spacing, kTailSnapshotTokens before the end of a long prompt, the caller's divergence points; the
// chunks a scheduler cuts there and the points it asks about agree.
TEST(PrefixIndex, SnapshotPointsOfAPrompt) {
  auto make = [](bool hybrid) {
    auto mem = make_memory(hybrid, 16384, 2);
    PrefixCacheConfig cfg;
    cfg.holder = 1;
    enable_prefix_index(*mem, cfg);
    return mem;
  };
  auto mem = make(true);
  TieredPrefixCache cache(*mem, *prefix_index_of(*mem));
  const size_t spacing = cache.snapshot_spacing();
  ASSERT_EQ(spacing, PrefixIndex::kMinSnapshotSpacing);
  const size_t len = 1300;
  const std::vector<size_t> divergences = {100, 700};
  // Walking the prompt chunk by chunk visits exactly the points snapshot_belongs_at names.
  std::vector<size_t> cut;
  for (size_t done = 0, next; (next = cache.next_snapshot_point(done, len, divergences)) != 0; done = next) cut.push_back(next);
  EXPECT_EQ(cut, (std::vector<size_t>{100, 512, 700, 1024, len - PrefixCache::kTailSnapshotTokens}));
  for (size_t n = 1; n < len; ++n)
    EXPECT_EQ(cache.snapshot_belongs_at(n, len, divergences), std::count(cut.begin(), cut.end(), n) == 1) << n;
  // A short prompt has no tail point; an attention-only memory has none at all.
  EXPECT_EQ(cache.next_snapshot_point(0, 100, {}), 0u);
  auto dense = make(false);
  TieredPrefixCache dense_cache(*dense, *prefix_index_of(*dense));
  EXPECT_EQ(dense_cache.next_snapshot_point(0, len, divergences), 0u);
  EXPECT_FALSE(dense_cache.snapshot_belongs_at(512, len, divergences));
}

// The salt a sequence's pages are named with (agentkv/prefix_cache.h): tenants apart, and slots
// apart only without sharing.
// follow_chain (what a prompt's text is aligned to): among cached chains, the one a reader takes
// furthest, page by page, with the reader's state carried along it; whole pages lead on, a page
// taken in part ends it; another salt's pages are not offered.
// Two chains under salt 5, pages of 4: a = 100 ... 113 (seq 0) and b, a's first 6 tokens then
// 200 ... 206 (seq 1), parting from a inside its second page.
void publish_two_chains(Harness& h, std::vector<TokenId>& a, std::vector<TokenId>& b) {
  a.resize(14);
  for (int i = 0; i < 14; ++i) a[static_cast<size_t>(i)] = 100 + i;
  b.assign(a.begin(), a.begin() + 6);
  for (int i = 0; i < 7; ++i) b.push_back(200 + i);
  ASSERT_TRUE(h.append(0, a));
  ASSERT_TRUE(h.append(1, b));
  h.index->publish(0, a, 5, /*with_tail=*/true);
  h.index->publish(1, b, 5, /*with_tail=*/true);
}

TEST(PrefixIndex, FollowChainTakesTheChainAReaderReadsFurthest) {
  Harness h(false, 4);
  std::vector<TokenId> a, b;
  ASSERT_NO_FATAL_FAILURE(publish_two_chains(h, a, b));
  // A reader of a target sequence: takes a page's tokens while they continue the target from the
  // state (the offset reached); counts the pages offered.
  size_t offered = 0;
  auto reader_of = [&](const std::vector<TokenId>& target) {
    return [&offered, target](uint64_t at, std::span<const CacheToken> page) {
      ++offered;
      PrefixCache::ChainStep step{0, at};
      while (step.taken < page.size() && step.state < target.size() && page[step.taken] == target[step.state])
        ++step.taken, ++step.state;
      return step;
    };
  };
  std::vector<TokenId> want_b(b.begin(), b.begin() + 11);
  want_b.push_back(999);
  EXPECT_EQ(h.index->follow_chain(5, reader_of(want_b)), std::vector<TokenId>(b.begin(), b.begin() + 11));
  std::vector<TokenId> want_a = a;
  want_a.push_back(7);
  EXPECT_EQ(h.index->follow_chain(5, reader_of(want_a)), a);  // through a's tail page
  EXPECT_EQ(h.index->follow_chain(5, reader_of({1, 2, 3})), std::vector<TokenId>{});
  offered = 0;
  EXPECT_EQ(h.index->follow_chain(6, reader_of(want_a)), std::vector<TokenId>{});
  EXPECT_EQ(offered, 0u);
  h.ref[0] = a;
  h.ref[1] = b;
  h.verify();
}

// continuation (speculative drafts from the pages, RequestMemory::recall): what follows the most
// recently used occurrence of a run, across page boundaries and on through the most recently used
// child page; another salt's pages never.
TEST(PrefixIndex, ContinuationFollowsTheMostRecentlyUsedChain) {
  Harness h(false, 4);
  std::vector<TokenId> a, b;
  ASSERT_NO_FATAL_FAILURE(publish_two_chains(h, a, b));
  using V = std::vector<TokenId>;
  EXPECT_EQ(h.index->continuation(V{101, 102}, 5, 1), V{103});               // inside the first page
  EXPECT_EQ(h.index->continuation(V{104, 105}, 5, 4), (V{200, 201, 202, 203}));  // b's page: used last
  ASSERT_EQ(h.index->attach(2, a, 5, a.size()), a.size());                  // a's pages are used now
  h.ref[2] = a;
  EXPECT_EQ(h.index->continuation(V{104, 105}, 5, 4), (V{106, 107, 108, 109}));
  EXPECT_EQ(h.index->continuation(V{102, 103, 104}, 5, 3), (V{105, 106, 107}));  // across a page boundary
  EXPECT_EQ(h.index->continuation(V{110, 111}, 5, 8), (V{112, 113}));            // on into the tail page
  EXPECT_EQ(h.index->continuation(V{103}, 5, 30), (V{104, 105, 106, 107, 108, 109, 110, 111, 112, 113}));
  EXPECT_EQ(h.index->continuation(V{201, 202}, 5, 2), (V{203, 204}));
  EXPECT_TRUE(h.index->continuation(V{112, 113}, 5, 4).empty());  // nothing after it
  EXPECT_TRUE(h.index->continuation(V{101, 102}, 6, 4).empty());  // another tenant's salt
  EXPECT_TRUE(h.index->continuation(V{999, 101}, 5, 4).empty());
  // The sequences let go: the pages still answer (a conversation nobody holds any more).
  for (SeqId s : {0, 1, 2}) {
    ASSERT_TRUE(h.mem->seq_rm(s, -1, -1));
    h.ref[s].clear();
  }
  EXPECT_EQ(h.index->continuation(V{201, 202}, 5, 2), (V{203, 204}));
  h.verify();
}

TEST(PrefixIndex, PageSaltsKeepNamespacesApart) {
  EXPECT_EQ(cache_namespace(""), 0u);
  EXPECT_NE(cache_namespace("tenant-a"), 0u);
  EXPECT_NE(cache_namespace("tenant-a"), cache_namespace("tenant-b"));
  EXPECT_EQ(cache_namespace("tenant-a"), cache_namespace("tenant-a"));
  const uint64_t a = cache_namespace("tenant-a");
  EXPECT_EQ(page_salt(a, 0, true), page_salt(a, 3, true));
  EXPECT_EQ(page_salt(a, 0, true), a);
  EXPECT_NE(page_salt(a, 0, false), page_salt(a, 3, false));
  EXPECT_NE(page_salt(0, 0, false), page_salt(a, 0, false));
}

}  // namespace
}  // namespace agentkv::memory

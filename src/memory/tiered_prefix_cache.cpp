#include "memory/tiered_prefix_cache.h"

#include <algorithm>
#include <cstdio>

#include "memory/kv_cache.h"
#include "agentkv/error.h"
#include "memory/page_record.h"
#include "memory/snapshot_record.h"

#define XXH_INLINE_ALL
#include <xxhash.h>

namespace agentkv::memory {

size_t TieredPrefixCache::lookup(std::span<const CacheToken> tokens, uint64_t salt, size_t max_tokens,
                                 std::span<const uint64_t> known) const {
  return index_.lookup(tokens, salt, max_tokens, known);
}

size_t TieredPrefixCache::attach(MemorySeqId seq, std::span<const CacheToken> tokens, uint64_t salt, size_t max_tokens) {
  return index_.attach(seq, tokens, salt, max_tokens);
}

size_t TieredPrefixCache::attach_chosen(MemorySeqId seq, std::span<const CacheToken> tokens, uint64_t salt,
                                        std::span<const uint64_t> known, const AttachChoice& choose) {
  return index_.attach_chosen(seq, tokens, salt, choose, known);
}

void TieredPrefixCache::publish(MemorySeqId seq, std::span<const CacheToken> tokens, uint64_t salt, bool with_tail,
                                PageHashes& hashes, size_t published) {
  index_.publish(seq, tokens, salt, with_tail, &hashes, published);
}

bool TieredPrefixCache::snapshot(MemorySeqId seq, std::span<const CacheToken> tokens, uint64_t salt, PageHashes& hashes,
                                 size_t published) {
  return mem_.needs_snapshots() && index_.snapshot(seq, tokens, salt, &hashes, published);
}

size_t TieredPrefixCache::evict(size_t n_cells) { return index_.evict(n_cells); }

size_t TieredPrefixCache::forget_own(MemorySeqId seq) { return index_.forget_own(seq); }

PrefixCacheStats TieredPrefixCache::stats() const { return index_.stats(); }

SequencePages TieredPrefixCache::pages_of(MemorySeqId seq) const { return index_.pages_of(seq); }

}  // namespace agentkv::memory

namespace agentkv {

uint64_t cache_namespace(const std::string& cache_salt) {
  return cache_salt.empty() ? 0 : XXH3_64bits(cache_salt.data(), cache_salt.size()) | 1;
}

uint64_t page_salt(uint64_t cache_namespace, MemorySeqId seq, bool share_across_sequences) {
  if (share_across_sequences) return cache_namespace;
  return cache_namespace ^ (0x9e3779b97f4a7c15ull * static_cast<uint64_t>(seq + 1));
}

}  // namespace agentkv

namespace agentkv::memory {

// Chat templates often render the end of a turn differently once it is history: Qwen's drop the
// thinking block that the generation prompt opened, so the next turn differs from the cache a few
// tokens before the end of the previous prompt, where no end-of-prompt snapshot can help a
// recurrent state. As llama-server does, the last kTailSnapshotTokens of a long prompt are
// evaluated in a step of their own, with a snapshot before them: such a turn then re-evaluates at
// most this many old tokens instead of the whole conversation.
size_t TieredPrefixCache::tail_snapshot_at(size_t prompt_len) const {
  return prompt_len <= 2 * kTailSnapshotTokens ? 0 : prompt_len - kTailSnapshotTokens;
}

bool TieredPrefixCache::snapshot_belongs_at(size_t n, size_t prompt_len, std::span<const size_t> divergences) const {
  if (!mem_.needs_snapshots() || n == 0) return false;
  const size_t spacing = index_.snapshot_spacing();
  return n == tail_snapshot_at(prompt_len) || std::find(divergences.begin(), divergences.end(), n) != divergences.end() ||
         (spacing > 0 && n % spacing == 0);  // inside a long prompt: a divergence re-evaluates at most one spacing
}

size_t TieredPrefixCache::next_snapshot_point(size_t done, size_t prompt_len, std::span<const size_t> divergences) const {
  if (!mem_.needs_snapshots()) return 0;
  size_t next = 0;
  auto consider = [&](size_t at) {
    if (at > done && at < prompt_len && (next == 0 || at < next)) next = at;
  };
  consider(tail_snapshot_at(prompt_len));
  for (size_t at : divergences) consider(at);
  if (const size_t spacing = index_.snapshot_spacing()) consider((done / spacing + 1) * spacing);
  return next;
}

std::vector<size_t> TieredPrefixCache::snapshot_points(std::span<const CacheToken> tokens, uint64_t salt) const {
  std::vector<size_t> out;
  for (const auto& [n_tokens, snap] : index_.snapshots_along(tokens, salt)) out.push_back(n_tokens);
  return out;
}

void TieredPrefixCache::set_tier(PageTier* tier) {
  if (tier && mem_.kv() && mem_.kv()->rows().tail_drops_heads())
    throw Error("page tiers need every head's rows, and this KV cache's tail keeps only the retrieval heads' "
                "(--kv-retrieval-heads): use one or the other");
  tier_ = tier;
}

size_t TieredPrefixCache::send_pages(std::span<const CacheToken> tokens, uint64_t salt, std::span<const uint64_t> known,
                                     bool with_tail, size_t& sent_through) {
  const KvCache* kv = mem_.kv();
  if (!tier_ || !kv) return 0;
  const size_t P = page_tokens();
  size_t sent = 0;
  const auto pages = index_.full_pages_along(tokens, salt, known);
  for (const auto& page : pages) {
    // Pages checked at an earlier call are not asked about again (a round trip each with Redis).
    if (page.first_pos + P <= sent_through) continue;
    send_window_rows(page, tokens.subspan(page.first_pos, P));
    if (tier_->holds(page.hash)) continue;
    tier_->put(page.hash, encode_page(*kv, page.hash, page.first_pos, tokens.subspan(page.first_pos, P), page.cells));
    ++sent;
  }
  if (!pages.empty()) sent_through = std::max(sent_through, static_cast<size_t>(pages.back().first_pos) + P);
  // A turn rarely ends on a page boundary: the tail goes too, so that an instance continuing the
  // conversation evaluates only what is new (tails are named by their content: one record per length).
  if (!with_tail) return sent;
  const auto tail = index_.tail_along(tokens, salt, known);
  if (tail) send_window_rows(*tail, tokens.subspan(tail->first_pos));
  if (!tail || tier_->holds(tail->hash)) return sent;
  tier_->put(tail->hash, encode_page(*kv, tail->hash, tail->first_pos, tokens.subspan(tail->first_pos), tail->cells));
  return sent + 1;
}

void TieredPrefixCache::send_window_rows(const PrefixIndex::PageCells& page, std::span<const CacheToken> tokens) {
  const WindowKv* window = mem_.window();
  if (!window || page.window_cells.empty()) return;
  const uint64_t key = window_record_key(page.hash);
  if (tier_->holds(key)) return;
  tier_->put(key, encode_window_record(window->kv(), key, page.first_pos, tokens, page.window_cells));
}

bool TieredPrefixCache::send_snapshot(std::span<const CacheToken> tokens, uint64_t salt, std::span<const uint64_t> known) {
  if (!tier_ || !mem_.needs_snapshots()) return false;
  const auto snapshots = index_.snapshots_along(tokens, salt, known);
  if (snapshots.empty() || snapshots.back().first != tokens.size()) return false;
  const size_t n = tokens.size();
  const uint64_t key = snapshot_record_key(index_.hasher().prefix_hashes(tokens, salt, std::span<const size_t>(&n, 1), known)[0]);
  if (tier_->holds(key)) return false;
  tier_->put(key, encode_snapshot_record(key, static_cast<uint32_t>(n), *snapshots.back().second));
  return true;
}

namespace {
// A record is used only if it is exactly the page this chain expects: its key, its first position
// and its tokens (those of usable from there, len of them).
bool is_expected_page(const PageRecord& page, uint64_t key, size_t first, size_t len, std::span<const CacheToken> usable) {
  return page.hash == key && page.first_pos == first && page.tokens.size() == len &&
         std::equal(page.tokens.begin(), page.tokens.end(), usable.begin() + static_cast<std::ptrdiff_t>(first));
}
}  // namespace

void TieredPrefixCache::refuse(uint64_t key, const char* why, TierFetch& out) {
  // Damaged, foreign or stale: never used; forgotten, so what is computed now is stored again.
  tier_->forget(key);
  char line[128];
  std::snprintf(line, sizeof line, "record %016llx from the page tier is %s", static_cast<unsigned long long>(key), why);
  out.refused.emplace_back(line);
}

bool TieredPrefixCache::adopt_page(std::span<const CacheToken> usable, uint64_t salt, std::span<const uint64_t> known,
                                   size_t first, size_t len, uint64_t key, std::span<const uint8_t> bytes, TierFetch& out) {
  KvCache& kv = *mem_.kv();
  const auto page = decode_page(kv, bytes);
  if (!page || !is_expected_page(*page, key, first, len, usable)) {
    refuse(key, page ? "not the page this prompt expects" : "damaged", out);
    return false;
  }
  return index_.adopt_page(
      usable.first(first + len), salt, [&](std::span<const uint32_t> cells) { write_page_rows(kv, *page, cells); }, known);
}

TierFetch TieredPrefixCache::fetch(std::span<const CacheToken> usable, uint64_t salt, std::span<const uint64_t> known,
                                   const std::function<void(size_t)>& before_adopt) {
  TierFetch out;
  if (!tier_ || !mem_.kv() || usable.empty()) return out;
  const size_t P = page_tokens();
  // The prompt's page hashes, as carried (the rest computed once here): every walk below takes them.
  PageHashes chain(known.begin(), known.begin() + static_cast<std::ptrdiff_t>(std::min(known.size(), usable.size() / P)));
  index_.hasher().extend(usable, salt, chain);
  // Full pages past the local ones, in one round trip, in chain order up to the first missing.
  size_t full = index_.cached_kv(usable, salt, usable.size(), chain) / P;
  if (full < chain.size()) {
    const std::vector<uint64_t> wanted(chain.begin() + static_cast<std::ptrdiff_t>(full), chain.end());
    const auto records = tier_->get(wanted);
    size_t reach = full;
    while (reach - full < records.size() && records[reach - full]) ++reach;
    if (before_adopt) before_adopt(reach * P);
    for (size_t i = 0; i < records.size() && records[i]; ++i, ++full, ++out.pages)
      if (!adopt_page(usable, salt, chain, full * P, P, wanted[i], *records[i], out)) break;
  }
  // Then the longest tail some instance stored after them (one key per possible length).
  const size_t base = full * P;
  const size_t max_tail = std::min<size_t>(P - 1, usable.size() - std::min(base, usable.size()));
  const size_t held = index_.cached_kv(usable, salt, usable.size(), chain);  // unchanged until a tail is adopted
  if (max_tail > 0 && held < base + max_tail) {
    std::vector<size_t> lengths(max_tail);
    for (size_t k = 0; k < max_tail; ++k) lengths[k] = base + k + 1;
    const std::vector<uint64_t> keys = index_.hasher().prefix_hashes(usable, salt, lengths, chain);
    const auto records = tier_->get(keys);
    for (size_t k = max_tail; k >= 1; --k) {
      if (!records[k - 1] || held >= base + k) continue;
      if (adopt_page(usable, salt, chain, base, k, keys[k - 1], *records[k - 1], out)) {
        ++out.pages;
        break;
      }
    }
  }
  out.kv_through = index_.cached_kv(usable, salt, usable.size(), chain);
  if (keeps_window_rows(mem_)) fetch_window_rows(usable, salt, chain, out);
  if (mem_.needs_snapshots()) fetch_snapshot(usable, salt, chain, out);
  return out;
}

void TieredPrefixCache::fetch_window_rows(std::span<const CacheToken> usable, uint64_t salt, std::span<const uint64_t> known,
                                          TierFetch& out) {
  const size_t P = page_tokens();
  const size_t end = out.kv_through;
  const auto need = static_cast<size_t>(mem_.window()->window() - 1);  // rows a token at `end` sees before it
  if (end == 0 || index_.lookup(usable, salt, end, known) == end) return;  // the index resumes there already
  // The pages holding [end - need, end), last first (a tail ends the chain when end is mid-page).
  const size_t lo = end > need ? end - need : 0;
  std::vector<size_t> ends;  // each page's end within the chain
  for (size_t k = (end - 1) / P + 1; k-- > lo / P;) ends.push_back(std::min((k + 1) * P, end));
  const std::span<const CacheToken> through = usable.first(end);
  const auto pages = index_.full_pages_along(through, salt, known);
  const auto tail = index_.tail_along(through, salt, known);
  std::vector<size_t> lacking;
  for (size_t e : ends) {
    const bool held = e % P != 0 ? tail && !tail->window_cells.empty()
                                 : e / P <= pages.size() && !pages[e / P - 1].window_cells.empty();
    if (!held) lacking.push_back(e);
  }
  if (lacking.empty()) return;
  std::vector<uint64_t> keys = index_.hasher().prefix_hashes(usable, salt, lacking, known);
  for (uint64_t& k : keys) k = window_record_key(k);
  const auto records = tier_->get(keys);
  KvCache& window = mem_.window()->kv();
  for (size_t i = 0; i < lacking.size(); ++i) {
    if (!records[i]) return;  // the rows before it are of no use without it
    const size_t e = lacking[i], first = (e - 1) / P * P;
    const auto page = decode_window_record(window, *records[i]);
    if (!page || !is_expected_page(*page, keys[i], first, e - first, usable)) {
      refuse(keys[i], page ? "not the window rows this prompt expects" : "damaged", out);
      return;
    }
    if (!index_.adopt_window_rows(usable.first(e), salt, [&](std::span<const uint32_t> cells) { write_page_rows(window, *page, cells); },
                                  known))
      return;
    ++out.window_pages;
  }
}

void TieredPrefixCache::fetch_snapshot(std::span<const CacheToken> usable, uint64_t salt, std::span<const uint64_t> known,
                                       TierFetch& out) {
  const size_t P = page_tokens();
  const size_t kv_end = out.kv_through;
  const size_t start = index_.lookup(usable, salt, usable.size(), known);  // where a local snapshot lets the prompt start
  if (kv_end <= start) return;
  // Furthest first: every position of the last page the K/V reach (a turn ends anywhere), then
  // page boundaries before it, a few round trips at most.
  std::vector<std::vector<size_t>> rounds(1);
  for (size_t n = kv_end; n > start && n + P > kv_end; --n) rounds[0].push_back(n);
  constexpr size_t kBoundariesPerRound = 64, kBoundaryRounds = 3;
  std::vector<size_t> boundaries;
  for (size_t n = kv_end >= P ? (kv_end - P) / P * P : 0; n > start && boundaries.size() < kBoundariesPerRound * kBoundaryRounds;
       n -= P)
    boundaries.push_back(n);  // n > start >= 0 and a multiple of P: n - P does not wrap
  for (size_t i = 0; i < boundaries.size(); i += kBoundariesPerRound)
    rounds.emplace_back(boundaries.begin() + static_cast<std::ptrdiff_t>(i),
                        boundaries.begin() + static_cast<std::ptrdiff_t>(std::min(boundaries.size(), i + kBoundariesPerRound)));
  for (const std::vector<size_t>& positions : rounds) {
    if (positions.empty()) continue;
    std::vector<uint64_t> keys = index_.hasher().prefix_hashes(usable, salt, positions, known);
    for (uint64_t& k : keys) k = snapshot_record_key(k);
    const auto records = tier_->get(keys);
    for (size_t i = 0; i < positions.size(); ++i) {
      if (!records[i]) continue;
      auto snapshot = decode_snapshot_record(mem_, *records[i], keys[i], static_cast<uint32_t>(positions[i]));
      if (!snapshot) {
        refuse(keys[i], "not a snapshot this memory can take", out);
        continue;
      }
      if (!index_.adopt_snapshot(usable.first(positions[i]), salt, std::move(*snapshot), known)) continue;
      out.snapshot = true;
      out.snapshot_at = positions[i];
      return;
    }
  }
}

}  // namespace agentkv::memory

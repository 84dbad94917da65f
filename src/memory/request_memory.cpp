#include "agentkv/request_memory.h"

#include <algorithm>
#include <stdexcept>

#include "agentkv/error.h"
#include "agentkv/token_match.h"
#include "memory/prompt_align.h"
#include "memory/sequence_cache.h"

namespace agentkv {

const char* reuse_source_name(ReuseSource s) {
  switch (s) {
    case ReuseSource::None: return "none";
    case ReuseSource::Own: return "own";
    case ReuseSource::Shared: return "shared";
    case ReuseSource::Snapshot: return "snapshot";
  }
  return "?";
}

using memory::SequenceCache;

struct RequestMemory::Impl {
  RequestMemoryHooks hooks;
  RequestMemoryConfig cfg;
  std::vector<SequenceCache> seqs;
  RequestMemoryCounters counters;
  uint64_t tick = 0;
  // A speculative pass in flight on a sequence (begin_drafts .. end_drafts).
  struct DraftPass {
    bool open = false;
    size_t base = 0;               // the sequence's tokens before the pass
    size_t n_evaluated = 0;        // positions the pass evaluated after them
    std::function<bool(size_t)> settle;  // hybrid: the recurrent state after base + n accepted tokens
  };
  std::vector<DraftPass> passes;

  MemoryInterface& mem() { return *hooks.memory; }
  PrefixCache* cache() const { return hooks.cache; }
  size_t page_tokens() const { return cache() ? cache()->page_tokens() : 0; }  // 0: no prefix cache
  SequenceCache& at(MemorySeqId seq) {
    if (seq < 0 || seq >= static_cast<MemorySeqId>(seqs.size()))
      throw Error("request memory: sequence " + std::to_string(seq) + " out of range");
    return seqs[static_cast<size_t>(seq)];
  }
  uint64_t salt(MemorySeqId seq) { return agentkv::page_salt(at(seq).ns, seq, cfg.share_prefixes); }
  void log(MemorySeqId seq, const std::string& line) {
    if (hooks.log) hooks.log(seq, line);
  }

  // seq leaves memory; its namespace stays (a request of the same tenant refills it).
  void drop(MemorySeqId seq) {
    mem().seq_rm(seq, -1, -1);
    at(seq).clear();
    passes[static_cast<size_t>(seq)] = {};
  }

  // Closes seq's speculative pass: the positions evaluated past its tokens go; returns the accepted
  // tokens a recurrent state gave back (it went back to the pass's start).
  std::vector<CacheToken> settle_drafts(MemorySeqId seq) {
    SequenceCache& s = at(seq);
    DraftPass pass = std::move(passes[static_cast<size_t>(seq)]);
    passes[static_cast<size_t>(seq)] = {};
    if (!pass.open) return {};
    if (s.size() >= pass.base + pass.n_evaluated) {  // every evaluated token accepted
      if (pass.settle) pass.settle(s.size() - pass.base);
      return {};
    }
    // A recurrent state first goes to the one after the accepted tokens (the hook replays them).
    if (!pass.settle || pass.settle(s.size() - pass.base)) {
      if (!mem().seq_rm(seq, static_cast<MemoryPos>(s.size()), -1))
        throw Error("request memory: the memory cannot drop the rejected drafts");
      return {};
    }
    // The state is the pass's start's: the tokens after it are evaluated again.
    mem().seq_rm(seq, static_cast<MemoryPos>(pass.base), -1);  // the K/V rows from the pass's start
    std::vector<CacheToken> given_back(s.tokens().begin() + static_cast<std::ptrdiff_t>(pass.base), s.tokens().end());
    s.truncate(pass.base, page_tokens());  // the full pages before base keep their hashes
    return given_back;
  }
  // seq leaves memory and its namespace.
  void wipe(MemorySeqId seq) {
    drop(seq);
    at(seq).ns = 0;
  }
  // Keeps seq's first n tokens; false (nothing changed) when the memory cannot drop the rest.
  bool keep_first(MemorySeqId seq, size_t n) {
    SequenceCache& s = at(seq);
    if (n >= s.size()) return true;
    if (!mem().seq_rm(seq, static_cast<MemoryPos>(n), -1)) return false;
    s.truncate(n, page_tokens());
    return true;
  }

  void publish(MemorySeqId seq, bool with_tail) {
    SequenceCache& s = at(seq);
    if (!cache() || !s.exact() || s.size() == 0) return;
    const size_t P = cache()->page_tokens();
    // Between task ends only whole pages are new, and only when one has filled up.
    if (!with_tail && s.size() / P <= s.published / P) return;
    cache()->publish(seq, s.tokens(), salt(seq), with_tail, s.hashes, s.published);
    s.published = s.size();
    send_to_tier(seq, with_tail);
  }
  void send_to_tier(MemorySeqId seq, bool with_tail) {
    SequenceCache& s = at(seq);
    if (!cache() || !cache()->has_tier() || !s.exact()) return;
    counters.tier_pages_sent += cache()->send_pages(s.tokens(), salt(seq), s.hashes, with_tail, s.tier_sent);
  }
  void keep_state(MemorySeqId seq) {
    SequenceCache& s = at(seq);
    if (!hooks.needs_snapshots || !cache() || !s.exact() || s.size() == 0) return;
    // The recurrent state on the sequence's page chain: this sequence (after a divergence) and
    // any whose prompt continues the chain can start here.
    if (cache()->snapshot(seq, s.tokens(), salt(seq), s.hashes, s.published)) {
      ++counters.snapshots_taken;
      if (cache()->has_tier()) {
        send_to_tier(seq, /*with_tail=*/true);  // the K/V the snapshot follows
        if (cache()->send_snapshot(s.tokens(), salt(seq), s.hashes)) ++counters.tier_snapshots_sent;
      }
    }
    s.published = s.size();
  }

  // seq keeps its first `target` tokens in place; false (nothing changed) when its memory cannot
  // drop the rest.
  bool keep_own(MemorySeqId seq, size_t target, PromptReuse& r) {
    if (!keep_first(seq, target)) {
      if (!cache()) {  // nowhere to go back to: start over
        drop(seq);
        r.state_refused = target > 0;
        r.n_kept = 0;
        r.source = ReuseSource::None;
        return true;
      }
      return false;
    }
    r.n_kept = target;
    r.source = target > 0 ? ReuseSource::Own : ReuseSource::None;
    return true;
  }

  // What seq's own tokens would keep of the prompt (hybrid: down to its latest snapshot).
  size_t own_reuse(MemorySeqId seq, std::span<const CacheToken> prompt, std::span<const uint64_t> hashes) {
    SequenceCache& s = at(seq);
    const size_t keep = s.reusable(prompt);
    if (!hooks.needs_snapshots || keep == s.size()) return keep;
    return cache() ? cache()->lookup(prompt.first(keep), salt(seq), keep, hashes) : 0;
  }

  // The page tiers: what they hold of the prompt beyond the local pages comes in before the
  // match. The pool may be full of seq's own tokens (another conversation): when the tier gives
  // more of this prompt, seq lets them go (its pages stay indexed, unused and evictable).
  TierFetch fetch_from_tier(MemorySeqId seq, std::span<const CacheToken> prompt, std::span<const uint64_t> hashes) {
    if (!cache() || !cache()->has_tier() || prompt.size() < 2) return {};
    auto make_room = [&](size_t reach) {
      if (at(seq).size() > 0 && reach > own_reuse(seq, prompt, hashes)) drop(seq);
    };
    TierFetch got = cache()->fetch(prompt.first(prompt.size() - 1), salt(seq), hashes, make_room);
    for (const std::string& why : got.refused) log(seq, why + ": dropped, its tokens are computed again");
    counters.tier_pages_refused += got.refused.size();
    counters.tier_pages_fetched += got.pages;
    if (got.pages > 0)
      log(seq, "fetched " + std::to_string(got.pages) + " pages (K/V through position " + std::to_string(got.kv_through) +
                   ") from the page tier");
    if (got.window_pages > 0)
      log(seq, "fetched the window rows of " + std::to_string(got.window_pages) + " pages from the page tier");
    if (got.snapshot) {
      ++counters.tier_snapshots_fetched;
      log(seq, "fetched the state snapshot at position " + std::to_string(got.snapshot_at) + " from the page tier");
    }
    return got;
  }

  bool make_room(MemorySeqId except) {
    // Cached pages no sequence uses go first, least recently used first.
    if (cache() && cache()->evict(cfg.evict_step_cells) > 0) return true;
    SequenceCache* lru = nullptr;
    MemorySeqId lru_id = -1;
    for (size_t i = 0; i < seqs.size(); ++i) {
      SequenceCache& s = seqs[i];
      if (static_cast<MemorySeqId>(i) == except || s.busy || s.size() == 0) continue;
      if (!lru || s.last_used < lru->last_used) lru = &s, lru_id = static_cast<MemorySeqId>(i);
    }
    if (!lru) return false;
    log(lru_id, "memory is full; dropping this idle slot's cache (" + std::to_string(lru->size()) + " tokens)");
    wipe(lru_id);
    ++counters.sequences_dropped;
    return true;
  }
};

RequestMemory::RequestMemory(RequestMemoryHooks hooks, RequestMemoryConfig cfg) : impl_(std::make_unique<Impl>()) {
  if (!hooks.memory) throw Error("request memory: no memory");
  if (cfg.n_seqs < 1) throw Error("request memory: needs a sequence");
  impl_->hooks = std::move(hooks);
  impl_->cfg = cfg;
  impl_->seqs.resize(static_cast<size_t>(cfg.n_seqs));
  impl_->passes.resize(static_cast<size_t>(cfg.n_seqs));
}

RequestMemory::~RequestMemory() = default;

PromptReuse RequestMemory::begin(MemorySeqId seq, std::span<const CacheToken> prompt, const RequestPlan& plan) {
  Impl& m = *impl_;
  SequenceCache& s = m.at(seq);
  m.settle_drafts(seq);
  // Another namespace's tokens are another tenant's: never reused.
  if (s.ns != plan.cache_namespace) {
    if (s.size() > 0) m.drop(seq);
    s.ns = plan.cache_namespace;
  }
  s.start_request(prompt.size(), plan.divergences, ++m.tick);
  PromptReuse r;
  r.n_cached = s.size();
  r.n_common = common_prefix(s.tokens(), prompt);
  if (r.n_common < s.size()) r.cached_at_divergence = s.tokens()[r.n_common];
  if (!plan.cache_prompt) {
    // A prompt evaluated without the cache replaces the sequence's (as in llama-server): the
    // pages only it used go.
    if (m.cache()) m.cache()->forget_own(seq);
    m.drop(seq);
    return r;
  }
  // The prompt's page hashes: its one hash pass, carried to every walk of its chain (the tiers, the
  // match, and the sequence's publishing as it absorbs the prompt).
  PageHashes hashes;
  if (m.cache()) m.cache()->hash_pages(prompt, m.salt(seq), hashes);
  // The tiers first (they add pages the match then finds); their room check may ask what the
  // sequence's own tokens give.
  r.fetched = m.fetch_from_tier(seq, prompt, hashes);
  // The sequence's own tokens (what is left of them after the fetch): their common prefix with
  // the prompt, less the last prompt token unless the logits after it were kept.
  const size_t target = s.reusable(prompt);
  r.use_saved_logits = !prompt.empty() && target == prompt.size();
  if (!m.cache()) {
    m.keep_own(seq, target, r);
  } else {
    // One match of the prompt decides between the sequence's own tokens and pages any sequence
    // computed (at least the last prompt token is evaluated: its logits are needed), and attaches
    // what wins.
    const size_t n = m.cache()->attach_chosen(seq, prompt, m.salt(seq), hashes, [&](const PrefixCache::UsablePrefix& usable) {
      const bool keeps_in_place = !m.hooks.needs_snapshots || target == s.size();
      const size_t own = keeps_in_place ? target : usable(target);  // hybrid: down to its latest snapshot
      const size_t shared = prompt.size() >= 2 ? usable(prompt.size() - 1) : 0;
      if (shared > own) {
        r.source = ReuseSource::Shared;
        m.drop(seq);
        return prompt.size() - 1;
      }
      if (m.keep_own(seq, target, r)) return size_t{0};
      // A recurrent state cannot forget a suffix: the sequence takes its own pages back, up to
      // the latest snapshot before the divergence (or starts over). Its tokens and kept logits
      // up to there stay.
      m.mem().seq_rm(seq, -1, -1);
      r.source = ReuseSource::Snapshot;
      return target;
    });
    if (r.source == ReuseSource::Shared) {
      s.assume(std::vector<CacheToken>(prompt.begin(), prompt.begin() + static_cast<std::ptrdiff_t>(n)));
      s.published = n;
      r.n_kept = n;
      ++m.counters.shared_attaches;
      m.log(seq, "attached " + std::to_string(n) + " prompt tokens from cached pages");
    } else if (r.source == ReuseSource::Snapshot) {
      s.truncate(n, m.page_tokens());
      r.state_refused = target > 0 && n == 0;
      r.n_kept = n;
      if (n > 0) ++m.counters.snapshots_restored;
      else r.source = ReuseSource::None;
    }
  }
  if (r.n_kept != prompt.size()) r.use_saved_logits = false;
  s.hashes = std::move(hashes);  // the prompt's: the sequence holds its first n_kept tokens and reads the rest
  // What was published beyond the kept prefix is gone from the sequence: publish again from there.
  s.forget_sent_beyond(s.size());
  s.reading_prompt = r.n_kept < prompt.size();
  return r;
}

bool RequestMemory::begin_fake(MemorySeqId seq, std::span<const CacheToken> prompt, size_t n_fake, std::string& error) {
  Impl& m = *impl_;
  SequenceCache& s = m.at(seq);
  m.drop(seq);
  while (true) {
    try {
      m.hooks.fake_prefix(seq, static_cast<MemoryPos>(n_fake));
      break;
    } catch (const Error& e) {
      if (m.make_room(-1)) continue;
      error = e.what();
      return false;
    }
  }
  s.start_request(prompt.size(), {}, ++m.tick);
  s.assume(std::vector<CacheToken>(prompt.begin(), prompt.begin() + static_cast<std::ptrdiff_t>(n_fake)));
  s.fake = true;
  s.reading_prompt = n_fake < prompt.size();
  return true;
}

size_t RequestMemory::prompt_chunk(MemorySeqId seq, size_t done, size_t budget) const {
  const SequenceCache& s = impl_->seqs.at(static_cast<size_t>(seq));
  size_t take = std::min(s.prompt_len - std::min(done, s.prompt_len), budget);
  if (!impl_->cache() || s.fake) return take;
  const size_t point = impl_->cache()->next_snapshot_point(done, s.prompt_len, s.divergences);
  if (point > 0 && done + take > point) take = point - done;
  return take;
}

void RequestMemory::advance(MemorySeqId seq, std::span<const CacheToken> tokens) {
  Impl& m = *impl_;
  SequenceCache& s = m.at(seq);
  for (CacheToken t : tokens) s.append(t);
  if (s.reading_prompt) {
    // The end of this turn's prompt, and the points prompt_chunk cut the batches at.
    const bool at_end = s.size() >= s.prompt_len;
    if (at_end) s.reading_prompt = false;
    if (at_end || (m.cache() && !s.fake && m.cache()->snapshot_belongs_at(s.size(), s.prompt_len, s.divergences)))
      m.keep_state(seq);
  }
  m.publish(seq, /*with_tail=*/false);
}

void RequestMemory::keep_logits(MemorySeqId seq, std::span<const float> logits) {
  SequenceCache& s = impl_->at(seq);
  if (!s.fake) s.keep_logits(logits);
}

void RequestMemory::keep_state(MemorySeqId seq) {
  impl_->settle_drafts(seq);
  impl_->keep_state(seq);
}

void RequestMemory::end(MemorySeqId seq) {
  Impl& m = *impl_;
  SequenceCache& s = m.at(seq);
  m.settle_drafts(seq);
  // A fake prefix is no cache: its cells hold zeros, not the prompt's keys.
  if (s.fake) wipe(seq);
  if (s.shifted) {  // only the front no shift touched is what a prefill computes (shifts need a dense memory)
    const size_t keep = s.shift_keep;
    s.shifted = false;
    if (!m.keep_first(seq, keep)) wipe(seq);
    s.forget_sent_beyond(s.size());
  }
  m.publish(seq, /*with_tail=*/true);
  s.busy = false;
  s.reading_prompt = false;
  s.last_used = ++m.tick;
}

void RequestMemory::begin_drafts(MemorySeqId seq, size_t n_evaluated) {
  Impl& m = *impl_;
  m.settle_drafts(seq);
  Impl::DraftPass& pass = m.passes[static_cast<size_t>(seq)];
  pass.base = m.at(seq).size();
  pass.n_evaluated = n_evaluated;
  pass.settle = m.hooks.recurrent_pass ? m.hooks.recurrent_pass(seq) : nullptr;
  pass.open = true;
}

std::vector<CacheToken> RequestMemory::end_drafts(MemorySeqId seq) { return impl_->settle_drafts(seq); }

std::vector<CacheToken> RequestMemory::recall(MemorySeqId seq, std::span<const CacheToken> history, size_t k) const {
  const Impl& m = *impl_;
  const SequenceCache& own = m.seqs.at(static_cast<size_t>(seq));
  if (k == 0) return {};
  // Other tenants' text never drafts: the speed of an answer would tell what their caches hold.
  std::vector<const SequenceCache*> others;
  for (size_t i = 0; i < m.seqs.size(); ++i)
    if (static_cast<MemorySeqId>(i) != seq && !m.seqs[i].fake && m.seqs[i].ns == own.ns && m.seqs[i].size() > 0)
      others.push_back(&m.seqs[i]);
  std::sort(others.begin(), others.end(),
            [](const SequenceCache* a, const SequenceCache* b) { return a->last_used > b->last_used; });
  for (size_t n = 4; n >= 3; --n) {  // shorter tails match too much text that is not this one
    if (history.size() < n) continue;
    const std::span<const CacheToken> tail = history.last(n);
    for (const SequenceCache* other : others) {
      const std::vector<CacheToken>& t = other->tokens();
      const std::optional<size_t> from = after_latest_occurrence(t, tail);
      if (!from) continue;
      return std::vector<CacheToken>(t.begin() + static_cast<std::ptrdiff_t>(*from),
                                     t.begin() + static_cast<std::ptrdiff_t>(std::min(t.size(), *from + k)));
    }
    // Then the pages of the namespace: conversations no sequence holds any more. (The salt of
    // seq's own pages: with sharing off only its own, as a prompt would find them.)
    if (m.cache()) {
      std::vector<CacheToken> paged = m.cache()->continuation(tail, agentkv::page_salt(own.ns, seq, m.cfg.share_prefixes), k);
      if (!paged.empty()) return paged;
    }
  }
  return {};
}

bool RequestMemory::make_room(MemorySeqId except) { return impl_->make_room(except); }

bool RequestMemory::make_room_for(MemorySeqId seq, size_t n_cells) {
  Impl& m = *impl_;
  auto free_cells = [&] {
    while (n_cells > m.hooks.cells_free_for(seq) && m.make_room(seq)) continue;
  };
  free_cells();
  if (n_cells > m.hooks.cells_free_for(seq) && m.at(seq).size() > 0) {
    // seq's own cells are cached pages too (held for the cache even once it lets them go): what
    // comes replaces them anyway, so it lets go and they become evictable.
    wipe(seq);
    free_cells();
  }
  return n_cells <= m.hooks.cells_free_for(seq);
}

void RequestMemory::wipe(MemorySeqId seq) { impl_->wipe(seq); }

void RequestMemory::shifted(MemorySeqId seq, std::vector<CacheToken> tokens, size_t untouched) {
  SequenceCache& s = impl_->at(seq);
  s.shift_keep = s.shifted ? std::min(s.shift_keep, untouched) : untouched;
  s.assume(std::move(tokens));
  s.shifted = true;
}

void RequestMemory::restored(MemorySeqId seq, std::vector<CacheToken> tokens, std::vector<float> logits) {
  Impl& m = *impl_;
  SequenceCache& s = m.at(seq);
  s.assume(std::move(tokens), std::move(logits));
  s.ns = 0;  // a state file carries no salt
  s.forget_sent_beyond(0);
  s.last_used = ++m.tick;
  // The restored sequence's pages join the index.
  m.publish(seq, /*with_tail=*/true);
}

std::span<const CacheToken> RequestMemory::tokens(MemorySeqId seq) const {
  return impl_->seqs.at(static_cast<size_t>(seq)).tokens();
}

std::span<const float> RequestMemory::saved_logits(MemorySeqId seq, size_t n) const {
  return impl_->seqs.at(static_cast<size_t>(seq)).saved_logits(n);
}

uint64_t RequestMemory::cache_namespace_of(MemorySeqId seq) const { return impl_->seqs.at(static_cast<size_t>(seq)).ns; }

uint64_t RequestMemory::page_salt(MemorySeqId seq, uint64_t cache_namespace) const {
  return agentkv::page_salt(cache_namespace, seq, impl_->cfg.share_prefixes);
}

bool RequestMemory::exact(MemorySeqId seq) const { return impl_->seqs.at(static_cast<size_t>(seq)).exact(); }

bool RequestMemory::fake(MemorySeqId seq) const { return impl_->seqs.at(static_cast<size_t>(seq)).fake; }

size_t RequestMemory::cached_prefix(std::span<const CacheToken> prompt, uint64_t cache_namespace) const {
  if (!impl_->cache()) return 0;
  size_t best = 0;
  const int n = impl_->cfg.share_prefixes ? 1 : impl_->cfg.n_seqs;
  for (MemorySeqId id = 0; id < n; ++id)
    best = std::max(best, impl_->cache()->lookup(prompt, page_salt(id, cache_namespace), prompt.size(), {}));
  return best;
}

AlignedPrompt RequestMemory::align_prompt(const Tokenizer& tok, std::string_view text,
                                          const std::vector<CacheToken>& plain, uint64_t cache_namespace,
                                          std::span<const CacheToken> unevaluated,
                                          std::span<const CacheToken> before) const {
  std::vector<std::vector<CacheToken>> caches;
  for (MemorySeqId id = 0; id < impl_->cfg.n_seqs; ++id) {
    const SequenceCache& s = impl_->seqs[static_cast<size_t>(id)];
    if (s.fake || s.size() == 0 || s.ns != cache_namespace) continue;  // another tenant's tokens
    const std::span<const CacheToken> held = s.tokens();
    if (held.size() < before.size() || !std::equal(before.begin(), before.end(), held.begin())) continue;
    caches.emplace_back(held.begin() + static_cast<std::ptrdiff_t>(before.size()), held.end());
    // A finished answer ends with a token that was sampled, not evaluated: with it the cached text
    // reaches the answer's end, where the next prompt's own tokenization resumes.
    if (static_cast<size_t>(id) < unevaluated.size() && unevaluated[static_cast<size_t>(id)] >= 0)
      caches.back().push_back(unevaluated[static_cast<size_t>(id)]);
  }
  // Pages an ended conversation left (its sequence since serving another): the chain whose text
  // the prompt's continues furthest. Only shared pages are one chain per namespace.
  if (impl_->cache() && impl_->cfg.share_prefixes && before.empty()) {
    std::vector<CacheToken> chain =
        impl_->cache()->follow_chain(agentkv::page_salt(cache_namespace, 0, true), memory::text_chain_reader(tok, text));
    // Usually a sequence still holds the conversation the chain came from: then its tokens already
    // give all the chain would (aligning to both would read the same text twice).
    const bool held = std::any_of(caches.begin(), caches.end(), [&](const std::vector<CacheToken>& c) {
      return c.size() >= chain.size() && std::equal(chain.begin(), chain.end(), c.begin());
    });
    if (!chain.empty() && !held) caches.push_back(std::move(chain));
  }
  return memory::align_to_cache(tok, text, plain, caches);
}

PrefixCache* RequestMemory::prefix_cache() const { return impl_->cache(); }

RequestMemoryCounters RequestMemory::counters() const { return impl_->counters; }

}  // namespace agentkv

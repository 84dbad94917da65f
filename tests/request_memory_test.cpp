// The request-level memory (agentkv/request_memory.h): what begin() keeps of a prompt on a dense
// and on a hybrid model (llama-server's n_past-- rule, saved logits, snapshot rollback, pages other
// sequences computed), and a property test: random requests, decodes, ends, make_room and wipes
// against a reference model of what each sequence holds.
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "agentkv/context.h"
#include "agentkv/numerics.h"
#include "agentkv/request_memory.h"
#include "memory/sequence_cache.h"
#include "model/model.h"
#include "fixtures.h"
#include "request_chunks.h"

namespace agentkv {
namespace {

const std::string kFixtures = AGENTKV_FIXTURES_DIR;
using Tokens = std::vector<CacheToken>;

TEST(RequestMemory, WholePromptCachedStillEvaluatesItsLastToken) {
  using memory::reusable_prefix;
  EXPECT_EQ(reusable_prefix(Tokens{1, 2, 3}, Tokens{1, 2, 3}), 2u);     // identical: n_past--
  EXPECT_EQ(reusable_prefix(Tokens{1, 2, 3, 4}, Tokens{1, 2, 3}), 2u);  // prompt inside the cache
  EXPECT_EQ(reusable_prefix(Tokens{1, 2}, Tokens{1, 2, 3, 4}), 2u);     // extension: all of the cache
  EXPECT_EQ(reusable_prefix(Tokens{1, 9, 3}, Tokens{1, 2, 3}), 1u);     // divergence
  EXPECT_EQ(reusable_prefix(Tokens{1}, Tokens{1}), 0u);
  EXPECT_EQ(reusable_prefix(Tokens{1}, Tokens{}), 0u);
}

// A context and its request memory, as the scheduler makes them: sequences 0 .. n_seqs-1 serve
// requests, sequence n_seqs holds cached pages (with_cache: the context has one more).
struct Rig {
  std::unique_ptr<Model> model;
  std::unique_ptr<Context> ctx;
  std::unique_ptr<RequestMemory> mem;

  Rig(const std::string& gguf, int n_seqs, bool with_cache, uint32_t n_ctx = 64, uint32_t page_tokens = 2) {
    model = Model::load(kFixtures + "/models/" + gguf);
    ContextParams cp;
    cp.n_ctx = n_ctx;
    cp.n_seq_max = static_cast<uint32_t>(n_seqs + (with_cache ? 1 : 0));
    cp.n_threads = 1;
    ctx = std::make_unique<Context>(*model, cp);
    RequestMemoryConfig cfg;
    cfg.n_seqs = n_seqs;
    cfg.evict_step_cells = 8;
    cfg.page_tokens = page_tokens;
    mem = ctx->open_request_memory(cfg);
    EXPECT_EQ(mem->prefix_cache() != nullptr, with_cache);
  }

  // Decodes `tokens` after what seq holds, in chunks the memory allows, and tells the memory.
  // False: no room (nothing of that chunk was absorbed).
  bool evaluate(MemorySeqId seq, const Tokens& tokens, bool prompt = true) {
    return testing_support::evaluate_in_chunks(*ctx, *mem, seq, tokens, prompt);
  }
  std::span<const float> last_logits() const {
    return {ctx->last_logits(), static_cast<size_t>(model->n_vocab())};
  }
};

TEST(RequestMemory, DenseKeepsThePrefixAndDropsTheRest) {
  AGENTKV_NEEDS_FIXTURES();
  Rig rig("qwen3-micro.gguf", 2, /*with_cache=*/false);
  RequestMemory& mem = *rig.mem;
  mem.begin(1, Tokens{10, 11, 12, 13, 14, 15}, {});
  ASSERT_TRUE(rig.evaluate(1, {10, 11, 12, 13, 14}));
  mem.end(1);

  PromptReuse r = mem.begin(1, Tokens{10, 11, 12, 20, 21}, {});
  EXPECT_EQ(r.n_cached, 5u);
  EXPECT_EQ(r.n_common, 3u);
  EXPECT_EQ(r.n_kept, 3u);
  EXPECT_EQ(r.source, ReuseSource::Own);
  EXPECT_EQ(r.cached_at_divergence, 13);
  EXPECT_FALSE(r.state_refused);
  EXPECT_EQ(Tokens(mem.tokens(1).begin(), mem.tokens(1).end()), (Tokens{10, 11, 12}));
  EXPECT_EQ(rig.ctx->memory().seq_pos_max(1), 2);   // memory agrees with the tokens
  EXPECT_EQ(rig.ctx->memory().seq_pos_max(0), -1);  // other sequences untouched
  mem.end(1);

  // Identical prompt: the last token is dropped so that it is evaluated again.
  r = mem.begin(1, Tokens{10, 11, 12}, {});
  EXPECT_EQ(r.n_kept, 2u);
  EXPECT_EQ(rig.ctx->memory().seq_pos_max(1), 1);
  mem.end(1);

  // cache_prompt=false: nothing is kept.
  RequestPlan no_cache;
  no_cache.cache_prompt = false;
  r = mem.begin(1, Tokens{10, 11}, no_cache);
  EXPECT_EQ(r.n_kept, 0u);
  EXPECT_EQ(r.source, ReuseSource::None);
  EXPECT_TRUE(mem.tokens(1).empty());
  EXPECT_EQ(rig.ctx->memory().seq_pos_max(1), -1);
  mem.end(1);

  // Another namespace's tokens are never reused.
  mem.begin(1, Tokens{10, 11, 12}, {});
  ASSERT_TRUE(rig.evaluate(1, {10, 11, 12}));
  mem.end(1);
  RequestPlan tenant;
  tenant.cache_namespace = cache_namespace("other tenant");
  r = mem.begin(1, Tokens{10, 11, 12, 13}, tenant);
  EXPECT_EQ(r.n_kept, 0u);
  EXPECT_EQ(r.n_cached, 0u);
  EXPECT_EQ(mem.cache_namespace_of(1), tenant.cache_namespace);
}

// Logits of the last token of `tokens` evaluated from scratch in a context of its own (then
// `more` as a second batch, when given).
std::vector<float> fresh_logits(const Model& model, const Tokens& tokens, const Tokens& more = {}) {
  ContextParams cp;
  cp.n_ctx = static_cast<uint32_t>(std::max<size_t>(64, tokens.size() + more.size() + 8));
  cp.n_seq_max = 2;
  cp.n_threads = 1;
  Context ctx(model, cp);
  Batch b;
  b.add_sequence(tokens.data(), tokens.size(), 0, 0, true);
  EXPECT_EQ(ctx.decode(b), 0);
  if (!more.empty()) {
    Batch b2;
    b2.add_sequence(more.data(), more.size(), static_cast<MemoryPos>(tokens.size()), 0, true);
    EXPECT_EQ(ctx.decode(b2), 0);
  }
  return std::vector<float>(ctx.last_logits(), ctx.last_logits() + model.n_vocab());
}

TEST(RequestMemory, HybridRollsBackToTheSnapshotBeforeTheDivergence) {
  AGENTKV_NEEDS_FIXTURES();
  Rig rig("qwen35moe-micro.gguf", 1, /*with_cache=*/true);
  RequestMemory& mem = *rig.mem;
  mem.begin(0, Tokens{10, 11, 12, 13}, {});
  ASSERT_TRUE(rig.evaluate(0, {10, 11, 12, 13}));  // the end of the prompt keeps a snapshot
  ASSERT_TRUE(rig.evaluate(0, {14}, /*prompt=*/false));
  ASSERT_TRUE(rig.evaluate(0, {15}, /*prompt=*/false));
  mem.end(0);
  EXPECT_EQ(mem.counters().snapshots_taken, 1u);

  PromptReuse r = mem.begin(0, Tokens{10, 11, 12, 13, 20}, {});
  EXPECT_EQ(r.n_common, 4u);
  EXPECT_EQ(r.n_kept, 4u);
  EXPECT_EQ(r.source, ReuseSource::Snapshot);
  EXPECT_FALSE(r.state_refused);
  EXPECT_EQ(Tokens(mem.tokens(0).begin(), mem.tokens(0).end()), (Tokens{10, 11, 12, 13}));
  EXPECT_EQ(rig.ctx->memory().seq_pos_max(0), 3);

  // Evaluating the new token on the restored state gives what a fresh run split the same way
  // gives, bit for bit (one batch for the snapshotted prefix, then the token alone).
  ASSERT_TRUE(rig.evaluate(0, {20}));
  const std::vector<float> expected = fresh_logits(*rig.model, {10, 11, 12, 13}, {20});
  for (int64_t i = 0; i < rig.model->n_vocab(); ++i) ASSERT_EQ(rig.ctx->last_logits()[i], expected[i]) << i;
  mem.end(0);

  // No snapshot before position 2: start over.
  r = mem.begin(0, Tokens{10, 99}, {});
  EXPECT_EQ(r.n_kept, 0u);
  EXPECT_TRUE(r.state_refused);
  EXPECT_EQ(r.source, ReuseSource::None);
}

TEST(RequestMemory, HybridWithoutCacheReusesExtensionsButRestartsOnDivergence) {
  AGENTKV_NEEDS_FIXTURES();
  Rig rig("qwen35-micro.gguf", 1, /*with_cache=*/false);
  RequestMemory& mem = *rig.mem;
  mem.begin(0, Tokens{10, 11, 12, 13, 14}, {});
  ASSERT_TRUE(rig.evaluate(0, {10, 11, 12, 13}));
  mem.end(0);
  // An extension needs no removal: the recurrent state already holds exactly these tokens.
  PromptReuse r = mem.begin(0, Tokens{10, 11, 12, 13, 14, 15}, {});
  EXPECT_EQ(r.n_kept, 4u);
  EXPECT_FALSE(r.state_refused);
  EXPECT_EQ(rig.ctx->memory().seq_pos_max(0), 3);
  mem.end(0);
  // A divergence inside them cannot be undone in a recurrent state: start over.
  r = mem.begin(0, Tokens{10, 11, 99}, {});
  EXPECT_EQ(r.n_common, 2u);
  EXPECT_EQ(r.n_kept, 0u);
  EXPECT_TRUE(r.state_refused);
  EXPECT_TRUE(mem.tokens(0).empty());
  EXPECT_EQ(rig.ctx->memory().seq_pos_max(0), -1);
}

TEST(RequestMemory, SavedLogitsAnswerTheSamePromptWithoutEvaluation) {
  AGENTKV_NEEDS_FIXTURES();
  Rig rig("qwen3-micro.gguf", 1, /*with_cache=*/false);
  RequestMemory& mem = *rig.mem;
  mem.begin(0, Tokens{10, 11, 12}, {});
  ASSERT_TRUE(rig.evaluate(0, {10, 11, 12}));
  mem.keep_logits(0, rig.last_logits());
  ASSERT_TRUE(rig.evaluate(0, {13}, /*prompt=*/false));
  mem.end(0);

  PromptReuse r = mem.begin(0, Tokens{10, 11, 12}, {});
  EXPECT_TRUE(r.use_saved_logits);
  EXPECT_EQ(r.n_kept, 3u);
  EXPECT_EQ(rig.ctx->memory().seq_pos_max(0), 2);
  EXPECT_EQ(mem.saved_logits(0, 3).size(), static_cast<size_t>(rig.model->n_vocab()));
  mem.end(0);

  // A shorter prompt forgets the logits of the longer one.
  r = mem.begin(0, Tokens{10, 11}, {});
  EXPECT_FALSE(r.use_saved_logits);
  EXPECT_EQ(r.n_kept, 1u);
  EXPECT_TRUE(mem.saved_logits(0, 3).empty());
}

TEST(RequestMemory, PagesAnotherSequenceComputedAreAttached) {
  AGENTKV_NEEDS_FIXTURES();
  Rig rig("qwen3-micro.gguf", 2, /*with_cache=*/true, 64, 4);
  RequestMemory& mem = *rig.mem;
  const Tokens first{1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
  mem.begin(0, first, {});
  ASSERT_TRUE(rig.evaluate(0, first));
  mem.end(0);  // the tail is published too: reuse stays token-exact
  PromptReuse r = mem.begin(1, Tokens{1, 2, 3, 4, 5, 6, 7, 8, 9, 11}, {});
  EXPECT_EQ(r.source, ReuseSource::Shared);
  EXPECT_EQ(r.n_kept, 9u);
  EXPECT_EQ(rig.ctx->memory().seq_pos_max(1), 8);
  EXPECT_EQ(mem.counters().shared_attaches, 1u);
  EXPECT_EQ(mem.cached_prefix(first, 0), first.size());
  EXPECT_EQ(mem.cached_prefix(first, cache_namespace("x")), 0u);
}

// Random requests on three sequences against a reference of what each holds: after begin a
// sequence holds exactly the prompt's first n_kept tokens (memory and tokens agree), n_kept is at
// least what its own tokens and every other sequence's (same namespace, pages published) give,
// and the cache's bookkeeping holds after every operation; make_room never touches a busy
// sequence.
TEST(RequestMemory, RandomRequestsKeepWhatTheyMay) {
  AGENTKV_NEEDS_FIXTURES();
  constexpr uint32_t P = 4;
  Rig rig("qwen3-micro.gguf", 3, /*with_cache=*/true, 256, P);
  RequestMemory& mem = *rig.mem;
  PrefixCache& cache = *mem.prefix_cache();
  std::mt19937 rng(1234);
  auto pick = [&](size_t n) { return static_cast<size_t>(rng() % n); };
  const uint64_t namespaces[2] = {0, cache_namespace("tenant")};
  std::vector<bool> busy(3, false);
  std::vector<Tokens> pending(3);  // the rest of the prompt a busy sequence still evaluates
  std::vector<bool> ended_once(3, false);
  size_t attaches = 0, rooms = 0;
  for (int step = 0; step < 1500; ++step) {
    const MemorySeqId seq = static_cast<MemorySeqId>(pick(3));
    const int op = static_cast<int>(pick(10));
    if (!busy[seq] && op < 5) {
      // A prompt: another sequence's tokens (or its own) cut somewhere and extended, or new.
      Tokens prompt;
      const MemorySeqId from = static_cast<MemorySeqId>(pick(3));
      const std::span<const CacheToken> base = mem.tokens(from);
      if (!base.empty() && pick(4) != 0) prompt.assign(base.begin(), base.begin() + static_cast<std::ptrdiff_t>(1 + pick(base.size())));
      const size_t extra = 1 + pick(12);
      for (size_t i = 0; i < extra; ++i) prompt.push_back(static_cast<CacheToken>(1 + pick(50)));
      if (prompt.size() > 60) prompt.resize(60);
      RequestPlan plan;
      plan.cache_namespace = namespaces[pick(5) == 0 ? 1 : 0];
      plan.cache_prompt = pick(10) != 0;
      // What must at least be kept: the sequence's own tokens (same namespace), and each other
      // sequence's published pages (full pages while it runs; all of it once it ended).
      size_t floor = 0;
      if (plan.cache_prompt) {
        if (mem.cache_namespace_of(seq) == plan.cache_namespace)
          floor = memory::reusable_prefix(mem.tokens(seq), prompt);
        for (MemorySeqId o = 0; o < 3; ++o) {
          if (o == seq || mem.cache_namespace_of(o) != plan.cache_namespace || !ended_once[o]) continue;
          size_t common = common_prefix(mem.tokens(o), prompt);
          if (busy[o]) common = common / P * P;
          floor = std::max(floor, std::min(common, prompt.size() - 1));
        }
      }
      const PromptReuse r = mem.begin(seq, prompt, plan);
      ASSERT_LE(r.n_kept, prompt.size()) << step;
      if (!r.use_saved_logits) ASSERT_LT(r.n_kept, prompt.size()) << step;
      ASSERT_GE(r.n_kept, floor) << "step " << step << " seq " << seq << " source " << reuse_source_name(r.source);
      if (!plan.cache_prompt) ASSERT_EQ(r.n_kept, 0u);
      ASSERT_TRUE(std::equal(mem.tokens(seq).begin(), mem.tokens(seq).end(), prompt.begin())) << step;
      ASSERT_EQ(mem.tokens(seq).size(), r.n_kept) << step;
      ASSERT_EQ(rig.ctx->memory().seq_pos_max(seq), static_cast<MemoryPos>(r.n_kept) - 1) << step;
      attaches += r.source == ReuseSource::Shared;
      busy[seq] = true;
      pending[seq].assign(prompt.begin() + static_cast<std::ptrdiff_t>(r.n_kept), prompt.end());
    } else if (busy[seq] && op < 8) {
      // Evaluate the rest of the prompt (and a generated token), or end.
      if (!pending[seq].empty()) {
        const Tokens chunk = pending[seq];
        if (rig.evaluate(seq, chunk)) pending[seq].clear();
        else {  // no room: the memory frees what it may, and the request gives up
          while (mem.make_room(seq)) ++rooms;
          mem.wipe(seq);
          mem.end(seq);
          busy[seq] = false;
          pending[seq].clear();
        }
      } else if (op < 7 && mem.tokens(seq).size() < 200) {
        if (!rig.evaluate(seq, {static_cast<CacheToken>(1 + pick(50))}, /*prompt=*/false)) {
          mem.end(seq);
          busy[seq] = false;
        }
      } else {
        mem.end(seq);
        busy[seq] = false;
        ended_once[seq] = true;
      }
    } else if (op == 8) {
      std::vector<Tokens> before;
      for (MemorySeqId o = 0; o < 3; ++o) before.emplace_back(mem.tokens(o).begin(), mem.tokens(o).end());
      rooms += mem.make_room(-1);
      for (MemorySeqId o = 0; o < 3; ++o) {
        if (busy[o]) ASSERT_EQ(Tokens(mem.tokens(o).begin(), mem.tokens(o).end()), before[o]) << step;
        if (mem.tokens(o).empty()) ended_once[o] = false;
      }
    } else if (op == 9 && !busy[seq]) {
      mem.wipe(seq);
      ended_once[seq] = false;
      ASSERT_EQ(rig.ctx->memory().seq_pos_max(seq), -1);
    }
    for (MemorySeqId o = 0; o < 3; ++o)
      ASSERT_EQ(rig.ctx->memory().seq_pos_max(o), static_cast<MemoryPos>(mem.tokens(o).size()) - 1) << step;
    ASSERT_NO_THROW(cache.verify()) << step;
  }
  EXPECT_GT(attaches, 25u);  // the sequence mix exercised sharing
  RecordProperty("attaches", static_cast<int>(attaches));
  RecordProperty("make_room", static_cast<int>(rooms));
}

// Speculative passes (begin_drafts / end_drafts) against a reference of the accepted tokens: random
// passes of a next token and up to 8 drafts, of which a random prefix is accepted, leave the
// sequence holding exactly the accepted tokens, and its next logits are a plain run's bit for bit
// (batch-invariant numerics), on a dense and a hybrid model (whose state goes back and absorbs the
// accepted tokens again from the pass's recorded inputs), with and without the prefix cache.
TEST(RequestMemory, DraftPassesLeaveWhatAPlainRunLeaves) {
  AGENTKV_NEEDS_FIXTURES();
  set_batch_invariant(true);
  for (const char* gguf : {"qwen3-micro.gguf", "qwen35-micro.gguf"}) {
    for (bool with_cache : {false, true}) {
      SCOPED_TRACE(std::string(gguf) + (with_cache ? " with cache" : " without cache"));
      Rig rig(gguf, 1, with_cache, /*n_ctx=*/256);
      RequestMemory& mem = *rig.mem;
      std::mt19937 rng(7);
      Tokens accepted{10, 11, 12, 13, 14};
      mem.begin(0, accepted, {});
      ASSERT_TRUE(rig.evaluate(0, accepted));
      size_t gave_back_total = 0;
      for (int step = 0; step < 24; ++step) {
        // Tokens accepted earlier whose state went back come first, then next and the drafts.
        Tokens replay;
        const size_t held = mem.tokens(0).size();
        replay.assign(accepted.begin() + static_cast<std::ptrdiff_t>(held), accepted.end());
        const Token next = static_cast<Token>(100 + rng() % 50);
        Tokens drafts(rng() % 9);
        for (Token& d : drafts) d = static_cast<Token>(100 + rng() % 50);
        Tokens pass = replay;
        pass.push_back(next);
        pass.insert(pass.end(), drafts.begin(), drafts.end());
        mem.begin_drafts(0, pass.size());
        Batch b;
        b.add_sequence(pass.data(), pass.size(), static_cast<MemoryPos>(held), 0, true);
        ASSERT_EQ(rig.ctx->decode(b), 0);
        const size_t n_accept = drafts.empty() ? 0 : rng() % (drafts.size() + 1);
        const size_t kept = replay.size() + 1 + n_accept;
        mem.advance(0, std::span<const CacheToken>(pass).first(kept));
        accepted.push_back(next);
        accepted.insert(accepted.end(), drafts.begin(), drafts.begin() + static_cast<std::ptrdiff_t>(n_accept));
        const Tokens given_back = mem.end_drafts(0);
        gave_back_total += given_back.size();
        const Tokens held_now(mem.tokens(0).begin(), mem.tokens(0).end());
        ASSERT_EQ(Tokens(accepted.begin(), accepted.begin() + static_cast<std::ptrdiff_t>(held_now.size())), held_now)
            << step;
        ASSERT_EQ(held_now.size() + given_back.size(), accepted.size()) << step;
        ASSERT_EQ(rig.ctx->memory().seq_pos_max(0), static_cast<MemoryPos>(held_now.size()) - 1) << step;
      }
      // Neither gives tokens back: the hybrid's state absorbs the accepted ones again from the
      // pass's recorded inputs (RecurrentTape), in place of a second pass over them.
      EXPECT_EQ(gave_back_total, 0u);
      // Whatever is still to absorb, then one token: the logits a plain run of the same tokens gives.
      const size_t held = mem.tokens(0).size();
      Tokens rest(accepted.begin() + static_cast<std::ptrdiff_t>(held), accepted.end());
      rest.push_back(42);
      Batch b;
      b.add_sequence(rest.data(), rest.size(), static_cast<MemoryPos>(held), 0, true);
      ASSERT_EQ(rig.ctx->decode(b), 0);
      const Tokens prefix(accepted.begin(), accepted.begin() + static_cast<std::ptrdiff_t>(held));
      const std::vector<float> expected = fresh_logits(*rig.model, prefix, rest);
      for (int64_t i = 0; i < rig.model->n_vocab(); ++i) ASSERT_EQ(rig.ctx->last_logits()[i], expected[i]) << i;
      mem.end(0);
      if (with_cache) EXPECT_NO_THROW(mem.prefix_cache()->verify());
    }
  }
  set_batch_invariant(false);
}

}  // namespace
}  // namespace agentkv

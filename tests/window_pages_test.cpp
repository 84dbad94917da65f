// The window rows of cached pages (memory/window_pages.h, docs/memory-semantics.md §10): a property
// test of random requests — prompts cut from earlier ones at random points and extended, decodes,
// ends — run in lockstep on a sliding-window model's window memory and on its --swa-full memory
// (every row kept: the simple reference), both behind a request memory with a prefix cache, under
// batch-invariant numerics. Every prompt's last logits must be bit-equal. With room for every
// page's window rows, the window memory keeps exactly as many prompt tokens as --swa-full (it
// resumes at the divergence, never at an earlier snapshot); with room for a few pages' rows, it
// keeps at most as many, and the index's invariants (reference counts, holder membership,
// capacity) hold after every step.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "agentkv/batch.h"
#include "agentkv/context.h"
#include "agentkv/numerics.h"
#include "agentkv/request_memory.h"
#include "engine/context_impl.h"
#include "fixture_models.h"
#include "memory/page_record.h"
#include "memory/window_kv.h"
#include "request_chunks.h"

namespace agentkv {
namespace {

using Tokens = std::vector<CacheToken>;
constexpr uint32_t kPage = 4;

struct Rig {
  std::unique_ptr<Context> ctx;
  std::unique_ptr<RequestMemory> mem;
  Rig(const Model& model, bool swa_full, size_t swa_cache_bytes) {
    ContextParams cp;
    cp.n_ctx = 1024;
    cp.n_seq_max = 3;  // two requests and the cache's holder
    cp.n_threads = 1;
    cp.kv.swa_full = swa_full;
    cp.kv.swa_cache_bytes = swa_cache_bytes;
    ctx = std::make_unique<Context>(model, cp);
    RequestMemoryConfig cfg;
    cfg.n_seqs = 2;
    cfg.page_tokens = kPage;
    mem = ctx->open_request_memory(cfg);
  }
  // Decodes tokens after what seq holds, in the chunks the memory asks for; the last logits.
  std::vector<float> evaluate(MemorySeqId seq, const Tokens& tokens, bool prompt) {
    // No room: cached pages go, as the scheduler has them go.
    EXPECT_TRUE(testing_support::evaluate_in_chunks(*ctx, *mem, seq, tokens, prompt, /*make_room=*/true));
    const float* l = ctx->last_logits();
    return {l, l + ctx->model().n_vocab()};
  }
};

size_t window_bytes_per_cell(const Model& model) {
  Rig probe(model, false, 0);
  return memory::page_cell_bytes(sequence_memory(*probe.ctx).window()->kv());
}

// Returns how many requests kept fewer tokens than --swa-full did.
size_t run_random_requests(const std::string& preset, size_t cached_cells, uint32_t seed) {
  auto model = testing_support::preset_model(preset, "window-pages");
  Rig window(*model, false, cached_cells * window_bytes_per_cell(*model));
  Rig full(*model, true, 0);
  const memory::WindowKv* w = sequence_memory(*window.ctx).window();
  EXPECT_NE(w, nullptr);
  EXPECT_EQ(w->cached_cells(), cached_cells);
  std::mt19937 rng(seed);
  auto pick = [&](size_t n) { return static_cast<size_t>(rng() % n); };
  std::vector<Tokens> earlier;
  size_t fewer = 0, deep = 0;
  for (int step = 0; step < 80; ++step) {
    const auto seq = static_cast<MemorySeqId>(pick(2));
    // An earlier prompt (with its answer) cut at a random point and extended, or a new one.
    Tokens prompt;
    if (!earlier.empty() && pick(5) != 0) {
      const Tokens& base = earlier[pick(earlier.size())];
      const size_t cut = 1 + pick(base.size());
      prompt.assign(base.begin(), base.begin() + static_cast<std::ptrdiff_t>(cut));
      deep += cut > 16 && cut + 2 * memory::WindowKv::kRollback < base.size();  // far from any prompt end
    }
    const size_t extra = 1 + pick(step % 2 == 0 ? 150 : 20);
    for (size_t i = 0; i < extra; ++i) prompt.push_back(static_cast<CacheToken>(10 + pick(90)));
    if (prompt.size() > 400) prompt.erase(prompt.begin() + 300, prompt.end() - 100);
    const PromptReuse rw = window.mem->begin(seq, prompt, {});
    const PromptReuse rf = full.mem->begin(seq, prompt, {});
    if (cached_cells >= 1024) EXPECT_EQ(rw.n_kept, rf.n_kept) << "step " << step << ": resumed at a snapshot";
    EXPECT_LE(rw.n_kept, rf.n_kept) << step;
    fewer += rw.n_kept < rf.n_kept;
    Tokens answer = prompt;
    if (!rw.use_saved_logits || !rf.use_saved_logits) {
      const Tokens rest_w(prompt.begin() + static_cast<std::ptrdiff_t>(rw.n_kept), prompt.end());
      const Tokens rest_f(prompt.begin() + static_cast<std::ptrdiff_t>(rf.n_kept), prompt.end());
      const std::vector<float> lw = window.evaluate(seq, rest_w, true), lf = full.evaluate(seq, rest_f, true);
      if (!rw.use_saved_logits && !rf.use_saved_logits)
        EXPECT_EQ(std::memcmp(lw.data(), lf.data(), lw.size() * sizeof(float)), 0)
            << "step " << step << ": kept " << rw.n_kept << " (" << reuse_source_name(rw.source) << ") and " << rf.n_kept
            << " of " << prompt.size();
      // A short answer, the same on both.
      Tokens gen(1 + pick(6));
      for (CacheToken& t : gen) t = static_cast<CacheToken>(10 + pick(90));
      window.evaluate(seq, gen, false);
      full.evaluate(seq, gen, false);
      answer.insert(answer.end(), gen.begin(), gen.end());
    }
    window.mem->end(seq);
    full.mem->end(seq);
    earlier.push_back(answer);
    EXPECT_NO_THROW(window.mem->prefix_cache()->verify()) << step;
    EXPECT_EQ(window.ctx->memory().seq_pos_max(seq), static_cast<MemoryPos>(window.mem->tokens(seq).size()) - 1);
    if (testing::Test::HasFailure()) break;
  }
  EXPECT_GE(deep, 10u) << "the mix left cached prompts far from their ends";
  return fewer;
}

class WindowPages : public testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    AGENTKV_NEEDS_FIXTURES();  // the tokenizer
    set_batch_invariant(true);
  }
  void TearDown() override { set_batch_invariant(false); }
};

TEST_P(WindowPages, WithRoomForEveryPageTheWindowMemoryResumesWhereSwaFullDoes) {
  EXPECT_EQ(run_random_requests(GetParam(), 1024, 11), 0u);
}

TEST_P(WindowPages, WithRoomForAFewPagesItResumesNoLaterAndStaysExact) {
  EXPECT_GT(run_random_requests(GetParam(), 64, 12), 0u) << "the small room made some requests resume earlier";
}

INSTANTIATE_TEST_SUITE_P(Presets, WindowPages, testing::Values("gemma3-micro", "gpt-oss-micro"),
                         [](const auto& info) { return std::string(info.param) == "gemma3-micro" ? "Gemma3" : "GptOss"; });

}  // namespace
}  // namespace agentkv

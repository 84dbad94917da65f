// The prefix cache through its public interface (agentkv/prefix_cache.h), as the server uses it:
// pages and a tail computed by one context travel through a page tier to another context, which
// attaches them and then decodes bit for bit what the first one decodes; records that are not the
// page the chain expects are refused and forgotten; another salt sees nothing.
#include <gtest/gtest.h>

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "agentkv/error.h"
#include "agentkv/prefix_cache.h"
#include "agentkv/context.h"
#include "model/model.h"
#include "fixtures.h"

namespace agentkv {
namespace {

const std::string kFixtures = AGENTKV_FIXTURES_DIR;
using Tokens = std::vector<Token>;
constexpr MemorySeqId kSeq = 0;
constexpr MemorySeqId kHolder = 1;

// A tier that keeps every record in a map (what Redis or the disk would hold).
class MapTier final : public PageTier {
 public:
  void put(uint64_t hash, std::vector<uint8_t> record) override { records[hash] = std::move(record); }
  std::vector<std::optional<std::vector<uint8_t>>> get(std::span<const uint64_t> hashes) override {
    std::vector<std::optional<std::vector<uint8_t>>> out;
    for (uint64_t h : hashes) {
      auto it = records.find(h);
      out.push_back(it == records.end() ? std::nullopt : std::optional(it->second));
    }
    return out;
  }
  bool holds(uint64_t hash) const override { return records.count(hash) > 0; }
  void forget(uint64_t hash) override {
    records.erase(hash);
    ++forgotten;
  }
  std::map<uint64_t, std::vector<uint8_t>> records;
  int forgotten = 0;
};

ContextParams params() {
  ContextParams cp;
  cp.n_ctx = 256;
  cp.n_seq_max = 2;  // the sequence and the cache's holder
  cp.n_threads = 1;
  return cp;
}

PrefixCache& enable(Context& ctx) {
  PrefixCacheConfig pc;
  pc.page_tokens = 16;
  pc.holder = kHolder;
  pc.model_fingerprint = 0x1234;
  PrefixCache* cache = ctx.enable_prefix_cache(pc);
  EXPECT_NE(cache, nullptr);
  return *cache;
}

// Decodes tokens into kSeq from position p0, one batch; returns the last token's logits.
std::vector<float> decode(Context& ctx, const Tokens& tokens, MemoryPos p0) {
  Batch b;
  b.add_sequence(tokens.data(), tokens.size(), p0, kSeq, true);
  EXPECT_EQ(ctx.decode(b), 0);
  return std::vector<float>(ctx.last_logits(), ctx.last_logits() + ctx.model().n_vocab());
}

Tokens prompt_of(size_t n) {
  Tokens t;
  for (size_t i = 0; i < n; ++i) t.push_back(static_cast<Token>(3 + (i * 37) % 200));
  return t;
}

TEST(PrefixCacheTiers, PagesAndTailReachAnotherContextThroughATier) {
  AGENTKV_NEEDS_FIXTURES();
  auto model = Model::load(kFixtures + "/models/qwen3-micro.gguf");
  const Tokens prompt = prompt_of(37);  // two full pages and a tail of 5
  MapTier tier;

  Context a(*model, params());
  PrefixCache& ca = enable(a);
  ca.set_tier(&tier);
  decode(a, prompt, 0);
  PageHashes hashes;
  ca.publish(kSeq, prompt, 0, /*with_tail=*/true, hashes, 0);
  size_t sent_through = 0;
  EXPECT_EQ(ca.send_pages(prompt, 0, hashes, /*with_tail=*/true, sent_through), 3u);
  EXPECT_EQ(sent_through, 32u);
  EXPECT_EQ(ca.send_pages(prompt, 0, hashes, /*with_tail=*/true, sent_through), 0u);  // the tier holds them
  const std::vector<float> next_a = decode(a, {77}, 37);

  Context b(*model, params());
  PrefixCache& cb = enable(b);
  cb.set_tier(&tier);
  EXPECT_EQ(cb.lookup(prompt, 0, prompt.size(), {}), 0u);
  size_t told = 0;
  const TierFetch got = cb.fetch(prompt, 0, hashes, [&](size_t n) { told = n; });
  EXPECT_EQ(told, 32u);
  EXPECT_EQ(got.pages, 3u);
  EXPECT_EQ(got.kv_through, 37u);
  EXPECT_TRUE(got.refused.empty());
  EXPECT_FALSE(got.snapshot);
  EXPECT_EQ(cb.lookup(prompt, 1, prompt.size(), {}), 0u);  // another salt: nothing
  ASSERT_EQ(cb.attach(kSeq, prompt, 0, prompt.size()), 37u);
  EXPECT_EQ(b.memory().seq_pos_max(kSeq), 36);
  const std::vector<float> next_b = decode(b, {77}, 37);
  ASSERT_EQ(next_a.size(), next_b.size());
  for (size_t i = 0; i < next_a.size(); ++i) ASSERT_EQ(next_a[i], next_b[i]) << i;
  const PrefixCacheStats st = cb.stats();
  EXPECT_EQ(st.pages, 3u);
  EXPECT_GE(st.pages_in_use, 3u);
  EXPECT_EQ(cb.pages_of(kSeq).pages, 3u);
}

TEST(PrefixCacheTiers, OnlyAUnifiedKvCacheHasOne) {
  AGENTKV_NEEDS_FIXTURES();
  auto model = Model::load(kFixtures + "/models/qwen3-micro.gguf");
  ContextParams split = params();
  split.kv.unified = false;  // one stream per sequence: pages could not be shared
  Context a(*model, split);
  PrefixCacheConfig pc;
  pc.holder = kHolder;
  EXPECT_EQ(a.enable_prefix_cache(pc), nullptr);
  EXPECT_EQ(a.enable_prefix_cache(pc), nullptr);  // asked again: still none
  Context b(*model, params());
  pc.holder = 2;  // outside n_seq_max
  EXPECT_THROW(b.enable_prefix_cache(pc), Error);
  pc.holder = kHolder;
  PrefixCache* cache = b.enable_prefix_cache(pc);
  ASSERT_NE(cache, nullptr);
  EXPECT_EQ(b.enable_prefix_cache(pc), cache);  // made once
}

TEST(PrefixCacheTiers, ARecordThatIsNotTheExpectedPageIsRefusedAndForgotten) {
  AGENTKV_NEEDS_FIXTURES();
  auto model = Model::load(kFixtures + "/models/qwen3-micro.gguf");
  const Tokens prompt = prompt_of(48);  // three full pages
  MapTier tier;
  Context a(*model, params());
  PrefixCache& ca = enable(a);
  ca.set_tier(&tier);
  decode(a, prompt, 0);
  PageHashes hashes;
  ca.publish(kSeq, prompt, 0, /*with_tail=*/false, hashes, 0);
  size_t sent_through = 0;
  ASSERT_EQ(ca.send_pages(prompt, 0, hashes, false, sent_through), 3u);
  ASSERT_EQ(tier.records.size(), 3u);

  // Another prompt's first page stored under this prompt's first key: a valid record, but not
  // the page this chain expects.
  Tokens other = prompt;
  other[3] += 1;
  Context c(*model, params());
  PrefixCache& cc = enable(c);
  MapTier other_tier;
  cc.set_tier(&other_tier);
  decode(c, other, 0);
  PageHashes other_hashes;
  cc.publish(kSeq, other, 0, false, other_hashes, 0);
  size_t other_sent = 0;
  ASSERT_EQ(cc.send_pages(other, 0, {}, false, other_sent), 3u);
  MapTier first_only;
  const Tokens first_page(prompt.begin(), prompt.begin() + 16);
  // The key of the prompt's first page: the one record a fetch of its first 16 tokens adopts.
  uint64_t first_key = 0;
  for (const auto& [k, v] : tier.records) {
    first_only.records = {{k, v}};
    Context try_ctx(*model, params());
    PrefixCache& t = enable(try_ctx);
    t.set_tier(&first_only);
    if (t.fetch(first_page, 0, {}, nullptr).pages == 1) first_key = k;
  }
  ASSERT_NE(first_key, 0u);
  uint64_t other_first_key = 0;
  for (const auto& [k, v] : other_tier.records)
    if (!tier.records.count(k)) {
      first_only.records = {{k, v}};
      Context try_ctx(*model, params());
      PrefixCache& t = enable(try_ctx);
      t.set_tier(&first_only);
      if (t.fetch(Tokens(other.begin(), other.begin() + 16), 0, {}, nullptr).pages == 1) other_first_key = k;
    }
  ASSERT_NE(other_first_key, 0u);
  tier.records[first_key] = other_tier.records[other_first_key];

  Context b(*model, params());
  PrefixCache& cb = enable(b);
  cb.set_tier(&tier);
  TierFetch got = cb.fetch(prompt, 0, {}, nullptr);
  EXPECT_EQ(got.pages, 0u);
  ASSERT_EQ(got.refused.size(), 1u);  // the first refused record ends the chain
  EXPECT_NE(got.refused[0].find("not the page this prompt expects"), std::string::npos) << got.refused[0];
  EXPECT_EQ(tier.forgotten, 1);
  EXPECT_FALSE(tier.holds(first_key));
  EXPECT_EQ(cb.lookup(prompt, 0, prompt.size(), {}), 0u);

  // A damaged record (one flipped bit) is refused as damaged.
  tier.records[first_key] = other_tier.records[other_first_key];
  tier.records[first_key][tier.records[first_key].size() / 2] ^= 0x10;
  got = cb.fetch(prompt, 0, {}, nullptr);
  EXPECT_EQ(got.pages, 0u);
  ASSERT_EQ(got.refused.size(), 1u);
  EXPECT_NE(got.refused[0].find("damaged"), std::string::npos) << got.refused[0];
}

}  // namespace
}  // namespace agentkv

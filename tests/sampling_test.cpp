// Sampler chain semantics (llama.cpp's) on hand-made distributions, and stop-string streaming.
#include "agentkv/sampling.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "agentkv/error.h"

namespace agentkv {
namespace {

std::vector<float> logits_from_probs(const std::vector<double>& probs) {
  std::vector<float> l;
  for (double p : probs) l.push_back(static_cast<float>(std::log(p)));
  return l;
}

SamplerParams plain(float temperature = 1.0f) {
  SamplerParams p;
  p.temperature = temperature;
  p.top_k = 0;
  p.top_p = 1.0f;
  p.min_p = 0.0f;
  return p;
}

std::map<int32_t, int> histogram(Sampler& s, const std::vector<float>& logits, int draws,
                                 const std::vector<int32_t>& history = {}) {
  std::map<int32_t, int> h;
  for (int i = 0; i < draws; ++i) ++h[s.sample(logits.data(), static_cast<int64_t>(logits.size()), history)];
  return h;
}

TEST(Sampler, ArgmaxTiesGoToLowestId) {
  const std::vector<float> l = {0.5f, 2.0f, -1.0f, 2.0f, 1.0f};
  EXPECT_EQ(argmax_token(l.data(), 5), 1);
  Sampler greedy(plain(0.0f));
  EXPECT_EQ(greedy.sample(l.data(), 5), 1);
  Sampler negative_temp(plain(-1.0f));
  EXPECT_EQ(negative_temp.sample(l.data(), 5), 1);
}

TEST(Sampler, GreedyIgnoresSeedAndTruncation) {
  std::vector<float> l(1000);
  for (size_t i = 0; i < l.size(); ++i) l[i] = std::sin(static_cast<float>(i) * 0.37f);
  const int32_t best = argmax_token(l.data(), 1000);
  for (uint32_t seed : {0u, 1u, 12345u}) {
    SamplerParams p;  // defaults: top_k 40, top_p 0.95, min_p 0.05
    p.temperature = 0.0f;
    p.seed = seed;
    Sampler s(p);
    for (int i = 0; i < 5; ++i) EXPECT_EQ(s.sample(l.data(), 1000), best);
  }
}

TEST(Sampler, TopKOneEqualsGreedy) {
  const auto l = logits_from_probs({0.2, 0.25, 0.25, 0.3});
  SamplerParams p = plain(1.5f);
  p.top_k = 1;
  Sampler s(p);
  const auto h = histogram(s, l, 300);
  ASSERT_EQ(h.size(), 1u);
  EXPECT_EQ(h.begin()->first, 3);
}

TEST(Sampler, SameSeedSameSequenceOtherSeedOtherSequence) {
  std::vector<float> l(64);
  for (size_t i = 0; i < l.size(); ++i) l[i] = 0.05f * static_cast<float>(i % 7);
  auto run = [&](uint32_t seed) {
    SamplerParams p = plain(1.0f);
    p.seed = seed;
    Sampler s(p);
    std::vector<int32_t> seq;
    for (int i = 0; i < 200; ++i) seq.push_back(s.sample(l.data(), 64));
    return seq;
  };
  EXPECT_EQ(run(7), run(7));
  EXPECT_NE(run(7), run(8));
  // reseed restarts the sequence
  SamplerParams p = plain(1.0f);
  p.seed = 7;
  Sampler s(p);
  const int32_t first = s.sample(l.data(), 64);
  s.sample(l.data(), 64);
  s.reseed(7);
  EXPECT_EQ(s.sample(l.data(), 64), first);
}

TEST(Sampler, DrawsFollowTheDistribution) {
  const auto l = logits_from_probs({0.1, 0.2, 0.3, 0.4});
  Sampler s(plain(1.0f));
  const int draws = 8000;
  const auto h = histogram(s, l, draws);
  const double expected[] = {0.1, 0.2, 0.3, 0.4};
  for (int id = 0; id < 4; ++id) {
    const double sd = std::sqrt(draws * expected[id] * (1 - expected[id]));
    EXPECT_NEAR(h.count(id) ? h.at(id) : 0, draws * expected[id], 5 * sd) << id;
  }
}

TEST(Sampler, TopPKeepsSmallestPrefixReachingP) {
  // cumulative 0.5, 0.8, 0.9, ...: top_p 0.75 keeps {0, 1}; top_p 0.85 keeps {0, 1, 2}.
  const auto l = logits_from_probs({0.5, 0.3, 0.1, 0.05, 0.05});
  for (auto [top_p, allowed] : std::vector<std::pair<float, std::set<int32_t>>>{
           {0.75f, {0, 1}}, {0.85f, {0, 1, 2}}, {0.3f, {0}}}) {
    SamplerParams p = plain(1.0f);
    p.top_p = top_p;
    p.seed = 3;
    Sampler s(p);
    const auto h = histogram(s, l, 2000);
    for (const auto& [id, count] : h) EXPECT_TRUE(allowed.count(id)) << "top_p " << top_p << " drew " << id;
    EXPECT_EQ(h.size(), allowed.size()) << "every allowed token should appear";
  }
  // Renormalised over the kept set: 0.5/0.8 vs 0.3/0.8.
  SamplerParams p = plain(1.0f);
  p.top_p = 0.75f;
  Sampler s(p);
  const auto h = histogram(s, l, 4000);
  EXPECT_NEAR(h.at(0) / 4000.0, 0.625, 0.04);
}

TEST(Sampler, TopPOverLargeVocabularyWithoutTopK) {
  // 50k tokens, most of the mass on 100 of them: the kept set is found without sorting it all.
  std::vector<float> l(50000, -5.0f);
  for (int i = 0; i < 100; ++i) l[static_cast<size_t>(i * 499)] = 5.0f;
  SamplerParams p = plain(1.0f);
  p.top_p = 0.9f;
  Sampler s(p);
  for (int i = 0; i < 300; ++i) {
    const int32_t t = s.sample(l.data(), 50000);
    EXPECT_EQ(t % 499, 0) << t;
  }
}

TEST(Sampler, MinPKeepsTokensAboveFractionOfBest) {
  // min_p 0.3 of the best (0.4) = 0.12: {0.4, 0.3, 0.15} stay, {0.1, 0.05} go.
  const auto l = logits_from_probs({0.3, 0.4, 0.1, 0.15, 0.05});
  SamplerParams p = plain(1.0f);
  p.min_p = 0.3f;
  Sampler s(p);
  const auto h = histogram(s, l, 2000);
  const std::set<int32_t> allowed = {0, 1, 3};
  for (const auto& [id, count] : h) EXPECT_TRUE(allowed.count(id)) << "drew " << id;
  EXPECT_EQ(h.size(), 3u);
}

TEST(Sampler, TopKKeepsKBest) {
  const auto l = logits_from_probs({0.05, 0.3, 0.1, 0.35, 0.2});
  SamplerParams p = plain(1.0f);
  p.top_k = 2;
  Sampler s(p);
  const auto h = histogram(s, l, 1000);
  for (const auto& [id, count] : h) EXPECT_TRUE(id == 1 || id == 3) << "drew " << id;
}

TEST(Sampler, FiltersApplyBeforeTemperature) {
  // llama.cpp's order: top-p / min-p see the untempered distribution. With temperature 5 the
  // tempered distribution is nearly flat, yet min_p 0.3 still removes tokens 2..4.
  const auto l = logits_from_probs({0.6, 0.3, 0.05, 0.03, 0.02});
  SamplerParams p = plain(5.0f);
  p.min_p = 0.3f;
  Sampler s(p);
  const auto h = histogram(s, l, 1000);
  for (const auto& [id, count] : h) EXPECT_LT(id, 2) << "drew " << id;
  EXPECT_EQ(h.size(), 2u);
}

TEST(Sampler, RepetitionPenaltyDividesPositiveMultipliesNegative) {
  SamplerParams p = plain(0.0f);
  p.repeat_penalty = 1.5f;
  Sampler s(p);
  const std::vector<float> pos = {2.0f, 1.9f};  // 2.0 / 1.5 = 1.33 < 1.9
  EXPECT_EQ(s.sample(pos.data(), 2, std::vector<int32_t>{0}), 1);
  EXPECT_EQ(s.sample(pos.data(), 2, std::vector<int32_t>{}), 0);
  const std::vector<float> neg = {-1.0f, -1.2f};  // -1.0 * 1.5 = -1.5 < -1.2
  EXPECT_EQ(s.sample(neg.data(), 2, std::vector<int32_t>{0}), 1);
  // a token repeated many times is penalised once by repeat_penalty
  const std::vector<float> close = {2.0f, 1.3f};  // 2.0 / 1.5 = 1.33 > 1.3 however often 0 appears
  EXPECT_EQ(s.sample(close.data(), 2, std::vector<int32_t>{0, 0, 0, 0}), 0);
  // ids outside the vocabulary are ignored
  EXPECT_EQ(s.sample(pos.data(), 2, std::vector<int32_t>{7, -1}), 0);
}

TEST(Sampler, FrequencyAndPresencePenalties) {
  const std::vector<float> l = {3.0f, 2.0f};
  const std::vector<int32_t> history = {0, 0, 0};
  SamplerParams p = plain(0.0f);
  p.frequency_penalty = 0.4f;  // 3 - 3*0.4 = 1.8 < 2
  EXPECT_EQ(Sampler(p).sample(l.data(), 2, history), 1);
  p.frequency_penalty = 0.3f;  // 3 - 0.9 = 2.1 > 2
  EXPECT_EQ(Sampler(p).sample(l.data(), 2, history), 0);
  p.frequency_penalty = 0.0f;
  p.presence_penalty = 1.5f;  // 3 - 1.5 = 1.5 < 2, once, whatever the count
  EXPECT_EQ(Sampler(p).sample(l.data(), 2, history), 1);
  p.presence_penalty = 0.9f;
  EXPECT_EQ(Sampler(p).sample(l.data(), 2, history), 0);
}

TEST(Sampler, PenaltyWindowIsTheLastNTokens) {
  const std::vector<float> l = {2.0f, 1.9f, 0.0f};
  SamplerParams p = plain(0.0f);
  p.repeat_penalty = 2.0f;
  p.repeat_last_n = 3;
  const std::vector<int32_t> old_repeat = {0, 2, 2, 2};
  EXPECT_EQ(Sampler(p).sample(l.data(), 3, old_repeat), 0) << "token 0 is outside the window";
  p.repeat_last_n = 4;
  EXPECT_EQ(Sampler(p).sample(l.data(), 3, old_repeat), 1);
  p.repeat_last_n = -1;
  EXPECT_EQ(Sampler(p).sample(l.data(), 3, old_repeat), 1);
  p.repeat_last_n = 0;
  EXPECT_EQ(Sampler(p).sample(l.data(), 3, old_repeat), 0);
}

TEST(Sampler, PenaltiesExcludeTokensFromSampling) {
  // With a strong presence penalty the repeated tokens effectively never come back.
  const auto l = logits_from_probs({0.4, 0.4, 0.2});
  SamplerParams p = plain(1.0f);
  p.presence_penalty = 30.0f;
  Sampler s(p);
  const auto h = histogram(s, l, 500, {0, 1});
  ASSERT_EQ(h.size(), 1u);
  EXPECT_EQ(h.begin()->first, 2);
}

TEST(Sampler, RefusesBadInput) {
  SamplerParams p;
  p.temperature = NAN;
  EXPECT_THROW(Sampler{p}, Error);
  p = SamplerParams{};
  p.repeat_penalty = 0.0f;
  EXPECT_THROW(Sampler{p}, Error);
  p = SamplerParams{};
  p.repeat_last_n = -2;
  EXPECT_THROW(Sampler{p}, Error);
  Sampler s{SamplerParams{}};
  EXPECT_THROW(s.sample(nullptr, 10), Error);
  const float one = 1.0f;
  EXPECT_THROW(s.sample(&one, 0), Error);
  EXPECT_EQ(s.sample(&one, 1), 0);
}

TEST(Sampler, NanAndMinusInfinityLogitsAreNeverDrawn) {
  const std::vector<float> l = {NAN, -INFINITY, 0.0f, 0.1f};
  Sampler s(plain(1.0f));
  const auto h = histogram(s, l, 500);
  for (const auto& [id, count] : h) EXPECT_GE(id, 2);
}

// ---------------------------------------------------------------------------------------------

std::string stream(StopChecker& sc, const std::vector<std::string>& pieces) {
  std::string out;
  for (const auto& p : pieces) out += sc.push(p).text;
  if (!sc.stopped()) out += sc.flush();
  return out;
}

TEST(StopChecker, StopStringSplitAcrossTokens) {
  StopChecker sc({"</s>"});
  EXPECT_EQ(sc.push("Hello <").text, "Hello ");  // "<" may start the stop string
  EXPECT_EQ(sc.push("/").text, "");
  const auto step = sc.push("s> tail");
  EXPECT_TRUE(step.stopped);
  EXPECT_EQ(step.text, "");
  EXPECT_EQ(sc.matched(), "</s>");
  EXPECT_EQ(sc.text(), "Hello ");
  EXPECT_TRUE(sc.push("more").stopped);
  EXPECT_EQ(sc.push("more").text, "");
}

TEST(StopChecker, FalseStartIsReleased) {
  StopChecker sc({"END"});
  EXPECT_EQ(sc.push("The E").text, "The ");
  EXPECT_EQ(sc.push("N").text, "");
  EXPECT_EQ(sc.push("d of it").text, "ENd of it");
  EXPECT_FALSE(sc.stopped());
  EXPECT_EQ(sc.flush(), "");
}

TEST(StopChecker, EarliestStopWinsAndTextBeforeItIsReleased) {
  StopChecker sc({"bar", "foo"});
  const auto step = sc.push("xfoobar");
  EXPECT_TRUE(step.stopped);
  EXPECT_EQ(step.text, "x");
  EXPECT_EQ(sc.matched(), "foo");
}

TEST(StopChecker, StopInsideOneTokenAfterHeldText) {
  StopChecker sc({"###"});
  EXPECT_EQ(sc.push("a#").text, "a");
  const auto step = sc.push("#b## c### d");
  EXPECT_TRUE(step.stopped);
  EXPECT_EQ(step.text, "##b## c");
  EXPECT_EQ(sc.text(), "a##b## c");
}

TEST(StopChecker, FlushReleasesHeldText) {
  StopChecker sc({"###"});
  EXPECT_EQ(sc.push("a##").text, "a");
  EXPECT_EQ(sc.flush(), "##");
}

TEST(StopChecker, IncompleteUtf8IsHeldBack) {
  StopChecker sc({});
  EXPECT_EQ(sc.push("caf\xC3").text, "caf");
  EXPECT_EQ(sc.push("\xA9!").text, "\xC3\xA9!");
  EXPECT_EQ(sc.push("\xF0\x9F").text, "");
  EXPECT_EQ(sc.push("\x98\x80").text, "\xF0\x9F\x98\x80");
}

TEST(StopChecker, StreamedTextEqualsTextUpToStop) {
  const std::string full = "one two <|im_end|> three";
  for (size_t cut = 1; cut < full.size(); ++cut) {
    StopChecker sc({"<|im_end|>", "<|endoftext|>"});
    const std::string out = stream(sc, {full.substr(0, cut), full.substr(cut)});
    EXPECT_EQ(out, "one two ") << "cut " << cut;
    EXPECT_TRUE(sc.stopped());
  }
  StopChecker none({"zzz"});
  EXPECT_EQ(stream(none, {"ab", "cz", "z"}), "abczz");
}

}  // namespace
}  // namespace agentkv

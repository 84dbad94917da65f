// The reference file and the divergence figures of `agentkv bench quality`
// (tools/quality_reference.h, tools/quality_divergence.h): a written reference reads back as
// written, a mismatched or damaged one is refused, and a run equal to its reference has KL 0.
#include "tools/quality_reference.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>

#include <gtest/gtest.h>

#include "agentkv/error.h"
#include "tools/quality_divergence.h"

using namespace agentkv;
using namespace agentkv::tools;

namespace {

constexpr int64_t kVocab = 300;

std::vector<float> random_logits(uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> n(0, 3);
  std::vector<float> v(kVocab);
  for (float& x : v) x = n(rng);
  return v;
}

std::vector<uint16_t> f16_logprobs(const std::vector<float>& logits) {
  std::vector<uint16_t> out(logits.size());
  logprobs_f16(logits.data(), kVocab, out.data());
  return out;
}

ReferenceHeader header() {
  ReferenceHeader h;
  h.n_vocab = kVocab;
  h.fingerprint = {0x1234, 0x5678, 64, 32, 3};
  h.type_k = GgmlType::F16;
  h.type_v = GgmlType::Q8_0;
  h.tokens = {5, 7, 11};
  return h;
}

std::string temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() / ("agentkv-quality-test-" + name)).string();
}

std::string write_reference(const std::string& name) {
  const std::string path = temp_path(name);
  ReferenceWriter w(path, header());
  for (uint32_t i = 0; i < 3; ++i) w.append(f16_logprobs(random_logits(i)).data());
  w.finish(12.5);
  return path;
}

TEST(QualityReference, ReadsBackWhatWasWritten) {
  const std::string path = write_reference("roundtrip.ref");
  ReferenceReader r(path);
  EXPECT_EQ(r.header().n_vocab, kVocab);
  EXPECT_TRUE(r.header().fingerprint == header().fingerprint);
  EXPECT_EQ(r.header().tokens, header().tokens);
  EXPECT_EQ(r.header().type_v, GgmlType::Q8_0);
  EXPECT_EQ(r.header().ppl, 12.5);
  EXPECT_NO_THROW(r.require_matches(header().fingerprint, kVocab, header().tokens));
  std::vector<uint16_t> row(kVocab);
  for (uint32_t i = 0; i < 3; ++i) {
    r.read(row.data());
    EXPECT_EQ(row, f16_logprobs(random_logits(i)));
  }
  EXPECT_THROW(r.read(row.data()), Error);
  std::filesystem::remove(path);
}

TEST(QualityReference, RefusesWhatDoesNotMatch) {
  const std::string path = write_reference("mismatch.ref");
  const ReferenceReader r(path);
  auto refused = [&](ReferenceFingerprint f, uint32_t n_vocab, std::vector<Token> tokens, const std::string& says) {
    try {
      r.require_matches(f, n_vocab, tokens);
      ADD_FAILURE() << "accepted; expected: " << says;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(says), std::string::npos) << e.what();
    }
  };
  const ReferenceFingerprint f = header().fingerprint;
  refused({1, f.text, f.n_ctx, f.stride, f.n_windows}, kVocab, header().tokens, "another model");
  refused(f, kVocab + 1, header().tokens, "vocabulary entries");
  refused({f.model, 1, f.n_ctx, f.stride, f.n_windows}, kVocab, header().tokens, "another text file");
  refused({f.model, f.text, 128, 64, f.n_windows}, kVocab, header().tokens,
          "was made with -c 64 --stride 32, 3 windows, this run uses -c 128 --stride 64, 3 windows");
  refused(f, kVocab, {5, 7, 12}, "other tokens");
  std::filesystem::remove(path);
}

TEST(QualityReference, RefusesDamagedFiles) {
  const std::string path = write_reference("damaged.ref");
  std::filesystem::resize_file(path, std::filesystem::file_size(path) - 1);
  EXPECT_THROW(ReferenceReader{path}, Error);
  {
    ReferenceWriter unfinished(path, header());  // destroyed before finish(): ppl stays NaN
    unfinished.append(f16_logprobs(random_logits(0)).data());
  }
  EXPECT_THROW(ReferenceReader{path}, Error);
  {
    ReferenceWriter short_one(path, header());
    EXPECT_THROW(short_one.finish(1.0), Error);  // 0 of 3 positions
  }
  EXPECT_THROW(ReferenceReader{temp_path("absent.ref")}, Error);
  std::filesystem::remove(path);
}

TEST(QualityDivergence, IdenticalRowsGiveExactlyZero) {
  const auto ref = f16_logprobs(random_logits(7));
  const PositionDivergence d = compare_positions(ref.data(), ref.data(), kVocab);
  EXPECT_EQ(d.kl, 0.0);
  EXPECT_TRUE(d.top1_equal);
  EXPECT_EQ(d.abs_dlogprob_top1, 0.0);
}

TEST(QualityDivergence, PerturbedRowsGiveTheKlOfTheirDistributions) {
  const auto logits = random_logits(7);
  auto perturbed = logits;
  std::mt19937 rng(1);
  std::normal_distribution<float> n(0, 0.05f);
  for (float& x : perturbed) x += n(rng);
  const PositionDivergence d =
      compare_positions(f16_logprobs(logits).data(), f16_logprobs(perturbed).data(), kVocab);
  // The exact KL in double precision; f16 storage keeps it to a small relative error.
  double lse_p = 0, lse_q = 0;
  for (int64_t v = 0; v < kVocab; ++v) lse_p += std::exp(double(logits[v])), lse_q += std::exp(double(perturbed[v]));
  lse_p = std::log(lse_p), lse_q = std::log(lse_q);
  double kl = 0;
  for (int64_t v = 0; v < kVocab; ++v)
    kl += std::exp(logits[v] - lse_p) * ((logits[v] - lse_p) - (perturbed[v] - lse_q));
  EXPECT_GT(d.kl, 0);
  EXPECT_NEAR(d.kl, kl, 0.1 * kl);
}

TEST(QualityDivergence, StatsSummarizePositions) {
  DivergenceStats s;
  for (int i = 1; i <= 100; ++i) s.add({i / 100.0, i % 4 != 0, 0.5});
  EXPECT_EQ(s.n_positions(), 100);
  EXPECT_NEAR(s.mean_kl(), 0.505, 1e-12);
  EXPECT_DOUBLE_EQ(s.kl_quantile(0.99), 0.99);
  EXPECT_DOUBLE_EQ(s.max_kl(), 1.0);
  EXPECT_DOUBLE_EQ(s.top1_agreement(), 0.75);
  EXPECT_DOUBLE_EQ(s.mean_abs_dlogprob_top1(), 0.5);
}

}  // namespace

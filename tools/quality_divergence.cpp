#include "tools/quality_divergence.h"

#include <algorithm>
#include <cmath>

#include "agentkv/fp16.h"
#include "agentkv/log_sum_exp.h"

namespace agentkv::tools {

float logprobs_f16(const float* logits, int64_t n_vocab, uint16_t* out) {
  const float lse = logits_log_sum_exp(logits, n_vocab);
  for (int64_t v = 0; v < n_vocab; ++v) out[v] = fp32_to_fp16(logits[v] - lse);
  return lse;
}

namespace {

// A stored row back to log-probabilities, renormalized: f16 rounding leaves sum(p) slightly off 1,
// and a proper distribution on both sides keeps KL >= 0 and its rounding error second-order.
void normalized_logprobs(const uint16_t* f16, int64_t n, std::vector<float>& out) {
  out.resize(static_cast<size_t>(n));
  for (int64_t v = 0; v < n; ++v) out[v] = fp16_to_fp32(f16[v]);
  const float lse = logits_log_sum_exp(out.data(), n);
  for (float& x : out) x -= lse;
}

}  // namespace

PositionDivergence compare_positions(const uint16_t* ref_f16, const uint16_t* run_f16, int64_t n_vocab) {
  thread_local std::vector<float> ref, run;
  normalized_logprobs(ref_f16, n_vocab, ref);
  normalized_logprobs(run_f16, n_vocab, run);
  PositionDivergence d;
  for (int64_t v = 0; v < n_vocab; ++v) d.kl += std::exp(double(ref[v])) * (double(ref[v]) - double(run[v]));
  d.kl = std::max(0.0, d.kl);  // summation rounding of a near-zero divergence
  const auto top = std::max_element(ref.begin(), ref.end()) - ref.begin();  // first of equal maxima
  d.top1_equal = std::max_element(run.begin(), run.end()) - run.begin() == top;
  d.abs_dlogprob_top1 = std::fabs(double(run[top]) - double(ref[top]));
  return d;
}

void DivergenceStats::add(const PositionDivergence& d) {
  kl_.push_back(d.kl);
  top1_equal_ += d.top1_equal;
  sum_abs_dlogprob_ += d.abs_dlogprob_top1;
}

double DivergenceStats::mean_kl() const {
  double s = 0;
  for (double x : kl_) s += x;
  return kl_.empty() ? 0 : s / kl_.size();
}

double DivergenceStats::kl_quantile(double q) const {
  if (kl_.empty()) return 0;
  std::vector<double> sorted = kl_;
  std::sort(sorted.begin(), sorted.end());
  const auto rank = static_cast<size_t>(std::ceil(q * sorted.size()));
  return sorted[std::clamp<size_t>(rank, 1, sorted.size()) - 1];
}

double DivergenceStats::max_kl() const { return kl_.empty() ? 0 : *std::max_element(kl_.begin(), kl_.end()); }

double DivergenceStats::top1_agreement() const { return kl_.empty() ? 0 : double(top1_equal_) / kl_.size(); }

double DivergenceStats::mean_abs_dlogprob_top1() const { return kl_.empty() ? 0 : sum_abs_dlogprob_ / kl_.size(); }

}  // namespace agentkv::tools

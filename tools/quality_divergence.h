// How far one run's next-token distributions are from a reference run's, position by position
// (`agentkv bench quality`): KL(ref || run), top-1 agreement and the log-probability change of
// the reference's top token. Both sides are compared at the reference file's precision (f16
// log-probabilities, renormalized), so a run identical to its reference gives exactly KL 0.
#pragma once
#include <cstdint>
#include <vector>

namespace agentkv::tools {

// Log-softmax of a logits row rounded to f16, into out[0, n_vocab). Returns the row's
// log-sum-exp, from which the caller takes a token's exact (f32) log-probability.
float logprobs_f16(const float* logits, int64_t n_vocab, uint16_t* out);

struct PositionDivergence {
  double kl = 0;                 // sum_v p_ref(v) (log p_ref(v) - log p_run(v)), in nats
  bool top1_equal = true;        // argmax equal (ties: the lowest id)
  double abs_dlogprob_top1 = 0;  // |log p_run(t) - log p_ref(t)| for t = argmax of the reference
};
PositionDivergence compare_positions(const uint16_t* ref_f16, const uint16_t* run_f16, int64_t n_vocab);

class DivergenceStats {
 public:
  void add(const PositionDivergence& d);
  int64_t n_positions() const { return static_cast<int64_t>(kl_.size()); }
  double mean_kl() const;
  double kl_quantile(double q) const;  // nearest rank; q = 0.99 is the p99
  double max_kl() const;
  double top1_agreement() const;       // fraction in [0, 1]
  double mean_abs_dlogprob_top1() const;

 private:
  std::vector<double> kl_;
  int64_t top1_equal_ = 0;
  double sum_abs_dlogprob_ = 0;
};

}  // namespace agentkv::tools

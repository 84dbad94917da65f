// How many drafts a slot tries at its next step (speculative decoding, docs/speculative.md): the
// number that maximizes the tokens expected per millisecond of the batch. A pass of the token and
// k drafts yields 1 + a + a² + … + a^k tokens when each draft is accepted with probability a (the
// slot's recent passes, returning to a prior while it does not draft, so that a stretch of misses
// does not end drafting for good), and costs what a batch of that many rows has cost lately
// (PassCost: measured per row count on generation-only batches). A model whose batch of 17 rows
// costs 11 one-row steps (a 4 M-parameter model, compute-bound) drafts little or nothing; one whose
// decode is bound by memory bandwidth, where 17 rows cost little more than one, drafts long.
#pragma once
#include <algorithm>
#include <array>
#include <cstddef>

namespace agentkv::server {

// What a generation batch of r rows has cost lately (ms), by r.
class PassCost {
 public:
  static constexpr size_t kMaxRows = 64;
  void record(size_t rows, double ms) {
    if (rows == 0 || rows > kMaxRows || !(ms > 0.0)) return;
    double& m = ms_[rows - 1];
    m = m > 0.0 ? 0.8 * m + 0.2 * ms : ms;
  }
  // Measured, else interpolated between the nearest measured row counts; beyond the largest
  // measured one, each row is assumed to cost 2 % of a one-row step (a bandwidth-bound decode):
  // optimistic, so that longer passes get tried, and measured.
  double ms(size_t rows) const {
    const size_t i = std::clamp<size_t>(rows, 1, kMaxRows) - 1;
    if (ms_[i] > 0.0) return ms_[i];
    const double one = ms_[0] > 0.0 ? ms_[0] : 1.0;
    size_t lo = i, hi = i + 1;  // lo: one past the nearest measured below; hi: the nearest above
    while (lo > 0 && ms_[lo - 1] <= 0.0) --lo;
    while (hi < kMaxRows && ms_[hi] <= 0.0) ++hi;
    const bool below = lo > 0, above = hi < kMaxRows;
    if (!below && !above) return one * (1.0 + 0.02 * static_cast<double>(i));
    if (!below) return ms_[hi];
    const double at_lo = ms_[lo - 1];
    if (!above) return at_lo + 0.02 * one * static_cast<double>(i - (lo - 1));
    return at_lo + (ms_[hi] - at_lo) * static_cast<double>(i - (lo - 1)) / static_cast<double>(hi - (lo - 1));
  }

 private:
  std::array<double, kMaxRows> ms_{};  // ms_[r - 1]: r rows; 0: not measured
};

class DraftPolicy {
 public:
  void start(size_t n_max) {
    n_max_ = n_max;
    accepted_ = trials_ = 0.0;
  }
  // The drafts to try this step (0: none) when the batch already holds `rows` rows besides this
  // slot's token; each draft costs draft_ms to make (a draft model's step; 0 for a lookup).
  size_t next(size_t rows, const PassCost& cost, double draft_ms = 0.0) {
    if (n_max_ == 0) return 0;
    const double a = acceptance();
    const double base = cost.ms(rows + 1);
    size_t best = 0;
    double best_rate = 1.0 / base, expected = 1.0, power = 1.0;
    for (size_t k = 1; k <= n_max_; ++k) {
      power *= a;
      expected += power;
      const double rate = expected / (cost.ms(rows + 1 + k) + draft_ms * static_cast<double>(k));
      if (rate > best_rate * 1.02) best = k, best_rate = rate;  // a longer pass must be worth 2 % more
    }
    // Not drafting, the evidence fades (~30 steps) and the estimate returns to the prior: a
    // stretch of misses does not end drafting for good.
    if (best == 0) accepted_ *= 0.97, trials_ *= 0.97;
    return best;
  }
  // A pass tried `tried` drafts and kept `kept`: kept successes and, if it stopped early, one
  // failure; earlier passes weigh 0.6 each step back, so a few misses shorten the drafts.
  void record(size_t tried, size_t kept) {
    if (tried == 0) return;
    accepted_ = 0.6 * accepted_ + static_cast<double>(kept);
    trials_ = 0.6 * trials_ + static_cast<double>(kept + (kept < tried ? 1 : 0));
  }
  // Of a pass's drafts, how likely the next is accepted: a prior of 0.75 worth half a draft.
  double acceptance() const { return (accepted_ + 0.375) / (trials_ + 0.5); }

 private:
  size_t n_max_ = 0;
  double accepted_ = 0.0, trials_ = 0.0;  // decayed counts of the recent passes
};

}  // namespace agentkv::server

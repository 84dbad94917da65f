// How many drafts a slot tries at its next step (speculative decoding, docs/speculative.md): the
// request's n_max at first; after a pass that kept every draft, as many again (up to n_max);
// after a partial one, one more than it kept; after passes that kept none, fewer, then a pause
// that doubles with each further miss (up to 16 steps), so that a stretch where the context's
// n-grams do not predict the model costs little beyond the drafts' rows.
#pragma once
#include <algorithm>
#include <cstddef>

namespace agentkv::server {

class DraftPolicy {
 public:
  void start(size_t n_max) {
    n_max_ = n_max;
    k_ = n_max;
    misses_ = 0;
    pause_ = 0;
  }
  // Drafts this step may try (0: none); counts a paused step.
  size_t next() {
    if (pause_ > 0) {
      --pause_;
      return 0;
    }
    return std::min(k_, n_max_);
  }
  // A pass tried `tried` drafts and kept `kept` of them.
  void record(size_t tried, size_t kept) {
    if (tried == 0) return;
    if (kept == tried) {
      k_ = std::min(n_max_, std::max<size_t>(1, 2 * k_));
      misses_ = 0;
    } else if (kept > 0) {
      k_ = std::min(n_max_, kept + 1);
      misses_ = 0;
    } else {
      k_ = std::max<size_t>(1, k_ / 2);
      ++misses_;
      if (misses_ >= 2) pause_ = std::min<size_t>(16, size_t{1} << std::min<size_t>(misses_ - 2, 4));
    }
  }

 private:
  size_t n_max_ = 0;
  size_t k_ = 0;
  size_t misses_ = 0;
  size_t pause_ = 0;
};

}  // namespace agentkv::server

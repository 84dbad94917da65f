#include "agentkv/token_match.h"

#include <algorithm>

namespace agentkv {

std::optional<size_t> after_latest_occurrence(std::span<const int32_t> text, std::span<const int32_t> run) {
  const size_t n = run.size();
  if (n == 0 || text.size() <= n) return std::nullopt;
  for (size_t start = text.size() - n; start-- > 0;)
    if (std::equal(run.begin(), run.end(), text.begin() + static_cast<std::ptrdiff_t>(start))) return start + n;
  return std::nullopt;
}

}  // namespace agentkv

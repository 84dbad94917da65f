// Where a run of tokens last occurred in a text with something after it: the lookup behind n-gram
// drafts (src/engine/speculative.cpp, in a request's own context) and the memory's recall
// (src/memory/request_memory.cpp, in other sessions' sequences).
#pragma once
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>

namespace agentkv {

// The index just after the latest occurrence of `run` in `text` that at least one token follows
// (so a run that is text's own end finds an earlier occurrence, not itself); nullopt when none
// (or run is empty).
std::optional<size_t> after_latest_occurrence(std::span<const int32_t> text, std::span<const int32_t> run);

}  // namespace agentkv

#include "memory/pos_multiset.h"

#include <algorithm>
#include <cassert>
#include <iterator>

namespace agentkv::memory {

uint32_t PosMultiset::count(Pos p) const {
  auto it = runs_.upper_bound(p);
  if (it == runs_.begin()) return 0;
  --it;
  return p < it->second.end ? it->second.count : 0;
}

uint32_t PosMultiset::max_count(Pos p0, Pos p1) const {
  uint32_t most = 0;
  if (p0 >= p1) return 0;
  auto it = runs_.upper_bound(p0);
  if (it != runs_.begin()) --it;
  for (; it != runs_.end() && it->first < p1; ++it)
    if (it->second.end > p0) most = std::max(most, it->second.count);
  return most;
}

void PosMultiset::merge_around(Map::iterator it) {
  if (it != runs_.begin()) {
    auto prev = std::prev(it);
    if (prev->second.end == it->first && prev->second.count == it->second.count) {
      prev->second.end = it->second.end;
      runs_.erase(it);
      it = prev;
    }
  }
  auto next = std::next(it);
  if (next != runs_.end() && it->second.end == next->first && next->second.count == it->second.count) {
    it->second.end = next->second.end;
    runs_.erase(next);
  }
}

void PosMultiset::change(Pos p, int delta) {
  auto after = runs_.upper_bound(p);  // first run starting above p
  auto run = runs_.end();             // the run containing p, if any
  if (after != runs_.begin()) {
    auto prev = std::prev(after);
    if (p < prev->second.end) run = prev;
  }
  const uint32_t d = static_cast<uint32_t>(delta > 0 ? delta : -delta);

  if (run == runs_.end()) {  // p is absent: a new single-position run
    assert(delta > 0);
    if (after != runs_.begin()) {
      auto prev = std::prev(after);
      if (prev->second.end == p && prev->second.count == d) {  // appending: extend in place
        prev->second.end = p + 1;
        merge_around(prev);
        return;
      }
    }
    merge_around(runs_.emplace_hint(after, p, Run{p + 1, d}));
    return;
  }

  const Pos start = run->first, end = run->second.end;
  const uint32_t count = run->second.count;
  assert(delta > 0 || count >= d);
  const uint32_t new_count = delta > 0 ? count + d : count - d;

  if (start == p && new_count == 0) {  // the run loses its first position
    if (p + 1 == end) {
      runs_.erase(run);
    } else {  // re-key the node instead of allocating a new one
      auto node = runs_.extract(run);
      node.key() = p + 1;
      runs_.insert(after, std::move(node));
    }
    return;
  }
  // Split [start, end) into [start, p) count, [p, p+1) new_count, [p+1, end) count.
  if (p + 1 < end) runs_.emplace_hint(std::next(run), p + 1, Run{end, count});
  if (start < p) {
    run->second.end = p;
    if (new_count == 0) return;
    merge_around(runs_.emplace_hint(std::next(run), p, Run{p + 1, new_count}));
    return;
  }
  run->second = Run{p + 1, new_count};  // start == p: the node becomes p's part
  merge_around(run);
}

void PosMultiset::add_range(Pos p0, Pos p1) {
  if (p0 >= p1) return;
#ifndef NDEBUG
  auto it = runs_.lower_bound(p0);
  assert(it == runs_.end() || it->first >= p1);
  assert(it == runs_.begin() || std::prev(it)->second.end <= p0);
#endif
  merge_around(runs_.emplace(p0, Run{p1, 1}).first);
}

}  // namespace agentkv::memory

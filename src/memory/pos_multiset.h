// A multiset of positions stored as runs: maximal intervals of consecutive positions that all
// have the same multiplicity. A sequence's cells usually hold consecutive positions once each, so
// a whole sequence is one run: appending a token extends it in place, min/max are O(log runs), and
// inserting a range of L positions at once (fake prefix) is O(log runs), not L tree nodes.
#pragma once
#include <cstddef>
#include <cstdint>
#include <map>

#include "memory/ubatch.h"

namespace agentkv::memory {

class PosMultiset {
 public:
  bool empty() const { return runs_.empty(); }
  // Smallest / largest position present; -1 when empty.
  Pos min() const { return runs_.empty() ? -1 : runs_.begin()->first; }
  Pos max() const { return runs_.empty() ? -1 : runs_.rbegin()->second.end - 1; }
  // Multiplicity of p (0 when absent).
  uint32_t count(Pos p) const;
  // The largest multiplicity of a position in [p0, p1) (0: none there): O(log runs + runs in range).
  uint32_t max_count(Pos p0, Pos p1) const;
  // Number of runs (for tests: a dense sequence is one run).
  size_t n_runs() const { return runs_.size(); }
  // Positions counted with their multiplicity (the cells holding them): O(runs).
  uint64_t size() const {
    uint64_t n = 0;
    for (const auto& [start, run] : runs_) n += static_cast<uint64_t>(run.end - start) * run.count;
    return n;
  }

  void add(Pos p) { change(p, +1); }
  // p must be present.
  void remove(Pos p) { change(p, -1); }
  // Adds every position of [p0, p1) once; the range must not hold any position yet.
  void add_range(Pos p0, Pos p1);
  void clear() { runs_.clear(); }

 private:
  struct Run {
    Pos end;          // one past the last position of the run
    uint32_t count;   // multiplicity of every position in [start, end)
  };
  using Map = std::map<Pos, Run>;  // run start -> run

  void change(Pos p, int delta);
  // Joins run `it` with its neighbours where they touch and have the same count.
  void merge_around(Map::iterator it);

  Map runs_;
};

}  // namespace agentkv::memory

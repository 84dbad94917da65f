// PosMultiset (the run-length position index of KvCells) against std::multiset over random
// operation sequences, plus the run counts that make it cheap.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <set>
#include <string>

#include "memory/pos_multiset.h"

namespace agentkv::memory {
namespace {

// Runs of equal multiplicity over consecutive positions, computed from the reference.
size_t reference_runs(const std::multiset<Pos>& ref) {
  size_t runs = 0;
  Pos prev = -2;
  size_t prev_count = 0;
  for (auto it = ref.begin(); it != ref.end(); it = ref.upper_bound(*it)) {
    const size_t c = ref.count(*it);
    if (!(*it == prev + 1 && c == prev_count)) ++runs;
    prev = *it;
    prev_count = c;
  }
  return runs;
}

TEST(PosMultiset, RandomOperationsMatchStdMultiset) {
  std::mt19937 rng(20261130);
  for (int round = 0; round < 200; ++round) {
    PosMultiset m;
    std::multiset<Pos> ref;
    const Pos span = 4 + static_cast<Pos>(rng() % 60);
    std::string trace;
    for (int step = 0; step < 300; ++step) {
      const int op = static_cast<int>(rng() % 10);
      if (op < 5 || ref.empty()) {
        const Pos p = static_cast<Pos>(rng() % span);
        m.add(p);
        ref.insert(p);
        trace += " +" + std::to_string(p);
      } else if (op < 9) {
        auto it = ref.begin();
        std::advance(it, rng() % ref.size());
        const Pos p = *it;
        m.remove(p);
        ref.erase(it);
        trace += " -" + std::to_string(p);
      } else {
        // A range above everything present (add_range's precondition).
        const Pos p0 = (ref.empty() ? 0 : *ref.rbegin() + 1) + static_cast<Pos>(rng() % 3);
        const Pos p1 = p0 + static_cast<Pos>(rng() % 5);
        m.add_range(p0, p1);
        for (Pos p = p0; p < p1; ++p) ref.insert(p);
        trace += " [" + std::to_string(p0) + "," + std::to_string(p1) + ")";
      }
      ASSERT_EQ(m.empty(), ref.empty()) << trace;
      ASSERT_EQ(m.min(), ref.empty() ? -1 : *ref.begin()) << trace;
      ASSERT_EQ(m.max(), ref.empty() ? -1 : *ref.rbegin()) << trace;
      ASSERT_EQ(m.n_runs(), reference_runs(ref)) << trace;  // runs are always maximal
      for (Pos p = -1; p <= span + 10; ++p) ASSERT_EQ(m.count(p), ref.count(p)) << "pos " << p << trace;
      const Pos q0 = static_cast<Pos>(rng() % (span + 8)) - 2, q1 = q0 + static_cast<Pos>(rng() % 12);
      size_t most = 0;
      for (Pos p = q0; p < q1; ++p) most = std::max(most, ref.count(p));
      ASSERT_EQ(m.max_count(q0, q1), most) << "[" << q0 << "," << q1 << ")" << trace;
    }
  }
}

TEST(PosMultiset, DenseSequenceIsOneRun) {
  PosMultiset m;
  for (Pos p = 0; p < 10000; ++p) m.add(p);
  EXPECT_EQ(m.n_runs(), 1u);
  m.add_range(10000, 50000);
  EXPECT_EQ(m.n_runs(), 1u);
  EXPECT_EQ(m.max(), 49999);
  for (Pos p = 0; p < 100; ++p) m.remove(p);  // removing from the front re-keys the run
  EXPECT_EQ(m.n_runs(), 1u);
  EXPECT_EQ(m.min(), 100);
  m.remove(300);  // a hole splits it
  EXPECT_EQ(m.n_runs(), 2u);
  m.add(300);
  EXPECT_EQ(m.n_runs(), 1u);
  m.add(300);  // a duplicate: three runs (count 1, 2, 1)
  EXPECT_EQ(m.n_runs(), 3u);
  EXPECT_EQ(m.count(300), 2u);
  m.clear();
  EXPECT_TRUE(m.empty());
  EXPECT_EQ(m.min(), -1);
  EXPECT_EQ(m.max(), -1);
}

}  // namespace
}  // namespace agentkv::memory

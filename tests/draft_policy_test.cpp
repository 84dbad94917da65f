// How many drafts a slot tries (server/draft_policy.h): none where a batch's rows cost what they
// would one by one (a compute-bound model), long passes where rows are nearly free and drafts are
// accepted, and little where they are always wrong (what always-wrong drafts cost); the row-cost
// table interpolates between measured row counts.
#include <gtest/gtest.h>

#include "server/draft_policy.h"

namespace agentkv::server {
namespace {

PassCost costs(double one, double per_row) {
  PassCost c;
  for (size_t r = 1; r <= 17; ++r) c.record(r, one + per_row * static_cast<double>(r - 1));
  return c;
}

TEST(DraftPolicy, ComputeBoundModelsDoNotDraft) {
  const PassCost linear = costs(1.0, 1.0);  // 17 rows cost 17 steps
  DraftPolicy p;
  p.start(16);
  for (int step = 0; step < 50; ++step) {
    EXPECT_EQ(p.next(0, linear), 0u);
    p.record(0, 0);
  }
}

TEST(DraftPolicy, BandwidthBoundModelsDraftLongWhileDraftsHold) {
  const PassCost flat = costs(10.0, 0.2);  // 17 rows cost 1.32 steps
  DraftPolicy p;
  p.start(16);
  size_t k = 0;
  for (int step = 0; step < 20; ++step) {
    k = p.next(0, flat);
    p.record(k, k);
  }
  EXPECT_EQ(k, 16u);
  // Always wrong: the acceptance estimate falls, and with it the drafts tried per step.
  size_t drafted = 0, late = 0;
  for (int step = 0; step < 200; ++step) {
    const size_t n = p.next(0, flat);
    drafted += n;
    if (step >= 100) late += n;
    p.record(n, 0);
  }
  EXPECT_LE(drafted, 300u);  // a few long passes while the evidence of the good stretch fades ...
  EXPECT_LE(late, 100u);     // ... then one draft a step at most: 2 % of a step where rows cost 2 %
}

TEST(DraftPolicy, PassCostInterpolatesAndIsOptimisticBeyondItsMeasures) {
  PassCost c;
  EXPECT_DOUBLE_EQ(c.ms(5), 1.08);  // nothing measured: 2 % a row over a unit step
  c.record(1, 2.0);
  c.record(5, 6.0);
  EXPECT_DOUBLE_EQ(c.ms(3), 4.0);
  EXPECT_DOUBLE_EQ(c.ms(7), 6.0 + 2 * 0.04);
  c.record(5, 16.0);  // moving average: 0.8 · 6 + 0.2 · 16
  EXPECT_DOUBLE_EQ(c.ms(5), 8.0);
}

}  // namespace
}  // namespace agentkv::server

#include "agentkv/op_profile.h"

#include <chrono>
#include <thread>

#include <gtest/gtest.h>

namespace agentkv::op_profile {
namespace {

void busy_for(std::chrono::milliseconds d) { std::this_thread::sleep_for(d); }

struct Enabled {
  Enabled() { set_enabled(true), reset(); }
  ~Enabled() { set_enabled(false), reset(); }
};

TEST(OpProfile, DisabledScopesRecordNothing) {
  set_enabled(false);
  reset();
  {
    Scope s(Kind::kMatmul);
    busy_for(std::chrono::milliseconds(5));
  }
  EXPECT_EQ(totals()[static_cast<int>(Kind::kMatmul)], 0.0);
}

TEST(OpProfile, InnerScopePausesTheOuterOne) {
  Enabled on;
  const auto t0 = std::chrono::steady_clock::now();
  {
    Scope outer(Kind::kRecurrent);
    busy_for(std::chrono::milliseconds(20));
    {
      Scope inner(Kind::kMatmul);
      busy_for(std::chrono::milliseconds(40));
    }
    busy_for(std::chrono::milliseconds(20));
  }
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const Totals t = totals();
  const double recurrent = t[static_cast<int>(Kind::kRecurrent)], matmul = t[static_cast<int>(Kind::kMatmul)];
  EXPECT_GE(matmul, 0.040);
  EXPECT_GE(recurrent, 0.040);
  EXPECT_LT(recurrent, 0.040 + 0.5 * 0.040) << "the outer scope must not count the inner one's time";
  EXPECT_LE(recurrent + matmul, wall + 1e-6) << "kinds are exclusive: they add up to at most the wall time";
  EXPECT_EQ(t[static_cast<int>(Kind::kAttention)], 0.0);
}

TEST(OpProfile, ResetClearsAndOtherThreadsAdd) {
  Enabled on;
  std::thread worker([] {
    Scope s(Kind::kAttention);
    busy_for(std::chrono::milliseconds(10));
  });
  worker.join();
  EXPECT_GE(totals()[static_cast<int>(Kind::kAttention)], 0.010);
  reset();
  EXPECT_EQ(totals()[static_cast<int>(Kind::kAttention)], 0.0);
}

}  // namespace
}  // namespace agentkv::op_profile

#include "agentkv/op_profile.h"

#include <atomic>
#include <chrono>

namespace agentkv::op_profile {
namespace {

std::atomic<bool> g_enabled{false};
std::array<std::atomic<int64_t>, kNumKinds> g_total_ns{};
thread_local Scope* t_innermost = nullptr;

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

void add(Kind kind, int64_t ns) { g_total_ns[static_cast<int>(kind)].fetch_add(ns, std::memory_order_relaxed); }

}  // namespace

const char* kind_name(Kind kind) {
  switch (kind) {
    case Kind::kMatmul: return "matmul";
    case Kind::kAttention: return "attention";
    case Kind::kRecurrent: return "recurrent";
    default: return "?";
  }
}

void set_enabled(bool on) { g_enabled.store(on, std::memory_order_relaxed); }
bool enabled() { return g_enabled.load(std::memory_order_relaxed); }

Totals totals() {
  Totals t{};
  for (int k = 0; k < kNumKinds; ++k) t[k] = g_total_ns[k].load(std::memory_order_relaxed) * 1e-9;
  return t;
}

void reset() {
  for (auto& ns : g_total_ns) ns.store(0, std::memory_order_relaxed);
}

Scope::Scope(Kind kind) : kind_(kind) {
  if (!enabled()) return;
  active_ = true;
  start_ns_ = now_ns();
  outer_ = t_innermost;
  if (outer_) add(outer_->kind_, start_ns_ - outer_->start_ns_);  // the outer scope pauses
  t_innermost = this;
}

Scope::~Scope() {
  if (!active_) return;
  const int64_t end = now_ns();
  add(kind_, end - start_ns_);
  t_innermost = outer_;
  if (outer_) outer_->start_ns_ = end;  // and resumes
}

}  // namespace agentkv::op_profile

// Where forward-pass time goes, by kind of operation (matmul, attention, recurrent state update),
// for `agentkv bench --split`. Off by default: a disabled scope costs one relaxed atomic load.
// Scopes are exclusive: when a scope opens inside another (e.g. a matmul inside a recurrent
// layer's scope), the outer one stops counting until the inner one closes, so the kinds add up
// to no more than the wall time. Only the thread that opens a scope is timed; kernels run their
// thread-pool work synchronously inside it, so that is the operation's wall time.
#pragma once
#include <array>
#include <cstdint>

namespace agentkv::op_profile {

enum class Kind : int { kMatmul = 0, kAttention, kRecurrent, kCount };
constexpr int kNumKinds = static_cast<int>(Kind::kCount);
const char* kind_name(Kind kind);

void set_enabled(bool on);
bool enabled();

// Seconds per kind accumulated (by all threads) since the last reset.
using Totals = std::array<double, kNumKinds>;
Totals totals();
void reset();

class Scope {
 public:
  explicit Scope(Kind kind);
  ~Scope();
  Scope(const Scope&) = delete;
  Scope& operator=(const Scope&) = delete;

 private:
  bool active_ = false;
  Kind kind_;
  Scope* outer_ = nullptr;
  int64_t start_ns_ = 0;
};

}  // namespace agentkv::op_profile

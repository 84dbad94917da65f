// The names of the context-shift eviction policies (agentkv/retention.h has what each does): a
// header of its own so that request parsing names them without the engine.
#pragma once
#include <cstdint>
#include <optional>
#include <string>

namespace agentkv {

enum class EvictPolicy { Positional, Sinks, KeyDiff, SnapKV };
const char* evict_policy_name(EvictPolicy p);
std::optional<EvictPolicy> parse_evict_policy(const std::string& name);
inline constexpr const char* kEvictPolicyNames = "positional, sinks, keydiff, snapkv";
// The observation window the server records for snapkv (SnapKV's default is 32 queries).
inline constexpr uint32_t kSnapKvWindow = 32;

}  // namespace agentkv

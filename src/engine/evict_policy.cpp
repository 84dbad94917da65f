#include "agentkv/evict_policy.h"

namespace agentkv {

const char* evict_policy_name(EvictPolicy p) {
  switch (p) {
    case EvictPolicy::Positional: return "positional";
    case EvictPolicy::Sinks: return "sinks";
    case EvictPolicy::KeyDiff: return "keydiff";
    case EvictPolicy::SnapKV: return "snapkv";
  }
  return "?";
}

std::optional<EvictPolicy> parse_evict_policy(const std::string& name) {
  for (EvictPolicy p : {EvictPolicy::Positional, EvictPolicy::Sinks, EvictPolicy::KeyDiff, EvictPolicy::SnapKV})
    if (name == evict_policy_name(p)) return p;
  return std::nullopt;
}

}  // namespace agentkv

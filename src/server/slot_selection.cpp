#include "server/slot_selection.h"

#include "agentkv/request_memory.h"

namespace agentkv::server {

const char* slot_reason_name(SlotReason r) {
  switch (r) {
    case SlotReason::None: return "none";
    case SlotReason::Requested: return "id_slot";
    case SlotReason::Session: return "session";
    case SlotReason::Prefix: return "prefix";
    case SlotReason::LeastRecentlyUsed: return "lru";
  }
  return "none";
}

namespace {
double similarity(const SlotCandidate& s, std::span<const Token> prompt) {
  if (prompt.empty()) return 0.0;
  return static_cast<double>(common_prefix(s.cached, prompt)) / static_cast<double>(prompt.size());
}
}  // namespace

SlotChoice choose_slot(std::span<const SlotCandidate> slots, const SlotRequest& req, double similarity_threshold) {
  auto pinned = [&](const SlotCandidate& s, SlotReason why) {
    SlotChoice c;
    if (s.idle) c = {s.id, why, similarity(s, req.prompt)};
    return c;
  };
  if (req.id_slot >= 0) {
    for (const auto& s : slots)
      if (s.id == req.id_slot) return pinned(s, SlotReason::Requested);
    return {};
  }
  if (!req.session_id.empty()) {
    for (const auto& s : slots)
      if (s.session_id == req.session_id) return pinned(s, SlotReason::Session);
  }

  bool any_unbound_idle = false;
  for (const auto& s : slots) any_unbound_idle |= s.idle && s.session_id.empty();
  auto eligible = [&](const SlotCandidate& s) { return s.idle && (!any_unbound_idle || s.session_id.empty()); };

  SlotChoice best;
  for (const auto& s : slots) {
    if (!eligible(s)) continue;
    const double sim = similarity(s, req.prompt);
    if (sim > similarity_threshold && sim > best.similarity) best = {s.id, SlotReason::Prefix, sim};
  }
  if (best.slot >= 0) return best;

  const SlotCandidate* lru = nullptr;
  for (const auto& s : slots)
    if (eligible(s) && (!lru || s.last_used < lru->last_used)) lru = &s;
  if (lru) return {lru->id, SlotReason::LeastRecentlyUsed, similarity(*lru, req.prompt)};
  return {};
}

}  // namespace agentkv::server

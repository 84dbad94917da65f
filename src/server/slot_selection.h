// Which slot serves a new request. Order of rules:
//   1. an explicit id_slot: that slot, once it is idle;
//   2. a session_id already bound to a slot: that slot, once it is idle;
//   3. among idle slots (those bound to no session first, so that one conversation's cache is
//      not overwritten by another while free slots exist): the one whose cached tokens share the
//      largest fraction of the new prompt, if that fraction exceeds the similarity threshold
//      (llama-server's --slot-prompt-similarity, 0.10);
//   4. otherwise the least recently used idle slot.
// No slot (-1) means the request waits in the queue.
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "agentkv/tokenizer.h"

namespace agentkv::server {

struct SlotCandidate {
  int id = 0;
  bool idle = true;
  std::span<const Token> cached;
  uint64_t last_used = 0;   // larger = used more recently
  std::string session_id;   // session bound to this slot, "" if none
};

struct SlotRequest {
  std::span<const Token> prompt;
  int id_slot = -1;
  std::string session_id;
};

enum class SlotReason { None, Requested, Session, Prefix, LeastRecentlyUsed };
const char* slot_reason_name(SlotReason r);

struct SlotChoice {
  int slot = -1;  // -1: wait
  SlotReason reason = SlotReason::None;
  double similarity = 0.0;  // common prefix / prompt length for the chosen slot
};

SlotChoice choose_slot(std::span<const SlotCandidate> slots, const SlotRequest& req, double similarity_threshold);

}  // namespace agentkv::server

// Slot choice (id_slot, session, prefix similarity, LRU), the common prefix it measures, and base64.
// What the memory keeps of a prompt is tests/request_memory_test.cpp's.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "agentkv/error.h"
#include "agentkv/request_memory.h"
#include "server/base64.h"
#include "server/slot_selection.h"

namespace agentkv::server {
namespace {

using Tokens = std::vector<Token>;

TEST(PromptReuse, CommonPrefix) {
  EXPECT_EQ(common_prefix(Tokens{}, Tokens{1, 2}), 0u);
  EXPECT_EQ(common_prefix(Tokens{1, 2, 3}, Tokens{1, 2, 4}), 2u);
  EXPECT_EQ(common_prefix(Tokens{1, 2}, Tokens{1, 2, 3}), 2u);
  EXPECT_EQ(common_prefix(Tokens{1, 2, 3}, Tokens{1, 2}), 2u);
  EXPECT_EQ(common_prefix(Tokens{5}, Tokens{6}), 0u);
}

TEST(Base64, Rfc4648Vectors) {
  const std::vector<std::pair<std::string, std::string>> vectors = {
      {"", ""}, {"f", "Zg=="}, {"fo", "Zm8="}, {"foo", "Zm9v"}, {"foob", "Zm9vYg=="}, {"fooba", "Zm9vYmE="},
      {"foobar", "Zm9vYmFy"}};
  for (const auto& [plain, encoded] : vectors) {
    const std::vector<uint8_t> bytes(plain.begin(), plain.end());
    EXPECT_EQ(base64_encode(bytes), encoded);
    EXPECT_EQ(base64_decode(encoded, "test"), bytes);
  }
  EXPECT_THROW(base64_decode("Zm9", "test"), Error);
  EXPECT_THROW(base64_decode("Zm9v!A==", "test"), Error);
  EXPECT_THROW(base64_decode("Zg==Zg==", "test"), Error);
}

std::vector<SlotCandidate> three_slots(const Tokens& a, const Tokens& b, const Tokens& c) {
  static Tokens store[3];
  store[0] = a;
  store[1] = b;
  store[2] = c;
  return {{0, true, store[0], 5, ""}, {1, true, store[1], 3, ""}, {2, true, store[2], 7, ""}};
}

TEST(SlotChoice, PrefersTheLongestSharedPrefixAboveTheThreshold) {
  auto slots = three_slots({1, 2, 3}, {1, 2, 3, 4, 5}, {9});
  const Tokens prompt{1, 2, 3, 4, 6};
  SlotChoice c = choose_slot(slots, {prompt, -1, ""}, 0.10);
  EXPECT_EQ(c.slot, 1);
  EXPECT_EQ(c.reason, SlotReason::Prefix);
  EXPECT_DOUBLE_EQ(c.similarity, 0.8);
  // Below the threshold the least recently used idle slot wins.
  c = choose_slot(slots, {prompt, -1, ""}, 0.90);
  EXPECT_EQ(c.slot, 1);  // last_used 3 is the oldest
  EXPECT_EQ(c.reason, SlotReason::LeastRecentlyUsed);
  slots[1].idle = false;
  c = choose_slot(slots, {prompt, -1, ""}, 0.10);
  EXPECT_EQ(c.slot, 0);
  EXPECT_EQ(c.reason, SlotReason::Prefix);
  c = choose_slot(slots, {Tokens{7, 7}, -1, ""}, 0.10);
  EXPECT_EQ(c.slot, 0);  // no prefix anywhere: LRU among idle (0 used at 5, 2 at 7)
  EXPECT_EQ(c.reason, SlotReason::LeastRecentlyUsed);
}

TEST(SlotChoice, ExplicitSlotWaitsUntilIdle) {
  auto slots = three_slots({1}, {1}, {1});
  EXPECT_EQ(choose_slot(slots, {Tokens{1}, 2, ""}, 0.1).slot, 2);
  EXPECT_EQ(choose_slot(slots, {Tokens{1}, 2, ""}, 0.1).reason, SlotReason::Requested);
  slots[2].idle = false;
  EXPECT_EQ(choose_slot(slots, {Tokens{1}, 2, ""}, 0.1).slot, -1);
  slots[0].idle = slots[1].idle = false;
  EXPECT_EQ(choose_slot(slots, {Tokens{1}, -1, ""}, 0.1).slot, -1);  // nothing idle: queue
}

TEST(SlotChoice, SessionsStayOnTheirSlotAndOthersAvoidBoundSlots) {
  auto slots = three_slots({1, 2, 3}, {5}, {6});
  slots[0].session_id = "alice";
  // A request of another conversation with the same prefix does not take alice's slot...
  SlotChoice c = choose_slot(slots, {Tokens{1, 2, 3, 4}, -1, ""}, 0.10);
  EXPECT_NE(c.slot, 0);
  // ...alice gets her slot back even though another slot is older...
  c = choose_slot(slots, {Tokens{8}, -1, "alice"}, 0.10);
  EXPECT_EQ(c.slot, 0);
  EXPECT_EQ(c.reason, SlotReason::Session);
  // ...and waits for it while it is busy.
  slots[0].idle = false;
  EXPECT_EQ(choose_slot(slots, {Tokens{8}, -1, "alice"}, 0.10).slot, -1);
  // A new session takes an unbound slot; when all idle slots are bound, the LRU one is taken.
  slots[0].idle = true;
  slots[1].session_id = "bob";
  slots[2].session_id = "carol";
  c = choose_slot(slots, {Tokens{8}, -1, "dave"}, 0.10);
  EXPECT_EQ(c.slot, 1);
  EXPECT_EQ(c.reason, SlotReason::LeastRecentlyUsed);
}

}  // namespace
}  // namespace agentkv::server

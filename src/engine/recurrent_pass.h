// A speculative pass over a hybrid model's sequence: its recurrent state cannot drop the rejected
// drafts' suffix, so the pass begins by capturing the state and arming the sequence's tape
// (memory/recurrent_tape.h), and ends by keeping the state after the accepted tokens — as it is
// when the pass's every token was accepted, else the captured state with the accepted tokens'
// recurrence replayed from the tape (no second pass over them).
#pragma once
#include <cstddef>

#include "agentkv/context.h"
#include "agentkv/seq_snapshot.h"

namespace agentkv {

// Captures seq's recurrent state and arms its tape; returns the capture for end_recurrent_pass.
SeqSnapshot begin_recurrent_pass(Context& ctx, MemorySeqId seq);
// seq keeps `accepted` of the tokens the pass evaluated (their K/V rows are the caller's to cut):
// true once its recurrent state is the one after them; false when the tape cannot replay them and
// the state is back at the pass's start (the caller evaluates them again). Disarms the tape.
bool end_recurrent_pass(Context& ctx, MemorySeqId seq, const SeqSnapshot& before, size_t accepted);

}  // namespace agentkv

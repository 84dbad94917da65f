// Test support: a request's tokens decoded as the scheduler decodes them — a prompt in the chunks
// its request memory asks for (snapshot points cut them), generated tokens one at a time — each
// chunk told to the memory (RequestMemory::advance).
#pragma once
#include <algorithm>
#include <span>

#include "agentkv/batch.h"
#include "agentkv/context.h"
#include "agentkv/request_memory.h"

namespace agentkv::testing_support {

// Decodes `tokens` after what seq holds. No room: with make_room, the memory frees what it may
// (cached pages first, as the scheduler has it) and the chunk is tried again; false when nothing
// more can go (that chunk was not absorbed).
inline bool evaluate_in_chunks(Context& ctx, RequestMemory& mem, MemorySeqId seq, std::span<const CacheToken> tokens,
                               bool prompt, bool make_room = false) {
  size_t done = 0;
  while (done < tokens.size()) {
    const size_t at = mem.tokens(seq).size();
    const size_t take = prompt ? std::max<size_t>(1, mem.prompt_chunk(seq, at, tokens.size() - done)) : 1;
    Batch b;
    b.add_sequence(tokens.data() + done, take, static_cast<MemoryPos>(at), seq, true);
    while (ctx.decode(b) != 0)
      if (!make_room || !mem.make_room(seq)) return false;
    mem.advance(seq, tokens.subspan(done, take));
    done += take;
  }
  return true;
}

}  // namespace agentkv::testing_support
